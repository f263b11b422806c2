// timeline_merge.cc - merge_timelines: per-process trace files into the run's timeline.json.
//
// Streams: one event in memory at a time, so a long run's timelines (hundreds of MB) merge in
// constant memory. Events are not re-sorted: the Chrome trace format does not require order
// (Perfetto sorts on load).
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/file_io.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"

namespace rlrun {
namespace {

using nlohmann::json;

// Pids given to processes whose pid an earlier input already used: above Linux's largest pid
// (2^22), so they collide with no real process.
constexpr int64_t kFirstRemappedPid = int64_t{1} << 22;

// Finds the value of `key` at the top level of the JSON object text `obj` (already validated):
// [*begin, *end) spans the value's text when it is a number. Skips string contents and nested
// values, so an args key or a name that mentions "pid" is never taken for it.
bool find_top_level_number(const std::string& obj, std::string_view key, size_t* begin,
                           size_t* end) {
  int depth = 0;
  for (size_t i = 0; i < obj.size(); ++i) {
    const char c = obj[i];
    if (c == '"') {
      const size_t start = i + 1;
      for (++i; i < obj.size() && obj[i] != '"'; ++i) {
        if (obj[i] == '\\') ++i;  // skip the escaped character
      }
      const bool is_key =
          depth == 1 && obj.compare(start, i - start, key) == 0 && i - start == key.size();
      size_t v = obj.find_first_not_of(" \t", i + 1);
      if (is_key && v != std::string::npos && obj[v] == ':') {
        v = obj.find_first_not_of(" \t", v + 1);
        if (v == std::string::npos) return false;
        size_t e = v;
        if (e < obj.size() && obj[e] == '-') ++e;
        while (e < obj.size() && std::isdigit(static_cast<unsigned char>(obj[e]))) ++e;
        if (e == v || (e < obj.size() && (obj[e] == '.' || obj[e] == 'e' || obj[e] == 'E'))) {
          return false;  // not an integer
        }
        *begin = v;
        *end = e;
        return true;
      }
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

class MergeWriter {
 public:
  explicit MergeWriter(std::FILE* f) : f_(f) { std::fputs("[\n", f_); }
  void write(const json& event) {
    if (!first_) std::fputs(",\n", f_);
    first_ = false;
    const std::string line = event.dump(-1, ' ', false, json::error_handler_t::replace);
    std::fwrite(line.data(), 1, line.size(), f_);
  }
  void write_raw(const std::string& event_text) {
    if (!first_) std::fputs(",\n", f_);
    first_ = false;
    std::fwrite(event_text.data(), 1, event_text.size(), f_);
  }
  void finish() { std::fputs("\n]\n", f_); }

 private:
  std::FILE* f_;
  bool first_ = true;
};

// Renumbers the pids of one input that an earlier input already used.
class PidRemap {
 public:
  void begin_file() { file_.clear(); }
  int64_t map(int64_t pid) {
    auto m = file_.find(pid);
    if (m == file_.end()) m = file_.emplace(pid, earlier_.count(pid) ? next_++ : pid).first;
    return m->second;
  }
  void apply(json& event) {
    auto it = event.find("pid");
    if (it != event.end() && it->is_number_integer()) *it = map(it->get<int64_t>());
  }
  // The same on an event's text: rewrites the top-level "pid" number in place when it changes.
  void apply(std::string& event_text) {
    size_t b, e;
    if (!find_top_level_number(event_text, "pid", &b, &e)) return;
    const std::string digits = event_text.substr(b, e - b);
    char* end = nullptr;
    errno = 0;
    const long long pid = std::strtoll(digits.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE) return;
    const int64_t to = map(pid);
    if (to != pid) event_text.replace(b, e - b, std::to_string(to));
  }
  void end_file() {
    for (const auto& [from, to] : file_) earlier_.insert(to);
  }

 private:
  std::set<int64_t> earlier_;        // final pids of the inputs already merged
  std::map<int64_t, int64_t> file_;  // this input: its pid -> merged pid
  int64_t next_ = kFirstRemappedPid;
};

struct FileCounts {
  int64_t events = 0;
  int64_t torn = 0;
  int64_t first_torn_line = 0;
  bool closed = false;  // the writer's closing `]` is there
};

// Our writer's format: one event per line between "[" and "]"; a killed process leaves no "]" and
// possibly a torn last line, which is skipped and counted.
FileCounts merge_lines(std::istream& in, PidRemap& pids, MergeWriter& out) {
  FileCounts c;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const size_t b = line.find_first_not_of(" \t\r[,");
    if (b == std::string::npos) continue;  // blank, "[" or ","
    if (line.compare(b, 1, "]") == 0) {
      c.closed = true;
      continue;
    }
    const size_t e = line.find_last_not_of(" \t\r,]");
    std::string event = line.substr(b, e + 1 - b);
    // Validated without building a document (a long run's timelines hold millions of events).
    if (event.front() != '{' || !json::accept(event)) {
      if (c.torn++ == 0) c.first_torn_line = line_no;
      continue;
    }
    pids.apply(event);
    out.write_raw(event);
    ++c.events;
  }
  return c;
}

// Any other Chrome trace file: one JSON array, or {"traceEvents": [...]}, however laid out.
bool merge_whole(const std::string& path, PidRemap& pids, MergeWriter& out, FileCounts* c) {
  Result<std::string> text = read_file(path, "timeline");
  if (!text.ok()) return false;
  json whole = json::parse(*text, nullptr, false);
  json* events = whole.is_array() ? &whole : nullptr;
  if (whole.is_object() && whole.contains("traceEvents")) events = &whole["traceEvents"];
  if (!events || !events->is_array()) return false;
  for (json& event : *events) {
    if (!event.is_object()) continue;
    pids.apply(event);
    out.write(event);
    ++c->events;
  }
  c->torn = 0;
  c->closed = true;
  return true;
}

}  // namespace

Status merge_timelines(const std::vector<std::string>& inputs, const std::string& output) {
  // Written beside the output and renamed, so a reader never sees half a timeline.json.
  const std::string tmp = output + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    return io_error(str("timeline: cannot create `", tmp, "`: ", std::strerror(errno),
                        "; check that the run directory is writable"));
  }
  MergeWriter out(f);
  PidRemap pids;
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      log::warn(str("timeline: skipping `", path, "`: ", std::strerror(errno)));
      continue;
    }
    pids.begin_file();
    FileCounts c = merge_lines(in, pids, out);
    if (c.events == 0 && c.torn > 0) merge_whole(path, pids, out, &c);
    pids.end_file();
    if (!c.closed || c.torn > 0) {
      log::warn(
          str("timeline: `", path, "` is truncated (its process did not close it); kept ", c.events,
              " events",
              c.torn ? str(", skipped ", c.torn, " torn from line ", c.first_torn_line) : ""));
    }
  }
  out.finish();
  const bool write_ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !write_ok || std::rename(tmp.c_str(), output.c_str()) != 0) {
    std::remove(tmp.c_str());
    return io_error(str("timeline: cannot write `", output, "`: ", std::strerror(errno)));
  }
  return Status();
}

}  // namespace rlrun
