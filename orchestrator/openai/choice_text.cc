// choice_text.cc - incremental detokenization with stop strings.
#include "orchestrator/openai/choice_text.h"

#include <algorithm>

namespace rlrun::orchestrator::openai {

size_t incomplete_utf8_tail(std::string_view text) {
  // Walk back over at most 3 continuation bytes to the lead byte; the tail is incomplete when the
  // lead announces more bytes than follow it.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

ChoiceText::ChoiceText(const engine::Tokenizer& tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  for (const std::string& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

bool ChoiceText::append(std::span<const int32_t> ids, std::span<const float> logprobs) {
  if (stopped_ || ids.empty()) return stopped_;
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
  engine::DecodeOptions options;
  options.skip_special_tokens = true;  // the stop token (<|im_end|>) is in ids, not in the text
  options.lossy_utf8 = false;          // a character split across tokens completes later
  const size_t before = text_.size();
  // Decoded whole each time: a token's text may depend on its neighbours (byte fallback, spaces).
  // Ids the tokenizer does not know (a model's embedding rows past its vocabulary) have no text,
  // as in HF tokenizers' decode; they stay in ids().
  std::vector<int32_t> known;
  known.reserve(ids_.size());
  for (int32_t id : ids_)
    if (tokenizer_.id_to_token(id)) known.push_back(id);
  Result<std::string> text = tokenizer_.decode(known, options);
  if (!text.ok()) {
    // Bytes that are no UTF-8 and never will be (a stray continuation byte): U+FFFD for them, as
    // the whole answer would be decoded at the end. The text must not depend on how the tokens
    // were chunked on their way here.
    options.lossy_utf8 = true;
    text = tokenizer_.decode(known, options);
  }
  if (text.ok()) text_ = std::move(*text);
  if (stop_.empty()) return false;
  // A stop string may straddle the old end: search from longest_stop_ - 1 bytes before it.
  const size_t from = before >= longest_stop_ ? before - longest_stop_ + 1 : 0;
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, text_.find(s, std::min(from, text_.size())));
  if (cut == std::string::npos) return false;
  text_.resize(cut);
  sent_ = std::min(sent_, cut);
  stopped_ = true;
  return true;
}

std::string ChoiceText::take_delta(bool final) {
  size_t end = text_.size();
  if (!final && !stopped_) {
    end -= incomplete_utf8_tail(text_);
    // A trailing U+FFFD of a lossy decode may be a character the next token completes: held back.
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    while (end >= kReplacement.size() && std::string_view(text_).substr(end - kReplacement.size(), kReplacement.size()) == kReplacement)
      end -= kReplacement.size();
    // Held back: the longest suffix that is a prefix of some stop string.
    size_t hold = 0;
    for (const std::string& s : stop_) {
      for (size_t k = std::min(s.size() - 1, end); k > hold; --k) {
        if (text_.compare(end - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    end -= hold;
  }
  if (end <= sent_) return {};
  std::string delta = text_.substr(sent_, end - sent_);
  sent_ = end;
  return delta;
}

}  // namespace rlrun::orchestrator::openai
