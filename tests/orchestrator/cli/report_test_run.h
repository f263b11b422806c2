// report_test_run.h - a hand-written run folder for the `rlrun report` tests (report_cli_test.cc,
// report_browser_test.cc): what a 6-step run with evaluations, two reward terms and a reward
// server writes, plus the faults a report must survive: a malformed line in metrics.jsonl and in
// samples.jsonl, a step line with most keys missing, and a prompt that is an HTML injection.
#pragma once

#include <string>

#include "tests/common/config_test_util.h"

namespace rlrun::testing {

// What the folder below holds, for the tests' expectations.
struct ReportTestRun {
  static constexpr int kSvgCharts = 7;       // reward, server logs, accuracy, idle, tokens/s, step time, memory
  static constexpr int kSeries = 11;         // reward 1+2 terms, server logs 1, accuracy 1, idle 1, tokens 2, step time 3
  static constexpr int kBars = 3;            // peak memory: orchestrator, rollout-0, trainer-0
  static constexpr int kSampleGroups = 3;    // step 3 eval, step 3 train, step 6 eval
  static constexpr int kSamplesShown = 8;    // 2 + 1 + 5 (of 7)
  static constexpr const char* kInjection = "<script>alert('pwned')</script>";
};

inline void write_report_test_run(const TempDir& dir) {
  std::string metrics;
  for (int step = 1; step <= 6; ++step) {
    if (step == 4) {  // a line that is no JSON, then a step line with almost nothing in it
      metrics += "{\"step\": 4, \"reward_mean\": \n";
      metrics += "{\"step\": 4}\n";
      continue;
    }
    const double reward = 0.1 * step;
    metrics += str("{\"step\":", step, ",\"reward_mean\":", reward, ",\"reward_std\":0.2,\"wait_seconds\":",
                   0.5 / step, ",\"train_seconds\":0.3,\"weight_sync_seconds\":0.05,\"tokens_trained\":", 900 + step,
                   ",\"tokens_generated_total\":", 1500 * step, ",\"async_level\":1,\"discarded_total\":0,",
                   step % 3 == 0 ? str("\"eval_accuracy\":", 0.1 * step, ",") : std::string(),
                   "\"reward_terms\":{\"exact\":", reward, ",\"format\":", 0.9, "},",
                   "\"reward_server_logs\":{\"length\":", 10 + step, "},\"trainer\":{\"loss\":0.1}}\n");
  }
  dir.write("metrics.jsonl", metrics);
  dir.write("summary.json", R"({
  "steps_completed": 6,
  "wall_seconds": 12.5,
  "samples": {"generated": 96, "trained": 48, "discarded": {"zero_advantage": 40}, "cancelled": 0,
              "in_flight_at_exit": 8, "lost": 0, "anomalies": 0},
  "reward_mean": {"first": 0.1, "last": 0.6},
  "eval": {"accuracy_before": 0.05, "accuracy_after": 0.75},
  "reward": {"expression": "exact + 0.1 * format",
             "server": {"url": "http://127.0.0.1:8000/score", "requests": 12, "failed_requests": 1}},
  "trainer_idle_fraction": 0.42,
  "rollout_idle_fraction": 0.07,
  "tokens_per_second": {"generated": 800.5, "trained": 430.25},
  "peak_memory_bytes": {"orchestrator": 26107904, "rollout-0": 53526528, "trainer-0": 51298304},
  "processes": [{"role": "rollout", "rank": 0, "peak_memory_bytes": 53526528}],
  "worker_restarts": 0,
  "worker_failures": [],
  "exit": "ok"
}
)");
  dir.write("config.yaml", "# run <b>config</b> & more\nnumber_of_steps: 6\ntask:\n  name: reverse\n");
  std::string samples;
  auto sample = [](int step, const char* kind, const std::string& prompt, double reward) {
    return str("{\"step\":", step, ",\"kind\":\"", kind, "\",\"prompt\":\"", prompt,
               "\",\"completion\":\"cba\",\"answer\":\"cba\",\"reward\":", reward,
               ",\"advantage\":null,\"correct\":true}\n");
  };
  samples += sample(3, "eval", str(ReportTestRun::kInjection, " reverse abc:"), 1);
  samples += sample(3, "eval", "reverse xyz:", 0);
  samples += "{\"step\": 3, \"kind\": \"train\"}\n";  // no prompt: skipped
  samples += sample(3, "train", "reverse abc:", 1);
  for (int i = 0; i < 7; ++i) samples += sample(6, "eval", str("reverse q", i, ":"), 1);
  dir.write("samples.jsonl", samples);
}

}  // namespace rlrun::testing
