#include "trainer/hf_export.h"

#include <unordered_map>

#include "engine/io/hf_checkpoint.h"
#include "engine/io/model_io.h"
#include "engine/io/peft_adapter.h"

namespace rlrun::trainer {

namespace {

// The merged model (each adapted W + scale B A, summed on the host: the base may be an f32 master
// or bf16-frozen matrices, and stays as it was), then the adapters as a PEFT folder in dir/adapter.
Status export_with_lora(engine::Model& model, const std::string& dir, engine::DType dtype, const std::string& base) {
  const engine::LoraWeights& lora = *model.lora();
  std::vector<engine::HostTensor> merged = engine::weights_to_host(model);
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < merged.size(); ++i) by_name.emplace(merged[i].name, i);
  engine::for_each_lora_delta(lora, [&](int64_t layer, engine::LoraTarget target, const engine::Tensor& delta) {
    const std::vector<float> d = engine::to_host_f32(delta);
    std::vector<float>& w = merged.at(by_name.at(engine::lora_base_name(layer, target))).data;
    for (size_t i = 0; i < w.size(); ++i) w[i] += d[i];
  });
  RLRUN_RETURN_IF_ERROR(engine::save_hf_checkpoint(dir, model.config(), merged, dtype));
  const std::vector<float> flat = engine::to_host_f32(lora.master_flat());
  std::vector<engine::HostTensor> tensors;
  for (const engine::ParamInfo& p : lora.params())
    tensors.push_back({p.name, std::vector<int64_t>(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank),
                       std::vector<float>(flat.begin() + p.offset, flat.begin() + p.offset + p.numel)});
  return engine::save_peft_adapter(dir + "/adapter", model.config(), lora.config(), tensors, base);
}

}  // namespace

ModelExporter hf_model_exporter(engine::Model& model, engine::DType dtype, std::string base_model) {
  return [&model, dtype, base = std::move(base_model)](const std::string& dir) -> Status {
    if (model.lora() != nullptr) return export_with_lora(model, dir, dtype, base);
    return engine::save_weights(model, dir, dtype);
  };
}

}  // namespace rlrun::trainer
