// load_checkpoint (checkpoint.h): rank 0 checks the manifest, then streams the files to every rank,
// checksumming them; verify_checkpoint and read_checkpoint_info for a process without the model.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/observe/log.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_files.h"
#include "trainer/rank_reduce.h"

namespace rlrun::trainer {

using engine::CommDType;
using nlohmann::json;

namespace {

constexpr const char* kFiles[3] = {"params.f32", "adam_m.f32", "adam_v.f32"};
constexpr const char* kReference = "reference.f32";
constexpr const char* kState = "trainer_state.json";
constexpr int kFormat = 2;
constexpr int64_t kMaxStateBytes = int64_t{64} << 20;

// A checkpoint's manifest and its trainer_state.json, checked against it.
struct Manifest {
  std::vector<FileDigest> files;
  json state;
};

Result<FileDigest> listed(const std::string& dir, const std::vector<FileDigest>& files, const std::string& path) {
  for (const FileDigest& f : files)
    if (f.path == path) return f;
  return invalid_argument(str(dir, "/COMPLETE does not list ", path, " (a corrupt manifest)"));
}

Result<Manifest> read_manifest_and_state(const std::string& dir) {
  Manifest m;
  RLRUN_ASSIGN_OR_RETURN(m.files, read_manifest(dir));
  RLRUN_ASSIGN_OR_RETURN(const FileDigest digest, listed(dir, m.files, kState));
  const std::string path = dir + "/" + kState;
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_text_file(path, kMaxStateBytes));
  Checksum sum;
  sum.update(text.data(), text.size());
  if (static_cast<int64_t>(text.size()) != digest.bytes || sum.value() != digest.xxh3)
    return invalid_argument(str(path, ": checksum mismatch with the manifest (the file is corrupt)"));
  m.state = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.state.is_discarded() || !m.state.is_object()) return invalid_argument(str(path, ": not a JSON object"));
  const auto format = m.state.find("format");
  if (format == m.state.end() || *format != kFormat)
    return invalid_argument(str(path, ": checkpoint format ", format == m.state.end() ? "missing" : format->dump(),
                                ", this rlrun reads ", kFormat));
  return m;
}

// Rank 0: reads and checks the manifest and trainer_state.json, and opens the data files.
// `sums`: the data files' checksums from the manifest, checked once they are read.
Result<json> open_on_root(const std::string& dir, TrainableModel& model, FileReader* readers, uint64_t* sums) {
  RLRUN_ASSIGN_OR_RETURN(Manifest manifest, read_manifest_and_state(dir));
  const json& m = manifest.state;
  const std::string path = dir + "/" + kState;
  const int64_t flat = model.flat_size();
  try {
    if (m.at("flat_elements").get<int64_t>() != flat) {
      return invalid_argument(str(path, ": the checkpoint holds ", m.at("flat_elements"), " parameters, this model ",
                                  flat, " (another model config?)"));
    }
    if (m.at("layout_digest").get<uint64_t>() != engine::layout_digest({model.param_specs(), flat, "f32"})) {
      return invalid_argument(str(path, ": the parameter layout (names, shapes) differs from this model's"));
    }
    (void)m.at("step").get<int64_t>();
    if (m.at("optimizer_step").get<int64_t>() < 0) return invalid_argument(str(path, ": negative optimizer_step"));
    (void)m.at("rng_state").get<std::string>();
    if (m.contains("reference")) (void)m.at("reference").get<bool>();
  } catch (const json::exception& e) {
    return invalid_argument(str(path, ": missing or mistyped field (", e.what(), ")"));
  }
  for (int i = 0; i < 3; ++i) {
    RLRUN_ASSIGN_OR_RETURN(const FileDigest digest, listed(dir, manifest.files, kFiles[i]));
    RLRUN_RETURN_IF_ERROR(readers[i].open(dir + "/" + kFiles[i]));
    const int64_t want = flat * static_cast<int64_t>(sizeof(float));
    if (readers[i].size() != want || digest.bytes != want) {
      return invalid_argument(str(dir, "/", kFiles[i], " is ", readers[i].size(), " bytes, expected ", want));
    }
    sums[i] = digest.xxh3;
  }
  return m;
}

// Rank 0 reads chunk [b, e) of the three files and broadcasts it; every rank keeps the weights
// (and the model's full master, if apart) and the master shard and moments it owns. A read error on
// rank 0 is remembered (zeros are sent) and reported after.
Status stream_state(TrainableModel& model, Optimizer& optimizer, engine::Communicator* comm, FileReader* readers,
                    Status& root_status) {
  const bool is_root = comm_rank(comm) == 0;
  const int64_t flat = model.flat_size();
  std::vector<float> buf[3];
  for (int64_t b = 0; b < flat; b += kCheckpointChunkElements) {
    const int64_t e = std::min(flat, b + kCheckpointChunkElements);
    for (int i = 0; i < 3; ++i) {
      buf[i].assign(static_cast<size_t>(e - b), 0.0f);
      if (is_root && root_status.ok()) root_status = readers[i].read(buf[i].data(), buf[i].size() * sizeof(float));
      if (comm_size(comm) > 1) RLRUN_RETURN_IF_ERROR(comm->broadcast(buf[i].data(), buf[i].size(), CommDType::kF32, 0));
    }
    const engine::Tensor& weights = model.weights_flat();
    const engine::Tensor& params = model.params_flat();
    engine::copy_from_host_f32(weights.rows(b, e), buf[0]);  // rounded when the weights are bf16
    if (params.defined() && params.data() != weights.data()) {
      model.backend().copy_from_host(params.rows(b, e), buf[0].data(), buf[0].size() * sizeof(float));
    }
    for (const auto& [ob, oe] : optimizer.owned_ranges()) {
      const int64_t lo = std::max(b, ob), hi = std::min(e, oe);
      if (lo >= hi) continue;
      if (optimizer.keeps_master()) optimizer.copy_master_from_host(lo, hi, buf[0].data() + (lo - b));
      optimizer.copy_moments_from_host(lo, hi, buf[1].data() + (lo - b), buf[2].data() + (lo - b));
    }
  }
  return Status();
}

// Collective: the KL reference's weights from reference.f32 (rank 0 reads, checks size and
// checksum against the manifest, broadcasts chunks; every rank keeps them).
Status load_reference(const std::string& dir, TrainableModel& reference, engine::Communicator* comm) {
  const bool is_root = comm_rank(comm) == 0;
  const int64_t flat = reference.flat_size();
  FileReader reader;
  uint64_t sum = 0;
  Status status;
  if (is_root) {
    const auto opened = [&]() -> Status {
      RLRUN_ASSIGN_OR_RETURN(const std::vector<FileDigest> files, read_manifest(dir));
      RLRUN_ASSIGN_OR_RETURN(const FileDigest digest, listed(dir, files, kReference));
      RLRUN_RETURN_IF_ERROR(reader.open(dir + "/" + kReference));
      const int64_t want = flat * static_cast<int64_t>(sizeof(float));
      if (reader.size() != want || digest.bytes != want)
        return invalid_argument(str(dir, "/", kReference, " is ", reader.size(), " bytes, expected ", want));
      sum = digest.xxh3;
      return Status();
    };
    status = opened();
  }
  RLRUN_RETURN_IF_ERROR(agree_with_root(comm, status));
  std::vector<float> buf;
  for (int64_t b = 0; b < flat; b += kCheckpointChunkElements) {
    const int64_t e = std::min(flat, b + kCheckpointChunkElements);
    buf.assign(static_cast<size_t>(e - b), 0.0f);
    if (is_root && status.ok()) status = reader.read(buf.data(), buf.size() * sizeof(float));
    if (comm_size(comm) > 1) RLRUN_RETURN_IF_ERROR(comm->broadcast(buf.data(), buf.size(), CommDType::kF32, 0));
    engine::copy_from_host_f32(reference.weights_flat().rows(b, e), buf);
  }
  if (is_root && status.ok() && reader.checksum() != sum)
    status = invalid_argument(str(dir, "/", kReference, ": checksum mismatch (the file is corrupt)"));
  return agree_with_root(comm, status);
}

}  // namespace

Status verify_checkpoint(const std::string& dir) {
  RLRUN_ASSIGN_OR_RETURN(const std::vector<FileDigest> files, read_manifest(dir));
  for (const FileDigest& f : files) RLRUN_RETURN_IF_ERROR(verify_file(dir, f));
  return Status();
}

Result<CheckpointInfo> read_checkpoint_info(const std::string& dir) {
  RLRUN_ASSIGN_OR_RETURN(const Manifest manifest, read_manifest_and_state(dir));
  const json& m = manifest.state;
  CheckpointInfo info;
  info.dir = dir;
  try {
    info.step = m.at("step").get<int64_t>();
    info.optimizer_step = m.at("optimizer_step").get<int64_t>();
    info.learning_rate = m.value("learning_rate", 0.0);
    info.extras.loader_state = m.at("loader_state").dump();
    info.extras.rng_state = m.at("rng_state").get<std::string>();
  } catch (const json::exception& e) {
    return invalid_argument(str(dir, "/", kState, ": missing or mistyped field (", e.what(), ")"));
  }
  return info;
}

Result<CheckpointInfo> load_checkpoint(const std::string& dir, TrainableModel& model, Optimizer& optimizer,
                                       engine::Communicator* comm, TrainableModel* reference) {
  const bool is_root = comm_rank(comm) == 0;
  FileReader readers[3];
  uint64_t sums[3] = {0, 0, 0};
  Status status;
  std::string manifest_text;
  if (is_root) {
    Result<json> m = open_on_root(dir, model, readers, sums);
    if (m.ok()) {
      manifest_text = m->dump();
    } else {
      status = m.status();
    }
  }
  RLRUN_RETURN_IF_ERROR(agree_with_root(comm, status));
  if (comm_size(comm) > 1) {
    uint64_t size = manifest_text.size();
    RLRUN_RETURN_IF_ERROR(comm->broadcast(&size, sizeof(size), CommDType::kU8, 0));
    manifest_text.resize(size);
    RLRUN_RETURN_IF_ERROR(comm->broadcast(manifest_text.data(), size, CommDType::kU8, 0));
  }
  const Status streamed = stream_state(model, optimizer, comm, readers, status);
  model.weights_written();  // also after a failure part-way: the bf16 copy follows what was read
  RLRUN_RETURN_IF_ERROR(streamed);
  const json manifest = json::parse(manifest_text);  // written by rank 0 above: well-formed
  if (is_root && status.ok()) {
    for (int i = 0; i < 3 && status.ok(); ++i) {
      if (readers[i].checksum() != sums[i]) {
        status = invalid_argument(str(dir, "/", kFiles[i], ": checksum mismatch (the file is corrupt)"));
      }
    }
  }
  RLRUN_RETURN_IF_ERROR(agree_with_root(comm, status.ok() ? status : status.with_context("loading checkpoint " + dir)));
  CheckpointInfo info;
  info.dir = dir;
  info.step = manifest["step"].get<int64_t>();
  info.optimizer_step = manifest["optimizer_step"].get<int64_t>();
  info.learning_rate = manifest.value("learning_rate", 0.0);
  info.extras.loader_state = manifest["loader_state"].dump();
  info.extras.rng_state = manifest["rng_state"].get<std::string>();
  if (reference != nullptr && manifest.value("reference", false)) {
    const Status loaded = load_reference(dir, *reference, comm);
    reference->weights_written();
    RLRUN_RETURN_IF_ERROR(loaded.with_context("loading checkpoint " + dir));
    info.reference_loaded = true;
  }
  optimizer.set_step_count(info.optimizer_step);
  if (model.has_grads()) model.zero_grads();
  return info;
}

}  // namespace rlrun::trainer
