// peft_adapter.cc - PEFT LoRA folders (peft_adapter.h).
#include "engine/io/peft_adapter.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::engine {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

Shape shape_of(const std::vector<int64_t>& dims) {
  Shape s;
  s.rank = static_cast<int>(std::min<size_t>(dims.size(), Shape::kMaxRank));
  for (int i = 0; i < s.rank; ++i) s.dims[i] = dims[i];
  return s;
}

std::vector<std::string> target_names(const LoraConfig& config) {
  std::vector<std::string> out;
  for (int t = 0; t < kLoraTargets; ++t)
    if (config.targets[t]) out.push_back(lora_target_name(static_cast<LoraTarget>(t)));
  return out;
}

}  // namespace

std::string peft_adapter_config_json(const LoraConfig& config, const std::string& base_model) {
  Json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = base_model;
  j["r"] = config.rank;
  j["lora_alpha"] = config.alpha;
  j["target_modules"] = target_names(config);
  j["lora_dropout"] = 0.0;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["use_rslora"] = false;
  j["use_dora"] = false;
  j["init_lora_weights"] = true;
  j["inference_mode"] = true;
  j["modules_to_save"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["rank_pattern"] = Json::object();
  j["alpha_pattern"] = Json::object();
  return j.dump(2) + "\n";
}

Status save_peft_adapter(const std::string& dir, const ModelConfig& model, const LoraConfig& config,
                         const std::vector<HostTensor>& tensors, const std::string& base_model) {
  const std::vector<ParamInfo> layout = lora_layout(model, config);
  if (tensors.size() != layout.size())
    return invalid_argument(str("PEFT adapter: ", tensors.size(), " tensors for a layout of ", layout.size()));
  for (size_t i = 0; i < layout.size(); ++i) {
    if (tensors[i].name != layout[i].name || shape_of(tensors[i].shape) != layout[i].shape)
      return invalid_argument(str("PEFT adapter: tensor ", i, " is ", tensors[i].name, " ",
                                  shape_string(tensors[i].shape), ", the layout has ", layout[i].name, " ",
                                  layout[i].shape.str()));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return unavailable(str("cannot create ", dir, ": ", ec.message()));
  const std::filesystem::path folder(dir);
  RLRUN_RETURN_IF_ERROR(write_safetensors_f32((folder / kWeightsFile).string(), tensors, DType::kF32,
                                              {{"format", "pt"}}));
  return write_file_atomic((folder / kConfigFile).string(), peft_adapter_config_json(config, base_model));
}

Result<PeftAdapter> load_peft_adapter(const std::string& dir, const ModelConfig& model) {
  const std::string config_path = (std::filesystem::path(dir) / kConfigFile).string();
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(config_path, "the PEFT adapter config"));
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument(str(config_path, ": not a JSON object"));
  auto field = [&](const char* name) -> const Json* { return j.contains(name) ? &j.at(name) : nullptr; };
  const Json* type = field("peft_type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "LORA")
    return invalid_argument(str(config_path, ": peft_type is not \"LORA\" (rlrun reads LoRA adapters only)"));
  PeftAdapter out;
  const Json* r = field("r");
  const Json* alpha = field("lora_alpha");
  if (r == nullptr || !r->is_number_integer() || r->get<int64_t>() < 1)
    return invalid_argument(str(config_path, ": `r` must be a positive integer"));
  if (alpha == nullptr || !alpha->is_number() || !(alpha->get<double>() > 0))
    return invalid_argument(str(config_path, ": `lora_alpha` must be a positive number"));
  out.config.rank = r->get<int64_t>();
  out.config.alpha = alpha->get<double>();
  // Settings that change the math and that rlrun does not compute: refused, never ignored.
  for (const char* name : {"use_rslora", "use_dora", "fan_in_fan_out"}) {
    const Json* f = field(name);
    if (f != nullptr && !f->is_null() && !(f->is_boolean() && !f->get<bool>()))
      return invalid_argument(str(config_path, ": `", name, "` = ", f->dump(), " is not supported (false only)"));
  }
  for (const char* name : {"layers_to_transform", "modules_to_save", "layers_pattern"}) {
    const Json* f = field(name);
    if (f != nullptr && !f->is_null() && !(f->is_array() && f->empty()))
      return invalid_argument(str(config_path, ": `", name, "` = ", f->dump(), " is not supported (null only)"));
  }
  for (const char* name : {"rank_pattern", "alpha_pattern"}) {
    const Json* f = field(name);
    if (f != nullptr && !f->is_null() && !(f->is_object() && f->empty()))
      return invalid_argument(str(config_path, ": `", name, "` = ", f->dump(), " is not supported ({} only)"));
  }
  if (const Json* bias = field("bias"); bias != nullptr && !(bias->is_string() && bias->get<std::string>() == "none"))
    return invalid_argument(str(config_path, ": `bias` = ", bias->dump(), " is not supported (\"none\" only)"));
  const Json* targets = field("target_modules");
  std::string list;
  if (targets != nullptr && targets->is_string()) {
    list = targets->get<std::string>();
  } else if (targets != nullptr && targets->is_array()) {
    for (const Json& t : *targets) {
      if (!t.is_string()) return invalid_argument(str(config_path, ": `target_modules` holds a non-string"));
      if (!list.empty()) list += ',';
      list += t.get<std::string>();
    }
  } else {
    return invalid_argument(str(config_path, ": `target_modules` must be a list of module names"));
  }
  Result<std::array<bool, kLoraTargets>> parsed = parse_lora_targets(list);
  if (!parsed.ok()) return invalid_argument(str(config_path, ": ", parsed.status().message()));
  out.config.targets = *parsed;
  const std::string weights_path = (std::filesystem::path(dir) / kWeightsFile).string();
  RLRUN_ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::open(weights_path));
  for (const ParamInfo& p : lora_layout(model, out.config)) {
    const std::vector<int64_t> shape(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    RLRUN_ASSIGN_OR_RETURN(std::vector<float> values, file.read_f32(p.name, shape));
    out.tensors.push_back({p.name, shape, std::move(values)});
  }
  if (file.tensors().size() != out.tensors.size())
    return invalid_argument(str(weights_path, ": ", file.tensors().size(), " tensors where the config (r ",
                                out.config.rank, ", ", list, ") on this model has ", out.tensors.size()));
  return out;
}

}  // namespace rlrun::engine
