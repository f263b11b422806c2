// episode_record.h - what an episode leaves for training: the exact tokens of its turns.
//
// Every call an environment makes in a session is a Turn: the prompt ids the model read and the
// tokens it sampled, with their log-probs. An episode trains as few sequences as its turns allow:
// a turn whose prompt starts with the previous turn's prompt + completion continues that
// sequence, the tokens in between (the environment's: tool output, a user turn, the chat
// template's markers) joining the completion with loss mask 0 and log-prob 0; any other turn starts
// a new sequence. The gateway makes the usual case exact (exact_prompt): when the text of a new
// prompt starts with the text of the session's last prompt + completion, the new prompt's ids are
// those recorded tokens followed by the rest of the text encoded, so the model's own sampled
// tokens are never replaced by a re-tokenisation of their text.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rlrun::orchestrator {

struct Turn {
  std::vector<int32_t> prompt;      // as the model read it
  std::vector<int32_t> completion;  // as sampled, the stop token included
  std::vector<float> logprobs;      // one per completion token
  uint64_t version = 0;             // the weight version of its first token
};

// One training sequence of an episode.
struct EpisodeSegment {
  std::vector<int32_t> prompt;
  std::vector<int32_t> completion;  // the policy's tokens and, between turns, the environment's
  std::vector<float> logprobs;      // per completion token (0 for the environment's)
  std::vector<uint8_t> mask;        // per completion token: 1 the policy's, 0 the environment's
};

// The turns, in order, as training sequences (see above). Empty turns give nothing.
std::vector<EpisodeSegment> episode_segments(const std::vector<Turn>& turns);

// `prompt` with the session's last sequence (`recorded`: its prompt + completion) as its exact
// prefix where the texts agree: decode(prompt) starts with decode(recorded) -> recorded followed by
// encode(the rest of the text). nullopt when the texts disagree (or either fails to decode), and
// the caller keeps `prompt`. `decode` keeps special tokens.
std::optional<std::vector<int32_t>> splice_recorded_prefix(
    const std::vector<int32_t>& recorded, const std::vector<int32_t>& prompt,
    const std::function<std::optional<std::string>(const std::vector<int32_t>&)>& decode,
    const std::function<std::vector<int32_t>(const std::string&)>& encode);

}  // namespace rlrun::orchestrator
