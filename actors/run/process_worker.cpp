// A process other than 0, as a placement of run_job: it reaches process 0 through the gate (under
// TLS through a channel that lives as long as the connection), is answered by the job
// hub, spawns its part, and answers the hub's pings through its worker hub until job_end. Its
// part is a block of ranks (a worker) or, with --servers, a share of the parameter servers.
#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>

#include "actors/actors.hpp"
#include "actors/run/membership_plan.hpp"
#include "actors/compose/mesh_job.hpp"
#include "actors/process/net_actors.hpp"
#include "actors/run/process_parts.hpp"

namespace troupe::process_detail {

namespace {

class joining_process : public placement {
 public:
  joining_process(const train_config& cfg, const prepared_job& job, std::string who)
      : cfg_(cfg), pc_(cfg_.process), job_(job), who_(std::move(who)) {}

  void configure(caf::actor_system_config& sys_cfg) override {
    upstream_ = net::connect_through_gate(pc_.master_addr, pc_.master_port, pc_.secret,
                                          static_cast<uint32_t>(pc_.index), join_ms());
    local_host_ = net::local_host(upstream_.get());
    process_detail::configure(sys_cfg);
  }

  std::string wait(caf::actor_system& sys) override {
    if (!worker_) return "";  // admitted into the next membership: nothing ran in this one
    {
      caf::scoped_actor self{sys};
      self->wait_for(worker_);
    }
    ended();
    return report_->empty() ? std::string() : who_ + ": " + *report_;
  }

  void stop(caf::actor_system& sys) override {
    spdlog::debug("{}: stopping its actors", who_);
    if (worker_) local_.push_back(worker_);
    stop_all(sys, local_);
    spdlog::debug("{}: actors stopped; shutting the actor system down", who_);
    drain_.drain(sys);  // before ~actor_system (see middleman_link.hpp)
    release();
    local_.clear();
    worker_ = hub_ = nullptr;
    joined_ = {};
    tls_.reset();
  }

  train_summary summary() override { return {}; }

 protected:
  // An elastic job's membership change, as rank 0 told it at the job's end: the next
  // membership's config, and the image this process goes on from; none when it left the job.
  std::shared_ptr<const resume_point> next_config() {
    const job_end e = std::exchange(*ended_, job_end{});
    if (e.processes.empty()) return nullptr;
    if (cfg_.kill_in_regroup == first_index_) {  // the injected failure during a regroup
      spdlog::warn("fault injection: process {} kills itself as it regroups", first_index_);
      ::raise(SIGKILL);
    }
    const std::vector<membership_event> at = parse_membership_events(e.events, "rank 0's membership change");
    // Rank 0's word on the next membership, one replica per process (an admitted process's own
    // config is its guess at it).
    membership_plan next;
    next.cfg = cfg_;
    next.cfg.mesh.dp = static_cast<int>(e.processes.size());
    next.cfg.mesh.processes = static_cast<int>(e.processes.size());
    const auto me = std::find(e.processes.begin(), e.processes.end(), cfg_.process.index);
    next.member = me != e.processes.end();
    next.cfg.process.index = next.member ? static_cast<int>(me - e.processes.begin()) : -1;
    train_config before = cfg_;  // the membership the events leave, as rank 0 had it
    before.mesh.dp = next.cfg.mesh.dp - replicas_after(at, 0);  // replicas_after from 0: the net change
    log_membership(nullptr, e.step, at, before, next.cfg);
    if (!next.member) {
      spdlog::info("{}: its replica left the job after step {}; this process is done", who_, e.step);
      return nullptr;
    }
    auto point = std::make_shared<resume_point>();
    point->manifest = checkpoint_base(cfg_, job_.model, job_.steps_per_epoch, job_.vocabulary);
    point->manifest.step = e.step;
    point->manifest.optimizer_steps = e.optimizer_steps;
    point->image = e.image;
    cfg_ = std::move(next.cfg);
    who_ = "rank " + std::to_string(cfg_.process.index);
    return point;
  }

  int join_ms() const { return static_cast<int>(to_ms(pc_.join_timeout_seconds).count()); }

  // Asks the job hub to be admitted, with the config every process must share.
  void join(caf::actor_system& sys) {
    net::socket_fd to_hub = std::move(upstream_);
    if (use_tls(pc_)) {
      try {
        tls_ = std::make_unique<net::tls_channel>(std::move(to_hub), net::tls_channel::side::connect,
                                                  tls_context_for(pc_), join_ms());
      } catch (const net::net_error& e) {
        throw std::runtime_error(who_ + ": cannot reach rank 0: " + e.what());
      }
      to_hub = tls_->take_plain();
    }
    hub_ = remote_actor_over(sys, std::move(to_hub), milliseconds(join_ms()));
    std::string refused;
    {
      caf::scoped_actor self{sys};
      self->request(hub_, milliseconds(join_ms()), join_request{pc_.index, describe_for_join(cfg_, job_), pc_.job_id})
          .receive([&](join_reply& r) { joined_ = std::move(r); }, [&](caf::error& e) { refused = sys.render(e); });
    }
    if (!refused.empty()) throw std::runtime_error(who_ + ": rank 0 refused us: " + refused);
    if (!joined_.admitted.processes.empty()) {  // asked to join a running elastic job: taken in
      *ended_ = joined_.admitted;
      spdlog::info("{}: admitted into the running job after step {}", who_, joined_.admitted.step);
    }
  }
  bool admitted() const { return !ended_->processes.empty(); }

  // The worker hub that answers process 0 for `stages`: its pings, the addresses, job_end.
  void spawn_hub(caf::actor_system& sys, worker_hub_args wa) {
    wa.rank = pc_.index;
    wa.job_hub = hub_;
    wa.peer_timeout = to_ms(pc_.peer_timeout_seconds);
    wa.report = report_;
    wa.ended = ended_;
    worker_ = spawn_worker_hub(sys, std::move(wa));
  }

  // Once the worker hub has ended, before a failure is handled.
  virtual void ended() {}
  // Drops the subclass's handles into the actor system.
  virtual void release() {}

  train_config cfg_;  // an elastic job's: its mesh and this process's index change with its membership
  const process_config& pc_;
  const prepared_job& job_;
  std::string who_;
  std::string local_host_;  // the interface that reaches process 0
  std::shared_ptr<std::string> report_ = std::make_shared<std::string>();
  std::shared_ptr<job_end> ended_ = std::make_shared<job_end>();  // rank 0's last word
  const int first_index_ = pc_.index;  // this process's index when the job started
  join_reply joined_;
  std::vector<caf::actor> local_;  // every actor this process spawned but its worker hub
  middleman_drain drain_;          // the detached actors, watched before their handles leave the process

 private:
  net::socket_fd upstream_;
  std::unique_ptr<net::tls_channel> tls_;  // under TLS: carries the middleman's connection to rank 0
  caf::actor hub_, worker_;
};

class worker_process final : public joining_process {
 public:
  worker_process(const train_config& cfg, const prepared_job& job, const job_plan& plan,
                 std::shared_ptr<net::mpi_groups> mpi, const rank_devices& device_of, const device_engines& engines)
      : joining_process(cfg, job, "rank " + std::to_string(cfg.process.index)), plan_(plan), mpi_(std::move(mpi)),
        device_of_(device_of), engines_(engines) {}

  bool next_membership() override {
    std::shared_ptr<const resume_point> image = next_config();
    if (!image) return false;
    plan_ = plan_job(cfg_, job_);
    plan_.resume = std::move(image);
    return true;
  }

  void start(caf::actor_system& sys) override {
    join(sys);
    if (admitted()) return;  // its part begins with the next membership
    // --servers: every shard's server is in a server process; sharded slots get proxies here.
    std::vector<caf::actor> by_slot = joined_.servers, proxies;
    if (!joined_.shards.empty())
      by_slot = servers_by_slot(sys, plan_, server_layout(cfg_, plan_), joined_.shards, proxies);
    auto links = links_ = std::make_shared<mesh_links>(
        sys, plan_, links_args(cfg_, pc_.index, local_host_, std::move(mpi_), engines_));
    ranks_ = spawn_ranks(sys, cfg_, job_, plan_, cfg_.mesh.ranks_of_process(pc_.index), joined_.coordinator, *links, {},
                         by_slot, joined_.dispenser, device_of_);
    ranks_.engines = links_->engines();
    ranks_.members.insert(ranks_.members.end(), proxies.begin(), proxies.end());
    links_->connect_pipelines(ranks_.stages, joined_.coordinator);
    for (const auto& a : ranks_.detached) drain_.watch(a);
    for (const auto& a : links_->detached()) drain_.watch(a);
    local_ = ranks_.members;
    local_.insert(local_.end(), links_->actors().begin(), links_->actors().end());
    worker_hub_args wa;
    wa.stages = ranks_.stages;
    wa.serves = links_->serves();
    wa.collectives = links_->collectives();
    wa.on_addresses = [links](const mesh_addresses& a) { links->apply(a); };
    spawn_hub(sys, std::move(wa));
  }

  void abort_waits(const std::string& why) override { abort_group_waits(ranks_, why); }

 private:
  void ended() override {
    if (links_) links_->stop();
  }
  void release() override {
    if (links_) links_->stop();
    links_.reset();
    ranks_ = {};
  }

  job_plan plan_;
  std::shared_ptr<net::mpi_groups> mpi_;
  rank_devices device_of_;
  device_engines engines_;
  std::shared_ptr<mesh_links> links_;
  rank_actors ranks_;
};

// A process of parameter servers (--servers; its index is past the mesh's processes): its share
// of server_layout's servers, dealt round-robin over the server processes, reported to the job
// hub. Their records are kept here; process 0 asks for them at the end (server_records_atom).
class server_process final : public joining_process {
 public:
  server_process(const train_config& cfg, const prepared_job& job, const job_plan& plan)
      : joining_process(cfg, job, "parameter server process " + std::to_string(cfg.process.index)), plan_(plan) {}

  void start(caf::actor_system& sys) override {
    join(sys);
    const std::vector<server_shard> layout = server_layout(cfg_, plan_);
    const size_t mine = static_cast<size_t>(pc_.index - cfg_.mesh.processes);
    worker_hub_args wa;
    for (size_t i = mine; i < layout.size(); i += static_cast<size_t>(cfg_.server_processes)) {
      wa.stages.push_back(spawn_server_shard(sys, cfg_, plan_, layout[i],
                                             std::make_shared<std::vector<train_summary::server_update>>()));
      wa.server_ids.push_back(layout[i].id);
      drain_.watch(wa.stages.back());
      local_.push_back(wa.stages.back());
    }
    spdlog::info("parameter server process {}: servers {}", pc_.index, fmt::join(wa.server_ids, ", "));
    wa.server_process = true;
    spawn_hub(sys, std::move(wa));
  }

  void abort_waits(const std::string&) override {}  // a server waits on no group

 private:
  const job_plan& plan_;
};

}  // namespace

std::unique_ptr<placement> worker_placement(const train_config& cfg, const prepared_job& job, const job_plan& plan,
                                            std::shared_ptr<net::mpi_groups> mpi, const rank_devices& device_of,
                                            const device_engines& engines) {
  return std::make_unique<worker_process>(cfg, job, plan, std::move(mpi), device_of, engines);
}

std::unique_ptr<placement> server_placement(const train_config& cfg, const prepared_job& job, const job_plan& plan) {
  return std::make_unique<server_process>(cfg, job, plan);
}

}  // namespace troupe::process_detail
