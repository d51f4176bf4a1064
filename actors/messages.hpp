// Every message that actors of troupe exchange, with its CAF `inspect` and its registration, in
// one place. Tensors travel by reference inside one process (their storage is frozen when a
// message is built) and are serialized only when a message leaves the process.
// Include this only from actors/*.cpp: it pulls in CAF headers, which are slow to compile.
#pragma once

#include <caf/all.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <cstring>
#include <utility>

#include "kernels/batch.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// ---- tensors and batches on the wire ----

// Float data crosses as raw little-endian bytes (every supported host is little-endian): CAF
// copies byte sequences in one block, element-wise float vectors one value at a time.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& x) {
  if constexpr (Inspector::reads_state) {
    shape_t shape = x.shape();
    std::vector<char> bytes(static_cast<size_t>(x.numel()) * sizeof(float));
    if (!bytes.empty()) std::memcpy(bytes.data(), std::as_const(x).data(), bytes.size());
    return f(caf::meta::type_name("tensor"), shape, bytes);
  } else {
    shape_t shape;
    std::vector<char> bytes;
    return f(caf::meta::type_name("tensor"), shape, bytes, caf::meta::load_callback([&]() -> caf::error {
               if (shape.empty() && bytes.empty()) {  // the empty (default) tensor
                 x = tensor();
                 return caf::none;
               }
               int64_t n = 1;
               for (int64_t d : shape) {
                 if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d))
                   return caf::make_error(caf::sec::invalid_argument, "tensor: bad shape on the wire");
                 n *= d;
               }
               if (static_cast<uint64_t>(n) * sizeof(float) != bytes.size())
                 return caf::make_error(caf::sec::invalid_argument, "tensor: shape does not match its bytes");
               std::vector<float> values(static_cast<size_t>(n));
               if (n > 0) std::memcpy(values.data(), bytes.data(), bytes.size());
               x = tensor(shape, std::move(values));
               x.freeze();
               return caf::none;
             }));
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch& x) {
  return f(caf::meta::type_name("batch"), x.inputs, x.targets);
}

// ---- data_loader <-> stage ----

// stage -> data_loader: send me the training batch of `step` (this rank's share of it).
struct batch_request {
  int64_t step = 0;
};
// data_loader -> stage. inputs (B, features) or (B, T); targets (B) or (B*T).
struct batch_msg {
  int64_t step = 0;
  batch data;
};
// stage -> data_loader: send me evaluation batch `index` of the held-out set.
struct eval_batch_request {
  int64_t epoch = 0;
  int64_t index = 0;
};
// data_loader -> stage. `total` is the number of evaluation batches in the held-out set.
struct eval_batch_msg {
  int64_t epoch = 0;
  int64_t index = 0;
  int64_t total = 0;
  batch data;
};

// ---- coordinator <-> stage ----

// coordinator -> stage: compute step `step` (the stage already prefetched its batch).
struct step_order {
  int64_t step = 0;
};
// stage -> coordinator: step `step` finished, parameters updated. Loss is summed over `count`
// rows; seconds are the stage's own compute time for the step.
struct step_report {
  int64_t step = 0;
  double loss_sum = 0.0;
  int64_t count = 0;
  int64_t correct = 0;
  double compute_seconds = 0.0;
};
// coordinator -> stage: evaluate on the held-out set after epoch `epoch`.
struct eval_order {
  int64_t epoch = 0;
};
// stage -> coordinator
struct eval_report {
  int64_t epoch = 0;
  double loss_sum = 0.0;
  int64_t count = 0;
  int64_t correct = 0;
  int64_t samples = 0;
};

// ---- stage <-> optimizer_shard ----

// stage -> optimizer_shard: gradients of the flat range [offset, offset + grads.numel()).
struct gradients_msg {
  int64_t step = 0;
  int64_t offset = 0;
  tensor grads;
};
// optimizer_shard -> stage: updated parameters of the flat range after `step`
// (step = -1: the initial values, sent so every stage starts from the shard's master copy).
struct params_msg {
  int64_t step = 0;
  int64_t offset = 0;
  tensor params;
};
// stage -> coordinator (at the end): the stage's final parameters, for checks and checkpoints.
struct params_request {
  int64_t stage = 0;
};

#define TROUPE_INSPECT(type, ...)                                       \
  template <class Inspector>                                            \
  typename Inspector::result_type inspect(Inspector& f, type& x) {      \
    return f(caf::meta::type_name(#type), __VA_ARGS__);                 \
  }
TROUPE_INSPECT(batch_request, x.step)
TROUPE_INSPECT(batch_msg, x.step, x.data)
TROUPE_INSPECT(eval_batch_request, x.epoch, x.index)
TROUPE_INSPECT(eval_batch_msg, x.epoch, x.index, x.total, x.data)
TROUPE_INSPECT(step_order, x.step)
TROUPE_INSPECT(step_report, x.step, x.loss_sum, x.count, x.correct, x.compute_seconds)
TROUPE_INSPECT(eval_order, x.epoch)
TROUPE_INSPECT(eval_report, x.epoch, x.loss_sum, x.count, x.correct, x.samples)
TROUPE_INSPECT(gradients_msg, x.step, x.offset, x.grads)
TROUPE_INSPECT(params_msg, x.step, x.offset, x.params)
TROUPE_INSPECT(params_request, x.stage)
#undef TROUPE_INSPECT

// Registers every message type above with an actor system configuration.
void add_message_types(caf::actor_system_config& cfg);

}  // namespace troupe
