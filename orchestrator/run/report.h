// run/report.h - summary.json: what a run did, written at its end whatever the end was.
//
//   {"steps_completed": n, "wall_seconds": s,
//    "samples": {"generated", "trained", "discarded": {reason: n}, "cancelled",
//                "in_flight_at_exit", "lost"},
//    "reward_mean": {"first", "last"},          means over the first / last 10% of steps (null: none)
//    "eval": {"accuracy_before", "accuracy_after"},   null without an eval set; "accuracy_after_note"
//            when the run stopped before its last step (when it was measured, or why not)
//    "trainer_idle_fraction", "rollout_idle_fraction",
//    "tokens_per_second": {"generated", "trained"},
//    "peak_memory_bytes": {process: n}, "processes": [...], "worker_restarts": 0,
//    "worker_failures": [...], "prompts_skipped": n, "zero_spread_groups_kept": n,
//    "model": the HF folder of the final weights (<run_dir>/model) or null,
//    "exit": "ok" | "interrupted" | the failure}
#pragma once

#include <string>

#include "common/status.h"
#include "orchestrator/run/outcome.h"

namespace rlrun::orchestrator {

std::string summary_json(const RunOutcome& outcome, double wall_seconds);
Status write_summary(const std::string& path, const RunOutcome& outcome, double wall_seconds);

}  // namespace rlrun::orchestrator
