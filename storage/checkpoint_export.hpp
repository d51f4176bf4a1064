// A checkpoint for the rest of the ecosystem: its full (unsplit) parameters as one safetensors
// file, under the names a PyTorch module of the same model uses (kernels/param_names.hpp), with
// the model spec in the metadata so a reader can build that module.
#pragma once

#include <string>

#include "kernels/model.hpp"
#include "storage/safetensors.hpp"

namespace troupe::storage {

// The model spec as metadata: "model" (its description), "model.kind", and the kind's own fields:
// for the MLP "model.inputs", "model.hidden" (comma separated), "model.classes"; for the GPT
// "model.vocab", "model.context", "model.channels", "model.heads", "model.blocks", and, when
// known, "model.vocabulary": its characters in token order (character i is token i's).
safetensors_metadata model_metadata(const model_spec& spec, const std::string& vocabulary = "");

struct export_report {
  std::string checkpoint;  // the step directory exported
  int64_t step = 0;
  int64_t tensors = 0, floats = 0;
};

// Writes the checkpoint at `checkpoint` (resolve_checkpoint's forms) to `out`; with
// optimizer_state, also each state array per parameter ("<name>.exp_avg", ...). Throws
// std::runtime_error naming the checkpoint's file for every refusal read_manifest and
// read_values make; the output is written whole or not at all (write_safetensors).
export_report export_safetensors(const std::string& checkpoint, const std::string& out, bool optimizer_state = false);

}  // namespace troupe::storage
