// checkpoint.h - trainer checkpoints that survive a crash at any instant, are verified before
// use, and resume bit for bit.
//
// A checkpoint is a directory <root>/step-000123/ (the trainer step, 6+ digits):
//   trainer_state.json  format, step, optimizer_step (the LR schedule is a pure function of it:
//                       trainer/lr_schedule.h), last learning_rate, trainer ranks and
//                       use_distributed_optimizer at save time (informational), flat_elements,
//                       layout digest, and the caller's loader_state (opaque JSON text) and
//                       rng_state (opaque text)
//   params.f32          the f32 master weights (P), raw little-endian, GATHERED from the shards
//                       when the distributed optimizer keeps the master of its shard only
//   adam_m.f32, adam_v.f32  the AdamW moments (P each), GATHERED from the shards: a checkpoint
//                       does not depend on trainer_num_workers or use_distributed_optimizer, and
//                       only trainer rank 0 touches the file system (no shared FS needed)
//   reference.f32       the KL reference's weights (P, f32; kl_coef > 0 only: train_step.h
//                       set_reference), written by rank 0 from its own copy
//   model/              HF export (config.json + model.safetensors) when an exporter is given
//   COMPLETE            the manifest, written last: every file above with its size and XXH3-64
//                       checksum (trainer/checkpoint_files.h)
// Everything is written into step-000123.tmp/ (each file fsync'd), then COMPLETE, then the
// directory is renamed to step-000123/ and the root fsync'd. A crash leaves at worst a *.tmp
// directory, which is never used and the next save removes; the previous checkpoint stays
// intact. A save that fails (disk full, no permission) removes its *.tmp directory and returns an
// error naming the path; the previous checkpoints are untouched. checkpoint_keep_last prunes the
// oldest complete checkpoints after a successful save only.
//
// A checkpoint is used only when every file matches the manifest: verify_checkpoint() reads them
// all; load_checkpoint() checks the manifest and checksums what it loads.
//
// Save and load are collective over the trainer ranks: master and moments stream through rank 0 in chunks
// of kCheckpointChunkElements (memory bounded by the chunk, not by P). On load rank 0 validates
// the files (sizes, checksums, layout) and broadcasts the data; every rank returns the same
// Status. Files are untrusted on load: errors name the file and what is wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/comm/communicator.h"
#include "trainer/optimizer.h"
#include "trainer/trainable_model.h"

namespace rlrun::trainer {

constexpr int64_t kCheckpointChunkElements = int64_t{4} << 20;  // 16 MiB of f32

struct CheckpointExtras {
  std::string loader_state = "null";  // JSON text: the data loader's position (caller's format)
  std::string rng_state;              // opaque: the caller's RNG state
};

struct CheckpointInfo {
  std::string dir;
  int64_t step = 0;
  int64_t optimizer_step = 0;
  double learning_rate = 0.0;
  CheckpointExtras extras;
  bool reference_loaded = false;  // the `reference` given to load_checkpoint now holds the saved one
};

// Writes the HF export of the current weights into `dir` (called on rank 0 only).
using ModelExporter = std::function<Status(const std::string& dir)>;

struct CheckpointOptions {
  int64_t keep_last = 2;  // checkpoint_keep_last: complete checkpoints kept, 0 = all
  ModelExporter export_model;  // may be empty
  double learning_rate = 0.0;  // informational
  TrainableModel* reference = nullptr;  // saved as reference.f32 when given (the same on every rank)
};

// "<root>/step-000123"
std::string checkpoint_dir(const std::string& root, int64_t step);

// Collective. Returns the final directory (on every rank).
Result<std::string> save_checkpoint(const std::string& root, int64_t step, const CheckpointExtras& extras,
                                    TrainableModel& model, Optimizer& optimizer, engine::Communicator* comm,
                                    const CheckpointOptions& options = {});

// The checkpoint directories under root that have a COMPLETE manifest, newest (highest step)
// first; none when root is missing. *.tmp directories and torn ones are skipped; the files are
// not read (verify_checkpoint does).
std::vector<std::string> complete_checkpoints(const std::string& root);

// Reads every file of the checkpoint `dir` and checks it against the manifest. An error (naming
// the file: missing manifest, truncated, checksum mismatch) means: do not use this checkpoint.
Status verify_checkpoint(const std::string& dir);

// The manifest of the complete checkpoint `dir` (step, optimizer step, extras) without its data:
// for a process that resumes a run but holds no model (the orchestrator). Errors name the file.
Result<CheckpointInfo> read_checkpoint_info(const std::string& dir);

// Collective. Loads weights (the compute weights, the model's master or the optimizer's shard of
// it) and optimizer state (grads are zeroed) from `dir`, whatever ranks and mode saved it. With a
// `reference` (the same layout as `model`) and a checkpoint that saved one, also the KL
// reference's weights (CheckpointInfo::reference_loaded).
Result<CheckpointInfo> load_checkpoint(const std::string& dir, TrainableModel& model, Optimizer& optimizer,
                                       engine::Communicator* comm, TrainableModel* reference = nullptr);

}  // namespace rlrun::trainer
