// `troupe worker` and the process flags shared with `troupe train`. A worker is `troupe train`
// for a rank other than 0: the same flags (so the same model and data), plus where rank 0 is.
// It deliberately has no protocol of its own: process_job.cpp does the joining.
#include "cli/worker_command.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "comm/launch_env.hpp"
#include "comm/tcp_auth.hpp"
#include "cli/train_command.hpp"

namespace troupe::cli {

void add_process_options(CLI::App* cmd, process_flags& f) {
  cmd->add_option("--rank", f.rank, "This process's rank (else RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
  cmd->add_option("--world-size", f.world_size, "Processes in the job (else WORLD_SIZE, OMPI_COMM_WORLD_SIZE, "
                                                "SLURM_NTASKS)");
}

namespace {

}  // namespace

bool resolve_process(const process_sources& s, train_config& c, bool worker) {
  process_config& p = c.process;
  if (!p.tls_cert.empty() && (p.tls_key.empty() || p.tls_ca.empty()))
    throw std::invalid_argument("--tls-cert needs --tls-key and --tls-ca too");
  const auto env = current_environment();
  launch_flags lf;
  lf.rank = s.rank;
  lf.world_size = s.world_size;
  // The flag, else the launcher's variable, else the config file (a launcher knows this job's
  // rendezvous better than a file shared by many jobs).
  if (s.addr_flag || (s.addr_file && !env.count("MASTER_ADDR"))) lf.master_addr = p.master_addr;
  if (s.port_flag || (s.port_file && !env.count("MASTER_PORT"))) lf.master_port = std::to_string(p.master_port);
  // Under mpirun with --backend mpi, process 0's address and the secret can come over MPI.
  const bool over_mpi = c.backend == net::backend_kind::mpi;
  lf.address_from_mpi = over_mpi;
  launch_result r = parse_launch_env(env, lf);
  bool spawn_local = false;
  if (r.env && r.env->source != "single") {
    p.index = r.env->rank;
    // The launcher's world counts the server processes (--servers) after the mesh's.
    c.mesh.processes = r.env->world_size - c.server_processes;
    if (c.mesh.processes < 1)
      throw std::invalid_argument("a world of " + std::to_string(r.env->world_size) +
                                  " processes leaves none for the mesh beside --servers " + std::to_string(c.server_processes));
    p.master_addr = r.env->master_addr;
    p.master_port = r.env->master_port;
    // torchrun's agent serves its own store on MASTER_PORT, so troupe's gate takes the next port
    // unless --master-port (or the config file) names one.
    if (env.count("TORCHELASTIC_RUN_ID") && !lf.master_port && p.master_port < 65535) {
      ++p.master_port;
      if (p.index == 0)
        spdlog::info("under torchrun: its store holds MASTER_PORT {}, troupe's control gate listens on {}",
                     p.master_port - 1, p.master_port);
    }
  } else if (!r.env && c.mesh.processes + c.server_processes <= 1) {
    throw std::invalid_argument(r.error);
  } else if (c.mesh.processes + c.server_processes > 1) {  // --nodes N (--servers K) alone: all started from here
    spawn_local = true;  // p.master_addr is the flag's, the file's or the default
    if (!lf.master_port) p.master_port = 0;  // none asked for: any free port, told to the children
  }
  if (worker && p.index == 0) throw std::invalid_argument("troupe worker: rank 0 is `troupe train`; give --rank >= 1");
  if (c.mesh.processes + c.server_processes > 1) {
    auto secret = net::load_secret(env, p.secret_file.empty() ? std::nullopt : std::optional<std::string>(p.secret_file));
    if (secret) p.secret = *secret;
    else if (spawn_local) p.secret = net::random_secret();  // only this process and its children know it
    else if (over_mpi && r.env && r.env->source == "mpirun" && p.master_addr.empty())
      p.secret.clear();  // process 0 makes one, MPI carries it to the others
    else throw std::invalid_argument("a job of several processes needs a shared secret: --secret-file or TROUPE_SECRET");
  }
  return spawn_local;
}

local_workers::~local_workers() {
  for (pid_t p : pids_) ::kill(p, SIGKILL);
  for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
}

void local_workers::restart(const std::string& resume) {
  for (pid_t p : pids_) ::kill(p, SIGKILL);
  for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
  pids_.clear();
  resume_ = resume;
}

void local_workers::start(uint16_t port) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  // Same arguments, `train` -> `worker`, without --nodes (the rank comes from the environment).
  std::vector<std::string> child{"/proc/self/exe"};
  bool sub = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--nodes" || (resume_ && args[i] == "--resume")) { ++i; continue; }
    if (args[i].rfind("--nodes=", 0) == 0 || (resume_ && args[i].rfind("--resume=", 0) == 0)) continue;
    if (!sub && args[i] == "train") { child.push_back("worker"); sub = true; continue; }
    child.push_back(args[i]);
  }
  // A restart: every worker resumes from the checkpoint process 0 resumes from.
  if (resume_ && !resume_->empty()) child.insert(child.end(), {"--resume", *resume_});
  const pid_t parent = ::getpid();
  const int world = cfg_.mesh.processes + cfg_.server_processes;  // --servers: after the mesh's
  for (int r = 1; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", cfg_.process.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("TROUPE_SECRET", cfg_.process.secret.c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : child) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    if (pid > 0) pids_.push_back(pid);
  }
  const auto mesh_end = pids_.begin() + std::min<long>(static_cast<long>(pids_.size()), cfg_.mesh.processes - 1);
  if (cfg_.mesh.processes > 1)
    spdlog::info("started ranks 1..{} on this machine (pids {})", cfg_.mesh.processes - 1,
                 fmt::join(pids_.begin(), mesh_end, ", "));
  if (cfg_.server_processes > 0)
    spdlog::info("started parameter server processes {}..{} on this machine (pids {})", cfg_.mesh.processes, world - 1,
                 fmt::join(mesh_end, pids_.end(), ", "));
}

int local_workers::wait(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int bad = 0;
  while (!pids_.empty() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      int status = 0;
      if (::waitpid(pids_[i], &status, WNOHANG) != pids_[i]) continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad;
      pids_.erase(pids_.begin() + static_cast<long>(i--));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return bad + static_cast<int>(pids_.size());  // the destructor kills any left
}

void add_worker_command(CLI::App& app, int& exit_code) {
  add_train_command(app, exit_code, "worker", true);
}

}  // namespace troupe::cli
