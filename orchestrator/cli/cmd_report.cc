// `rlrun report RUN_DIR [-o FILE]`: a run folder as one self-contained HTML page
// (orchestrator/report/html_report.h).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/atomic_file.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/plan/memory_report.h"
#include "orchestrator/report/html_report.h"
#include "orchestrator/report/run_folder.h"

namespace rlrun::orchestrator {

int cmd_report(const Args& args) {
  static constexpr FlagSpec kFlags[] = {{"-o", true}, {"--output", true}};
  Result<ConfigArgs> parsed = parse_config_args(args, kFlags);
  if (!parsed.ok()) return report_usage_error("report", parsed.status());
  if (!parsed->overrides.empty()) return report_usage_error("report", invalid_argument("report takes no --set"));
  if (parsed->config_path.empty()) return report_usage_error("report", invalid_argument("missing RUN_DIR; see --help"));
  if (parsed->has("-o") && parsed->has("--output")) {
    return report_usage_error("report", invalid_argument("give the output once (-o or --output)"));
  }
  const std::string dir = parsed->config_path;
  const std::string output =
      parsed->value("-o", parsed->value("--output", (std::filesystem::path(dir) / "report.html").string()));

  const auto start = std::chrono::steady_clock::now();
  Result<RunFolder> run = read_run_folder(dir, kReportSamplesPerGroup);
  if (!run.ok()) {
    std::fprintf(stderr, "rlrun report: %s\n", run.status().message().c_str());
    return kExitUsage;
  }
  const std::string html = render_report_html(*run);
  if (Status s = write_file_atomic(output, html); !s.ok()) {
    std::fprintf(stderr, "rlrun report: %s\n", s.message().c_str());
    return kExitFailed;
  }
  for (const InputFile* f : {&run->metrics, &run->summary_file, &run->config, &run->samples_file}) {
    if (f->skipped == 0) continue;
    if (f->name.ends_with(".jsonl")) {
      std::fprintf(stderr, "rlrun report: %s/%s: skipped %lld malformed line(s); the first: %s\n", dir.c_str(),
                   f->name.c_str(), static_cast<long long>(f->skipped), f->first_problem.c_str());
    } else {
      std::fprintf(stderr, "rlrun report: %s/%s left out: %s\n", dir.c_str(), f->name.c_str(), f->first_problem.c_str());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "rlrun report: wrote %s (%s, %zu steps) in %.2f s\n", output.c_str(),
               format_bytes(static_cast<double>(html.size())).c_str(), run->steps.size(), seconds);
  return kExitOk;
}

}  // namespace rlrun::orchestrator
