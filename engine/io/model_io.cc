#include "engine/io/model_io.h"

#include <unordered_set>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/io/hf_checkpoint.h"
#include "engine/io/hf_config.h"

namespace rlrun::engine {

Status load_weights(Model& model, std::span<const HostTensor> tensors) {
  ModelWeights& w = model.weights();
  std::unordered_set<size_t> seen;
  for (const HostTensor& t : tensors) {
    RLRUN_ASSIGN_OR_RETURN(const size_t i, w.index_of(t.name));
    const ParamInfo& p = w.params()[i];
    const std::vector<int64_t> want(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    if (t.shape != want || static_cast<int64_t>(t.data.size()) != p.numel) {
      return invalid_argument(str("tensor ", t.name, " has shape ", shape_string(t.shape), " (", t.data.size(),
                                  " values); the model expects ", shape_string(want)));
    }
    if (!seen.insert(i).second) return invalid_argument(str("tensor ", t.name, " is given twice"));
    w.backend().copy_from_host(w.master(i), t.data.data(), t.data.size() * sizeof(float));
  }
  for (size_t i = 0; i < w.params().size(); ++i) {
    if (seen.count(i) == 0) return invalid_argument(str("no tensor for parameter ", w.params()[i].name));
  }
  w.sync_compute();
  return {};
}

Status load_weights(Model& model, const std::string& dir) {
  RLRUN_ASSIGN_OR_RETURN(std::vector<HostTensor> tensors, load_hf_checkpoint_tensors(dir, model.config()));
  return load_weights(model, tensors).with_context(dir);
}

std::vector<HostTensor> weights_to_host(const Model& model) {
  const ModelWeights& w = model.weights();
  std::vector<HostTensor> out;
  for (const TensorSpec& spec : hf_tensor_specs(model.config())) {
    const Result<size_t> i = w.index_of(spec.name);
    RLRUN_CHECK(i.ok(), str("hf_tensor_specs and parameter_layout disagree on ", spec.name));
    HostTensor t{spec.name, spec.shape, std::vector<float>(static_cast<size_t>(w.params()[*i].numel))};
    w.backend().copy_to_host(t.data.data(), w.master(*i), t.data.size() * sizeof(float));
    out.push_back(std::move(t));
  }
  return out;
}

Status save_weights(const Model& model, const std::string& dir, DType dtype) {
  const std::vector<HostTensor> tensors = weights_to_host(model);
  return save_hf_checkpoint(dir, model.config(), tensors, dtype);
}

Result<std::unique_ptr<Model>> load_model(Backend& backend, const std::string& dir, ModelOptions options) {
  RLRUN_ASSIGN_OR_RETURN(HfCheckpoint checkpoint, load_hf_checkpoint(dir));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::create(backend, checkpoint.config, options));
  RLRUN_RETURN_IF_ERROR(load_weights(*model, checkpoint.tensors).with_context(dir));
  return model;
}

}  // namespace rlrun::engine
