// `rlrun CONFIG --set lora_rank=4` end to end: the real binary on configs/tiny.yaml with LoRA, a KL
// term, two trainer ranks with the distributed optimizer, and a rollout worker, on loopback. The
// run ends, each weight sync moves the adapters only, the run leaves the merged model and a PEFT
// adapter folder, and --resume goes on from its checkpoint.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(RunLora, TinyConfigWithAdaptersRunsToTheEndAndExportsBothForms) {
  const fs::path dir = fs::temp_directory_path() / ("rlrun_lora_e2e_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path run = dir / "run", out = dir / "out";
  fs::create_directories(dir);
  auto rlrun = [&](const std::string& extra) {
    const std::string cmd = std::string("cd '") + RLRUN_SOURCE_DIR + "' && '" + RLRUN_BINARY +
                            "' configs/tiny.yaml --run-dir '" + run.string() +
                            "' --set lora_rank=4 --set lora_alpha=8 --set kl_coef=0.05 --set checkpoint_every=2"
                            " --set trainer_num_workers=2 --set use_distributed_optimizer=true"
                            " --set heartbeat_timeout_seconds=60" + extra + " > '" + out.string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(rlrun(""), 0) << testing::read_all(out.string());

  const json summary = json::parse(testing::read_all((run / "summary.json").string()));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 3);
  // tiny.yaml's model: 2 layers, hidden 64, 2 heads of 32, 1 KV head, MLP 128; rank 4 on the seven
  // projections: (4 * 64 + 64 * 4) q, o + (256 + 32 * 4) k, v + (256 + 128 * 4) gate, up +
  // (4 * 128 + 64 * 4) down = 4096 f32 per layer.
  const std::string trainer_log = testing::read_all((run / "logs" / "trainer-0.log").string());
  EXPECT_NE(trainer_log.find("a weight sync moves 32768 bytes (the LoRA adapters only)"), std::string::npos)
      << trainer_log;
  EXPECT_TRUE(fs::exists(run / "model" / "model.safetensors")) << "the merged model";
  EXPECT_TRUE(fs::exists(run / "model" / "adapter" / "adapter_config.json"));
  EXPECT_TRUE(fs::exists(run / "model" / "adapter" / "adapter_model.safetensors"));
  const json adapter = json::parse(testing::read_all((run / "model" / "adapter" / "adapter_config.json").string()));
  EXPECT_EQ(adapter["r"], 4);
  EXPECT_EQ(adapter["lora_alpha"], 8);

  ASSERT_EQ(rlrun(" --resume --set number_of_steps=5"), 0) << testing::read_all(out.string());
  EXPECT_NE(testing::read_all(out.string()).find("resuming from"), std::string::npos);
  EXPECT_EQ(json::parse(testing::read_all((run / "summary.json").string()))["exit"], "ok");
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace rlrun::orchestrator
