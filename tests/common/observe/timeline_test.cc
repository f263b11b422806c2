#include "common/observe/timeline.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/common/eventually.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rlrun-timeline-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static json parse(const std::string& p) { return json::parse(read(p)); }  // throws: test fails

  static std::vector<json> of_phase(const json& events, const std::string& ph) {
    std::vector<json> out;
    for (const json& e : events)
      if (e.at("ph") == ph) out.push_back(e);
    return out;
  }

  fs::path dir_;
};

int64_t wall_us_now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST_F(TimelineTest, SpansFromSeveralThreadsNestAndParse) {
  Timeline t;
  const int64_t before = wall_us_now();
  ASSERT_TRUE(t.open(path("timeline-trainer-0.json"), "trainer-0").ok());
  t.set_thread_name("main");
  constexpr int kThreads = 4, kSteps = 3;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&t, i] {
      t.set_thread_name("worker-" + std::to_string(i));
      for (int step = 0; step < kSteps; ++step) {
        ScopedSpan outer("step", "trainer", t);
        outer.arg("step", step).arg("rank", i);
        ScopedSpan inner("forward_backward", "trainer", t);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        t.counter("queue_depth", {{"groups", double(step)}});
      }
    });
  }
  for (auto& th : threads) th.join();
  t.close();
  const int64_t after = wall_us_now();

  json events = parse(path("timeline-trainer-0.json"));
  ASSERT_TRUE(events.is_array());
  std::map<int, std::string> thread_names;
  std::string process_name;
  for (const json& m : of_phase(events, "M")) {
    EXPECT_EQ(m.at("pid"), ::getpid());
    if (m.at("name") == "process_name") process_name = m.at("args").at("name");
    if (m.at("name") == "thread_name") thread_names[m.at("tid")] = m.at("args").at("name");
  }
  EXPECT_EQ(process_name, "trainer-0");
  ASSERT_EQ(thread_names.size(), size_t{kThreads + 1});

  std::map<int, std::vector<json>> by_tid;
  for (const json& x : of_phase(events, "X")) by_tid[x.at("tid")].push_back(x);
  ASSERT_EQ(by_tid.size(), size_t{kThreads});
  for (const auto& [tid, spans] : by_tid) {
    EXPECT_EQ(thread_names[tid].rfind("worker-", 0), 0u);
    ASSERT_EQ(spans.size(), size_t{2 * kSteps});
    for (size_t k = 0; k < spans.size(); k += 2) {  // the inner span completes (is written) first
      const json& inner = spans[k];
      const json& outer = spans[k + 1];
      EXPECT_EQ(inner.at("name"), "forward_backward");
      EXPECT_EQ(outer.at("name"), "step");
      EXPECT_EQ(outer.at("cat"), "trainer");
      EXPECT_EQ(outer.at("args").at("step"), int(k / 2));
      const int64_t its = inner.at("ts"), idur = inner.at("dur");
      const int64_t ots = outer.at("ts"), odur = outer.at("dur");
      EXPECT_GE(idur, 2000);
      EXPECT_LE(ots, its);
      EXPECT_LE(its + idur, ots + odur);
      EXPECT_GE(its, before);
      EXPECT_LE(ots + odur, after);
    }
  }
  std::vector<json> counters = of_phase(events, "C");
  ASSERT_EQ(counters.size(), size_t{kThreads * kSteps});
  EXPECT_TRUE(counters[0].at("args").contains("groups"));
}

TEST_F(TimelineTest, DisabledTimelineRecordsNothing) {
  Timeline t;
  EXPECT_FALSE(t.enabled());
  EXPECT_FALSE(global_timeline().enabled());
  {
    ScopedSpan s("idle", "test", t);
    s.arg("x", 1);
  }
  t.counter("depth", {{"n", 1}});
  ASSERT_TRUE(t.open(path("a.json"), "a").ok());
  t.close();
  EXPECT_TRUE(of_phase(parse(path("a.json")), "X").empty());
  EXPECT_FALSE(t.open("/nonexistent-dir/x.json", "a").ok());
}

TEST_F(TimelineTest, NamesAndArgsAreEscaped) {
  Timeline t;
  ASSERT_TRUE(t.open(path("e.json"), "proc \"q\"\n").ok());
  t.complete("say \"hi\"\\\n", "c\t", t.now_us(), 5,
             JsonArgs().add("text", "a\"b").add("nan", std::nan("")).str());
  t.instant("discard", "rollout", JsonArgs().add("reason", "stale").str());
  t.close();
  json events = parse(path("e.json"));
  EXPECT_EQ(of_phase(events, "M")[0].at("args").at("name"), "proc \"q\"\n");
  const json x = of_phase(events, "X").at(0);
  EXPECT_EQ(x.at("name"), "say \"hi\"\\\n");
  EXPECT_EQ(x.at("args").at("text"), "a\"b");
  EXPECT_TRUE(x.at("args").at("nan").is_null());
  EXPECT_EQ(of_phase(events, "i").at(0).at("args").at("reason"), "stale");
}

// A process that dies without close() leaves a file the periodic flush has written.
TEST_F(TimelineTest, CrashedProcessLeavesReadableEvents) {
  const std::string file = path("timeline-rollout-0.json");
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Timeline t;
    if (!t.open(file, "rollout-0", 0, std::chrono::milliseconds(10)).ok()) ::_exit(3);
    for (int i = 0; i < 5; ++i) ScopedSpan s("decode", "rollout", t);
    const bool flushed = testing::eventually([&] {  // the periodic flush wrote the five spans
      const std::string text = read(file);
      size_t spans = 0;
      for (size_t at = text.find("\"decode\""); at != std::string::npos; at = text.find("\"decode\"", at + 1)) ++spans;
      return spans == 5;
    }, std::chrono::seconds(5));
    ::_exit(flushed ? 0 : 4);  // no close(), no destructors: as if killed
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string text = read(file);
  EXPECT_EQ(text.find(']'), std::string::npos) << "no closing bracket expected";
  ASSERT_TRUE(merge_timelines({file}, path("timeline.json")).ok());
  EXPECT_EQ(of_phase(parse(path("timeline.json")), "X").size(), 5u);
}

// A long run's timeline is bounded: past the limit the file becomes timeline-<p>.1.json (a
// complete JSON array) and a new one starts with the process and thread names; no event is lost
// across a rotation, the older rotated file is replaced, and the two together stay under ~2x.
TEST_F(TimelineTest, RotatesPastItsLimitKeepingOneOlderFile) {
  const std::string file = path("timeline-trainer-0.json");
  EXPECT_EQ(rotated_timeline_path(file), path("timeline-trainer-0.1.json"));
  Timeline t;
  ASSERT_TRUE(t.open(file, "trainer-0", 0, std::chrono::milliseconds(100000)).ok());
  t.set_rotate_bytes(4096);
  t.set_thread_name("main");
  constexpr int kSpans = 400;  // ~120 bytes each: ~12 rotations of 4 KiB
  for (int i = 0; i < kSpans; ++i) {
    t.complete("step", "trainer", t.now_us(), 1, JsonArgs().add("i", i).str());
    if (i % 10 == 9) t.flush();
  }
  t.close();
  const json older = parse(rotated_timeline_path(file)), newer = parse(file);
  EXPECT_LE(read(file).size() + read(rotated_timeline_path(file)).size(), 2 * 4096u + 2048u);
  for (const json* events : {&older, &newer}) {
    ASSERT_FALSE(of_phase(*events, "M").empty());
    EXPECT_EQ(events->at(0).at("args").at("name"), "trainer-0") << "each file names its process";
    EXPECT_EQ(of_phase(*events, "M").at(1).at("args").at("name"), "main") << "and its threads";
  }
  // The two files hold the last events, in order, without a gap.
  std::vector<int> seen;
  for (const json* events : {&older, &newer})
    for (const json& e : of_phase(*events, "X")) seen.push_back(e.at("args").at("i"));
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), kSpans - 1);
  for (size_t k = 1; k < seen.size(); ++k) EXPECT_EQ(seen[k], seen[k - 1] + 1);
  EXPECT_LT(seen.size(), static_cast<size_t>(kSpans)) << "older events were rotated away";
}

TEST_F(TimelineTest, MergesProcessesIntoOneFile) {
  Timeline a, b;
  ASSERT_TRUE(a.open(path("timeline-orchestrator.json"), "orchestrator", 100).ok());
  ASSERT_TRUE(b.open(path("timeline-trainer-0.json"), "trainer-0", 200).ok());
  const int64_t t0 = a.now_us();
  b.complete("train_step", "trainer", t0 + 300, 100);
  a.complete("dispatch", "orchestrator", t0 + 100, 50);
  b.complete("weight_send", "trainer", t0 + 200, 10);
  a.counter("async_level", {{"level", 1}});
  a.close();
  b.close();
  // A Chrome trace written by another tool, laid out differently (object form, pretty-printed).
  json other = {
      {"traceEvents",
       {{{"ph", "X"}, {"name", "external"}, {"pid", 300}, {"tid", 1}, {"ts", t0}, {"dur", 5}}}}};
  std::ofstream(path("other.json")) << other.dump(2);

  ASSERT_TRUE(merge_timelines({path("timeline-orchestrator.json"), path("timeline-trainer-0.json"),
                               path("other.json")},
                              path("timeline.json"))
                  .ok());
  json merged = parse(path("timeline.json"));
  std::map<int, std::string> names;
  std::map<std::string, std::pair<int, int64_t>> spans;  // name -> {pid, ts}
  for (const json& e : merged) {
    if (e.at("ph") == "M") names[e.at("pid")] = e.at("args").at("name");
    if (e.at("ph") == "X") spans[e.at("name")] = {e.at("pid"), e.at("ts")};
  }
  EXPECT_EQ(names, (std::map<int, std::string>{{100, "orchestrator"}, {200, "trainer-0"}}));
  EXPECT_EQ(spans["dispatch"], std::make_pair(100, t0 + 100));
  EXPECT_EQ(spans["train_step"], std::make_pair(200, t0 + 300));
  EXPECT_EQ(spans["weight_send"], std::make_pair(200, t0 + 200));
  EXPECT_EQ(spans["external"], std::make_pair(300, t0));
  EXPECT_EQ(of_phase(merged, "C").size(), 1u);
  EXPECT_EQ(merged.size(), 2u + 4u + 1u);  // process names, spans, counter
}

// A restarted worker opens the path its predecessor wrote (the same --timeline): the predecessor's
// file, and the part of it that rotated, are kept (not truncated), and timeline_files() gives the
// merge every process's file, oldest first.
TEST_F(TimelineTest, AReplacementKeepsTheFilesOfTheProcessesItReplaces) {
  const std::string file = path("timeline-rollout-0.json");
  for (int incarnation = 0; incarnation < 3; ++incarnation) {
    Timeline t;
    ASSERT_TRUE(t.open(file, "rollout-0", 1000 + incarnation, std::chrono::milliseconds(100000)).ok());
    if (incarnation == 0) t.set_rotate_bytes(1024);  // the first one rotates: its .1 part is kept too
    for (int i = 0; i < (incarnation == 0 ? 40 : 2); ++i) {
      t.complete("generate", "rollout", t.now_us(), 1, JsonArgs().add("incarnation", incarnation).add("i", i).str());
      t.flush();
    }
    t.close();
  }
  const std::vector<std::string> files = timeline_files(dir_.string(), "rollout-0");
  EXPECT_EQ(files, (std::vector<std::string>{rotated_timeline_path(earlier_timeline_path(file, 1)),
                                             earlier_timeline_path(file, 1), earlier_timeline_path(file, 2), file}));
  ASSERT_TRUE(merge_timelines(files, path("timeline.json")).ok());
  std::map<int, int> spans;  // incarnation -> spans in the merged file
  for (const json& e : of_phase(parse(path("timeline.json")), "X")) ++spans[e.at("args").at("incarnation")];
  EXPECT_EQ(spans[1], 2) << "the first replacement's spans survive the second";
  EXPECT_EQ(spans[2], 2);
  EXPECT_GT(spans[0], 2) << "the first process's spans survive, its rotated part too";
  EXPECT_EQ(timeline_files(dir_.string(), "rollout-1"), std::vector<std::string>{})
      << "none for a process that never ran";
}

TEST_F(TimelineTest, MergeSkipsATornEventAndKeepsTheRest) {
  Timeline t;
  ASSERT_TRUE(t.open(path("timeline-rollout-1.json"), "rollout-1", 300).ok());
  for (int i = 0; i < 10; ++i) t.complete("decode", "rollout", t.now_us(), 10 + i);
  t.close();
  // Cut the file in the middle of its last event, as a kill during a write would.
  std::string text = read(path("timeline-rollout-1.json"));
  const size_t last = text.rfind("{\"ph\":\"X\"");
  std::ofstream(path("timeline-rollout-1.json"), std::ios::trunc) << text.substr(0, last + 25);
  // Another process with the same pid (another host) and one whose file never appeared.
  Timeline other;
  ASSERT_TRUE(other.open(path("timeline-rollout-2.json"), "rollout-2", 300).ok());
  other.complete("decode", "rollout", other.now_us(), 1);
  other.close();

  ASSERT_TRUE(merge_timelines({path("timeline-rollout-1.json"), path("missing.json"),
                               path("timeline-rollout-2.json")},
                              path("timeline.json"))
                  .ok());
  json merged = parse(path("timeline.json"));
  std::map<int, std::string> names;
  std::map<int, int> spans_per_pid;
  for (const json& e : merged) {
    if (e.at("ph") == "M") names[e.at("pid")] = e.at("args").at("name");
    if (e.at("ph") == "X") spans_per_pid[e.at("pid")]++;
  }
  ASSERT_EQ(names.size(), 2u) << "same pid in two files must become two processes";
  for (const auto& [pid, name] : names) {
    EXPECT_EQ(spans_per_pid[pid], name == "rollout-1" ? 9 : 1) << name;  // the torn 10th is gone
  }
}

TEST(TimelineWrite, AFullDiskWarnsOnceAndLosesOnlyEvents) {
  Timeline t;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(t.open("/dev/full", "p").ok());  // every write fails with ENOSPC
  for (int i = 0; i < 3; ++i) {
    t.complete("x", "c", t.now_us(), 1);
    t.flush();
  }
  t.close();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("timeline: writing `/dev/full` failed: No space left on device"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("failed", err.find("failed") + 1), std::string::npos) << "warned twice";
}

TEST(TimelinePath, NamesOneFilePerProcess) {
  EXPECT_EQ(timeline_path("/run/x", "trainer-0"), "/run/x/timeline-trainer-0.json");
  EXPECT_EQ(timeline_path("/run/x/", "rollout 1/a"), "/run/x/timeline-rollout_1_a.json");
  EXPECT_EQ(timeline_path("", "orchestrator"), "timeline-orchestrator.json");
}

TEST_F(TimelineTest, MergeRenumbersOnlyTheTopLevelPid) {
  Timeline a, b;
  ASSERT_TRUE(a.open(path("a.json"), "a", 7).ok());
  ASSERT_TRUE(b.open(path("b.json"), "b", 7).ok());
  a.complete("x", "c", 1, 1);
  // A name and args that mention "pid" must survive the renumbering untouched.
  b.complete("say \"pid\":1", "c", 2, 1, JsonArgs().add("pid", 99).add("q", "\"pid\":3").str());
  a.close();
  b.close();
  ASSERT_TRUE(merge_timelines({path("a.json"), path("b.json")}, path("m.json")).ok());
  json merged = parse(path("m.json"));
  std::map<std::string, int64_t> pid_of;
  for (const json& e : merged) {
    if (e.at("ph") == "M") pid_of[e.at("args").at("name")] = e.at("pid");
  }
  EXPECT_EQ(pid_of["a"], 7);
  EXPECT_EQ(pid_of["b"], int64_t{1} << 22);
  const json x = of_phase(merged, "X").at(1);
  EXPECT_EQ(x.at("pid"), int64_t{1} << 22);
  EXPECT_EQ(x.at("name"), "say \"pid\":1");
  EXPECT_EQ(x.at("args").at("pid"), 99);
  EXPECT_EQ(x.at("args").at("q"), "\"pid\":3");
}

TEST_F(TimelineTest, MergeReportsAnUnwritableOutput) {
  Status s = merge_timelines({}, "/nonexistent-dir/timeline.json");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("/nonexistent-dir/timeline.json"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace rlrun
