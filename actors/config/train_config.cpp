// The checks and derived values of a train_config: plain functions, no CAF (train_config.hpp).
#include "actors/config/train_config.hpp"

#include <cmath>
#include <optional>
#include <random>
#include <filesystem>
#include <stdexcept>

#include "comm/tls_files.hpp"
#include "kernels/blas_runtime.hpp"
#include "storage/uring_store.hpp"

namespace troupe {

const char* to_string(delay_kind k) {
  switch (k) {
    case delay_kind::fixed: return "fixed";
    case delay_kind::uniform: return "uniform";
    case delay_kind::exponential: return "exponential";
    case delay_kind::pareto: return "pareto";
    case delay_kind::burst: return "burst";
  }
  return "?";
}

namespace {
// The whole of `t` as a finite number, or nothing.
std::optional<double> finite_number(const std::string& t) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::logic_error&) {
    return std::nullopt;
  }
  if (t.empty() || used != t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}
}  // namespace

jitter_spec parse_jitter(const std::string& text) {
  const size_t colon = text.find(':');
  jitter_spec j;
  size_t a = 0, b = 0;
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    j.rank = std::stoi(text.substr(0, colon), &a);
    j.max_ms = std::stod(text.substr(colon + 1), &b);
  } catch (const std::logic_error&) {
    a = b = std::string::npos;
  }
  if (colon == std::string::npos || a != colon || b != text.size() - colon - 1 || j.rank < 0 ||
      !std::isfinite(j.max_ms) || j.max_ms <= 0 || j.max_ms > 60000)
    throw std::invalid_argument("jitter \"" + text + "\": expected RANK:MAX_MS with MAX_MS in (0, 60000], e.g. 1:5");
  return j;
}

double jitter_delay_ms(const jitter_spec& j, uint64_t seed, int64_t step, size_t action) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(j.rank),
                    static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), static_cast<uint32_t>(action),
                    0x6a177e5u};
  std::mt19937_64 g(seq);
  return std::uniform_real_distribution<double>(0.0, j.max_ms)(g);
}

straggler_spec parse_straggler(const std::string& text) {
  auto bad = [&](const std::string& why) -> straggler_spec {
    throw std::invalid_argument("straggler \"" + text + "\": " + why +
                                "; expected rank:ms[:fixed|uniform|exponential|pareto[:shape]|burst[:period]], e.g. 1:50 "
                                "or 1:50:exponential");
  };
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t c = text.find(':', at);
    parts.push_back(text.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  if (parts.size() < 2 || parts.size() > 4) return bad("not 2 to 4 fields");
  auto number = [&](const std::string& t, const char* what) {
    const std::optional<double> v = finite_number(t);
    if (!v) bad(std::string("its ") + what + " \"" + t + "\" is not a number");
    return *v;
  };
  straggler_spec s;
  const double rank = number(parts[0], "rank");
  if (rank < 0 || rank != std::floor(rank)) return bad("its rank must be a whole number >= 0");
  s.rank = static_cast<int>(rank);
  s.ms = number(parts[1], "delay");
  if (s.ms < 0) return bad("its delay must be >= 0");
  if (parts.size() >= 3) {
    const std::string& k = parts[2];
    if (k == "fixed") s.kind = delay_kind::fixed;
    else if (k == "uniform" || k == "random") s.kind = delay_kind::uniform;
    else if (k == "exponential") s.kind = delay_kind::exponential;
    else if (k == "pareto") s.kind = delay_kind::pareto;
    else if (k == "burst") s.kind = delay_kind::burst;
    else return bad("unknown distribution \"" + k + "\"");
  }
  if (parts.size() == 4) {
    if (s.kind != delay_kind::pareto && s.kind != delay_kind::burst)
      return bad(std::string("a ") + to_string(s.kind) + " delay takes no parameter");
    s.param = number(parts[3], s.kind == delay_kind::pareto ? "shape" : "period");
    if (s.kind == delay_kind::pareto && !(s.param > 1)) return bad("a Pareto shape must be > 1 (its mean is finite only then)");
    if (s.kind == delay_kind::burst && (s.param < 1 || s.param != std::floor(s.param)))
      return bad("a burst period must be a whole number of steps >= 1");
  }
  return s;
}

namespace {
// The fields of "a:b:c" as numbers >= 0, or (with *bad set to it) up to the first that is not one.
std::vector<double> nonnegative_fields(const std::string& text, std::string* bad) {
  std::vector<double> v;
  for (size_t at = 0;;) {
    const size_t c = text.find(':', at);
    const std::string t = text.substr(at, c == std::string::npos ? std::string::npos : c - at);
    const std::optional<double> x = finite_number(t);
    if (!x || *x < 0) {
      *bad = t;
      return v;
    }
    v.push_back(*x);
    if (c == std::string::npos) return v;
    at = c + 1;
  }
}
}  // namespace

slow_link_spec parse_slow_link(const std::string& text) {
  auto bad = [&](const std::string& why) -> slow_link_spec {
    throw std::invalid_argument("slow link \"" + text + "\": " + why +
                                "; expected rank:mb_per_s[:latency_ms], e.g. 1:50 or 1:0:5 (latency only)");
  };
  std::string not_a_number;
  const std::vector<double> v = nonnegative_fields(text, &not_a_number);
  if (!not_a_number.empty()) return bad("\"" + not_a_number + "\" is not a number >= 0");
  if (v.size() < 2 || v.size() > 3) return bad("not 2 or 3 fields");
  if (v[0] != std::floor(v[0])) return bad("its rank must be a whole number");
  slow_link_spec s{static_cast<int>(v[0]), v[1], v.size() == 3 ? v[2] : 0};
  if (s.mb_per_s == 0 && s.latency_ms == 0) return bad("it neither caps the bandwidth nor adds latency");
  return s;
}

process_fault parse_process_fault(process_fault_kind kind, const std::string& text) {
  const bool pause = kind == process_fault_kind::pause;
  auto bad = [&](const std::string& why) -> process_fault {
    throw std::invalid_argument(std::string(pause ? "pause" : "kill") + " of a process \"" + text + "\": " + why +
                                (pause ? "; expected process:at_s[:for_s], e.g. 1:2.5:1 (stopped 2.5 s into training, "
                                         "for 1 s) or 1:2.5 (stopped for good)"
                                       : "; expected process:at_s, e.g. 1:2.5"));
  };
  std::string not_a_number;
  const std::vector<double> v = nonnegative_fields(text, &not_a_number);
  if (!not_a_number.empty()) return bad("\"" + not_a_number + "\" is not a number >= 0");
  if (v.size() < 2 || v.size() > (pause ? 3u : 2u)) return bad(pause ? "not 2 or 3 fields" : "not 2 fields");
  if (v[0] != std::floor(v[0]) || v[0] < 1) return bad("its process must be a whole number >= 1 (process 0 is the launcher)");
  return process_fault{kind, static_cast<int>(v[0]), v[1], v.size() == 3 ? v[2] : 0};
}

double straggler_delay_ms(const straggler_spec& s, uint64_t seed, int64_t step) {
  std::seed_seq seq{seed, static_cast<uint64_t>(s.rank), static_cast<uint64_t>(step)};
  std::mt19937_64 rng(seq);
  switch (s.kind) {
    case delay_kind::fixed: return s.ms;
    case delay_kind::uniform: return std::uniform_real_distribution<double>(0.0, 2.0 * s.ms)(rng);
    case delay_kind::exponential: return s.ms > 0 ? std::exponential_distribution<double>(1.0 / s.ms)(rng) : 0.0;
    case delay_kind::pareto: {
      // x_m (1 - u)^(-1/a) has mean a x_m / (a - 1): x_m is chosen for mean ms.
      const double a = s.param > 0 ? s.param : 1.5;
      const double xm = s.ms * (a - 1) / a;
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      return xm * std::pow(1.0 - u, -1.0 / a);
    }
    case delay_kind::burst: {
      const auto period = static_cast<int64_t>(s.param > 0 ? s.param : 10);
      return step % period == 0 ? s.ms * static_cast<double>(period) : 0.0;
    }
  }
  return 0;
}

device device_of_rank(const std::vector<device>& devices, int rank) {
  return devices.empty() ? device{} : devices[static_cast<size_t>(rank) % devices.size()];
}

namespace {

// Elastic training: what it runs over, and every membership the events make a valid job.
void validate_membership(const train_config& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (!c.membership_events.empty() && !c.elastic) bad("membership events need an elastic job (--elastic)");
  if (c.kill_replica >= c.mesh.dp)
    bad("kill_replica " + std::to_string(c.kill_replica) + ": the job has replicas 0.." + std::to_string(c.mesh.dp - 1));
  if (c.kill_in_regroup >= 0 && (!c.elastic || c.kill_in_regroup >= c.mesh.processes))
    bad("kill_in_regroup " + std::to_string(c.kill_in_regroup) + " needs an elastic job with that process (it has " +
        std::to_string(c.mesh.processes) + ")");
  if (c.kill_replica >= 0 && c.mesh.processes > 1)
    bad("kill_replica kills a replica's actors in one process; a job over processes loses one with --kill-process");
  if (!c.elastic) return;
  if (c.min_replicas < 1 || c.min_replicas > c.mesh.dp)
    bad("min_replicas " + std::to_string(c.min_replicas) + " must be in 1..dp " + std::to_string(c.mesh.dp));
  if (c.consistency != consistency_model::none)
    bad(std::string("an elastic job regroups its collectives; parameter servers (consistency ") + to_string(c.consistency) +
        ") have none to regroup");
  if (c.mesh.cp > 1)
    bad("an elastic job drops whole data-parallel replicas; under context parallelism (cp " + std::to_string(c.mesh.cp) +
        ") a replica's context groups are not regrouped yet");
  if (c.zero >= 3)
    bad("an elastic job under zero 3 would lose a lost replica's parameters with it (nothing else holds them); "
        "use zero 0, 1 or 2");
  if (c.server_processes > 0) bad("an elastic job's servers would be lost with their process; use collectives");
  if (c.mesh.processes > 1) {
    const sched::mesh& m = c.mesh;
    if (m.processes != m.dp)
      bad("an elastic job over processes needs one data-parallel replica per process (dp " + std::to_string(m.dp) +
          " over " + std::to_string(m.processes) + " processes): a lost process then loses one replica");
    if (c.backend != net::backend_kind::tcp && c.backend != net::backend_kind::gloo)
      bad(std::string("an elastic job over processes rebuilds its TCP rings or Gloo contexts; --backend ") +
          net::to_string(c.backend) + "'s communicators are not rebuilt yet (use --backend tcp or gloo)");
  }
  const std::vector<int> dps = replicas_after(c.membership_events, c.mesh.dp, c.min_replicas);
  for (size_t i = 0; i < dps.size(); ++i) {
    // Events at one boundary take effect together: the membership between them never trains.
    if (i + 1 < dps.size() && c.membership_events[i + 1].step == c.membership_events[i].step) continue;
    train_config then = c;
    then.mesh.dp = dps[i];
    if (c.mesh.processes > 1) then.mesh.processes = dps[i];  // one replica per process
    then.process.index = 0;  // the shape checked: which process leaves is the event's
    then.membership_events.clear();
    try {
      validate(then);
    } catch (const std::invalid_argument& e) {
      bad(to_string(c.membership_events[i]) + " leaves dp " + std::to_string(dps[i]) + ": " + e.what());
    }
  }
}

}  // namespace

void validate(const train_config& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  validate(c.optim);
  if (c.epochs <= 0) bad("epochs must be positive, got " + std::to_string(c.epochs));
  if (c.batch_size <= 0) bad("batch_size must be positive, got " + std::to_string(c.batch_size));
  if (c.threads <= 0) bad("threads must be positive, got " + std::to_string(c.threads));
  if (c.threads > blas_max_threads())  // more hangs inside OpenBLAS
    bad("threads " + std::to_string(c.threads) + " exceeds the " + std::to_string(blas_max_threads()) +
        " this OpenBLAS was built for");
  if (c.max_steps < 0) bad("max_steps must be >= 0");
  if (c.eval_batch_size <= 0) bad("eval_batch_size must be positive");
  if (c.out_dir.empty()) bad("out must name a folder");
  if (c.model.kind != model_kind::mlp && c.model.kind != model_kind::gpt) validate(c.model);
  if (const std::string m = sched::check(c.mesh); !m.empty()) bad("mesh " + sched::to_string(c.mesh) + ": " + m);
  validate_tp_split(c.model, c.mesh.tp);
  if (c.sequence_parallel) {
    const int64_t T = c.mesh.tp, N = c.mesh.dp;
    const int64_t M = c.user_schedule.stages.empty() ? c.micro_batches : c.user_schedule.num_microbatches;
    if (T == 1) bad("sequence parallelism splits over the tensor-parallel ranks: it needs --tp 2 or more");
    if (c.model.kind != model_kind::gpt) bad("sequence parallelism splits a GPT's layernorm regions; the mlp has none");
    // Every microbatch's sequences split evenly over the tp ranks.
    if (c.batch_size % (N * M) != 0 || (c.batch_size / (N * M)) % T != 0)
      bad("sequence parallelism needs microbatches of a multiple of tp " + std::to_string(T) + " sequences: batch_size " +
          std::to_string(c.batch_size) + " over dp " + std::to_string(N) + " x " + std::to_string(M) +
          " microbatches is not");
  }
  if (c.mesh.cp > 1) {
    const std::string cp = "context parallelism (cp " + std::to_string(c.mesh.cp) + ")";
    if (c.model.kind != model_kind::gpt) bad(cp + " splits sequences: model.kind \"" + to_string(c.model.kind) + "\" has none (use gpt)");
    if (const std::string why = context::refuses(c.cp_mode, c.model.heads / c.mesh.tp, c.mesh.cp); !why.empty())
      bad(cp + ": " + why + " (model.heads " + std::to_string(c.model.heads) + ", mesh.tp " +
          std::to_string(c.mesh.tp) + "); use --cp-mode ring or all-gather");
    if (c.model.context % (2 * c.mesh.cp) != 0)
      bad(cp + ": model.context " + std::to_string(c.model.context) + " must split into 2 x cp = " +
          std::to_string(2 * c.mesh.cp) + " equal chunks (each rank holds one from each end of the sequence)");
    if (c.consistency != consistency_model::none)
      bad(cp + " reduces gradients over dp x cp in a collective; parameter servers (--consistency) take none");
    for (const device& d : c.devices)
      if (!d.is_cpu()) bad(cp + " runs on the CPU only so far; " + d.to_string() + " was given");
    if (c.zero >= 3)
      bad(cp + " with ZeRO-3: its sharded evaluation would feed whole sequences to split layers; use --zero 2 or less");
  }
  if (c.model.experts > 0) {
    const std::string moe = "a mixture of experts (--experts " + std::to_string(c.model.experts) + ")";
    for (const device& d : c.devices)
      if (!d.is_cpu()) bad(moe + " runs on the CPU only so far; " + d.to_string() + " was given");
  }
  if (c.mesh.ep > 1) {
    const std::string ep = "expert parallelism (ep " + std::to_string(c.mesh.ep) + ")";
    if (c.model.experts == 0) bad(ep + " shares out a mixture of experts: the model has none (set --experts)");
    if (c.model.experts % c.mesh.ep != 0)
      bad(ep + ": model.experts " + std::to_string(c.model.experts) + " do not split evenly over ep " +
          std::to_string(c.mesh.ep) + " replicas");
    if (c.consistency != consistency_model::none)
      bad(ep + " moves tokens between replicas every step; parameter servers (--consistency) keep replicas apart");
    if (c.zero >= 3)
      bad(ep + " with ZeRO-3: the experts' parameters would be gathered over the replicas holding them, which is not "
          "built yet; use --zero 2 or less");
  }
  if (c.mesh.dp > c.batch_size)
    bad("dp " + std::to_string(c.mesh.dp) + " exceeds batch_size " + std::to_string(c.batch_size) +
        ": a rank would get no rows");
  if (c.server_processes < 0) bad("server_processes must be >= 0, got " + std::to_string(c.server_processes));
  const int world = c.mesh.processes + c.server_processes;
  if (c.process.index < 0 || c.process.index >= world)
    bad("process " + std::to_string(c.process.index) + " is not in 0.." + std::to_string(world - 1));
  // Not finite would be nonsense once converted to bytes or milliseconds (the CLI's table of
  // tunables gives the user-facing ranges; these guard the C++ API).
  if (!std::isfinite(c.bucket_mb) || c.bucket_mb < 0) bad("bucket_mb must be a finite number >= 0 (0: one bucket per layer)");
  if (!std::isfinite(c.watchdog_seconds) || c.watchdog_seconds < 0) bad("watchdog_seconds must be a finite number >= 0");
  const double peer = c.process.peer_timeout_seconds;
  if (!std::isfinite(peer) || peer < 0.001 || peer > 1e6)  // milliseconds in an int, never 0
    bad("process.peer_timeout_seconds must be a finite number in [0.001, 1e6]");
  net::check_tls_files(c.process.tls_cert, c.process.tls_key, c.process.tls_ca);
  if (c.backend != net::backend_kind::tcp) {
    const std::string name = net::to_string(c.backend);
    if (!net::backend_built(c.backend))
      bad("backend " + name + ": this troupe was built without it (built: " + net::built_backends() + ")");
    if (c.mesh.processes == 1) bad("backend " + name + " reduces between processes: the job has one (use --nodes or mpirun)");
    if (c.backend == net::backend_kind::nccl) {
      bool on_gpus = !c.devices.empty();
      for (const device& d : c.devices) on_gpus = on_gpus && !d.is_cpu();
      if (!on_gpus) bad("backend nccl reduces on GPUs: give every rank one (--device cuda, or a cuda:N list)");
      if (!device_groups_allowed(c))
        bad("backend nccl: " + std::string(c.zero >= 3 ? "ZeRO-3" : "offloading") +
            " keeps the shard on the host, so its groups reduce there; use --backend tcp, mpi or gloo");
    }
    // An MPI communicator holds each process once: a group with two ranks in one process cannot be
    // one. Gloo makes a context per member, wherever it lives.
    if (c.backend == net::backend_kind::mpi)
    for (sched::axis a : {sched::axis::dp, sched::axis::tp, sched::axis::cp})
      for (int r = 0; r < c.mesh.ranks(); ++r) {
        if (!c.mesh.group_spans_processes(a, r)) continue;
        int here = 0;
        for (int q : c.mesh.group(a, r)) here += c.mesh.process_of(q) == c.mesh.process_of(r);
        if (here > 1)
          bad("backend " + name + ": process " + std::to_string(c.mesh.process_of(r)) + " holds " + std::to_string(here) +
              " ranks of a " + (a == sched::axis::dp ? "data" : a == sched::axis::tp ? "tensor" : "context") + "-parallel group of rank " + std::to_string(r) +
              ", which spans processes; give each process at most one (more processes, or --backend tcp)");
      }
  }
  if (c.zero < 0 || c.zero > 3) bad("zero must be 0, 1, 2 or 3, got " + std::to_string(c.zero));
  if (c.prefetch < 1 || c.prefetch > 64) bad("prefetch must be in 1..64 parameter units, got " + std::to_string(c.prefetch));
  if (c.device_memory < 0) bad("device_memory must be >= 0 bytes (0: no cap)");
  if (c.staleness < 0) bad("staleness must be >= 0, got " + std::to_string(c.staleness));
  if (c.kill_server >= 0 && c.consistency == consistency_model::none)
    bad("kill_server is a parameter server's fault: give --consistency bsp, ssp or asp");
  if (c.server_shards < 1) bad("server_shards must be >= 1, got " + std::to_string(c.server_shards));
  // Over several processes a GPU's buckets and activations may cross through host memory; a
  // tensor-parallel group's sums, inside a layer, have no such path: they need NCCL.
  for (const device& d : c.devices)
    if (!d.is_cpu() && c.mesh.processes > 1 && c.mesh.tp > 1 && c.backend != net::backend_kind::nccl)
      bad("device " + d.to_string() + ": tensor parallelism on GPUs over " + std::to_string(c.mesh.processes) +
          " processes (--nodes) sums its layers' partial results on the GPUs: give --backend nccl");
  if (c.server_processes > 0 && c.consistency == consistency_model::none)
    bad("--servers " + std::to_string(c.server_processes) +
        " starts processes of parameter servers: give --consistency bsp, ssp or asp");
  if (c.server_processes > 0 && c.backend == net::backend_kind::mpi)
    bad("--servers: server processes are not MPI ranks; use --backend tcp");
  if (c.server_shards > 1 && c.consistency == consistency_model::none)
    bad("server_shards cuts parameter servers' ranges: give --consistency bsp, ssp or asp");
  if (c.staleness > 0 && c.consistency != consistency_model::ssp)
    bad("staleness is the bound of --consistency ssp, not " + std::string(to_string(c.consistency)));
  if (c.consistency != consistency_model::none) {
    const std::string mode = std::string("consistency ") + to_string(c.consistency);
    if (c.zero > 0) bad(mode + ": parameter servers hold the optimizer themselves; use zero 0");
    if (c.offload != offload_what::none) bad(mode + ": offload is for ZeRO's optimizer shards, not parameter servers");
    if (!c.checkpoint_dir.empty() || !c.resume.empty())
      bad(mode + ": checkpoints of parameter servers are not built yet");
  }
  if (c.checkpoint_every < 0) bad("checkpoint_every must be >= 0, got " + std::to_string(c.checkpoint_every));
  if (c.keep < 0) bad("keep must be >= 0 (0: keep every checkpoint), got " + std::to_string(c.keep));
  if (c.checkpoint_every > 0 && c.checkpoint_dir.empty()) bad("checkpoint_every needs checkpoint_dir (--checkpoint-dir)");
  if ((c.resume == "latest" || c.resume == "auto") && c.checkpoint_dir.empty())
    bad("resume " + c.resume + " needs checkpoint_dir (--checkpoint-dir)");
  if (c.max_restarts < 0) bad("max_restarts must be >= 0, got " + std::to_string(c.max_restarts));
  validate_membership(c);
  if (c.max_restarts > 0 && c.checkpoint_dir.empty())
    bad("max_restarts needs checkpoint_dir (--checkpoint-dir): a restart continues from the latest checkpoint");
  if (params_offload(c) != offload_target::none && c.zero < 3)
    bad(std::string("offloading parameters (offload ") + to_string(c.offload) +
        ") needs zero 3: only then does a rank keep its parameters as segments apart from the units it uses "
        "(DeepSpeed's rule too)");
  if (c.offload != offload_what::none) {
    if (c.zero < 1)
      bad("offloading the optimizer needs zero 1, 2 or 3: a rank offloads its optimizer shard (DeepSpeed's rule too)");
    if (c.offload_to == offload_target::nvme) {
      if (c.offload_dir.empty()) bad("offload to nvme needs offload_dir (--offload-dir), a folder on the NVMe drive");
      std::error_code ec;
      if (!std::filesystem::is_directory(c.offload_dir, ec))
        bad("offload_dir \"" + c.offload_dir + "\" is not an existing folder");
      storage::uring_options o;
      o.block_size = c.aio_block_size;
      o.queue_depth = c.aio_queue_depth;
      storage::validate(o);
    }
  }
  for (const auto& st : c.stragglers)
    if (st.rank >= c.mesh.dp)
      bad("straggler rank " + std::to_string(st.rank) + " but dp is " + std::to_string(c.mesh.dp));
  for (const auto& j : c.jitter)
    if (j.rank >= c.mesh.ranks())
      bad("jitter of rank " + std::to_string(j.rank) + " but the mesh " + sched::to_string(c.mesh) + " has " +
          std::to_string(c.mesh.ranks()) + " ranks");
  for (const auto& f : c.process_faults) {
    const std::string what = f.kind == process_fault_kind::pause ? "pause" : "kill";
    const int world = c.mesh.processes + c.server_processes;  // --servers: the server processes come after the mesh's
    if (world < 2)
      bad(what + " of process " + std::to_string(f.process) + ": this job runs in one process (add --nodes N)");
    if (f.process >= world)
      bad(what + " of process " + std::to_string(f.process) + " but the job has processes 0.." + std::to_string(world - 1));
  }
  for (const auto& l : c.slow_links) {
    if (l.rank >= c.mesh.ranks())
      bad("slow link of rank " + std::to_string(l.rank) + " but the mesh " + sched::to_string(c.mesh) + " has " +
          std::to_string(c.mesh.ranks()) + " ranks");
    if (c.mesh.processes < 2 && c.mesh.dp < 2)
      bad("a slow link shapes a rank's data-parallel ring sends; this job has dp 1 in one process");
    if (c.mesh.processes > 1 && c.backend != net::backend_kind::tcp)
      bad(std::string("a slow link shapes troupe's own TCP rings, not --backend ") + net::to_string(c.backend));
  }
}

const char* to_string(consistency_model c) {
  switch (c) {
    case consistency_model::none: return "none";
    case consistency_model::bsp: return "bsp";
    case consistency_model::ssp: return "ssp";
    case consistency_model::asp: return "asp";
  }
  return "?";
}

std::optional<consistency_model> parse_consistency(const std::string& text) {
  for (consistency_model c : {consistency_model::none, consistency_model::bsp, consistency_model::ssp, consistency_model::asp})
    if (text == to_string(c)) return c;
  return std::nullopt;
}

const char* to_string(offload_target t) {
  switch (t) {
    case offload_target::none: return "none";
    case offload_target::host: return "host";
    case offload_target::nvme: return "nvme";
  }
  return "?";
}

const char* to_string(offload_what w) {
  switch (w) {
    case offload_what::none: return "none";
    case offload_what::optimizer: return "optimizer";
    case offload_what::params: return "params";
    case offload_what::both: return "both";
  }
  return "?";
}

offload_target params_offload(const train_config& c) {
  return c.offload == offload_what::params || c.offload == offload_what::both ? c.offload_to : offload_target::none;
}

bool device_groups_allowed(const train_config& cfg) {
  return cfg.zero <= 2 && optimizer_offload(cfg) == offload_target::none && params_offload(cfg) == offload_target::none;
}

bool pipeline_on_device_link(const train_config& cfg, int from, int to) {
  return cfg.backend == net::backend_kind::nccl && cfg.mesh.process_of(from) != cfg.mesh.process_of(to) &&
         !device_of_rank(cfg, from).is_cpu() && !device_of_rank(cfg, to).is_cpu();
}

offload_target optimizer_offload(const train_config& c) {
  return c.offload == offload_what::optimizer || c.offload == offload_what::both ? c.offload_to : offload_target::none;
}

eval_plan plan_evaluation(const train_config& c, int64_t held_out, int64_t rows_per_sample) {
  eval_plan p;
  p.samples = c.eval_max_batches > 0 ? std::min(held_out, c.eval_max_batches * c.eval_batch_size) : held_out;
  const int64_t rows = std::max<int64_t>(c.batch_size * rows_per_sample, 1000);
  p.piece = std::max<int64_t>(1, std::min(c.eval_batch_size, rows / std::max<int64_t>(rows_per_sample, 1)));
  return p;
}

}  // namespace troupe
