// Tests of the renderers: the text table's exact layout and failure marker, that the SVG is
// well-formed XML with one action rect per drawn action, and that the Chrome trace is valid
// JSON whose events carry the simulated times. The checkers below are minimal on purpose.
#include "schedules/render.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "schedules/builders.hpp"
#include "schedules/passes.hpp"
#include "schedules/simulate.hpp"

namespace troupe::sched {
namespace {

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Well-formedness for the XML subset the renderer writes: tags balance, attributes are quoted,
// text holds no raw '<' or '&' other than entities. Returns "" or what is wrong.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> open;
  std::size_t i = 0, roots = 0;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      if (xml[i] == '&' && xml.compare(i, 4, "&lt;") && xml.compare(i, 4, "&gt;") &&
          xml.compare(i, 5, "&amp;") && xml.compare(i, 6, "&quot;"))
        return "raw & at " + std::to_string(i);
      ++i;
      continue;
    }
    const std::size_t close = xml.find('>', i);
    if (close == std::string::npos) return "unclosed tag at " + std::to_string(i);
    std::string tag = xml.substr(i + 1, close - i - 1);
    if (count(tag, "\"") % 2 != 0 || tag.find('<') != std::string::npos)
      return "bad tag at " + std::to_string(i);
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
      open.pop_back();
    } else {
      if (open.empty()) ++roots;
      const bool self_closing = tag.back() == '/';
      const std::string name = tag.substr(0, tag.find_first_of(" /"));
      if (!self_closing) open.push_back(name);
    }
    i = close + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  return roots == 1 ? "" : "expected one root element";
}

// A minimal JSON reader: validates the syntax and collects every object that has "ph":"X",
// flattened to key -> raw scalar text (strings unquoted).
class json_reader {
 public:
  explicit json_reader(const std::string& text) : text_(text) {}
  bool parse() {
    bool ok = value(nullptr);
    skip_space();
    return ok && pos_ == text_.size();
  }
  std::vector<std::map<std::string, std::string>> x_events;

 private:
  void skip_space() { while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_; }
  bool literal(const char* word) {
    const std::string w(word);
    if (text_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }
  bool string(std::string* out) {
    if (pos_ >= text_.size() || text_[pos_] != '"') return false;
    for (++pos_; pos_ < text_.size() && text_[pos_] != '"'; ++pos_) {
      if (text_[pos_] == '\\') ++pos_;
      if (out != nullptr && pos_ < text_.size()) *out += text_[pos_];
    }
    return pos_++ < text_.size();
  }
  bool number(std::string* out) {
    const std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    while (pos_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E' ||
                                   text_[pos_] == '+' || text_[pos_] == '-'))
      ++pos_;
    if (out != nullptr) *out = text_.substr(start, pos_ - start);
    return pos_ > start && std::isdigit(static_cast<unsigned char>(text_[pos_ - 1]));
  }
  bool value(std::string* scalar) {
    skip_space();
    if (pos_ >= text_.size()) return false;
    const char c = text_[pos_];
    if (c == '{') return object();
    if (c == '[') {
      ++pos_;
      skip_space();
      if (literal("]")) return true;
      do {
        if (!value(nullptr)) return false;
        skip_space();
      } while (literal(","));
      return literal("]");
    }
    if (c == '"') return string(scalar);
    if (literal("true") || literal("false") || literal("null")) return true;
    return number(scalar);
  }
  bool object() {
    ++pos_;
    std::map<std::string, std::string> fields;
    skip_space();
    if (!literal("}")) {
      do {
        skip_space();
        std::string key, scalar;
        if (!string(&key)) return false;
        skip_space();
        if (!literal(":") || !value(&scalar)) return false;
        fields[key] = scalar;
        skip_space();
      } while (literal(","));
      if (!literal("}")) return false;
    }
    if (fields.count("ph") && fields["ph"] == "X") x_events.push_back(fields);
    return true;
  }
  const std::string text_;  // a copy: readers are often built from a temporary
  std::size_t pos_ = 0;
};

TEST(schedules_render, text_table_lines_up_columns) {
  EXPECT_EQ(render_text(complete(gpipe(2, 2))),
            "gpipe: 2 stages, 2 microbatches, 1 chunks per stage\n"
            "step     0      1      2      3      4      5      6      7      8  9\n"
            "stage 0  F0     SA0>1  F1     SA1>1  RG0<1  B0     RG1<1  B1     R  O\n"
            "stage 1  RA0<0  F0     RA1<0  F1     B0     SG0>0  B1     SG1>0  R  O\n");
}

TEST(schedules_render, text_table_marks_the_failing_action) {
  const std::string table = render_text(one_f_one_b(2, 2), 1, 2);
  EXPECT_NE(table.find("stage 1  F0  B0  [F1]  B1"), std::string::npos) << table;
  EXPECT_EQ(count(table, "["), 1u);
}

TEST(schedules_render, svg_is_well_formed_with_one_rect_per_drawn_action) {
  const schedule s = complete(zb_h1(4, 8));
  const simulation r = simulate(s, uniform_costs(1, 2, 1, 1));
  const std::string svg = render_svg(r.events);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  std::size_t drawn = 0;
  for (const auto& list : s.stages)
    for (const action& a : list) drawn += is_communication(a.kind) ? 0 : 1;
  EXPECT_EQ(drawn, 4u * (8 * 3 + 2));  // F, I, W per microbatch, plus R and O, per stage
  EXPECT_EQ(count(svg, "<rect class=\"action\""), drawn);
  EXPECT_EQ(count(svg, "<rect class=\"lane\""), 4u);
  EXPECT_EQ(count(svg, "fill=\"#4e79a7\""), 32u);  // forwards
  EXPECT_EQ(count(svg, "fill=\"#e15759\""), 32u);  // backward_input
  EXPECT_EQ(count(svg, "fill=\"#59a14f\""), 32u);  // backward_weight
  for (int d = 0; d < 4; ++d) EXPECT_NE(svg.find(">stage " + std::to_string(d) + "<"), std::string::npos);
  EXPECT_NE(svg.find(">seconds<"), std::string::npos);
  // Stage 0's first forward is drawn at the left edge, 1 s of the 27 s step on 910 px.
  EXPECT_DOUBLE_EQ(r.makespan_seconds, 27);
  EXPECT_NE(svg.find("<rect class=\"action\" x=\"70.00\" y=\"30.00\" width=\"33.70\""),
            std::string::npos);
}

TEST(schedules_render, svg_escapes_the_name) {
  timeline t;
  t.name = "a<b & \"c\"";
  t.stages.push_back({timed_action{action{0, op::forward, 0, 0, -1}, 0, 1}});
  const std::string svg = render_svg(t);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
}

TEST(schedules_render, chrome_trace_is_json_with_one_event_per_action) {
  const schedule s = complete(one_f_one_b(2, 2));
  const simulation r = simulate(s, uniform_costs(1, 2, 1, 1));
  const std::string trace = render_chrome_trace(r.events);
  json_reader reader(trace);
  ASSERT_TRUE(reader.parse()) << trace;
  EXPECT_EQ(reader.x_events.size(), s.stages[0].size() + s.stages[1].size());
  EXPECT_EQ(count(trace, "\"ph\":\"M\""), 4u);  // a process and a thread name per unnamed stage
  // Stage 1's forward of microbatch 0 runs from 1 s to 2 s: ts/dur in microseconds.
  bool found = false;
  for (const auto& e : reader.x_events) {
    if (e.at("pid") == "1" && e.at("name") == "F0") {
      found = true;
      EXPECT_EQ(e.at("tid"), "1");
      EXPECT_EQ(e.at("cat"), "forward");
      EXPECT_DOUBLE_EQ(std::stod(e.at("ts")), 1e6);
      EXPECT_DOUBLE_EQ(std::stod(e.at("dur")), 1e6);
    }
    if (e.at("name") == "SA0>1") {
      EXPECT_DOUBLE_EQ(std::stod(e.at("dur")), 0);
    }
  }
  EXPECT_TRUE(found);
  json_reader broken(trace.substr(0, trace.size() - 3));
  EXPECT_FALSE(broken.parse());
}

TEST(schedules_render, renderers_draw_a_measured_timeline_too) {
  timeline measured;  // as a runtime would record it: only what it did, with real times
  measured.name = "measured \"run\"";
  measured.stages = {{timed_action{parse_action("0F0"), 0.001, 0.0035},
                      timed_action{parse_action("0B0"), 0.004, 0.009}}};
  json_reader reader(render_chrome_trace(measured));
  ASSERT_TRUE(reader.parse());
  ASSERT_EQ(reader.x_events.size(), 2u);
  EXPECT_EQ(reader.x_events[0].at("ts"), "1000.000");
  EXPECT_EQ(reader.x_events[0].at("dur"), "2500.000");
  const std::string svg = render_svg(measured);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<rect class=\"action\""), 2u);
  EXPECT_EQ(count(svg, "fill=\"#f28e2b\""), 1u);  // full backward
}

// A 1.8 ms step labelled in seconds read "0.000 0.000 0.001": each axis is in the unit where its
// span is at least 1, with ticks that differ.
std::vector<std::string> ticks(const std::string& svg) {
  std::vector<std::string> out;
  for (std::size_t at = svg.find("<text class=\"tick\""); at != std::string::npos; at = svg.find("<text class=\"tick\"", at + 1)) {
    const std::size_t open = svg.find('>', at) + 1;
    out.push_back(svg.substr(open, svg.find('<', open) - open));
  }
  return out;
}

TEST(schedules_render, svg_axis_is_in_the_unit_that_fits_the_span_with_distinct_ticks) {
  timeline t;
  t.stages = {{timed_action{parse_action("0F0"), 0, 0.0018}}};
  std::string svg = render_svg(t);
  EXPECT_NE(svg.find(">milliseconds<"), std::string::npos);
  EXPECT_EQ(ticks(svg), (std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2", "1.4", "1.6", "1.8"}));
  t.stages = {{timed_action{parse_action("0F0"), 0, 0.0005}}};
  svg = render_svg(t);
  EXPECT_NE(svg.find(">microseconds<"), std::string::npos);
  EXPECT_EQ(ticks(svg).back(), "500");
  t.stages = {{timed_action{parse_action("0F0"), 0, 27}}};
  svg = render_svg(t);
  EXPECT_NE(svg.find(">seconds<"), std::string::npos);
  EXPECT_EQ(ticks(svg)[1], "5");
}

TEST(schedules_render, named_lanes_are_threads_of_their_rank_in_the_trace_and_labelled_in_the_svg) {
  timeline t;
  t.stages = {{timed_action{parse_action("0F0"), 0, 1}}, {timed_action{parse_action("1F0"), 0, 1}},
              {timed_action{parse_action("2F0"), 0, 1}}, {timed_action{parse_action("3F0"), 0, 1}}};
  t.lanes = {{"rank 0", "compute"}, {"rank 0", "all-reduce"}, {"rank 1", "compute"}, {"rank 1", "all-reduce"}};
  const std::string trace = render_chrome_trace(t);
  json_reader reader(trace);
  ASSERT_TRUE(reader.parse()) << trace;
  EXPECT_NE(trace.find("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"rank 1\"}}"), std::string::npos);
  EXPECT_NE(trace.find("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":3,\"args\":{\"name\":\"all-reduce\"}}"),
            std::string::npos);
  EXPECT_EQ(count(trace, "process_name"), 2u);
  ASSERT_EQ(reader.x_events.size(), 4u);
  EXPECT_EQ(reader.x_events[3].at("pid"), "1");  // rank 1's all-reduce lane
  EXPECT_EQ(reader.x_events[3].at("tid"), "3");
  const std::string svg = render_svg(t);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find(">rank 1 all-reduce<"), std::string::npos);
  EXPECT_EQ(svg.find(">stage "), std::string::npos);
}

TEST(schedules_render, actions_run_out_of_their_rows_order_are_outlined_and_flagged_in_the_trace) {
  timeline t;
  t.stages = {{timed_action{parse_action("0F0"), 0, 1}, timed_action{parse_action("0B0"), 1, 3, true}}};
  const std::string svg = render_svg(t);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<rect class=\"action moved\""), 1u);
  EXPECT_EQ(count(svg, "<rect class=\"action\""), 1u);
  EXPECT_NE(svg.find("stroke=\"#000000\" stroke-width=\"1.5\""), std::string::npos);
  const std::string trace = render_chrome_trace(t);
  json_reader reader(trace);
  ASSERT_TRUE(reader.parse()) << trace;
  EXPECT_EQ(count(trace, "\"out_of_order\":true"), 1u);
}

}  // namespace
}  // namespace troupe::sched
