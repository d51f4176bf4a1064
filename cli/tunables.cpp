// The table of tunables (tunables.hpp) and the one range check every flag and config value goes
// through. Upper bounds are there so that nothing is silently truncated or overflows where a
// value is converted (to int, to milliseconds, to a port); each says why where it is not obvious.
#include "cli/tunables.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "cli/config_file.hpp"
#include "cli/schedule_file.hpp"
#include "kernels/blas_runtime.hpp"

namespace troupe::cli {

// "A:B", two counts >= 0 (A at most a rank's range); throws std::invalid_argument naming `form`.
std::pair<int64_t, int64_t> two_counts(const std::string& text, const std::string& form) {
  const auto colon = text.find(':');
  size_t a = 0, b = 0;
  int64_t first = -1, second = -1;
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    first = std::stoll(text.substr(0, colon), &a);
    second = std::stoll(text.substr(colon + 1), &b);
  } catch (const std::logic_error&) {
    a = b = std::string::npos;
  }
  if (colon == std::string::npos || a != colon || b != text.size() - colon - 1 || first < 0 || second < 0 ||
      first > 1'000'000)
    throw std::invalid_argument("\"" + text + "\": expected " + form);
  return {first, second};
}

namespace {

// "cuda:0,cuda:1" -> two devices; each item as parse_device reads it, none empty.
std::vector<device> parse_devices(const std::string& text) {
  std::vector<device> out;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty()) throw std::invalid_argument("\"" + text + "\": an empty device in the list");
    out.push_back(parse_device(item));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

using setter = std::function<void(train_config&, const value&)>;

// What every kind of tunable has; the helpers below add the kind's checks.
tunable base(std::string flag, std::string key, std::string help, value_kind kind, setter apply) {
  tunable t;
  t.flag = std::move(flag);
  t.key = std::move(key);
  t.help = std::move(help);
  t.kind = kind;
  t.apply = std::move(apply);
  return t;
}

tunable integer(std::string flag, std::string key, std::string help, int64_t lo, int64_t hi, setter apply) {
  tunable t = base(std::move(flag), std::move(key), std::move(help), value_kind::integer, std::move(apply));
  t.min_int = lo;
  t.max_int = hi;
  return t;
}

tunable integers(std::string flag, std::string key, std::string help, int64_t lo, int64_t hi, setter apply) {
  tunable t = integer(std::move(flag), std::move(key), std::move(help), lo, hi, std::move(apply));
  t.kind = value_kind::integers;
  return t;
}

// Finite, in [lo, hi]; `open` excludes lo ("(0, 100]").
tunable number(std::string flag, std::string key, std::string help, double lo, double hi, bool lo_open,
               setter apply, bool hi_open = false) {
  tunable t = base(std::move(flag), std::move(key), std::move(help), value_kind::number, std::move(apply));
  t.min_num = lo;
  t.max_num = hi;
  t.min_open = lo_open;
  t.max_open = hi_open;
  return t;
}

tunable text(std::string flag, std::string key, std::string help, setter apply) {
  return base(std::move(flag), std::move(key), std::move(help), value_kind::text, std::move(apply));
}

tunable choice(std::string flag, std::string key, std::string help, std::vector<std::string> choices, setter apply) {
  tunable t = text(std::move(flag), std::move(key), std::move(help), std::move(apply));
  t.kind = value_kind::choice;
  t.choices = std::move(choices);
  return t;
}

tunable texts(std::string flag, std::string key, std::string help, setter apply) {
  tunable t = text(std::move(flag), std::move(key), std::move(help), std::move(apply));
  t.kind = value_kind::texts;
  return t;
}

// Actors that each own a thread (pipeline stages, data-parallel ranks) and local processes: far
// above anything this runtime has run, low enough that a typo is not a fork or thread bomb.
constexpr int64_t max_ranks = 256;
constexpr int64_t big = 1'000'000'000;  // counts (steps, batches): no product of two overflows int64

std::vector<tunable> make_table() {
  std::vector<tunable> t;
  // [train]
  t.push_back(integer("--epochs", "train.epochs", "Passes over the training set [5]", 1, 1'000'000,
                      [](train_config& c, const value& v) { c.epochs = v.integer; }));
  t.push_back(integer("--batch-size", "train.batch_size", "Global batch size in samples [128]", 1, 10'000'000,
                      [](train_config& c, const value& v) { c.batch_size = v.integer; }));
  t.push_back(integer("--seed", "train.seed", "Seed of initialization and shuffling; same seed, same losses [42]", 0,
                      INT64_MAX, [](train_config& c, const value& v) { c.seed = static_cast<uint64_t>(v.integer); }));
  tunable threads = integer("--threads", "train.threads", "Threads of each rank's compute device (every op, GEMMs included; the losses do not depend on it) [1]", 1, max_threads(),
                            [](train_config& c, const value& v) { c.threads = static_cast<int>(v.integer); });
  threads.bound_note = "2 x this machine's " + std::to_string(std::max(1u, std::thread::hardware_concurrency())) +
                       " hardware threads, at most OpenBLAS's " + std::to_string(blas_max_threads());
  threads.bound_rule = "in 1..twice the machine's hardware threads, at most the threads OpenBLAS was built for";
  t.push_back(std::move(threads));
  t.push_back(text("--device", "train.device",
                   "Devices of the ranks, dealt in rank order and round robin: cpu, cuda (cuda:0), cuda:N, or a "
                   "comma-separated list [cpu]",
                   [](train_config& c, const value& v) { c.devices = parse_devices(v.text); }));
  t.push_back(text("--out", "train.out", "Output folder for metrics.jsonl [runs/latest]",
                   [](train_config& c, const value& v) { c.out_dir = v.text; }));
  t.push_back(text("--metrics-prom", "train.metrics_prom",
                   "Also write the job's figures (loss, throughput, each rank's compute and wait time, device memory "
                   "peaks) to this file in Prometheus's text format after every step, replaced whole, for "
                   "node_exporter's textfile collector (name it *.prom in its directory)",
                   [](train_config& c, const value& v) { c.metrics_prom = v.text; }));
  t.push_back(integer("--slow-rank-window", "train.slow_rank_window",
                      "Name, while the job runs, the rank its data-parallel group waits for (the one that hands in its "
                      "gradients last in 90% of this many recent steps) and a ring link far slower than its group's "
                      "others (0: off) [10]",
                      0, 100000, [](train_config& c, const value& v) { c.slow_rank_window = static_cast<int>(v.integer); }));
  t.push_back(number("--slow-rank-threshold", "train.slow_rank_threshold",
                     "With --slow-rank-window: a rank is named when it trails its data-parallel group by at least this "
                     "fraction of the step time, on median [0.1]", 0, 10, false,
                     [](train_config& c, const value& v) { c.slow_rank_threshold = v.number; }));
  t.push_back(choice("--recompute", "train.recompute",
                     "Recompute activations in backward instead of keeping them: none, selective (attention "
                     "scores) or full (every layer from its input) [none]",
                     {"none", "selective", "full"},
                     [](train_config& c, const value& v) { c.recompute = parse_recompute_mode(v.text); }));
  t.push_back(choice("--matmul-precision", "train.matmul_precision",
                     "Operands of every linear layer's products: f32, or bf16 (rounded operands summed in fp32, as "
                     "a GPU's tensor cores take them; parameters, gradients and optimizer state stay fp32) [f32]",
                     {"f32", "bf16"},
                     [](train_config& c, const value& v) { c.matmul = parse_matmul_precision(v.text); }));
  t.push_back(integer("--max-steps", "train.max_steps", "Stop after this many steps (0: all epochs) [0]", 0, big,
                      [](train_config& c, const value& v) { c.max_steps = v.integer; }));
  t.push_back(integer("--eval-batches", "train.eval_batches",
                      "Evaluate on at most this many held-out batches of 1000 samples (0: all) [0]", 0, big,
                      [](train_config& c, const value& v) { c.eval_max_batches = v.integer; }));
  // [model]
  t.push_back(choice("--model", "model.kind", "Model: mlp (Fashion-MNIST) or gpt (character-level, text corpus) [mlp]",
                     {"mlp", "gpt"}, [](train_config& c, const value& v) { c.model.kind = *parse_model_kind(v.text); }));
  t.push_back(integers("--hidden", "model.hidden", "MLP hidden layer widths, comma separated [256,256]", 1, 1 << 20,
                       [](train_config& c, const value& v) { c.model.hidden = v.integers; }));
  t.push_back(integer("--context", "model.context", "GPT: tokens per sequence [64]", 1, 1 << 16,
                      [](train_config& c, const value& v) { c.model.context = v.integer; }));
  t.push_back(integer("--channels", "model.channels", "GPT: embedding width [128]", 1, 1 << 16,
                      [](train_config& c, const value& v) { c.model.channels = v.integer; }));
  t.push_back(integer("--heads", "model.heads", "GPT: attention heads [4]", 1, 1 << 12,
                      [](train_config& c, const value& v) { c.model.heads = v.integer; }));
  t.push_back(integer("--blocks", "model.blocks", "GPT: transformer blocks [4]", 1, 1 << 12,
                      [](train_config& c, const value& v) { c.model.blocks = v.integer; }));
  t.push_back(integer("--experts", "model.experts",
                      "GPT: a mixture of this many experts (4C features each) with a learned router in place of "
                      "the MLP of every --moe-every-th block (0: dense) [0]",
                      0, 1 << 12, [](train_config& c, const value& v) { c.model.experts = v.integer; }));
  t.push_back(integer("--top-k", "model.top_k", "GPT with --experts: experts each token goes to, weighted by the router's renormalized probabilities [2]", 1, 1 << 12,
                      [](train_config& c, const value& v) { c.model.top_k = v.integer; }));
  t.push_back(integer("--moe-every", "model.moe_every", "GPT with --experts: every n-th block is a mixture of experts (blocks n-1, 2n-1, ...) [1]", 1, 1 << 12,
                      [](train_config& c, const value& v) { c.model.moe_every = v.integer; }));
  t.push_back(number("--capacity-factor", "model.capacity_factor",
                     "GPT with --experts: an expert takes at most ceil(factor x tokens x top-k / experts) tokens of "
                     "a micro-batch and drops the rest (0: dropless) [0]",
                     0, 1024, false, [](train_config& c, const value& v) { c.model.capacity_factor = v.number; }));
  t.push_back(number("--aux-loss-coef", "model.aux_loss_coefficient",
                     "GPT with --experts: the coefficient of Switch's load-balancing loss, whose gradient keeps the "
                     "router spreading tokens [0.01]",
                     0, 100, false, [](train_config& c, const value& v) { c.model.aux_loss_coefficient = v.number; }));
  // [optimizer]
  t.push_back(choice("--optimizer", "optimizer.kind", "Optimizer: adamw or sgd (with momentum) [adamw]",
                     {"adamw", "sgd"}, [](train_config& c, const value& v) { c.optim.kind = *parse_optimizer_kind(v.text); }));
  t.push_back(number("--lr", "optimizer.lr", "Learning rate [1e-3; 3e-3 for gpt]", 0, 100, true,
                     [](train_config& c, const value& v) { c.optim.lr = static_cast<float>(v.number); }));
  t.push_back(number("--weight-decay", "optimizer.weight_decay", "Weight decay (decoupled for AdamW) [0.01]", 0, 1,
                     false, [](train_config& c, const value& v) { c.optim.weight_decay = static_cast<float>(v.number); }));
  t.push_back(number("--momentum", "optimizer.momentum", "SGD momentum [0.9]", 0, 1, false,
                     [](train_config& c, const value& v) { c.optim.momentum = static_cast<float>(v.number); }, true));
  t.push_back(number("", "optimizer.beta1", "AdamW beta1 [0.9]", 0, 1, false,
                     [](train_config& c, const value& v) { c.optim.beta1 = static_cast<float>(v.number); }, true));
  t.push_back(number("", "optimizer.beta2", "AdamW beta2 [0.999]", 0, 1, false,
                     [](train_config& c, const value& v) { c.optim.beta2 = static_cast<float>(v.number); }, true));
  t.push_back(number("", "optimizer.eps", "AdamW epsilon [1e-8]", 0, 1, true,
                     [](train_config& c, const value& v) { c.optim.eps = static_cast<float>(v.number); }));
  // [data]
  t.push_back(text("--fashion-mnist", "data.fashion_mnist", "Fashion-MNIST folder [/usr/share/datasets/fashion-mnist]",
                   [](train_config& c, const value& v) { c.fashion_mnist_dir = v.text; }));
  t.push_back(text("--corpus", "data.corpus", "Text corpus file or folder for gpt [/usr/share/games/fortunes]",
                   [](train_config& c, const value& v) { c.corpus_path = v.text; }));
  // [pipeline]
  t.push_back(integer("--pp", "pipeline.stages", "Pipeline stages P (one device thread each); 1: no pipeline [1]", 1,
                      max_ranks, [](train_config& c, const value& v) { c.mesh.pp = static_cast<int>(v.integer); }));
  t.push_back(choice("--schedule", "pipeline.schedule", "Pipeline schedule (with --pp > 1) [1f1b]",
                     {"gpipe", "1f1b", "interleaved", "zb-h1"},
                     [](train_config& c, const value& v) { c.schedule = v.text; }));
  // Read when given, so a bad file is refused naming its line before anything else runs.
  t.push_back(text("--schedule-file", "pipeline.schedule_file",
                   "Run the schedule in this file (its text form, as `troupe schedule --save` writes it) instead of "
                   "--schedule; it sets --pp, --micro-batches and --virtual-stages, which must agree with it if given",
                   [](train_config& c, const value& v) { c.user_schedule = read_schedule_file(v.text); }));
  t.push_back(integer("--micro-batches", "pipeline.micro_batches",
                      "Microbatches M per global batch (with --pp > 1) [1]", 1, 1 << 16,
                      [](train_config& c, const value& v) { c.micro_batches = static_cast<int>(v.integer); }));
  t.push_back(integer("--virtual-stages", "pipeline.virtual_stages",
                      "Chunks per stage v (with --pp > 1 and --schedule interleaved) [2]", 1, max_ranks,
                      [](train_config& c, const value& v) { c.virtual_stages = static_cast<int>(v.integer); }));
  t.push_back(integers("--cuts", "pipeline.cuts",
                       "Pipeline cut points (with --pp > 1): first layer index of each chunk after the first, "
                       "comma separated [balanced by parameter count]",
                       1, 1 << 20, [](train_config& c, const value& v) { c.cuts = v.integers; }));
  t.push_back(choice("--dispatch", "pipeline.dispatch",
                     "How each stage runs its row of the schedule: fixed (as written) or ready (the row is a priority "
                     "order; its forward and backward sides interleave by what has arrived, within the fixed order's "
                     "activation stash; the same bits as fixed) [fixed]",
                     {"fixed", "ready"},
                     [](train_config& c, const value& v) { c.dispatch = sched::parse_dispatch(v.text); }));
  t.push_back(integer("--ready-stash", "pipeline.ready_stash",
                      "With --dispatch ready: activations a stage may stash beyond the fixed order's peak, so a forward "
                      "can run while an earlier backward's gradient is late (each costs one microbatch's activations "
                      "of the stage) [0]",
                      0, 1 << 10, [](train_config& c, const value& v) { c.ready_stash = static_cast<int>(v.integer); }));
  t.push_back(texts("--jitter", "pipeline.jitter",
                    "Fault injection: every compute action of mesh rank R takes a random extra time, uniform in "
                    "[0, MAX_MS), seeded (runs repeat): R:MAX_MS; repeatable",
                    [](train_config& c, const value& v) {
                      c.jitter.clear();
                      for (const auto& s : v.texts) c.jitter.push_back(parse_jitter(s));
                    }));
  // Milliseconds are counted in int64; a week is more than any step takes.
  t.push_back(number("--watchdog-seconds", "pipeline.watchdog_seconds",
                     "Report and stop a job whose step makes no progress this long, in seconds [60]", 0.1, 604800,
                     false, [](train_config& c, const value& v) { c.watchdog_seconds = v.number; }));
  // [mesh]
  t.push_back(integer("--tp", "mesh.tp",
                      "Tensor-parallel ranks T splitting every layer (Megatron-LM; innermost in the mesh) [1]", 1,
                      max_ranks, [](train_config& c, const value& v) { c.mesh.tp = static_cast<int>(v.integer); }));
  t.push_back(integer("--cp", "mesh.cp",
                      "Context-parallel ranks splitting every sequence (GPT; attention meets the group's keys and "
                      "values as --cp-mode says; T must split into 2 x cp chunks) [1]",
                      1, max_ranks, [](train_config& c, const value& v) { c.mesh.cp = static_cast<int>(v.integer); }));
  t.push_back(integer("--ep", "mesh.ep",
                      "Expert-parallel replicas sharing out every MoE layer's experts (GPT with --experts; formed "
                      "inside dp x cp, which it must divide; tokens reach their experts by all-to-all) [1]",
                      1, max_ranks, [](train_config& c, const value& v) { c.mesh.ep = static_cast<int>(v.integer); }));
  t.push_back(choice("--cp-mode", "mesh.cp_mode",
                     "How attention meets the context group's keys and values: all-gather (gather them, reduce-scatter "
                     "their gradients), ring (pass them around the group, each step's transfer behind a block's "
                     "attention), all-to-all (DeepSpeed-Ulysses: heads split during attention; heads per tp rank "
                     "must divide by cp) [all-gather]",
                     {"all-gather", "ring", "all-to-all"},
                     [](train_config& c, const value& v) { c.cp_mode = *context::parse_cp_mode(v.text); }));
  // [data_parallel]
  t.push_back(integer("--dp", "data_parallel.ranks",
                      "Data-parallel replicas N, each on 1/N of every batch [1; with --nodes K: K / pp]", 1, max_ranks,
                      [](train_config& c, const value& v) { c.mesh.dp = static_cast<int>(v.integer); }));
  // Bytes are counted in int64: 1 TiB is far below the overflow and above any model here.
  t.push_back(number("--bucket-mb", "data_parallel.bucket_mb",
                     "Gradient bucket cap in MiB for the DP all-reduce (0: per layer) [25]", 0, 1 << 20, false,
                     [](train_config& c, const value& v) { c.bucket_mb = v.number; }));
  // [zero]
  t.push_back(integer("--zero", "zero.stage",
                      "ZeRO stage over each data-parallel group: 0 plain, 1 optimizer state partitioned, 2 gradients "
                      "too, 3 parameters too [0]",
                      0, 3, [](train_config& c, const value& v) { c.zero = static_cast<int>(v.integer); }));
  t.push_back(integer("--prefetch", "zero.prefetch", "ZeRO-3: parameter units gathered ahead of the one in use [1]", 1,
                      64, [](train_config& c, const value& v) { c.prefetch = static_cast<int>(v.integer); }));
  t.push_back(text("--device-memory", "zero.device_memory",
                   "Cap on each rank's device memory, e.g. 512MiB, 2GiB (a plan that does not fit is refused "
                   "before it starts; 0: none) [0]",
                   [](train_config& c, const value& v) { c.device_memory = parse_bytes(v.text); }));
  t.push_back(choice("--offload", "zero.offload",
                     "What ZeRO-Offload moves off the device: none, optimizer (master copy and state; the step runs "
                     "there; needs --zero 1, 2 or 3), params (--zero 3's parameter segments, which in fp32 are the "
                     "master copy; the state stays; to nvme each unit is read back ahead of its gather) or both [none]",
                     {"none", "optimizer", "params", "both"}, [](train_config& c, const value& v) {
                       const std::string& w = v.text;
                       c.offload = w == "optimizer" ? offload_what::optimizer
                                   : w == "params"  ? offload_what::params
                                   : w == "both"    ? offload_what::both
                                                    : offload_what::none;
                     }));
  t.push_back(choice("--offload-to", "zero.offload_to",
                     "Where --offload puts it: host (host memory) or nvme (a file in --offload-dir, through io_uring) "
                     "[host]",
                     {"host", "nvme"}, [](train_config& c, const value& v) {
                       c.offload_to = v.text == "nvme" ? offload_target::nvme : offload_target::host;
                     }));
  t.push_back(text("--offload-dir", "zero.offload_dir", "Folder on the NVMe drive for --offload-to nvme",
                   [](train_config& c, const value& v) { c.offload_dir = v.text; }));
  t.push_back(text("--aio-block-size", "zero.aio_block_size",
                   "Bytes per NVMe I/O, a multiple of 4KiB (DeepSpeed's aio block_size) [1MiB]",
                   [](train_config& c, const value& v) { c.aio_block_size = parse_bytes(v.text); }));
  t.push_back(integer("--aio-queue-depth", "zero.aio_queue_depth", "NVMe I/Os in flight at once [8]", 1, 4096,
                      [](train_config& c, const value& v) { c.aio_queue_depth = static_cast<int>(v.integer); }));
  t.push_back(choice("--offload-pipeline", "zero.offload_pipeline",
                     "Read tile i+1 and write tile i-1 while tile i is updated (DeepSpeed's pipeline_read/write) "
                     "[on]",
                     {"on", "off"}, [](train_config& c, const value& v) { c.offload_pipeline = v.text == "on"; }));
  // [server]
  t.push_back(choice("--consistency", "server.consistency",
                     "Parameter servers instead of collectives: bsp (wait for every replica each step), ssp (a "
                     "batch may lead the rounds complete by --staleness rounds), asp (never wait); ssp and asp hand "
                     "batches out on demand, so a fast replica does more; none: collectives [none]",
                     {"none", "bsp", "ssp", "asp"},
                     [](train_config& c, const value& v) { c.consistency = *parse_consistency(v.text); }));
  t.push_back(integer("--staleness", "server.staleness",
                      "With --consistency ssp: rounds (global batches) a replica may run ahead of the rounds complete [0]", 0, 1 << 20,
                      [](train_config& c, const value& v) { c.staleness = static_cast<int>(v.integer); }));
  t.push_back(integer("--server-shards", "server.shards",
                      "With --consistency: servers per pipeline stage (and tp rank), each holding a key range of "
                      "its parameters [1]",
                      1, 1 << 16, [](train_config& c, const value& v) { c.server_shards = static_cast<int>(v.integer); }));
  t.push_back(integer("--servers", "server.processes",
                      "With --consistency: K processes of their own for the parameter servers (after the mesh's "
                      "processes; a launcher's WORLD_SIZE counts them), no server in a mesh process [0]",
                      0, 1 << 10, [](train_config& c, const value& v) { c.server_processes = static_cast<int>(v.integer); }));
  t.push_back(text("--kill-server", "server.kill",
                   "Fault injection: SERVER:UPDATES, parameter server SERVER (stage x shards + shard) dies after "
                   "that many updates",
                   [](train_config& c, const value& v) {
                     const auto [server, after] = two_counts(v.text, "SERVER:UPDATES, e.g. 0:10");
                     c.kill_server = static_cast<int>(server);
                     c.kill_server_after = after;
                   }));
  t.push_back(text("--kill-replica", "elastic.kill_replica",
                   "Fault injection in one process: REPLICA:STEP, data-parallel replica REPLICA's ranks are killed as "
                   "step STEP begins (with --elastic the job goes on without it; for processes see --kill-process)",
                   [](train_config& c, const value& v) {
                     const auto [replica, step] = two_counts(v.text, "REPLICA:STEP, e.g. 2:5");
                     c.kill_replica = static_cast<int>(replica);
                     c.kill_replica_step = step;
                   }));
  // [checkpoint]
  t.push_back(text("--checkpoint-dir", "checkpoint.dir",
                   "Save checkpoints under this folder (each rank's shard writes its part; a manifest commits it) "
                   "after every --checkpoint-every steps and after the last step",
                   [](train_config& c, const value& v) { c.checkpoint_dir = v.text; }));
  t.push_back(integer("--checkpoint-every", "checkpoint.every",
                      "Steps between checkpoints (0: after the last step only; needs --checkpoint-dir) [0]", 0, big,
                      [](train_config& c, const value& v) { c.checkpoint_every = v.integer; }));
  t.push_back(integer("--keep", "checkpoint.keep", "Checkpoints kept, the newest (0: all) [0]", 0, 1 << 20,
                      [](train_config& c, const value& v) { c.keep = static_cast<int>(v.integer); }));
  t.push_back(integer("--max-restarts", "checkpoint.max_restarts",
                      "Start a failed job (a lost process, a dead actor) again from the latest checkpoint, at most "
                      "this many times; under a launcher, its own restarts and --resume auto do this [0]",
                      0, 1 << 20, [](train_config& c, const value& v) { c.max_restarts = static_cast<int>(v.integer); }));
  // [elastic] (the table's presence, or --elastic, makes the job elastic: train_command.cpp)
  t.push_back(integer("--min-replicas", "elastic.min_replicas",
                      "With --elastic: the fewest data-parallel replicas the job goes on with; a loss below it ends "
                      "the job [1]",
                      1, max_ranks, [](train_config& c, const value& v) { c.min_replicas = static_cast<int>(v.integer); }));
  // Read when given, so a bad file is refused naming its line before anything else runs.
  t.push_back(text("--membership-events", "elastic.membership_events",
                   "With --elastic: change the data-parallel membership at these step boundaries, one event a line "
                   "(\"after step S: lose replica R\", \"after step S: admit a replica\"), as a real failure or "
                   "admission would",
                   [](train_config& c, const value& v) { c.membership_events = read_membership_events(v.text); }));
  t.push_back(text("--resume", "checkpoint.resume",
                   "Continue from a checkpoint: a checkpoint folder (its latest), one of its step-N folders, "
                   "latest (--checkpoint-dir's), or auto (its latest if it has one, else a fresh start); any mesh, "
                   "ZeRO stage or offload loads it",
                   [](train_config& c, const value& v) { c.resume = v.text; }));
  t.push_back(texts("--straggler", "data_parallel.stragglers",
                    "Delay a DP replica before each step, by a distribution of mean ms: rank:ms (fixed), "
                    "rank:ms:uniform (or random, in [0, 2 ms)), rank:ms:exponential, rank:ms:pareto[:shape] "
                    "(heavy-tailed, shape > 1, 1.5 if not given), rank:ms:burst[:period] (period x ms every "
                    "period-th step, 10 if not given); repeatable",
                    [](train_config& c, const value& v) {
                      c.stragglers.clear();
                      for (const auto& s : v.texts) c.stragglers.push_back(parse_straggler(s));
                    }));
  t.push_back(texts("--slow-link", "comm.slow_links",
                    "A slow link: mesh rank R's ring sends (to other processes: its data- and tensor-parallel "
                    "rings; in one process: its data-parallel ring) capped at MB megabytes/s, each collective's "
                    "first byte LATENCY ms late: R:MB[:LATENCY] (MB 0: latency only); repeatable",
                    [](train_config& c, const value& v) {
                      c.slow_links.clear();
                      for (const auto& s : v.texts) c.slow_links.push_back(parse_slow_link(s));
                    }));
  // A process fault flag's values replace that kind's faults, and leave the other kind's.
  auto process_faults_of = [](process_fault_kind kind) {
    return [kind](train_config& c, const value& v) {
      auto& f = c.process_faults;
      f.erase(std::remove_if(f.begin(), f.end(), [kind](const process_fault& x) { return x.kind == kind; }), f.end());
      for (const auto& s : v.texts) f.push_back(parse_process_fault(kind, s));
    };
  };
  t.push_back(texts("--pause-process", "process.pause",
                    "Fault injection under --nodes: stop process P (SIGSTOP) AT seconds into training, and "
                    "let it go on (SIGCONT) FOR seconds later: P:AT[:FOR] (no FOR: it stays stopped, and the job "
                    "names it once it is silent for --peer-timeout); repeatable",
                    process_faults_of(process_fault_kind::pause)));
  t.push_back(integer("--kill-in-regroup", "elastic.kill_in_regroup",
                      "Fault injection with --elastic over processes: process P (its index at the start) kills itself "
                      "(SIGKILL) as it leaves one membership for the next, a failure during the regroup",
                      1, max_ranks, [](train_config& c, const value& v) { c.kill_in_regroup = static_cast<int>(v.integer); }));
  t.push_back(texts("--kill-process", "process.kill",
                    "Fault injection under --nodes: kill process P (SIGKILL) AT seconds into training: P:AT; "
                    "repeatable",
                    process_faults_of(process_fault_kind::kill)));
  t.push_back(integer("--trace-step", "data_parallel.trace_step",
                      "Step written to <out>/trace.json, every rank (-1: the last) [-1]", -1, big,
                      [](train_config& c, const value& v) { c.trace_step = v.integer; }));
  // [comm]
  t.push_back(choice("--backend", "comm.backend",
                     "What reduces gradients between processes: tcp (troupe's ring), mpi (jobs started by "
                     "mpirun), gloo (Gloo's TCP transport) or nccl (on the GPUs, every rank on one: --device); "
                     "mpi, gloo and nccl where built [tcp]",
                     {"tcp", "mpi", "gloo", "nccl"}, [](train_config& c, const value& v) { c.backend = *net::parse_backend(v.text); }));
  // [process]
  t.push_back(integer("--nodes", "process.nodes",
                      "Processes to run the mesh on, all on this machine: this one is process 0 and starts 1..N-1 "
                      "as `troupe worker` [1]",
                      1, max_ranks, [](train_config& c, const value& v) { c.mesh.processes = static_cast<int>(v.integer); }));
  t.push_back(text("--master-addr", "process.master_addr", "Rank 0's address (flag, else MASTER_ADDR, else config) "
                   "[127.0.0.1]",
                   [](train_config& c, const value& v) {
                     if (v.text.find_first_of(" \t\n") != std::string::npos)
                       throw std::invalid_argument("\"" + v.text + "\" is not a host name or address");
                     c.process.master_addr = v.text;
                   }));
  t.push_back(integer("--master-port", "process.master_port",
                      "Rank 0's control gate port (flag, else MASTER_PORT, else config) [29500; any free port for "
                      "--nodes]",
                      1, 65535, [](train_config& c, const value& v) { c.process.master_port = static_cast<uint16_t>(v.integer); }));
  t.push_back(text("--secret-file", "process.secret_file",
                   "File whose first line is the job's shared secret, 16 bytes or more (else TROUPE_SECRET)",
                   [](train_config& c, const value& v) { c.process.secret_file = v.text; }));
  t.push_back(text("--job-id", "process.job_id",
                   "The job's id, which every process (a newcomer of an elastic job too) presents beside the secret: "
                   "a process of another job is refused by it (else TROUPE_JOB_ID, else torchrun's TORCHELASTIC_RUN_ID; "
                   "--nodes makes one when none is given)",
                   [](train_config& c, const value& v) {
                     if (v.text.size() > 256 || v.text.find_first_of(" \t\n\r") != std::string::npos)
                       throw std::invalid_argument("a job id is up to 256 characters without spaces");
                     c.process.job_id = v.text;
                   }));
  // The connection handshake gets twice this as its deadline, in int milliseconds
  // (process_job.cpp): 1 s keeps it well above 0 ms, a day keeps it far below INT_MAX.
  t.push_back(number("--peer-timeout", "process.peer_timeout",
                     "Seconds of silence after which a peer is lost and the job stops [30]", 1, 86400, false,
                     [](train_config& c, const value& v) { c.process.peer_timeout_seconds = v.number; }));
  t.push_back(text("--tls-cert", "process.tls_cert", "PEM certificate: the control plane uses mutual TLS",
                   [](train_config& c, const value& v) { c.process.tls_cert = v.text; }));
  t.push_back(text("--tls-key", "process.tls_key", "PEM private key of --tls-cert",
                   [](train_config& c, const value& v) { c.process.tls_key = v.text; }));
  t.push_back(text("--tls-ca", "process.tls_ca", "PEM CA that signed every rank's certificate",
                   [](train_config& c, const value& v) { c.process.tls_ca = v.text; }));
  return t;
}

std::string show(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

[[noreturn]] void refuse(const tunable& t, const std::string& got) {
  std::string msg = "must be " + allowed(t) + ", got " + got;
  if (!t.bound_note.empty()) msg += " (" + t.bound_note + ")";
  throw std::invalid_argument(msg);
}

void check_integer(const tunable& t, int64_t v) {
  if (v < t.min_int || v > t.max_int) refuse(t, std::to_string(v));
}

// Strict decimal, as launch_env parses ports: no "1e3", no " 2", no "3x"; an overflow is out of range.
int64_t parse_integer(const tunable& t, const std::string& s) {
  const bool digits = !s.empty() && s.find_first_not_of("0123456789", s[0] == '-' ? 1 : 0) == std::string::npos &&
                      s != "-";
  if (!digits) throw std::invalid_argument("expected an integer, got \"" + s + "\"");
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) refuse(t, s);
  check_integer(t, v);
  return v;
}

}  // namespace

int max_threads() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::min(2 * hw, blas_max_threads());
}

const std::vector<tunable>& tunables() {
  static const std::vector<tunable> table = make_table();
  return table;
}

const tunable* find_flag(const std::string& flag) {
  for (const auto& t : tunables())
    if (t.flag == flag) return &t;
  return nullptr;
}

const tunable* find_key(const std::string& key) {
  for (const auto& t : tunables())
    if (t.key == key) return &t;
  return nullptr;
}

std::string allowed(const tunable& t) {
  switch (t.kind) {
    case value_kind::integer:
    case value_kind::integers: {
      const std::string each = t.kind == value_kind::integers ? "each " : "";
      if (t.max_int == INT64_MAX) return each + ">= " + std::to_string(t.min_int);
      return each + "in " + std::to_string(t.min_int) + ".." + std::to_string(t.max_int);
    }
    case value_kind::number:
      return std::string("a finite number in ") + (t.min_open ? "(" : "[") + show(t.min_num) + ", " +
             show(t.max_num) + (t.max_open ? ")" : "]");
    case value_kind::choice: {
      std::string s = "one of ";
      for (size_t i = 0; i < t.choices.size(); ++i) s += (i ? ", " : "") + t.choices[i];
      return s;
    }
    case value_kind::text:
    case value_kind::texts:
      return "non-empty text";
  }
  return "";
}

void check(const tunable& t, const value& v) {
  switch (t.kind) {
    case value_kind::integer:
      check_integer(t, v.integer);
      return;
    case value_kind::integers:
      if (v.integers.empty()) throw std::invalid_argument("expected at least one value (" + allowed(t) + ")");
      for (int64_t x : v.integers) check_integer(t, x);
      return;
    case value_kind::number: {
      const double x = v.number;
      const bool in = std::isfinite(x) && (t.min_open ? x > t.min_num : x >= t.min_num) &&
                      (t.max_open ? x < t.max_num : x <= t.max_num);
      if (!in) refuse(t, show(x));
      return;
    }
    case value_kind::choice:
      for (const auto& c : t.choices)
        if (v.text == c) return;
      refuse(t, "\"" + v.text + "\"");
    case value_kind::text:
      if (v.text.empty()) throw std::invalid_argument("must not be empty");
      return;
    case value_kind::texts:
      for (const auto& s : v.texts)
        if (s.empty()) throw std::invalid_argument("must not be empty");
      return;
  }
}

void add_tunable_option(CLI::App* cmd, const tunable& t, std::string& into) {
  const bool shown = t.kind != value_kind::text && t.kind != value_kind::texts;
  const char* type = t.kind == value_kind::integer ? "INT" : t.kind == value_kind::number ? "NUMBER"
                     : t.kind == value_kind::integers ? "LIST" : "TEXT";
  cmd->add_option(t.flag, into, shown ? t.help + " {" + allowed(t) + "}" : t.help)->type_name(type);
}

value parse_flag(const tunable& t, const std::vector<std::string>& texts) {
  value v;
  const std::string s = texts.empty() ? std::string() : texts.back();  // a repeated single flag: the last wins
  switch (t.kind) {
    case value_kind::integer:
      v.integer = parse_integer(t, s);
      break;
    case value_kind::integers: {
      if (s.empty()) throw std::invalid_argument("expected a comma-separated list, e.g. 256,256; got \"\"");
      size_t start = 0;
      while (true) {
        const size_t comma = s.find(',', start);
        v.integers.push_back(parse_integer(t, s.substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      break;
    }
    case value_kind::number: {
      char* end = nullptr;
      errno = 0;
      v.number = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') throw std::invalid_argument("expected a number, got \"" + s + "\"");
      break;
    }
    case value_kind::text:
    case value_kind::choice:
      v.text = s;
      break;
    case value_kind::texts:
      v.texts = texts;
      break;
  }
  check(t, v);
  return v;
}

}  // namespace troupe::cli
