// The multi-process side of the CLI: `troupe worker` (joins a job), the flags every rank shares
// (--nodes, --rank, --master-addr, --secret-file, --peer-timeout, --tls-*), and `--nodes N` on
// one machine, which starts ranks 1..N-1 as child processes bound to this one.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "actors/config/train_config.hpp"
#include "cli/stop_signals.hpp"

namespace troupe::cli {

// The launcher flags --rank and --world-size, kept as text for parse_launch_env. The other
// process settings (--nodes, --master-addr, --master-port, --peer-timeout, ...) are tunables
// (tunables.hpp), already in train_config.process when resolve_process runs.
struct process_flags {
  std::string rank, world_size;
};
void add_process_options(CLI::App* cmd, process_flags& f);

// Where the rank and the rendezvous address came from, for resolve_process.
struct process_sources {
  std::optional<std::string> rank, world_size;  // --rank, --world-size as given
  bool addr_flag = false, port_flag = false;    // --master-addr, --master-port given
  bool addr_file = false, port_file = false;    // [process] master_addr, master_port set by the config file
};

// The processes this one starts on its machine: ranks first .. first + count - 1. --nodes N
// starts ranks 1..N-1 once its control gate listens (the port may be any free one); a Kubeflow
// Trainer node's first process starts the node's others at once (the port is the launcher's).
struct node_processes {
  int first = 0, count = 0;  // count 0: none
  bool after_listening = false;
};

// Fills in c.process from the flags and config (already applied), and the launcher environment
// (torchrun, Kubeflow Trainer, mpirun, srun). The rendezvous address comes from the flag, else the
// launcher's variables, else the config file, else the default. Returns the processes this one
// must start itself. Throws std::invalid_argument naming the flag or variable.
node_processes resolve_process(const process_sources& s, train_config& c, bool worker);

// The processes of node_processes on this machine: `troupe worker` with this process's own
// arguments and RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT/TROUPE_SECRET in their environment.
// Each dies with its parent (PR_SET_PDEATHSIG); the destructor kills any still running. The
// job's process faults (--pause-process, --kill-process) are sent from a thread of its own, timed
// from the first start of training.
class local_workers {
 public:
  local_workers(const train_config& c, node_processes which) : cfg_(c), which_(which) {}
  ~local_workers();
  void start(uint16_t master_port);
  // Every process joined (process_config::on_training_start): the process faults are timed from now.
  void training_started();
  // Waits up to timeout_ms for all to exit; returns how many exited non-zero (or were killed).
  // Under --elastic, the processes in `left` (by index: their replica left the job, which went
  // on without them) are not counted; each that ended badly is named in a warning.
  int wait(int timeout_ms, const std::vector<int>& left = {});
  // A worker that has exited non-zero or by a signal, named ("process 2 (pid 4711) was killed by
  // signal 9 (Killed)"), once; "" when none has. Never waits. From any thread (the job hub's).
  std::string exited();
  // Before a restart: kills the workers still running, and has the next start() give them
  // --resume `resume` (none: empty) in place of the job's own.
  void restart(const std::string& resume);

 private:
  void inject_faults(std::chrono::steady_clock::time_point started);
  void stop_faults();
  train_config cfg_;
  node_processes which_;
  std::vector<pid_t> pids_;
  std::optional<std::string> resume_;
  std::thread injector_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool faults_done_ = false;
  std::vector<pid_t> stopped_;  // stopped by a pause not yet resumed (the injector's, read once it is joined)
  // pids_ and what exited() reaped (pid, status), which wait() then counts; exited() runs on
  // another thread than start, restart and wait.
  std::mutex pids_mu_;
  std::vector<std::pair<pid_t, int>> reaped_;
  std::map<int, pid_t> pid_of_;  // by process index, of the current start
  // Killed by --kill-process: under --elastic the job goes on without them, so their end is no
  // failure of the job's (the job's own verdict says whether it went on).
  std::set<pid_t> killed_;
  // A stop signal to this process is passed on to the workers (each says so in its log), which
  // get a few seconds to end before this process does. Last, so it goes first.
  stop_hook pass_stop_{[this](int sig) { pass_on_stop(sig); }};
  void pass_on_stop(int sig);
};

void add_worker_command(CLI::App& app, int& exit_code);

}  // namespace troupe::cli
