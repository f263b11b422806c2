// hf_config_rope.cc - RoPE from config.json, transformers 4.x and 5.x (hf_config_internal.h).
//
// 4.x: `rope_theta`, `rope_scaling` {"rope_type" (or "type"), "factor", ...}, and gemma3's
//      `rope_local_base_freq`.
// 5.x: `rope_parameters` {"rope_type", "rope_theta", ...}, or for gemma3 nested per layer type
//      {"full_attention": {...}, "sliding_attention": {...}}.
// As transformers 5 does (configuration_utils / modeling_rope_utils): a non-null `rope_scaling`
// wins over a flat `rope_parameters` and updates gemma3's "full_attention" entry; a missing
// rope_theta falls back to the top-level `rope_theta`, then the architecture's default.
#include <cmath>
#include <set>

#include "common/observe/log.h"
#include "engine/io/hf_config_internal.h"

namespace rlrun::engine::hf {
namespace {

const std::set<std::string> kRopeKeys = {"rope_type", "type", "rope_theta", "factor",
                                         "original_max_position_embeddings", "low_freq_factor",
                                         "high_freq_factor", "beta_fast", "beta_slow", "attention_factor",
                                         "mscale", "mscale_all_dim", "truncate", "partial_rotary_factor"};

// HF's yarn get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

Result<double> number_in(const Json& d, const std::string& key, const std::string& where, double fallback) {
  if (absent(d, key)) return fallback;
  if (!d[key].is_number() || !std::isfinite(d[key].get<double>()))
    return invalid_argument(str(where, ".", key, "` must be a number, got ", d[key].dump()));
  return d[key].get<double>();
}

// One rope dict (`name` is its path for messages, e.g. "rope_scaling") into `s`; `theta` is set
// when the dict has rope_theta.
Status read_rope_dict(const Json& d, const std::string& source, const std::string& name, const ModelConfig& c,
                      RopeScaling& s, double& theta) {
  const std::string where = str(source, ": `", name);
  if (!d.is_object()) return invalid_argument(str(where, "` must be an object or null, got ", d.dump()));
  for (const auto& [key, value] : d.items()) {
    if (!kRopeKeys.count(key))
      return invalid_argument(str(where, ".", key, "` = ", value.dump(), " is not a RoPE parameter rlrun knows; it ",
                                  "may change the positions' math, so the checkpoint is refused"));
  }
  const std::string type_key = d.contains("rope_type") ? "rope_type" : "type";
  std::string type = "default";
  if (!absent(d, type_key)) {
    if (!d[type_key].is_string()) return invalid_argument(str(where, ".", type_key, "` must be a string"));
    type = d[type_key].get<std::string>();
  }
  if (type != "default" && type != "linear" && type != "dynamic" && type != "llama3" && type != "yarn")
    return refuse(source, name + "." + type_key, d[type_key],
                  "supported RoPE types: default, linear, dynamic, llama3, yarn");
  RLRUN_ASSIGN_OR_RETURN(const double partial, number_in(d, "partial_rotary_factor", where, 1.0));
  if (partial != 1.0)
    return refuse(source, name + ".partial_rotary_factor", d["partial_rotary_factor"], "only 1: RoPE over whole heads");
  if (!absent(d, "rope_theta")) {
    RLRUN_ASSIGN_OR_RETURN(theta, get_positive_number(d, "rope_theta", where, 0.0));
  }
  s = RopeScaling{};
  s.type = type;
  if (type == "default") return Status();
  if (absent(d, "factor") && type != "yarn") return invalid_argument(str(where, "` of type ", type, " needs `factor`"));
  const double mpos = static_cast<double>(c.max_position);
  RLRUN_ASSIGN_OR_RETURN(s.original_max_position,
                         get_int(d, "original_max_position_embeddings", where, c.max_position));
  RLRUN_ASSIGN_OR_RETURN(s.factor, number_in(d, "factor", where, mpos / static_cast<double>(s.original_max_position)));
  if (!(s.factor > 0)) return refuse(source, name + ".factor", d["factor"], "a factor > 0");
  if (type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (absent(d, k)) return invalid_argument(str(where, "` of type llama3 needs `", k, "`"));
    RLRUN_ASSIGN_OR_RETURN(s.low_freq_factor, number_in(d, "low_freq_factor", where, 1.0));
    RLRUN_ASSIGN_OR_RETURN(s.high_freq_factor, number_in(d, "high_freq_factor", where, 4.0));
    if (!(s.high_freq_factor > s.low_freq_factor) || !(s.low_freq_factor > 0))
      return invalid_argument(str(where, "`: llama3 needs 0 < low_freq_factor < high_freq_factor"));
  }
  if (type == "yarn") {
    RLRUN_ASSIGN_OR_RETURN(s.beta_fast, number_in(d, "beta_fast", where, 32.0));
    RLRUN_ASSIGN_OR_RETURN(s.beta_slow, number_in(d, "beta_slow", where, 1.0));
    if (s.beta_fast == 0) s.beta_fast = 32.0;  // HF: `get("beta_fast") or 32`
    if (s.beta_slow == 0) s.beta_slow = 1.0;
    RLRUN_ASSIGN_OR_RETURN(const double mscale, number_in(d, "mscale", where, 0.0));
    RLRUN_ASSIGN_OR_RETURN(const double mscale_all_dim, number_in(d, "mscale_all_dim", where, 0.0));
    const double derived = mscale != 0 && mscale_all_dim != 0
                               ? yarn_mscale(s.factor, mscale) / yarn_mscale(s.factor, mscale_all_dim)
                               : yarn_mscale(s.factor, 1.0);
    RLRUN_ASSIGN_OR_RETURN(s.attention_factor, number_in(d, "attention_factor", where, derived));
    RLRUN_ASSIGN_OR_RETURN(s.truncate, get_bool(d, "truncate", where, true));
  }
  return Status();
}

}  // namespace

Status read_rope(const Json& j, const std::string& source, ModelConfig& c) {
  const bool gemma = c.architecture == "gemma3";
  RLRUN_ASSIGN_OR_RETURN(c.rope_theta, get_positive_number(j, "rope_theta", source, gemma ? 1e6 : 1e4));
  c.rope_local_theta = 0;
  if (gemma) {
    RLRUN_ASSIGN_OR_RETURN(c.rope_local_theta, get_positive_number(j, "rope_local_base_freq", source, 1e4));
  } else if (!absent(j, "rope_local_base_freq")) {
    return refuse(source, "rope_local_base_freq", j["rope_local_base_freq"], "a gemma3 field");
  }
  const Json null;
  const Json& scaling = absent(j, "rope_scaling") ? null : j["rope_scaling"];
  const Json& params = absent(j, "rope_parameters") ? null : j["rope_parameters"];
  const bool nested = params.is_object() && (params.contains("full_attention") || params.contains("sliding_attention"));
  if (nested && !gemma) {
    return refuse(source, "rope_parameters", params, "per-layer-type RoPE only for gemma3");
  }
  Json full = nested ? (absent(params, "full_attention") ? Json::object() : params["full_attention"]) : params;
  std::string full_name = nested ? "rope_parameters.full_attention" : "rope_parameters";
  if (!scaling.is_null()) {
    if (nested && full.is_object() && scaling.is_object()) {
      full.update(scaling);
    } else {
      full = scaling;
      full_name = "rope_scaling";
    }
  }
  if (!full.is_null()) RLRUN_RETURN_IF_ERROR(read_rope_dict(full, source, full_name, c, c.rope_scaling, c.rope_theta));
  if (nested && !absent(params, "sliding_attention")) {
    RopeScaling local;
    double local_theta = c.rope_local_theta;
    RLRUN_RETURN_IF_ERROR(read_rope_dict(params["sliding_attention"], source, "rope_parameters.sliding_attention", c,
                                         local, local_theta));
    if (local.type != "default")
      return refuse(source, "rope_parameters.sliding_attention.rope_type", Json(local.type),
                    "sliding layers with plain RoPE only");
    c.rope_local_theta = local_theta;
  }
  return Status();
}

}  // namespace rlrun::engine::hf
