// hf_export.h - the HF export inside trainer checkpoints. Its own file so that binaries which
// never export do not link the HF checkpoint code.
#pragma once

#include "engine/model/model.h"
#include "trainer/checkpoint.h"

namespace rlrun::trainer {

// A checkpoint ModelExporter (checkpoint.h) writing the model's master weights as an HF
// checkpoint (config.json + model.safetensors, engine/io/hf_checkpoint.h) in `dtype` (F32 or BF16):
// what users load with from_pretrained or start another run from (model.checkpoint). It holds a
// host copy of all weights while writing. The model must outlive the exporter.
// With low-rank adapters attached (Model::attach_lora) the folder holds the MERGED model
// (W + alpha / r B A: what any HF tool loads), and <dir>/adapter the adapters as a PEFT folder
// (engine/io/peft_adapter.h) naming `base_model` (PeftModel.from_pretrained(base, dir/adapter)).
// The base weights are restored bit for bit after the merged copy is written.
ModelExporter hf_model_exporter(engine::Model& model, engine::DType dtype = engine::DType::kF32,
                                std::string base_model = "");

}  // namespace rlrun::trainer
