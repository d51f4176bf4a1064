// job_hub (rank 0) and worker_hub (every other rank): admission, liveness and the end of a job
// whose ranks are processes (declared in net_actors.hpp). Neither touches training messages:
// step orders and reports go straight between the coordinator and the stages over the
// middleman. The hub decides only who is in, who is lost, and tells everyone when it is over.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <utility>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "actors/compose/mesh_links.hpp"
#include "actors/process/net_actors.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;
using tick_atom = caf::atom_constant<caf::atom("hubtick")>;
using refused_atom = caf::atom_constant<caf::atom("hubrefuse")>;
using decide_atom = caf::atom_constant<caf::atom("hubdecide")>;

// A rank that dies breaks its neighbours' ring connections at once, so a neighbour's stage may
// fail a few milliseconds before the dead rank's own connection is seen to close. A stage error
// therefore waits this long for a lost process to blame instead.
constexpr std::chrono::milliseconds symptom_grace{500};

// Pings go out four times per timeout, so one lost ping is no alarm and a silent peer is found
// at most a quarter timeout after the timeout itself.
std::chrono::milliseconds tick_of(std::chrono::milliseconds timeout) {
  return std::max(std::chrono::milliseconds(10), timeout / 4);
}

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

struct peer {
  caf::actor hub;
  std::vector<caf::actor> stages;
  process_endpoints serves;
  clock_type::time_point last_seen;
  bool gone = false;  // its process or connection is lost: nobody to tell at the end
  bool server = false;  // a server process (--servers): `stages` are its parameter servers
};

struct job_hub_state {
  job_hub_args args;
  std::map<int32_t, bool> admitted;  // rank -> joined (join_request accepted)
  std::map<int32_t, peer> ready;     // rank -> its actors
  // --servers: the servers' handles in server_ids' order as their processes report them (a
  // process in `ready` with `server` set has reported), and the mesh processes' joins waiting
  // for the last of them.
  std::vector<caf::actor> servers;
  std::vector<caf::response_promise> held_joins;
  std::vector<caf::response_promise> admissions;  // an elastic job's newcomers, by index past world
  clock_type::time_point started = clock_type::now();
  clock_type::time_point last_tick = clock_type::now();  // a tick long after the last: this process stalled
  clock_type::time_point last_join = clock_type::now();  // the hub's start, or the last join accepted
  bool told_waiting = false;  // said that processes started here are still awaited
  bool running = false, ended = false;
  bool abandoning = false;  // newcomers given up on: the membership ends without them
  std::string symptom;  // a stage error waiting out symptom_grace
  caf::response_promise end_promise;  // job_end: answered once every worker's connection closed
  bool disconnecting = false;
  static inline const char* name = "job_hub";
};
using hub_ptr = caf::stateful_actor<job_hub_state>*;

// How reports name a process: a rank of the mesh, or a process of parameter servers.
std::string who(const job_hub_state& s, int32_t process) {
  return (process < s.args.mesh.processes ? "rank " : "parameter server process ") + std::to_string(process);
}

bool servers_known(const job_hub_state& s) {
  const auto in = std::count_if(s.ready.begin(), s.ready.end(), [](const auto& r) { return r.second.server; });
  return in == s.args.world - s.args.mesh.processes;
}

join_reply reply_for(const job_hub_state& s) {
  return join_reply{s.args.coordinator, s.args.servers, s.args.dispenser, s.servers, job_end{}};
}

// First failure: record it and stop the coordinator (run_process_training then shuts the rest
// down and sends the report). Later ones are kept for the log. A symptom (a stage that stopped)
// becomes the verdict only if no cause (a lost or silent process) turns up within symptom_grace.
// The parts of two describe_for_join texts that differ, side by side (not both whole texts).
std::string config_difference(const std::string& theirs, const std::string& ours) {
  const auto parts = [](const std::string& text) {
    std::vector<std::string> out;
    for (size_t at = 0;;) {
      const size_t end = text.find("; ", at);
      out.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
      if (end == std::string::npos) return out;
      at = end + 2;
    }
  };
  const std::vector<std::string> a = parts(theirs), b = parts(ours);
  std::string out;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "", y = i < b.size() ? b[i] : "";
    if (x != y) out += (out.empty() ? "\"" : "; \"") + x + "\" where rank 0 has \"" + y + "\"";
  }
  return out;
}

void lost(hub_ptr self, const std::string& why, bool symptom = false) {
  auto& s = self->state;
  if (s.ended) return;
  std::lock_guard<std::mutex> lock(s.args.verdict->mu);
  if (!s.args.verdict->first.empty() || (symptom && !s.symptom.empty())) {
    s.args.verdict->later.push_back(why);
    return;
  }
  if (symptom) {
    s.symptom = why;
    self->delayed_send(self, symptom_grace, decide_atom::value);
    return;
  }
  if (!s.symptom.empty()) s.args.verdict->later.push_back(std::exchange(s.symptom, {}));
  s.args.verdict->first = why;
  spdlog::error("job hub: {}", why);
  self->send_exit(s.args.coordinator, caf::exit_reason::user_shutdown);
}

// After job_end: every worker acknowledged (or could not), their connections are closed; the
// answer waits until the middleman has reported each of them gone.
void answer_when_all_gone(hub_ptr self) {
  auto& s = self->state;
  for (auto& [rank, p] : s.ready)
    if (!p.gone) return;
  if (s.end_promise.pending()) s.end_promise.deliver(true);
}

void disconnect_workers(hub_ptr self) {
  auto& s = self->state;
  if (s.disconnecting) return;
  s.disconnecting = true;
  if (s.args.disconnect) s.args.disconnect();
  answer_when_all_gone(self);
}

// An elastic job's newcomers that did not join (job_hub_args::newcomers): the membership ends
// (the coordinator never started) and process 0 makes the next one without them, from the
// same state, so the job goes on; each is named.
void abandon(hub_ptr self, const std::vector<int32_t>& missing) {
  auto& s = self->state;
  {
    std::lock_guard<std::mutex> lock(s.args.verdict->mu);
    if (!s.args.verdict->first.empty()) return;
    s.args.verdict->abandoned = missing;
  }
  s.abandoning = true;
  std::string names;
  for (int32_t r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
  spdlog::warn("job hub: the admission of process{} {} is abandoned: admitted at the membership change, {} not join "
               "within the peer timeout of {:.1f} s (it died after asking to join, or an event admitted a replica that "
               "no process asked to be); the job goes on without {}",
               missing.size() == 1 ? "" : "es", names, missing.size() == 1 ? "it did" : "they did",
               seconds(s.args.peer_timeout), missing.size() == 1 ? "it" : "them");
  self->send_exit(s.args.coordinator, caf::exit_reason::user_shutdown);
}

void tick(hub_ptr self) {
  auto& s = self->state;
  const auto now = clock_type::now();
  const auto stalled = now - std::exchange(s.last_tick, now);
  if (stalled > s.args.peer_timeout && s.running) {
    // This process did not run (SIGSTOP, a suspended job, a starved CPU): the silence it would
    // see from its peers is its own, and they have given up on it.
    lost(self, "process 0 did not run for " + fmt::format("{:.1f}", seconds(stalled)) + " s (paused, suspended or starved " +
                   "of CPU), past the peer timeout of " + fmt::format("{:.1f}", seconds(s.args.peer_timeout)) +
                   " s: the other processes gave up on it");
    if (!s.ended) self->delayed_send(self, tick_of(s.args.peer_timeout), tick_atom::value);
    return;
  }
  if (!s.running && !s.ended && s.args.exited_process) {
    const std::string gone = s.args.exited_process();
    if (!gone.empty()) lost(self, gone + " before it joined");
  }
  if (!s.running && !s.ended && !s.abandoning && !s.args.newcomers.empty() && now - s.started > s.args.peer_timeout) {
    std::vector<int32_t> missing;
    bool others_in = true;  // one of the others missing is no newcomer's doing: it is waited for as ever
    for (int32_t r = 1; r < s.args.world; ++r) {
      if (s.admitted.count(r)) continue;  // its join was accepted: it is on its way
      if (std::find(s.args.newcomers.begin(), s.args.newcomers.end(), r) != s.args.newcomers.end()) missing.push_back(r);
      else others_in = false;
    }
    if (!missing.empty() && others_in) abandon(self, missing);
  }
  if (!s.running && !s.ended && !s.abandoning) {
    // A process started elsewhere (a launcher's other node, a worker started by hand) that has
    // not asked to join: the job waits for it while others keep joining, and the peer timeout
    // after the last one. Those started here are watched (exited_process names one that dies):
    // they have the join timeout, and the log says who is awaited.
    std::string elsewhere, here;
    for (int32_t r = 1; r < s.args.world; ++r) {
      if (s.admitted.count(r)) continue;
      const bool local = std::find(s.args.started_here.begin(), s.args.started_here.end(), r) != s.args.started_here.end();
      (local ? here : elsewhere) += ((local ? here : elsewhere).empty() ? "" : ", ") + who(s, r);
    }
    std::string all;  // at the join timeout: every process not ready, its join accepted or not
    for (int32_t r = 1; r < s.args.world; ++r)
      if (!s.ready.count(r)) all += (all.empty() ? "" : ", ") + who(s, r);
    if (!elsewhere.empty() && now - s.last_join > s.args.peer_timeout)
      lost(self, elsewhere + " did not join: no process joined for the peer timeout of " +
                     fmt::format("{:.1f}", seconds(s.args.peer_timeout)) + " s (the job waited " +
                     fmt::format("{:.1f}", seconds(now - s.started)) + " s; was it started, with this job's address " +
                     "and secret?)" + (here.empty() ? "" : "; also missing: " + here));
    else if (!all.empty() && now - s.started > s.args.join_timeout)
      lost(self, all + " did not join within the join timeout of " + fmt::format("{:.0f}", seconds(s.args.join_timeout)) + " s");
    else if (!here.empty() && !s.told_waiting && now - s.started > s.args.peer_timeout) {
      s.told_waiting = true;
      spdlog::info("job hub: waiting for {} to join ({:.1f} s so far; started here and running, so up to the join "
                   "timeout of {:.0f} s)", here, seconds(now - s.started), seconds(s.args.join_timeout));
    }
  }
  for (auto& [rank, p] : s.ready) {
    self->send(p.hub, peer_ping_atom::value);
    if (now - p.last_seen > s.args.peer_timeout && !p.gone) {
      p.gone = true;  // nobody to wait for at the end: a hung process will not acknowledge
      lost(self, who(s, rank) + " stopped answering (silent for " +
                     fmt::format("{:.1f}", seconds(now - p.last_seen)) + " s, peer timeout " +
                     fmt::format("{:.1f}", seconds(s.args.peer_timeout)) + " s)");
    }
  }
  if (!s.ended) self->delayed_send(self, tick_of(s.args.peer_timeout), tick_atom::value);
}

// Every process is in (the last worker_ready or server_ready): the stages by mesh rank, where each
// serves what, and the coordinator starts.
void start_if_all_ready(hub_ptr self) {
  auto& s = self->state;
  if (s.running || static_cast<int>(s.ready.size()) + 1 < s.args.world) return;
  std::vector<caf::actor> stages(static_cast<size_t>(s.args.mesh.ranks()));
  mesh_addresses where;
  where.ring_hosts.resize(static_cast<size_t>(comm_group_count(s.args.mesh)));
  where.ring_ports.resize(static_cast<size_t>(comm_group_count(s.args.mesh)), 0);
  where.p2p_hosts.resize(static_cast<size_t>(s.args.mesh.processes));
  where.p2p_ports.resize(static_cast<size_t>(s.args.mesh.processes), 0);
  auto place = [&](int process, const std::vector<caf::actor>& block, const process_endpoints& e) {
    const auto ranks = s.args.mesh.ranks_of_process(process);
    for (size_t i = 0; i < ranks.size(); ++i) stages[static_cast<size_t>(ranks[i])] = block.at(i);
    for (size_t i = 0; i < e.ring_groups.size(); ++i) {
      where.ring_hosts.at(static_cast<size_t>(e.ring_groups[i])) = e.ring_hosts.at(i);
      where.ring_ports.at(static_cast<size_t>(e.ring_groups[i])) = e.ring_ports.at(i);
    }
    where.p2p_hosts[static_cast<size_t>(process)] = e.p2p_host;
    where.p2p_ports[static_cast<size_t>(process)] = e.p2p_port;
  };
  place(0, s.args.local_stages, s.args.serves);
  for (auto& [rank, p] : s.ready)
    if (!p.server) place(rank, p.stages, p.serves);
  for (auto& [rank, p] : s.ready) self->send(p.hub, where);
  if (s.args.on_addresses) s.args.on_addresses(where);
  spdlog::info("job hub: all {} processes joined ({:.1f} s); training starts", s.args.world,
               seconds(clock_type::now() - s.started));
  s.running = true;
  self->send(s.args.coordinator, start_atom::value, std::move(stages), s.args.evaluator, s.args.local_members);
}

caf::behavior job_hub(hub_ptr self, job_hub_args args) {
  self->state.args = std::move(args);
  self->set_down_handler([self](caf::down_msg& dm) {
    for (auto& [rank, p] : self->state.ready) {
      const bool hub = dm.source == p.hub.address();
      const bool stage = std::any_of(p.stages.begin(), p.stages.end(), [&](const caf::actor& a) { return dm.source == a.address(); });
      if (!hub && !stage) continue;
      const bool unreachable = dm.reason == caf::exit_reason::remote_link_unreachable;
      // A lost process takes its hub and every actor of it along: the first down says it.
      if (unreachable && p.gone && !self->state.disconnecting) return;
      if (unreachable || hub) p.gone = true;
      if (self->state.disconnecting) {
        answer_when_all_gone(self);
        return;
      }
      if (self->state.args.elastic && self->state.running && (unreachable || hub)) {
        spdlog::warn("job hub: {} lost while training ran; the elastic job's coordinator drops its replica",
                     who(self->state, rank));
        return;
      }
      lost(self,
           who(self->state, rank) +
               (unreachable ? " lost: its connection closed (the process died or the network failed)"
                : hub && !dm.reason
                    // Its worker hub quits without an error only when it gave up on process 0.
                    ? " left: it stopped waiting for process 0, silent past the peer timeout (was process 0 paused "
                      "or starved of CPU?)"
                    : std::string(hub ? " left: " : p.server ? "'s server stopped: " : "'s stage stopped: ") +
                          describe_exit(self->system(), dm.reason)),
           /*symptom=*/!unreachable && !hub);
      return;
    }
  });
  self->delayed_send(self, tick_of(self->state.args.peer_timeout), tick_atom::value);
  return {
      [self](const join_request& j) -> caf::result<join_reply> {
        auto& s = self->state;
        if (j.job_id != s.args.job_id) {
          // Another job's process, given this job's address with the same secret: not ours to
          // admit, nor a reason to end this job.
          const std::string why = "a process claiming rank " + std::to_string(j.rank) + " belongs to job \"" + j.job_id +
                                  "\", not this job \"" + s.args.job_id + "\" (was it given another job's address?)";
          spdlog::error("job hub: refused a join: {}", why);
          return caf::make_error(caf::sec::request_receiver_down, why);
        }
        if (s.args.elastic && !s.ended && j.rank == s.args.world + static_cast<int>(s.admissions.size())) {
          if (j.config != s.args.admit_config)
            return caf::make_error(caf::sec::request_receiver_down,
                                   "rank " + std::to_string(j.rank) + " asks to join with another configuration than the job "
                                   "one replica larger: " + config_difference(j.config, s.args.admit_config));
          spdlog::info("job hub: process {} asks to join the running job; it is admitted at the next step boundary", j.rank);
          s.admissions.push_back(self->make_response_promise());
          self->send(s.args.coordinator, admit_atom::value);
          return s.admissions.back();
        }
        std::string why;
        if (j.rank <= 0 || j.rank >= s.args.world)
          why = "rank " + std::to_string(j.rank) + " is not in 1.." + std::to_string(s.args.world - 1);
        else if (s.admitted.count(j.rank))
          why = "rank " + std::to_string(j.rank) + " joined already";
        const bool other_config = why.empty() && j.config != s.args.config;
        if (other_config)
          why = "rank " + std::to_string(j.rank) + " runs another configuration: " + config_difference(j.config, s.args.config);
        if (!why.empty()) {
          spdlog::error("job hub: refused a join: {}", why);
          // The job cannot start without that process, which is refused for good: end it, once the
          // refusal has had time to reach the process (ended at once, the connection could close
          // before the answer left, and the process waited out its join timeout).
          if (other_config) self->delayed_send(self, std::chrono::milliseconds(300), refused_atom::value, why);
          return caf::make_error(caf::sec::request_receiver_down, why);
        }
        s.admitted[j.rank] = true;
        s.last_join = clock_type::now();
        // A mesh process spawns its stages with the servers' handles: it waits for them.
        if (j.rank < s.args.mesh.processes && !servers_known(s)) {
          s.held_joins.push_back(self->make_response_promise());
          return s.held_joins.back();
        }
        return reply_for(s);
      },
      [self](const server_ready& r) {
        auto& s = self->state;
        if (r.process < s.args.mesh.processes || !s.admitted.count(r.process) || s.ready.count(r.process)) return;
        if (r.ids.size() != r.servers.size()) {
          lost(self, who(s, r.process) + " reported " + std::to_string(r.ids.size()) + " server ids for " +
                         std::to_string(r.servers.size()) + " servers");
          return;
        }
        s.servers.resize(s.args.server_ids.size());
        for (size_t i = 0; i < r.ids.size(); ++i) {
          const auto at = std::find(s.args.server_ids.begin(), s.args.server_ids.end(), r.ids[i]);
          if (at == s.args.server_ids.end() || s.servers[static_cast<size_t>(at - s.args.server_ids.begin())]) {
            lost(self, who(s, r.process) + " reported parameter server " + std::to_string(r.ids[i]) +
                           ", which is not its to hold (another --servers or --server-shards?)");
            return;
          }
          s.servers[static_cast<size_t>(at - s.args.server_ids.begin())] = r.servers[i];
        }
        self->monitor(r.hub);
        for (const auto& a : r.servers) self->monitor(a);
        peer p{r.hub, r.servers, {}, clock_type::now()};
        p.server = true;
        s.ready[r.process] = std::move(p);
        if (!servers_known(s)) return;
        for (const auto& a : s.servers)
          if (!a) {
            lost(self, "the server processes hold " + std::to_string(r.ids.size()) + " servers short of the job's " +
                           std::to_string(s.args.server_ids.size()));
            return;
          }
        spdlog::info("job hub: every parameter server process joined, {} servers", s.servers.size());
        if (s.args.on_servers) s.args.on_servers(s.servers);
        for (auto& promise : s.held_joins) promise.deliver(reply_for(s));
        s.held_joins.clear();
        start_if_all_ready(self);
      },
      [self](const worker_ready& w) {
        auto& s = self->state;
        if (w.rank >= s.args.mesh.processes || !s.admitted.count(w.rank) || s.ready.count(w.rank)) return;
        const auto want = static_cast<size_t>(s.args.mesh.ranks_per_process());
        if (w.stages.size() != want) {
          lost(self, "process " + std::to_string(w.rank) + " reported " + std::to_string(w.stages.size()) +
                         " stages, its block of the mesh has " + std::to_string(want));
          return;
        }
        self->monitor(w.hub);
        for (const auto& st : w.stages) self->monitor(st);
        s.ready[w.rank] = {w.hub, w.stages, w.serves, clock_type::now()};
        // The watchdog's report then holds this process's ledgers beside process 0's.
        if (!w.collectives.empty()) self->send(s.args.coordinator, watch_atom::value, w.collectives);
        start_if_all_ready(self);
      },
      [self](peer_pong_atom, int32_t rank) {
        auto it = self->state.ready.find(rank);
        if (it != self->state.ready.end()) it->second.last_seen = clock_type::now();
      },
      [self](tick_atom) { tick(self); },
      [self](refused_atom, const std::string& why) { lost(self, why); },
      [self](decide_atom) {  // no cause turned up: the symptom is the verdict
        auto& s = self->state;
        if (!s.symptom.empty()) lost(self, std::exchange(s.symptom, {}));
      },
      // run_process_training, at the end: tell every worker; answer once all acknowledged.
      [self](const job_end& e) {
        auto& s = self->state;
        s.ended = true;
        s.end_promise = self->make_response_promise();
        // Newcomers the change takes in join the next membership; without one, the job is over.
        size_t taken = 0;
        for (const auto& ev : parse_membership_events(e.events, "the membership change"))
          taken += ev.change == membership_change::admit ? 1 : 0;
        for (size_t i = 0; i < s.admissions.size(); ++i) {
          join_reply r;
          r.admitted = e;
          if (i < taken) s.admissions[i].deliver(std::move(r));
          else
            s.admissions[i].deliver(caf::make_error(
                caf::sec::request_receiver_down,
                e.processes.empty() ? std::string("the job ended before it could admit this process")
                                    : "the job changed its membership without this process (another change was under "
                                      "way when it asked): ask again to join the next membership"));
        }
        s.admissions.clear();
        // Mesh processes still waiting for the servers' handles would otherwise wait out their join timeout.
        for (auto& held : s.held_joins)
          held.deliver(caf::make_error(caf::sec::request_receiver_down, "the job ended before every parameter server process joined"));
        s.held_joins.clear();
        auto left = std::make_shared<size_t>(0);
        for (auto& [rank, p] : s.ready) *left += p.gone ? 0 : 1;
        if (*left == 0) disconnect_workers(self);
        const auto wait = std::min<std::chrono::milliseconds>(std::chrono::seconds(5), s.args.peer_timeout);
        for (auto& [rank, p] : s.ready)
          if (!p.gone)
            self->request(p.hub, wait, e)
              .then([self, left](job_end_ack_atom) { if (--*left == 0) disconnect_workers(self); },
                    [self, left](caf::error&) { if (--*left == 0) disconnect_workers(self); });
      },
  };
}

struct worker_hub_state {
  worker_hub_args args;
  clock_type::time_point last_ping = clock_type::now();
  bool ending = false;  // job_end received: waiting for rank 0 to close the connection
  static inline const char* name = "worker_hub";
};
using worker_ptr = caf::stateful_actor<worker_hub_state>*;

caf::behavior worker_hub(worker_ptr self, worker_hub_args args) {
  self->state.args = std::move(args);
  auto& s = self->state;
  self->monitor(s.args.job_hub);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.args.job_hub.address()) return;
    if (!self->state.ending) *self->state.args.report = "rank 0 lost: " + describe_exit(self->system(), dm.reason);
    self->quit();
  });
  if (s.args.server_process)
    self->send(s.args.job_hub, server_ready{s.args.rank, caf::actor_cast<caf::actor>(self), s.args.server_ids, s.args.stages});
  else
    self->send(s.args.job_hub,
               worker_ready{s.args.rank, caf::actor_cast<caf::actor>(self), s.args.stages, s.args.serves, s.args.collectives});
  self->delayed_send(self, tick_of(s.args.peer_timeout), tick_atom::value);
  return {
      [self](const mesh_addresses& a) {
        if (self->state.args.on_addresses) self->state.args.on_addresses(a);
      },
      [self](peer_ping_atom) {
        self->state.last_ping = clock_type::now();
        self->send(self->state.args.job_hub, peer_pong_atom::value, self->state.args.rank);
      },
      [self](tick_atom) {
        auto& s = self->state;
        const auto silent = clock_type::now() - s.last_ping;
        if (silent > s.args.peer_timeout) {
          const std::string what = s.ending ? "rank 0 did not close the connection after the job's end"
                                            : "rank 0 stopped answering";
          if (!s.ending || s.args.report->empty())
            *s.args.report = what + " (no ping for " + fmt::format("{:.1f}", seconds(silent)) + " s)";
          self->quit();
          return;
        }
        self->delayed_send(self, tick_of(s.args.peer_timeout), tick_atom::value);
      },
      // The job is over; this process stops its actors once rank 0 has closed the connection
      // (the down message of the job hub's proxy), so the middleman has cleaned it up first.
      [self](const job_end& e) {
        auto& s = self->state;
        *s.args.report = e.ok ? "" : e.report;
        if (s.args.ended) *s.args.ended = e;
        s.ending = true;
        return job_end_ack_atom::value;
      },
  };
}

}  // namespace

caf::actor spawn_job_hub(caf::actor_system& sys, job_hub_args args) { return sys.spawn(job_hub, std::move(args)); }

caf::actor spawn_worker_hub(caf::actor_system& sys, worker_hub_args args) {
  return sys.spawn(worker_hub, std::move(args));
}

}  // namespace troupe
