// report/svg_chart.cc - the report's SVG charts. Coordinates are in viewBox units (kWidth wide);
// the plot area is the box inside the margins, with the legend rows above it.
#include "orchestrator/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/html.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {


constexpr double kWidth = 640, kHeight = 300;  // line and stacked charts
constexpr double kLeft = 62, kRight = 18, kBottom = 40;
constexpr double kLegendRow = 16;     // height of one legend row
constexpr double kCharWidth = 6.3;    // average glyph width at font-size 11 (legend layout)
constexpr size_t kMaxPoints = 600;    // more points than this are drawn as bucket means
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

struct Range {
  double lo = 0, hi = 1;
};

// A round tick spacing (1, 2 or 5 times a power of ten) giving about `target` ticks over `span`.
double nice_step(double span, int target, bool integers) {
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
  return integers ? std::max(1.0, std::round(step)) : step;
}

// [lo, hi] of the finite values widened to whole ticks; [0, 1] when there are none.
Range nice_range(double lo, double hi, bool integers) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0, 1};
  if (hi - lo < 1e-12) {  // one value: centre it
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double step = nice_step(hi - lo, 5, integers);
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step};
}

// The x axis spans the data exactly (every chart of a run then ends at its last step); a single
// value gets a unit either side.
Range exact_range(Range r) {
  if (r.hi - r.lo < 1e-12) return {r.lo - 1, r.hi + 1};
  return r;
}

std::vector<double> ticks(Range r, bool integers) {
  const double step = nice_step(r.hi - r.lo, 5, integers);
  const double first = std::ceil(r.lo / step) * step;
  std::vector<double> out;
  // Counted, not accumulated: a step below the values' precision (1e17 + 0.2) must still end.
  for (int k = 0; k < 20; ++k) {
    const double v = first + k * step;
    if (!(v <= r.hi + step * 1e-6)) break;
    out.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);  // no "-0"
  }
  return out;
}

void widen(Range* r, bool* any, double v) {
  if (!std::isfinite(v)) return;
  r->lo = *any ? std::min(r->lo, v) : v;
  r->hi = *any ? std::max(r->hi, v) : v;
  *any = true;
}

// The plot area inside the margins and the data ranges it shows.
struct Frame {
  Range x, y;
  double top = 30;  // below the legend
  double px(double v) const { return kLeft + (v - x.lo) / (x.hi - x.lo) * (kWidth - kLeft - kRight); }
  double py(double v) const { return kHeight - kBottom - (v - y.lo) / (y.hi - y.lo) * (kHeight - top - kBottom); }
};

// Bucket means of (x, y) so that at most `max_points` remain; a bucket without a finite y is a gap.
void downsample(std::vector<double>* x, std::vector<double>* y, size_t max_points) {
  if (x->size() <= max_points) return;
  const size_t bucket = (x->size() + max_points - 1) / max_points;
  std::vector<double> bx, by;
  for (size_t start = 0; start < x->size(); start += bucket) {
    const size_t end = std::min(x->size(), start + bucket);
    double sx = 0, sy = 0;
    size_t n = 0;
    for (size_t i = start; i < end; ++i) {
      if (!std::isfinite((*y)[i])) continue;
      sx += (*x)[i];
      sy += (*y)[i];
      ++n;
    }
    bx.push_back(n ? sx / n : ((*x)[start] + (*x)[end - 1]) / 2);
    by.push_back(n ? sy / n : kNaN);
  }
  *x = std::move(bx);
  *y = std::move(by);
}

std::string svg_open(double height) {
  // Inline in HTML: no xmlns needed, so the page names no URL of its own.
  return str("<svg class=\"chart\" viewBox=\"0 0 ", kWidth, " ", height,
             "\" font-family=\"sans-serif\" font-size=\"11\">\n");
}

std::string empty_chart(const std::string& note) {
  return str(svg_open(kHeight), "<rect x=\"0.5\" y=\"0.5\" width=\"", kWidth - 1, "\" height=\"", kHeight - 1,
             "\" fill=\"#fafafa\" stroke=\"#ddd\"/><text class=\"empty\" x=\"", kWidth / 2, "\" y=\"", kHeight / 2,
             "\" text-anchor=\"middle\" fill=\"#888\" font-size=\"14\">", html_escape(note), "</text></svg>\n");
}

// Colour swatches and names in rows above the plot; returns the markup and sets the frame's top.
std::string legend(const std::vector<std::string>& names, const std::vector<std::string>& colors, Frame* frame) {
  std::string out;
  double x = kLeft, y = 12;
  for (size_t i = 0; i < names.size(); ++i) {
    const double advance = 14 + kCharWidth * static_cast<double>(names[i].size()) + 16;
    if (x > kLeft && x + advance > kWidth - kRight) {
      x = kLeft;
      y += kLegendRow;
    }
    out += str("<rect x=\"", coord(x), "\" y=\"", coord(y - 9), "\" width=\"10\" height=\"10\" fill=\"", colors[i],
               "\"/><text x=\"", coord(x + 14), "\" y=\"", coord(y), "\">", html_escape(names[i]), "</text>\n");
    x += advance;
  }
  frame->top = y + 14;
  return out;
}

// Grid lines, tick labels and axis titles of `frame`.
std::string axes(const Frame& frame, const std::string& x_label, const std::string& y_label, AxisFormat y_format) {
  std::string out = "<g class=\"axes\" fill=\"#444\">\n";
  const double bottom = kHeight - kBottom;
  for (double v : ticks(frame.y, false)) {
    const double y = frame.py(v);
    out += str("<line x1=\"", kLeft, "\" x2=\"", kWidth - kRight, "\" y1=\"", coord(y), "\" y2=\"", coord(y),
               "\" stroke=\"#e4e4e4\"/><text x=\"", kLeft - 6, "\" y=\"", coord(y + 4), "\" text-anchor=\"end\">",
               format_axis_value(v, y_format), "</text>\n");
  }
  for (double v : ticks(frame.x, true)) {
    const double x = frame.px(v);
    out += str("<line x1=\"", coord(x), "\" x2=\"", coord(x), "\" y1=\"", bottom, "\" y2=\"", bottom + 4,
               "\" stroke=\"#888\"/><text x=\"", coord(x), "\" y=\"", bottom + 16, "\" text-anchor=\"middle\">",
               format_axis_value(v, AxisFormat::kNumber), "</text>\n");
  }
  out += str("<line x1=\"", kLeft, "\" x2=\"", kWidth - kRight, "\" y1=\"", bottom, "\" y2=\"", bottom,
             "\" stroke=\"#888\"/>\n<text x=\"", (kLeft + kWidth - kRight) / 2, "\" y=\"", kHeight - 6,
             "\" text-anchor=\"middle\">", html_escape(x_label), "</text>\n<text transform=\"translate(14,",
             coord((frame.top + bottom) / 2), ") rotate(-90)\" text-anchor=\"middle\">", html_escape(y_label),
             "</text>\n</g>\n");
  return out;
}

std::string color_of(const ChartSeries& s, size_t index) {
  return s.color.empty() ? kPalette[index % std::size(kPalette)] : s.color;
}

// One series as polylines between gaps (a lone point becomes a dot), or dots with hover titles.
std::string series_markup(const Frame& frame, const ChartSeries& s, const std::string& color, AxisFormat y_format) {
  std::vector<double> x = s.x, y = s.y;
  if (!s.markers) downsample(&x, &y, kMaxPoints);
  std::string out = str("<g class=\"series\" data-series=\"", html_escape(s.name), "\" stroke=\"", color, "\" fill=\"",
                        color, "\">\n");
  std::string points;
  size_t in_segment = 0;
  double last_x = 0, last_y = 0;
  auto flush = [&] {
    if (in_segment == 1 && !s.markers) {
      out += str("<circle cx=\"", coord(last_x), "\" cy=\"", coord(last_y), "\" r=\"2\"/>\n");
    } else if (in_segment > 1) {
      out += str("<polyline fill=\"none\" stroke-width=\"", s.markers ? "1" : "1.6",
                 "\" stroke-linejoin=\"round\" points=\"", points, "\"/>\n");
    }
    points.clear();
    in_segment = 0;
  };
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!std::isfinite(y[i]) || !std::isfinite(x[i])) {
      flush();
      continue;
    }
    last_x = frame.px(x[i]);
    last_y = frame.py(y[i]);
    points += str(coord(last_x), ",", coord(last_y), " ");
    ++in_segment;
  }
  flush();
  if (s.markers) {
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!std::isfinite(y[i]) || !std::isfinite(x[i])) continue;
      out += str("<circle cx=\"", coord(frame.px(x[i])), "\" cy=\"", coord(frame.py(y[i])), "\" r=\"3.5\"><title>",
                 html_escape(s.name), " at step ", format_axis_value(x[i], AxisFormat::kNumber), ": ",
                 format_axis_value(y[i], y_format), "</title></circle>\n");
    }
  }
  return out + "</g>\n";
}

}  // namespace

std::string format_axis_value(double v, AxisFormat format) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  switch (format) {
    case AxisFormat::kPercent:
      std::snprintf(buf, sizeof buf, "%.3g%%", v * 100);
      return buf;
    case AxisFormat::kSeconds:
      std::snprintf(buf, sizeof buf, "%.3g s", v);
      return buf;
    case AxisFormat::kNumber:
      break;
  }
  const double a = std::fabs(v);
  if (a >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.3gG", v / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  } else if (a >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  }
  return buf;
}

std::string svg_line_chart(const LineChart& chart) {
  Frame frame;
  Range x, y;
  bool any_x = false, any_y = false;
  for (const ChartSeries& s : chart.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      widen(&x, &any_x, s.x[i]);
      widen(&y, &any_y, s.y[i]);
    }
  }
  if (!any_y) return empty_chart(chart.empty_note);
  for (const ReferenceLine& r : chart.references) widen(&y, &any_y, r.y);
  frame.x = exact_range(x);
  frame.y = nice_range(chart.y_min.value_or(y.lo), chart.y_max.value_or(y.hi), false);
  if (chart.y_min) frame.y.lo = *chart.y_min;
  if (chart.y_max) frame.y.hi = std::max(*chart.y_max, y.hi);  // a value above the fixed end still shows

  std::vector<std::string> names, colors;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    names.push_back(chart.series[i].name);
    colors.push_back(color_of(chart.series[i], i));
  }
  const std::string legend_markup = legend(names, colors, &frame);
  std::string out = svg_open(kHeight) + legend_markup + axes(frame, chart.x_label, chart.y_label, chart.y_format);
  for (size_t i = 0; i < chart.series.size(); ++i) {
    out += series_markup(frame, chart.series[i], colors[i], chart.y_format);
  }
  // After the series: the labels' white halo keeps them legible over the lines.
  for (const ReferenceLine& r : chart.references) {
    if (!std::isfinite(r.y)) continue;
    const double y_px = frame.py(r.y);
    out += str("<g class=\"reference\"><line x1=\"", kLeft, "\" x2=\"", kWidth - kRight, "\" y1=\"", coord(y_px),
               "\" y2=\"", coord(y_px), "\" stroke=\"#555\" stroke-dasharray=\"5,4\"/><text x=\"",
               kWidth - kRight - 4, "\" y=\"", coord(y_px - 4),
               "\" text-anchor=\"end\" fill=\"#222\" stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">",
               html_escape(r.label), " ", format_axis_value(r.y, chart.y_format), "</text></g>\n");
  }
  return out + "</svg>\n";
}

std::string svg_stacked_chart(const StackedChart& chart) {
  // Cumulative tops per layer, NaN as 0; downsampled with the same buckets for every layer.
  std::vector<std::vector<double>> tops;
  std::vector<double> x;
  std::vector<double> running(chart.x.size(), 0.0);
  for (const ChartSeries& layer : chart.layers) {
    for (size_t i = 0; i < running.size(); ++i) {
      const double v = i < layer.y.size() && std::isfinite(layer.y[i]) ? layer.y[i] : 0.0;
      running[i] += v;
    }
    std::vector<double> lx = chart.x, top = running;
    downsample(&lx, &top, kMaxPoints);
    x = std::move(lx);
    tops.push_back(std::move(top));
  }
  double highest = 0;
  for (double v : running) highest = std::max(highest, v);
  if (x.empty() || !(highest > 0)) return empty_chart(chart.empty_note);

  Frame frame;
  frame.x = exact_range({x.front(), x.back()});
  frame.y = nice_range(0, highest, false);
  std::vector<std::string> names, colors;
  for (size_t i = 0; i < chart.layers.size(); ++i) {
    names.push_back(chart.layers[i].name);
    colors.push_back(color_of(chart.layers[i], i));
  }
  const std::string legend_markup = legend(names, colors, &frame);
  std::string out = svg_open(kHeight) + legend_markup + axes(frame, chart.x_label, chart.y_label, chart.y_format);
  for (size_t l = 0; l < tops.size(); ++l) {
    // The polygon runs along this layer's top left to right, then back along the one below it.
    std::string points;
    for (size_t i = 0; i < x.size(); ++i) points += str(coord(frame.px(x[i])), ",", coord(frame.py(tops[l][i])), " ");
    for (size_t i = x.size(); i-- > 0;) {
      points += str(coord(frame.px(x[i])), ",", coord(frame.py(l == 0 ? 0.0 : tops[l - 1][i])), " ");
    }
    out += str("<g class=\"series\" data-series=\"", html_escape(chart.layers[l].name), "\"><polygon fill=\"",
               colors[l], "\" fill-opacity=\"0.8\" stroke=\"", colors[l], "\" stroke-width=\"0.5\" points=\"", points,
               "\"/></g>\n");
  }
  return out + "</svg>\n";
}

std::string svg_bar_list(const std::vector<Bar>& bars, const std::string& empty_note) {
  double largest = 0;
  for (const Bar& b : bars) largest = std::max(largest, std::isfinite(b.value) ? b.value : 0.0);
  if (bars.empty() || !(largest > 0)) return empty_chart(empty_note);
  constexpr double kRow = 26, kLabel = 160, kValue = 110;
  const double height = kRow * static_cast<double>(bars.size()) + 12;
  std::string out = svg_open(height);
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = 8 + kRow * static_cast<double>(i);
    const double value = std::isfinite(bars[i].value) ? std::max(0.0, bars[i].value) : 0.0;
    const double w = std::max(1.0, value / largest * (kWidth - kLabel - kValue));
    out += str("<text x=\"", kLabel - 8, "\" y=\"", coord(y + 13), "\" text-anchor=\"end\">",
               html_escape(bars[i].label), "</text><rect class=\"bar\" x=\"", kLabel, "\" y=\"", coord(y),
               "\" width=\"", coord(w), "\" height=\"18\" fill=\"", kPalette[0], "\"/><text x=\"",
               coord(kLabel + w + 6), "\" y=\"", coord(y + 13), "\">", html_escape(bars[i].value_text), "</text>\n");
  }
  return out + "</svg>\n";
}

}  // namespace rlrun::orchestrator
