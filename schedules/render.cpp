// render: string builders for the text table, the SVG timeline and the Chrome trace.
// Numbers are printed with std::to_chars in fixed notation so output does not depend on the
// locale; nothing here computes timing or checks a schedule.
#include "schedules/render.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace troupe::sched {

namespace {

std::string fixed(double value, int precision) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed,
                                 precision);
  if (ec != std::errc()) return "0";
  return std::string(buffer, end);
}

std::string pad(std::string text, std::size_t width) {
  text.resize(std::max(width, text.size()), ' ');
  return text;
}

const char* color_of(op kind) {
  switch (kind) {
    case op::forward: return "#4e79a7";
    case op::backward: return "#f28e2b";
    case op::backward_input: return "#e15759";
    case op::backward_weight: return "#59a14f";
    case op::reduce_grads: return "#b07aa1";
    case op::optimizer_step: return "#9c755f";
    case op::fetch_params:
    case op::release_params: return "#bab0ac";
    case op::send_act:
    case op::recv_act:
    case op::send_grad:
    case op::recv_grad: return "none";  // not drawn
  }
  return "none";
}

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// A round tick spacing (1, 2 or 5 times a power of ten) giving about ten ticks.
// The axis unit of a span: the largest in which it is at least 1.
struct unit {
  const char* name;
  double per_second;
};
unit unit_for(double span_seconds) {
  if (span_seconds >= 1) return {"seconds", 1};
  if (span_seconds >= 1e-3) return {"milliseconds", 1e3};
  return {"microseconds", 1e6};
}

double tick_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / 10;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_text(const schedule& s, int mark_stage, int mark_action) {
  std::size_t columns = 0;
  for (const auto& list : s.stages) columns = std::max(columns, list.size());
  // cells[d][j] for stage d, position j; row 0 of `widths` is the "step" header.
  std::vector<std::vector<std::string>> cells(s.stages.size());
  std::vector<std::size_t> widths(columns, 0);
  for (std::size_t j = 0; j < columns; ++j) widths[j] = std::to_string(j).size();
  for (std::size_t d = 0; d < s.stages.size(); ++d) {
    for (std::size_t j = 0; j < s.stages[d].size(); ++j) {
      std::string cell = body_string(s.stages[d][j]);
      if (static_cast<int>(d) == mark_stage && static_cast<int>(j) == mark_action)
        cell = "[" + cell + "]";
      widths[j] = std::max(widths[j], cell.size());
      cells[d].push_back(std::move(cell));
    }
  }
  const std::size_t label = ("stage " + std::to_string(s.stages.size())).size();
  auto row = [&](std::string head, const std::vector<std::string>& row_cells) {
    std::string line = pad(std::move(head), label);
    for (std::size_t j = 0; j < row_cells.size(); ++j) line += "  " + pad(row_cells[j], widths[j]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::vector<std::string> header;
  for (std::size_t j = 0; j < columns; ++j) header.push_back(std::to_string(j));
  std::string out = s.name + ": " + std::to_string(s.num_stages) + " stages, " +
                    std::to_string(s.num_microbatches) + " microbatches, " +
                    std::to_string(s.virtual_stages) + " chunks per stage\n";
  out += row("step", header);
  for (std::size_t d = 0; d < cells.size(); ++d) out += row("stage " + std::to_string(d), cells[d]);
  return out;
}

std::string render_svg(const timeline& t) {
  // Lane labels as long as the longest name; the axis in the unit that gives its ticks digits
  // (a 1.8 ms step labelled in seconds read "0.000 0.000 0.001").
  std::vector<std::string> label(t.stages.size());
  std::size_t longest = 0;
  for (std::size_t d = 0; d < t.stages.size(); ++d) {
    const lane_name n = name_of_lane(t, d);
    label[d] = n.what.empty() ? n.who : n.who + " " + n.what;
    longest = std::max(longest, label[d].size());
  }
  const double left = std::max(70.0, 8.0 + 6.0 * static_cast<double>(longest)), right = 20, top = 30, lane = 28,
               gap = 6, width = 1000 + std::max(0.0, left - 70);
  const double span = std::max(end_seconds(t), 1e-12);
  const double scale = (width - left - right) / span;
  const double axis_y = top + static_cast<double>(t.stages.size()) * (lane + gap);
  const double height = axis_y + 36;
  auto x_of = [&](double seconds) { return fixed(left + seconds * scale, 2); };
  const unit u = unit_for(span);

  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed(width, 0) +
                    "\" height=\"" + fixed(height, 0) + "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  out += "<text x=\"" + fixed(left, 0) + "\" y=\"18\" font-size=\"13\">" + xml_escape(t.name) +
         "</text>\n";
  for (std::size_t d = 0; d < t.stages.size(); ++d) {
    const double y = top + static_cast<double>(d) * (lane + gap);
    out += "<text x=\"4\" y=\"" + fixed(y + lane / 2 + 4, 2) + "\">" + xml_escape(label[d]) + "</text>\n";
    out += "<rect class=\"lane\" x=\"" + fixed(left, 2) + "\" y=\"" + fixed(y, 2) + "\" width=\"" +
           fixed(width - left - right, 2) + "\" height=\"" + fixed(lane, 2) + "\" fill=\"#f4f4f4\"/>\n";
    for (const timed_action& e : t.stages[d]) {
      if (is_communication(e.what.kind)) continue;
      const double w = (e.end_seconds - e.start_seconds) * scale;
      const std::string text = xml_escape(body_string(e.what));
      out += std::string("<rect class=\"action") + (e.out_of_order ? " moved" : "") + "\" x=\"" + x_of(e.start_seconds) +
             "\" y=\"" + fixed(y, 2) + "\" width=\"" + fixed(w, 2) + "\" height=\"" + fixed(lane, 2) + "\" fill=\"" +
             color_of(e.what.kind) + (e.out_of_order ? "\" stroke=\"#000000\" stroke-width=\"1.5\"/>\n"
                                                     : "\" stroke=\"#ffffff\" stroke-width=\"0.5\"/>\n");
      if (w >= 6.0 * static_cast<double>(text.size()))
        out += "<text x=\"" + fixed(left + e.start_seconds * scale + w / 2, 2) + "\" y=\"" +
               fixed(y + lane / 2 + 4, 2) + "\" text-anchor=\"middle\" fill=\"#ffffff\">" + text +
               "</text>\n";
    }
  }
  out += "<line x1=\"" + fixed(left, 2) + "\" y1=\"" + fixed(axis_y, 2) + "\" x2=\"" +
         fixed(width - right, 2) + "\" y2=\"" + fixed(axis_y, 2) + "\" stroke=\"#000000\"/>\n";
  const double step = tick_step(span * u.per_second);  // in the unit
  const int digits = step < 1 ? static_cast<int>(std::ceil(-std::log10(step) - 1e-9)) : 0;
  for (int i = 0; i * step <= span * u.per_second * (1 + 1e-9); ++i) {
    const std::string x = x_of(i * step / u.per_second);
    out += "<line x1=\"" + x + "\" y1=\"" + fixed(axis_y, 2) + "\" x2=\"" + x + "\" y2=\"" +
           fixed(axis_y + 5, 2) + "\" stroke=\"#000000\"/>\n";
    out += "<text class=\"tick\" x=\"" + x + "\" y=\"" + fixed(axis_y + 16, 2) + "\" text-anchor=\"middle\">" +
           fixed(i * step, digits) + "</text>\n";
  }
  out += "<text x=\"" + fixed(width - right, 0) + "\" y=\"" + fixed(axis_y + 30, 2) +
         "\" text-anchor=\"end\">" + u.name + "</text>\n";
  out += "</svg>\n";
  return out;
}

std::string render_chrome_trace(const timeline& t) {
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& event) {
    out += (first ? "" : ",\n") + event;
    first = false;
  };
  // A lane is a thread of its `who`'s process, so Perfetto shows a rank's compute and its
  // all-reduces together under the rank's name.
  std::vector<std::string> groups;
  for (std::size_t d = 0; d < t.stages.size(); ++d) {
    const lane_name n = name_of_lane(t, d);
    auto g = std::find(groups.begin(), groups.end(), n.who);
    const std::string pid = std::to_string(g - groups.begin());
    if (g == groups.end()) {
      groups.push_back(n.who);
      emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"" + json_escape(n.who) +
           "\"}}");
    }
    const std::string id = std::to_string(d);
    emit("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + id + ",\"args\":{\"name\":\"" +
         json_escape(n.what.empty() ? n.who : n.what) + "\"}}");
    for (const timed_action& e : t.stages[d]) {
      emit("{\"name\":\"" + json_escape(body_string(e.what)) + "\",\"cat\":\"" +
           to_string(e.what.kind) + "\",\"ph\":\"X\",\"pid\":" + pid + ",\"tid\":" + id +
           ",\"ts\":" + fixed(e.start_seconds * 1e6, 3) +
           ",\"dur\":" + fixed((e.end_seconds - e.start_seconds) * 1e6, 3) +
           ",\"args\":{\"microbatch\":" + std::to_string(e.what.microbatch) +
           ",\"chunk\":" + std::to_string(e.what.chunk) + ",\"peer\":" + std::to_string(e.what.peer) +
           (e.out_of_order ? ",\"out_of_order\":true" : "") + "}}");
    }
  }
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"name\":\"" + json_escape(t.name) +
         "\"}}\n";
  return out;
}

}  // namespace troupe::sched
