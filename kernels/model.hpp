// model_spec: the serializable description of a model, and the builders that turn it into a
// flat list of layers. Stages, tensor-parallel splits and checkpoints all start from the list.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/context_attention.hpp"
#include "kernels/layer.hpp"
#include "kernels/tp_group.hpp"

namespace troupe {

// The model families troupe builds. The text form ("mlp", "gpt") is what configs, flags and
// checkpoint manifests carry.
enum class model_kind { mlp, gpt };
const char* to_string(model_kind k);
std::optional<model_kind> parse_model_kind(const std::string& text);

struct model_spec {
  model_kind kind = model_kind::mlp;
  // mlp: inputs -> hidden... -> classes, ReLU between linears
  int64_t inputs = 784;
  std::vector<int64_t> hidden{256, 256};
  int64_t classes = 10;
  // gpt: character-level decoder; vocab comes from the corpus
  int64_t vocab = 0;
  int64_t context = 64;   // T, tokens per sequence
  int64_t channels = 128; // C
  int64_t heads = 4;      // NH
  int64_t blocks = 4;     // transformer blocks
  // gpt, mixture of experts: with experts > 0, every moe_every-th block (blocks moe_every - 1,
  // 2 moe_every - 1, ...) has E experts of 4C features and a router sending each token to top_k
  // of them (layers_moe_block.hpp) in place of its MLP.
  int64_t experts = 0;
  int64_t top_k = 2;
  int64_t moe_every = 1;
  double capacity_factor = 0;  // 0: dropless
  double aux_loss_coefficient = 0.01;  // Switch's load-balancing loss
  bool is_moe_block(int64_t block) const { return experts > 0 && (block + 1) % moe_every == 0; }
};

// Checks a spec and throws std::invalid_argument naming the bad field; with tp > 1 also that
// the model splits over that many tensor-parallel ranks.
void validate(const model_spec& spec, int tp = 1);
// Only the tensor-parallel part (a GPT's vocabulary is checked once it is known, > 0).
void validate_tp_split(const model_spec& spec, int tp);
std::string describe(const model_spec& spec);
// The unsplit model's parameter count from its sizes alone, without building a layer (a
// checkpoint's manifest is checked against it before anything is read). Throws
// std::invalid_argument for a spec validate() refuses or a count past 2^62.
int64_t param_count(const model_spec& spec);

// The model's layers; with a tensor-parallel group, this rank's share of them (Megatron's split:
// the MLP's linears alternate column- and row-parallel, the GPT splits its embedding and head over
// the vocabulary and each block over heads). The cut points and per-layer init are those of the
// unsplit model, so every tp degree starts from the single-device parameters.
// sequence_parallel (GPT, tp > 1): layernorms and residuals on each rank's share of the
// sequences (layers_parallel.hpp, sp::); the MLP refuses it.
// context (GPT): the group of ranks that split each sequence (--cp); the layers then see this
// rank's tokens of it, and attention meets the others' (context_attention.hpp). The MLP, which
// has no sequence, refuses a group of more than one.
// experts (GPT with experts): the expert group (--ep) every MoE block shares its experts over;
// a model without experts refuses a group of more than one.
layer_list build_layers(const model_spec& spec, tp_group* tp = nullptr, bool sequence_parallel = false,
                        context::context_split context = {}, tp_group* experts = nullptr);
layer_list build_mlp(const model_spec& spec, tp_group* tp = nullptr);
layer_list build_gpt(const model_spec& spec, tp_group* tp = nullptr, bool sequence_parallel = false,
                     context::context_split context = {}, tp_group* experts = nullptr);  // gpt.cpp
// True when the model's last layer leaves its logits split over the vocabulary (or the MLP's
// classes) at this tp degree: the loss is then vocab_parallel_cross_entropy.
bool splits_logits(const model_spec& spec, int tp);
// The width of the model's output: the GPT's vocabulary, the MLP's classes.
int64_t output_features(const model_spec& spec);

}  // namespace troupe
