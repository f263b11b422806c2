// The math half of policy_loss.h: per-unit PPO / TIS / KL terms, then the per-sequence loop that
// aggregates them and writes gradients. Everything is accumulated in double.
#include "trainer/policy_loss.h"

#include <algorithm>
#include <cmath>

#include "common/observe/log.h"

namespace rlrun::trainer {
namespace {

// Log-ratios past this are clamped (exp(20) ~ 5e8), with zero gradient beyond, as in verl: a
// corrupt or wildly stale log-prob must not turn into inf/NaN in the update.
constexpr double kMaxLogRatio = 20.0;

double clamp_log_ratio(double x) { return std::clamp(x, -kMaxLogRatio, kMaxLogRatio); }

// The PPO term of one unit before the TIS weight: its value and d(value)/d(log r).
struct PpoTerm {
  double ratio = 1.0;
  double loss = 0.0;
  double d_log_ratio = 0.0;
  bool clipped_low = false, clipped_high = false, dual_clipped = false;
};

PpoTerm ppo_term(const PolicyLossConfig& c, double raw_log_ratio, double adv) {
  const double log_ratio = clamp_log_ratio(raw_log_ratio);
  PpoTerm t;
  t.ratio = std::exp(log_ratio);
  const double unclipped = -adv * t.ratio;
  const double clipped = -adv * std::clamp(t.ratio, 1.0 - c.clip_low, 1.0 + c.clip_high);
  if (clipped > unclipped) {  // only when A > 0, r > 1 + clip_high or A < 0, r < 1 - clip_low
    t.loss = clipped;
    t.clipped_low = adv < 0.0;
    t.clipped_high = adv > 0.0;
  } else {
    t.loss = unclipped;
    t.d_log_ratio = -adv * t.ratio;  // d(-A e^lr)/d lr
  }
  if (c.clip_ratio_c > 0.0 && adv < 0.0 && t.loss > -adv * c.clip_ratio_c) {
    t.loss = -adv * c.clip_ratio_c;  // = c |A|, a constant: no gradient
    t.d_log_ratio = 0.0;
    t.dual_clipped = true;
  }
  if (log_ratio != raw_log_ratio) t.d_log_ratio = 0.0;
  return t;
}

struct TisWeight {
  double weight = 1.0;
  bool truncated = false;
};

// mismatch_log = log(pi_old / pi_rollout) of the unit.
TisWeight tis_weight(const PolicyLossConfig& c, double mismatch_log) {
  if (!c.use_tis) return {};
  const double m = std::exp(clamp_log_ratio(mismatch_log));
  if (c.tis_mode == TisMode::kTruncate) return {std::min(m, c.tis_cap), m > c.tis_cap};
  const bool inside = m >= 1.0 / c.tis_cap && m <= c.tis_cap;
  return {inside ? m : 0.0, !inside};
}

struct KlTerm {
  double value = 0.0;
  double d_logp = 0.0;
};

// KL(pi || ref) estimate at one token, x = logp - ref.
KlTerm kl_term(KlEstimator estimator, double x) {
  if (estimator == KlEstimator::kK2) return {0.5 * x * x, x};
  const double xc = clamp_log_ratio(x);
  const double e = std::exp(-xc);
  return {e - 1.0 + xc, xc == x ? 1.0 - e : 0.0};
}

double k3(double x) { return kl_term(KlEstimator::kK3, x).value; }

void add_unit_stats(PolicyLossStats& s, const PpoTerm& t, const TisWeight& w) {
  s.units += 1;
  s.clipped_low += t.clipped_low;
  s.clipped_high += t.clipped_high;
  s.dual_clipped += t.dual_clipped;
  s.tis_truncated += w.truncated;
  s.ratio_sum += t.ratio;
  s.ratio_min = std::min(s.ratio_min, t.ratio);
  s.ratio_max = std::max(s.ratio_max, t.ratio);
  s.tis_weight_sum += w.weight;
  s.tis_weight_min = std::min(s.tis_weight_min, w.weight);
  s.tis_weight_max = std::max(s.tis_weight_max, w.weight);
}

// One sequence [begin, end) with n masked tokens; `coef` is the aggregation weight of each of its
// masked tokens (1/(n D) or 1/D).
struct SeqSpan {
  size_t seq, begin, end, n;
  double coef;
};

// Per-sequence advantages when there is one per sequence (if S == N both readings agree).
double advantage_of(const PolicyLossInputs& in, const SeqSpan& s, size_t t) {
  return in.advantages.size() == in.cu_seqlens.size() - 1 ? in.advantages[s.seq] : in.advantages[t];
}

// Token-level PPO (grpo, dr_grpo, rloo): every masked token is a unit.
void pg_tokens(const PolicyLossConfig& c, const PolicyLossInputs& in, const SeqSpan& s,
               const PolicyLossGrads& g, PolicyLossResult& out) {
  for (size_t t = s.begin; t < s.end; ++t) {
    if (!in.loss_mask[t]) continue;
    const PpoTerm term =
        ppo_term(c, double(in.logprobs[t]) - in.old_logprobs[t], advantage_of(in, s, t));
    const TisWeight w = c.use_tis
                            ? tis_weight(c, double(in.old_logprobs[t]) - in.rollout_logprobs[t])
                            : TisWeight{};
    out.pg_loss += s.coef * w.weight * term.loss;
    if (!g.d_logprobs.empty()) g.d_logprobs[t] += float(s.coef * w.weight * term.d_log_ratio);
    add_unit_stats(out.stats, term, w);
  }
}

// GSPO: the sequence is one unit with log r_s = mean over masked tokens of (logp - old); every
// masked token carries the unit's loss, so the sequence's total weight is n * coef, and
// d log r_s / d logp_t = 1/n.
void pg_sequence(const PolicyLossConfig& c, const PolicyLossInputs& in, const SeqSpan& s,
                 const PolicyLossGrads& g, PolicyLossResult& out) {
  double log_ratio_sum = 0.0, mismatch_sum = 0.0;
  for (size_t t = s.begin; t < s.end; ++t) {
    if (!in.loss_mask[t]) continue;
    log_ratio_sum += double(in.logprobs[t]) - in.old_logprobs[t];
    if (c.use_tis) mismatch_sum += double(in.old_logprobs[t]) - in.rollout_logprobs[t];
  }
  const double n = static_cast<double>(s.n);
  const PpoTerm term = ppo_term(c, log_ratio_sum / n, in.advantages[s.seq]);
  const TisWeight w = tis_weight(c, mismatch_sum / n);
  out.pg_loss += n * s.coef * w.weight * term.loss;
  if (!g.d_logprobs.empty()) {
    const float d = float(s.coef * w.weight * term.d_log_ratio);  // n * coef * ... * (1/n)
    for (size_t t = s.begin; t < s.end; ++t) {
      if (in.loss_mask[t]) g.d_logprobs[t] += d;
    }
  }
  add_unit_stats(out.stats, term, w);
}

// KL penalty, entropy bonus and the per-token statistics of one sequence.
void token_terms(const PolicyLossConfig& c, const PolicyLossInputs& in, const SeqSpan& s,
                 const PolicyLossGrads& g, PolicyLossResult& out) {
  const bool have_ref = !in.ref_logprobs.empty(), have_entropy = !in.entropy.empty();
  for (size_t t = s.begin; t < s.end; ++t) {
    if (!in.loss_mask[t]) continue;
    out.stats.approx_kl_sum += k3(double(in.logprobs[t]) - in.old_logprobs[t]);
    if (have_ref) {
      const KlTerm kl = kl_term(c.kl_estimator, double(in.logprobs[t]) - in.ref_logprobs[t]);
      out.stats.ref_kl_sum += kl.value;
      if (c.kl_coef > 0.0) {
        out.kl_loss += s.coef * c.kl_coef * kl.value;
        if (!g.d_logprobs.empty()) g.d_logprobs[t] += float(s.coef * c.kl_coef * kl.d_logp);
      }
    }
    if (have_entropy) {
      out.stats.entropy_sum += in.entropy[t];
      out.entropy_loss -= s.coef * c.entropy_coef * in.entropy[t];
      if (!g.d_entropy.empty()) g.d_entropy[t] = float(-s.coef * c.entropy_coef);
    }
  }
}

// cu_seqlens well formed over n tokens; on success *num_seqs is S.
Status check_boundaries(std::span<const uint8_t> loss_mask, std::span<const int32_t> cu, size_t n,
                        size_t* num_seqs) {
  if (loss_mask.size() != n)
    return invalid_argument(
        str("policy loss: loss_mask has ", loss_mask.size(), " entries for ", n, " tokens"));
  if (cu.empty() || cu[0] != 0)
    return invalid_argument("policy loss: cu_seqlens must start with 0");
  for (size_t s = 1; s < cu.size(); ++s) {
    if (cu[s] < cu[s - 1]) return invalid_argument(str("policy loss: cu_seqlens decreases at ", s));
  }
  if (static_cast<size_t>(cu.back()) != n) {
    return invalid_argument(
        str("policy loss: cu_seqlens ends at ", cu.back(), ", not at the ", n, " tokens"));
  }
  *num_seqs = cu.size() - 1;
  return Status::ok_status();
}

Status check_masked_finite(const char* name, std::span<const float> v,
                           std::span<const uint8_t> mask) {
  for (size_t t = 0; t < v.size(); ++t) {
    if (mask[t] && !std::isfinite(v[t]))
      return invalid_argument(str("policy loss: ", name, "[", t, "] = ", v[t], " is not finite"));
  }
  return Status::ok_status();
}

Status check_inputs(const PolicyLossConfig& c, const PolicyLossInputs& in, const PolicyLossGrads& g,
                    double global_normaliser) {
  const size_t n = in.logprobs.size();
  size_t num_seqs = 0;
  RLRUN_RETURN_IF_ERROR(check_boundaries(in.loss_mask, in.cu_seqlens, n, &num_seqs));
  if (!(global_normaliser > 0.0 && std::isfinite(global_normaliser))) {
    return invalid_argument(str("policy loss: global normaliser ", global_normaliser,
                                " must be > 0 (an empty minibatch has no loss)"));
  }
  struct Named {
    const char* name;
    std::span<const float> v;
    bool required;  // else it may be empty
  };
  const Named arrays[] = {{"logprobs", in.logprobs, true},
                          {"old_logprobs", in.old_logprobs, true},
                          {"rollout_logprobs", in.rollout_logprobs, c.use_tis},
                          {"ref_logprobs", in.ref_logprobs, c.kl_coef > 0.0},
                          {"entropy", in.entropy, c.entropy_coef > 0.0}};
  for (const Named& a : arrays) {
    if (a.v.size() != n && (a.required || !a.v.empty())) {
      return invalid_argument(str("policy loss: ", a.name, " has ", a.v.size(), " entries, need ",
                                  n, a.required ? "" : " or none"));
    }
    if (!a.v.empty()) RLRUN_RETURN_IF_ERROR(check_masked_finite(a.name, a.v, in.loss_mask));
  }
  const bool per_seq = in.advantages.size() == num_seqs;
  if (!per_seq && in.advantages.size() != n) {
    return invalid_argument(str("policy loss: ", in.advantages.size(), " advantages for ", num_seqs,
                                " sequences / ", n, " tokens"));
  }
  if (c.algorithm == Algorithm::kGspo && !per_seq)
    return invalid_argument("policy loss: gspo needs one advantage per sequence");
  for (size_t i = 0; i < in.advantages.size(); ++i) {
    if (!std::isfinite(in.advantages[i]))
      return invalid_argument(str("policy loss: advantages[", i, "] is not finite"));
  }
  if (!g.d_logprobs.empty() && g.d_logprobs.size() != n)
    return invalid_argument("policy loss: d_logprobs must have N entries or none");
  if (!g.d_entropy.empty() && g.d_entropy.size() != n)
    return invalid_argument("policy loss: d_entropy must have N entries or none");
  return Status::ok_status();
}

size_t masked_count(std::span<const uint8_t> mask, size_t begin, size_t end) {
  return static_cast<size_t>(
      std::count_if(mask.begin() + begin, mask.begin() + end, [](uint8_t m) { return m != 0; }));
}

}  // namespace

Result<double> policy_loss_normaliser(const PolicyLossConfig& config,
                                      std::span<const uint8_t> loss_mask,
                                      std::span<const int32_t> cu_seqlens) {
  size_t num_seqs = 0;
  RLRUN_RETURN_IF_ERROR(check_boundaries(loss_mask, cu_seqlens, loss_mask.size(), &num_seqs));
  double sequences = 0.0, tokens = 0.0;
  for (size_t s = 0; s < num_seqs; ++s) {
    const size_t m = masked_count(loss_mask, size_t(cu_seqlens[s]), size_t(cu_seqlens[s + 1]));
    tokens += static_cast<double>(m);
    sequences += m > 0 ? 1.0 : 0.0;
  }
  switch (resolved_aggregation(config)) {
    case LossAggregation::kTokenMean: return tokens;
    case LossAggregation::kSeqMeanTokenSumNorm:
      return sequences * static_cast<double>(config.max_tokens);
    default: return sequences;
  }
}

Result<PolicyLossResult> policy_loss(const PolicyLossConfig& config, const PolicyLossInputs& in,
                                     double global_normaliser, const PolicyLossGrads& grads) {
  RLRUN_RETURN_IF_ERROR(validate_policy_loss_config(config));
  RLRUN_RETURN_IF_ERROR(check_inputs(config, in, grads, global_normaliser));
  std::fill(grads.d_logprobs.begin(), grads.d_logprobs.end(), 0.0f);
  std::fill(grads.d_entropy.begin(), grads.d_entropy.end(), 0.0f);
  const bool seq_mean = resolved_aggregation(config) == LossAggregation::kSeqMeanTokenMean;

  PolicyLossResult out;
  for (size_t s = 0; s + 1 < in.cu_seqlens.size(); ++s) {
    SeqSpan span{s, size_t(in.cu_seqlens[s]), size_t(in.cu_seqlens[s + 1]), 0, 0.0};
    span.n = masked_count(in.loss_mask, span.begin, span.end);
    if (span.n == 0) continue;
    span.coef = seq_mean ? 1.0 / (static_cast<double>(span.n) * global_normaliser)
                         : 1.0 / global_normaliser;
    if (config.algorithm == Algorithm::kGspo) {
      pg_sequence(config, in, span, grads, out);
    } else {
      pg_tokens(config, in, span, grads, out);
    }
    token_terms(config, in, span, grads, out);
    out.stats.tokens += static_cast<int64_t>(span.n);
    out.stats.sequences += 1;
  }
  out.loss = out.pg_loss + out.kl_loss + out.entropy_loss;
  return out;
}

}  // namespace rlrun::trainer
