// choice_text.h - one choice's text, built as its tokens arrive: decoded (special tokens
// skipped), cut before the first stop string (OpenAI's `stop`: the text ends before it and the
// choice finishes), and handed out in pieces for streaming without ever sending bytes that a later
// token could change: an incomplete UTF-8 character at the end, or the start of a stop string.
//
// Threads: one ChoiceText is used by one thread (the request's HTTP thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace rlrun::orchestrator::openai {

class ChoiceText {
 public:
  // `tokenizer` must outlive this.
  ChoiceText(const engine::Tokenizer& tokenizer, std::vector<std::string> stop);

  // Appends generated tokens (and their log-probs, same length). Once a stop string completed,
  // the choice is done: true is returned and further tokens are ignored. The token that completed
  // it is kept in ids() (the text ends before the stop string).
  bool append(std::span<const int32_t> ids, std::span<const float> logprobs);
  // The text not handed out before that no later token can change; `final`: all of it.
  std::string take_delta(bool final);

  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }  // decoded so far (raw bytes; may end mid-character)
  const std::vector<int32_t>& ids() const { return ids_; }
  const std::vector<float>& logprobs() const { return logprobs_; }

 private:
  const engine::Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  size_t longest_stop_ = 0;
  std::vector<int32_t> ids_;
  std::vector<float> logprobs_;
  std::string text_;
  size_t sent_ = 0;  // bytes of text_ handed out by take_delta
  bool stopped_ = false;
};

// Bytes at the end of `text` that begin a UTF-8 character not yet complete (0 to 3).
size_t incomplete_utf8_tail(std::string_view text);

}  // namespace rlrun::orchestrator::openai
