// Weight send (trainer rank 0) / receive (rollout workers) over a real group of threads, on both
// weight transports (Gloo, for control_plane_security: none; the CURVE transport with the run's
// keys, for curve): bucket sizes that do not divide the buffer, metadata once then a digest,
// layout mismatches, late joiners, bf16 destinations, hostile headers and metadata;
// Trainer::send_weights with the gradient buffer freed for the whole send.
#include <gtest/gtest.h>

#include <cmath>

#include "bigram_test_double.h"
#include "common/protocol/curve_keys.h"
#include "engine/comm/weight_receiver.h"
#include "trainer/train_step.h"
#include "trainer/weight_sender.h"
#include "trainer_test_util.h"

namespace rlrun::trainer {
namespace {

using engine::FlatLayout;
using engine::Shape;
using testing::cpu_backend;

FlatLayout layout_of(int64_t a_rows, int64_t flat) {
  return FlatLayout{{{"a.weight", {a_rows, 3}, 0, a_rows * 3}, {"b.bias", {5}, 64, 5}}, flat, "f32"};
}

std::vector<float> weights(int64_t n, float salt) {
  std::vector<float> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = salt + 0.001f * static_cast<float>(i);
  return w;
}

// The parameter: true runs the group over the CURVE transport, false over Gloo.
class WeightSync : public ::testing::TestWithParam<bool> {
 protected:
  void run_group(int size, const std::function<void(int, engine::Communicator&)>& body, const std::string& name) {
    static const RunKeys keys = std::move(generate_run_keys()).value();
    testing::run_group(size, body, name, GetParam() ? client_security(keys) : SecurityOptions{});
  }
};
INSTANTIATE_TEST_SUITE_P(Transports, WeightSync, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Curve" : "Gloo"; });

TEST_P(WeightSync, OneSenderTwoReceiversMetadataOnceThenDigest) {
  const int64_t flat = 69;
  for (int64_t bucket_bytes : {20, 4, 1 << 20}) {  // 5 floats (69 = 13 * 5 + 4), 1 float, all at once
    run_group(3, [&](int rank, engine::Communicator& comm) {
      auto backend = cpu_backend();
      if (rank == 0) {
        WeightSender sender(*backend, layout_of(10, flat), comm, bucket_bytes);
        for (uint64_t version = 1; version <= 3; ++version) {
          auto params = engine::from_host(*backend, Shape{flat}, weights(flat, float(version)));
          auto r = sender.send(params, version);
          ASSERT_TRUE(r.ok()) << r.status().message();
          EXPECT_EQ(r->sent_metadata, version == 1);
          EXPECT_EQ(r->bytes, flat * 4);
          EXPECT_EQ(r->buckets, (flat * 4 + std::min<int64_t>(bucket_bytes, flat * 4) - 1) / std::min<int64_t>(bucket_bytes, flat * 4));
        }
      } else {
        // rank 2 receives into a backend buffer (the NCCL path's memory flow), rank 1 via host memory
        engine::WeightReceiver receiver(*backend, layout_of(10, flat), comm, int64_t{1} << 32, /*host_staging=*/rank == 1);
        auto dst = backend->zeros(Shape{flat}, engine::DType::kF32);
        for (uint64_t version = 1; version <= 3; ++version) {
          auto r = receiver.receive(dst);
          ASSERT_TRUE(r.ok()) << r.status().message();
          EXPECT_EQ(r->version, version);
          EXPECT_EQ(r->received_metadata, version == 1);
          if (rank == 1) {
            EXPECT_EQ(r->staging_bytes, 0) << "an f32 destination in host memory takes the buckets in place";
          } else {
            EXPECT_LE(r->staging_bytes, std::min<int64_t>(bucket_bytes, flat * 4));  // one bucket beyond the weights
          }
          EXPECT_EQ(engine::to_host_f32(dst), weights(flat, float(version)));
        }
      }
    }, "ws" + std::to_string(bucket_bytes));
  }
}

TEST_P(WeightSync, MismatchedReceiverFailsClearlyAndTheOthersContinue) {
  const int64_t flat = 69;
  run_group(3, [&](int rank, engine::Communicator& comm) {
    auto backend = cpu_backend();
    if (rank == 0) {
      WeightSender sender(*backend, layout_of(10, flat), comm, 32);
      for (uint64_t version = 1; version <= 2; ++version) {
        auto params = engine::from_host(*backend, Shape{flat}, weights(flat, float(version)));
        ASSERT_TRUE(sender.send(params, version).ok());
      }
      return;
    }
    // rank 2 believes a.weight is (11, 3): another model config.
    const FlatLayout own = rank == 1 ? layout_of(10, flat) : layout_of(11, flat);
    engine::WeightReceiver receiver(*backend, own, comm);
    auto dst = backend->zeros(Shape{flat}, engine::DType::kF32);
    for (uint64_t version = 1; version <= 2; ++version) {
      auto r = receiver.receive(dst);
      if (rank == 1) {
        ASSERT_TRUE(r.ok()) << r.status().message();
        EXPECT_EQ(engine::to_host_f32(dst), weights(flat, float(version)));
      } else {
        ASSERT_FALSE(r.ok());
        const std::string msg = r.status().message();
        if (version == 1) {
          EXPECT_NE(msg.find("a.weight"), std::string::npos) << msg;
          EXPECT_NE(msg.find("[10, 3] vs [11, 3]"), std::string::npos) << msg;
        } else {
          EXPECT_NE(msg.find("no layout was received"), std::string::npos) << msg;
        }
        EXPECT_EQ(engine::to_host_f32(dst), std::vector<float>(flat, 0.0f));  // never written
      }
    }
  }, "ws-mismatch");
}

TEST_P(WeightSync, Bf16DestinationAndResendMetadata) {
  const int64_t flat = 69;
  run_group(2, [&](int rank, engine::Communicator& comm) {
    auto backend = cpu_backend();
    if (rank == 0) {
      WeightSender sender(*backend, layout_of(10, flat), comm, 40);
      auto params = engine::from_host(*backend, Shape{flat}, weights(flat, 1.0f));
      ASSERT_TRUE(sender.send(params, 1).ok());
      sender.resend_metadata();
      auto r = sender.send(params, 2);
      ASSERT_TRUE(r.ok());
      EXPECT_TRUE(r->sent_metadata);
      return;
    }
    engine::WeightReceiver receiver(*backend, layout_of(10, flat), comm);
    auto dst = backend->zeros(Shape{flat}, engine::DType::kBF16);
    auto r1 = receiver.receive(dst);
    ASSERT_TRUE(r1.ok()) << r1.status().message();
    const auto got = engine::to_host_f32(dst);
    const auto want = weights(flat, 1.0f);
    for (int64_t i = 0; i < flat; ++i) EXPECT_EQ(got[i], engine::bf16_to_f32(engine::f32_to_bf16(want[i])));
    auto r2 = receiver.receive(dst);
    ASSERT_TRUE(r2.ok());
    EXPECT_TRUE(r2->received_metadata);
  }, "ws-bf16");
}

TEST(WeightSyncFormat, HostileHeadersAndMetadataAreErrors) {
  engine::WeightSyncHeader h;
  h.bucket_elements = 4;
  h.total_elements = 10;
  std::vector<uint8_t> bytes = engine::encode_header(h);
  auto ok = engine::decode_header(bytes);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->num_buckets(), 3u);
  std::vector<uint8_t> bad = bytes;
  bad[0] ^= 1;
  EXPECT_FALSE(engine::decode_header(bad).ok());
  bad = bytes;
  bad[40] = 0;  // zero bucket
  EXPECT_FALSE(engine::decode_header(bad).ok());
  EXPECT_FALSE(engine::decode_header(std::span<const uint8_t>(bytes.data(), 10)).ok());
  for (std::string blob : {std::string("{"), std::string("[]"), std::string(R"({"flat_elements":5})"),
                           std::string(R"({"flat_elements":5,"dtype":"f32","tensors":[{"name":"x","shape":[9],"offset":0,"numel":9}]})"),
                           std::string(R"({"flat_elements":5,"dtype":"f32","tensors":[{"name":"x","shape":[1],"offset":-1,"numel":1}]})")}) {
    EXPECT_FALSE(engine::decode_layout(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(blob.data()), blob.size())).ok()) << blob;
  }
  const FlatLayout l = layout_of(10, 69);
  const std::string enc = engine::encode_layout(l);
  auto dec = engine::decode_layout(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(enc.data()), enc.size()));
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, l);
  EXPECT_NE(engine::layout_digest(l), engine::layout_digest(layout_of(11, 69)));
}

TEST(WeightSyncFormat, TheLayoutDigestIsTheOneCheckpointsRecord) {
  // trainer_state.json holds it and a resume compares it: a change here is a change of the
  // checkpoint format (every checkpoint written before would no longer load).
  EXPECT_EQ(engine::layout_digest(layout_of(10, 69)), 15936405931150266863ULL);
}

TEST_P(WeightSync, TrainerFreesGradBuffersForTheWholeSend) {
  for (bool free_grads : {false, true}) {
    run_group(2, [&](int rank, engine::Communicator& comm) {
      auto backend = cpu_backend();
      testing::BigramTestDouble model(*backend, 7, 3);
      FlatLayout own{model.param_specs(), model.flat_size(), "f32"};
      if (rank == 0) {
        TrainerOptions o;
        o.weight_broadcast_free_grad_buffers = free_grads;
        auto trainer = Trainer::create(o, model, nullptr, &comm);
        ASSERT_TRUE(trainer.ok());
        const int64_t in_use = static_cast<int64_t>(backend->bytes_in_use());
        auto r = (*trainer)->send_weights(5);
        ASSERT_TRUE(r.ok()) << r.status().message();
        EXPECT_EQ(r->freed_grad_buffers, free_grads);
        // grads are P floats in a 256-byte aligned block
        const int64_t grad_bytes = model.flat_size() * 4;
        if (free_grads) {
          EXPECT_LE(r->backend_in_use_during, in_use - grad_bytes);
        } else {
          EXPECT_EQ(r->backend_in_use_during, in_use);
        }
        EXPECT_TRUE(model.has_grads());  // restored after the send
        EXPECT_EQ(engine::to_host_f32(model.grads_flat()), std::vector<float>(model.flat_size(), 0.0f));
      } else {
        engine::WeightReceiver receiver(*backend, own, comm);
        auto dst = backend->zeros(Shape{model.flat_size()}, engine::DType::kF32);
        auto r = receiver.receive(dst);
        ASSERT_TRUE(r.ok()) << r.status().message();
        EXPECT_EQ(r->version, 5u);
        EXPECT_EQ(engine::to_host_f32(dst), engine::to_host_f32(model.params_flat()));  // same seed
      }
    }, free_grads ? "ws-free" : "ws-keep");
  }
}

// bf16 weights (rank 0 holds no full f32 master): widened per bucket on the host, f32 on the wire.
TEST_P(WeightSync, Bf16WeightsAreSentWidened) {
  const int64_t flat = 69;
  std::vector<float> values(flat);
  for (int64_t i = 0; i < flat; ++i) values[i] = std::sin(0.3f * static_cast<float>(i));
  run_group(2, [&](int rank, engine::Communicator& comm) {
    auto backend = cpu_backend();
    if (rank == 0) {
      auto weights = backend->zeros(Shape{flat}, engine::DType::kBF16);
      engine::copy_from_host_f32(weights, values);
      WeightSender sender(*backend, layout_of(10, flat), comm, 40);
      auto r = sender.send(weights, 3);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->bytes, flat * 4);
      EXPECT_EQ(r->staging_bytes, 10 * (4 + 2));  // one bucket as f32 and as bf16, on the host
    } else {
      engine::WeightReceiver receiver(*backend, layout_of(10, flat), comm);
      auto dst = backend->zeros(Shape{flat}, engine::DType::kF32);
      ASSERT_TRUE(receiver.receive(dst).ok());
      const std::vector<float> got = engine::to_host_f32(dst);
      for (int64_t i = 0; i < flat; ++i) EXPECT_EQ(got[i], engine::bf16_to_f32(engine::f32_to_bf16(values[i]))) << i;
    }
  }, "ws-bf16");
}

}  // namespace
}  // namespace rlrun::trainer
