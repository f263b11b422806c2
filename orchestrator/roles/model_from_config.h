// model_from_config.h - the config's `model:` section as the engine's ModelConfig.
//
// Lives in the orchestrator because common (the config) must not depend on engine. With
// model.checkpoint set, load_config() has already filled the shape from its config.json.
#pragma once

#include "common/config/config.h"
#include "engine/model/config.h"
#include "engine/tokenizer/tokenizer.h"

namespace rlrun::orchestrator {

engine::ModelConfig model_config_from(const ModelSection& model);

// The run's tokenizer: model.tokenizer (load_config() defaults it to the checkpoint's
// tokenizer.json), else the built-in small tokenizer compiled into rlrun.
Result<engine::Tokenizer> tokenizer_from(const ModelSection& model);

}  // namespace rlrun::orchestrator
