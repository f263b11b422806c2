// `rlrun serve` as a real process: its flag errors, a tiny checkpoint the test writes (serves,
// refuses a busy port, stops on SIGTERM), and the real SmolLM2-135M-Instruct .gguf (with its chat
// template) driven by the official `openai` Python client (tests/reference/openai_client_check.py,
// in the venv of scripts/setup-python-ref.sh) and by curl.
//
// The .gguf lives under build/models/ (or $RLRUN_MODELS_DIR), made by scripts/fetch-test-models.sh;
// a missing file FAILS unless RLRUN_SKIP_MODEL_TESTS=1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "engine/io/model_io.h"
#include "tests/common/http_get.h"
#include "tests/engine/model/model_test_util.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using rlrun::testing::CliRun;
using rlrun::testing::read_all;
using rlrun::testing::run_rlrun;
using rlrun::testing::run_shell;
using rlrun::testing::TempDir;

// A `rlrun serve` child; SIGKILLed if the test leaves it running.
class ServeProcess {
 public:
  ServeProcess(const TempDir& dir, const std::vector<std::string>& flags) : log_(dir.path() + "/serve.log") {
    std::vector<std::string> argv = {RLRUN_BINARY, "serve", "--bind", "127.0.0.1:0", "--threads", "2"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    pid_ = rlrun::testing::spawn_in(dir.path(), argv, log_);
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // The port from the "serving ... on http://127.0.0.1:PORT/v1" line; 0 if it exited or took 120 s.
  int wait_port() {
    const std::regex listening("on http://127\\.0\\.0\\.1:([0-9]+)/v1");
    for (int i = 0; i < 1200; ++i) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, listening)) return std::stoi(m[1]);
      if (exited()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  }
  // SIGTERM, then the exit code (-1 when it did not exit by itself within 20 s).
  int stop() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 200 && !exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!exited()) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  bool exited() {
    if (pid_ > 0 && ::waitpid(pid_, &status_, WNOHANG) == pid_) pid_ = -1;
    return pid_ <= 0;
  }
  std::string log() const { return read_all(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int status_ = 0;
};

// A random tiny model (vocabulary 400 over the tiny tokenizer's 397 tokens) saved as an HF folder.
std::string tiny_checkpoint(const TempDir& dir) {
  engine::ModelConfig c = engine::testing::tiny_config(false);
  c.vocab_size = 400;
  c.eos_token_id = 2;
  auto backend = engine::testing::cpu_backend();
  auto model = engine::Model::create(*backend, c);
  EXPECT_TRUE(model.ok());
  (*model)->weights().init_random(11, 0.3f);
  const std::string path = dir.path() + "/tiny";
  EXPECT_TRUE(engine::save_weights(**model, path, engine::DType::kF32).ok());
  fs::copy_file(fs::path(RLRUN_SOURCE_DIR) / "configs/tokenizers/tiny.json", fs::path(path) / "tokenizer.json");
  return path;
}

TEST(ServeCli, BadFlagsExitWithUsageErrors) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"serve", "missing --checkpoint"},
      {"serve --checkpoint /no/such/model", "is not a directory"},
      {"serve --checkpoint /no/such/model --bind localhost", "not a valid listen address"},
      {"serve --checkpoint /no/such/model --max-num-seqs 0", "--max-num-seqs"},
      {"serve --checkpoint /no/such/model --frobnicate", "--frobnicate"},
  };
  for (const auto& [args, message] : cases) {
    const CliRun r = run_rlrun(dir, args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

TEST(ServeCli, TinyCheckpointServesRefusesABusyPortAndStopsOnSigterm) {
  TempDir dir;
  const std::string checkpoint = tiny_checkpoint(dir);
  ServeProcess server(dir, {"--checkpoint", checkpoint, "--model-name", "tiny", "--max-model-len", "64"});
  const int port = server.wait_port();
  ASSERT_GT(port, 0) << server.log();
  EXPECT_THAT(rlrun::testing::http_get(port, "/v1/models").body, HasSubstr("\"id\":\"tiny\""));
  const auto r = rlrun::testing::http_post(port, "/v1/completions", R"({"model": "tiny", "prompt": "hi", "max_tokens": 3})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr("\"token_ids\""));

  const CliRun busy = run_rlrun(dir, str("serve --checkpoint '", checkpoint, "' --bind 127.0.0.1:", port));
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  EXPECT_THAT(busy.err, HasSubstr("in use"));

  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_THAT(server.log(), HasSubstr("sequences in one batch"));
}

TEST(ServeSmolLM2, OpenAiClientAndCurlAgainstTheRealModel) {
  const char* env = std::getenv("RLRUN_MODELS_DIR");
  const fs::path gguf = (env && *env ? fs::path(env) : fs::path(RLRUN_SOURCE_DIR) / "build/models") /
                        "smollm2-135m-instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) {
    if (rlrun::testing::skip_model_tests()) GTEST_SKIP() << gguf << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << gguf << " is missing: run scripts/setup.sh --test (or scripts/fetch-test-models.sh), or set "
           << "RLRUN_SKIP_MODEL_TESTS=1 to skip this test";
  }
  const std::string python = RLRUN_PYREF_PYTHON;
  TempDir dir;
  ASSERT_EQ(run_shell(dir, str("'", python, "' -c 'import openai'")).exit_code, 0)
      << python << " cannot import openai: run scripts/setup-python-ref.sh";
  ServeProcess server(dir, {"--checkpoint", gguf.string(), "--model-name", "smollm2", "--max-model-len", "1024"});
  const int port = server.wait_port();
  ASSERT_GT(port, 0) << server.log();
  const std::string base = str("http://127.0.0.1:", port, "/v1");

  const CliRun client = run_shell(dir, str("'", python, "' '", RLRUN_SOURCE_DIR,
                                           "/tests/reference/openai_client_check.py' ", base, " smollm2"));
  std::printf("%s", client.out.c_str());
  EXPECT_EQ(client.exit_code, 0) << client.out << client.err << "\nserver log:\n" << server.log();

  const CliRun models = run_shell(dir, str("curl -sS ", base, "/models"));
  EXPECT_THAT(models.out, HasSubstr("\"id\":\"smollm2\"")) << models.err;
  const CliRun stream = run_shell(
      dir, str("curl -sSN ", base, "/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"smollm2\", ",
               "\"messages\": [{\"role\": \"user\", \"content\": \"Say hi\"}], \"max_tokens\": 8, \"stream\": true}'"));
  EXPECT_THAT(stream.out, HasSubstr("\"object\":\"chat.completion.chunk\"")) << stream.err;
  EXPECT_THAT(stream.out, HasSubstr("data: [DONE]\n\n"));
  const std::string body = dir.path() + "/body.json";
  const CliRun bad = run_shell(dir, str("curl -s -o '", body, "' -w '%{http_code}' ", base, "/completions -d '{oops'"));
  EXPECT_EQ(bad.out, "400");
  EXPECT_THAT(read_all(body), HasSubstr("\"invalid_request_error\""));
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace rlrun
