#include "engine/io/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::engine {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Shard file names from the index's weight_map; names are plain file names inside `dir`.
Result<std::vector<std::string>> shard_files(const std::string& index_path) {
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(index_path, "safetensors index"));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return invalid_argument(str(index_path, ": expected a JSON object with a `weight_map` object"));
  }
  std::set<std::string> files;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) return invalid_argument(str(index_path, ": weight_map entry `", tensor, "` is not a string"));
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return invalid_argument(str(index_path, ": weight_map entry `", tensor, "` names `", name,
                                  "`, not a file name in the checkpoint directory"));
    }
    files.insert(name);
  }
  return std::vector<std::string>(files.begin(), files.end());
}

Result<std::vector<SafetensorsFile>> open_checkpoint_files(const std::string& dir) {
  std::vector<std::string> names = {kSingleFile};
  const fs::path index = fs::path(dir) / kIndexFile;
  if (!fs::exists(fs::path(dir) / kSingleFile) && fs::exists(index)) {
    RLRUN_ASSIGN_OR_RETURN(names, shard_files(index.string()));
  }
  std::vector<SafetensorsFile> files;
  for (const std::string& name : names) {
    RLRUN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open((fs::path(dir) / name).string()));
    files.push_back(std::move(file));
  }
  return files;
}

bool ignorable_extra(const std::string& name, const ModelConfig& config) {
  const std::string inv_freq = "rotary_emb.inv_freq";
  if (name.size() >= inv_freq.size() && name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0) {
    return true;  // a buffer older transformers versions saved; recomputed from rope_theta
  }
  return config.tie_embeddings && name == "lm_head.weight";
}

}  // namespace

Result<std::vector<HostTensor>> load_hf_checkpoint_tensors(const std::string& dir, const ModelConfig& config) {
  RLRUN_RETURN_IF_ERROR(validate_model_config(config));
  RLRUN_ASSIGN_OR_RETURN(std::vector<SafetensorsFile> files, open_checkpoint_files(dir));
  std::map<std::string, std::pair<const TensorView*, const SafetensorsFile*>> by_name;
  for (const SafetensorsFile& file : files) {
    for (const TensorView& view : file.tensors()) {
      auto [it, inserted] = by_name.emplace(view.name, std::make_pair(&view, &file));
      if (!inserted) {
        return invalid_argument(str("checkpoint ", dir, ": tensor `", view.name, "` is in both ",
                                    it->second.second->source(), " and ", file.source()));
      }
    }
  }
  const std::vector<TensorSpec> specs = hf_tensor_specs(config);
  std::set<std::string> expected;
  std::vector<HostTensor> out;
  out.reserve(specs.size());
  for (const TensorSpec& spec : specs) {
    expected.insert(spec.name);
    auto it = by_name.find(spec.name);
    if (it == by_name.end()) {
      return not_found(str("checkpoint ", dir, ": tensor `", spec.name, "` is missing (expected by the ",
                           config.architecture, " config with ", config.num_layers, " layers",
                           config.tie_embeddings ? ", tied embeddings)" : ")"));
    }
    const SafetensorsFile& file = *it->second.second;
    RLRUN_ASSIGN_OR_RETURN(std::vector<float> data, file.read_f32(spec.name, spec.shape));
    out.push_back({spec.name, spec.shape, std::move(data)});
  }
  for (const auto& [name, where] : by_name) {
    if (!expected.count(name) && !ignorable_extra(name, config)) {
      return invalid_argument(str("checkpoint ", dir, ": unexpected tensor `", name, "` in ", where.second->source(),
                                  " (is config.json's architecture right? a ", config.architecture,
                                  " model has no such parameter)"));
    }
  }
  return out;
}

Result<HfCheckpoint> load_hf_checkpoint(const std::string& dir) {
  HfCheckpoint checkpoint;
  RLRUN_ASSIGN_OR_RETURN(checkpoint.config, read_hf_config((fs::path(dir) / "config.json").string()));
  RLRUN_ASSIGN_OR_RETURN(checkpoint.tensors, load_hf_checkpoint_tensors(dir, checkpoint.config));
  return checkpoint;
}

Status save_hf_checkpoint(const std::string& dir, const ModelConfig& config, std::span<const HostTensor> tensors,
                          DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return invalid_argument(str("saving checkpoint ", dir, ": dtype ", safetensors_dtype_name(dtype), " (use F32 or BF16)"));
  }
  RLRUN_ASSIGN_OR_RETURN(std::string config_json,
                         hf_config_json(config, dtype == DType::kF32 ? "float32" : "bfloat16"));
  std::map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : tensors) by_name[t.name] = &t;
  const std::vector<TensorSpec> specs = hf_tensor_specs(config);
  if (by_name.size() != tensors.size() || tensors.size() != specs.size()) {
    return invalid_argument(str("saving checkpoint ", dir, ": got ", tensors.size(), " tensors (",
                                by_name.size(), " distinct names), the model has ", specs.size()));
  }
  std::vector<const HostTensor*> ordered;  // spec order, so files are laid out the same for every caller
  for (const TensorSpec& spec : specs) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end()) return invalid_argument(str("saving checkpoint ", dir, ": tensor `", spec.name, "` is missing"));
    const HostTensor& t = *it->second;
    int64_t numel = 1;
    for (int64_t d : spec.shape) numel *= d;
    if (t.shape != spec.shape || static_cast<int64_t>(t.data.size()) != numel) {
      return invalid_argument(str("saving checkpoint ", dir, ": tensor `", spec.name, "` has shape ",
                                  shape_string(t.shape), " and ", t.data.size(), " values, expected ",
                                  shape_string(spec.shape)));
    }
    ordered.push_back(&t);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error(str("saving checkpoint: cannot create directory ", dir, ": ", ec.message()));
  // transformers refuses a safetensors file without format metadata.
  RLRUN_RETURN_IF_ERROR(write_safetensors_f32((fs::path(dir) / kSingleFile).string(), ordered, dtype, {{"format", "pt"}}));
  return write_file_atomic((fs::path(dir) / "config.json").string(), config_json);
}

}  // namespace rlrun::engine
