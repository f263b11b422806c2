// report/html_report.cc - the page shell and the curves of a run (metrics.jsonl per step, with
// summary.json's whole-run figures beside them).
#include "orchestrator/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "common/html.h"
#include "common/observe/log.h"
#include "orchestrator/plan/memory_report.h"
#include "orchestrator/report/svg_chart.h"

namespace rlrun::orchestrator {

namespace {

using Json = nlohmann::ordered_json;

// Plain CSS, system fonts only: nothing is fetched when the page opens.
constexpr const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       max-width: 1340px; margin: 0 auto; padding: 12px 20px 40px; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 18px; margin: 26px 0 8px; border-bottom: 1px solid #ddd; }
h3 { font-size: 14px; margin: 14px 0 4px; }
.sub { color: #666; margin: 0 0 10px; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 14px; }
figure { margin: 0; border: 1px solid #e2e2e2; border-radius: 6px; padding: 8px 10px; }
figcaption { font-size: 13px; color: #444; margin-bottom: 4px; } figcaption b { color: #111; font-size: 14px; }
svg.chart { width: 100%; height: auto; display: block; }
table { border-collapse: collapse; font-size: 13px; margin: 4px 0; }
th, td { border: 1px solid #e2e2e2; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f6f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; font-size: 12px; }
details > pre { background: #f8f8f8; padding: 8px; border: 1px solid #e2e2e2; }
.warn { background: #fff6e0; border: 1px solid #e8c36a; padding: 6px 10px; border-radius: 4px; margin: 8px 0; }
.note { color: #666; font-size: 13px; }
.ok { color: #1a7f37; } .bad { color: #b42318; }
)";

struct StepColumns {
  std::vector<double> step, reward, wait, train, sync, idle, generated_per_s, trained_per_s;
};

// metrics.jsonl as columns. Step time = wait + train + weight sync (a missing part counts 0);
// generated tokens of a step = the running total's increase since the previous step (the first
// step counts from 0; after a gap in the steps, or a total that went down, the value is missing).
StepColumns step_columns(const std::vector<StepMetrics>& steps) {
  StepColumns c;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepMetrics& m = steps[i];
    auto part = [](double v) { return std::isfinite(v) ? v : 0.0; };
    const double seconds = part(m.wait_seconds) + part(m.train_seconds) + part(m.weight_sync_seconds);
    const bool timed = seconds > 0;
    double previous_total = kMissing;
    if (i > 0 && steps[i - 1].step == m.step - 1) previous_total = steps[i - 1].tokens_generated_total;
    if (i == 0 && m.step == 1) previous_total = 0;
    const double generated = m.tokens_generated_total - previous_total;  // NaN when either is missing
    c.step.push_back(static_cast<double>(m.step));
    c.reward.push_back(m.reward_mean);
    c.wait.push_back(m.wait_seconds);
    c.train.push_back(m.train_seconds);
    c.sync.push_back(m.weight_sync_seconds);
    c.idle.push_back(timed ? m.wait_seconds / seconds : kMissing);  // NaN without a wait figure
    c.generated_per_s.push_back(timed && generated >= 0 ? generated / seconds : kMissing);
    c.trained_per_s.push_back(timed ? m.tokens_trained / seconds : kMissing);
  }
  return c;
}

// Steps from which the reward and idle charts add a moving mean over the noisy per-step values.
constexpr size_t kSmoothFromSteps = 50;
constexpr const char* kLightBlue = "#9ecae1";  // per-step values under their (palette blue) moving mean

// The mean of the finite values among the last `window` (this one included); NaN when none.
std::vector<double> trailing_mean(const std::vector<double>& y, size_t window) {
  std::vector<double> out(y.size(), kMissing);
  double sum = 0;
  size_t n = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (std::isfinite(y[i])) sum += y[i], ++n;
    if (i >= window && std::isfinite(y[i - window])) sum -= y[i - window], --n;
    if (n > 0) out[i] = sum / static_cast<double>(n);
  }
  return out;
}

// `per_step` alone, or (for a long run) drawn light under its moving mean over ~4% of the steps.
void add_with_moving_mean(LineChart* chart, const std::string& name, const std::vector<double>& x,
                          const std::vector<double>& per_step) {
  if (x.size() < kSmoothFromSteps) {
    chart->series.push_back(ChartSeries(name + " per step", x, per_step));
    return;
  }
  const size_t window = std::max<size_t>(5, x.size() / 25);
  ChartSeries raw(name + " per step", x, per_step);
  raw.color = kLightBlue;
  chart->series.push_back(std::move(raw));
  ChartSeries mean(str(name, ", mean of last ", window, " steps"), x, trailing_mean(per_step, window));
  mean.color = "#1f77b4";
  chart->series.push_back(std::move(mean));
}

std::string figure(const std::string& title, const std::string& caption, const std::string& svg) {
  return str("<figure><figcaption><b>", html_escape(title), "</b> ", caption, "</figcaption>\n", svg, "</figure>\n");
}

// One series per name found in any step's map (reward terms, reward server logs).
std::vector<ChartSeries> named_series(const std::vector<StepMetrics>& steps,
                                      std::map<std::string, double> StepMetrics::*field, const std::string& prefix) {
  std::set<std::string> names;
  for (const StepMetrics& m : steps) {
    for (const auto& [name, v] : m.*field) names.insert(name);
  }
  std::vector<ChartSeries> out;
  for (const std::string& name : names) {
    ChartSeries s(prefix + name, {}, {});
    for (const StepMetrics& m : steps) {
      auto it = (m.*field).find(name);
      s.x.push_back(static_cast<double>(m.step));
      s.y.push_back(it == (m.*field).end() ? kMissing : it->second);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string reward_figures(const RunFolder& run, const StepColumns& c) {
  LineChart reward;
  reward.y_label = "reward";
  add_with_moving_mean(&reward, "reward mean", c.step, c.reward);
  // With one term the term's mean is the reward (up to its weight): drawn only for two or more.
  std::vector<ChartSeries> terms = named_series(run.steps, &StepMetrics::reward_terms, "term ");
  if (terms.size() > 1) {
    for (ChartSeries& t : terms) reward.series.push_back(std::move(t));
  }
  std::string out = figure("Reward", "mean over each step's trained samples (metrics.jsonl <code>reward_mean</code>)"
                           + std::string(terms.size() > 1 ? " and each task.reward term's unweighted mean" : ""),
                           svg_line_chart(reward));
  std::vector<ChartSeries> server = named_series(run.steps, &StepMetrics::reward_server_logs, "");
  if (!server.empty()) {
    LineChart logs;
    logs.y_label = "mean";
    logs.series = std::move(server);
    out += figure("Reward server logs", "each extra_logs value's mean per step (<code>reward_server_logs</code>)",
                  svg_line_chart(logs));
  }
  return out;
}

// Held-out accuracy: summary.json's before-RL value at step 0, each evaluation step's value, and
// the after-RL value at the last step, as one line.
std::string accuracy_figure(const RunFolder& run) {
  std::map<double, double> points;  // step -> accuracy
  for (const StepMetrics& m : run.steps) {
    if (m.eval_accuracy) points[static_cast<double>(m.step)] = *m.eval_accuracy;
  }
  const double before = summary_number(run, {"eval", "accuracy_before"});
  const double after = summary_number(run, {"eval", "accuracy_after"});
  double last_step = summary_number(run, {"steps_completed"});
  if (!std::isfinite(last_step) && !run.steps.empty()) last_step = static_cast<double>(run.steps.back().step);
  if (std::isfinite(before)) points[0] = before;
  if (std::isfinite(after) && std::isfinite(last_step)) points[last_step] = after;
  LineChart chart;
  chart.y_label = "accuracy";
  chart.y_min = 0;
  chart.y_max = 1;
  chart.y_format = AxisFormat::kPercent;
  chart.empty_note = "no evaluation in this run (task.eval_size: 0)";
  ChartSeries s("held-out accuracy", {}, {}, /*markers_=*/true);
  for (const auto& [x, y] : points) {
    s.x.push_back(x);
    s.y.push_back(y);
  }
  chart.series.push_back(std::move(s));
  return figure("Held-out accuracy",
                "greedy, on the task's evaluation prompts: before RL at step 0 and after RL at the last step "
                "(summary.json <code>eval</code>), every task.eval_every steps between (<code>eval_accuracy</code>)",
                svg_line_chart(chart));
}

std::string idle_figure(const RunFolder& run, const StepColumns& c) {
  LineChart chart;
  chart.y_label = "idle fraction";
  chart.y_min = 0;
  chart.y_max = 1;
  chart.y_format = AxisFormat::kPercent;
  add_with_moving_mean(&chart, "trainer idle", c.step, c.idle);
  chart.references.push_back({"trainer, whole run", summary_number(run, {"trainer_idle_fraction"})});
  chart.references.push_back({"rollout, whole run", summary_number(run, {"rollout_idle_fraction"})});
  return figure("Idle fractions",
                "trainer: the step's wait for a batch / its wall time (wait + train + sync); dashed: the whole "
                "run's trainer and rollout-worker idle fractions (summary.json)",
                svg_line_chart(chart));
}

std::string throughput_figure(const StepColumns& c) {
  LineChart chart;
  chart.y_label = "tokens/s";
  chart.y_min = 0;
  chart.series.push_back(ChartSeries("generated", c.step, c.generated_per_s));
  chart.series.push_back(ChartSeries("trained", c.step, c.trained_per_s));
  return figure("Tokens per second",
                "per step: tokens generated since the previous step (<code>tokens_generated_total</code>) and "
                "tokens trained (<code>tokens_trained</code>), over the step's wall time",
                svg_line_chart(chart));
}

std::string step_time_figure(const StepColumns& c) {
  StackedChart chart;
  chart.y_label = "seconds";
  chart.y_format = AxisFormat::kSeconds;
  chart.x = c.step;
  chart.layers.push_back(ChartSeries("wait for a batch", {}, c.wait));
  chart.layers.push_back(ChartSeries("train", {}, c.train));
  chart.layers.push_back(ChartSeries("weight sync", {}, c.sync));
  return figure("Step time", "stacked: the trainer's wait for a batch, the train step and the weight sync",
                svg_stacked_chart(chart));
}

std::string memory_figure(const RunFolder& run) {
  std::vector<Bar> bars;
  if (const Json* peaks = find_summary_value(run, {"peak_memory_bytes"}); peaks != nullptr && peaks->is_object()) {
    for (const auto& [process, bytes] : peaks->items()) {
      if (!bytes.is_number()) continue;
      bars.push_back({process, bytes.get<double>(), format_bytes(bytes.get<double>())});
    }
  }
  return figure("Peak memory per process", "resident set size (summary.json <code>peak_memory_bytes</code>)",
                svg_bar_list(bars, run.summary.is_null() ? "no summary.json" : "no peak_memory_bytes"));
}

}  // namespace

std::string report_curves_section(const RunFolder& run) {
  const StepColumns c = step_columns(run.steps);
  return str("<h2>Curves</h2>\n<div class=\"charts\">\n", reward_figures(run, c), accuracy_figure(run),
             idle_figure(run, c), throughput_figure(c), step_time_figure(c), memory_figure(run), "</div>\n");
}

std::string render_report_html(const RunFolder& run) {
  const std::string name = std::filesystem::path(run.dir).lexically_normal().filename().string();
  std::string exit_text = "summary.json missing";
  if (const Json* exit = find_summary_value(run, {"exit"}); exit != nullptr && exit->is_string()) {
    exit_text = "exit: " + exit->get<std::string>();
  }
  std::string steps_text = "no steps in metrics.jsonl";
  if (!run.steps.empty()) {
    steps_text = str(run.steps.size(), " steps (", run.steps.front().step, " to ", run.steps.back().step, ")");
  }
  return str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>rlrun report: ",
             html_escape(name.empty() ? run.dir : name), "</title>\n<style>", kStyle, "</style>\n</head>\n<body>\n",
             "<h1>rlrun report: ", html_escape(name.empty() ? run.dir : name), "</h1>\n<p class=\"sub\">",
             html_escape(run.dir), " &middot; ", html_escape(steps_text), " &middot; ", html_escape(exit_text),
             "</p>\n", report_inputs_section(run), report_curves_section(run), report_summary_section(run),
             report_samples_section(run), report_config_section(run), "</body>\n</html>\n");
}

}  // namespace rlrun::orchestrator
