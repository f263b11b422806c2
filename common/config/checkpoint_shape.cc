// model.checkpoint: the model's shape comes from the checkpoint, read by the registered
// CheckpointReader (the engine's one reader of config.json and .gguf files: engine/io/hf_config.h),
// which refuses what the engine cannot compute and returns the config.json of its verdict.
//
// Design choice: explicit shape keys next to model.checkpoint are an error, not an override. A
// shape that disagrees with the weights cannot load, so a silent override would only move the
// failure later and make it less clear.
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>

#include "common/config/load.h"
#include "common/config/schema.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;

// The model keys that config.json gives.
constexpr std::string_view kShapeKeys[] = {
    "architecture", "hidden_size", "num_layers",     "num_heads",      "num_kv_heads",
    "intermediate_size", "vocab_size", "rope_theta", "rms_norm_eps", "tie_embeddings",
    "qkv_bias",     "max_position"};

const std::string kOrigin = "model.checkpoint config.json";

std::atomic<CheckpointReader> checkpoint_reader{nullptr};

// Reads config.json fields into config.model, checking each against its key's range.
class HfConfigReader {
 public:
  HfConfigReader(ConfigLoad& load, const nlohmann::json& json, std::string file)
      : load_(load), json_(json), file_(std::move(file)) {}

  // json field `field` -> model key `key`; `fallback` (text) when absent, error when required.
  void read(std::string_view field, std::string_view key, const char* fallback) {
    const KeySpec* spec = find_key(ConfigSection::kModel, key);
    std::string text;
    auto it = json_.find(std::string(field));
    if (it == json_.end() || it->is_null()) {
      if (fallback == nullptr) {
        load_.error(file_, str("has no `", field, "`, needed for `model.", key, "`"));
        return;
      }
      text = fallback;
    } else if (it->is_number() || it->is_boolean()) {
      text = it->dump();
    } else {
      load_.error(file_, str("`", field, "` should be a number or boolean, not ", it->dump()));
      return;
    }
    Result<ConfigValue> value = parse_config_value(*spec, text);
    if (!value.ok()) {
      load_.error(file_, str("`", field, "`: ", value.status().message()));
      return;
    }
    spec->set(load_.config, *value);
    load_.origins[spec->dotted_name()] = kOrigin;
  }

 private:
  ConfigLoad& load_;
  const nlohmann::json& json_;
  std::string file_;
};

// The architecture of the reader's config.json: its model_type.
void read_architecture(ConfigLoad& load, const nlohmann::json& json, const std::string& file) {
  auto type_it = json.find("model_type");
  const std::string model_type =
      type_it != json.end() && type_it->is_string() ? type_it->get<std::string>() : std::string();
  ModelSection& m = load.config.model;
  if (model_type == "llama") m.architecture = Architecture::kLlama;
  else if (model_type == "qwen2") m.architecture = Architecture::kQwen2;
  else if (model_type == "qwen3") m.architecture = Architecture::kQwen3;
  else if (model_type == "gemma3_text" || model_type == "gemma3") m.architecture = Architecture::kGemma3;
  else {
    load.error(file, str("`model_type` is `", model_type, "`; rlrun supports llama, qwen2, qwen3 and gemma3_text"));
    return;
  }
  load.origins["model.architecture"] = kOrigin;
}

void read_hf_config(ConfigLoad& load, const nlohmann::json& json, const std::string& file) {
  ModelSection& m = load.config.model;
  read_architecture(load, json, file);
  HfConfigReader r(load, json, file);
  r.read("hidden_size", "hidden_size", nullptr);
  r.read("num_hidden_layers", "num_layers", nullptr);
  r.read("num_attention_heads", "num_heads", nullptr);
  r.read("intermediate_size", "intermediate_size", nullptr);
  r.read("vocab_size", "vocab_size", nullptr);
  // HF's defaults where a field may be left out.
  const std::string heads = json.contains("num_attention_heads")
                                ? json["num_attention_heads"].dump()
                                : std::string("1");
  r.read("num_key_value_heads", "num_kv_heads", heads.c_str());
  r.read("rope_theta", "rope_theta", "10000.0");
  r.read("rms_norm_eps", "rms_norm_eps", "1e-6");
  r.read("tie_word_embeddings", "tie_embeddings", "false");
  r.read("max_position_embeddings", "max_position", "2048");
  // qwen2 always has q/k/v biases; the others never (the reader refuses attention_bias: true).
  m.qkv_bias = m.architecture == Architecture::kQwen2;
  load.origins["model.qkv_bias"] = kOrigin;
}

}  // namespace

bool is_checkpoint_shape_key(std::string_view model_key) {
  for (std::string_view k : kShapeKeys)
    if (k == model_key) return true;
  return false;
}

void set_checkpoint_reader(CheckpointReader reader) { checkpoint_reader.store(reader); }

void resolve_model_checkpoint(ConfigLoad& load) {
  ModelSection& m = load.config.model;
  if (m.checkpoint.empty()) return;
  const std::string where = load.origin("model.checkpoint");
  for (std::string_view k : kShapeKeys) {
    const std::string dotted = str("model.", k);
    const std::string origin = load.origin(dotted);
    if (origin.empty()) continue;
    load.error(origin, str("`", dotted, "` cannot be set together with `model.checkpoint` (",
                           where, "): the checkpoint's config.json gives the shape; remove `",
                           dotted, "`"));
  }
  for (std::string_view k : kShapeKeys) load.rejected.insert(str("model.", k));

  const fs::path folder(m.checkpoint);
  std::error_code ec;
  const bool is_file = fs::is_regular_file(folder, ec);
  if (!is_file && !fs::is_directory(folder, ec)) {
    load.error(where, str("`model.checkpoint` = `", m.checkpoint, "` is not an existing folder or file",
                          " (an HF model folder with config.json, or a .gguf file)"));
    return;
  }
  const std::string file = is_file ? folder.string() : (folder / "config.json").string();
  if (!is_file && !fs::is_regular_file(file, ec)) {
    load.error(where, str("`model.checkpoint`: `", file, "` does not exist; the folder must hold an HF config.json"));
    return;
  }
  const CheckpointReader reader = checkpoint_reader.load();
  if (reader == nullptr) {
    load.error(where, str("`model.checkpoint` = `", m.checkpoint, "`: this program reads no checkpoints"));
    return;
  }
  Result<std::string> text = reader(m.checkpoint);
  if (!text.ok()) {
    load.error(where, str("`model.checkpoint`: ", text.status().message()));
    return;
  }
  const nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (is_file && m.tokenizer.empty()) {  // a model file (.gguf) is its own tokenizer
    m.tokenizer = file;
    load.origins["model.tokenizer"] = "model.checkpoint";
  }
  if (json.is_discarded() || !json.is_object()) {
    load.error(where, str("`model.checkpoint`: `", file, "` is not a JSON object"));
    return;
  }
  const size_t errors_before = load.errors.size();
  read_hf_config(load, json, file);
  if (load.errors.size() == errors_before) {
    for (std::string_view k : kShapeKeys) load.rejected.erase(str("model.", k));
  }
  const fs::path tokenizer = folder / "tokenizer.json";
  if (m.tokenizer.empty() && fs::is_regular_file(tokenizer, ec)) {
    m.tokenizer = tokenizer.string();
    load.origins["model.tokenizer"] = "model.checkpoint";
  }
}

}  // namespace rlrun
