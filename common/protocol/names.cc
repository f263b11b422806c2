// protocol/names.cc - names of the wire enums, for logs and error messages.
#include "common/protocol/protocol.h"

#include "common/observe/log.h"

namespace rlrun {

const char* message_kind_name(MessageKind kind) {
  switch (kind) {
    case MessageKind::kRegister: return "Register";
    case MessageKind::kRegisterAck: return "RegisterAck";
    case MessageKind::kHeartbeat: return "Heartbeat";
    case MessageKind::kGenerateRequest: return "GenerateRequest";
    case MessageKind::kGenerateResult: return "GenerateResult";
    case MessageKind::kCancel: return "Cancel";
    case MessageKind::kTrainBatch: return "TrainBatch";
    case MessageKind::kTrainResult: return "TrainResult";
    case MessageKind::kWeightSyncBegin: return "WeightSyncBegin";
    case MessageKind::kWeightBucket: return "WeightBucket";
    case MessageKind::kWeightSyncEnd: return "WeightSyncEnd";
    case MessageKind::kShutdown: return "Shutdown";
    case MessageKind::kError: return "Error";
    case MessageKind::kStoreSet: return "StoreSet";
    case MessageKind::kStoreGet: return "StoreGet";
    case MessageKind::kStoreValue: return "StoreValue";
    case MessageKind::kSaveCheckpoint: return "SaveCheckpoint";
    case MessageKind::kCheckpointSaved: return "CheckpointSaved";
    case MessageKind::kScoreRequest: return "ScoreRequest";
    case MessageKind::kScoreResult: return "ScoreResult";
    case MessageKind::kSetThreads: return "SetThreads";
  }
  return "unknown";
}

const char* role_name(Role role) {
  switch (role) {
    case Role::kOrchestrator: return "orchestrator";
    case Role::kTrainer: return "trainer";
    case Role::kRollout: return "rollout";
    case Role::kTool: return "tool";
  }
  return "unknown";
}

std::string worker_name(Role role, int64_t rank) { return str(role_name(role), "-", rank); }

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
  }
  return "unknown";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kU8: return 1;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI32:
    case DType::kF32: return 4;
    case DType::kI64:
    case DType::kF64: return 8;
  }
  return 1;  // unreachable for decoded values: the decoder range-checks enums
}

}  // namespace rlrun
