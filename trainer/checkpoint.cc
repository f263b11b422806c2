#include "trainer/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/observe/log.h"
#include "trainer/checkpoint_files.h"
#include "trainer/rank_reduce.h"

namespace rlrun::trainer {

namespace fs = std::filesystem;
using engine::CommDType;
using nlohmann::json;

namespace {

constexpr int kFormat = 2;
constexpr const char* kComplete = "COMPLETE";
constexpr const char* kState = "trainer_state.json";
constexpr const char* kFiles[3] = {"params.f32", "adam_m.f32", "adam_v.f32"};
constexpr const char* kReference = "reference.f32";


// Element ranges of the flat buffer in order, each with the rank that holds its moments.
struct OwnedRange {
  int64_t begin, end;
  int owner;
};
std::vector<OwnedRange> moment_owners(int ranks, int64_t flat, bool sharded) {
  std::vector<OwnedRange> out;
  for (int r = 0; r < (sharded ? ranks : 1); ++r) {
    for (const auto& [b, e] : Optimizer::owned_ranges_of(r, ranks, flat, sharded)) out.push_back({b, e, r});
  }
  std::sort(out.begin(), out.end(), [](const OwnedRange& a, const OwnedRange& b) { return a.begin < b.begin; });
  return out;
}

// Rank 0 writes the three files in element order. Params come from rank 0's full master, or from
// their owners when the optimizer keeps the master of its shard only; moments always come from
// their owners (every rank takes part in the broadcasts). `files` (rank 0) are the three writers.
Status write_state(TrainableModel& model, Optimizer& optimizer, engine::Communicator* comm, FileWriter* files,
                   Status& root_status) {
  const int rank = comm_rank(comm), ranks = comm_size(comm);
  const bool params_from_owner = optimizer.keeps_master();
  const engine::Tensor params = params_from_owner ? engine::Tensor() : model.params_flat();
  std::vector<float> p, m, v;
  for (const OwnedRange& r : moment_owners(ranks, model.flat_size(), optimizer.sharded())) {
    for (int64_t b = r.begin; b < r.end; b += kCheckpointChunkElements) {
      const int64_t e = std::min(r.end, b + kCheckpointChunkElements);
      p.resize(static_cast<size_t>(e - b));
      m.resize(p.size());
      v.resize(p.size());
      if (rank == (params_from_owner ? r.owner : 0)) optimizer.copy_master_to_host(params, b, e, p.data());
      if (rank == r.owner) optimizer.copy_moments_to_host(b, e, m.data(), v.data());
      if (r.owner != 0) {
        if (params_from_owner) RLRUN_RETURN_IF_ERROR(comm->broadcast(p.data(), p.size(), CommDType::kF32, r.owner));
        RLRUN_RETURN_IF_ERROR(comm->broadcast(m.data(), m.size(), CommDType::kF32, r.owner));
        RLRUN_RETURN_IF_ERROR(comm->broadcast(v.data(), v.size(), CommDType::kF32, r.owner));
      }
      std::vector<float>* data[3] = {&p, &m, &v};
      for (int i = 0; i < 3 && rank == 0 && root_status.ok(); ++i) {
        root_status = files[i].write(data[i]->data(), data[i]->size() * sizeof(float));
      }
    }
  }
  return Status();
}

// Rank 0: the KL reference's weights, widened to f32, in chunks. Every rank holds the same copy.
Result<FileDigest> write_reference(const std::string& tmp, TrainableModel& reference) {
  FileWriter file;
  RLRUN_RETURN_IF_ERROR(file.open(tmp + "/" + kReference));
  const engine::Tensor& weights = reference.weights_flat();
  reference.backend().synchronize();
  for (int64_t b = 0; b < reference.flat_size(); b += kCheckpointChunkElements) {
    const int64_t e = std::min(reference.flat_size(), b + kCheckpointChunkElements);
    const std::vector<float> chunk = engine::to_host_f32(weights.rows(b, e));
    RLRUN_RETURN_IF_ERROR(file.write(chunk.data(), chunk.size() * sizeof(float)));
  }
  RLRUN_RETURN_IF_ERROR(file.finish());
  return FileDigest{kReference, file.bytes(), file.checksum()};
}

Result<json> parse_extras(const CheckpointExtras& extras) {
  json loader = json::parse(extras.loader_state, nullptr, /*allow_exceptions=*/false);
  if (loader.is_discarded()) return invalid_argument("checkpoint: loader_state is not valid JSON text");
  return loader;
}

// Rank 0: everything after the data files: export, trainer_state.json, the manifest (COMPLETE)
// of every file, rename, fsync. `data`: the digests of the streamed data files.
Status finish_on_root(const std::string& root, const std::string& tmp, const std::string& final_dir, json state,
                      std::vector<FileDigest> data, const CheckpointOptions& options) {
  if (options.export_model) {
    std::error_code ec;
    fs::create_directories(tmp + "/model", ec);
    if (ec) return io_error(str("cannot create ", tmp, "/model: ", describe_file_error(ec.value())));
    RLRUN_RETURN_IF_ERROR(options.export_model(tmp + "/model").with_context("checkpoint model export"));
  }
  RLRUN_RETURN_IF_ERROR(write_file_atomic(tmp + "/" + kState, state.dump(2)));
  std::vector<FileDigest> files = std::move(data);
  RLRUN_ASSIGN_OR_RETURN(FileDigest state_digest, digest_file(tmp, kState));
  files.push_back(std::move(state_digest));
  if (options.export_model) {
    RLRUN_ASSIGN_OR_RETURN(std::vector<FileDigest> model, digest_tree(tmp, "model"));
    files.insert(files.end(), model.begin(), model.end());
  }
  RLRUN_RETURN_IF_ERROR(write_manifest(tmp, files));
  RLRUN_RETURN_IF_ERROR(fsync_directory(tmp));
  std::error_code ec;
  fs::remove_all(final_dir, ec);  // the same step saved again
  fs::rename(tmp, final_dir, ec);
  if (ec) return io_error(str("cannot rename ", tmp, " to ", final_dir, ": ", describe_file_error(ec.value())));
  RLRUN_RETURN_IF_ERROR(fsync_directory(root));
  return Status();
}

// Parses "step-000123" (digits only) into 123.
std::optional<int64_t> step_of(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step-") != 0 || name.size() > 5 + 18) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Removes *.tmp leftovers, torn checkpoints and complete ones beyond keep_last (oldest first).
void prune(const std::string& root, int64_t keep_last) {
  std::vector<std::pair<int64_t, fs::path>> complete;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const bool tmp = name.size() > 4 && name.substr(name.size() - 4) == ".tmp" && step_of(name.substr(0, name.size() - 4));
    const auto step = step_of(name);
    std::error_code rm;
    if (tmp || (step && !fs::exists(entry.path() / kComplete))) {
      fs::remove_all(entry.path(), rm);
    } else if (step) {
      complete.push_back({*step, entry.path()});
    }
  }
  if (keep_last <= 0 || static_cast<int64_t>(complete.size()) <= keep_last) return;
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < complete.size(); ++i) {
    std::error_code rm;
    fs::remove_all(complete[i].second, rm);
  }
}

}  // namespace

std::string checkpoint_dir(const std::string& root, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%06lld", static_cast<long long>(step));
  return (fs::path(root) / name).string();
}

std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto step = step_of(entry.path().filename().string());
    std::error_code e2;
    if (step && entry.is_directory(e2) && fs::exists(entry.path() / kComplete, e2)) found.push_back({*step, entry.path().string()});
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& [step, dir] : found) out.push_back(std::move(dir));
  return out;
}

Result<std::string> save_checkpoint(const std::string& root, int64_t step, const CheckpointExtras& extras,
                                    TrainableModel& model, Optimizer& optimizer, engine::Communicator* comm,
                                    const CheckpointOptions& options) {
  const bool is_root = comm_rank(comm) == 0;
  const std::string final_dir = checkpoint_dir(root, step), tmp = final_dir + ".tmp";
  // Every failure (the same on every rank) removes the partial folder: a full disk needs its
  // space back, and the previous checkpoints stay as they were.
  const auto failed = [&](const Status& s) {
    std::error_code ec;
    if (is_root) fs::remove_all(tmp, ec);
    return s.with_context("saving checkpoint " + final_dir);
  };
  Status status;
  Result<json> loader = parse_extras(extras);
  if (!loader.ok()) status = loader.status();
  FileWriter files[3];
  if (is_root && status.ok()) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) status = io_error(str("cannot create checkpoint directory ", tmp, ": ", describe_file_error(ec.value())));
    for (int i = 0; i < 3 && status.ok(); ++i) status = files[i].open(tmp + "/" + kFiles[i]);
  }
  if (Status agreed = agree_with_root(comm, status); !agreed.ok()) return failed(agreed);
  if (Status sent = write_state(model, optimizer, comm, files, status); !sent.ok()) return failed(sent);
  if (is_root && status.ok()) {
    for (int i = 0; i < 3 && status.ok(); ++i) status = files[i].finish();
  }
  if (is_root && status.ok()) {
    json state = {{"format", kFormat},
                  {"step", step},
                  {"optimizer_step", optimizer.step_count()},
                  {"learning_rate", options.learning_rate},
                  {"trainer_ranks", comm_size(comm)},
                  {"use_distributed_optimizer", optimizer.sharded()},
                  {"flat_elements", model.flat_size()},
                  {"layout_digest", engine::layout_digest({model.param_specs(), model.flat_size(), "f32"})},
                  {"loader_state", *loader},
                  {"rng_state", extras.rng_state},
                  {"reference", options.reference != nullptr}};
    std::vector<FileDigest> data;
    for (int i = 0; i < 3; ++i) data.push_back({kFiles[i], files[i].bytes(), files[i].checksum()});
    if (options.reference != nullptr) {
      Result<FileDigest> reference = write_reference(tmp, *options.reference);
      if (reference.ok()) {
        data.push_back(std::move(reference).value());
      } else {
        status = reference.status();
      }
    }
    if (status.ok()) status = finish_on_root(root, tmp, final_dir, std::move(state), std::move(data), options);
    if (status.ok()) prune(root, options.keep_last);
  }
  if (Status agreed = agree_with_root(comm, status); !agreed.ok()) return failed(agreed);
  return final_dir;
}

}  // namespace rlrun::trainer
