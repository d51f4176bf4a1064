// What a training job is asked to do and what it reports back. Plain structs, no CAF: the CLI,
// the examples and the tests build a train_config and call run_training (training_job.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/config/membership.hpp"
#include "kernels/device_memory.hpp"
#include "kernels/layers_moe_block.hpp"
#include "kernels/matmul_precision.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/pipeline_chunk.hpp"
#include "kernels/tensor.hpp"
#include "comm/collective_backend.hpp"
#include "schedules/dispatch.hpp"
#include "schedules/mesh.hpp"
#include "schedules/schedule.hpp"
#include "schedules/timeline.hpp"

namespace troupe {

namespace storage {
class dataset;
}

// An injected delay for stress tests: the ranks of data-parallel replica `rank` (its first
// pipeline stage) sleep before each step's forward, by a distribution of mean `ms` (seeded per
// rank and step, so a run repeats its delays):
//   fixed        ms every step
//   uniform      uniform in [0, 2 ms)  ("random" is the same)
//   exponential  exponential, mean ms
//   pareto       Pareto of shape `param` (> 1; 1.5 if not given): heavy-tailed, mean ms
//   burst        period x ms on every `param`-th step (period 10 if not given), none between
enum class delay_kind { fixed, uniform, exponential, pareto, burst };
const char* to_string(delay_kind k);
struct straggler_spec {
  int rank = 0;
  double ms = 0;
  delay_kind kind = delay_kind::fixed;
  double param = 0;  // pareto: the shape; burst: the period in steps (0: the default)
};
// Parses "rank:ms", "rank:ms:kind" or "rank:ms:kind:param"; throws std::invalid_argument naming
// the text and what it expected.
straggler_spec parse_straggler(const std::string& text);
// The delay of `step` in milliseconds (the same for the same seed, rank and step).
double straggler_delay_ms(const straggler_spec& s, uint64_t seed, int64_t step);

// Jitter (fault injection): every compute action (F, B, I, W) of mesh rank `rank` takes a random
// extra time, uniform in [0, max_ms), drawn from the job's seed, the rank, the step and the
// action's place in the row, so a run repeats. Per-action variability is what ready dispatch is for.
struct jitter_spec {
  int rank = 0;
  double max_ms = 0;
};
// Parses "rank:max_ms"; throws std::invalid_argument naming the text.
jitter_spec parse_jitter(const std::string& text);
double jitter_delay_ms(const jitter_spec& j, uint64_t seed, int64_t step, size_t action);

// A slow link (fault injection): mesh rank `rank`'s ring sends to other processes (its data- and
// tensor-parallel groups) capped at mb_per_s megabytes per second (0: no cap), each collective's
// first byte held back latency_ms; in one process, its in-process data-parallel ring's sends
// (what troupe stress runs). Pipeline activations are not shaped.
struct slow_link_spec {
  int rank = 0;
  double mb_per_s = 0;
  double latency_ms = 0;
};
// Parses "rank:mb_per_s" or "rank:mb_per_s:latency_ms"; throws std::invalid_argument naming the
// text and what it expected.
slow_link_spec parse_slow_link(const std::string& text);

// A process fault (fault injection) for a job of several processes on this machine (--nodes N,
// whose launcher knows the pids): process `process` (1..N-1, or a --servers process after them) is sent SIGSTOP `at_s` seconds
// after training started (every process joined) and SIGCONT `for_s` seconds later (pause; for_s 0: it stays
// stopped, as a hung machine would), or SIGKILL at `at_s` (kill). Process 0 is the launcher.
enum class process_fault_kind { pause, kill };
struct process_fault {
  process_fault_kind kind = process_fault_kind::pause;
  int process = 1;
  double at_s = 0, for_s = 0;
};
// "P:AT[:FOR]" for a pause, "P:AT" for a kill; throws std::invalid_argument naming the text and
// what it expected.
process_fault parse_process_fault(process_fault_kind kind, const std::string& text);

// How this process takes part in a job whose mesh spans several processes (actors/run/process_job.cpp);
// the number of processes is the mesh's (train_config::mesh.processes).
struct process_config {
  int index = 0;  // the launcher's RANK: a mesh process (< mesh.processes), else a server process
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;         // rank 0's control gate (0: any free port, rank 0 only)
  std::string secret;                   // --secret-file or TROUPE_SECRET; required when world > 1
  std::string secret_file;              // [process] secret_file: where the CLI reads `secret` from
  // The job's id, which every process presents beside the secret when it joins: a process of
  // another job given this job's address with the same secret is refused by it. --job-id, else
  // TROUPE_JOB_ID, else torchrun's TORCHELASTIC_RUN_ID; --nodes makes one when none is given.
  std::string job_id;
  double peer_timeout_seconds = 30;     // a peer silent this long is lost; the job stops
  double join_timeout_seconds = 120;    // every rank must have joined by then
  std::string tls_cert, tls_key, tls_ca;  // PEM files: control plane over mutual TLS (tls_channel)
  // Rank 0: called with the gate's port once it listens (tests and --nodes start workers then).
  std::function<void(uint16_t)> on_listening;
  // Rank 0 of a --nodes job, before a restart (max_restarts): the CLI stops what is left of the
  // workers, and starts the next ones (at the next on_listening) resuming from `resume`.
  std::function<void(const std::string& resume)> on_restart;
  // Rank 0: called once every process has joined, as training starts (--nodes times its process
  // faults from here). On the job hub's thread: it must return at once.
  std::function<void()> on_training_start;
  // Rank 0 of a --nodes job: a worker process that exited abnormally, named ("" while none has);
  // the job hub polls it until every process has joined. On its thread: it must return at once.
  std::function<std::string()> exited_process;
  // Rank 0: the processes it started itself (--nodes, a Kubeflow node's others), by index. They
  // are watched (exited_process), so the job waits up to join_timeout_seconds for them to join;
  // any other process gets the peer timeout since the last one joined.
  std::vector<int> started_here;
};

enum class offload_target { none, host, nvme };
const char* to_string(offload_target t);  // "none", "host", "nvme"
// What ZeRO-Offload moves (DeepSpeed's offload_optimizer / offload_param).
enum class offload_what { none, optimizer, params, both };
const char* to_string(offload_what w);  // "none", "optimizer", "params", "both"

// Parameter servers (actors/server/param_server.cpp) instead of collectives: each pipeline stage's
// tp share of the parameters lives on one server with its optimizer, every data-parallel replica
// pushes its gradients there and takes the parameters it sends back. bsp: the server waits for
// every replica's push of a step and applies their sum (sync DP, with the sum at the server);
// ssp: it applies each push at once, and holds back a replica's parameters while that replica
// would run more than `staleness` steps ahead of the slowest (Ho et al. 2013); asp: it never
// holds back (Hogwild-style). Under ssp and asp each push is applied as a step of its own,
// scaled to its replica's share of the batch (x dp), and the batches are dispensed on demand
// (batch_dispenser.cpp): a replica takes the next share when it is done, an epoch ends when its
// shares are all taken, and ssp's clock is the round (dp shares, one global batch). Over several
// processes every server lives in process 0, or with server_processes in processes of their own,
// and the other processes' stages push to it through the middleman.
enum class consistency_model { none, bsp, ssp, asp };
const char* to_string(consistency_model c);  // "none", "bsp", "ssp", "asp"
std::optional<consistency_model> parse_consistency(const std::string& text);  // to_string's text

struct train_config {
  model_spec model;           // kind "mlp" trains on Fashion-MNIST, "gpt" on the text corpus
  optimizer_config optim;
  int64_t epochs = 5;
  int64_t batch_size = 128;   // global batch, in samples (sequences for the GPT)
  uint64_t seed = 42;
  int threads = 1;            // BLAS threads of the compute device
  std::string out_dir = "runs/latest";
  std::string metrics_prom;  // --metrics-prom: the Prometheus text file rewritten each step (empty: none)
  // Live straggler and slow-link detection (actors/observe/slow_rank.hpp, slow_link.hpp): the steps
  // it looks at (0: off; 10 after the 10 of warm-up names a straggler by the 20th step), and by
  // what fraction of the step time a rank must trail its data-parallel group to be named.
  int slow_rank_window = 10;
  double slow_rank_threshold = 0.1;
  std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
  std::string corpus_path = "/usr/share/games/fortunes";
  // Datasets already in memory (a program embedding troupe, the tests), used instead of the files
  // above when train_data is set; eval_data empty: the held-out set is train_data. The model must
  // fit them as it must fit the files (a GPT's vocab set, since no corpus tells it).
  std::shared_ptr<const storage::dataset> train_data, eval_data;
  int64_t max_steps = 0;      // stop after this many steps (0: run every epoch)
  int64_t eval_batch_size = 1000;  // the unit of eval_max_batches (see plan_evaluation)
  int64_t eval_max_batches = 0;  // 0: the whole held-out set
  bool progress = true;       // progress bar on stderr
  // Activation recomputation in every stage (kernels/pipeline_chunk.hpp): the same numbers,
  // fewer bytes held between forward and backward.
  recompute_mode recompute = recompute_mode::none;
  // How attention meets the context group's keys and values (--cp-mode, [mesh] cp_mode).
  context::cp_mode cp_mode = context::cp_mode::all_gather;
  // The operands of every linear layer's products (kernels/matmul_precision.hpp): f32, or bf16
  // (rounded operands, fp32 sums; masters, gradients and optimizer state stay fp32).
  matmul_precision matmul = matmul_precision::f32;
  // Sequence parallelism with tp > 1 (GPT): layernorms, residuals and stage-to-stage activations
  // on each tp rank's share of a microbatch's sequences (kernels/layers_parallel.hpp, sp::).
  bool sequence_parallel = false;
  // Where the ranks are: dp x pp (x tp) ranks over mesh.processes processes (schedules/mesh.hpp).
  // dp: data-parallel replicas, each on 1/dp of every batch; pp: pipeline stages P per replica.
  sched::mesh mesh;
  // Pipeline parallelism: the schedule every replica runs (mesh.pp stages; 1: the one-stage `F B R O`).
  std::string schedule = "1f1b";    // gpipe, 1f1b, interleaved, zb-h1
  // How a stage runs its row: as written, or ready-first (schedules/dispatch.hpp): the same bits.
  sched::dispatch_policy dispatch = sched::dispatch_policy::fixed;
  int ready_stash = 0;  // ready dispatch: activations a stage may stash beyond the fixed order's peak
  int micro_batches = 1;            // M: microbatches per global batch
  int virtual_stages = 2;           // v: chunks per device, for the interleaved schedule only
  std::vector<int64_t> cuts;        // first layers of model chunks 1..; empty: balanced by params
  // A schedule of the user's own (a builder's output, completed by the passes) run instead of the
  // named one: its stage count must be mesh.pp. Empty (no stages): the named schedule.
  sched::schedule user_schedule;
  std::string drop_send;            // fault injection for tests: a send ("0SA3>1") that is lost
  bool pin_threads = false;         // pin stage d's thread to core d % cores
  // --device: rank r computes on devices[r % size] (a GPU: kernels/cuda, its own stream); empty
  // or cpu: on the host, on the stage's own thread.
  std::vector<device> devices;
  double watchdog_seconds = 60;     // a step without progress this long is reported and stopped (any job)
  // Data parallelism (the gradient reducers in actors/stage/gradient_reducers.cpp).
  double bucket_mb = 25.0;          // gradient bucket cap in MiB (PyTorch DDP's default)
  // ZeRO (Rajbhandari et al. 2020) over each data-parallel group: 1 partitions the optimizer
  // state (each rank updates 1/dp of the parameters and all-gathers the rest), 2 the gradients
  // too (buckets are reduce-scattered, a rank keeps its part), 3 the parameters as well (each
  // unit all-gathered just before its layers run, dropped after). Its buckets are the units.
  int zero = 0;
  int prefetch = 1;  // ZeRO-3: parameter units gathered ahead of the one in use
  // Each rank's device memory cap in bytes (0: none). The ledger counts every kind anyway.
  int64_t device_memory = 0;
  // ZeRO-Offload (host) and ZeRO-Infinity (nvme) of the optimizer (needs zero >= 1) and, with
  // zero 3, of the parameters (params or both): where each rank's optimizer shard keeps its master
  // copy and state, and runs its step, and where its parameter segments wait between the units'
  // gathers (nvme: a segment_file its param_fetcher reads ahead of use). host: in host
  // memory, off the device's ledger; nvme: in a file under offload_dir through an io_uring
  // store (storage/uring_store.hpp), read, updated and written back a tile at a time, reading
  // tile i+1 and writing tile i-1 while tile i is updated (offload_pipeline).
  offload_what offload = offload_what::none;
  offload_target offload_to = offload_target::host;
  std::string offload_dir;                     // nvme: where each rank's shard file goes
  int64_t aio_block_size = int64_t{1} << 20;   // bytes per I/O (DeepSpeed's aio default)
  int aio_queue_depth = 8;                     // I/Os in flight (DeepSpeed's default)
  bool offload_pipeline = true;                // overlap a tile's I/O with its neighbour's update
  // Checkpoints (storage/checkpoint.hpp): with a checkpoint_dir, every rank's optimizer shard
  // writes its part after every checkpoint_every steps (0: after the last step only) and after
  // the last step; the coordinator commits the manifest, and keep > 0 leaves the newest `keep`.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep = 0;
  // Continue from a checkpoint: a checkpoint root (its latest), a step directory, or "latest"
  // (checkpoint_dir's). Any mesh, ZeRO stage and offload loads it; the model and optimizer kind
  // must be the checkpoint's.
  std::string resume;  // also "auto": checkpoint_dir's latest when it has one, else a fresh start
  // A job that fails (a lost process, a dead actor) is torn down and started again from
  // checkpoint_dir's latest checkpoint, at most max_restarts times: in this process for a job
  // held in one process or started with --nodes; under a launcher, the launcher restarts the
  // processes (torchrun --max-restarts) and `resume auto` has them continue.
  int max_restarts = 0;
  // Elastic training (membership.hpp): the job changes its data-parallel membership at a step
  // boundary and goes on from the live replicas' state, in memory, with the global batch kept
  // (each replica's share grows or shrinks). membership_events drive it; at least min_replicas
  // replicas stay.
  bool elastic = false;
  int min_replicas = 1;
  std::vector<membership_event> membership_events;
  consistency_model consistency = consistency_model::none;  // none: collectives, no servers
  int staleness = 0;                                       // ssp: rounds a batch may lead the rounds complete
  // Servers per (stage, tp) slot: its parameters cut into this many key ranges, one server each,
  // so no server holds a whole stage; a proxy splits each push and joins the answers.
  int server_shards = 1;
  // Processes that hold only parameter servers (--servers K): process indices mesh.processes ..
  // mesh.processes + K - 1, every (slot, shard) server dealt round-robin over them, so no mesh
  // process holds one. 0: the servers live in the mesh's process 0 (or its only process).
  int server_processes = 0;
  // Fault injection: parameter server `kill_server` (its records' number) dies once it applied
  // `kill_server_after` updates (-1: none), as a crashed server would.
  int kill_server = -1;
  int64_t kill_server_after = 0;
  // Fault injection: data-parallel replica `kill_replica`'s ranks are killed as step
  // `kill_replica_step` begins (-1: none), as a machine lost between two steps would be.
  int kill_replica = -1;
  int64_t kill_replica_step = 0;
  // Fault injection over processes: process `kill_in_regroup` (its index when the job started)
  // kills itself as it leaves a membership for the next (-1: none), a failure during a regroup.
  int kill_in_regroup = -1;
  std::vector<straggler_spec> stragglers;
  std::vector<jitter_spec> jitter;  // by mesh rank
  std::vector<slow_link_spec> slow_links;  // by mesh rank; needs the rank's groups to span processes
  std::vector<process_fault> process_faults;  // --pause-process / --kill-process: done by --nodes' launcher
  int64_t trace_step = -1;          // step written to trace.json (-1: the last one)
  process_config process;           // mesh.processes > 1: this process's part
  // What reduces gradients between processes: the project's TCP ring, or MPI (for jobs started by
  // mpirun; each data-parallel group then holds at most one rank per process).
  net::backend_kind backend = net::backend_kind::tcp;
};

// Throws std::invalid_argument naming the bad field.
void validate(const train_config& cfg);
// The device --device gives rank r: devices[r % size], the CPU when there are none.
device device_of_rank(const std::vector<device>& devices, int rank);
inline device device_of_rank(const train_config& cfg, int rank) { return device_of_rank(cfg.devices, rank); }

// Where the job's optimizer shards keep their state: none (on the device), host or nvme.
offload_target optimizer_offload(const train_config& cfg);
// Where ZeRO-3's ranks keep their parameter segments between uses: none (on the device), host or
// nvme. In fp32 training the segments are the optimizer's master copy, so it moves with them; the
// optimizer's state stays where optimizer_offload says.
offload_target params_offload(const train_config& cfg);
// Whether a job's settings let its data-parallel groups reduce on their devices: plain data
// parallelism, and ZeRO 1 and 2 without offload (their shards then live on the devices too). An
// offloaded shard and ZeRO-3's gathered units live on the host, so their buckets meet there.
bool device_groups_allowed(const train_config& cfg);
// Whether rank `from`'s pipeline tensors reach rank `to` over a link between their GPUs (NCCL
// send and receive), announced on the host transport: --backend nccl, both on GPUs, in different
// processes. Otherwise a GPU's tensor for another process crosses as a pinned host copy. The
// one rule the stages and the job's links both follow.
bool pipeline_on_device_link(const train_config& cfg, int from, int to);

// Held-out evaluation: which samples, and how many go through one forward pass. The samples are
// the first eval_max_batches x eval_batch_size of the held-out set (all of it when
// eval_max_batches is 0). A forward pass holds every layer's activations, so its piece holds no
// more rows than a training step does (batch_size x rows_per_sample), or 1000 rows when that is
// more, and never more than eval_batch_size samples. Why: a fixed 1000 sequences of a GPT took
// 2.5 GB while its training took 0.4 GB. The 1000-row floor keeps an MLP's pieces at 1000
// samples. Pieces change the memory, not the result: the loss is a mean over the same samples.
struct eval_plan {
  int64_t samples = 0;  // held-out samples evaluated
  int64_t piece = 1;    // samples per forward pass (one eval_batch_msg)
  int64_t pieces() const { return (samples + piece - 1) / piece; }
};
eval_plan plan_evaluation(const train_config& cfg, int64_t held_out, int64_t rows_per_sample);

struct resume_point;  // checkpointing.hpp

struct train_summary {
  std::vector<double> losses;          // mean training loss of each step (from first_step on)
  int64_t first_step = 0;              // the step the run began at (a resumed run: the checkpoint's)
  std::vector<std::string> checkpoints;  // committed during the run, in order
  int restarts = 0;                      // times the job was started again after a failure
  // An elastic job: each membership change it made (membership.hpp), in order, and, while a
  // change is being made, the state it goes on from (the image the live shards handed in).
  std::vector<membership_event> membership;
  std::shared_ptr<const resume_point> regroup;
  // When the change began (steady-clock seconds; 0: none under way): the next membership adds
  // the time to train_seconds, so step_ends show what the change cost.
  double regroup_began = 0;
  // Parameter servers: every push each server applied, in the order it applied them.
  struct server_update {
    int32_t server = 0;      // its (pipeline stage, tp rank) slot
    int32_t replica = 0;     // the pushing replica
    // The round the gradients are of: the step under bsp; under ssp and asp, whose batches are
    // dispensed, the batch's unit / dp (a round is dp batches, one global batch's worth).
    int64_t step = 0;
    int64_t unit = -1;       // ssp and asp: the dispensed batch (-1: bsp's fixed share of `step`)
    int64_t version_read = 0;   // server updates applied when the replica got the parameters it used
    int64_t version_applied = 0;  // ... when this push was applied (the staleness in updates is the difference)
    // Rounds whose every push was applied when this replica read its parameters (with fixed
    // shares: the slowest replica's clock). SSP's bound: step - slowest <= s.
    int64_t slowest = 0;
    // Its next parameters were held back by the staleness bound (ssp: it would have led by more
    // than s). The wait at a run's end for the run's last pushes is not counted: every mode has it.
    bool held = false;
  };
  std::vector<server_update> server_updates;
  // ssp and asp: every batch the dispenser handed out, in the order it did. unit u of a job is
  // share u % dp of global batch (u / dp) % steps_per_epoch of epoch u / (dp x steps_per_epoch).
  struct dispensed_batch {
    int32_t replica = 0;
    int64_t step = 0;  // the replica's own step it computes the batch in
    int64_t unit = 0;
  };
  std::vector<dispensed_batch> dispensed;
  std::vector<double> test_accuracy;   // after each epoch (token accuracy for the GPT)
  std::vector<double> test_loss;
  // Live straggler detection: the rank first named as the one its data-parallel group waits for,
  // and the step after which it was (-1: none was).
  int slow_rank = -1;
  int64_t slow_rank_step = -1;
  // Likewise the first slow link named (slow_link.hpp): from rank, to rank, and the step (-1: none).
  int slow_link_from = -1, slow_link_to = -1;
  int64_t slow_link_step = -1;
  std::vector<int64_t> test_steps;     // the steps done when each test_loss was taken, as metrics.jsonl logs it
  // A mixture of experts: each step's routing over the global batch (metrics_log.hpp), in step order.
  std::vector<expert_tally> experts;
  int64_t steps = 0;
  int64_t samples = 0;
  double train_seconds = 0.0;         // wall time of the training steps, evaluation excluded
  std::vector<double> step_ends;      // train_seconds when each step (losses[i]) was done
  std::vector<double> step_samples_per_s;  // the rate logged with each step (losses[i]), over a window of recent steps
  double compute_seconds = 0.0;       // of which the stage computed (the rest: runtime and waiting)
  double samples_per_s = 0.0;
  tensor final_params;                 // the flat parameters after the last step
  std::string metrics_path;
  std::string curves_path;  // <out>/curves.svg: the losses and samples/s of metrics.jsonl, drawn
  // The traced step's Chrome trace (every rank: its actions, and its all-reduces beside them) and
  // the measured timeline of the first replica's median recent step (SVG); the share of
  // all-reduce time hidden behind backward in the traced step; the gradient buckets per rank of
  // pipeline stage 0; each rank's wall time per step (step start to updated parameters), by
  // mesh rank; each rank's most live activations at once, over all steps.
  std::string trace_path, timeline_path;
  double overlap_share = 0.0;
  int buckets = 0;
  std::vector<std::vector<double>> rank_step_seconds;
  std::vector<int> peak_live_activations;
  // Tensor parallelism: each rank's seconds inside its tp collectives over all steps, and its
  // compute seconds (F, B, W, O) they are part of; by mesh rank.
  std::vector<double> rank_tp_seconds, rank_compute_seconds;
  std::vector<int64_t> peak_activation_bytes;  // by mesh rank, over all steps
  // Each rank's device ledger (kernels/device_memory.hpp): the most each kind held at once, and
  // the most all kinds held together, over the whole run; by mesh rank.
  std::vector<memory_figures> peak_memory;
  std::vector<int64_t> peak_memory_total;
  std::vector<memory_figures> peak_host_memory;  // host memory an offloaded optimizer shard held, by rank
  sched::timeline measured;            // the traced step, every rank (lanes as in trace_path)
  std::vector<sched::timeline> recent; // the first replica's last (up to 32) steps, one lane per stage
};

}  // namespace troupe
