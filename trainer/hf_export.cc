#include "trainer/hf_export.h"

#include "engine/io/model_io.h"

namespace rlrun::trainer {

ModelExporter hf_model_exporter(engine::Model& model, engine::DType dtype) {
  return [&model, dtype](const std::string& dir) -> Status { return engine::save_weights(model, dir, dtype); };
}

}  // namespace rlrun::trainer
