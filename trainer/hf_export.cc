#include "trainer/hf_export.h"

#include "engine/io/model_io.h"
#include "engine/io/peft_adapter.h"

namespace rlrun::trainer {

namespace {

// The merged model, then the adapters as a PEFT folder in dir/adapter.
Status export_with_lora(engine::Model& model, const std::string& dir, engine::DType dtype, const std::string& base) {
  engine::ModelWeights& w = model.weights();
  const engine::LoraWeights& lora = *model.lora();
  const std::vector<float> saved = engine::to_host_f32(w.master_flat());
  engine::merge_lora(lora, w);
  const Status written = engine::save_weights(model, dir, dtype);
  w.backend().copy_from_host(w.master_flat(), saved.data(), saved.size() * sizeof(float));  // the base, exactly
  w.sync_compute();
  RLRUN_RETURN_IF_ERROR(written);
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
