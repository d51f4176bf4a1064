// mesh_links: collectives and pipeline peers of one process's ranks (mesh_links.hpp).
#include "actors/compose/mesh_links.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <thread>

#include "comm/gloo_group.hpp"
#include "comm/kv_store.hpp"
#include "comm/tp_groups.hpp"

#include "actors/collective/collective.hpp"
#include "actors/collective/tp_ledger.hpp"
#include "actors/process/net_actors.hpp"
#include "actors/stage/stage.hpp"

namespace troupe {

mesh_links::mesh_links(caf::actor_system& sys, const job_plan& plan, mesh_links_args args)
    : sys_(sys), plan_(plan), args_(std::move(args)) {
  const sched::mesh& m = plan_.mesh;
  bool remote_peer = false;
  for (int r : m.ranks_of_process(args_.process)) remote_peer = remote_peer || m.group_spans_processes(sched::axis::pp, r);
  if (!remote_peer) return;
  auto in = receiver_;
  transport_ = std::make_shared<net::p2p_transport>(
      args_.process, args_.local_host, 0, args_.secret,
      [in](int from, wire::tensor_meta meta, std::vector<uint8_t> bytes) { in->deliver(from, meta, std::move(bytes)); },
      [in](int from, const wire::error& e) { in->refuse(from, std::string(wire::to_string(e.code)) + ": " + e.message); },
      args_.p2p);
}

mesh_links::~mesh_links() { stop(); }

sched::axis axis_of(comm_group g) {
  switch (g) {
    case comm_group::dp: return sched::axis::dp;
    case comm_group::tp: return sched::axis::tp;
    case comm_group::zero3_params: return sched::axis::dp;
    case comm_group::cp: return sched::axis::cp;
    case comm_group::ep: return sched::axis::ep;
    case comm_group::edp: return sched::axis::edp;
  }
  throw std::logic_error("axis_of: not a comm_group");
}

int comm_groups_of(const sched::mesh& m, comm_group g) {
  if ((g == comm_group::cp && m.cp == 1) || ((g == comm_group::ep || g == comm_group::edp) && m.ep == 1)) return 0;
  return m.groups(axis_of(g));
}

int comm_group_id(const sched::mesh& m, comm_group g, int rank) {
  int first = 0;  // the groups of the kinds numbered before g
  for (comm_group before : comm_groups) {
    if (before == g) break;
    first += comm_groups_of(m, before);
  }
  return first + m.group_index(axis_of(g), rank);
}

int comm_group_count(const sched::mesh& m) {
  int n = 0;
  for (comm_group g : comm_groups) n += comm_groups_of(m, g);
  return n;
}

rank_groups mesh_links::groups_of(int rank) {
  rank_groups g;
  const rank_collective dp = dp_reducer(rank);
  g.set(sched::axis::dp, dp.actor);
  g.reduces_on_device = dp.on_device;
  g.set(sched::axis::edp, edp_reducer(rank));
  for (sched::axis a : {sched::axis::tp, sched::axis::cp, sched::axis::ep, sched::axis::dp})
    g.set(a, ledgered(unlogged_member(a, rank), a, rank));
  return g;
}

rank_collective mesh_links::dp_reducer(int rank) {
  const sched::mesh& m = plan_.mesh;
  if (m.replicas() == 1) return {};
  const int replica = m.replica_of(rank);
  const int id = comm_group_id(m, comm_group::dp, rank);
  if (!m.group_spans_processes(sched::axis::dp, rank)) {
    local_group& g = local_groups_[id];
    if (g.members.empty()) {
      g.members = device_group(id, m.group(sched::axis::dp, rank));
      g.on_device = !g.members.empty();
      if (!g.on_device) {
        collective_options o = collective_options_from_env();
        const std::vector<int> ranks = m.group(sched::axis::dp, rank);
        for (const slow_link_spec& l : args_.slow_links)  // --slow-link in one process: the member's sends
          for (size_t i = 0; i < ranks.size(); ++i)
            if (ranks[i] == l.rank) o.shaped[static_cast<int>(i)] = {l.mb_per_s * 1e6, l.latency_ms * 1e-3};
        g.members = spawn_collective_group(sys_, m.replicas(), o);
        actors_.insert(actors_.end(), g.members.begin(), g.members.end());
        collectives_.insert(collectives_.end(), g.members.begin(), g.members.end());
      }
    }
    return {g.members.at(static_cast<size_t>(replica)), g.on_device};
  }
  // On the devices through an engine that spans processes (NCCL), when the members all have one;
  // else through the host's back end.
  if (caf::actor c = spanning_device_member(id, replica, m.group(sched::axis::dp, rank))) return {c, true};
  return {host_member(id, replica, m.replicas(), rank)};
}

caf::actor mesh_links::host_member(int id, int member, int size, int rank) {
  if (args_.mpi) {
    net_collective_args a;
    std::shared_ptr<net::group_backend> backend = args_.mpi->take(id);
    a.env = launch_env{member, size, args_.local_host, 0, "mpi"};
    a.make_backend = [backend] { return backend; };
    return spawn_member(std::move(a));
  }
  return spawn_member(spanning_member(id, member, size, rank));
}

// On the host: the MoE layers, the only ones expert parallelism touches, run on the CPU alone.
// A replica that alone holds its experts gets a group of one, so its experts' buckets take the
// path every other bucket takes (ZeRO's shard included).
caf::actor mesh_links::edp_reducer(int rank) {
  const sched::mesh& m = plan_.mesh;
  const int size = m.size(sched::axis::edp);
  if (m.ep == 1) return {};
  const int member = m.place_in(sched::axis::edp, rank);
  const int id = comm_group_id(m, comm_group::edp, rank);
  if (m.group_spans_processes(sched::axis::edp, rank)) return host_member(id, member, size, rank);
  local_group& g = local_groups_[id];
  if (g.members.empty()) {
    g.members = spawn_collective_group(sys_, size, collective_options_from_env());
    actors_.insert(actors_.end(), g.members.begin(), g.members.end());
    collectives_.insert(collectives_.end(), g.members.begin(), g.members.end());
  }
  return g.members.at(static_cast<size_t>(member));
}

net_collective_args mesh_links::spanning_member(int id, int member, int size, int rank) {
  return args_.gloo ? gloo_member(id, member, size) : ring_member(id, member, size, rank);
}

net_collective_args mesh_links::gloo_member(int id, int member, int size) {
  net_collective_args a;
  a.env = launch_env{member, size, args_.local_host, 0, "gloo"};
  const net::gloo_options g{args_.local_host, args_.ring.io_timeout_ms, args_.secret};
  if (member == 0) {  // serves the group's kv store from now on, so serves() can publish its port
    auto store = std::make_shared<net::kv_server>(args_.local_host, 0, args_.secret);
    std::promise<uint16_t> port;
    port.set_value(store->port());
    leaders_.push_back({id, port.get_future().share()});
    a.make_backend = [store, size, g]() -> std::shared_ptr<net::group_backend> {
      return net::connect_gloo_member(0, size, store, g);
    };
    return a;
  }
  a.make_backend = [where = rendezvous_[id].future, member, size, g, secret = args_.secret,
                    timeout = args_.join_timeout_ms]() -> std::shared_ptr<net::group_backend> {
    if (where.wait_for(std::chrono::milliseconds(timeout)) != std::future_status::ready)
      throw net::net_error("the address of its group's kv store did not arrive within " + std::to_string(timeout) + " ms");
    const auto [host, port] = where.get();  // a broken promise: the job ended first
    std::shared_ptr<net::kv_store> store = net::kv_connect(host, port, secret, static_cast<uint32_t>(member), timeout);
    return net::connect_gloo_member(member, size, std::move(store), g);
  };
  return a;
}

net_collective_args mesh_links::ring_member(int id, int member, int size, int rank) {
  net_collective_args a;
  a.env = launch_env{member, size, args_.local_host, 0, "mesh"};
  a.secret = args_.secret;
  a.ring = args_.ring;
  for (const slow_link_spec& l : args_.slow_links)
    if (l.rank == rank) {
      a.ring.send_bytes_per_s = l.mb_per_s * 1e6;
      a.ring.send_latency_s = l.latency_ms * 1e-3;
    }
  a.interrupt = std::make_shared<net::ring_interrupt>();
  interrupts_.push_back(a.interrupt);
  if (member == 0) {  // the group's first member: its rendezvous listens here, on any port
    auto port = std::make_shared<std::promise<uint16_t>>();
    leaders_.push_back({id, port->get_future().share()});
    a.ring.on_master_listening = [port](uint16_t p) { port->set_value(p); };
  } else {
    a.rendezvous = rendezvous_[id].future;
    a.rendezvous_timeout_ms = args_.join_timeout_ms;
  }
  return a;
}

namespace {

// A member across processes of a group a stage's own thread drives (tensor-parallel, ZeRO-3
// parameters). Its ring connects on a thread of its own from the start, so the group's
// rendezvous listens before any stage computes; the stage's first collective waits for the
// connection (or rethrows why it failed).
class remote_tp_member final : public tp_group {
 public:
  remote_tp_member(int rank, int size, std::shared_future<std::shared_ptr<net::group_backend>> ring, int timeout_ms)
      : rank_(rank), size_(size), ring_(std::move(ring)), timeout_ms_(timeout_ms) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, int64_t n) override { backend().all_reduce(data, n, net::reduce_op::sum); }
  void all_gather(float* data, int64_t n) override { backend().all_gather(data, n); }
  void reduce_scatter_sum(float* data, int64_t n) override { backend().reduce_scatter(data, n, net::reduce_op::sum); }
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    backend().shift(send, n_send, recv, n_recv);
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    backend().all_to_all(send, send_counts, recv, recv_counts);
  }

 private:
  net::group_backend& backend() {
    if (!ready_) {
      if (ring_.wait_for(std::chrono::milliseconds(timeout_ms_)) != std::future_status::ready)
        throw net::net_error("member " + std::to_string(rank_) + " of a group across processes: its connection was not made within " +
                             std::to_string(timeout_ms_) + " ms");
      ready_ = ring_.get();
    }
    return *ready_;
  }
  int rank_, size_;
  std::shared_future<std::shared_ptr<net::group_backend>> ring_;
  int timeout_ms_;
  std::shared_ptr<net::group_backend> ready_;
};

}  // namespace

// Each member a stage will call is logged, and its log answers the watchdog through an actor of
// its own (tp_ledger.hpp): the stage cannot answer while it waits inside the group.
std::shared_ptr<tp_group> mesh_links::ledgered(std::shared_ptr<tp_group> member, sched::axis a, int rank) {
  if (!member) return member;
  const sched::mesh& m = plan_.mesh;
  std::string ranks;
  for (int r : m.group(a, rank)) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  const std::string group =
      fmt::format("{} group {} (ranks {})", a == sched::axis::dp ? "ZeRO-3 parameter" : sched::to_string(a),
                  m.group_index(a, rank), ranks);
  auto logged = std::make_shared<net::logged_tp_group>(std::move(member));
  caf::actor ledger = spawn_tp_ledger(sys_, logged, group);
  actors_.push_back(ledger);
  collectives_.push_back(ledger);
  return logged;
}

std::shared_ptr<tp_group> mesh_links::unlogged_member(sched::axis a, int rank) {
  const sched::mesh& m = plan_.mesh;
  switch (a) {
    case sched::axis::tp: return unlogged_tp_member(rank);
    case sched::axis::cp: return m.cp == 1 ? nullptr : host_group_member(comm_group::cp, rank);
    case sched::axis::ep: return m.ep == 1 ? nullptr : host_group_member(comm_group::ep, rank);
    case sched::axis::dp:
      return !args_.zero3 || m.replicas() == 1 ? nullptr : host_group_member(comm_group::zero3_params, rank);
    default: return nullptr;  // pp and edp: no member the stage's thread drives
  }
}

std::shared_ptr<tp_group> mesh_links::host_group_member(comm_group g, int rank) {
  const sched::mesh& m = plan_.mesh;
  const sched::axis a = axis_of(g);
  const int id = comm_group_id(m, g, rank), member = m.place_in(a, rank);
  if (!m.group_spans_processes(a, rank)) {
    auto& local = local_tp_[id];
    if (local.empty()) local = net::make_local_tp_group(m.size(a), {args_.join_timeout_ms});
    return local.at(static_cast<size_t>(member));
  }
  return remote_group_member(id, member, m.size(a), rank);
}

std::shared_ptr<tp_group> mesh_links::unlogged_tp_member(int rank) {
  const sched::mesh& m = plan_.mesh;
  if (m.tp == 1) return nullptr;
  const int t = m.coords_of(rank).tp;
  const int id = comm_group_id(m, comm_group::tp, rank);
  if (!m.group_spans_processes(sched::axis::tp, rank)) {
    auto& g = local_tp_[id];
    if (g.empty()) g = device_tp_group(m.group_index(sched::axis::tp, rank), m.group(sched::axis::tp, rank));
    if (g.empty()) g = net::make_local_tp_group(m.tp, {args_.join_timeout_ms});
    return g.at(static_cast<size_t>(t));
  }
  if (auto d = spanning_device_tp_member(id, t, m.group(sched::axis::tp, rank))) return d;
  return remote_group_member(id, t, m.tp, rank);
}

std::shared_ptr<tp_group> mesh_links::remote_group_member(int id, int member, int size, int rank) {
  if (args_.mpi) return net::backend_tp_group(args_.mpi->take(id));
  auto connected = std::make_shared<std::promise<std::shared_ptr<net::group_backend>>>();
  std::thread([a = spanning_member(id, member, size, rank), connected]() mutable {
    try {
      connected->set_value(connect_member(std::move(a)));
    } catch (...) {
      connected->set_exception(std::current_exception());
    }
  }).detach();
  return std::make_shared<remote_tp_member>(member, size, connected->get_future().share(), args_.join_timeout_ms);
}

const device_group_choice& mesh_links::tp_choice(int group) {
  if (tp_choices_.empty()) {  // once for the mesh: the job checked it before it spawned anything
    check_tp_groups_on_devices(args_.engines, plan_.mesh, args_.device_of, args_.devices_across_processes);
    tp_choices_ =
        choose_device_groups(args_.engines, plan_.mesh, args_.device_of, sched::axis::tp, args_.devices_across_processes);
  }
  return tp_choices_.at(static_cast<size_t>(group));
}

std::vector<std::shared_ptr<tp_group>> mesh_links::device_tp_group(int group, const std::vector<int>& ranks) {
  if (!args_.device_of) return {};
  if (args_.device_of(ranks.front()).is_cpu()) {
    tp_choice(group);  // the mesh's check, all the same
    return {};
  }
  const device_group_choice& choice = tp_choice(group);
  std::vector<int> indices;
  std::string names;
  for (int r : ranks) {
    indices.push_back(args_.device_of(r).index);
    names += (names.empty() ? "" : ",") + args_.device_of(r).to_string();
  }
  spdlog::info("tensor-parallel group {} ({}) sums its layers' partial results on the devices through {}", group,
               names, choice.engine->name());
  return net::make_device_tp_group(choice.engine, indices);
}

const device_group_choice* mesh_links::device_choice(int id, const std::vector<int>& ranks) {
  if (args_.engines.empty() || !args_.device_of || !args_.dp_on_devices) return nullptr;
  if (device_choices_.empty())
    device_choices_ =
        choose_device_groups(args_.engines, plan_.mesh, args_.device_of, sched::axis::dp, args_.devices_across_processes);
  std::string names;
  for (int r : ranks) names += (names.empty() ? "" : ",") + args_.device_of(r).to_string();
  const device_group_choice& choice = device_choices_.at(static_cast<size_t>(id));
  if (!choice.why.empty())
    spdlog::info("data-parallel group {} ({}) reduces its buckets through the host: {}", id, names, choice.why);
  if (!choice.on_devices) return nullptr;
  spdlog::info("data-parallel group {} ({}) reduces its buckets on the devices through {}", id, names,
               choice.engine->name());
  return &choice;
}

std::vector<caf::actor> mesh_links::device_group(int id, const std::vector<int>& ranks) {
  const device_group_choice* choice = device_choice(id, ranks);
  if (!choice) return {};
  const std::string engine = choice->engine->name();
  const int size = static_cast<int>(ranks.size());
  std::vector<caf::actor> members(ranks.size());
  // The first member last: it sends the id it makes to the others, so it needs their handles.
  for (int member = size - 1; member >= 0; --member) {
    net_collective_args a;
    a.env = launch_env{member, size, args_.local_host, 0, engine};
    a.device_engine = choice->engine;
    a.device_index = args_.device_of(ranks[static_cast<size_t>(member)]).index;
    a.rendezvous_timeout_ms = args_.join_timeout_ms;
    if (member == 0) a.id_to.assign(members.begin() + 1, members.end());
    members[static_cast<size_t>(member)] = spawn_member(std::move(a));
  }
  return members;
}

namespace {
const char* const kDeviceGroupIdKey = "device-group-id";
}  // namespace

std::function<std::string()> mesh_links::device_group_id_source(
    int id, int member, const std::shared_ptr<net::device_group_engine>& engine) {
  if (member == 0) {  // serves the group's store from now on, so serves() can publish its port
    auto store = std::make_shared<net::kv_server>(args_.local_host, 0, args_.secret);
    std::promise<uint16_t> port;
    port.set_value(store->port());
    leaders_.push_back({id, port.get_future().share()});
    const std::string made = engine->make_id();
    store->set(kDeviceGroupIdKey, std::vector<char>(made.begin(), made.end()));
    return [store, made] { return made; };  // the store lives as long as the member
  }
  return [where = rendezvous_[id].future, member, secret = args_.secret, timeout = args_.join_timeout_ms] {
    if (where.wait_for(std::chrono::milliseconds(timeout)) != std::future_status::ready)
      throw net::net_error("the address of its device group's store did not arrive within " + std::to_string(timeout) +
                           " ms");
    const auto [host, port] = where.get();  // a broken promise: the job ended first
    const std::unique_ptr<net::kv_store> store =
        net::kv_connect(host, port, secret, static_cast<uint32_t>(member), timeout);
    const std::vector<char> id = store->get(kDeviceGroupIdKey, timeout);
    return std::string(id.begin(), id.end());
  };
}

caf::actor mesh_links::spanning_device_member(int id, int member, const std::vector<int>& ranks) {
  const device_group_choice* choice = device_choice(id, ranks);
  if (!choice) return {};
  net_collective_args a;
  const int size = static_cast<int>(ranks.size());
  a.env = launch_env{member, size, args_.local_host, 0, choice->engine->name()};
  a.device_engine = choice->engine;
  a.device_index = args_.device_of(ranks[static_cast<size_t>(member)]).index;
  a.rendezvous_timeout_ms = args_.join_timeout_ms;
  a.group_id = device_group_id_source(id, member, choice->engine);
  return spawn_member(std::move(a));
}

std::shared_ptr<tp_group> mesh_links::spanning_device_tp_member(int id, int member, const std::vector<int>& ranks) {
  if (!args_.device_of || !args_.devices_across_processes || args_.device_of(ranks.front()).is_cpu()) return nullptr;
  const int group = plan_.mesh.group_index(sched::axis::tp, ranks.front());
  const device_group_choice& choice = tp_choice(group);
  if (!choice.on_devices) throw std::logic_error("spanning_device_tp_member: the mesh's check let a group through");
  const device d = args_.device_of(ranks[static_cast<size_t>(member)]);
  spdlog::info("tensor-parallel group {} member {} ({}) sums its layers' partial results on the devices through {}, "
               "across processes", group, member, d.to_string(), choice.engine->name());
  return net::spanning_device_tp_member(choice.engine, device_group_id_source(id, member, choice.engine), member,
                                        static_cast<int>(ranks.size()), d.index);
}

caf::actor mesh_links::spawn_member(net_collective_args a) {
  caf::actor c = spawn_net_collective(sys_, std::move(a));
  actors_.push_back(c);
  detached_.push_back(c);
  collectives_.push_back(c);
  return c;
}

void mesh_links::connect_pipelines(const std::vector<caf::actor>& local_stages, const caf::actor& coordinator) {
  const sched::mesh& m = plan_.mesh;
  const auto mine = m.ranks_of_process(args_.process);
  std::map<int, caf::actor> local;
  for (size_t i = 0; i < mine.size(); ++i) local[mine[i]] = local_stages.at(i);
  {
    std::lock_guard<std::mutex> lock(receiver_->mu);
    receiver_->coordinator = coordinator;
    receiver_->local = local;
  }
  if (m.pp == 1) return;
  for (int r : mine) {
    std::vector<caf::actor> peers;
    for (int q : m.group(sched::axis::pp, r)) {
      if (m.process_of(q) == args_.process) {
        peers.push_back(local.at(q));
        continue;
      }
      auto& proxy = proxies_[q];
      if (!proxy) {
        proxy = spawn_pipeline_proxy(sys_, q, m.process_of(q), transport_, coordinator);
        actors_.push_back(proxy);
      }
      peers.push_back(args_.device_link && args_.device_link(r, q) ? link_ends(r, q, local.at(r), proxy, coordinator)
                                                                   : proxy);
    }
    caf::anon_send(local.at(r), peers_atom::value, std::move(peers));
  }
}

caf::actor mesh_links::link_ends(int r, int q, const caf::actor& stage, const caf::actor& host_proxy,
                                 const caf::actor& coordinator) {
  std::shared_ptr<net::device_group_engine> engine;
  for (const auto& e : args_.engines)
    if (e->spans_processes()) {
      engine = e;
      break;
    }
  if (!engine)
    throw std::invalid_argument("pipeline link from rank " + std::to_string(r) + " to rank " + std::to_string(q) +
                                ": no engine for links between devices in different processes");
  const device here = args_.device_of(r);
  spdlog::info("pipeline ranks {} ({}) and {} pass their tensors over links between the devices through {}, across "
               "processes", r, here.to_string(), q, engine->name());
  const device_link_end sending{r, q, here, engine, coordinator}, receiving{q, r, here, engine, coordinator};
  caf::actor sender = spawn_link_sender(sys_, sending, plan_.mesh.process_of(q), transport_, host_proxy);
  caf::actor receiver = spawn_link_receiver(sys_, receiving, stage);
  {
    std::lock_guard<std::mutex> lock(receiver_->mu);
    receiver_->device_in[{q, r}] = receiver;
  }
  for (const auto& a : {sender, receiver}) {
    actors_.push_back(a);
    detached_.push_back(a);
  }
  link_senders_.emplace_back(q, sender);
  return sender;
}

process_endpoints mesh_links::serves() {
  process_endpoints out;
  for (auto& l : leaders_) {
    if (l.port.wait_for(std::chrono::milliseconds(args_.join_timeout_ms)) != std::future_status::ready)
      throw std::runtime_error("process " + std::to_string(args_.process) + ": the rendezvous of process-spanning group " +
                               std::to_string(l.group) + " did not listen on " + args_.local_host);
    uint16_t port = 0;
    try {
      port = l.port.get();
    } catch (const std::future_error&) {  // the member failed before listening, and said why
      throw std::runtime_error("process " + std::to_string(args_.process) + ": the rendezvous of process-spanning group " +
                               std::to_string(l.group) + " cannot listen on " + args_.local_host +
                               " (the data plane's error above; is that an address of this machine?)");
    }
    out.ring_groups.push_back(l.group);
    out.ring_hosts.push_back(args_.local_host);
    out.ring_ports.push_back(port);
  }
  if (transport_) {
    out.p2p_host = args_.local_host;
    out.p2p_port = transport_->port();
  }
  return out;
}

void mesh_links::apply(const mesh_addresses& a) {
  for (auto& [group, wait] : rendezvous_) {
    const auto g = static_cast<size_t>(group);
    if (g < a.ring_hosts.size() && g < a.ring_ports.size())
      wait.promise.set_value({a.ring_hosts[g], static_cast<uint16_t>(a.ring_ports[g])});
  }
  rendezvous_.clear();
  auto tell = [&](int rank, const caf::actor& to) {
    const auto p = static_cast<size_t>(plan_.mesh.process_of(rank));
    if (p < a.p2p_hosts.size() && p < a.p2p_ports.size())
      send_p2p_address(to, a.p2p_hosts[p], a.p2p_ports[p]);
  };
  for (auto& [rank, proxy] : proxies_) tell(rank, proxy);
  for (auto& [to, sender] : link_senders_) tell(to, sender);
}

void mesh_links::stop() {
  for (auto& i : interrupts_) i->fire();
  rendezvous_.clear();  // a member still waiting for its address gives up at once (broken promise)
  if (transport_) transport_->abort();
}

}  // namespace troupe
