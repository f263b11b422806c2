#include "trainer/hf_export.h"

#include "engine/hf_checkpoint.h"

namespace rlrun::trainer {

ModelExporter hf_model_exporter(engine::Model& model, engine::DType dtype) {
  return [&model, dtype](const std::string& dir) -> Status {
    const engine::ModelWeights& w = model.weights();
    std::vector<engine::HostTensor> tensors;
    tensors.reserve(w.params().size());
    for (size_t i = 0; i < w.params().size(); ++i) {
      const engine::ParamInfo& p = w.params()[i];
      tensors.push_back({p.name, std::vector<int64_t>(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank),
                         engine::to_host_f32(w.master(i))});
    }
    return engine::save_hf_checkpoint(dir, model.config(), tensors, dtype);
  };
}

}  // namespace rlrun::trainer
