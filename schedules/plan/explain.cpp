// Why one plan is faster than another (see plan.hpp's explain): the step's parts side by side,
// each with the plan choices that move it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "schedules/plan/plan.hpp"

namespace troupe::sched::plan {

std::vector<named_seconds> parts(const step_breakdown& b) {
  return {{"compute", b.compute},
          {"recompute", b.recompute},
          {"tensor_parallel", b.tensor_parallel},
          {"context_parallel", b.context_parallel},
          {"expert_parallel", b.expert_parallel},
          {"zero3_gathers", b.zero3_gathers},
          {"pipeline_idle", b.pipeline_idle},
          {"dp_reduction", b.dp_reduction},
          {"optimizer", b.optimizer}};
}

namespace {

// The plan choices that move a part of the step, for the explanation's lines.
std::string why(const std::string& part, const plan_config& x, const plan_config& y) {
  auto changed = [](const char* what, const std::string& a, const std::string& b) {
    return a == b ? std::string() : std::string(what) + " " + a + " -> " + b;
  };
  auto join = [](std::vector<std::string> items) {
    std::string out;
    for (const auto& i : items)
      if (!i.empty()) out += (out.empty() ? "" : ", ") + i;
    return out.empty() ? std::string("the same choices, other sizes") : out;
  };
  const std::string mb = changed("micro-batch", std::to_string(x.micro_batch), std::to_string(y.micro_batch));
  const std::string tp = changed("tp", std::to_string(x.m.tp), std::to_string(y.m.tp));
  const std::string pp = changed("pp", std::to_string(x.m.pp), std::to_string(y.m.pp));
  const std::string dp = changed("dp", std::to_string(x.m.dp), std::to_string(y.m.dp));
  const std::string rc = changed("recomputation", to_string(x.rc), to_string(y.rc));
  const std::string sched = changed("schedule", x.schedule + (x.virtual_stages > 1 ? " v" + std::to_string(x.virtual_stages) : ""),
                                    y.schedule + (y.virtual_stages > 1 ? " v" + std::to_string(y.virtual_stages) : ""));
  const std::string zero = changed("zero", std::to_string(x.zero), std::to_string(y.zero));
  const std::string cp = changed("cp", std::to_string(x.cp) + " " + to_string(x.cp_attention),
                                 std::to_string(y.cp) + " " + to_string(y.cp_attention));
  const std::string ep = changed("ep", std::to_string(x.ep), std::to_string(y.ep));
  const std::string order = changed("rank order", to_string(x.order), to_string(y.order));
  if (part == "recompute") return join({rc});
  if (part == "tensor_parallel") return join({tp, mb, pp});
  if (part == "context_parallel") return join({cp, tp, mb});
  if (part == "expert_parallel") return join({ep, tp, mb, order});
  if (part == "pipeline_idle") return join({sched, pp, changed("micro-batches", std::to_string(x.microbatches()), std::to_string(y.microbatches()))});
  if (part == "dp_reduction") return join({dp, pp, tp, cp, ep, zero, order});
  if (part == "optimizer") return join({zero, dp, pp, tp});
  if (part == "zero3_gathers") return join({zero});
  return join({tp, pp, mb, cp, ep});  // compute: each GEMM's size and how work splits over devices
}

}  // namespace

std::vector<std::string> explain(const plan_result& chosen, const plan_result& reference) {
  const auto a = parts(chosen.breakdown), b = parts(reference.breakdown);
  std::vector<std::pair<double, std::string>> lines;
  for (size_t i = 0; i < a.size(); ++i) {
    const double saved = b[i].seconds - a[i].seconds;
    if (std::abs(saved) <= 0.005 * reference.step_seconds) continue;
    char buf[320];
    std::snprintf(buf, sizeof buf, "%s %.3f s -> %.3f s (%s %.3f s, %.1f%% of the reference step): %s", a[i].name,
                  b[i].seconds, a[i].seconds, saved > 0 ? "saves" : "costs", std::abs(saved),
                  100 * std::abs(saved) / reference.step_seconds,
                  why(a[i].name, reference.config, chosen.config).c_str());
    lines.emplace_back(-saved, buf);
  }
  std::sort(lines.begin(), lines.end());
  std::vector<std::string> out;
  char head[200];
  std::snprintf(head, sizeof head, "step %.3f s against %.3f s: %.2fx the reference's throughput", chosen.step_seconds,
                reference.step_seconds, reference.step_seconds / chosen.step_seconds);
  out.emplace_back(head);
  for (auto& l : lines) out.push_back(std::move(l.second));
  char mem[200];
  std::snprintf(mem, sizeof mem, "memory %.1f GiB against %.1f GiB per device (stage %d against %d)",
                chosen.memory.total() / gib, reference.memory.total() / gib, chosen.memory_stage,
                reference.memory_stage);
  out.emplace_back(mem);
  return out;
}

}  // namespace troupe::sched::plan
