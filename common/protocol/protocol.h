// protocol.h - the messages rlrun processes exchange over ZeroMQ, and their wire format.
//
// A message is a multipart ZeroMQ message (a vector of frames):
//
//   frame 0, the header (little-endian, packed):
//     off  size  field
//       0     4  magic            0x4E524C52 (the bytes "RLRN")
//       4     2  version          kProtocolVersion; any other value is rejected (no negotiation)
//       6     2  kind             MessageKind
//       8     8  correlation_id   chosen by the requester, echoed by the reply (0 = none)
//      16     4  num_array_frames frames after frame 0; must equal the frame count - 1
//      20     4  body_bytes       must equal frame 0's size - 24
//      24     .  body             the kind's fields, in the order of its fields() function:
//         bool            u8 (0 or 1)
//         integers, enums u8/u16/u32/u64/i32/i64 as declared (enums: u8, range-checked)
//         float, double   IEEE-754 binary32 / binary64
//         string          u32 byte length, then the bytes (not NUL-terminated, may be binary)
//         list<X>         u32 count, then count X's (inline in frame 0: small things only)
//         map<string,X>   u32 count, then (string, X) pairs in key order
//         WireArray<T>    u8 DType, u64 element count; the elements are the next array frame
//   frames 1..n: one per WireArray field, in field order, holding exactly count * sizeof(T) raw
//     little-endian bytes. Senders hand the vector's bytes to ZeroMQ and receivers keep the frame
//     (see wire_array.h): arrays are never converted element by element.
//
// The whole body must be consumed and every array frame used, or the message is rejected.
// Encoding never fails: strings over kMaxStringBytes are cut to it (they are names and text);
// lists, arrays or a header over the limits are a bug in the sender, stopped by RLRUN_CHECK
// (a sender with more data splits it: e.g. weight buckets of at most kMaxFrameBytes).
// Fast to encode and decode, trivially versioned: any layout change bumps kProtocolVersion.
//
// Decoding is for untrusted bytes: a malformed, truncated, oversized, wrong-magic or
// wrong-version message gives a kProtocol Status naming the kind and field at fault. No length
// field can make the decoder allocate more than the bytes actually received (every count is
// checked against the remaining bytes and the limits below before anything is allocated).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <zmq.hpp>

#include "common/protocol/wire_array.h"
#include "common/status.h"

namespace rlrun {

using Frames = std::vector<zmq::message_t>;

// ---------------------------------------------------------------- constants and limits
inline constexpr uint32_t kWireMagic = 0x4E524C52;  // "RLRN" as bytes in memory
// 2: rollout stats in Heartbeat, per-token weight versions; 3: SaveCheckpoint / CheckpointSaved;
// 4: TrainBatch.supervised; 5: WeightSyncBegin.group_epoch; 7: Heartbeat.engine_step_costs;
// 9: the KL reference on rollout workers (WeightSyncBegin.kl_reference, ScoreRequest / ScoreResult,
// TrainBatch.ref_logprobs); 10: SetThreads
inline constexpr uint16_t kProtocolVersion = 10;
inline constexpr size_t kHeaderPrefixBytes = 24;

// Every limit of the wire format, in one place. The control plane also sets ZMQ_MAXMSGSIZE to
// kMaxFrameBytes so libzmq drops a peer that announces a bigger frame before allocating it.
inline constexpr size_t kMaxFrames = 64;                    // frame 0 + array frames
inline constexpr size_t kMaxHeaderFrameBytes = 1u << 20;    // frame 0 (1 MiB)
inline constexpr size_t kMaxFrameBytes = 256u << 20;        // any one frame (256 MiB)
inline constexpr size_t kMaxMessageBytes = 1u << 30;        // all frames together (1 GiB)
inline constexpr uint32_t kMaxStringBytes = 64u << 10;      // one string field (64 KiB)
inline constexpr uint32_t kMaxListElements = 1u << 16;      // one inline list or map
inline constexpr uint64_t kMaxArrayElements = kMaxFrameBytes;  // one WireArray (bytes bound it too)

// ---------------------------------------------------------------- enums on the wire
enum class MessageKind : uint16_t {
  kRegister = 1,
  kRegisterAck = 2,
  kHeartbeat = 3,
  kGenerateRequest = 4,
  kGenerateResult = 5,
  kCancel = 6,
  kTrainBatch = 7,
  kTrainResult = 8,
  kWeightSyncBegin = 9,
  kWeightBucket = 10,
  kWeightSyncEnd = 11,
  kShutdown = 12,
  kError = 13,
  kStoreSet = 14,
  kStoreGet = 15,
  kStoreValue = 16,
  kSaveCheckpoint = 17,
  kCheckpointSaved = 18,
  kScoreRequest = 19,
  kScoreResult = 20,
  kSetThreads = 21,
};
const char* message_kind_name(MessageKind kind);  // "GenerateRequest"; "unknown" if out of range

enum class Role : uint8_t { kOrchestrator = 0, kTrainer = 1, kRollout = 2, kTool = 3 };
const char* role_name(Role role);
// A worker's name: "trainer-0", "rollout-3". It is its control-plane identity, its log and
// timeline file name and its label in metrics: everything that routes by it builds it here.
std::string worker_name(Role role, int64_t rank);

enum class FinishReason : uint8_t { kStop = 0, kLength = 1, kCancelled = 2, kError = 3 };
const char* finish_reason_name(FinishReason reason);

// Element type of a tensor or a raw byte array.
enum class DType : uint8_t { kU8 = 0, kI32 = 1, kI64 = 2, kF32 = 3, kF16 = 4, kBF16 = 5, kF64 = 6 };
const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);  // bytes per element

// Number of valid values of each enum sent as u8; the decoder rejects anything at or above it.
template <class E> struct WireEnum;
template <> struct WireEnum<Role> { static constexpr uint8_t kCount = 4; };
template <> struct WireEnum<FinishReason> { static constexpr uint8_t kCount = 4; };
template <> struct WireEnum<DType> { static constexpr uint8_t kCount = 7; };
template <> struct WireEnum<StatusCode> { static constexpr uint8_t kCount = 9; };

// ---------------------------------------------------------------- messages
// Each struct lists its wire layout in fields(): one definition used by both encoder and decoder.

// worker -> orchestrator, first message on a connection.
struct Register {
  static constexpr MessageKind kKind = MessageKind::kRegister;
  Role role = Role::kTrainer;
  int32_t rank = 0;                  // rank within the role (trainer rank, rollout worker index)
  std::string host;                  // hostname or address the worker is reachable at
  uint32_t pid = 0;
  std::vector<std::string> devices;  // "cuda:0", "cpu", ...
  std::string run_token;             // placeholder: identifies the run (authentication comes with CURVE)

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("role", m.role); v.field("rank", m.rank); v.field("host", m.host);
    v.field("pid", m.pid); v.field("devices", m.devices); v.field("run_token", m.run_token);
  }
  bool operator==(const Register&) const = default;
};

// orchestrator -> worker.
struct RegisterAck {
  static constexpr MessageKind kKind = MessageKind::kRegisterAck;
  uint32_t assigned_id = 0;
  std::string config_digest;                      // hex digest of the resolved config
  std::map<std::string, std::string> rendezvous;  // e.g. "nccl_unique_id" -> 128 raw bytes

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("assigned_id", m.assigned_id); v.field("config_digest", m.config_digest);
    v.field("rendezvous", m.rendezvous);
  }
  bool operator==(const RegisterAck&) const = default;
};

// worker -> orchestrator, periodically. The orchestrator answers each with a Heartbeat echo
// (same correlation id); a worker that hears nothing from it for heartbeat_timeout_seconds exits.
// The fields after peak_memory_bytes are a rollout worker's (zero from other roles).
struct Heartbeat {
  static constexpr MessageKind kKind = MessageKind::kHeartbeat;
  uint32_t worker_id = 0;
  uint64_t weight_version = 0;
  uint32_t active_requests = 0;    // rollout: sequences running (in the KV cache)
  uint32_t queued_requests = 0;    // rollout: sequences waiting (new or preempted)
  float kv_cache_utilization = 0;  // fraction in [0, 1]
  uint64_t memory_bytes = 0;       // in use now (resident)
  uint64_t peak_memory_bytes = 0;
  uint32_t kv_blocks_used = 0;
  uint32_t kv_blocks_free = 0;
  uint64_t tokens_generated = 0;       // since the worker started
  float tokens_per_second = 0;         // over the last heartbeat interval
  uint64_t preemptions = 0;            // since the worker started
  double idle_seconds = 0;             // since the worker started: time with no sequence to run
  double last_weight_sync_seconds = 0; // duration of the last weight update (0 = none yet)
  WireArray<double> engine_step_costs = {};  // rollout: rollout/step_cost.h's StepCostSums::flat(), cumulative
  double kl_reference_seconds = 0;     // rollout: CPU seconds scoring ScoreRequests, cumulative
  uint64_t kl_reference_tokens = 0;    // rollout: tokens those forward passes computed, cumulative

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("worker_id", m.worker_id); v.field("weight_version", m.weight_version);
    v.field("active_requests", m.active_requests); v.field("queued_requests", m.queued_requests);
    v.field("kv_cache_utilization", m.kv_cache_utilization);
    v.field("memory_bytes", m.memory_bytes); v.field("peak_memory_bytes", m.peak_memory_bytes);
    v.field("kv_blocks_used", m.kv_blocks_used); v.field("kv_blocks_free", m.kv_blocks_free);
    v.field("tokens_generated", m.tokens_generated); v.field("tokens_per_second", m.tokens_per_second);
    v.field("preemptions", m.preemptions); v.field("idle_seconds", m.idle_seconds);
    v.field("last_weight_sync_seconds", m.last_weight_sync_seconds);
    v.field("engine_step_costs", m.engine_step_costs);
    v.field("kl_reference_seconds", m.kl_reference_seconds); v.field("kl_reference_tokens", m.kl_reference_tokens);
  }
  bool operator==(const Heartbeat&) const = default;
};

// orchestrator -> rollout: generate samples first_sample_index .. first_sample_index+num_samples-1
// of one prompt (a whole group, or one lane with num_samples = 1).
struct GenerateRequest {
  static constexpr MessageKind kKind = MessageKind::kGenerateRequest;
  uint64_t request_id = 0;
  WireArray<int32_t> prompt_ids;
  uint32_t num_samples = 1;
  uint32_t first_sample_index = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  uint32_t max_tokens = 0;           // 0: until max_model_len
  std::vector<int32_t> stop_token_ids;
  uint64_t seed = 0;
  uint64_t min_weight_version = 0;  // do not start before this weight version is loaded

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("request_id", m.request_id); v.field("prompt_ids", m.prompt_ids);
    v.field("num_samples", m.num_samples); v.field("first_sample_index", m.first_sample_index);
    v.field("temperature", m.temperature); v.field("top_p", m.top_p);
    v.field("max_tokens", m.max_tokens); v.field("stop_token_ids", m.stop_token_ids);
    v.field("seed", m.seed); v.field("min_weight_version", m.min_weight_version);
  }
  bool operator==(const GenerateRequest&) const = default;
};

// rollout -> orchestrator: one finished sample. logprobs[i] is the log-probability of token_ids[i].
struct GenerateResult {
  static constexpr MessageKind kKind = MessageKind::kGenerateResult;
  uint64_t request_id = 0;
  uint32_t sample_index = 0;
  WireArray<int32_t> token_ids;
  WireArray<float> logprobs;  // same length as token_ids
  FinishReason finish_reason = FinishReason::kStop;
  std::string error;                    // set when finish_reason is kError
  uint64_t first_weight_version = 0;    // weight version of the first generated token
  uint64_t last_weight_version = 0;     // and of the last (differs if weights changed mid-sample)
  WireArray<int64_t> weight_versions;   // per token: the weight version that sampled it (same length)
  uint32_t preemptions = 0;             // times this sample was preempted and recomputed
  double queue_seconds = 0;             // received -> first scheduled
  double prefill_seconds = 0;
  double decode_seconds = 0;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("request_id", m.request_id); v.field("sample_index", m.sample_index);
    v.field("token_ids", m.token_ids); v.field("logprobs", m.logprobs);
    v.field("finish_reason", m.finish_reason); v.field("error", m.error);
    v.field("first_weight_version", m.first_weight_version);
    v.field("last_weight_version", m.last_weight_version);
    v.field("weight_versions", m.weight_versions); v.field("preemptions", m.preemptions);
    v.field("queue_seconds", m.queue_seconds); v.field("prefill_seconds", m.prefill_seconds);
    v.field("decode_seconds", m.decode_seconds);
  }
  bool operator==(const GenerateResult&) const = default;
};

// orchestrator -> rollout: stop these requests; each unfinished sample comes back kCancelled.
struct Cancel {
  static constexpr MessageKind kKind = MessageKind::kCancel;
  std::vector<uint64_t> request_ids;
  std::string reason;  // "off_policy", "shutdown", ...

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("request_ids", m.request_ids); v.field("reason", m.reason);
  }
  bool operator==(const Cancel&) const = default;
};

// orchestrator -> one trainer rank: its rows of one batch, packed.
// Token arrays are (num_rows * row_len) flattened row-major. cu_seqlens are the cumulative
// sequence boundaries over the flattened tokens (first 0, last num_rows * row_len, non-
// decreasing, every row boundary r * row_len present: sequences never straddle rows; padding
// is its own segment). micro_batch_row_offsets has num_micro_batches + 1 entries: micro-batch m
// is rows [offsets[m], offsets[m+1]). Every rank gets the same num_micro_batches.
// prefix_of (num_segments, or empty): the segment a segment continues (-1: none), in the same
// row: the samples of one prompt follow that prompt, written once (trainer/trainable_model.h).
struct TrainBatch {
  static constexpr MessageKind kKind = MessageKind::kTrainBatch;
  uint64_t step = 0;
  uint32_t rank = 0;
  uint32_t num_rows = 0;
  uint32_t row_len = 0;                              // tokens per row (seq_len)
  uint32_t num_micro_batches = 0;
  std::vector<uint32_t> micro_batch_row_offsets;     // num_micro_batches + 1
  uint64_t loss_token_count = 0;                     // loss-mask tokens over all ranks (for normalizing)
  WireArray<int32_t> input_ids;                      // (num_rows * row_len)
  WireArray<int32_t> position_ids;                   // (num_rows * row_len), restart per sequence
  WireArray<int32_t> cu_seqlens;                     // (num_segments + 1)
  WireArray<uint8_t> loss_mask;                      // (num_rows * row_len), 1 = completion token
  WireArray<float> advantages;                       // (num_rows * row_len)
  WireArray<float> rollout_logprobs;                 // (num_rows * row_len)
  WireArray<int32_t> prefix_of;                      // (num_segments) or empty
  // (num_rows * row_len): the KL reference's log-prob of each completion token, scored by the
  // rollout workers; empty: the trainer scores the batch with its own copy of the reference.
  WireArray<float> ref_logprobs;
  // A format warm-start batch (format_warm_start_steps): the trainer's own log-probs are the PPO
  // reference (ratio 1, no TIS), so the loss is the advantage-weighted negative log-likelihood of
  // the completion tokens; rollout_logprobs are unused.
  bool supervised = false;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("step", m.step); v.field("rank", m.rank); v.field("num_rows", m.num_rows);
    v.field("row_len", m.row_len); v.field("num_micro_batches", m.num_micro_batches);
    v.field("micro_batch_row_offsets", m.micro_batch_row_offsets);
    v.field("loss_token_count", m.loss_token_count);
    v.field("input_ids", m.input_ids); v.field("position_ids", m.position_ids);
    v.field("cu_seqlens", m.cu_seqlens); v.field("loss_mask", m.loss_mask);
    v.field("advantages", m.advantages); v.field("rollout_logprobs", m.rollout_logprobs);
    v.field("prefix_of", m.prefix_of); v.field("supervised", m.supervised);
    v.field("ref_logprobs", m.ref_logprobs);
  }
  bool operator==(const TrainBatch&) const = default;
};

// trainer -> orchestrator after a step.
struct TrainResult {
  static constexpr MessageKind kKind = MessageKind::kTrainResult;
  uint64_t step = 0;
  uint32_t rank = 0;
  std::map<std::string, double> metrics;  // "loss", "grad_norm", "entropy", ...
  uint64_t weight_version = 0;            // version the weights have after this step

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("step", m.step); v.field("rank", m.rank); v.field("metrics", m.metrics);
    v.field("weight_version", m.weight_version);
  }
  bool operator==(const TrainResult&) const = default;
};

// One tensor inside the flattened weight stream of a sync.
struct TensorMeta {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset_bytes = 0;  // into the flattened stream of all tensors

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("name", m.name); v.field("dtype", m.dtype); v.field("shape", m.shape);
    v.field("offset_bytes", m.offset_bytes);
  }
  bool operator==(const TensorMeta&) const = default;
};

// orchestrator -> trainer rank 0 and every rollout worker: a weight sync starts. The tensor list
// is sent once; later syncs set metadata_cached and leave tensors empty. The sync runs over the
// group "weights-<group_epoch>": a member whose group has another epoch (a replacement worker, or
// every member after one died) first leaves its group and joins that one.
struct WeightSyncBegin {
  static constexpr MessageKind kKind = MessageKind::kWeightSyncBegin;
  uint64_t version = 0;
  uint64_t total_bytes = 0;
  uint64_t bucket_bytes = 0;
  bool metadata_cached = false;
  std::vector<TensorMeta> tensors;
  uint32_t group_epoch = 0;
  bool kl_reference = false;  // these weights are also the KL reference: a worker that scores it keeps a copy

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("version", m.version); v.field("total_bytes", m.total_bytes);
    v.field("bucket_bytes", m.bucket_bytes); v.field("metadata_cached", m.metadata_cached);
    v.field("tensors", m.tensors); v.field("group_epoch", m.group_epoch);
    v.field("kl_reference", m.kl_reference);
  }
  bool operator==(const WeightSyncBegin&) const = default;
};

// One bucket of the flattened weight stream, for transports that carry weights over ZeroMQ
// (the collective path sends the same bytes through the Communicator instead).
struct WeightBucket {
  static constexpr MessageKind kKind = MessageKind::kWeightBucket;
  uint64_t version = 0;
  uint32_t bucket_index = 0;
  uint64_t offset_bytes = 0;   // of data[0] in the flattened stream
  DType dtype = DType::kBF16;  // element type of the bytes; data.size() is a multiple of its size
  WireArray<uint8_t> data;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("version", m.version); v.field("bucket_index", m.bucket_index);
    v.field("offset_bytes", m.offset_bytes); v.field("dtype", m.dtype); v.field("data", m.data);
  }
  bool operator==(const WeightBucket&) const = default;
};

// rollout -> orchestrator (and trainer -> orchestrator): the sync of `version` finished.
struct WeightSyncEnd {
  static constexpr MessageKind kKind = MessageKind::kWeightSyncEnd;
  uint64_t version = 0;
  bool ok = true;
  std::string error;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("version", m.version); v.field("ok", m.ok); v.field("error", m.error);
  }
  bool operator==(const WeightSyncEnd&) const = default;
};

struct Shutdown {
  static constexpr MessageKind kKind = MessageKind::kShutdown;
  std::string reason;

  template <class V, class M> static void fields(V& v, M& m) { v.field("reason", m.reason); }
  bool operator==(const Shutdown&) const = default;
};

// orchestrator -> every trainer rank: save a checkpoint of the state after `step` (collective over
// the trainer ranks, trainer/checkpoint.h) under <run_dir>/checkpoints/, with the orchestrator's
// own resume state (JSON text, opaque to the trainer) in the manifest. Each rank answers with
// CheckpointSaved once the save finished everywhere.
struct SaveCheckpoint {
  static constexpr MessageKind kKind = MessageKind::kSaveCheckpoint;
  uint64_t step = 0;
  WireArray<uint8_t> orchestrator_state;  // JSON text; an array: it may pass kMaxStringBytes
  // Only the model, as an HF folder in <run_dir>/model (the run's end); rank 0 writes it.
  bool model_only = false;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("step", m.step); v.field("orchestrator_state", m.orchestrator_state);
    v.field("model_only", m.model_only);
  }
  bool operator==(const SaveCheckpoint&) const = default;
};

// trainer rank -> orchestrator: the outcome of SaveCheckpoint (the same on every rank).
struct CheckpointSaved {
  static constexpr MessageKind kKind = MessageKind::kCheckpointSaved;
  uint64_t step = 0;
  bool ok = true;
  std::string error;
  std::string dir;      // the complete checkpoint's folder
  double seconds = 0;   // the collective save, as this rank saw it

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("step", m.step); v.field("ok", m.ok); v.field("error", m.error); v.field("dir", m.dir);
    v.field("seconds", m.seconds);
  }
  bool operator==(const CheckpointSaved&) const = default;
};

// A generic error reply, e.g. to a request that could not be decoded or served.
struct ErrorReply {
  static constexpr MessageKind kKind = MessageKind::kError;
  StatusCode code = StatusCode::kInternal;
  uint16_t request_kind = 0;  // MessageKind of the request it answers; 0 if unknown
  std::string message;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("code", m.code); v.field("request_kind", m.request_kind); v.field("message", m.message);
  }
  bool operator==(const ErrorReply&) const = default;
};

// ---- rendezvous: the orchestrator serves a key-value store over the control plane, through which
// the members of a collective group (Gloo addresses, an NCCL unique id) find each other. Keys are
// "<group>/<key>"; a value is set once per group incarnation (a new epoch uses a new group name).

// worker -> orchestrator: store `value` under `key` (overwriting). Answered with StoreValue
// {key, found = true} (no value) once stored.
struct StoreSet {
  static constexpr MessageKind kKind = MessageKind::kStoreSet;
  std::string key;
  WireArray<uint8_t> value;

  template <class V, class M> static void fields(V& v, M& m) { v.field("key", m.key); v.field("value", m.value); }
  bool operator==(const StoreSet&) const = default;
};

// worker -> orchestrator: the value of `key`. The reply waits until the key is set or
// timeout_ms passes (then StoreValue{found = false}).
struct StoreGet {
  static constexpr MessageKind kKind = MessageKind::kStoreGet;
  std::string key;
  uint32_t timeout_ms = 0;

  template <class V, class M> static void fields(V& v, M& m) { v.field("key", m.key); v.field("timeout_ms", m.timeout_ms); }
  bool operator==(const StoreGet&) const = default;
};

// orchestrator -> worker: the answer to StoreGet (or the acknowledgement of StoreSet).
struct StoreValue {
  static constexpr MessageKind kKind = MessageKind::kStoreValue;
  std::string key;
  bool found = false;
  WireArray<uint8_t> value;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("key", m.key); v.field("found", m.found); v.field("value", m.value);
  }
  bool operator==(const StoreValue&) const = default;
};

// orchestrator -> rollout (kl_reference_on: rollout): score the completions of one prompt under
// the KL reference (rollout/kl_reference.h), once the orchestrator kept their group for training.
struct ScoreRequest {
  static constexpr MessageKind kKind = MessageKind::kScoreRequest;
  uint64_t request_id = 0;
  WireArray<int32_t> prompt_ids;
  WireArray<int32_t> completion_ids;         // every completion, one after another
  std::vector<uint32_t> completion_lengths;  // and their lengths (they sum to completion_ids' size)

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("request_id", m.request_id); v.field("prompt_ids", m.prompt_ids);
    v.field("completion_ids", m.completion_ids); v.field("completion_lengths", m.completion_lengths);
  }
  bool operator==(const ScoreRequest&) const = default;
};

// rollout -> orchestrator: the reference's log-prob of every completion token, in completion_ids'
// order; empty with `error` when the worker could not score (no reference yet, bad ids): the
// trainer then scores the group itself.
struct ScoreResult {
  static constexpr MessageKind kKind = MessageKind::kScoreResult;
  uint64_t request_id = 0;
  WireArray<float> ref_logprobs;
  std::string error;

  template <class V, class M> static void fields(V& v, M& m) {
    v.field("request_id", m.request_id); v.field("ref_logprobs", m.ref_logprobs); v.field("error", m.error);
  }
  bool operator==(const ScoreResult&) const = default;
};

// orchestrator -> trainer or rollout worker (balance_cpu_threads, orchestrator/run/workers/core_balance.h):
// compute with `threads` threads from the next step on (the cores another process idles on).
// Not answered; a worker that cannot answers ErrorReply.
struct SetThreads {
  static constexpr MessageKind kKind = MessageKind::kSetThreads;
  uint32_t threads = 1;
  std::string reason;  // for the worker's log

  template <class V, class M> static void fields(V& v, M& m) { v.field("threads", m.threads); v.field("reason", m.reason); }
  bool operator==(const SetThreads&) const = default;
};

using Payload = std::variant<Register, RegisterAck, Heartbeat, GenerateRequest, GenerateResult,
                             Cancel, TrainBatch, TrainResult, WeightSyncBegin, WeightBucket,
                             WeightSyncEnd, Shutdown, ErrorReply, StoreSet, StoreGet, StoreValue,
                             SaveCheckpoint, CheckpointSaved, ScoreRequest, ScoreResult, SetThreads>;

template <class T>
concept WireMessage = requires { T::kKind; } && std::is_constructible_v<Payload, T>;

// A decoded message: the payload and the header's correlation id.
struct Message {
  uint64_t correlation_id = 0;
  Payload payload;

  MessageKind kind() const;
  template <class T> const T* get() const { return std::get_if<T>(&payload); }
  template <class T> T* get() { return std::get_if<T>(&payload); }
};

// ---------------------------------------------------------------- encode / decode
// Frames ready for zmq::send_multipart. Arrays are shared with `message`, not copied.
template <WireMessage T> Frames encode(const T& message, uint64_t correlation_id = 0);
Frames encode(const Message& message);

// Takes the frames (arrays keep them, zero-copy). Errors are kProtocol and name kind and field.
Result<Message> decode(Frames frames);

// Only the header of frame 0 (magic, version, kind, correlation id): enough to address an
// ErrorReply to a message whose body is malformed. Errors as decode().
struct WireHeader {
  MessageKind kind;
  uint64_t correlation_id;
};
Result<WireHeader> decode_header(const Frames& frames);

}  // namespace rlrun
