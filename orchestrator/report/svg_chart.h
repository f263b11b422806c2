// report/svg_chart.h - small SVG charts for the run report (html_report.h): lines over steps, a
// stacked area and a horizontal bar list. Each function returns one self-contained `<svg
// class="chart">` element sized by its viewBox (the page scales it to its column); every text
// passed in is plain text, escaped here.
//
// Markup the tests and the page's CSS rely on: each drawn series (a line, a set of markers, a
// stacked layer) is one `<g class="series" data-series="NAME">`, each bar one `<rect class="bar">`.
// A chart without a finite value says "no data" instead of drawing axes over nothing.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rlrun::orchestrator {

enum class AxisFormat {
  kNumber,   // 0.25, 12, 3.4k, 1.2M
  kPercent,  // a fraction in [0, 1] shown as 25%
  kSeconds,  // 0.25 s
};

struct ChartSeries {
  ChartSeries() = default;
  ChartSeries(std::string name_, std::vector<double> x_, std::vector<double> y_, bool markers_ = false)
      : name(std::move(name_)), x(std::move(x_)), y(std::move(y_)), markers(markers_) {}

  std::string name;
  std::vector<double> x, y;  // same length, x increasing; a NaN y leaves a gap in the line
  bool markers = false;      // a dot per point (sparse data: evaluations), joined by a thin line
  std::string color;         // "" = the next colour of the palette
};

// A horizontal dashed line across the plot with its label, e.g. a whole-run average.
struct ReferenceLine {
  std::string label;
  double y = 0;
};

struct LineChart {
  std::string x_label = "step";
  std::string y_label;
  std::vector<ChartSeries> series;
  std::vector<ReferenceLine> references;
  std::optional<double> y_min, y_max;  // fixed ends of the y axis (e.g. 0 and 1); else from the data
  AxisFormat y_format = AxisFormat::kNumber;
  std::string empty_note = "no data";  // shown when nothing finite is to be drawn
};

// Lines (or markers) of every series over a shared x axis. A series with more points than the
// plot has pixels is drawn from bucket means (at most ~600 points), so the file stays small for
// long runs.
std::string svg_line_chart(const LineChart& chart);

// Layers stacked from the bottom in order, e.g. wait + train + sync = step time. Layers use
// `x` of the chart and their own `y` (NaN counts as 0); their `x` is ignored.
struct StackedChart {
  std::string x_label = "step";
  std::string y_label;
  std::vector<double> x;
  std::vector<ChartSeries> layers;
  AxisFormat y_format = AxisFormat::kNumber;
  std::string empty_note = "no data";
};
std::string svg_stacked_chart(const StackedChart& chart);

struct Bar {
  std::string label;
  double value = 0;        // bar length, relative to the largest bar
  std::string value_text;  // printed beside the bar
};
// One horizontal bar per entry, labelled, longest = the largest value.
std::string svg_bar_list(const std::vector<Bar>& bars, const std::string& empty_note = "no data");

// A tick or value label: "0.25", "12", "3.4k", "1.2M"; "25%" for kPercent; "0.25 s" for kSeconds.
std::string format_axis_value(double v, AxisFormat format);

}  // namespace rlrun::orchestrator
