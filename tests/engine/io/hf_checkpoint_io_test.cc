// Checkpoint directory IO without Python: what load_hf_checkpoint_tensors refuses, shards, and
// save_hf_checkpoint's contract. (The comparison against transformers is hf_checkpoint_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "common/observe/log.h"
#include "engine/bf16.h"
#include "engine/io/hf_checkpoint.h"

namespace rlrun::engine {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class HfCheckpointIo : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "hf_checkpoint_io.XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    config_.architecture = "qwen2";
    config_.qkv_bias = true;
    config_.hidden_size = 16;
    config_.num_layers = 2;
    config_.num_heads = 4;
    config_.num_kv_heads = 2;
    config_.intermediate_size = 24;
    config_.vocab_size = 11;
    config_.max_position = 64;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (const TensorSpec& spec : hf_tensor_specs(config_)) {
      HostTensor t{spec.name, spec.shape, {}};
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      for (int64_t i = 0; i < n; ++i) t.data.push_back(normal(rng));
      tensors_.push_back(std::move(t));
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  // Writes `tensors` as dir/model.safetensors (no config.json needed for *_tensors loading).
  void write_model(const std::vector<HostTensor>& tensors) {
    ASSERT_TRUE(write_safetensors_f32(path("model.safetensors"), tensors, DType::kF32).ok());
  }

  std::string dir_;
  ModelConfig config_;
  std::vector<HostTensor> tensors_;  // hf_tensor_specs order
};

TEST_F(HfCheckpointIo, SaveThenLoadRoundTrips) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ASSERT_TRUE(save_hf_checkpoint(dir_, config_, tensors_, dtype).ok());
    Result<HfCheckpoint> back = load_hf_checkpoint(dir_);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->config.num_parameters(), config_.num_parameters());
    ASSERT_EQ(back->tensors.size(), tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      EXPECT_EQ(back->tensors[i].name, tensors_[i].name);
      EXPECT_EQ(back->tensors[i].shape, tensors_[i].shape);
      for (size_t k = 0; k < tensors_[i].data.size(); ++k) {
        const float v = tensors_[i].data[k];
        ASSERT_EQ(back->tensors[i].data[k], dtype == DType::kF32 ? v : bf16_to_f32(f32_to_bf16(v)));
      }
    }
  }
  // nothing but the two files: temporaries are renamed or removed
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"config.json", "model.safetensors"}));
}

TEST_F(HfCheckpointIo, SaveAcceptsAnyOrderButNotAWrongSet) {
  std::vector<HostTensor> reversed(tensors_.rbegin(), tensors_.rend());
  EXPECT_TRUE(save_hf_checkpoint(dir_, config_, reversed, DType::kF32).ok());
  std::vector<HostTensor> missing(tensors_.begin() + 1, tensors_.end());
  EXPECT_THAT(save_hf_checkpoint(dir_, config_, missing, DType::kF32).message(), HasSubstr("tensors"));
  std::vector<HostTensor> wrong = tensors_;
  wrong[1].shape = {8, 2};
  EXPECT_THAT(save_hf_checkpoint(dir_, config_, wrong, DType::kF32).message(), HasSubstr(wrong[1].name));
  EXPECT_FALSE(save_hf_checkpoint(dir_, config_, tensors_, DType::kF16).ok());
}

TEST_F(HfCheckpointIo, MissingTensorIsNamed) {
  std::vector<HostTensor> t = tensors_;
  t.erase(t.begin() + 3);
  write_model(t);
  Status st = load_hf_checkpoint_tensors(dir_, config_).status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("`" + tensors_[3].name + "` is missing"));
}

TEST_F(HfCheckpointIo, WrongShapeIsNamed) {
  std::vector<HostTensor> t = tensors_;
  size_t k = 0;
  while (t[k].name != "model.layers.0.self_attn.k_proj.weight") ++k;
  t[k].shape = {t[k].shape[1], t[k].shape[0]};  // k_proj (8, 16) stored transposed
  write_model(t);
  Status st = load_hf_checkpoint_tensors(dir_, config_).status();
  EXPECT_THAT(st.message(), HasSubstr("`" + tensors_[k].name + "` has shape [16, 8], expected [8, 16]"));
  EXPECT_THAT(st.message(), HasSubstr("model.safetensors"));
}

TEST_F(HfCheckpointIo, UnexpectedTensorMeansAnotherArchitecture) {
  write_model(tensors_);  // qwen2 weights (with biases) ...
  ModelConfig llama = config_;
  llama.architecture = "llama";
  llama.qkv_bias = false;
  Status st = load_hf_checkpoint_tensors(dir_, llama).status();  // ... loaded as llama
  EXPECT_THAT(st.message(), HasSubstr("unexpected tensor `model.layers.0.self_attn.k_proj.bias`"));
}

TEST_F(HfCheckpointIo, IgnoresInvFreqAndTiedLmHead) {
  ModelConfig tied = config_;
  tied.tie_embeddings = true;
  std::vector<HostTensor> t;
  for (const HostTensor& x : tensors_) {
    if (x.name != "lm_head.weight") t.push_back(x);
  }
  ASSERT_EQ(t.size() + 1, tensors_.size());
  t.push_back({"lm_head.weight", {config_.vocab_size, config_.hidden_size},
               std::vector<float>(static_cast<size_t>(config_.vocab_size * config_.hidden_size), 0.5f)});
  t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {2}, {1.0f, 0.5f}});
  write_model(t);
  Result<std::vector<HostTensor>> loaded = load_hf_checkpoint_tensors(dir_, tied);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->size(), tensors_.size() - 1);
}

TEST_F(HfCheckpointIo, LoadsShardsListedInTheIndex) {
  const size_t half = tensors_.size() / 2;
  std::vector<HostTensor> a(tensors_.begin(), tensors_.begin() + static_cast<long>(half));
  std::vector<HostTensor> b(tensors_.begin() + static_cast<long>(half), tensors_.end());
  ASSERT_TRUE(write_safetensors_f32(path("model-00001-of-00002.safetensors"), a, DType::kBF16).ok());
  ASSERT_TRUE(write_safetensors_f32(path("model-00002-of-00002.safetensors"), b, DType::kF32).ok());
  std::string index = R"({"metadata": {}, "weight_map": {)";
  for (size_t i = 0; i < tensors_.size(); ++i) {
    index += str(i ? "," : "", "\"", tensors_[i].name, "\": \"model-0000", i < half ? 1 : 2, "-of-00002.safetensors\"");
  }
  std::ofstream(path("model.safetensors.index.json")) << index << "}}";
  Result<std::vector<HostTensor>> loaded = load_hf_checkpoint_tensors(dir_, config_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ((*loaded)[half].data, tensors_[half].data);  // an F32 shard: exact

  std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map": {"x": "../etc/passwd"}})";
  EXPECT_THAT(load_hf_checkpoint_tensors(dir_, config_).status().message(), HasSubstr("not a file name"));
}

TEST_F(HfCheckpointIo, DuplicateAcrossShardsAndMissingDirectory) {
  ASSERT_TRUE(write_safetensors_f32(path("s1.safetensors"), tensors_, DType::kF32).ok());
  ASSERT_TRUE(write_safetensors_f32(path("s2.safetensors"), std::vector<HostTensor>{tensors_[0]}, DType::kF32).ok());
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})";
  EXPECT_THAT(load_hf_checkpoint_tensors(dir_, config_).status().message(),
              HasSubstr("`model.embed_tokens.weight` is in both"));
  EXPECT_EQ(load_hf_checkpoint(path("absent")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace rlrun::engine
