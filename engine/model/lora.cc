// model/lora.cc - adapter layout, initialisation and buffers (lora.h).
#include "engine/model/lora.h"

#include <cmath>

#include "common/check.h"
#include "common/fnv1a.h"
#include "common/observe/log.h"
#include "common/splitmix.h"

namespace rlrun::engine {

namespace {

constexpr const char* kTargetNames[kLoraTargets] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};

int64_t align_up(int64_t n) { return (n + kParamAlign - 1) / kParamAlign * kParamAlign; }

std::string module_path(int64_t layer, LoraTarget t) {
  const int i = static_cast<int>(t);
  return str("model.layers.", layer, i < 4 ? ".self_attn." : ".mlp.", kTargetNames[i]);
}

}  // namespace

const char* lora_target_name(LoraTarget t) { return kTargetNames[static_cast<int>(t)]; }

bool LoraConfig::targets_any() const {
  for (bool t : targets)
    if (t) return true;
  return false;
}

Result<std::array<bool, kLoraTargets>> parse_lora_targets(const std::string& text) {
  std::array<bool, kLoraTargets> out{};
  if (text == "all" || text == "all-linear") {
    out.fill(true);
    return out;
  }
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    std::string name = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const size_t first = name.find_first_not_of(' '), last = name.find_last_not_of(' ');
    name = first == std::string::npos ? "" : name.substr(first, last - first + 1);
    bool found = false;
    for (int i = 0; i < kLoraTargets; ++i) {
      if (name == kTargetNames[i]) out[i] = found = true;
    }
    if (!found)
      return invalid_argument(str("lora_target_modules: unknown module `", name,
                                  "`; known: all, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

std::string lora_base_name(int64_t layer, LoraTarget t) { return module_path(layer, t) + ".weight"; }

std::vector<ParamInfo> lora_layout(const ModelConfig& model, const LoraConfig& config) {
  std::vector<ParamInfo> base = parameter_layout(model);
  auto shape_of = [&](const std::string& name) -> Shape {
    for (const ParamInfo& p : base)
      if (p.name == name) return p.shape;
    RLRUN_CHECK(false, "lora: the base model has no " + name);
    return {};
  };
  std::vector<ParamInfo> out;
  int64_t offset = 0;
  auto add = [&](std::string name, Shape shape) {
    ParamInfo p{std::move(name), shape, offset, shape.numel(), false, false};
    offset = align_up(offset + p.numel);
    out.push_back(std::move(p));
  };
  for (int64_t i = 0; i < model.num_layers; ++i) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (!config.targets[t]) continue;
      const Shape w = shape_of(lora_base_name(i, static_cast<LoraTarget>(t)));  // (out, in)
      const std::string prefix = "base_model.model." + module_path(i, static_cast<LoraTarget>(t));
      add(prefix + ".lora_A.weight", {config.rank, w.cols()});
      add(prefix + ".lora_B.weight", {w.rows(), config.rank});
    }
  }
  return out;
}

Result<std::unique_ptr<LoraWeights>> LoraWeights::create(Backend& backend, const ModelConfig& model,
                                                         const LoraConfig& config) {
  if (config.rank < 1) return invalid_argument(str("lora_rank must be at least 1 for adapters, got ", config.rank));
  if (!config.targets_any()) return invalid_argument("lora_target_modules names no module");
  if (!(config.alpha > 0) || !std::isfinite(config.alpha))
    return invalid_argument(str("lora_alpha must be a positive number, got ", config.alpha));
  return std::unique_ptr<LoraWeights>(new LoraWeights(backend, model, config, lora_layout(model, config)));
}

LoraWeights::LoraWeights(Backend& backend, const ModelConfig& model, const LoraConfig& config,
                         std::vector<ParamInfo> layout)
    : backend_(&backend), config_(config), num_layers_(model.num_layers), layout_(std::move(layout)) {
  flat_size_ = layout_.empty() ? 0 : align_up(layout_.back().offset + layout_.back().numel);
  master_ = backend.zeros({flat_size_}, DType::kF32);
  bind(master_, layers_);
  restore_grads();
}

void LoraWeights::bind(const Tensor& flat, std::vector<LoraLayer>& layers) const {
  layers.assign(static_cast<size_t>(num_layers_), LoraLayer{});
  size_t next = 0;
  for (int64_t i = 0; i < num_layers_; ++i) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (!config_.targets[t]) continue;
      const ParamInfo& a = layout_[next++];
      const ParamInfo& b = layout_[next++];
      layers[i][t].a = flat.rows(a.offset, a.offset + a.numel).view(a.shape);
      layers[i][t].b = flat.rows(b.offset, b.offset + b.numel).view(b.shape);
    }
  }
}

void LoraWeights::init(uint64_t seed) {
  for (const ParamInfo& p : layout_) {
    std::vector<float> values(static_cast<size_t>(p.numel), 0.0f);
    if (p.name.find(".lora_A.") != std::string::npos) {
      SplitMix64 rng{fnv1a64(p.name) ^ (seed * 0x9e3779b97f4a7c15ULL)};  // keyed by (seed, name)
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.shape.cols()));
      for (float& v : values) v = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    }
    const Tensor view = master_.rows(p.offset, p.offset + p.numel);
    backend_->copy_from_host(view, values.data(), view.nbytes());
  }
}

void for_each_lora_delta(const LoraWeights& lora,
                         const std::function<void(int64_t layer, LoraTarget target, const Tensor& delta)>& fn) {
  Backend& b = lora.backend();
  const float scale = static_cast<float>(lora.config().scale());
  Tensor buffer;
  for (int64_t l = 0; l < lora.num_layers(); ++l) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (!lora.config().targets[t]) continue;
      const LoraPair& p = lora.layer(l)[t];
      const int64_t out = p.b.shape().rows(), in = p.a.shape().cols();
      if (!buffer.defined() || buffer.numel() < out * in) buffer = b.uninitialized({out * in}, DType::kF32);
      const Tensor delta = buffer.rows(0, out * in).view({out, in});
      b.matmul(delta, p.b, p.a, false, false, scale);  // (out, in) = scale B A
      fn(l, static_cast<LoraTarget>(t), delta);
    }
  }
}

void merge_lora(const LoraWeights& lora, ModelWeights& weights, float sign) {
  RLRUN_CHECK(&lora.backend() == &weights.backend(), "merge_lora: adapters and weights on different backends");
  Backend& b = weights.backend();
  for_each_lora_delta(lora, [&](int64_t layer, LoraTarget target, const Tensor& delta) {
    const Tensor w = weights.master(weights.index_of(lora_base_name(layer, target)).value());
    b.axpy(w, sign, delta);  // W += sign * delta
  });
  weights.sync_compute();
}

const Tensor& LoraWeights::grad_flat() const {
  RLRUN_CHECK(grad_.defined(), "LoRA grad buffer used while released (call restore_grads first)");
  return grad_;
}

void LoraWeights::zero_grads() { backend_->fill_zero(grad_flat()); }

void LoraWeights::release_grads() {
  grad_ = Tensor();
  layer_grads_.clear();
}

void LoraWeights::restore_grads() {
  if (grad_.defined()) return;
  grad_ = backend_->zeros({flat_size_}, DType::kF32);
  bind(grad_, layer_grads_);
}

}  // namespace rlrun::engine
