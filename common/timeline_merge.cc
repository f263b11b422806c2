// timeline_merge.cc - merge_timelines: per-process trace files into the run's timeline.json.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/timeline.h"

namespace rlrun {
namespace {

using nlohmann::json;

// Events of one file. A complete file is one JSON value (an array, or {"traceEvents": [...]}).
// A truncated one is read line by line (the writer puts one event per line); lines that do not
// parse as an object (the torn last event) are skipped and counted.
std::vector<json> read_events(const std::string& path, const std::string& text) {
  json whole = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (whole.is_array()) return whole.get<std::vector<json>>();
  if (whole.is_object() && whole.contains("traceEvents") && whole["traceEvents"].is_array()) {
    return whole["traceEvents"].get<std::vector<json>>();
  }
  std::vector<json> events;
  std::istringstream lines(text);
  std::string line;
  int line_no = 0, skipped = 0, first_skipped = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    size_t b = line.find_first_not_of(" \t\r[,");
    if (b == std::string::npos) continue;  // blank, "[" or ","
    size_t e = line.find_last_not_of(" \t\r,]");
    std::string body = line.substr(b, e + 1 - b);
    json event = json::parse(body, nullptr, false);
    if (event.is_object()) {
      events.push_back(std::move(event));
    } else if (!body.empty()) {
      if (skipped++ == 0) first_skipped = line_no;
    }
  }
  log::warn(str("timeline: `", path, "` is truncated (its process did not close it); kept ",
                events.size(), " events",
                skipped ? str(", skipped ", skipped, " torn from line ", first_skipped) : ""));
  return events;
}

bool read_file(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buf;
  buf << in.rdbuf();
  *text = buf.str();
  return true;
}

// Gives each input's pids that an earlier input already used fresh numbers, so two processes
// with the same OS pid (on different hosts) stay apart.
void remap_pids(std::vector<std::vector<json>>& per_file) {
  std::set<int64_t> used;
  int64_t next_free = 1;
  for (const auto& events : per_file)
    for (const json& e : events)
      if (e.contains("pid") && e["pid"].is_number_integer()) {
        next_free = std::max(next_free, e["pid"].get<int64_t>() + 1);
      }
  for (auto& events : per_file) {
    std::map<int64_t, int64_t> remap;
    for (json& e : events) {
      if (!e.contains("pid") || !e["pid"].is_number_integer()) continue;
      const int64_t pid = e["pid"].get<int64_t>();
      auto it = remap.find(pid);
      if (it == remap.end()) it = remap.emplace(pid, used.count(pid) ? next_free++ : pid).first;
      e["pid"] = it->second;
    }
    for (const auto& [from, to] : remap) used.insert(to);
  }
}

}  // namespace

Status merge_timelines(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<std::vector<json>> per_file;
  for (const std::string& path : inputs) {
    std::string text;
    if (!read_file(path, &text)) {
      log::warn(str("timeline: skipping `", path, "`: ", std::strerror(errno)));
      continue;
    }
    per_file.push_back(read_events(path, text));
  }
  remap_pids(per_file);

  std::vector<json> metadata, events;
  for (auto& file_events : per_file) {
    for (json& e : file_events) {
      if (!e.is_object()) continue;
      (e.value("ph", "") == "M" ? metadata : events).push_back(std::move(e));
    }
  }
  auto ts_of = [](const json& e) {
    auto it = e.find("ts");
    return it != e.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  std::stable_sort(events.begin(), events.end(),
                   [&](const json& a, const json& b) { return ts_of(a) < ts_of(b); });

  // Written beside the output and renamed, so a reader never sees half a timeline.json.
  const std::string tmp = output + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    return io_error(str("timeline: cannot create `", tmp, "`: ", std::strerror(errno),
                        "; check that the run directory is writable"));
  }
  std::fputs("[\n", f);
  bool first = true;
  for (const auto* list : {&metadata, &events}) {
    for (const json& e : *list) {
      if (!first) std::fputs(",\n", f);
      first = false;
      const std::string line = e.dump(-1, ' ', false, json::error_handler_t::replace);
      std::fwrite(line.data(), 1, line.size(), f);
    }
  }
  std::fputs("\n]\n", f);
  const bool write_ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !write_ok || std::rename(tmp.c_str(), output.c_str()) != 0) {
    std::remove(tmp.c_str());
    return io_error(str("timeline: cannot write `", output, "`: ", std::strerror(errno)));
  }
  return Status();
}

}  // namespace rlrun
