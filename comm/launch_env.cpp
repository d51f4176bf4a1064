// Launcher environment parsing: flags, torchrun, mpirun, srun. Every error names the variable
// or flag it comes from, because the person reading it has to find which launcher set it.
#include "comm/launch_env.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>

extern char** environ;

namespace troupe {
namespace {

struct source_vars {
  const char* name;
  const char* rank_var;
  const char* world_var;
};
constexpr source_vars launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS"},
};

// Strict decimal: no sign games, no trailing text, no overflow ("1e3", " 2", "3x" are refused).
std::optional<long> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  errno = 0;
  const long v = std::strtol(s.c_str(), nullptr, 10);
  if (errno != 0 || v > INT_MAX) return std::nullopt;
  return v;
}

std::optional<std::string> lookup(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

launch_result fail(std::string msg) { return {std::nullopt, std::move(msg)}; }

std::string quoted(const std::string& name, const std::string& value) { return name + "=\"" + value + "\""; }

// Kubeflow Trainer's torchrun variables (PET_ + torchrun's flag): this process is the first of
// PET_NPROC_PER_NODE on node PET_NODE_RANK of PET_NNODES. Sets rank/world as text, as another
// launcher's variables would be; returns an error naming the variable, or "".
std::string read_kubeflow(const std::map<std::string, std::string>& env, std::string& rank, std::string& world,
                          int& per_node) {
  auto nodes = lookup(env, "PET_NNODES"), node = lookup(env, "PET_NODE_RANK");
  if (!nodes) return "PET_NODE_RANK is set but PET_NNODES is not (kubeflow)";
  if (!node) return "PET_NNODES is set but PET_NODE_RANK is not (kubeflow)";
  const auto per = lookup(env, "PET_NPROC_PER_NODE").value_or("1");
  auto n = parse_int(*nodes), r = parse_int(*node), p = parse_int(per);
  if (!n || *n < 1)
    return quoted("PET_NNODES", *nodes) + " is not a positive integer (an elastic range such as 1:4 is not supported)";
  if (!p || *p < 1)
    return quoted("PET_NPROC_PER_NODE", per) +
           " is not a positive integer: troupe starts that many processes on each node (give numProcPerNode a number)";
  if (!r) return quoted("PET_NODE_RANK", *node) + " is not a non-negative integer";
  if (*r >= *n) return quoted("PET_NODE_RANK", *node) + " is not below " + quoted("PET_NNODES", *nodes);
  if (*n * *p > INT_MAX) return quoted("PET_NNODES", *nodes) + " x " + quoted("PET_NPROC_PER_NODE", per) + " is too large";
  rank = std::to_string(*r * *p);
  world = std::to_string(*n * *p);
  per_node = static_cast<int>(*p);
  return "";
}

}  // namespace

launch_result parse_launch_env(const std::map<std::string, std::string>& env, const launch_flags& flags) {
  launch_env out;
  // 1. The launcher, if any: the first whose variables are present.
  std::optional<std::string> env_rank, env_world;
  std::string rank_name = "--rank", world_name = "--world-size";
  const source_vars* launcher = nullptr;
  for (const auto& l : launchers) {
    auto r = lookup(env, l.rank_var), w = lookup(env, l.world_var);
    if (!r && !w) continue;
    if (!r) return fail(std::string(l.world_var) + " is set but " + l.rank_var + " is not (" + l.name + ")");
    if (!w) return fail(std::string(l.rank_var) + " is set but " + l.world_var + " is not (" + l.name + ")");
    launcher = &l;
    env_rank = r;
    env_world = w;
    break;
  }
  const bool kubeflow = launcher != &launchers[0] &&
                        (env.count("PET_NNODES") > 0 || env.count("PET_NODE_RANK") > 0);
  if (kubeflow) {
    std::string r, w;
    const std::string problem = read_kubeflow(env, r, w, out.node_processes);
    if (!problem.empty()) return fail(problem);
    if (flags.rank || flags.world_size)
      return fail("--rank/--world-size and Kubeflow's PET_NNODES/PET_NODE_RANK are both given: use one");
    launcher = nullptr;
    env_rank = r;
    env_world = w;
    out.source = "kubeflow";
    rank_name = "PET_NODE_RANK";
    world_name = "PET_NNODES";
  }
  // 2. Flags win, but must agree with a launcher that is present.
  std::string rank_text, world_text;
  if (flags.rank || flags.world_size) {
    if (!flags.rank) return fail("--world-size is given but --rank is not");
    if (!flags.world_size) return fail("--rank is given but --world-size is not");
    rank_text = *flags.rank;
    world_text = *flags.world_size;
    out.source = "flags";
    if (launcher) {
      auto same = [](const std::string& a, const std::string& b) {
        auto x = parse_int(a), y = parse_int(b);
        return x && y ? *x == *y : a == b;
      };
      if (!same(rank_text, *env_rank))
        return fail("--rank=" + rank_text + " contradicts " + quoted(launcher->rank_var, *env_rank));
      if (!same(world_text, *env_world))
        return fail("--world-size=" + world_text + " contradicts " + quoted(launcher->world_var, *env_world));
    }
  } else if (kubeflow) {
    rank_text = *env_rank;
    world_text = *env_world;
  } else if (launcher) {
    rank_text = *env_rank;
    world_text = *env_world;
    rank_name = launcher->rank_var;
    world_name = launcher->world_var;
    out.source = launcher->name;
  }
  if (out.source != "single") {
    auto world = parse_int(world_text);
    if (!world || *world < 1) return fail(quoted(world_name, world_text) + " is not a positive integer");
    auto rank = parse_int(rank_text);
    if (!rank) return fail(quoted(rank_name, rank_text) + " is not a non-negative integer");
    if (*rank >= *world)
      return fail(quoted(rank_name, rank_text) + " is not below " + quoted(world_name, world_text));
    out.rank = static_cast<int>(*rank);
    out.world_size = static_cast<int>(*world);
  }
  // 3. The rendezvous address.
  std::string addr_name = "--master-addr", port_name = "--master-port";
  std::optional<std::string> addr = flags.master_addr, port = flags.master_port;
  if (!addr && kubeflow && (addr = lookup(env, "PET_MASTER_ADDR"))) addr_name = "PET_MASTER_ADDR";
  if (!port && kubeflow && (port = lookup(env, "PET_MASTER_PORT"))) port_name = "PET_MASTER_PORT";
  if (!addr && (addr = lookup(env, "MASTER_ADDR"))) addr_name = "MASTER_ADDR";
  if (!port && (port = lookup(env, "MASTER_PORT"))) port_name = "MASTER_PORT";
  if (addr) {
    if (addr->empty() || addr->find_first_of(" \t\n") != std::string::npos)
      return fail(quoted(addr_name, *addr) + " is not a host name or address");
    out.master_addr = *addr;
  } else if (out.world_size > 1 && flags.address_from_mpi && out.source == "mpirun") {
    out.master_addr.clear();
  } else if (out.world_size > 1) {
    return fail("a job of " + std::to_string(out.world_size) + " processes (from " + out.source +
                ") needs a rendezvous address: set MASTER_ADDR or pass --master-addr");
  }
  if (port) {
    auto p = parse_int(*port);
    if (!p || *p < 1 || *p > 65535) return fail(quoted(port_name, *port) + " is not a port in 1..65535");
    out.master_port = static_cast<uint16_t>(*p);
  }
  return {out, ""};
}

std::vector<launch_variable> launch_variables() {
  return {
      {"RANK, WORLD_SIZE", "torchrun: this process's rank and the number of processes"},
      {"PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE",
       "Kubeflow Trainer: nodes, this node's index, processes per node (default 1); this process is rank "
       "PET_NODE_RANK x PET_NPROC_PER_NODE and starts the node's other PET_NPROC_PER_NODE - 1 itself"},
      {"PET_MASTER_ADDR, PET_MASTER_PORT", "Kubeflow Trainer: rank 0's address and port (before MASTER_ADDR/_PORT)"},
      {"OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI): rank and number of processes"},
      {"SLURM_PROCID, SLURM_NTASKS", "srun: rank and number of processes"},
      {"MASTER_ADDR, MASTER_PORT", "rank 0's address and control gate port, when no flag gives them [127.0.0.1, 29500]"},
      {"TROUPE_SECRET", "the job's shared secret (16 bytes or more), when --secret-file is not given"},
      {"TROUPE_JOB_ID", "the job's id, when --job-id is not given: every process, a newcomer too, presents it"},
      {"TORCHELASTIC_RUN_ID", "set by torchrun: its store holds MASTER_PORT, so troupe's gate takes the next port"},
  };
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace troupe
