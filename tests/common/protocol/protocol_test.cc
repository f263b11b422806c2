// Round trips of every message kind, zero-copy promises, and named errors for malformed input.
#include "common/protocol/protocol.h"

#include <cstring>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/observe/log.h"
#include "tests/common/protocol/protocol_samples.h"

namespace rlrun {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Frames clone(const Frames& frames) {
  Frames out;
  for (const auto& f : frames) out.emplace_back(f.data(), f.size());
  return out;
}

std::string bytes_of(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }
zmq::message_t frame_of(const std::string& s) { return zmq::message_t(s.data(), s.size()); }

Status decode_error(Frames frames) {
  auto r = decode(std::move(frames));
  EXPECT_FALSE(r.ok()) << "expected a decode error";
  return r.ok() ? Status() : r.status();
}

TEST(Protocol, EveryKindRoundTripsWithAllFields) {
  std::set<MessageKind> kinds;
  for (const Message& original : testing::sample_messages()) {
    SCOPED_TRACE(message_kind_name(original.kind()));
    auto decoded = decode(encode(original));
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    EXPECT_EQ(decoded->correlation_id, original.correlation_id);
    EXPECT_EQ(decoded->kind(), original.kind());
    EXPECT_TRUE(decoded->payload == original.payload);
    kinds.insert(original.kind());
  }
  EXPECT_EQ(kinds.size(), 21u) << "a message kind has no round-trip sample";
}

TEST(Protocol, TypedEncodeSetsKindAndCorrelationId) {
  auto decoded = decode(encode(Shutdown{"bye"}, 77));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->correlation_id, 77u);
  ASSERT_NE(decoded->get<Shutdown>(), nullptr);
  EXPECT_EQ(decoded->get<Shutdown>()->reason, "bye");
  EXPECT_EQ(decoded->get<Register>(), nullptr);
}

TEST(Protocol, HeaderLayoutIsPinned) {
  // Changing these bytes breaks every peer: bump kProtocolVersion if this test must change.
  Frames frames = encode(Shutdown{"ab"}, 0x0102030405060708ull);
  ASSERT_EQ(frames.size(), 1u);
  const std::string expected("RLRN\x0a\x00\x0c\x00\x08\x07\x06\x05\x04\x03\x02\x01\x00\x00\x00\x00\x06\x00\x00\x00"
                             "\x02\x00\x00\x00" "ab", 30);
  EXPECT_EQ(bytes_of(frames[0]), expected);
}

TEST(Protocol, DecodedArraysShareTheReceivedFrames) {
  Frames frames = encode(testing::sample_messages()[4]);  // GenerateResult: token_ids, logprobs, versions
  ASSERT_EQ(frames.size(), 4u);
  const void* ids_bytes = frames[1].data();
  const void* logprob_bytes = frames[2].data();
  auto decoded = decode(std::move(frames));
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  const auto& result = *decoded->get<GenerateResult>();
  EXPECT_TRUE(result.token_ids.shares_frame());
  EXPECT_EQ(static_cast<const void*>(result.token_ids.data()), ids_bytes);
  EXPECT_EQ(static_cast<const void*>(result.logprobs.data()), logprob_bytes);
}

TEST(Protocol, EncodedArraysShareTheSendersVector) {
  GenerateRequest request;
  request.prompt_ids = testing::iota_ids(100, 0);
  Frames frames = encode(request);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].data(), static_cast<const void*>(request.prompt_ids.data()));
  // The frame keeps the storage alive after the message is gone.
  GenerateRequest copy = request;
  request = GenerateRequest{};
  copy = GenerateRequest{};
  EXPECT_EQ(static_cast<const int32_t*>(frames[1].data())[99], 99);
}

TEST(Protocol, MisalignedFrameIsCopiedAndStillCorrect) {
  Frames frames = encode(testing::sample_messages()[4]);
  alignas(8) static char buffer[1 + 20 * sizeof(int32_t)];
  std::memcpy(buffer + 1, frames[1].data(), frames[1].size());
  frames[1] = zmq::message_t(buffer + 1, frames[1].size(), nullptr);  // constant data at an odd address
  auto decoded = decode(std::move(frames));
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  const auto& ids = decoded->get<GenerateResult>()->token_ids;
  EXPECT_FALSE(ids.shares_frame());
  EXPECT_EQ(ids.to_vector(), testing::iota_ids(20, 7));
}

TEST(Protocol, RejectsWrongMagicAndVersion) {
  Frames good = encode(Shutdown{"x"});
  Frames bad_magic = clone(good);
  static_cast<char*>(bad_magic[0].data())[0] = 'X';
  EXPECT_THAT(decode_error(std::move(bad_magic)).message(), HasSubstr("bad magic"));
  Frames bad_version = clone(good);
  static_cast<char*>(bad_version[0].data())[4] = kProtocolVersion + 1;
  Status s = decode_error(std::move(bad_version));
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_THAT(s.message(), AllOf(HasSubstr(str("version ", kProtocolVersion + 1)),
                                 HasSubstr(str("speaks version ", kProtocolVersion))));
}

TEST(Protocol, RejectsUnknownKindEmptyAndShortHeader) {
  Frames unknown = encode(Shutdown{"x"});
  static_cast<char*>(unknown[0].data())[6] = 99;
  EXPECT_THAT(decode_error(std::move(unknown)).message(), HasSubstr("unknown message kind 99"));
  EXPECT_THAT(decode_error(Frames{}).message(), HasSubstr("no frames"));
  Frames shorter;
  shorter.push_back(frame_of("RLRN"));
  EXPECT_THAT(decode_error(std::move(shorter)).message(), HasSubstr("shorter than 24"));
}

TEST(Protocol, ArrayCountDisagreeingWithFrameSizeNamesKindAndField) {
  Frames frames = encode(testing::sample_messages()[4]);
  frames[1] = zmq::message_t(frames[1].data(), frames[1].size() - 4);  // one token short
  Status s = decode_error(std::move(frames));
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("GenerateResult"), HasSubstr("token_ids"), HasSubstr("declared 20 i32")));
}

TEST(Protocol, RejectsTruncatedBodyAndTrailingBytes) {
  Frames frames = encode(testing::sample_messages()[0]);  // Register
  std::string head = bytes_of(frames[0]);
  Frames truncated;
  std::string cut = head.substr(0, head.size() - 3);
  const uint32_t body = static_cast<uint32_t>(cut.size() - kHeaderPrefixBytes);
  std::memcpy(cut.data() + 20, &body, 4);  // consistent header, short body
  truncated.push_back(frame_of(cut));
  EXPECT_THAT(decode_error(std::move(truncated)).message(), AllOf(HasSubstr("Register"), HasSubstr("run_token")));

  std::string longer = head + "zz";
  const uint32_t longer_body = static_cast<uint32_t>(longer.size() - kHeaderPrefixBytes);
  std::memcpy(longer.data() + 20, &longer_body, 4);
  Frames trailing;
  trailing.push_back(frame_of(longer));
  EXPECT_THAT(decode_error(std::move(trailing)).message(), HasSubstr("2 unread bytes"));
}

TEST(Protocol, RejectsFrameCountMismatchAndOversizedLimits) {
  Frames extra = encode(Shutdown{"x"});
  extra.push_back(frame_of("junk"));
  EXPECT_THAT(decode_error(std::move(extra)).message(), HasSubstr("announces 0 array frames"));

  Frames many(kMaxFrames + 1);
  EXPECT_THAT(decode_error(std::move(many)).message(), HasSubstr("exceeds the limit"));

  Frames huge_header;
  huge_header.emplace_back(kMaxHeaderFrameBytes + 1);
  EXPECT_THAT(decode_error(std::move(huge_header)).message(), HasSubstr("header frame of"));
}

TEST(Protocol, HugeLengthFieldsAreRejectedBeforeAllocating) {
  // Shutdown body = u32 length + bytes; claim 4 GiB - 1 and then 60 KiB (within the limit, but absent).
  for (uint32_t claimed : {0xffffffffu, 60000u}) {
    std::string head = bytes_of(encode(Shutdown{""})[0]);
    std::memcpy(head.data() + kHeaderPrefixBytes, &claimed, 4);
    Frames frames;
    frames.push_back(frame_of(head));
    Status s = decode_error(std::move(frames));
    EXPECT_THAT(s.message(), AllOf(HasSubstr("Shutdown"), HasSubstr("reason")));
  }
  // Cancel's request_ids: a list count far beyond the bytes present.
  std::string head = bytes_of(encode(Cancel{{}, ""})[0]);
  const uint32_t claimed = 60000;
  std::memcpy(head.data() + kHeaderPrefixBytes, &claimed, 4);
  Frames frames;
  frames.push_back(frame_of(head));
  EXPECT_THAT(decode_error(std::move(frames)).message(), AllOf(HasSubstr("request_ids"), HasSubstr("cannot fit")));
}

TEST(Protocol, RejectsBadEnumAndBool) {
  std::string head = bytes_of(encode(Register{})[0]);
  head[kHeaderPrefixBytes] = 9;  // role
  Frames frames;
  frames.push_back(frame_of(head));
  EXPECT_THAT(decode_error(std::move(frames)).message(), AllOf(HasSubstr("role"), HasSubstr("out of range")));

  std::string sync = bytes_of(encode(WeightSyncEnd{1, true, ""})[0]);
  sync[kHeaderPrefixBytes + 8] = 7;  // ok
  Frames frames2;
  frames2.push_back(frame_of(sync));
  EXPECT_THAT(decode_error(std::move(frames2)).message(), AllOf(HasSubstr("WeightSyncEnd"), HasSubstr("ok")));
}

TEST(Protocol, NestedFieldErrorsNameTheElement) {
  WeightSyncBegin begin{1, 0, 0, false, {{"a", DType::kF32, {2}, 0}, {"b", DType::kF32, {3}, 8}}};
  std::string head = bytes_of(encode(begin)[0]);
  const size_t b_dtype = head.rfind('b') + 1;  // dtype byte right after the name "b"
  head[b_dtype] = 77;
  Frames frames;
  frames.push_back(frame_of(head));
  EXPECT_THAT(decode_error(std::move(frames)).message(), HasSubstr("tensors[1].dtype"));
}

TEST(Protocol, CrossFieldChecks) {
  GenerateResult mismatch;
  mismatch.token_ids = {1, 2, 3};
  mismatch.logprobs = {-1.0f};
  EXPECT_THAT(decode_error(encode(mismatch)).message(), AllOf(HasSubstr("logprobs"), HasSubstr("3 token_ids")));

  TrainBatch straddle = testing::sample_train_batch();
  straddle.cu_seqlens = std::vector<int32_t>{0, 3, 10, 16};  // a sequence crosses the row at 8
  EXPECT_THAT(decode_error(encode(straddle)).message(), AllOf(HasSubstr("cu_seqlens"), HasSubstr("straddles")));

  TrainBatch short_mask = testing::sample_train_batch();
  short_mask.loss_mask = std::vector<uint8_t>(15, 1);
  EXPECT_THAT(decode_error(encode(short_mask)).message(), HasSubstr("loss_mask"));

  TrainBatch offsets = testing::sample_train_batch();
  offsets.micro_batch_row_offsets = {0, 2, 1};
  EXPECT_THAT(decode_error(encode(offsets)).message(), HasSubstr("micro_batch_row_offsets"));

  GenerateRequest bad_top_p;
  bad_top_p.top_p = 1.5f;
  EXPECT_THAT(decode_error(encode(bad_top_p)).message(), HasSubstr("top_p"));

  WeightBucket odd{1, 0, 0, DType::kF32, std::vector<uint8_t>(6)};
  EXPECT_THAT(decode_error(encode(odd)).message(), AllOf(HasSubstr("data"), HasSubstr("f32")));

  TrainBatch short_ref = testing::sample_train_batch();  // none, or one per token
  short_ref.ref_logprobs = std::vector<float>(15, -1.0f);
  EXPECT_THAT(decode_error(encode(short_ref)).message(), HasSubstr("ref_logprobs"));
  short_ref.ref_logprobs = {};
  EXPECT_TRUE(decode(encode(short_ref)).ok());

  ScoreRequest lengths;
  lengths.prompt_ids = {1, 2};
  lengths.completion_ids = {3, 4, 5};
  lengths.completion_lengths = {2, 2};
  EXPECT_THAT(decode_error(encode(lengths)).message(), AllOf(HasSubstr("completion_lengths"), HasSubstr("sum to 4")));
}

TEST(Protocol, DuplicateMapKeysAreRejected) {
  RegisterAck ack{1, "", {{"a", "1"}, {"b", "2"}}};
  std::string head = bytes_of(encode(ack)[0]);
  const size_t b = head.rfind('b');
  head[b] = 'a';  // keys now "a", "a"
  Frames frames;
  frames.push_back(frame_of(head));
  EXPECT_THAT(decode_error(std::move(frames)).message(), AllOf(HasSubstr("rendezvous"), HasSubstr("increasing")));
}

TEST(Protocol, LongStringsAreCutToTheLimitWhenEncoding) {
  auto decoded = decode(encode(Shutdown{std::string(kMaxStringBytes + 10, 'x')}));
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  EXPECT_EQ(decoded->get<Shutdown>()->reason.size(), kMaxStringBytes);
}

}  // namespace
}  // namespace rlrun
