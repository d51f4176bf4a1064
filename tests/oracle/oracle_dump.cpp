// oracle_dump mlp|gpt|moe FILE: runs a tiny unsplit model (moe: the GPT with MoE blocks) through troupe's own training step (init,
// forward, cross-entropy, backward, AdamW and SGD) and writes every number PyTorch needs to redo
// it into a safetensors file, for pytorch_oracle.py to compare. Nothing here is compared: the
// point is that an error troupe's own tests would share (a layernorm eps, a GELU variant, a loss
// scale, a bias correction) meets an implementation that is not troupe's.
//
// The file holds "points", each a parameter vector with what troupe computes there (P a prefix):
//   P<name>        the parameters, under named_params' names
//   Plogits        the logits of the batch, (B, classes) or (B, T, vocab)
//   Ploss          the mean cross-entropy over the rows (samples or tokens), a scalar
//   Pgrad.<name>   d(mean loss)/d(parameter): grad_scale 1/rows, as train_step uses
// P = "" is troupe's initialization from the seed, where a layernorm's inputs are small enough
// (variance ~1e-3) for its eps to show; "perturbed." the same plus noise that pushes GELU, softmax
// and ReLU into their curved ranges (at init an erf-GELU differs from the tanh one by 2e-5 in the
// worst gradient, barely over the oracle's 1e-5; here by 4e-4); "adamw.<t>." and "sgd.<t>." the
// parameters after t = 1, 2 train_steps from init, so the second step's bias correction and
// momentum count. Also the batch (inputs, targets as F32) and metadata: spec, hyperparameters.
// And "bf16.": one linear layer at matmul_precision::bf16 on fixed values (x, weight, bias, dy)
// with what troupe computes from them (y, dx, grad.weight, grad.bias), for PyTorch to redo from
// the same values rounded by its own bf16 conversion.
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>

#include "kernels/layers_dense.hpp"
#include "kernels/model.hpp"
#include "kernels/param_names.hpp"
#include "kernels/train_step.hpp"
#include "storage/checkpoint_export.hpp"
#include "storage/safetensors.hpp"
#include "tests/oracle/oracle_models.hpp"

namespace troupe {
namespace {

using storage::named_tensor;

struct job {
  model_spec spec;
  batch data;
};

constexpr uint64_t init_seed = 42;
constexpr int optimizer_steps = 2;  // the second is where momentum first counts and bias correction has t > 1

job mlp_job() {
  job j{test::oracle_mlp(), {}};
  std::mt19937_64 rng(7);
  std::normal_distribution<float> x(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(j.spec.classes) - 1);
  j.data.inputs = tensor({6, j.spec.inputs});
  for (int64_t i = 0; i < j.data.inputs.numel(); ++i) j.data.inputs.data()[i] = x(rng);
  for (int i = 0; i < 6; ++i) j.data.targets.push_back(cls(rng));
  return j;
}

job gpt_job(const model_spec& spec) {
  job j{spec, {}};
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(j.spec.vocab) - 1);
  j.data.inputs = tensor({3, j.spec.context});
  for (int64_t i = 0; i < j.data.inputs.numel(); ++i) j.data.inputs.data()[i] = static_cast<float>(tok(rng));
  for (int64_t i = 0; i < j.data.inputs.numel(); ++i) j.data.targets.push_back(tok(rng));
  return j;
}

// Not the defaults: betas far from 1 make the bias corrections of steps 1 and 2 differ a lot.
optimizer_config adamw_config() {
  optimizer_config c;
  c.kind = optimizer_kind::adamw;
  c.lr = 1e-2f;
  c.beta1 = 0.8f;
  c.beta2 = 0.95f;
  c.eps = 1e-7f;
  c.weight_decay = 0.1f;
  return c;
}

optimizer_config sgd_config() {
  optimizer_config c;
  c.kind = optimizer_kind::sgd;
  c.lr = 0.05f;
  c.momentum = 0.9f;
  c.weight_decay = 0.01f;
  return c;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);  // round-trips a float
  return buf;
}

void add(std::vector<named_tensor>& out, std::string name, const shape_t& shape, const float* values) {
  out.push_back({std::move(name), shape, std::vector<float>(values, values + numel_of(shape))});
}

// One point (see the file comment) at the stack's current parameters.
void add_point(std::vector<named_tensor>& out, const std::string& prefix, layer_stack& stack, const job& j) {
  stack_context ctx;
  const tensor logits = stack.forward(j.data.inputs, ctx);
  stack.zero_grads();
  const step_stats s = compute_gradients(stack, j.data, 1.0f / static_cast<float>(loss_rows(j.data)));
  add(out, prefix + "logits", logits.shape(), logits.data());
  const float loss = static_cast<float>(s.mean_loss());
  add(out, prefix + "loss", {}, &loss);
  for (const named_param& p : named_params(j.spec)) {
    add(out, prefix + p.name, p.shape, stack.params().data() + p.offset);
    add(out, prefix + "grad." + p.name, p.shape, stack.grads().data() + p.offset);
  }
}

// Rank-2 tensors get N(0, 1/sqrt(columns)), so each row's dot products with unit-scale inputs
// are of unit scale; vectors (biases, layernorm gains) N(0, 0.5) around their value.
void perturb(layer_stack& stack, const model_spec& spec) {
  std::mt19937_64 rng(99);
  tensor values = stack.params().clone();
  for (const named_param& p : named_params(spec)) {
    const float spread = p.shape.size() == 2 ? 1.0f / std::sqrt(static_cast<float>(p.shape[1])) : 0.5f;
    std::normal_distribution<float> noise(0.0f, spread);
    for (int64_t i = 0; i < p.count; ++i) values.data()[p.offset + i] += noise(rng);
  }
  stack.load_params(values);
}

void add_bf16_linear(std::vector<named_tensor>& out) {
  constexpr int64_t rows = 24, in = 16, features = 12;
  layer_list one;
  one.push_back(std::make_unique<linear>(in, features));
  layer_stack stack(std::move(one), 0, init_seed);
  stack.set_matmul_precision(matmul_precision::bf16);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  tensor x({rows, in}), dy({rows, features});
  for (tensor* t : {&x, &dy})
    for (int64_t i = 0; i < t->numel(); ++i) t->data()[i] = unit(rng);
  layer& l = stack.at(0);
  saved_activations saved;
  const tensor y = l.forward(x, saved);
  stack.zero_grads();
  const tensor dx = l.backward_input(dy, saved);
  l.backward_weight(dy, saved);
  const float* p = stack.params().data();
  const float* g = stack.grads().data();
  add(out, "bf16.x", x.shape(), x.data());
  add(out, "bf16.weight", {features, in}, p);
  add(out, "bf16.bias", {features}, p + features * in);
  add(out, "bf16.dy", dy.shape(), dy.data());
  add(out, "bf16.y", y.shape(), y.data());
  add(out, "bf16.dx", dx.shape(), dx.data());
  add(out, "bf16.grad.weight", {features, in}, g);
  add(out, "bf16.grad.bias", {features}, g + features * in);
}

storage::safetensors_metadata metadata(const job& j) {
  const optimizer_config a = adamw_config(), g = sgd_config();
  storage::safetensors_metadata m = storage::model_metadata(j.spec);
  if (j.spec.experts > 0) {
    m["model.aux_loss_coefficient"] = num(j.spec.aux_loss_coefficient);
    m["model.capacity_factor"] = num(j.spec.capacity_factor);
  }
  m.insert({
          {"init_seed", std::to_string(init_seed)}, {"steps", std::to_string(optimizer_steps)},
          {"adamw.lr", num(a.lr)}, {"adamw.beta1", num(a.beta1)}, {"adamw.beta2", num(a.beta2)},
          {"adamw.eps", num(a.eps)}, {"adamw.weight_decay", num(a.weight_decay)},
          {"sgd.lr", num(g.lr)}, {"sgd.momentum", num(g.momentum)}, {"sgd.weight_decay", num(g.weight_decay)},
          {"loss", "mean cross-entropy over the rows (MLP samples, GPT tokens); grad.* is its gradient (grad_scale 1/rows)"},
          {"targets", "class ids (MLP, B) or next-token ids (GPT, B*T), as F32"},
          {"points", "'' init, 'perturbed.' init + noise, 'adamw.1.' 'adamw.2.' 'sgd.1.' 'sgd.2.' after train_steps from init"},
          {"bf16", "one linear at matmul precision bf16: x weight bias dy in, y dx grad.weight grad.bias out"}});
  return m;
}

void dump(const job& j, const std::string& path) {
  std::vector<named_tensor> out;
  add(out, "inputs", j.data.inputs.shape(), j.data.inputs.data());
  std::vector<float> targets(j.data.targets.begin(), j.data.targets.end());
  add(out, "targets", {static_cast<int64_t>(targets.size())}, targets.data());
  {
    layer_stack stack(build_layers(j.spec), 0, init_seed);
    add_point(out, "", stack, j);
    perturb(stack, j.spec);
    add_point(out, "perturbed.", stack, j);
  }
  for (const optimizer_config& cfg : {adamw_config(), sgd_config()}) {
    layer_stack stack(build_layers(j.spec), 0, init_seed);
    auto opt = make_optimizer(cfg, stack.num_params());
    for (int t = 1; t <= optimizer_steps; ++t) {
      train_step(stack, *opt, j.data);
      add_point(out, std::string(to_string(cfg.kind)) + "." + std::to_string(t) + ".", stack, j);
    }
  }
  add_bf16_linear(out);
  storage::write_safetensors(path, out, metadata(j));
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
  const std::string kind = argc == 3 ? argv[1] : "";
  if (kind != "mlp" && kind != "gpt" && kind != "moe") {
    std::fprintf(stderr, "usage: %s mlp|gpt|moe FILE.safetensors\n", argv[0]);
    return 2;
  }
  try {
    troupe::dump(kind == "mlp"   ? troupe::mlp_job()
                 : kind == "gpt" ? troupe::gpt_job(troupe::test::oracle_gpt())
                                 : troupe::gpt_job(troupe::test::oracle_moe_gpt()),
                 argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oracle_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
