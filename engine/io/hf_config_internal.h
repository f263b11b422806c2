// hf_config_internal.h - JSON helpers shared by the config.json reader's files (hf_config*.cc).
// Internal to engine/io.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "engine/model/config.h"

namespace rlrun::engine::hf {

using Json = nlohmann::json;

// Upper bound for any size in config.json: keeps every shape product far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;

// True when j[key] is absent or null.
bool absent(const Json& j, const std::string& key);
// An integer in [min_value, kMaxDim]; absent/null -> fallback, or an error naming `key` when none.
Result<int64_t> get_int(const Json& j, const std::string& key, const std::string& source,
                        std::optional<int64_t> fallback, int64_t min_value = 1);
// A finite number > 0; absent/null -> fallback.
Result<double> get_positive_number(const Json& j, const std::string& key, const std::string& source, double fallback);
Result<bool> get_bool(const Json& j, const std::string& key, const std::string& source, bool fallback);
// invalid_argument "<source>: `<key>` = <value> is not supported (<supported>)".
Status refuse(const std::string& source, const std::string& key, const Json& value, const std::string& supported);

// RoPE of config.json in either format (rope_theta/rope_scaling/rope_local_base_freq of 4.x,
// rope_parameters of 5.x) into c.rope_theta, c.rope_scaling and c.rope_local_theta. `c` already
// holds the architecture and max_position (a default for yarn's original_max_position_embeddings).
Status read_rope(const Json& j, const std::string& source, ModelConfig& c);

}  // namespace rlrun::engine::hf
