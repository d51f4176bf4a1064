// The model's text forms and its arithmetic (see plan.hpp's model_desc): parameters and FLOPs
// per sequence from the shape, and the plan choices' names.
#include <string>
#include <vector>

#include "schedules/plan/plan.hpp"

namespace troupe::sched::plan {

const char* to_string(activation_kind a) { return a == activation_kind::swiglu ? "swiglu" : "gelu"; }

std::optional<activation_kind> parse_activation(const std::string& text) {
  for (activation_kind a : {activation_kind::gelu, activation_kind::swiglu})
    if (text == to_string(a)) return a;
  return std::nullopt;
}

const char* to_string(rank_order o) { return o == rank_order::tp_cp_dp_pp ? "tp-cp-dp-pp" : "tp-cp-pp-dp"; }

std::optional<rank_order> parse_rank_order(const std::string& text) {
  for (rank_order o : {rank_order::tp_cp_pp_dp, rank_order::tp_cp_dp_pp})
    if (text == to_string(o)) return o;
  return std::nullopt;
}

const char* to_string(cp_kind k) {
  switch (k) {
    case cp_kind::ring:
      return "ring";
    case cp_kind::all_to_all:
      return "all-to-all";
    case cp_kind::all_gather:
      return "all-gather";
  }
  return "?";
}

std::optional<cp_kind> parse_cp_kind(const std::string& text) {
  for (cp_kind k : {cp_kind::ring, cp_kind::all_to_all, cp_kind::all_gather})
    if (text == to_string(k)) return k;
  return std::nullopt;
}

double model_desc::layer_gemm_parameters() const {
  return attention_parameters() + (moe() ? layer_expert_parameters() + router_parameters() : mlp_parameters(ffn()));
}

double model_desc::active_layer_gemm_parameters() const {
  return attention_parameters() +
         (moe() ? top_k * mlp_parameters(expert_ffn()) + router_parameters() : mlp_parameters(ffn()));
}

double model_desc::model_flops_per_sequence() const {
  const double s = sequence, h = hidden, l = layers;
  return 3 * (2 * s * l * active_layer_gemm_parameters() + 4 * s * s * q_width() * l + 2 * s * h * vocab);
}

double model_desc::hardware_flops_per_sequence(recompute_mode r) const {
  const double s = sequence, h = hidden, l = layers;
  switch (r) {
    case recompute_mode::none:
      return model_flops_per_sequence();
    case recompute_mode::selective:  // the two attention GEMMs run again: 4s^2ad per layer
      return model_flops_per_sequence() + 4 * s * s * q_width() * l;
    case recompute_mode::full:  // the layers' forward again, not the logits
      return 4 * (2 * s * l * active_layer_gemm_parameters() + 4 * s * s * q_width() * l) + 3 * 2 * s * h * vocab;
  }
  return 0;
}

std::string model_desc::describe_shape() const {
  std::vector<std::string> parts;
  if (kv() != heads) parts.push_back("GQA " + std::to_string(kv()) + " kv heads");
  if (head() != hidden / heads) parts.push_back("head dim " + std::to_string(static_cast<long long>(head())));
  const auto width = [](double w) { return std::to_string(static_cast<long long>(w)); };
  if (moe()) {
    parts.push_back("MoE " + std::to_string(experts) + " experts top-" + std::to_string(top_k) + " " +
                    (activation == activation_kind::swiglu ? "SwiGLU " : "GELU ") + width(expert_ffn()));
  } else if (activation != activation_kind::gelu || ffn() != 4 * hidden) {
    parts.push_back(std::string(activation == activation_kind::swiglu ? "SwiGLU " : "GELU ") + width(ffn()));
  }
  if (!tied_embeddings) parts.push_back("untied");
  if (fused_attention) parts.push_back("fused attention");
  if (!dropout) parts.push_back("no dropout");
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace troupe::sched::plan
