#include "trainer/optimizer.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/observe/log.h"
#include "trainer/rank_reduce.h"

namespace rlrun::trainer {

using engine::CommDType;
using engine::DType;
using engine::Shape;
using engine::Tensor;

namespace {

// A sorted cover of [0, P) where adjacent ranges differ in `decay`; gaps are not decayed.
Result<std::vector<ParamRange>> make_cover(int64_t flat_size, std::vector<ParamRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const ParamRange& a, const ParamRange& b) { return a.begin < b.begin; });
  std::vector<ParamRange> cover;
  auto push = [&](int64_t b, int64_t e, bool decay) {
    if (b >= e) return;
    if (!cover.empty() && cover.back().decay == decay && cover.back().end == b) {
      cover.back().end = e;
    } else {
      cover.push_back({b, e, decay});
    }
  };
  int64_t at = 0;
  for (const ParamRange& r : ranges) {
    if (r.begin < at || r.end < r.begin || r.end > flat_size) {
      return invalid_argument(str("optimizer: parameter range [", r.begin, ", ", r.end,
                                  ") overlaps another or leaves the flat buffer of ", flat_size, " elements"));
    }
    push(at, r.begin, false);
    push(r.begin, r.end, r.decay);
    at = r.end;
  }
  push(at, flat_size, false);
  return cover;
}

Tensor slice(const Tensor& flat, int64_t begin, int64_t end) { return flat.rows(begin, end); }

// How a collective moves n elements of `dtype`: f32 as f32, bf16 as raw bytes (gathers and
// broadcasts only: nothing sums them).
std::pair<CommDType, size_t> comm_elements(DType dtype, int64_t n) {
  if (dtype == DType::kF32) return {CommDType::kF32, static_cast<size_t>(n)};
  return {CommDType::kU8, static_cast<size_t>(n) * engine::dtype_size(dtype)};
}

}  // namespace

Result<std::unique_ptr<Optimizer>> Optimizer::create(engine::Backend& backend, int64_t flat_size,
                                                     std::vector<ParamRange> ranges,
                                                     const OptimizerOptions& options,
                                                     engine::Communicator* comm, DType weight_dtype) {
  if (flat_size <= 0) return invalid_argument(str("optimizer: flat parameter size must be > 0, got ", flat_size));
  if (!(options.grad_clip >= 0.0)) return invalid_argument(str("grad_clip must be >= 0, got ", options.grad_clip));
  if (!(options.adam_beta1 >= 0 && options.adam_beta1 < 1 && options.adam_beta2 >= 0 && options.adam_beta2 < 1)) {
    return invalid_argument("adam_beta1 and adam_beta2 must be in [0, 1)");
  }
  if (!(options.adam_eps > 0)) return invalid_argument("adam_eps must be > 0");
  if (weight_dtype != DType::kF32 && weight_dtype != DType::kBF16) {
    return invalid_argument(str("optimizer: model weights must be f32 or bf16, not ", engine::dtype_name(weight_dtype)));
  }
  RLRUN_ASSIGN_OR_RETURN(std::vector<ParamRange> cover, make_cover(flat_size, std::move(ranges)));
  return std::unique_ptr<Optimizer>(new Optimizer(backend, flat_size, std::move(cover), options, comm, weight_dtype));
}

Optimizer::Optimizer(engine::Backend& backend, int64_t flat_size, std::vector<ParamRange> cover,
                     const OptimizerOptions& options, engine::Communicator* comm, DType weight_dtype)
    : backend_(backend), flat_size_(flat_size), cover_(std::move(cover)), options_(options), comm_(comm),
      weight_dtype_(weight_dtype) {
  const int ranks = comm_size(comm_);
  sharded_ = options.use_distributed_optimizer && ranks > 1;
  owned_ = owned_ranges_of(comm_rank(comm_), ranks, flat_size_, options.use_distributed_optimizer);
  if (sharded_) {
    shard_ = flat_size_ / ranks;
    tail_begin_ = shard_ * ranks;
    if (shard_ > 0) grad_shard_ = backend_.zeros(Shape{shard_}, DType::kF32);
  }
  int64_t owned = 0;
  for (const auto& [b, e] : owned_) {
    owned_at_.push_back(owned);
    owned += e - b;
  }
  if (owned > 0) {
    m_ = backend_.zeros(Shape{owned}, DType::kF32);
    v_ = backend_.zeros(Shape{owned}, DType::kF32);
    if (keeps_master(options_, ranks, weight_dtype_)) master_ = backend_.zeros(Shape{owned}, DType::kF32);
  }
}

std::vector<std::pair<int64_t, int64_t>> Optimizer::owned_ranges_of(int rank, int ranks, int64_t flat_size,
                                                                     bool use_distributed_optimizer) {
  if (!use_distributed_optimizer || ranks <= 1) return {{0, flat_size}};
  std::vector<std::pair<int64_t, int64_t>> owned;
  const int64_t shard = flat_size / ranks, tail_begin = shard * ranks;
  if (shard > 0) owned.push_back({rank * shard, (rank + 1) * shard});
  if (rank == 0 && tail_begin < flat_size) owned.push_back({tail_begin, flat_size});
  return owned;
}

// Offset in m_ / v_ of global element `begin`, whose range [begin, end) must lie in one owned range.
static int64_t state_offset(const std::vector<std::pair<int64_t, int64_t>>& owned, int64_t begin, int64_t end) {
  int64_t at = 0;
  for (const auto& [b, e] : owned) {
    if (begin >= b && end <= e) return at + (begin - b);
    at += e - b;
  }
  RLRUN_CHECK(false, str("optimizer: elements [", begin, ", ", end, ") are not inside one owned range"));
  return 0;
}

void Optimizer::copy_moments_to_host(int64_t begin, int64_t end, float* m, float* v) const {
  if (begin == end) return;
  const int64_t at = state_offset(owned_, begin, end);
  const size_t bytes = static_cast<size_t>(end - begin) * sizeof(float);
  backend_.copy_to_host(m, slice(m_, at, at + end - begin), bytes);
  backend_.copy_to_host(v, slice(v_, at, at + end - begin), bytes);
}

void Optimizer::copy_moments_from_host(int64_t begin, int64_t end, const float* m, const float* v) {
  if (begin == end) return;
  const int64_t at = state_offset(owned_, begin, end);
  const size_t bytes = static_cast<size_t>(end - begin) * sizeof(float);
  backend_.copy_from_host(slice(m_, at, at + end - begin), m, bytes);
  backend_.copy_from_host(slice(v_, at, at + end - begin), v, bytes);
}

void Optimizer::init_master(const Tensor& params) {
  RLRUN_CHECK(keeps_master() && params.dtype() == DType::kF32 && params.numel() == flat_size_,
              str("optimizer: init_master from ", params.str(), " needs keeps_master() and f32 (", flat_size_, ")"));
  for (size_t i = 0; i < owned_.size(); ++i) backend_.copy(owned_master(Tensor(), i), slice(params, owned_[i].first, owned_[i].second));
}

void Optimizer::copy_master_to_host(const Tensor& params, int64_t begin, int64_t end, float* out) const {
  if (begin == end) return;
  if (!keeps_master()) {
    backend_.copy_to_host(out, slice(params, begin, end), static_cast<size_t>(end - begin) * sizeof(float));
    return;
  }
  const int64_t at = state_offset(owned_, begin, end);
  backend_.copy_to_host(out, slice(master_, at, at + end - begin), static_cast<size_t>(end - begin) * sizeof(float));
}

void Optimizer::copy_master_from_host(int64_t begin, int64_t end, const float* in) {
  RLRUN_CHECK(keeps_master(), "optimizer: copy_master_from_host without a master of its own");
  if (begin == end) return;
  const int64_t at = state_offset(owned_, begin, end);
  backend_.copy_from_host(slice(master_, at, at + end - begin), in, static_cast<size_t>(end - begin) * sizeof(float));
}

size_t Optimizer::state_bytes() const {
  return (m_.defined() ? 2 * m_.nbytes() : 0) + (master_.defined() ? master_.nbytes() : 0) +
         (grad_shard_.defined() ? grad_shard_.nbytes() : 0);
}

Status Optimizer::reduce(const Tensor& grads) {
  if (comm_size(comm_) == 1) return Status();
  if (!sharded_) return comm_->all_reduce_sum(grads.data(), static_cast<size_t>(flat_size_), CommDType::kF32);
  if (shard_ > 0) {
    RLRUN_RETURN_IF_ERROR(comm_->reduce_scatter_sum(grads.data(), grad_shard_.data(),
                                                    static_cast<size_t>(shard_), CommDType::kF32));
  }
  if (tail_begin_ < flat_size_) {
    RLRUN_RETURN_IF_ERROR(comm_->all_reduce_sum(slice(grads, tail_begin_, flat_size_).data(),
                                                static_cast<size_t>(flat_size_ - tail_begin_), CommDType::kF32));
  }
  return Status();
}

Tensor Optimizer::owned_grad(const Tensor& grads, size_t i) const {
  const auto [b, e] = owned_[i];
  if (sharded_ && b < tail_begin_) return grad_shard_;  // the shard: reduce-scatter's output
  return slice(grads, b, e);
}

Result<double> Optimizer::global_norm(const Tensor& grads) {
  double local = 0.0;
  for (size_t i = 0; i < owned_.size(); ++i) local += backend_.sum_squares(owned_grad(grads, i));
  // Plain: every rank holds the whole reduced gradient, so local is already global. Sharded: the
  // owned ranges of all ranks tile [0, P) exactly once.
  if (sharded_) RLRUN_RETURN_IF_ERROR(all_reduce_doubles(comm_, std::span<double>(&local, 1)));
  return std::sqrt(local);
}

Tensor Optimizer::owned_master(const Tensor& params, size_t i) const {
  const auto [b, e] = owned_[i];
  if (keeps_master()) return slice(master_, owned_at_[i], owned_at_[i] + (e - b));
  return slice(params, b, e);
}

void Optimizer::apply_adamw(const Tensor& params, const Tensor& grads, double lr) {
  engine::AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(options_.adam_beta1);
  p.beta2 = static_cast<float>(options_.adam_beta2);
  p.eps = static_cast<float>(options_.adam_eps);
  p.step = step_;
  for (size_t i = 0; i < owned_.size(); ++i) {
    const auto [b, e] = owned_[i];
    const Tensor g = owned_grad(grads, i), master = owned_master(params, i);
    for (const ParamRange& c : cover_) {
      const int64_t lo = std::max(b, c.begin), hi = std::min(e, c.end);
      if (lo >= hi) continue;
      p.weight_decay = c.decay ? static_cast<float>(options_.weight_decay) : 0.0f;
      const int64_t s = owned_at_[i] + (lo - b);
      backend_.adamw_step(slice(master, lo - b, hi - b), slice(g, lo - b, hi - b), slice(m_, s, s + hi - lo),
                          slice(v_, s, s + hi - lo), p);
    }
  }
}

void Optimizer::write_back(const Tensor& params, const Tensor& weights) {
  for (size_t i = 0; i < owned_.size(); ++i) {
    const Tensor master = owned_master(params, i), w = slice(weights, owned_[i].first, owned_[i].second);
    if (master.data() != w.data()) backend_.convert(w, master);
  }
}

Status Optimizer::gather(const Tensor& weights) {
  if (!sharded_) return Status();
  const int rank = comm_rank(comm_);
  if (shard_ > 0) {
    // The shard buffer is free now: its leading bytes become all_gather's input (in and out must
    // not alias), holding this rank's updated shard in the weights' dtype.
    const Tensor in = grad_shard_.reinterpret(weight_dtype_, Shape{shard_});
    backend_.copy(in, slice(weights, rank * shard_, (rank + 1) * shard_));
    const auto [dtype, count] = comm_elements(weight_dtype_, shard_);
    RLRUN_RETURN_IF_ERROR(comm_->all_gather(in.data(), slice(weights, 0, tail_begin_).data(), count, dtype));
  }
  if (tail_begin_ < flat_size_) {
    backend_.synchronize();
    const auto [dtype, count] = comm_elements(weight_dtype_, flat_size_ - tail_begin_);
    RLRUN_RETURN_IF_ERROR(comm_->broadcast(slice(weights, tail_begin_, flat_size_).data(), count, dtype, 0));
  }
  return Status();
}

Result<OptimizerStepStats> Optimizer::step(const Tensor& params, const Tensor& weights, const Tensor& grads,
                                           double lr) {
  RLRUN_CHECK(grads.dtype() == DType::kF32 && grads.numel() == flat_size_ && weights.dtype() == weight_dtype_ &&
                  weights.numel() == flat_size_ &&
                  (keeps_master() || (params.dtype() == DType::kF32 && params.numel() == flat_size_)),
              str("optimizer: params ", params.str(), ", weights ", weights.str(), " and grads ", grads.str(),
                  " must be f32, ", engine::dtype_name(weight_dtype_), " and f32 (", flat_size_, ")"));
  backend_.synchronize();  // backward's accumulation must be complete before the collective reads it
  RLRUN_RETURN_IF_ERROR(reduce(grads));
  OptimizerStepStats stats;
  stats.learning_rate = lr;
  RLRUN_ASSIGN_OR_RETURN(stats.grad_norm, global_norm(grads));
  if (!std::isfinite(stats.grad_norm)) {
    log::warn(str("optimizer: gradient norm is ", stats.grad_norm, "; skipping the update of step ", step_ + 1));
    stats.skipped = true;
    stats.step = step_;
    return stats;
  }
  if (options_.grad_clip > 0.0 && stats.grad_norm > options_.grad_clip) {
    stats.clip_coef = options_.grad_clip / (stats.grad_norm + 1e-6);
    for (size_t i = 0; i < owned_.size(); ++i) backend_.scale(owned_grad(grads, i), static_cast<float>(stats.clip_coef));
  }
  ++step_;
  apply_adamw(params, grads, lr);
  write_back(params, weights);
  RLRUN_RETURN_IF_ERROR(gather(weights));
  backend_.synchronize();
  stats.step = step_;
  return stats;
}

OptimizerState Optimizer::state() const {
  OptimizerState s;
  s.step = step_;
  s.ranges = owned_;
  if (m_.defined()) {
    s.m = engine::to_host_f32(m_);
    s.v = engine::to_host_f32(v_);
  }
  return s;
}

Status Optimizer::load_state(const OptimizerState& state) {
  if (state.ranges != owned_) {
    return invalid_argument(str("optimizer state covers other parameter ranges than this rank owns (saved with another "
                                "trainer_num_workers, use_distributed_optimizer or model?): ", state.ranges.size(),
                                " saved ranges vs ", owned_.size()));
  }
  const size_t n = m_.defined() ? static_cast<size_t>(m_.numel()) : 0;
  if (state.m.size() != n || state.v.size() != n) {
    return invalid_argument(str("optimizer state has ", state.m.size(), "/", state.v.size(), " moment values, expected ", n));
  }
  if (state.step < 0) return invalid_argument(str("optimizer state step must be >= 0, got ", state.step));
  if (n > 0) {
    backend_.copy_from_host(m_, state.m.data(), n * sizeof(float));
    backend_.copy_from_host(v_, state.v.data(), n * sizeof(float));
  }
  step_ = state.step;
  return Status();
}

}  // namespace rlrun::trainer
