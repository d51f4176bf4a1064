// Process 0 of a job over several processes, as a placement of run_job: its block of ranks, the
// coordinator, the evaluator, the parameter servers (or, with --servers, a forwarder per slot),
// the job hub that admits the other processes through the control gate, and the verdict that
// names a lost process when the job stops early.
#include <caf/io/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <thread>

#include "actors/actors.hpp"
#include "actors/observe/server_report.hpp"
#include "actors/run/membership_plan.hpp"
#include "actors/compose/mesh_job.hpp"
#include "actors/observe/metrics_log.hpp"
#include "actors/process/net_actors.hpp"
#include "actors/run/process_parts.hpp"

namespace troupe::process_detail {

namespace {

// --servers: the servers in processes of their own, as process 0 learns them (on the job hub's
// thread): their handles in server_layout order (for the records at the end), and the proxies
// of sharded slots this process spawned for its own stages.
struct remote_servers {
  std::mutex mu;
  std::vector<caf::actor> shards, proxies;
};

class process_zero final : public placement {
 public:
  process_zero(const train_config& cfg, const prepared_job& job, const job_plan& plan,
               std::shared_ptr<net::mpi_groups> mpi, const rank_devices& device_of, const device_engines& engines)
      : cfg_(cfg), pc_(cfg_.process), job_(job), plan_(plan), mpi_(std::move(mpi)), device_of_(device_of),
        engines_(engines), out_(cfg, job) {}

  void configure(caf::actor_system_config& sys_cfg) override { process_detail::configure(sys_cfg); }

  void start(caf::actor_system& sys) override {
    links_ = std::make_shared<mesh_links>(sys, plan_, links_args(cfg_, 0, pc_.master_addr, std::move(mpi_), engines_));
    coordinator_ = spawn_coordinator(sys, coordinator_args_for(cfg_, job_, plan_, out_));
    spawn_servers_here(sys);
    auto links = links_;
    ranks_ = spawn_ranks(sys, cfg_, job_, plan_, cfg_.mesh.ranks_of_process(0), coordinator_, *links, {},
                         servers_.by_slot, servers_.dispenser, device_of_);
    ranks_.engines = links_->engines();  // a failed job ends their waits (abort_group_waits)
    for (const auto& a : servers_.actors) ranks_.members.push_back(a), ranks_.detached.push_back(a);
    links_->connect_pipelines(ranks_.stages, coordinator_);
    evaluator_ = spawn_evaluator(sys, job_.model, cfg_.seed, ranks_.loaders.at(0), coordinator_);
    for (const auto& a : ranks_.detached) drain_.watch(a);  // before their handles leave the process
    for (const auto& a : links_->detached()) drain_.watch(a);
    drain_.watch(evaluator_);
    local_ = ranks_.members;
    local_.insert(local_.end(), links_->actors().begin(), links_->actors().end());
    local_.push_back(evaluator_);
    caf::anon_send(coordinator_, watch_atom::value, links_->collectives());
    const process_endpoints serves = links_->serves();  // listening before any process can ask where
    hub_ = spawn_job_hub(sys, hub_args(sys, serves));
    open_gate(sys);
  }

  std::string wait(caf::actor_system& sys) override {
    caf::scoped_actor self{sys};
    self->wait_for(coordinator_);
    go_on_without_abandoned();
    const train_summary& summary = *out_.summary;
    bool ok = out_.failure->what.empty() && (summary.steps == job_.total_steps || summary.regroup);
    std::string report;
    if (ok && cfg_.server_processes > 0) {
      // The records stay where the servers are: read them before job_end lets those processes go.
      std::vector<caf::actor> shards;
      {
        std::lock_guard<std::mutex> lock(remote_->mu);
        shards = std::exchange(remote_->shards, {});
      }
      for (const auto& a : shards)
        self->request(a, to_ms(pc_.peer_timeout_seconds), server_records_atom::value)
            .receive([&](server_records& r) { remote_records_.insert(remote_records_.end(), r.updates.begin(), r.updates.end()); },
                     [&](caf::error& e) {
                       if (ok) report = "the job ended, but a parameter server's records did not come back: " + sys.render(e);
                       ok = false;
                     });
    }
    if (!ok && report.empty()) report = "job stopped during step " + std::to_string(summary.steps) + ": " + cause();
    job_end end;
    end.ok = ok;
    end.report = report;
    if (ok && summary.regroup) {
      end = regroup_end(*summary.regroup, new_events());
      // The processes that go on join the next membership's hub: the gate holds them till it exists.
      gate_->set_admit({});
    }
    self->request(hub_, std::chrono::seconds(10), end).receive([](bool) {}, [](caf::error&) {});
    links_->stop();  // a collective or a link blocked on a lost peer returns now, not at its timeout
    return ok ? std::string() : report;
  }

  void abort_waits(const std::string& why) override { abort_group_waits(ranks_, why); }

  void stop(caf::actor_system& sys) override {
    if (links_) links_->stop();
    stop_all(sys, local_);
    stop_all(sys, {hub_, coordinator_});
    {
      std::lock_guard<std::mutex> lock(remote_->mu);
      remote_->shards.clear();
      stop_all(sys, std::exchange(remote_->proxies, {}));
    }
    drain_.drain(sys);  // before ~actor_system (see middleman_link.hpp)
    if (gate_) gate_->set_admit({});  // still listening: an elastic job's next membership admits there
    tls_->clear();
    links_.reset();
    ranks_ = {};
    local_.clear();
    server_updates_ = servers_.updates;
    dispensed_ = servers_.dispensed;
    servers_ = {};
    coordinator_ = hub_ = evaluator_ = nullptr;
  }

  // An elastic job's next membership: fewer processes, renumbered; the same gate, which never
  // stopped listening, the workers already started.
  bool next_membership() override {
    auto& sum = *out_.summary;
    if (!sum.regroup) return false;
    const std::shared_ptr<const resume_point> image = std::exchange(sum.regroup, nullptr);
    const train_config before = cfg_;
    cfg_ = std::move(next_.cfg);
    cfg_.process.master_port = gate_->port();
    cfg_.process.on_listening = nullptr;
    log_membership(out_.log.get(), image->manifest.step, next_events_, before, cfg_);
    plan_ = plan_job(cfg_, job_);
    plan_.resume = image;
    *out_.record = job_record{};
    return true;
  }

  train_summary summary() override {
    train_summary s = finish_summary(cfg_, plan_, out_);
    for (const auto& u : server_updates_) s.server_updates.insert(s.server_updates.end(), u->begin(), u->end());
    s.server_updates.insert(s.server_updates.end(), remote_records_.begin(), remote_records_.end());
    if (dispensed_) s.dispensed = *dispensed_;
    if (const std::string servers = summarize_servers(cfg_, s); !servers.empty()) spdlog::info("{}", servers);
    return s;
  }

 private:
  // The membership events made since the last change was told.
  std::vector<membership_event> new_events() {
    const auto& all = out_.summary->membership;
    std::vector<membership_event> out(all.begin() + static_cast<long>(std::min(events_told_, all.size())), all.end());
    events_told_ = all.size();
    return out;
  }

  // Newcomers the hub gave up on (job_hub_args::newcomers): this membership never trained, and
  // the next one is this one without them (each a lost replica at the step it began from), from
  // the same state.
  void go_on_without_abandoned() {
    std::vector<int32_t> gone;
    {
      std::lock_guard<std::mutex> lock(verdict_->mu);
      gone = std::exchange(verdict_->abandoned, {});
    }
    if (gone.empty() || !out_.failure->what.empty() || !plan_.resume) return;
    std::sort(gone.rbegin(), gone.rend());  // the last first: each event's place is before it
    auto& sum = *out_.summary;
    for (int32_t p : gone) sum.membership.push_back({plan_.resume->manifest.step, membership_change::lose, p});
    sum.regroup = plan_.resume;
  }

  // The membership change the workers are told at the job's end: the next processes (each one's
  // index now), the events and the image, which every process goes on from.
  job_end regroup_end(const resume_point& image, const std::vector<membership_event>& at) {
    next_ = plan_membership(cfg_, at);
    next_events_ = at;
    // A process admitted by this change: given up on if it does not join the next membership.
    newcomers_.clear();
    for (size_t i = 0; i < next_.processes.size(); ++i)
      if (next_.processes[i] >= cfg_.mesh.processes) newcomers_.push_back(static_cast<int32_t>(i));
    job_end e;
    e.ok = true;
    e.processes.assign(next_.processes.begin(), next_.processes.end());
    e.events = to_text(at);
    e.step = image.manifest.step;
    e.optimizer_steps = image.manifest.optimizer_steps;
    e.image = image.image;  // frozen: shared, not copied
    return e;
  }

  // The servers here (the workers get their handles), or with --servers a forwarder per slot here,
  // pointed at the slot's servers once their processes have joined.
  void spawn_servers_here(caf::actor_system& sys) {
    if (cfg_.server_processes == 0) {
      servers_ = spawn_servers(sys, cfg_, plan_);
      return;
    }
    if (dispenses_batches(cfg_)) spawn_dispenser(sys, plan_, servers_);
    servers_.by_slot.resize(plan_.stage_params.size());
    for (size_t slot = 0; slot < plan_.stage_params.size(); ++slot)
      if (plan_.stage_params[slot] > 0) servers_.actors.push_back(servers_.by_slot[slot] = spawn_server_forwarder(sys));
  }

  job_hub_args hub_args(caf::actor_system& sys, const process_endpoints& serves) {
    const bool servers_apart = cfg_.server_processes > 0;
    job_hub_args ha;
    ha.world = cfg_.mesh.processes + cfg_.server_processes;
    ha.mesh = cfg_.mesh;
    ha.config = describe_for_join(cfg_, job_);
    ha.peer_timeout = to_ms(pc_.peer_timeout_seconds);
    ha.join_timeout = to_ms(pc_.join_timeout_seconds);
    ha.started_here.assign(pc_.started_here.begin(), pc_.started_here.end());
    ha.job_id = pc_.job_id;
    ha.coordinator = coordinator_;
    if (!servers_apart) ha.servers = servers_.by_slot;
    ha.dispenser = servers_.dispenser;
    if (servers_apart) {
      const std::vector<server_shard> layout = server_layout(cfg_, plan_);
      for (const auto& sh : layout) ha.server_ids.push_back(sh.id);
      ha.on_servers = [&sys, &plan = plan_, layout, remote = remote_,
                       forwarders = servers_.by_slot](const std::vector<caf::actor>& shards) {
        std::vector<caf::actor> proxies;
        const std::vector<caf::actor> by_slot = servers_by_slot(sys, plan, layout, shards, proxies);
        for (size_t slot = 0; slot < forwarders.size(); ++slot)
          if (forwarders[slot]) caf::anon_send(forwarders[slot], server_target_atom::value, by_slot.at(slot));
        std::lock_guard<std::mutex> lock(remote->mu);
        remote->shards = shards;
        remote->proxies = std::move(proxies);
      };
    }
    ha.local_stages = ranks_.stages;
    ha.evaluator = evaluator_;
    ha.serves = serves;
    ha.on_addresses = [links = links_, started = pc_.on_training_start](const mesh_addresses& a) {
      links->apply(a);
      if (started) started();  // every process joined: training starts now
    };
    ha.local_members = local_;
    ha.verdict = verdict_;
    ha.disconnect = [connections = connections_] { connections->shutdown_all(); };
    ha.exited_process = pc_.exited_process;
    ha.elastic = cfg_.elastic;
    ha.newcomers = std::exchange(newcomers_, {});
    if (cfg_.elastic) {  // a newcomer describes the job one replica (one process) larger
      train_config larger = cfg_;
      ++larger.mesh.dp;
      ++larger.mesh.processes;
      ha.admit_config = describe_for_join(larger, job_);
    }
    return ha;
  }

  // The middleman gets no port: the gate hands it each admitted socket (serve_over), under TLS
  // the plain end of the connection's TLS channel, once the peer's certificate passed. The gate
  // is opened once and listens for the whole job: a later membership of an elastic job points it
  // at its own actor system and hub (were it closed and bound again, another program could take
  // the port in between, and the job could not go on).
  void open_gate(caf::actor_system& sys) {
    const int auth_ms = static_cast<int>(std::min<int64_t>(5000, to_ms(pc_.peer_timeout_seconds).count()));
    net::gate_server::admit_fn admit = [this, &sys, auth_ms, ctx = tls_context_for(pc_)](net::socket_fd fd, uint32_t,
                                                                                         const std::string&) {
      connections_->add(fd.get());
      if (ctx) {  // on this connection's own thread: a silent peer's handshake holds up nobody else's
        auto channel = std::make_unique<net::tls_channel>(std::move(fd), net::tls_channel::side::accept, ctx, auth_ms);
        fd = channel->take_plain();
        tls_->add(std::move(channel));
      }
      std::lock_guard<std::mutex> lock(serve_mu_);  // one new scribe at a time into the middleman
      serve_over(sys, std::move(fd), hub_);
    };
    if (gate_) {
      gate_->set_admit(std::move(admit));
      return;
    }
    gate_ = std::make_unique<net::gate_server>(pc_.master_addr, pc_.master_port, pc_.secret, std::move(admit), auth_ms);
    spdlog::info("process 0 of {}: control gate on {}:{}{}, job id \"{}\"", cfg_.mesh.processes, pc_.master_addr,
                 gate_->port(), use_tls(pc_) ? " (TLS)" : "", pc_.job_id);
    if (pc_.on_listening) pc_.on_listening(gate_->port());
  }

  // A rank that died shows as a closed connection within milliseconds, a silent one within the
  // peer timeout: the hub gets that long to name it before the symptom is reported instead. The
  // coordinator's own error (a full disk) is a cause already: no rank to wait for.
  std::string cause() {
    const auto deadline = std::chrono::steady_clock::now() + to_ms(pc_.peer_timeout_seconds * 1.25);
    while (!out_.failure->own && std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(verdict_->mu);
        if (!verdict_->first.empty()) break;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    std::lock_guard<std::mutex> lock(verdict_->mu);
    for (const auto& l : verdict_->later) spdlog::warn("also: {}", l);
    return out_.failure->own || verdict_->first.empty() ? out_.failure->what : verdict_->first;
  }

  train_config cfg_;  // an elastic job's: its mesh and processes change with its membership
  const process_config& pc_;
  const prepared_job& job_;
  job_plan plan_;
  std::shared_ptr<net::mpi_groups> mpi_;
  rank_devices device_of_;
  device_engines engines_;
  job_outputs out_;
  std::shared_ptr<job_verdict> verdict_ = std::make_shared<job_verdict>();
  std::shared_ptr<remote_servers> remote_ = std::make_shared<remote_servers>();
  std::shared_ptr<net::connection_set> connections_ = std::make_shared<net::connection_set>();
  std::vector<train_summary::server_update> remote_records_;  // --servers: read from the server processes
  std::vector<std::shared_ptr<std::vector<train_summary::server_update>>> server_updates_;
  std::shared_ptr<std::vector<train_summary::dispensed_batch>> dispensed_;
  // Bound to the actor system: dropped by stop.
  std::shared_ptr<mesh_links> links_;
  caf::actor coordinator_, evaluator_, hub_;
  job_servers servers_;
  rank_actors ranks_;
  std::vector<caf::actor> local_;
  middleman_drain drain_;  // the detached actors, watched before their handles leave the process
  std::unique_ptr<net::tls_channels> tls_ = std::make_unique<net::tls_channels>();  // admitted under TLS
  std::mutex serve_mu_;  // the gate's handoffs, each on its own thread, reach the middleman one at a time
  // After tls_: its thread adds to them until it is gone. Opened by the first membership, it
  // listens until the job is over.
  std::unique_ptr<net::gate_server> gate_;
  membership_plan next_;                    // an elastic job's next membership, once told
  std::vector<membership_event> next_events_;  // the change that makes it
  size_t events_told_ = 0;                     // of the summary's membership events, those told so far
  std::vector<int32_t> newcomers_;             // the processes it admits, by their index in it
};

}  // namespace

std::unique_ptr<placement> process_zero_placement(const train_config& cfg, const prepared_job& job,
                                                  const job_plan& plan, std::shared_ptr<net::mpi_groups> mpi,
                                                  const rank_devices& device_of, const device_engines& engines) {
  return std::make_unique<process_zero>(cfg, job, plan, std::move(mpi), device_of, engines);
}

}  // namespace troupe::process_detail
