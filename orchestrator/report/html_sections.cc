// report/html_sections.cc - the report's tables: the summary (a headline table and all of
// summary.json), sampled completions, the config, and what was read from the run folder.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/html.h"
#include "common/observe/log.h"
#include "orchestrator/plan/memory_report.h"
#include "orchestrator/report/html_report.h"

namespace rlrun::orchestrator {

namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxTextBytes = 4000;  // a longer prompt or completion is cut (the page stays readable)

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A summary.json number as a person reads it; the key's suffix says the unit.
std::string format_number(const std::string& key, const Json& v) {
  if (v.is_number_integer() && !ends_with(key, "_bytes")) return v.dump();
  const double d = v.get<double>();
  if (ends_with(key, "_bytes")) return str(format_bytes(d), " (", v.dump(), ")");
  if (ends_with(key, "_fraction")) return printf_string("%.1f%%", d * 100);
  if (ends_with(key, "seconds")) return printf_string("%.4g s", d);
  return printf_string("%.4g", d);
}

// Any JSON value as HTML: objects as key/value tables, arrays of objects as tables with a
// column per key, other arrays as lists, null as a dash.
std::string json_html(const Json& v, const std::string& key) {
  if (v.is_null()) return "&mdash;";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_string()) return html_escape(v.get<std::string>());
  if (v.is_number()) return format_number(key, v);
  if (v.is_object()) {
    if (v.empty()) return "&mdash;";
    std::string out = "<table>\n";
    for (const auto& [k, value] : v.items()) {
      out += str("<tr><th>", html_escape(k), "</th><td", value.is_number() ? " class=\"num\"" : "", ">",
                 json_html(value, k), "</td></tr>\n");
    }
    return out + "</table>";
  }
  if (v.empty()) return "none";
  bool all_objects = true;
  for (const Json& e : v) all_objects = all_objects && e.is_object();
  if (!all_objects) {
    std::string out;
    for (const Json& e : v) out += (out.empty() ? "" : ", ") + json_html(e, key);
    return out;
  }
  std::vector<std::string> columns;  // every key, in order of first appearance
  for (const Json& e : v) {
    for (const auto& [k, value] : e.items()) {
      if (std::find(columns.begin(), columns.end(), k) == columns.end()) columns.push_back(k);
    }
  }
  std::string out = "<table>\n<tr>";
  for (const std::string& c : columns) out += "<th>" + html_escape(c) + "</th>";
  out += "</tr>\n";
  for (const Json& e : v) {
    out += "<tr>";
    for (const std::string& c : columns) {
      auto it = e.find(c);
      if (it == e.end()) {
        out += "<td></td>";
      } else {
        out += str("<td", it->is_number() ? " class=\"num\"" : "", ">", json_html(*it, c), "</td>");
      }
    }
    out += "</tr>\n";
  }
  return out + "</table>";
}

// "A -> B" of two summary values (formatted for `key`), or "" when neither is there.
std::string from_to(const RunFolder& run, std::initializer_list<const char*> a, std::initializer_list<const char*> b,
                    const std::string& key) {
  const Json *x = find_summary_value(run, a), *y = find_summary_value(run, b);
  if (x == nullptr && y == nullptr) return "";
  auto one = [&](const Json* v) { return v == nullptr ? std::string("&mdash;") : json_html(*v, key); };
  return one(x) + " &rarr; " + one(y);
}

// The figures a user looks at first, each when summary.json has it.
std::string headline_table(const RunFolder& run) {
  std::vector<std::pair<std::string, std::string>> rows;
  auto add = [&](const std::string& name, std::initializer_list<const char*> path, const std::string& key) {
    if (const Json* v = find_summary_value(run, path)) rows.push_back({name, json_html(*v, key)});
  };
  add("exit", {"exit"}, "exit");
  add("steps completed", {"steps_completed"}, "steps");
  add("wall time", {"wall_seconds"}, "wall_seconds");
  // "accuracy_fraction": formatted as a percentage, like the idle fractions.
  std::string t = from_to(run, {"eval", "accuracy_before"}, {"eval", "accuracy_after"}, "accuracy_fraction");
  if (!t.empty()) rows.push_back({"held-out accuracy, before &rarr; after RL", t});
  add("note on accuracy after", {"eval", "accuracy_after_note"}, "note");
  t = from_to(run, {"reward_mean", "first"}, {"reward_mean", "last"}, "reward");
  if (!t.empty()) rows.push_back({"reward mean, first &rarr; last 10% of steps", t});
  add("trainer idle", {"trainer_idle_fraction"}, "trainer_idle_fraction");
  add("rollout idle", {"rollout_idle_fraction"}, "rollout_idle_fraction");
  add("tokens/s generated", {"tokens_per_second", "generated"}, "generated");
  add("tokens/s trained", {"tokens_per_second", "trained"}, "trained");
  add("samples generated", {"samples", "generated"}, "generated");
  add("samples trained", {"samples", "trained"}, "trained");
  add("samples discarded, by reason", {"samples", "discarded"}, "discarded");
  add("reward", {"reward", "expression"}, "expression");
  add("reward server", {"reward", "server"}, "server");
  add("worker restarts", {"worker_restarts"}, "worker_restarts");
  add("trainer restarts", {"trainer_restarts"}, "trainer_restarts");
  std::string out = "<table>\n";
  for (const auto& [name, value] : rows) out += str("<tr><th>", name, "</th><td>", value, "</td></tr>\n");
  return out + "</table>\n";
}

// `text` cut to kMaxTextBytes at a UTF-8 character boundary, escaped, with how much was cut.
std::string clipped_text(const std::string& text) {
  if (text.size() <= kMaxTextBytes) return html_escape(text);
  size_t cut = kMaxTextBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return str(html_escape(text.substr(0, cut)), "<span class=\"note\"> [", text.size() - cut, " more bytes]</span>");
}

std::string number_cell(double v, const char* format) {
  return std::isfinite(v) ? "<td class=\"num\">" + printf_string(format, v) + "</td>" : "<td>&mdash;</td>";
}

std::string sample_table(const std::vector<const SampleRecord*>& group) {
  std::string out = "<table>\n<tr><th>prompt</th><th>completion</th><th>answer</th><th>reward</th><th>advantage</th>"
                    "<th>correct</th></tr>\n";
  for (const SampleRecord* s : group) {
    const std::string correct = !s->correct ? "&mdash;" : *s->correct ? "<span class=\"ok\">yes</span>"
                                                                      : "<span class=\"bad\">no</span>";
    out += str("<tr><td><pre>", clipped_text(s->prompt), "</pre></td><td><pre>", clipped_text(s->completion),
               "</pre></td><td><pre>", clipped_text(s->answer), "</pre></td>", number_cell(s->reward, "%.4g"),
               number_cell(s->advantage.value_or(kMissing), "%+.3f"), "<td>", correct, "</td></tr>\n");
  }
  return out + "</table>\n";
}

// "350 lines read, 1 malformed line skipped (first: line 3: ...)", "read", "missing".
std::string file_state(const InputFile& f) {
  if (!f.present) return "missing";
  if (!f.name.ends_with(".jsonl")) return f.used ? "read" : "<b>unreadable</b>: " + html_escape(f.first_problem);
  std::string out = str(f.used, f.used == 1 ? " line" : " lines", " read");
  if (f.skipped > 0) {
    out += str(", <b>", f.skipped, " malformed line", f.skipped == 1 ? "" : "s", " skipped</b> (first: ",
               html_escape(f.first_problem), ")");
  }
  return out;
}

}  // namespace

std::string report_summary_section(const RunFolder& run) {
  if (!run.summary.is_object()) {
    return "<h2>Summary</h2>\n<p class=\"note\">No usable summary.json in this run folder (a run writes it when it "
           "ends, also after a failure or Ctrl-C).</p>\n";
  }
  return str("<h2>Summary</h2>\n", headline_table(run),
             "<details><summary>all of summary.json</summary>\n", json_html(run.summary, ""), "\n</details>\n");
}

std::string report_samples_section(const RunFolder& run) {
  std::string out = "<h2>Sampled completions</h2>\n";
  if (!run.samples_file.present) {
    return out + "<p class=\"note\">This run folder has no samples.jsonl (runs write a few prompts, completions, "
                 "rewards and advantages there at each evaluation).</p>\n";
  }
  if (run.samples.empty()) return out + "<p class=\"note\">samples.jsonl holds no usable sample.</p>\n";
  // Group the records (sorted by step, then kind) back into their (step, kind) groups.
  std::vector<std::vector<const SampleRecord*>> groups;
  for (const SampleRecord& s : run.samples) {
    if (groups.empty() || groups.back().front()->step != s.step || groups.back().front()->kind != s.kind) {
      groups.emplace_back();
    }
    groups.back().push_back(&s);
  }
  out += str("<p class=\"note\">Up to ", kReportSamplesPerGroup, " per step and kind, as samples.jsonl lists them.");
  const size_t half = kReportSampleGroups / 2;
  if (groups.size() > kReportSampleGroups) {
    out += str(" Showing the first ", half, " and the last ", half, " of ", groups.size(), " groups.");
  }
  out += "</p>\n";
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups.size() > kReportSampleGroups && g >= half && g < groups.size() - half) continue;
    const SampleRecord& first = *groups[g].front();
    out += str("<h3>step ", first.step, " &middot; ", html_escape(first.kind), "</h3>\n", sample_table(groups[g]));
  }
  return out;
}

std::string report_config_section(const RunFolder& run) {
  if (run.config_yaml.empty()) {
    return "<h2>Config</h2>\n<p class=\"note\">No config.yaml in this run folder.</p>\n";
  }
  const auto lines = std::count(run.config_yaml.begin(), run.config_yaml.end(), '\n');
  return str("<h2>Config</h2>\n<details><summary>config.yaml, the run's effective configuration (", lines,
             " lines)</summary>\n<pre>", html_escape(run.config_yaml), "</pre>\n</details>\n");
}

std::string report_inputs_section(const RunFolder& run) {
  std::string rows, problems;
  for (const InputFile* f : {&run.metrics, &run.summary_file, &run.config, &run.samples_file}) {
    rows += str("<tr><td>", html_escape(f->name), "</td><td>", file_state(*f), "</td></tr>\n");
    if (f->skipped > 0) problems += str("<div>", html_escape(f->name), ": ", file_state(*f), "</div>\n");
  }
  std::string out;
  if (!problems.empty()) {
    out = "<div class=\"warn\">Parts of the run folder could not be read; the rest is shown.\n" + problems + "</div>\n";
  }
  return out + "<details><summary>files read</summary>\n<table>\n<tr><th>file</th><th>read</th></tr>\n" + rows +
         "</table>\n</details>\n";
}

}  // namespace rlrun::orchestrator
