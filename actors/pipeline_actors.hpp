// Spawn function of the pipeline_stage actor and what it is given. Included only by
// actors/pipeline_*.cpp (it pulls in CAF). The driver side lives in pipeline_job.cpp; the data
// loader and optimizer shards are the ones of actors.hpp, unchanged.
#pragma once

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "kernels/model.hpp"
#include "kernels/partition.hpp"
#include "schedules/schedule.hpp"

namespace troupe {

// Sent once by the driver after spawning: every stage's handle, indexed by stage.
using peers_atom = caf::atom_constant<caf::atom("pp_peers")>;

struct pipeline_stage_args {
  int stage = 0;
  sched::schedule plan;                  // complete and validated
  model_spec model;
  std::vector<layer_range> model_chunks;  // model chunk k -> its layers (all chunks, P * v)
  uint64_t seed = 42;
  int64_t global_rows = 0;   // loss rows of the global batch: grad_scale = 1 / global_rows
  int64_t batch_size = 0;    // global batch in samples, split into the plan's M microbatches
  int64_t total_steps = 0;   // bounds the batch prefetch
  int pin_cpu = -1;          // pin the stage's thread to this core (-1: leave it)
  std::string drop_send;     // fault injection: the text of a send that is lost
  caf::actor loader, optimizer;
  caf::actor_addr driver;  // weak: the driver holds the stages, not the other way round
};

// A thin interpreter of its stage's action list: it executes the action at its cursor as soon
// as that action's inputs have arrived. Detached: compute runs on the actor's own thread.
caf::actor spawn_pipeline_stage(caf::actor_system& sys, pipeline_stage_args args);

}  // namespace troupe
