// evaluation_gather: at an epoch's end the first replica's parameters are gathered, chunk by
// chunk (ZeRO-3: every replica's segments; tensor parallelism: the tp shares merged; expert
// parallelism: the first expert group's experts), and handed to the evaluator, whose report
// orders the next run of steps.
#include <algorithm>
#include <memory>
#include <utility>

#include "actors/coordinator/coordinator_state.hpp"
#include "kernels/tp_shards.hpp"

namespace troupe::coordinator_detail {

// The first replica's parameters, model chunk by model chunk, as one flat tensor in layer order;
// under tensor parallelism each chunk's tp shares merged into the unsplit chunk.
namespace {

template <class Done>
void gather_params(self_ptr self, Done done) {
  auto& s = self->state;
  const sched::mesh& mesh = s.args.mesh;
  const int P = mesh.pp, T = mesh.tp, EP = mesh.ep;
  const auto K = static_cast<size_t>(sched::num_model_chunks(s.args.plan));
  // Per chunk, a part per (expert place, tp rank): index e * T + t.
  auto parts = std::make_shared<std::vector<std::vector<tensor>>>(K, std::vector<tensor>(static_cast<size_t>(EP * T)));
  // ZeRO-3: no replica holds all of a chunk; each gives its runs and they are put together.
  // Expert parallelism: the first ep replicas hold every expert between them.
  const int D = s.args.sharded_params ? mesh.replicas() : EP;
  auto left = std::make_shared<int>(P * T * D);
  for (int d = 0; d < D; ++d)
  for (int p = 0; p < P; ++p)
    for (int t = 0; t < T; ++t) {
      const int rank = mesh.rank_of({d / mesh.cp, p, t, d % mesh.cp});
      const int part = (s.args.sharded_params ? 0 : d) * T + t;
      self->request(s.stages.at(static_cast<size_t>(rank)), caf::infinite, pipeline_params_request{p})
          .then(
              [self, parts, left, done, part](pipeline_params_msg& m) {
                for (size_t i = 0; i < m.params.size(); ++i) {
                  tensor& slot = parts->at(static_cast<size_t>(m.model_chunks[i])).at(static_cast<size_t>(part));
                  if (m.owned.empty()) {
                    slot = std::move(m.params[i]);
                    continue;
                  }
                  if (slot.empty()) slot = tensor({m.params[i].numel()});
                  const auto& runs = m.owned.at(i);
                  for (size_t r = 0; r + 1 < runs.size(); r += 2)
                    std::copy(std::as_const(m.params[i]).data() + runs[r],
                              std::as_const(m.params[i]).data() + runs[r] + runs[r + 1], slot.data() + runs[r]);
                }
                if (--*left > 0) return;
                auto& s = self->state;
                std::vector<float> flat;
                for (size_t k = 0; k < parts->size(); ++k) {
                  const std::vector<float> chunk =
                      merge_tp_shards(s.args.model, s.args.chunks.at(k), parts->at(k), s.args.mesh.ep);
                  flat.insert(flat.end(), chunk.begin(), chunk.end());
                }
                tensor out({static_cast<int64_t>(flat.size())}, flat);
                out.freeze();
                done(std::move(out));
              },
            [self](caf::error& e) {
              fail(self, "parameters not delivered for evaluation: " + self->system().render(e), true);
              finish(self);
            });
    }
}

}  // namespace

void evaluate(self_ptr self, int64_t epoch) {
  gather_params(self, [self, epoch](tensor flat) {
    auto& s = self->state;
    s.args.summary->final_params = flat;
    self->send(s.evaluator, params_msg{-1, 0, std::move(flat)});
    self->send(s.evaluator, eval_order{epoch});
  });
}

}  // namespace troupe::coordinator_detail
