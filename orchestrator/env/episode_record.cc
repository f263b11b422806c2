// episode_record.cc - turns -> training sequences; the exact-prefix splice.
#include "orchestrator/env/episode_record.h"

#include <algorithm>

namespace rlrun::orchestrator {

namespace {

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

}  // namespace

std::vector<EpisodeSegment> episode_segments(const std::vector<Turn>& turns) {
  std::vector<EpisodeSegment> out;
  std::vector<int32_t> sequence;  // the open segment's prompt + completion
  for (const Turn& t : turns) {
    if (t.prompt.empty() || t.completion.empty()) continue;
    const bool continues = !out.empty() && t.prompt.size() > sequence.size() && starts_with(t.prompt, sequence);
    if (continues) {
      EpisodeSegment& s = out.back();
      for (size_t i = sequence.size(); i < t.prompt.size(); ++i) {  // the environment's tokens
        s.completion.push_back(t.prompt[i]);
        s.logprobs.push_back(0.0f);
        s.mask.push_back(0);
      }
    } else {
      out.push_back(EpisodeSegment{t.prompt, {}, {}, {}});
      sequence = t.prompt;
    }
    EpisodeSegment& s = out.back();
    for (size_t i = 0; i < t.completion.size(); ++i) {
      s.completion.push_back(t.completion[i]);
      s.logprobs.push_back(i < t.logprobs.size() ? t.logprobs[i] : 0.0f);
      s.mask.push_back(1);
    }
    sequence = t.prompt;
    sequence.insert(sequence.end(), t.completion.begin(), t.completion.end());
  }
  return out;
}

std::optional<std::vector<int32_t>> splice_recorded_prefix(
    const std::vector<int32_t>& recorded, const std::vector<int32_t>& prompt,
    const std::function<std::optional<std::string>(const std::vector<int32_t>&)>& decode,
    const std::function<std::vector<int32_t>(const std::string&)>& encode) {
  if (recorded.empty() || starts_with(prompt, recorded)) return std::nullopt;  // nothing to do
  const std::optional<std::string> old_text = decode(recorded);
  const std::optional<std::string> new_text = decode(prompt);
  if (!old_text || !new_text || old_text->empty() || new_text->size() <= old_text->size() ||
      new_text->compare(0, old_text->size(), *old_text) != 0)
    return std::nullopt;
  std::vector<int32_t> ids = recorded;
  const std::vector<int32_t> rest = encode(new_text->substr(old_text->size()));
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

}  // namespace rlrun::orchestrator
