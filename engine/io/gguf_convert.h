// gguf_convert.h - a llama GGUF file as an HF model folder (what `rlrun convert` writes).
//
// OUT_DIR gets: model.safetensors (fp32, dequantized) and config.json (save_hf_checkpoint),
// tokenizer.json (gguf_tokenizer_json), tokenizer_config.json (PreTrainedTokenizerFast with the
// bos/eos/pad/unk tokens and tokenizer.chat_template when the file has them) and
// generation_config.json (bos/eos ids). transformers' AutoModelForCausalLM and AutoTokenizer load
// the folder. Each file is written atomically; the folder is created if missing.
#pragma once

#include <string>

#include "common/status.h"

namespace rlrun::engine {

Status convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir);

}  // namespace rlrun::engine
