// Multi-process training (actors/run/process_job.cpp): the same data-parallel job with its ranks in
// one process and as separate processes on loopback (and across two network namespaces) gives
// bitwise the same loss at every step; a worker killed mid-step is reported by rank 0 (rank and
// step) within the peer timeout and every process ends; a peer with the wrong secret or garbage
// bytes at the gate is refused and the job goes on; a hostile local client without the secret
// reaches no actor through any port the job listens on, and a BASP header claiming a 4 GiB
// payload makes no process allocate it. Every process started here is in one process group
// killed on every exit path (tcp_process_group.hpp).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <caf/io/all.hpp>

#include <set>

#include "actors/run/training_job.hpp"
#include "tests/actors/process_job_config.hpp"
#include "tests/comm/tcp_process_group.hpp"

namespace {

using troupe::test::process_group;
using clock_type = std::chrono::steady_clock;
const std::string helper = TROUPE_PROCESS_JOB_HELPER;

std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("troupe_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// Everything a child writes to stdout until it closes it, `until` appears in it (then up to
// the end of that line) or the timeout passes.
std::string read_all_output(int fd, int timeout_ms, const std::string& until = "") {
  std::string out;
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return out;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
    const auto at = until.empty() ? std::string::npos : out.find(until);
    if (at != std::string::npos && out.find('\n', at) != std::string::npos) return out;
  }
}

// The TCP ports process `pid` listens on: its socket inodes matched against /proc/net/tcp{,6}.
std::vector<int> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fd_dir, ec)) {
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<int> ports;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && inodes.count(inode))
        ports.push_back(static_cast<int>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

int64_t resident_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

int connect_loopback(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// Waits until rank 0's metrics.jsonl holds `steps` lines (training runs: every rank joined).
bool wait_for_steps(const std::string& dir, int steps) {
  const auto until = clock_type::now() + std::chrono::seconds(30);
  for (;;) {
    std::ifstream m(dir + "/metrics.jsonl");
    int lines = 0;
    for (std::string l; std::getline(m, l);) ++lines;
    if (lines >= steps) return true;
    if (clock_type::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Reaps the processes `pids[i]` for every i in `which` until all are gone or `limit` passed since
// `since`. For each: its exit code (128 + signal when killed; -1 while still running) and how many
// seconds after `since` it was gone.
struct reaped {
  std::vector<int> code;
  std::vector<double> after;
};
reaped reap(const std::vector<pid_t>& pids, const std::vector<size_t>& which, clock_type::time_point since,
            std::chrono::milliseconds limit) {
  reaped r{std::vector<int>(pids.size(), -1), std::vector<double>(pids.size(), -1)};
  size_t left = which.size();
  while (left > 0 && clock_type::now() - since < limit) {
    for (size_t i : which) {
      int status = 0;
      if (r.code[i] != -1 || ::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      r.code[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.after[i] = std::chrono::duration<double>(clock_type::now() - since).count();
      --left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return r;
}

std::vector<double> losses_in(const std::string& out) {
  std::vector<double> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("LOSS ", 0) == 0) v.push_back(std::strtod(line.c_str() + 5, nullptr));
  return v;
}

std::vector<std::string> rank_args(int rank, int world, const std::string& host, int port, const std::string& secret,
                                   const std::string& dir, int steps, double timeout, double straggle = 0,
                                   const std::string& mesh = "") {
  std::vector<std::string> a{helper, std::to_string(rank), std::to_string(world), host, std::to_string(port), secret, dir,
                             std::to_string(steps), std::to_string(timeout), std::to_string(straggle)};
  if (!mesh.empty()) a.push_back(mesh);
  return a;
}

// The PARAMS line of rank 0's output: the hash of its final parameters.
std::string params_in(const std::string& out) {
  const auto at = out.find("PARAMS ");
  return at == std::string::npos ? "" : out.substr(at + 7, 16);
}

// Starts a job of `world` processes on loopback (rank 0 first, on a free port) and returns rank 0's
// stdout, or -1 if rank 0 did not report its port.
int start_ranks(process_group& g, int world, const std::string& dir, int steps, double timeout, double straggle) {
  const int fd = g.spawn(rank_args(0, world, "127.0.0.1", 0, "s3cret", dir, steps, timeout, straggle), true);
  const int port = g.read_port(fd, 20000);
  if (port <= 0) return -1;
  for (int r = 1; r < world; ++r) g.spawn(rank_args(r, world, "127.0.0.1", port, "s3cret", dir, steps, timeout, straggle));
  return fd;
}

// Runs the job as `world` processes (optionally each behind a command prefix such as
// `ip netns exec X`) and returns rank 0's per-step losses; asserts every process exits 0.
std::vector<double> run_processes(int world, int steps, const std::string& dir,
                                  const std::vector<std::vector<std::string>>& prefix = {},
                                  const std::string& host = "127.0.0.1", const std::string& mesh = "",
                                  std::string* params = nullptr) {
  auto with = [&](int r, std::vector<std::string> a) {
    if (prefix.empty()) return a;
    std::vector<std::string> p = prefix[static_cast<size_t>(r)];
    p.insert(p.end(), a.begin(), a.end());
    return p;
  };
  process_group g;
  const int fd = g.spawn(with(0, rank_args(0, world, host, 0, "s3cret", dir, steps, 10, 0, mesh)), true);
  const int port = g.read_port(fd, 20000);
  EXPECT_GT(port, 0) << "rank 0 did not start";
  if (port <= 0) return {};
  for (int r = 1; r < world; ++r) g.spawn(with(r, rank_args(r, world, host, port, "s3cret", dir, steps, 10, 0, mesh)));
  const std::string out = read_all_output(fd, 60000);
  if (params) *params = params_in(out);
  EXPECT_EQ(g.wait_all(30000), 0) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
  return losses_in(out);
}

std::vector<double> run_in_process(int ranks, int steps, const std::string& dir) {
  return troupe::run_training(troupe::test::small_dp_config(ranks, dir, steps)).losses;
}

void expect_bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0) << "step " << i << ": " << a[i] << " vs " << b[i];
}

TEST(ProcessJob, FourProcessesOnLoopbackEqualFourRanksInOneProcessBitwise) {
  const std::string dir = temp_dir("mp4");
  const auto in_process = run_in_process(4, 6, dir + "/one");
  const auto processes = run_processes(4, 6, dir + "/four");
  ASSERT_EQ(in_process.size(), 6u);
  expect_bitwise_equal(in_process, processes);
  // Process 0 writes the metrics and their curves, the trace of a measured step over every rank
  // and its timeline; the other processes write nothing.
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/four")) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"curves.svg", "metrics.jsonl", "timeline.svg", "trace.json"}));
}

// The mesh in one process, then as each number of processes: the same losses and final
// parameters, bit for bit.
void expect_mesh_over_processes_bitwise(const troupe::sched::mesh& one, const std::vector<int>& worlds,
                                        const std::string& name, bool gpt = false, std::string variant = "") {
  const std::string dir = temp_dir(name);
  troupe::train_config cfg =
      gpt ? troupe::test::small_gpt_mesh_config(one, dir + "/one", 6) : troupe::test::small_mesh_config(one, dir + "/one", 6);
  std::string prefixes = variant;
  const troupe::test::job_variant v = troupe::test::take_variant(prefixes);
  troupe::test::apply(v, cfg);
  cfg.server_processes = 0;  // the reference holds its servers in its one process
  cfg.backend = troupe::net::backend_kind::tcp;  // and its groups, on the CPU
  cfg.devices.clear();
  const troupe::train_summary in_process = troupe::run_training(cfg);
  ASSERT_EQ(in_process.losses.size(), 6u);
  char want[17];
  std::snprintf(want, sizeof want, "%016llx", static_cast<unsigned long long>(troupe::test::bytes_hash(in_process.final_params)));
  for (int world : worlds) {
    std::string params;
    const auto losses =
        run_processes(world + v.server_processes, 6, dir + "/p" + std::to_string(world), {}, "127.0.0.1",
                      variant + (gpt ? "gpt:" : "") + troupe::sched::to_string(one), &params);
    SCOPED_TRACE(std::to_string(world) + " processes");
    if (v.fake_gpu) {  // a GPU's loss is summed from per-row pairs (loss_result::settle): the CPU's to rounding
      ASSERT_EQ(losses.size(), in_process.losses.size());
      for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], in_process.losses[i], 1e-6 * in_process.losses[i]) << i;
    } else {
      expect_bitwise_equal(in_process.losses, losses);
    }
    EXPECT_EQ(params, want) << "final parameters differ";
  }
}

TEST(ProcessJob, DpByPpMeshAsTwoAndAsFourProcessesEqualsTheSameMeshInOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "mesh22");
}

// dp 2 x pp 2 x tp 2: as 2 processes the tensor-parallel groups stay inside a process (the data-
// parallel rings cross); as 8 every tp group is a TCP ring of two processes driven by the stages'
// own threads. Both give the in-process bits (a sum of two floats has one order).
TEST(ProcessJob, DpByPpByTpMeshAsTwoAndAsEightProcessesEqualsTheSameMeshInOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 2, 1}, {2, 8}, "mesh222");
}

// The same for a GPT: attention split by heads, the vocabulary-parallel embedding and loss.
TEST(ProcessJob, GptOverDpByPpByTpAsTwoAndAsEightProcessesEqualsTheSameMeshInOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 2, 1}, {2, 8}, "gpt222", true);
}

// Context parallelism across processes: pp 2 x cp 2 as 2 processes puts each context pair's ranks
// in different processes (process 0 holds cp rank 0 of both stages) and as 4 crosses everything; dp 2 x tp 2 x
// cp 2 as 4 keeps the tp pairs in a process and sends the keys, values and their gradients of
// every context group over TCP. The in-process bits again.
TEST(ProcessJob, GptWithContextParallelismAcrossProcessesEqualsTheSameMeshInOneProcessBitwise) {
  troupe::sched::mesh pp_cp{1, 2, 1, 1};
  pp_cp.cp = 2;
  expect_mesh_over_processes_bitwise(pp_cp, {2, 4}, "gptppcp", true);
  troupe::sched::mesh dp_tp_cp{2, 1, 2, 1};
  dp_tp_cp.cp = 2;
  expect_mesh_over_processes_bitwise(dp_tp_cp, {4}, "gptdptpcp", true);
  troupe::sched::mesh every_axis{2, 2, 2, 1};  // 16 ranks; as 4 processes each holds one (dp, cp) place's pp x tp ranks
  every_axis.cp = 2;
  expect_mesh_over_processes_bitwise(every_axis, {4}, "gptdpppptcp", true);
  // The ring's steps and the all-to-all's blocks between processes: the same bits as in one.
  // (The small GPT's 2 heads split over cp 2 only without tp.)
  expect_mesh_over_processes_bitwise(every_axis, {4}, "gptdpppptcpring", true, "ring:");
  expect_mesh_over_processes_bitwise(pp_cp, {4}, "gptppcpa2a", true, "a2a:");
}

// A mixture of experts under ZeRO-2 over dp 2 x pp 2: every expert's gradients (some zero where
// a replica routed it no token) reduce-scattered over TCP rings between processes.
TEST(ProcessJob, MoeGptUnderZeroTwoOverDpByPpAsTwoAndFourProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "gptmoe", true, "moe:zero2:");
}

// Expert parallelism across processes: dp 4 x ep 2 as 2 processes keeps each expert group in a
// process and reduces the experts' gradients between them; as 4 every token's trip to its
// expert's owner and back is an all-to-all over TCP. dp 2 x pp 2 x ep 2 as 4: the groups of the
// stage holding the MoE blocks cross processes. The in-process bits again.
TEST(ProcessJob, MoeGptWithExpertParallelismAcrossProcessesEqualsOneProcessBitwise) {
  troupe::sched::mesh dp_ep{4, 1, 1, 1};
  dp_ep.ep = 2;
  expect_mesh_over_processes_bitwise(dp_ep, {2, 4}, "gptdpep", true, "moe:");
  troupe::sched::mesh dp_pp_ep{2, 2, 1, 1};
  dp_pp_ep.ep = 2;
  expect_mesh_over_processes_bitwise(dp_pp_ep, {4}, "gptdpppep", true, "moe:");
  // ZeRO 1 and 2: the experts' shards over the replicas holding them, reduce-scattered and
  // gathered between processes.
  expect_mesh_over_processes_bitwise(dp_ep, {4}, "gptdpepzero1", true, "moe:zero1:");
  expect_mesh_over_processes_bitwise(dp_ep, {4}, "gptdpepzero2", true, "moe:zero2:");
  // Every axis an MoE GPT takes at once, dp 2 x pp 2 x cp 2 (ring) x ep 2 as 4 processes: the
  // expert groups are the context pairs, their all-to-alls beside the ring's steps.
  troupe::sched::mesh every_axis{2, 2, 1, 1};
  every_axis.cp = 2;
  every_axis.ep = 2;
  expect_mesh_over_processes_bitwise(every_axis, {4}, "gptdpppcpep", true, "moe:ring:");
}

// ZeRO-2 with the optimizer on NVMe, its reduce-scatters and all-gathers on TCP rings between
// processes: the in-process bits again.
TEST(ProcessJob, ZeroTwoWithNvmeOffloadOverDpByPpAsTwoAndFourProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "zero2nvme", false, "zero2:nvme:");
}

// Parameter servers (BSP) in process 0, pushed to from every process through the middleman: the
// one-process BSP bits (which are collective DP's at dp 2; param_server.test.cpp).
TEST(ProcessJob, ParameterServersBspOverDpByPpAsTwoAndFourProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "bsp22", false, "bsp:");
}

// The same servers in 2 processes of their own (--servers 2), dealt round-robin: no mesh process
// holds one. Over 2 mesh processes each stage's server is in its own server process; over 1, the
// mesh is in one process and the servers are not. With 2 key ranges per stage the proxies are
// each mesh process's own, over servers in both server processes. The one-process BSP bits again.
TEST(ProcessJob, ParameterServersBspInTwoServerProcessesOverDpByPpEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 1}, "bspservers", false, "bsp:servers2:");
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2}, "bspservers_shards", false, "bsp:shards2:servers2:");
}

// "UPDATE ..." lines of rank 0's output (process_job_helper): the parameter servers' records.
std::vector<troupe::train_summary::server_update> updates_in(const std::string& out) {
  std::vector<troupe::train_summary::server_update> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("UPDATE ", 0) != 0) continue;
    std::istringstream f(line.substr(7));
    troupe::train_summary::server_update u;
    int held = 0;
    f >> u.server >> u.replica >> u.step >> u.unit >> u.version_read >> u.version_applied >> u.slowest >> held;
    u.held = held != 0;
    v.push_back(u);
  }
  return v;
}

// SSP (bound 1) with its 2 servers (a key range each) in 2 server processes and replica 1 a
// straggler: the records process 0 reads back from both server processes hold every push once,
// none of a round more than 1 ahead of the rounds complete when its replica read its parameters,
// and the fast replica was held.
TEST(ProcessJob, SspWithServerProcessesKeepsTheBoundOnEveryRecordTheServerProcessesSendBack) {
  const std::string dir = temp_dir("sspservers");
  const int steps = 12, world = 4, bound = 1;
  const std::string mesh = "ssp1:shards2:servers2:dp2.pp1.tp1";
  process_group g;
  const int fd = g.spawn(rank_args(0, world, "127.0.0.1", 0, "s3cret", dir, steps, 10, 20, mesh), true);
  const int port = g.read_port(fd, 20000);
  ASSERT_GT(port, 0) << "rank 0 did not start";
  for (int r = 1; r < world; ++r) g.spawn(rank_args(r, world, "127.0.0.1", port, "s3cret", dir, steps, 10, 20, mesh));
  const std::string out = read_all_output(fd, 60000);
  EXPECT_EQ(g.wait_all(30000), 0) << out;
  ASSERT_NE(out.find("OK"), std::string::npos) << out;
  const auto updates = updates_in(out);
  std::map<int32_t, std::set<int64_t>> units;  // by server
  int64_t held = 0;
  for (const auto& u : updates) {
    EXPECT_TRUE(units[u.server].insert(u.unit).second) << "server " << u.server << " applied unit " << u.unit << " twice";
    EXPECT_EQ(u.step, u.unit / 2) << "unit " << u.unit;
    EXPECT_LE(u.step - u.slowest, bound) << "server " << u.server << ": replica " << u.replica << " began a batch of round "
                                         << u.step << " while " << u.slowest << " rounds were complete";
    held += u.held;
  }
  ASSERT_EQ(units.size(), 2u) << "the records of both server processes' servers";
  for (const auto& [server, of] : units) {
    EXPECT_EQ(of.size(), static_cast<size_t>(2 * steps)) << "server " << server;
    EXPECT_EQ(*of.rbegin(), 2 * steps - 1) << "server " << server;
  }
  EXPECT_GT(held, 0) << "with a straggler, the fast replica should have been held";
}

TEST(ProcessJob, ZeroOneGptOverDpByTpAsTwoProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 1, 2, 1}, {2}, "zero1gpt", true, "zero1:");
}

// ZeRO-3 across processes: each stage's parameter units are all-gathered over a TCP ring of
// their own (beside the gradient ring of the same data-parallel group), in schedule order.
TEST(ProcessJob, ZeroThreeOverDpByPpAsTwoAndFourProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "zero3", false, "zero3:");
}

TEST(ProcessJob, ZeroThreeGptOverDpByTpAsTwoProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 1, 2, 1}, {2}, "zero3gpt", true, "zero3:");
}

// ZeRO-Infinity across processes: each rank's optimizer shard and parameter segments in files of
// its own process, every unit's piece read back ahead of its gather on the ring between processes.
TEST(ProcessJob, ZeroThreeWithParametersAndOptimizerOnNvmeOverDpByPpAsTwoAndFourProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "zero3both", false, "zero3:both:");
}

TEST(ProcessJob, ZeroThreeGptWithTheOptimizerOnNvmeOverDpByTpAsTwoProcessesEqualsOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 1, 2, 1}, {2}, "zero3nvmegpt", true, "zero3:nvme:");
}

// GPU stages over processes (fake GPUs launching in the stages' calls, as cuda_queue does): the
// data-parallel buckets cross through pinned host memory and the TCP rings; as 4 processes each
// activation and its gradient leave a GPU as a host copy (device_queue::stage_out; the link
// between processes reads host memory, and refuses a device tensor). The CPU's one-process
// parameters bit for bit, its losses to rounding.
TEST(ProcessJob, GpuStagesOverDpAndDpByPpAsTwoAndFourProcessesEqualTheCpuInOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 1, 1, 1}, {2}, "gpu2", false, "gpu:");
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "gpu22", false, "gpu:");
}

// --backend nccl: the data-parallel buckets stay on the devices and reduce there across
// processes, through an engine that spans them (Gloo over the fake GPUs' memory standing for
// NCCL, gloo_device_engine.hpp), the group's id made by its first member and fetched by the
// others from the group's store; the helper fails unless its groups joined it. Plain and ZeRO-2
// (the bucket reduce-scattered on the devices). The same bits.
TEST(ProcessJob, GpuStagesWithBackendNcclReduceOnTheDevicesAcrossProcessesAndEqualTheCpuInOneProcessBitwise) {
  if (!troupe::net::backend_built(troupe::net::backend_kind::nccl)) GTEST_SKIP() << "built without NCCL";
  if (!troupe::net::backend_built(troupe::net::backend_kind::gloo)) GTEST_SKIP() << "built without Gloo (the engine)";
  expect_mesh_over_processes_bitwise({2, 1, 1, 1}, {2}, "nccl2", false, "gpunccl:");
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {2, 4}, "nccl22", false, "gpunccl:");
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {4}, "ncclgpt22z2", true, "gpunccl:zero2:");
}

// --backend nccl with tensor parallelism across processes (a process per GPU, as torchrun
// launches): each tp group's sums run on the devices through the engine, joined from the stages'
// threads with the id from the group's store; over 2 processes tp 2 alone, over 4 dp 2 x tp 2
// (the replicas' buckets through the engine as well). The CPU's bits in one process.
TEST(ProcessJob, GpuTensorParallelismWithBackendNcclAcrossProcessesEqualsTheCpuInOneProcessBitwise) {
  if (!troupe::net::backend_built(troupe::net::backend_kind::nccl)) GTEST_SKIP() << "built without NCCL";
  if (!troupe::net::backend_built(troupe::net::backend_kind::gloo)) GTEST_SKIP() << "built without Gloo (the engine)";
  expect_mesh_over_processes_bitwise({1, 1, 2, 1}, {2}, "nccltp2", true, "gpunccl:");
  expect_mesh_over_processes_bitwise({2, 1, 2, 1}, {4}, "nccldptp", true, "gpunccl:");
}

// --backend nccl with the pipeline across processes: each pair of stages passes its activations
// and their gradients over the engine's links between the fake GPUs (a link per direction, the
// id and every tensor announced on the host transport), for the MLP and the GPT over 2 processes,
// and for dp 2 x pp 2 over 4 with the replicas' buckets through the engine too. The helper fails
// unless the links carried bytes; the results are the CPU's in one process.
TEST(ProcessJob, GpuPipelineWithBackendNcclPassesItsTensorsOverDeviceLinksAcrossProcessesAndEqualsTheCpu) {
  if (!troupe::net::backend_built(troupe::net::backend_kind::nccl)) GTEST_SKIP() << "built without NCCL";
  if (!troupe::net::backend_built(troupe::net::backend_kind::gloo)) GTEST_SKIP() << "built without Gloo (the engine)";
  expect_mesh_over_processes_bitwise({1, 2, 1, 1}, {2}, "ncclpp2", false, "gpunccl:");
  expect_mesh_over_processes_bitwise({1, 2, 1, 1}, {2}, "ncclgptpp2", true, "gpunccl:");
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {4}, "ncclgpt22", true, "gpunccl:");
}

// A pipeline link that cannot be joined (an engine without links) fails the job naming the link
// (from the end that reports first) and the reason, and both processes end, rather than waiting
// for tensors that never come.
TEST(ProcessJob, APipelineDeviceLinkThatCannotBeJoinedFailsTheJobNamingTheLinkAndEveryProcessEnds) {
  if (!troupe::net::backend_built(troupe::net::backend_kind::nccl)) GTEST_SKIP() << "built without NCCL";
  const std::string dir = temp_dir("nolinks");
  process_group g;
  const int fd = g.spawn(rank_args(0, 2, "127.0.0.1", 0, "s3cret", dir, 4, 3.0, 0, "gpunolinks:dp1.pp2.tp1"), true);
  const int port = g.read_port(fd, 20000);
  ASSERT_GT(port, 0) << "rank 0 did not start";
  g.spawn(rank_args(1, 2, "127.0.0.1", port, "s3cret", dir, 4, 3.0, 0, "gpunolinks:dp1.pp2.tp1"));
  const auto t0 = clock_type::now();
  const std::string out = read_all_output(fd, 30000, "FAILED");
  // Both ends fail to join; whichever reports first stops the job, so either direction is named.
  const std::string reason = ": joining it failed: gloo-devices has no links between devices";
  EXPECT_TRUE(out.find("pipeline link from rank 0 to rank 1" + reason) != std::string::npos ||
              out.find("pipeline link from rank 1 to rank 0" + reason) != std::string::npos)
      << out;
  const reaped r = reap(g.pids(), {0, 1}, t0, std::chrono::seconds(30));
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(r.code[i], 1) << "process " << i;
}

// The GPT (its activations and their gradients between processes), plain and with ZeRO-2 and
// ZeRO-3 (the shards and, for ZeRO-3, the units gathered on the host) over 4 processes.
TEST(ProcessJob, GpuGptPlainZeroTwoAndZeroThreeOverDpByPpAsFourProcessesEqualTheCpuInOneProcessBitwise) {
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {4}, "gpugpt22", true, "gpu:");
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {4}, "gpugpt22z2", true, "gpu:zero2:");
  expect_mesh_over_processes_bitwise({2, 2, 1, 1}, {4}, "gpugpt22z3", true, "gpu:zero3:");
}

TEST(ProcessJob, WedgedStageOfADpByPpMeshOverFourProcessesIsNamedByTheWatchdogAndEveryProcessEnds) {
  const std::string dir = temp_dir("wedged");
  process_group g;
  // Replica 1 sleeps 10 minutes before its first forward: rank 2 (dp 1, pp 0), in process 2.
  auto args = [&](int rank, int port) {
    auto a = rank_args(rank, 4, "127.0.0.1", port, "s3cret", dir, 4, 3.0, 600000, "dp2.pp2.tp1");
    a.push_back("1");  // watchdog seconds
    return a;
  };
  const int fd = g.spawn(args(0, 0), true);
  const int port = g.read_port(fd, 20000);
  ASSERT_GT(port, 0) << "rank 0 did not start";
  for (int r = 1; r < 4; ++r) g.spawn(args(r, port));
  const auto t0 = clock_type::now();
  const std::string out = read_all_output(fd, 30000, "FAILED");
  EXPECT_NE(out.find("watchdog: no progress for"), std::string::npos) << out;
  EXPECT_NE(out.find("mesh dp2.pp2.tp1/4"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 2 (dp 1, pp 0): no answer within 1 s (busy in a long action, or gone)"), std::string::npos)
      << out;
  // Its pipeline peer waits for the activation the wedged stage never sends.
  EXPECT_NE(out.find("rank 3 (dp 1, pp 1): action 0 of"), std::string::npos) << out;
  EXPECT_NE(out.find("waits for the activation of microbatch 0"), std::string::npos) << out;
  // Every process ends, the wedged one too (its computation never returns: the process is ended).
  const reaped r = reap(g.pids(), {0, 1, 2, 3}, t0, std::chrono::seconds(30));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.code[i], 1) << "process " << i;
}

TEST(ProcessJob, SigkillOfAWorkerMidStepIsReportedWithRankAndStepAndEveryProcessEnds) {
  const std::string dir = temp_dir("kill");
  const double timeout = 3.0;
  process_group g;
  // Rank 1 sleeps 50 ms before each step, so a step is always in flight when rank 2 dies.
  const int fd = start_ranks(g, 4, dir, 1000, timeout, 50);
  ASSERT_GE(fd, 0) << "rank 0 did not start";
  // Wait for a few steps in rank 0's metrics, then kill rank 2.
  ASSERT_TRUE(wait_for_steps(dir, 3)) << "no training steps";
  const std::vector<pid_t> pids = g.pids();
  ASSERT_EQ(pids.size(), 4u);
  const auto killed_at = clock_type::now();
  ::kill(pids[2], SIGKILL);
  const std::string out = read_all_output(fd, static_cast<int>(timeout * 1000) + 10000, "FAILED");
  const double reported_after = std::chrono::duration<double>(clock_type::now() - killed_at).count();
  EXPECT_NE(out.find("FAILED job stopped during step "), std::string::npos) << out;
  EXPECT_NE(out.find("rank 2 lost"), std::string::npos) << out;
  EXPECT_LT(reported_after, timeout) << out;
  std::printf("rank 0 reported %.3f s after the SIGKILL (peer timeout %.1f s)\n", reported_after, timeout);
  // Every process ends by itself (the survivors told by rank 0, or by losing it).
  const reaped r = reap(pids, {0, 1, 2, 3}, killed_at, std::chrono::milliseconds(static_cast<int>(timeout * 1000) + 10000));
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(r.code[i], -1) << "rank " << i << " still running";
  EXPECT_EQ(r.code[0], 1);
  EXPECT_EQ(r.code[2], 128 + SIGKILL);
  EXPECT_EQ(r.code[1], 1);  // a member of a failed job reports failure too
  EXPECT_EQ(r.code[3], 1);
}

// A worker that hangs (SIGSTOP: its connections stay open, it just never answers) is named at
// about the peer timeout, and rank 0 and the other worker are gone soon after it, not after
// twice the timeout (a collective blocked on the hung peer is interrupted, not waited out).
TEST(ProcessJob, HungWorkerIsNamedAndTheOthersExitWithinThePeerTimeoutAndASecond) {
  const std::string dir = temp_dir("hung");
  const double timeout = 2.0;
  process_group g;
  const int fd = start_ranks(g, 3, dir, 1000, timeout, 20);
  ASSERT_GE(fd, 0) << "rank 0 did not start";
  ASSERT_TRUE(wait_for_steps(dir, 3)) << "no training steps";
  const std::vector<pid_t> pids = g.pids();
  ASSERT_EQ(pids.size(), 3u);
  const auto stopped_at = clock_type::now();
  ::kill(pids[1], SIGSTOP);
  const std::string out = read_all_output(fd, 20000, "FAILED");
  EXPECT_NE(out.find("rank 1 stopped answering"), std::string::npos) << out;
  const reaped r = reap(pids, {0, 2}, stopped_at, std::chrono::seconds(15));
  ::kill(pids[1], SIGKILL);
  std::printf("rank 0 gone %.2f s, rank 2 gone %.2f s after rank 1 hung (peer timeout %.1f s)\n", r.after[0],
              r.after[2], timeout);
  for (size_t i : {size_t{0}, size_t{2}}) {
    EXPECT_NE(r.code[i], -1) << "rank " << i << " still running";
    EXPECT_LT(r.after[i], timeout + 1.0) << "rank " << i;
  }
}

TEST(ProcessJob, WrongSecretAndGarbageAtTheGateAreRefusedAndTheJobGoesOn) {
  const std::string dir = temp_dir("secret");
  process_group g;
  const int fd = g.spawn(rank_args(0, 2, "127.0.0.1", 0, "s3cret", dir, 4, 10), true);
  const int port = g.read_port(fd, 20000);
  ASSERT_GT(port, 0);
  {  // garbage: a few bytes that are no answer to the challenge, then close (a truncated frame)
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const char junk[] = "GET / HTTP/1.0\r\n";
    ASSERT_GT(::write(s, junk, sizeof junk), 0);
    ::close(s);
  }
  process_group bad;
  const int bad_fd = bad.spawn(rank_args(1, 2, "127.0.0.1", port, "guess", dir, 4, 10), true);
  const std::string bad_out = read_all_output(bad_fd, 20000);
  EXPECT_EQ(bad.wait_all(10000), 1);
  EXPECT_NE(bad_out.find("did not accept our answer (is the secret the job's?)"), std::string::npos) << bad_out;
  g.spawn(rank_args(1, 2, "127.0.0.1", port, "s3cret", dir, 4, 10));
  const std::string out = read_all_output(fd, 60000);
  EXPECT_EQ(g.wait_all(20000), 0) << out;
  EXPECT_EQ(losses_in(out).size(), 4u) << out;
}

// A local process that never saw the secret, as CAF's own client and as raw bytes, against every
// port rank 0 and a worker listen on while they train: it obtains no actor handle, a BASP
// header announcing a 4 GiB client handshake allocates nothing, and the job ends normally.
TEST(ProcessJob, ClientWithoutTheSecretReachesNoActorOnAnyPortOfRankZeroOrAWorker) {
  const std::string dir = temp_dir("hostile");
  process_group g;
  const int fd = start_ranks(g, 2, dir, 80, 10, 50);
  ASSERT_GE(fd, 0) << "rank 0 did not start";
  ASSERT_TRUE(wait_for_steps(dir, 2)) << "no training steps";
  const std::vector<pid_t> pids = g.pids();
  ASSERT_EQ(pids.size(), 2u);
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  int probed = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    for (int port : listening_ports(pids[r])) {
      ++probed;
      std::printf("rank %zu listens on %d\n", r, port);
      auto handle = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port));
      EXPECT_FALSE(handle) << "rank " << r << " port " << port << " gave an actor to a client without the secret";
      const int64_t before = resident_kib(pids[r]);
      const int s = connect_loopback(port);
      if (s < 0) continue;  // closed meanwhile
      // A BASP client handshake header (32 bytes): operation 1, payload of 0xFFFFFFF0 bytes.
      uint8_t header[32] = {1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xF0};
      EXPECT_EQ(::write(s, header, sizeof header), static_cast<ssize_t>(sizeof header));
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      const int64_t after = resident_kib(pids[r]);
      ::close(s);
      EXPECT_LT(after - before, 64 * 1024) << "rank " << r << " port " << port << " grew from " << before
                                           << " KiB to " << after << " KiB";
    }
  }
  EXPECT_GE(probed, 1) << "rank 0's gate must be among the ports";
  const std::string out = read_all_output(fd, 60000);
  EXPECT_EQ(g.wait_all(20000), 0) << out;
  EXPECT_EQ(losses_in(out).size(), 80u) << out;
}

// Fifty connections that never answer the gate's challenge (no secret needed to open them) do not
// keep a real worker out: handshakes run concurrently, each with its own deadline.
TEST(ProcessJob, FiftySilentConnectionsAtTheGateDoNotDelayARealWorker) {
  const std::string dir = temp_dir("silent");
  process_group g;
  const int fd = g.spawn(rank_args(0, 2, "127.0.0.1", 0, "s3cret", dir, 4, 10), true);
  const int port = g.read_port(fd, 20000);
  ASSERT_GT(port, 0);
  std::vector<int> silent;
  for (int i = 0; i < 50; ++i) silent.push_back(connect_loopback(port));
  const auto t0 = clock_type::now();
  g.spawn(rank_args(1, 2, "127.0.0.1", port, "s3cret", dir, 4, 10));
  const std::string out = read_all_output(fd, 60000);
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  for (int c : silent) ::close(c);
  EXPECT_EQ(g.wait_all(20000), 0) << out;
  EXPECT_EQ(losses_in(out).size(), 4u) << out;
  EXPECT_LT(s, 10.0) << "the worker waited behind the silent connections";
}

// Two network namespaces made by this test, joined by a veth pair with addresses from
// 192.0.2.0/24 (RFC 5737 TEST-NET-1) that exist only inside them. Skipped without root/ip netns.
TEST(ProcessJob, TwoProcessesInTwoNetworkNamespacesEqualOneProcess) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for ip netns";
  const std::string tag = std::to_string(::getpid() % 100000);
  const std::string a = "tpj_a" + tag, b = "tpj_b" + tag, va = "tpja" + tag, vb = "tpjb" + tag;
  auto sh = [](const std::string& c) { return std::system((c + " >/dev/null 2>&1").c_str()) == 0; };
  struct cleanup {
    std::string a, b;
    ~cleanup() { (void)std::system(("ip netns del " + a + " 2>/dev/null; ip netns del " + b + " 2>/dev/null").c_str()); }
  } guard{a, b};
  if (!sh("ip netns add " + a) || !sh("ip netns add " + b)) GTEST_SKIP() << "ip netns is not available";
  ASSERT_TRUE(sh("ip link add " + va + " type veth peer name " + vb));
  ASSERT_TRUE(sh("ip link set " + va + " netns " + a) && sh("ip link set " + vb + " netns " + b));
  ASSERT_TRUE(sh("ip -n " + a + " addr add 192.0.2.1/24 dev " + va) && sh("ip -n " + b + " addr add 192.0.2.2/24 dev " + vb));
  for (const auto& [ns, dev] : {std::pair{a, va}, std::pair{b, vb}})
    ASSERT_TRUE(sh("ip -n " + ns + " link set " + dev + " up") && sh("ip -n " + ns + " link set lo up"));
  const std::string dir = temp_dir("netns");
  const auto in_process = run_in_process(2, 4, dir + "/one");
  const auto processes = run_processes(2, 4, dir + "/two",
                                       {{"/usr/sbin/ip", "netns", "exec", a}, {"/usr/sbin/ip", "netns", "exec", b}},
                                       "192.0.2.1");
  expect_bitwise_equal(in_process, processes);
}

}  // namespace
