// protocol.cc - header framing, encode/decode dispatch and per-kind consistency checks.
#include "common/protocol/protocol.h"

#include <cmath>

#include "common/check.h"
#include "common/observe/log.h"
#include "common/protocol/wire_codec.h"

namespace rlrun {

namespace {

// Kind-specific checks across fields, run after a successful field decode. The decoder promises
// structurally consistent messages (array lengths agree), not semantically sensible ones.
template <class T> void check_consistency(const T&, wire::WireReader&) {}

void check_consistency(const GenerateRequest& m, wire::WireReader& r) {
  if (m.num_samples == 0) r.fail("num_samples", "must be at least 1");
  if (!std::isfinite(m.temperature) || m.temperature < 0)
    r.fail("temperature", str(m.temperature, " is not a finite value >= 0"));
  if (!std::isfinite(m.top_p) || m.top_p <= 0 || m.top_p > 1) r.fail("top_p", str(m.top_p, " is not in (0, 1]"));
}

void check_consistency(const GenerateResult& m, wire::WireReader& r) {
  if (m.logprobs.size() != m.token_ids.size())
    r.fail("logprobs", str(m.logprobs.size(), " values for ", m.token_ids.size(), " token_ids"));
}

void check_consistency(const ScoreRequest& m, wire::WireReader& r) {
  uint64_t total = 0;
  for (uint32_t n : m.completion_lengths) total += n;
  if (total != m.completion_ids.size())
    r.fail("completion_lengths", str("sum to ", total, ", but completion_ids has ", m.completion_ids.size(), " ids"));
}

void check_cu_seqlens(const TrainBatch& m, uint64_t total, wire::WireReader& r) {
  const auto& cu = m.cu_seqlens;
  if (cu.empty() || cu[0] != 0) return r.fail("cu_seqlens", "must start with 0");
  uint64_t next_row_boundary = m.row_len;  // every multiple of row_len must appear
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) return r.fail("cu_seqlens", str("decreases at index ", i));
    if (uint64_t(cu[i]) > next_row_boundary) {
      return r.fail("cu_seqlens", str("a sequence straddles the row boundary at token ", next_row_boundary));
    }
    if (uint64_t(cu[i]) == next_row_boundary) next_row_boundary += m.row_len;
  }
  if (uint64_t(cu[cu.size() - 1]) != total) r.fail("cu_seqlens", str("ends at ", cu[cu.size() - 1], ", expected ", total));
}

void check_consistency(const TrainBatch& m, wire::WireReader& r) {
  const uint64_t total = uint64_t{m.num_rows} * m.row_len;
  if (m.num_rows > 0 && m.row_len == 0) return r.fail("row_len", "is 0 for a batch with rows");
  const std::pair<const char*, size_t> arrays[] = {
      {"input_ids", m.input_ids.size()},   {"position_ids", m.position_ids.size()},
      {"loss_mask", m.loss_mask.size()},   {"advantages", m.advantages.size()},
      {"rollout_logprobs", m.rollout_logprobs.size()}};
  for (const auto& [name, size] : arrays) {
    if (size != total) return r.fail(name, str(size, " elements, expected num_rows * row_len = ", total));
  }
  if (!m.ref_logprobs.empty() && m.ref_logprobs.size() != total)
    return r.fail("ref_logprobs", str(m.ref_logprobs.size(), " elements, expected none or num_rows * row_len = ", total));
  const auto& offsets = m.micro_batch_row_offsets;
  if (offsets.size() != size_t{m.num_micro_batches} + 1) {
    return r.fail("micro_batch_row_offsets", str(offsets.size(), " entries, expected num_micro_batches + 1 = ",
                                                 uint64_t{m.num_micro_batches} + 1));
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) return r.fail("micro_batch_row_offsets", str("decreases at index ", i));
  }
  if (offsets.front() != 0 || offsets.back() != m.num_rows)
    return r.fail("micro_batch_row_offsets", str("must run from 0 to num_rows = ", m.num_rows));
  check_cu_seqlens(m, total, r);
}

void check_consistency(const WeightSyncBegin& m, wire::WireReader& r) {
  if (m.metadata_cached && !m.tensors.empty()) r.fail("tensors", "present although metadata_cached is set");
  for (const TensorMeta& t : m.tensors) {
    for (int64_t d : t.shape) {
      if (d < 0) return r.fail("tensors", str("tensor ", t.name, " has a negative dimension"));
    }
  }
}

void check_consistency(const WeightBucket& m, wire::WireReader& r) {
  if (m.data.size() % dtype_size(m.dtype) != 0)
    r.fail("data", str(m.data.size(), " bytes is not a whole number of ", dtype_name(m.dtype), " elements"));
}

template <class T>
Result<Message> decode_body(const WireHeader& header, std::string_view body, Frames* frames) {
  const char* kind = message_kind_name(T::kKind);
  wire::WireReader reader(body, frames, kind);
  Message out{header.correlation_id, T{}};
  T& m = std::get<T>(out.payload);
  T::fields(reader, m);
  if (reader.ok() && reader.remaining() != 0)
    reader.fail("(end)", str(reader.remaining(), " unread bytes after the last field"));
  if (reader.ok() && reader.next_frame() != frames->size())
    reader.fail("(end)", str(frames->size() - reader.next_frame(), " array frames left unused"));
  if (reader.ok()) check_consistency(m, reader);
  if (!reader.ok()) return reader.status();
  return out;
}

Status check_frame_sizes(const Frames& frames) {
  if (frames.empty()) return protocol_error("malformed message: no frames");
  if (frames.size() > kMaxFrames)
    return protocol_error(str("malformed message: ", frames.size(), " frames exceeds the limit of ", kMaxFrames));
  if (frames[0].size() > kMaxHeaderFrameBytes) {
    return protocol_error(str("malformed message: header frame of ", frames[0].size(),
                              " bytes exceeds the limit of ", kMaxHeaderFrameBytes));
  }
  size_t total = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].size() > kMaxFrameBytes) {
      return protocol_error(str("malformed message: frame ", i, " of ", frames[i].size(),
                                " bytes exceeds the limit of ", kMaxFrameBytes));
    }
    total += frames[i].size();
  }
  if (total > kMaxMessageBytes)
    return protocol_error(str("malformed message: ", total, " bytes exceeds the limit of ", kMaxMessageBytes));
  return Status();
}

}  // namespace

Result<WireHeader> decode_header(const Frames& frames) {
  RLRUN_RETURN_IF_ERROR(check_frame_sizes(frames));
  const zmq::message_t& head = frames[0];
  if (head.size() < kHeaderPrefixBytes)
    return protocol_error(str("malformed message: header frame of ", head.size(), " bytes is shorter than ",
                              kHeaderPrefixBytes));
  const auto* p = static_cast<const uint8_t*>(head.data());
  uint32_t magic, num_array_frames, body_bytes;
  uint16_t version, kind;
  uint64_t correlation_id;
  std::memcpy(&magic, p + 0, 4);
  std::memcpy(&version, p + 4, 2);
  std::memcpy(&kind, p + 6, 2);
  std::memcpy(&correlation_id, p + 8, 8);
  std::memcpy(&num_array_frames, p + 16, 4);
  std::memcpy(&body_bytes, p + 20, 4);
  if (magic != kWireMagic) return protocol_error("malformed message: bad magic (not an rlrun message)");
  if (version != kProtocolVersion) {
    return protocol_error(str("message has protocol version ", version, " but this rlrun speaks version ",
                              kProtocolVersion, ": run the same rlrun build on every node"));
  }
  const char* name = message_kind_name(static_cast<MessageKind>(kind));
  if (std::string_view(name) == "unknown") return protocol_error(str("malformed message: unknown message kind ", kind));
  if (num_array_frames != frames.size() - 1) {
    return protocol_error(str("malformed ", name, " message: header announces ", num_array_frames,
                              " array frames, message has ", frames.size() - 1));
  }
  if (body_bytes != head.size() - kHeaderPrefixBytes) {
    return protocol_error(str("malformed ", name, " message: header announces ", body_bytes, " body bytes, frame has ",
                              head.size() - kHeaderPrefixBytes));
  }
  return WireHeader{static_cast<MessageKind>(kind), correlation_id};
}

Result<Message> decode(Frames frames) {
  RLRUN_ASSIGN_OR_RETURN(WireHeader header, decode_header(frames));
  std::string_view body(static_cast<const char*>(frames[0].data()) + kHeaderPrefixBytes,
                        frames[0].size() - kHeaderPrefixBytes);
  switch (header.kind) {
    case MessageKind::kRegister: return decode_body<Register>(header, body, &frames);
    case MessageKind::kRegisterAck: return decode_body<RegisterAck>(header, body, &frames);
    case MessageKind::kHeartbeat: return decode_body<Heartbeat>(header, body, &frames);
    case MessageKind::kGenerateRequest: return decode_body<GenerateRequest>(header, body, &frames);
    case MessageKind::kGenerateResult: return decode_body<GenerateResult>(header, body, &frames);
    case MessageKind::kCancel: return decode_body<Cancel>(header, body, &frames);
    case MessageKind::kTrainBatch: return decode_body<TrainBatch>(header, body, &frames);
    case MessageKind::kTrainResult: return decode_body<TrainResult>(header, body, &frames);
    case MessageKind::kWeightSyncBegin: return decode_body<WeightSyncBegin>(header, body, &frames);
    case MessageKind::kWeightBucket: return decode_body<WeightBucket>(header, body, &frames);
    case MessageKind::kWeightSyncEnd: return decode_body<WeightSyncEnd>(header, body, &frames);
    case MessageKind::kShutdown: return decode_body<Shutdown>(header, body, &frames);
    case MessageKind::kError: return decode_body<ErrorReply>(header, body, &frames);
    case MessageKind::kStoreSet: return decode_body<StoreSet>(header, body, &frames);
    case MessageKind::kStoreGet: return decode_body<StoreGet>(header, body, &frames);
    case MessageKind::kStoreValue: return decode_body<StoreValue>(header, body, &frames);
    case MessageKind::kSaveCheckpoint: return decode_body<SaveCheckpoint>(header, body, &frames);
    case MessageKind::kCheckpointSaved: return decode_body<CheckpointSaved>(header, body, &frames);
    case MessageKind::kScoreRequest: return decode_body<ScoreRequest>(header, body, &frames);
    case MessageKind::kScoreResult: return decode_body<ScoreResult>(header, body, &frames);
    case MessageKind::kSetThreads: return decode_body<SetThreads>(header, body, &frames);
  }
  return protocol_error("malformed message: unknown message kind");  // unreachable: decode_header checked
}

template <WireMessage T>
Frames encode(const T& message, uint64_t correlation_id) {
  Frames frames(1);  // frame 0 is filled in once the body is known
  wire::WireWriter writer(&frames);
  T::fields(writer, message);
  const std::string& body = writer.body();
  // Exceeding a limit here is a bug in the sender (a packer or bucket size ignoring the limits),
  // not bad input: the receiver would reject the message, so stop where the bug is.
  RLRUN_CHECK(body.size() + kHeaderPrefixBytes <= kMaxHeaderFrameBytes && frames.size() <= kMaxFrames,
              str("encoding ", message_kind_name(T::kKind), ": exceeds the wire limits in protocol.h"));
  zmq::message_t head(kHeaderPrefixBytes + body.size());
  auto* p = static_cast<uint8_t*>(head.data());
  const uint16_t version = kProtocolVersion, kind = static_cast<uint16_t>(T::kKind);
  const uint32_t num_array_frames = static_cast<uint32_t>(frames.size() - 1);
  const uint32_t body_bytes = static_cast<uint32_t>(body.size());
  std::memcpy(p + 0, &kWireMagic, 4);
  std::memcpy(p + 4, &version, 2);
  std::memcpy(p + 6, &kind, 2);
  std::memcpy(p + 8, &correlation_id, 8);
  std::memcpy(p + 16, &num_array_frames, 4);
  std::memcpy(p + 20, &body_bytes, 4);
  if (!body.empty()) std::memcpy(p + kHeaderPrefixBytes, body.data(), body.size());
  frames[0] = std::move(head);
  return frames;
}

Frames encode(const Message& message) {
  return std::visit([&](const auto& m) { return encode(m, message.correlation_id); }, message.payload);
}

MessageKind Message::kind() const {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kKind; }, payload);
}

#define RLRUN_INSTANTIATE_ENCODE(T) template Frames encode<T>(const T&, uint64_t);
RLRUN_INSTANTIATE_ENCODE(Register)
RLRUN_INSTANTIATE_ENCODE(RegisterAck)
RLRUN_INSTANTIATE_ENCODE(Heartbeat)
RLRUN_INSTANTIATE_ENCODE(GenerateRequest)
RLRUN_INSTANTIATE_ENCODE(GenerateResult)
RLRUN_INSTANTIATE_ENCODE(Cancel)
RLRUN_INSTANTIATE_ENCODE(TrainBatch)
RLRUN_INSTANTIATE_ENCODE(TrainResult)
RLRUN_INSTANTIATE_ENCODE(WeightSyncBegin)
RLRUN_INSTANTIATE_ENCODE(WeightBucket)
RLRUN_INSTANTIATE_ENCODE(WeightSyncEnd)
RLRUN_INSTANTIATE_ENCODE(Shutdown)
RLRUN_INSTANTIATE_ENCODE(ErrorReply)
RLRUN_INSTANTIATE_ENCODE(StoreSet)
RLRUN_INSTANTIATE_ENCODE(StoreGet)
RLRUN_INSTANTIATE_ENCODE(StoreValue)
RLRUN_INSTANTIATE_ENCODE(SaveCheckpoint)
RLRUN_INSTANTIATE_ENCODE(CheckpointSaved)
RLRUN_INSTANTIATE_ENCODE(ScoreRequest)
RLRUN_INSTANTIATE_ENCODE(ScoreResult)
RLRUN_INSTANTIATE_ENCODE(SetThreads)
#undef RLRUN_INSTANTIATE_ENCODE

}  // namespace rlrun
