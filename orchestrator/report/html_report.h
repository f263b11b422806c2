// report/html_report.h - `rlrun report`'s page: one self-contained HTML file (inline CSS and
// SVG; no script, no font, no URL to fetch) with the curves of a run, its summary, sampled
// completions and its config. Every text that comes from the run folder is HTML-escaped.
#pragma once

#include <string>

#include "orchestrator/report/run_folder.h"

namespace rlrun::orchestrator {

inline constexpr size_t kReportSamplesPerGroup = 5;  // completions shown per (step, kind)
inline constexpr size_t kReportSampleGroups = 40;    // (step, kind) groups shown at most: first and last halves

std::string render_report_html(const RunFolder& run);

// The page's sections (html_report.cc puts them together; html_sections.cc writes the tables).
std::string report_curves_section(const RunFolder& run);
std::string report_summary_section(const RunFolder& run);
std::string report_samples_section(const RunFolder& run);
std::string report_config_section(const RunFolder& run);
std::string report_inputs_section(const RunFolder& run);

}  // namespace rlrun::orchestrator
