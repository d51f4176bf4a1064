// export_safetensors: the global "params" array read whole (the checkpoint's layout is the
// unsplit model's), then cut at named_params' offsets.
#include "storage/checkpoint_export.hpp"

#include "kernels/param_names.hpp"
#include "storage/checkpoint.hpp"
#include "storage/output_file.hpp"

namespace troupe::storage {

safetensors_metadata model_metadata(const model_spec& s, const std::string& vocabulary) {
  safetensors_metadata meta{{"model", describe(s)}, {"model.kind", to_string(s.kind)}};
  if (s.kind == model_kind::mlp) {
    std::string hidden;
    for (int64_t h : s.hidden) hidden += (hidden.empty() ? "" : ",") + std::to_string(h);
    meta.insert({{"model.inputs", std::to_string(s.inputs)},
                 {"model.hidden", hidden},
                 {"model.classes", std::to_string(s.classes)}});
    return meta;
  }
  meta.insert({{"model.vocab", std::to_string(s.vocab)},
               {"model.context", std::to_string(s.context)},
               {"model.channels", std::to_string(s.channels)},
               {"model.heads", std::to_string(s.heads)},
               {"model.blocks", std::to_string(s.blocks)}});
  if (s.experts > 0)
    meta.insert({{"model.experts", std::to_string(s.experts)},
                 {"model.top_k", std::to_string(s.top_k)},
                 {"model.moe_every", std::to_string(s.moe_every)}});
  if (!vocabulary.empty()) meta["model.vocabulary"] = vocabulary;
  return meta;
}

export_report export_safetensors(const std::string& checkpoint, const std::string& out, bool optimizer_state) {
  export_report r;
  check_output_path(out, "export");  // before a whole model is read
  r.checkpoint = resolve_checkpoint(checkpoint);
  const checkpoint_manifest m = read_manifest(r.checkpoint);
  r.step = m.step;
  const std::vector<named_param> names = named_params(m.model);
  std::vector<named_tensor> tensors;
  const size_t arrays = optimizer_state ? m.arrays.size() : 1;
  for (size_t a = 0; a < arrays; ++a) {
    std::vector<float> values(static_cast<size_t>(m.global_floats));
    read_values(r.checkpoint, m, m.arrays[a], {{0, 0, m.global_floats}}, values.data());
    for (const named_param& p : names) {
      named_tensor t;
      t.name = a == 0 ? p.name : p.name + "." + m.arrays[a];
      t.shape = p.shape;
      t.values.assign(values.begin() + p.offset, values.begin() + p.offset + p.count);
      r.floats += p.count;
      tensors.push_back(std::move(t));
    }
  }
  safetensors_metadata meta = model_metadata(m.model, m.vocabulary);
  meta["format"] = "pt";
  meta["troupe.step"] = std::to_string(m.step);
  meta["troupe.optimizer"] = m.optimizer + " (" + m.optimizer_config + "), " + std::to_string(m.optimizer_steps) + " steps";
  meta["troupe.mesh"] = m.mesh + ", zero " + std::to_string(m.zero);
  write_safetensors(out, tensors, meta);
  r.tensors = static_cast<int64_t>(tensors.size());
  return r;
}

}  // namespace troupe::storage
