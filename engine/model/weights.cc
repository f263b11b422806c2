#include "engine/model/weights.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/fnv1a.h"
#include "common/observe/log.h"
#include "common/splitmix.h"

namespace rlrun::engine {

namespace {

int64_t align_up(int64_t n) { return (n + kParamAlign - 1) / kParamAlign * kParamAlign; }

uint64_t stream_key(uint64_t seed, const std::string& name) {
  // The name's FNV-1a, mixed with the seed: every tensor draws its own stream.
  SplitMix64 mix{fnv1a64(name) ^ (seed * 0x9e3779b97f4a7c15ULL)};
  return mix.next();
}

// N(0, std) by Box-Muller, both outputs used.
void fill_normal(std::vector<float>& out, uint64_t key, float std) {
  SplitMix64 rng{key};
  for (size_t i = 0; i < out.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
    const double a = 2.0 * M_PI * rng.uniform();
    out[i] = static_cast<float>(r * std::cos(a) * std);
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(r * std::sin(a) * std);
  }
}

}  // namespace

std::vector<ParamInfo> parameter_layout(const ModelConfig& c) {
  const int64_t h = c.hidden_size, d = c.head_dim(), q_out = c.num_heads * d, kv_out = c.num_kv_heads * d;
  std::vector<ParamInfo> out;
  int64_t offset = 0;
  auto add = [&](std::string name, Shape shape, bool is_norm = false, bool is_bias = false) {
    ParamInfo p{std::move(name), shape, offset, shape.numel(), is_norm, is_bias};
    offset = align_up(offset + p.numel);
    out.push_back(std::move(p));
  };
  add("model.embed_tokens.weight", {c.vocab_size, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = str("model.layers.", i, ".");
    add(p + "input_layernorm.weight", {h}, true);
    add(p + "self_attn.q_proj.weight", {q_out, h});
    if (c.qkv_bias) add(p + "self_attn.q_proj.bias", {q_out}, false, true);
    add(p + "self_attn.k_proj.weight", {kv_out, h});
    if (c.qkv_bias) add(p + "self_attn.k_proj.bias", {kv_out}, false, true);
    add(p + "self_attn.v_proj.weight", {kv_out, h});
    if (c.qkv_bias) add(p + "self_attn.v_proj.bias", {kv_out}, false, true);
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {d}, true);
      add(p + "self_attn.k_norm.weight", {d}, true);
    }
    add(p + "self_attn.o_proj.weight", {h, q_out});
    add(p + "post_attention_layernorm.weight", {h}, true);
    if (c.sandwich_norms) add(p + "pre_feedforward_layernorm.weight", {h}, true);
    add(p + "mlp.gate_proj.weight", {c.intermediate_size, h});
    add(p + "mlp.up_proj.weight", {c.intermediate_size, h});
    add(p + "mlp.down_proj.weight", {h, c.intermediate_size});
    if (c.sandwich_norms) add(p + "post_feedforward_layernorm.weight", {h}, true);
  }
  add("model.norm.weight", {h}, true);
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab_size, h});
  return out;
}

int64_t flat_parameter_count(const std::vector<ParamInfo>& layout) {
  return layout.empty() ? 0 : align_up(layout.back().offset + layout.back().numel);
}

ModelWeights::ModelWeights(Backend& backend, const ModelConfig& config, WeightStorage storage)
    : backend_(&backend), storage_(storage), config_(config), layout_(parameter_layout(config)) {
  for (size_t i = 0; i < layout_.size(); ++i) by_name_.emplace(layout_[i].name, i);
  flat_size_ = flat_parameter_count(layout_);
  if (storage_ == WeightStorage::kBf16Frozen) {
    compute_ = backend.zeros({flat_size_}, DType::kBF16);
    small_offset_.assign(layout_.size(), -1);
    int64_t small = 0;
    for (size_t i = 0; i < layout_.size(); ++i) {
      if (is_matrix(i)) continue;
      small_offset_[i] = small;
      small = align_up(small + layout_[i].numel);
    }
    small_ = backend.zeros({std::max<int64_t>(small, 1)}, DType::kF32);
  } else {
    master_ = backend.zeros({flat_size_}, DType::kF32);
    if (storage_ == WeightStorage::kBf16Cache)
      compute_ = backend.zeros({flat_size_}, DType::kBF16);
    else
      compute_ = backend.compute_dtype() == DType::kF32 ? master_ : backend.zeros({flat_size_}, backend.compute_dtype());
  }
  bind([this](size_t i) { return compute(i); }, embed_, final_norm_, lm_head_, layers_);
  // kBf16Cache: the embedding rows are gathered from the master, exact as with rounding at every
  // product (a gather is no product); a tied LM head still multiplies the bf16 copy.
  if (storage_ == WeightStorage::kBf16Cache) embed_ = master(index_of("model.embed_tokens.weight").value());
  if (storage_ != WeightStorage::kBf16Frozen) restore_grads();
}

int64_t ModelWeights::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&master_, &small_, &grad_})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  if (compute_.defined() && (!master_.defined() || compute_.data() != master_.data()))
    total += static_cast<int64_t>(compute_.nbytes());
  return total;
}

Result<size_t> ModelWeights::index_of(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end())
    return not_found(str("model has no parameter `", name, "` (", config_.architecture, ", ", config_.num_layers,
                         " layers", config_.tie_embeddings ? ", tied embeddings" : "", ")"));
  return it->second;
}

Tensor ModelWeights::view_of(const Tensor& flat, size_t i) const {
  const ParamInfo& p = layout_.at(i);
  return flat.rows(p.offset, p.offset + p.numel).view(p.shape);
}

void ModelWeights::bind(const std::function<Tensor(size_t)>& view, Tensor& embed, Tensor& norm, Tensor& head,
                        std::vector<LayerWeights>& layers) const {
  auto named = [&](const std::string& name) {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? Tensor() : view(it->second);
  };
  embed = named("model.embed_tokens.weight");
  norm = named("model.norm.weight");
  head = config_.tie_embeddings ? embed : named("lm_head.weight");
  layers.assign(config_.num_layers, LayerWeights{});
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    const std::string p = str("model.layers.", i, ".");
    LayerWeights& w = layers[i];
    w.input_norm = named(p + "input_layernorm.weight");
    w.q = named(p + "self_attn.q_proj.weight");
    w.q_bias = named(p + "self_attn.q_proj.bias");
    w.k = named(p + "self_attn.k_proj.weight");
    w.k_bias = named(p + "self_attn.k_proj.bias");
    w.v = named(p + "self_attn.v_proj.weight");
    w.v_bias = named(p + "self_attn.v_proj.bias");
    w.q_norm = named(p + "self_attn.q_norm.weight");
    w.k_norm = named(p + "self_attn.k_norm.weight");
    w.o = named(p + "self_attn.o_proj.weight");
    if (config_.sandwich_norms) {  // Gemma: post_attention_layernorm normalizes the attention's output
      w.attn_out_norm = named(p + "post_attention_layernorm.weight");
      w.post_norm = named(p + "pre_feedforward_layernorm.weight");
      w.mlp_out_norm = named(p + "post_feedforward_layernorm.weight");
    } else {
      w.post_norm = named(p + "post_attention_layernorm.weight");
    }
    w.gate = named(p + "mlp.gate_proj.weight");
    w.up = named(p + "mlp.up_proj.weight");
    w.down = named(p + "mlp.down_proj.weight");
  }
}

Tensor ModelWeights::master(size_t i) const { return view_of(master_flat(), i); }

Tensor ModelWeights::compute_slot(size_t i) const {
  const ParamInfo& p = layout_.at(i);
  if (!small_offset_.empty() && small_offset_[i] >= 0) return small_.rows(small_offset_[i], small_offset_[i] + p.numel);
  const Tensor& flat = storage_ == WeightStorage::kBf16Cache && !is_matrix(i) ? master_ : compute_;
  return flat.rows(p.offset, p.offset + p.numel);
}

Tensor ModelWeights::compute(size_t i) const { return compute_slot(i).view(layout_.at(i).shape); }

const Tensor& ModelWeights::compute_flat() const {
  RLRUN_CHECK(storage_ == WeightStorage::kF32, "compute_flat() of bf16 matrices (their norms live apart)");
  return compute_;
}

void ModelWeights::write(size_t i, std::span<const float> values) {
  const ParamInfo& p = layout_.at(i);
  RLRUN_CHECK(static_cast<int64_t>(values.size()) == p.numel, "ModelWeights::write: wrong element count for " + p.name);
  const Tensor dst = master_.defined() ? master(i) : compute(i);
  if (dst.dtype() == DType::kF32) return backend_->copy_from_host(dst, values.data(), values.size() * sizeof(float));
  const Tensor staged = backend_->uninitialized(p.shape, DType::kF32);
  backend_->copy_from_host(staged, values.data(), values.size() * sizeof(float));
  backend_->convert(dst, staged);
}

void ModelWeights::write_flat(int64_t begin, const Tensor& values) {
  const int64_t end = begin + values.numel();
  RLRUN_CHECK(begin >= 0 && end <= flat_size_ && values.dtype() == DType::kF32, "ModelWeights::write_flat: bad range");
  if (master_.defined()) return backend_->copy(master_.rows(begin, end), values);
  // The first parameter ending after `begin` (offsets increase), then each one the range overlaps.
  auto it = std::upper_bound(layout_.begin(), layout_.end(), begin,
                             [](int64_t at, const ParamInfo& p) { return at < p.offset + p.numel; });
  for (; it != layout_.end() && it->offset < end; ++it) {
    const int64_t lo = std::max(begin, it->offset), hi = std::min(end, it->offset + it->numel);
    const Tensor slot = compute_slot(static_cast<size_t>(it - layout_.begin()));
    backend_->convert(slot.rows(lo - it->offset, hi - it->offset), values.rows(lo - begin, hi - begin));
  }
}

void ModelWeights::copy_compute_from(const ModelWeights& other) {
  RLRUN_CHECK(storage_ == other.storage_ && flat_size_ == other.flat_size_ && backend_ == other.backend_,
              "copy_compute_from: weights of another shape, storage or backend");
  backend_->copy(compute_, other.compute_);
  if (small_.defined()) backend_->copy(small_, other.small_);
  if (storage_ == WeightStorage::kBf16Cache) backend_->copy(master_, other.master_);  // the norms
}

void ModelWeights::init_random(uint64_t seed, float init_std) {
  for (size_t i = 0; i < layout_.size(); ++i) {
    const ParamInfo& p = layout_[i];
    std::vector<float> values(static_cast<size_t>(p.numel));
    if (p.is_norm) {  // a gain of 1: w = 1, or w = 0 where the norm multiplies by (1 + w)
      std::fill(values.begin(), values.end(), static_cast<float>(1.0 - config_.norm_weight_offset));
    } else if (!p.is_bias) {
      fill_normal(values, stream_key(seed, p.name), init_std);
    }
    write(i, values);
  }
  sync_compute();
}

const Tensor& ModelWeights::master_flat() const {
  RLRUN_CHECK(master_.defined(), storage_ == WeightStorage::kBf16Frozen
                                     ? "master weights of bf16-frozen weights (they have none)"
                                     : "master weights used after release_master() (the optimizer holds them)");
  return master_;
}

void ModelWeights::sync_compute() {
  if (storage_ == WeightStorage::kBf16Frozen) return;  // the compute weights are the only copy
  if (compute_.data() != master_flat().data()) backend_->convert(compute_, master_);
}

void ModelWeights::release_master() {
  if (storage_ == WeightStorage::kBf16Cache) return;
  if (master_.defined() && master_.data() != compute_.data()) master_ = Tensor();
}

const Tensor& ModelWeights::grad_flat() const {
  RLRUN_CHECK(grad_.defined(), "grad buffer used while released (call restore_grads first)");
  return grad_;
}

Tensor ModelWeights::grad(size_t i) const { return view_of(grad_flat(), i); }

void ModelWeights::zero_grads() { backend_->fill_zero(grad_flat()); }

void ModelWeights::release_grads() {
  grad_ = Tensor();
  grad_embed_ = grad_final_norm_ = grad_lm_head_ = Tensor();
  layer_grads_.clear();
}

void ModelWeights::restore_grads() {
  if (grad_.defined()) return;
  RLRUN_CHECK(storage_ != WeightStorage::kBf16Frozen, "gradients of bf16-frozen weights (they never train)");
  grad_ = backend_->zeros({flat_size_}, DType::kF32);
  bind([this](size_t i) { return view_of(grad_, i); }, grad_embed_, grad_final_norm_, grad_lm_head_, layer_grads_);
}

}  // namespace rlrun::engine
