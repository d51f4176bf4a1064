// `troupe worker` and the process flags shared with `troupe train`. A worker is `troupe train`
// for a rank other than 0: the same flags (so the same model and data), plus where rank 0 is.
// It deliberately has no protocol of its own: process_job.cpp does the joining.
#include "cli/worker_command.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <fstream>
#include <random>
#include <thread>

#include "comm/launch_env.hpp"
#include "comm/tcp_auth.hpp"
#include "cli/train_command.hpp"

namespace troupe::cli {

void add_process_options(CLI::App* cmd, process_flags& f) {
  cmd->add_option("--rank", f.rank, "This process's rank (else RANK, PET_NODE_RANK x PET_NPROC_PER_NODE, OMPI_COMM_WORLD_RANK or SLURM_PROCID)");
  cmd->add_option("--world-size", f.world_size, "Processes in the job (else WORLD_SIZE, PET_NNODES x PET_NPROC_PER_NODE, OMPI_COMM_WORLD_SIZE, "
                                                "SLURM_NTASKS)");
}

namespace {

}  // namespace

node_processes resolve_process(const process_sources& s, train_config& c, bool worker) {
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
  node_processes spawn;
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
    if (r.env->node_processes > 1) spawn = {r.env->rank + 1, r.env->node_processes - 1, false};
  } else if (!r.env && c.mesh.processes + c.server_processes <= 1) {
    throw std::invalid_argument(r.error);
  } else if (c.mesh.processes + c.server_processes > 1) {  // --nodes N (--servers K) alone: all started from here
    spawn_local = true;  // p.master_addr is the flag's, the file's or the default
    spawn = {1, c.mesh.processes + c.server_processes - 1, true};
    if (!lf.master_port) p.master_port = 0;  // none asked for: any free port, told to the children
  }
  if (worker && p.index == 0) throw std::invalid_argument("troupe worker: rank 0 is `troupe train`; give --rank >= 1");
  // A worker started by --nodes has the same flags and leaves the faults to its launcher.
  if (!worker && !spawn_local && c.mesh.processes + c.server_processes > 1 && !c.process_faults.empty())
    throw std::invalid_argument("--pause-process and --kill-process are done by --nodes' own launcher, which knows the "
                                "processes' pids; this job is started by another launcher");
  if (c.mesh.processes + c.server_processes > 1) {
    auto secret = net::load_secret(env, p.secret_file.empty() ? std::nullopt : std::optional<std::string>(p.secret_file));
    if (secret) p.secret = *secret;
    else if (spawn_local) p.secret = net::random_secret();  // only this process and its children know it
    else if (over_mpi && r.env && r.env->source == "mpirun" && p.master_addr.empty())
      p.secret.clear();  // process 0 makes one, MPI carries it to the others
    else throw std::invalid_argument("a job of several processes needs a shared secret: --secret-file or TROUPE_SECRET");
    // The job's id: the flag, else TROUPE_JOB_ID, else torchrun's run id (the same in every
    // process of its run); a --nodes job makes one, which its processes inherit.
    if (p.job_id.empty()) {
      if (const auto it = env.find("TROUPE_JOB_ID"); it != env.end()) p.job_id = it->second;
      else if (const auto run = env.find("TORCHELASTIC_RUN_ID"); run != env.end()) p.job_id = run->second;
      else if (spawn_local) p.job_id = net::random_secret().substr(0, 16);
    }
  }
  return spawn;
}

local_workers::~local_workers() {
  stop_faults();
  std::lock_guard<std::mutex> lock(pids_mu_);
  for (pid_t p : pids_) ::kill(p, SIGKILL);
  for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
}

void local_workers::stop_faults() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    faults_done_ = true;
  }
  cv_.notify_all();
  if (injector_.joinable()) injector_.join();
}

// The faults of --pause-process and --kill-process, in time order, on a thread of their own: a
// signal at its time after training started, each logged, so a job's report can be read beside
// what was done to it. A pause's SIGCONT is a fault of its own, FOR seconds later.
void local_workers::inject_faults(std::chrono::steady_clock::time_point started) {
  struct signal_at {
    double at_s;
    int process, sig;
  };
  auto name = [](int sig) { return sig == SIGKILL ? "SIGKILL" : sig == SIGSTOP ? "SIGSTOP" : "SIGCONT"; };
  std::vector<signal_at> plan;
  for (const process_fault& f : cfg_.process_faults) {
    if (f.kind == process_fault_kind::kill) {
      plan.push_back({f.at_s, f.process, SIGKILL});
      continue;
    }
    plan.push_back({f.at_s, f.process, SIGSTOP});
    if (f.for_s > 0) plan.push_back({f.at_s + f.for_s, f.process, SIGCONT});
  }
  std::stable_sort(plan.begin(), plan.end(), [](const signal_at& a, const signal_at& b) { return a.at_s < b.at_s; });
  for (const signal_at& s : plan) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto when = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s.at_s));
    if (cv_.wait_until(lock, when, [this] { return faults_done_; })) {
      spdlog::info("fault injection: the job ended before {} of process {} at {:.1f} s", name(s.sig), s.process, s.at_s);
      return;
    }
    const pid_t pid = pid_of_.at(s.process);
    if (s.sig == SIGKILL) {
      std::lock_guard<std::mutex> pids(pids_mu_);
      killed_.insert(pid);
    }
    ::kill(pid, s.sig);
    if (s.sig == SIGSTOP) stopped_.push_back(pid);
    if (s.sig == SIGCONT) stopped_.erase(std::remove(stopped_.begin(), stopped_.end(), pid), stopped_.end());
    spdlog::warn("fault injection: {} sent to process {} (pid {}), {:.1f} s into training", name(s.sig), s.process, pid,
                 s.at_s);
  }
}

void local_workers::restart(const std::string& resume) {
  stop_faults();  // the faults are of the first start only: a restart runs clean
  std::lock_guard<std::mutex> lock(pids_mu_);
  for (pid_t p : pids_) ::kill(p, SIGKILL);
  for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
  pids_.clear();
  reaped_.clear();
  resume_ = resume;
}

void local_workers::pass_on_stop(int sig) {
  std::vector<pid_t> running;
  {
    std::lock_guard<std::mutex> lock(pids_mu_);
    running = pids_;
  }
  for (pid_t p : running) ::kill(p, sig);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (pid_t p : running)
    while (::waitpid(p, nullptr, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void local_workers::start(uint16_t port) {
  std::vector<std::string> args;
  {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);  // closed before any fork
    for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  }
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
  for (int r = which_.first; r < which_.first + which_.count; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", cfg_.process.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("TROUPE_SECRET", cfg_.process.secret.c_str(), 1);
      ::setenv("TROUPE_JOB_ID", cfg_.process.job_id.c_str(), 1);
      // Nothing of process 0's but the standard streams: a descriptor opened without CLOEXEC
      // (by a library: Gloo's pair listener, a file) would otherwise live on in the worker, a
      // listening socket among them.
      if (::close_range(3, ~0U, 0) != 0)
        for (int fd = 3; fd < 65536; ++fd) ::close(fd);  // a kernel before 5.9
      std::vector<char*> argv;
      for (auto& a : child) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    if (pid > 0) {
      std::lock_guard<std::mutex> lock(pids_mu_);
      pids_.push_back(pid);
      pid_of_[r] = pid;
    }
  }
  std::lock_guard<std::mutex> lock(pids_mu_);
  const int last = which_.first + which_.count - 1, mesh_last = std::min(last, cfg_.mesh.processes - 1);
  const auto mesh_end = pids_.begin() + std::clamp<long>(mesh_last - which_.first + 1, 0, static_cast<long>(pids_.size()));
  if (mesh_last >= which_.first)
    spdlog::info("started ranks {}..{} on this machine (pids {})", which_.first, mesh_last,
                 fmt::join(pids_.begin(), mesh_end, ", "));
  if (last > mesh_last)
    spdlog::info("started parameter server processes {}..{} on this machine (pids {})", std::max(which_.first, mesh_last + 1),
                 last, fmt::join(mesh_end, pids_.end(), ", "));
}

void local_workers::training_started() {
  if (cfg_.process_faults.empty() || faults_done_ || injector_.joinable() ||
      pids_.size() + 1 != static_cast<size_t>(cfg_.mesh.processes + cfg_.server_processes))
    return;
  injector_ = std::thread([this, t = std::chrono::steady_clock::now()] { inject_faults(t); });
}

int local_workers::wait(int timeout_ms, const std::vector<int>& left) {
  stop_faults();
  // A worker the faults left stopped is let go on, so that it finds its job gone and exits.
  for (pid_t p : stopped_) ::kill(p, SIGCONT);
  stopped_.clear();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto failed = [this, &left](pid_t pid, int status) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return false;
    if (cfg_.elastic && killed_.count(pid)) return false;  // the job went on without it
    int process = -1;
    for (const auto& [r, p] : pid_of_)
      if (p == pid) process = r;
    // Lost from outside (a kill, a crash): the elastic job dropped its replica and went on, as
    // it does for --kill-process; its end is no failure of the job's, but it is named.
    if (cfg_.elastic && std::find(left.begin(), left.end(), process) != left.end()) {
      spdlog::warn("process {} (pid {}) {}: the elastic job dropped its replica and went on without it", process, pid,
                   WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                                             ::strsignal(WTERMSIG(status)) + ")"
                                       : "exited with status " + std::to_string(WEXITSTATUS(status)));
      return false;
    }
    return true;
  };
  std::unique_lock<std::mutex> lock(pids_mu_);
  int bad = 0;
  for (const auto& [pid, status] : reaped_) bad += failed(pid, status) ? 1 : 0;
  reaped_.clear();
  while (!pids_.empty() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      int status = 0;
      if (::waitpid(pids_[i], &status, WNOHANG) != pids_[i]) continue;
      if (failed(pids_[i], status)) ++bad;
      pids_.erase(pids_.begin() + static_cast<long>(i--));
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    lock.lock();
  }
  return bad + static_cast<int>(pids_.size());  // the destructor kills any left
}

std::string local_workers::exited() {
  std::lock_guard<std::mutex> lock(pids_mu_);
  for (size_t i = 0; i < pids_.size(); ++i) {
    int status = 0;
    const pid_t pid = pids_[i];
    if (::waitpid(pid, &status, WNOHANG) != pid) continue;
    pids_.erase(pids_.begin() + static_cast<long>(i--));
    reaped_.emplace_back(pid, status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (cfg_.elastic && killed_.count(pid)) continue;  // dropped from the job, which goes on
    int process = 0;
    for (const auto& [r, p] : pid_of_)
      if (p == pid) process = r;
    const std::string who = "process " + std::to_string(process) + " (pid " + std::to_string(pid) + ")";
    if (WIFSIGNALED(status))
      return who + " was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")";
    return who + " exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return {};
}

void add_worker_command(CLI::App& app, int& exit_code) {
  add_train_command(app, exit_code, "worker", true);
}

}  // namespace troupe::cli
