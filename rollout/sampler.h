// sampler.h - picks the next token from one row of logits: temperature and top-p (nucleus) over
// the full vocabulary, greedy at temperature 0.
//
// The log-probability returned is that of the distribution actually sampled from:
//   temperature T > 0: p = softmax(logits / T), restricted to the smallest set of most likely
//   tokens whose mass reaches top_p and renormalised over it;
//   temperature 0 (greedy): the argmax, with its log-probability under softmax(logits) (a point
//   mass has no useful log-probability; the model's own is what the trainer compares against).
// The trainer recomputes log-probs as log softmax(logits / T) over the full vocabulary, so with
// top_p < 1 the two differ by the nucleus renormalisation: that is the train/inference mismatch
// TIS corrects.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/splitmix.h"

namespace rlrun::rollout {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;
};

// The random stream of one sample: reproducible from (seed, sample index), independent of how
// sequences are batched together. SplitMix64 from a key hashed from both: starting one per sample
// is free (a sample of a few tokens spent more seeding an mt19937_64 than sampling).
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t sample_index);
  double uniform() { return stream_.uniform(); }  // (0, 1)

 private:
  SplitMix64 stream_;
};

// Buffers reused between calls so sampling allocates nothing per token. One per thread.
struct SamplerScratch {
  std::vector<float> scaled;   // logits / temperature (V)
  std::vector<float> weights;  // exp(scaled - max scaled) (V)
  std::vector<int32_t> order;  // token ids, most likely first over the sorted prefix (V)
};

// Samples from logits (V).
SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, SampleRng& rng,
                          SamplerScratch& scratch);

}  // namespace rlrun::rollout
