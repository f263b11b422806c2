#include "engine/io/model_io.h"

#include <filesystem>
#include <unordered_set>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/io/hf_checkpoint.h"
#include "engine/io/gguf_model.h"
#include "engine/io/hf_config.h"

namespace rlrun::engine {

namespace {

// Copies named tensors into a model's weights (the master, or bf16-frozen storage), each
// parameter exactly once, then refreshes the compute copy (finish).
class WeightLoader {
 public:
  explicit WeightLoader(Model& model) : w_(model.weights()) {}

  Status add(const HostTensor& t) {
    RLRUN_ASSIGN_OR_RETURN(const size_t i, w_.index_of(t.name));
    const ParamInfo& p = w_.params()[i];
    const std::vector<int64_t> want(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    if (t.shape != want || static_cast<int64_t>(t.data.size()) != p.numel) {
      return invalid_argument(str("tensor ", t.name, " has shape ", shape_string(t.shape), " (", t.data.size(),
                                  " values); the model expects ", shape_string(want)));
    }
    if (!seen_.insert(i).second) return invalid_argument(str("tensor ", t.name, " is given twice"));
    w_.write(i, t.data);
    return {};
  }

  Status finish() {
    for (size_t i = 0; i < w_.params().size(); ++i) {
      if (seen_.count(i) == 0) return invalid_argument(str("no tensor for parameter ", w_.params()[i].name));
    }
    w_.sync_compute();
    return {};
  }

 private:
  ModelWeights& w_;
  std::unordered_set<size_t> seen_;
};

// A .gguf file's tensors into `model` one at a time (for_each_gguf_tensor): no second copy of
// the weights is ever held. Errors name the file.
Status load_gguf_weights(Model& model, const GgufFile& file) {
  WeightLoader loader(model);
  RLRUN_RETURN_IF_ERROR(for_each_gguf_tensor(file, model.config(), [&](HostTensor&& t) {
    return loader.add(t).with_context(file.source());
  }));
  return loader.finish().with_context(file.source());
}

}  // namespace

Status load_weights(Model& model, std::span<const HostTensor> tensors) {
  WeightLoader loader(model);
  for (const HostTensor& t : tensors) RLRUN_RETURN_IF_ERROR(loader.add(t));
  return loader.finish();
}

Status load_weights(Model& model, const std::string& checkpoint) {
  if (is_gguf_path(checkpoint)) {
    RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(checkpoint));
    return load_gguf_weights(model, file);
  }
  RLRUN_ASSIGN_OR_RETURN(std::vector<HostTensor> tensors, load_hf_checkpoint_tensors(checkpoint, model.config()));
  return load_weights(model, tensors).with_context(checkpoint);
}

Result<ModelConfig> read_checkpoint_config(const std::string& checkpoint) {
  ModelConfig config;
  if (!is_gguf_path(checkpoint)) {
    const std::string path = (std::filesystem::path(checkpoint) / "config.json").string();
    RLRUN_ASSIGN_OR_RETURN(config, read_hf_config(path));
    RLRUN_RETURN_IF_ERROR(check_implemented(config).with_context(path));
  } else {
    RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(checkpoint));
    RLRUN_ASSIGN_OR_RETURN(config, gguf_model_config(file));
    RLRUN_RETURN_IF_ERROR(check_implemented(config).with_context(checkpoint));
  }
  return config;
}

Result<std::string> checkpoint_config_json(const std::string& checkpoint) {
  RLRUN_ASSIGN_OR_RETURN(const ModelConfig config, read_checkpoint_config(checkpoint));
  return hf_config_json(config, config.torch_dtype == "bfloat16" ? "bfloat16" : "float32");
}

Result<Tokenizer> load_tokenizer_file(const std::string& path) {
  return is_gguf_path(path) ? load_gguf_tokenizer(path) : Tokenizer::load(path);
}

std::string checkpoint_tokenizer_path(const std::string& checkpoint) {
  return is_gguf_path(checkpoint) ? checkpoint : (std::filesystem::path(checkpoint) / "tokenizer.json").string();
}

std::vector<HostTensor> weights_to_host(const Model& model) {
  const ModelWeights& w = model.weights();
  std::vector<HostTensor> out;
  for (const TensorSpec& spec : hf_tensor_specs(model.config())) {
    const Result<size_t> i = w.index_of(spec.name);
    RLRUN_CHECK(i.ok(), str("hf_tensor_specs and parameter_layout disagree on ", spec.name));
    // Without a master (released to a sharded optimizer, or bf16-frozen) the compute weights,
    // widened, are the copy. With compute_dtype: bf16's copy (kBf16Cache) the matrices are the
    // bf16 ones the products read: the policy the run trained and sampled. At a small learning rate
    // much of what it learned is which weights round to the next bf16 value, and the f32 master
    // would answer like the model before training (performance.md, "An RL step beside TRL").
    const bool as_computed = w.storage() == WeightStorage::kBf16Cache && w.compute(*i).dtype() == DType::kBF16;
    HostTensor t{spec.name, spec.shape, to_host_f32(w.has_master() && !as_computed ? w.master(*i) : w.compute(*i))};
    out.push_back(std::move(t));
  }
  return out;
}

Status save_weights(const Model& model, const std::string& dir, DType dtype) {
  const std::vector<HostTensor> tensors = weights_to_host(model);
  return save_hf_checkpoint(dir, model.config(), tensors, dtype);
}

Result<std::unique_ptr<Model>> load_model(Backend& backend, const std::string& path, ModelOptions options) {
  if (is_gguf_path(path)) {
    RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
    RLRUN_ASSIGN_OR_RETURN(const ModelConfig config, gguf_model_config(file));
    RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::create(backend, config, options));
    RLRUN_RETURN_IF_ERROR(load_gguf_weights(*model, file));
    return model;
  }
  HfCheckpoint checkpoint;
  RLRUN_ASSIGN_OR_RETURN(checkpoint, load_hf_checkpoint(path));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::create(backend, checkpoint.config, options));
  RLRUN_RETURN_IF_ERROR(load_weights(*model, checkpoint.tensors).with_context(path));
  return model;
}

}  // namespace rlrun::engine
