// tokenizer.cc - Tokenizer: loading, the encode pipeline (added tokens -> normalize ->
// pre-tokenize -> BPE with a word cache) and decoding.
#include "engine/tokenizer/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/file_io.h"
#include "common/observe/log.h"
#include "engine/tokenizer/internal.h"

namespace rlrun::engine {
namespace {

// A piece of the input: an added token (id >= 0) or text still to tokenize (id == -1).
struct Segment {
  size_t start, end;
  int32_t id;
};

// Added-token matching, as HF AddedVocabulary::find_matches: leftmost-longest matches; a
// single_word token must not touch word characters; lstrip/rstrip swallow adjacent whitespace.
void find_added_tokens(std::string_view text, const std::vector<const AddedToken*>& tokens,
                       const std::array<bool, 256>& first_bytes, std::vector<Segment>* out) {
  size_t start_offset = 0, pos = 0;
  while (pos < text.size() && !tokens.empty()) {
    if (!first_bytes[static_cast<uint8_t>(text[pos])]) { ++pos; continue; }
    const AddedToken* best = nullptr;
    for (const AddedToken* t : tokens) {  // sorted longest first: the first hit is the longest
      if (text.compare(pos, t->content.size(), t->content) == 0) { best = t; break; }
    }
    if (best == nullptr) { ++pos; continue; }
    size_t start = pos, stop = pos + best->content.size();
    pos = stop;  // a discarded match is still consumed, as an Aho-Corasick iterator does
    if (best->single_word) {
      size_t i = stop;
      bool start_ok = start == 0 || !is_word_char(last_code_point(text, start));
      bool stop_ok = stop == text.size() || !is_word_char(next_code_point(text, &i));
      if (!start_ok || !stop_ok) continue;
    }
    if (best->lstrip) {
      size_t s = start;
      while (s > start_offset && is_unicode_whitespace(last_code_point(text, s))) {
        size_t back = s - 1;
        while (back > 0 && (static_cast<unsigned char>(text[back]) & 0xC0) == 0x80) --back;
        s = back;
      }
      start = std::max(s, start_offset);
    }
    if (best->rstrip) {
      size_t i = stop;
      while (i < text.size()) {
        size_t next = i;
        if (!is_unicode_whitespace(next_code_point(text, &next))) break;
        i = next;
      }
      stop = i;
      pos = stop;
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, best->id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

void encode_word_cached(const TokenizerImpl& impl, std::string_view word, std::vector<int32_t>* ids) {
  const bool cacheable = word.size() <= TokenizerImpl::kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(impl.cache_mu);
    if (auto it = impl.cache.find(word); it != impl.cache.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids->size();
  impl.bpe.encode_word(word, ids);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(impl.cache_mu);
    if (impl.cache.size() >= TokenizerImpl::kCacheMaxEntries) impl.cache.clear();
    impl.cache.emplace(std::string(word), std::vector<int32_t>(ids->begin() + first, ids->end()));
  }
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(path, "tokenizer file"));
  return from_json(text, path);
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, const std::string& source_name) {
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<TokenizerImpl> impl, parse_tokenizer_json(json_text, source_name));
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::from_json_value(const nlohmann::json& document, const std::string& source_name) {
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<TokenizerImpl> impl, parse_tokenizer_json(document, source_name));
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const TokenizerImpl& impl = *impl_;
  std::vector<int32_t> ids;
  std::vector<Segment> raw_segments, norm_segments;
  find_added_tokens(text, impl.added_raw, impl.added_raw_first, &raw_segments);
  for (const Segment& seg : raw_segments) {
    if (seg.id >= 0) { ids.push_back(seg.id); continue; }
    std::string_view piece = text.substr(seg.start, seg.end - seg.start);
    std::string normalized;
    bool starts_at_origin = seg.start == 0;
    if (!impl.normalizers.empty()) {
      normalized = normalize(piece, impl.normalizers, &starts_at_origin);
      piece = normalized;
    }
    norm_segments.clear();
    find_added_tokens(piece, impl.added_normalized, impl.added_normalized_first, &norm_segments);
    for (const Segment& nseg : norm_segments) {
      if (nseg.id >= 0) { ids.push_back(nseg.id); continue; }
      const bool at_start = starts_at_origin && nseg.start == 0;
      pre_tokenize(impl, piece.substr(nseg.start, nseg.end - nseg.start), at_start,
                   [&](std::string_view word) { encode_word_cached(impl, word, &ids); });
    }
  }
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  const TokenizerImpl& impl = *impl_;
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= impl.id_assigned.size() || !impl.id_assigned[id]) {
      return invalid_argument(str(impl.source_name, ": decode: ids[", i, "] = ", id,
                                  " is not a token id (vocab size ", vocab_size(), ")"));
    }
    if (options.skip_special_tokens && impl.id_special[id]) continue;
    kept.push_back(id);
  }
  return run_decoders(impl, kept, options.lossy_utf8);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_assigned.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : impl_->added) {
    if (t.content == token) return t.id;
  }
  auto it = impl_->bpe.vocab.find(std::string(token));
  if (it == impl_->bpe.vocab.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !impl_->id_assigned[id]) return std::nullopt;
  return impl_->id_token[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->id_special[id];
}

const std::string& Tokenizer::source_name() const { return impl_->source_name; }

}  // namespace rlrun::engine
