// plot: the chart frame (axes, ticks, legend) is shared by both kinds; numbers go out through
// fmt with fixed precision, so a chart does not depend on the locale.
#include "schedules/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe::plot {

namespace {

constexpr double width = 760, height = 420;
constexpr double left = 78, right = 560, top = 40, bottom = 360;  // the plotting area; the legend sits right of it
const char* const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                               "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

const char* color(size_t i) { return palette[i % (sizeof palette / sizeof palette[0])]; }

struct range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // An empty or flat range still needs a width to map onto pixels.
  void settle() {
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (hi - lo < 1e-12) hi = lo + (lo == 0 ? 1 : std::abs(lo) * 0.1);
  }
};

// About five round steps (1, 2 or 5 x 10^k) across the range.
double tick_step(const range& r) {
  const double raw = (r.hi - r.lo) / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string number(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) return fmt::format("{:.2g}", v);
  std::string s = fmt::format("{:.4f}", v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

struct frame {
  range x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

// The document's head, the axes with their ticks, and the opening of the plotting group.
std::string open(const labels& l, const frame& f, bool x_ticks) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"15\">{3}</text>\n",
      width, height, left, xml_escape(l.title));
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (left + right) / 2, bottom + 42,
                   xml_escape(l.x));
  s += fmt::format("<text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   (top + bottom) / 2, xml_escape(l.y));
  s += fmt::format("<path d=\"M{0} {1}V{2}H{3}\" fill=\"none\" stroke=\"#333\"/>\n", left, top, bottom, right);
  const double ys = tick_step(f.y);
  for (double v = std::ceil(f.y.lo / ys) * ys; v <= f.y.hi + ys * 1e-9; v += ys)
    s += fmt::format("<path d=\"M{0} {1:.3f}H{2}\" stroke=\"#ddd\"/><text x=\"{3}\" y=\"{4:.3f}\" "
                     "text-anchor=\"end\">{5}</text>\n",
                     left, f.py(v), right, left - 6, f.py(v) + 4, number(v));
  if (x_ticks) {
    const double xs = tick_step(f.x);
    for (double v = std::ceil(f.x.lo / xs) * xs; v <= f.x.hi + xs * 1e-9; v += xs)
      s += fmt::format("<path d=\"M{0:.3f} {1}v5\" stroke=\"#333\"/><text x=\"{0:.3f}\" y=\"{2}\" "
                       "text-anchor=\"middle\">{3}</text>\n",
                       f.px(v), bottom, bottom + 18, number(v));
  }
  s += fmt::format("<g class=\"plot\" data-x-min=\"{:.17g}\" data-x-max=\"{:.17g}\" data-y-min=\"{:.17g}\" "
                   "data-y-max=\"{:.17g}\" data-left=\"{}\" data-right=\"{}\" data-top=\"{}\" data-bottom=\"{}\">\n",
                   f.x.lo, f.x.hi, f.y.lo, f.y.hi, left, right, top, bottom);
  return s;
}

std::string legend_and_close(const std::vector<series>& all) {
  std::string s = "</g>\n";
  for (size_t i = 0; i < all.size(); ++i) {
    const double y = top + 8 + 18.0 * static_cast<double>(i);
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                     right + 16, y - 9, color(i), right + 36, y, xml_escape(all[i].name));
  }
  return s + "</svg>\n";
}

}  // namespace

std::string line_chart(const labels& l, const std::vector<series>& lines) {
  frame f;
  for (const series& s : lines)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i])) f.x.add(s.x[i]), f.y.add(s.y[i]);
  f.x.settle();
  f.y.settle();
  std::string out = open(l, f, true);
  for (size_t k = 0; k < lines.size(); ++k) {
    const series& s = lines[k];
    std::string points;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i]) && std::isfinite(s.x[i]))
        points += fmt::format("{}{:.3f},{:.3f}", points.empty() ? "" : " ", f.px(s.x[i]), f.py(s.y[i]));
    if (points.empty()) continue;
    out += fmt::format("<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
                       "points=\"{}\"/>\n",
                       xml_escape(s.name), color(k), points);
    if (!s.dots) continue;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i]) && std::isfinite(s.x[i]))
        out += fmt::format("<circle class=\"dot\" data-series=\"{}\" cx=\"{:.3f}\" cy=\"{:.3f}\" r=\"3.5\" fill=\"{}\"/>\n",
                           xml_escape(s.name), f.px(s.x[i]), f.py(s.y[i]), color(k));
  }
  return out + legend_and_close(lines);
}

std::string bar_chart(const labels& l, const std::vector<std::string>& categories, const std::vector<series>& bars) {
  frame f;
  f.x.lo = 0;
  f.x.hi = static_cast<double>(std::max<size_t>(categories.size(), 1));
  f.y.add(0);
  for (const series& s : bars)
    for (double v : s.y) f.y.add(v);
  f.y.settle();
  std::string out = open(l, f, false);
  const double group = (right - left) / f.x.hi, bar = group * 0.8 / static_cast<double>(std::max<size_t>(bars.size(), 1));
  for (size_t c = 0; c < categories.size(); ++c) {
    const double x0 = f.px(static_cast<double>(c)) + group * 0.1;
    out += fmt::format("<text x=\"{:.3f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", f.px(c + 0.5), bottom + 18,
                       xml_escape(categories[c]));
    for (size_t k = 0; k < bars.size(); ++k) {
      const double v = c < bars[k].y.size() ? bars[k].y[c] : 0;
      if (!std::isfinite(v)) continue;
      out += fmt::format("<rect class=\"bar\" data-series=\"{}\" data-category=\"{}\" data-value=\"{:.17g}\" "
                         "x=\"{:.3f}\" y=\"{:.3f}\" width=\"{:.3f}\" height=\"{:.3f}\" fill=\"{}\"/>\n",
                         xml_escape(bars[k].name), xml_escape(categories[c]), v, x0 + bar * static_cast<double>(k),
                         f.py(v), bar, f.py(0) - f.py(v), color(k));
    }
  }
  return out + legend_and_close(bars);
}

std::string stack(const std::vector<std::string>& charts) {
  // Every chart is width x height (open() draws them so), hence the fixed offsets.
  const double total = height * static_cast<double>(std::max<size_t>(charts.size(), 1));
  std::string out = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
                                "viewBox=\"0 0 {0} {1}\">\n",
                                width, total);
  for (size_t i = 0; i < charts.size(); ++i)
    out += fmt::format("<g class=\"chart\" transform=\"translate(0 {})\">\n{}</g>\n", height * static_cast<double>(i),
                       charts[i]);
  return out + "</svg>\n";
}

}  // namespace troupe::plot
