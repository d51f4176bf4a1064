// mesh_links: collectives and pipeline peers of one process's ranks (mesh_links.hpp).
#include "actors/job/mesh_links.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "comm/gloo_group.hpp"
#include "comm/kv_store.hpp"
#include "comm/tp_groups.hpp"

#include "actors/collective/collective.hpp"
#include "actors/process/net_actors.hpp"
#include "actors/stage/stage.hpp"

namespace troupe {

namespace {

using address_atom = caf::atom_constant<caf::atom("p2paddr")>;

// A tensor's identity on the wire: what pipeline_tensor_msg carries besides the values, and the
// rank it is for. Over a device link (pipeline_on_device_link, from_rank >= 0) a tensor's bytes go
// GPU to GPU and the host transport carries its announcement, in the order the link carries the
// bytes: a name of its own with the sender too, the dtype and, after a leading 0, the shape (a
// tensor of no element, so the frame carries no payload). Before the first, the link's id, as
// bytes (link_id_wire_name). The decoders accept exactly what the encoders write.
std::string wire_name(const pipeline_tensor_msg& m, int to_rank, int from_rank = -1) {
  std::string out = std::string(from_rank < 0 ? "pp" : "ppd") + " s=" + std::to_string(m.step) +
                    " g=" + (m.is_grad ? "1" : "0") + " m=" + std::to_string(m.microbatch) +
                    " b=" + std::to_string(m.boundary);
  if (from_rank >= 0) out += " from=" + std::to_string(from_rank);
  return out + " to=" + std::to_string(to_rank);
}

enum class wire_kind { none, host, announced };
wire_kind parse_wire_name(const std::string& name, pipeline_tensor_msg& m, int& from_rank, int& to_rank) {
  long long step = 0;
  int grad = 0, mb = 0, boundary = 0, from = -1, to = 0, used = 0;
  const bool announced = name.rfind("ppd ", 0) == 0;
  const int fields =
      announced ? std::sscanf(name.c_str(), "ppd s=%lld g=%d m=%d b=%d from=%d to=%d%n", &step, &grad, &mb, &boundary,
                              &from, &to, &used)
                : std::sscanf(name.c_str(), "pp s=%lld g=%d m=%d b=%d to=%d%n", &step, &grad, &mb, &boundary, &to, &used);
  if (fields != (announced ? 6 : 5) || static_cast<size_t>(used) != name.size() || (grad != 0 && grad != 1) ||
      (announced && from < 0))
    return wire_kind::none;
  m.step = step;
  m.is_grad = grad == 1;
  m.microbatch = mb;
  m.boundary = boundary;
  from_rank = from;
  to_rank = to;
  if (wire_name(m, to, from) != name) return wire_kind::none;  // one spelling only
  return announced ? wire_kind::announced : wire_kind::host;
}

std::string link_id_wire_name(int from_rank, int to_rank) {
  return "ppl from=" + std::to_string(from_rank) + " to=" + std::to_string(to_rank);
}

bool parse_link_id_wire_name(const std::string& name, int& from_rank, int& to_rank) {
  int from = 0, to = 0, used = 0;
  if (std::sscanf(name.c_str(), "ppl from=%d to=%d%n", &from, &to, &used) != 2 || static_cast<size_t>(used) != name.size())
    return false;
  from_rank = from;
  to_rank = to;
  return link_id_wire_name(from, to) == name;
}

// The transport's names for tensor dtypes: it carries any of them, as bytes.
wire::dtype wire_dtype(dtype d) {
  switch (d) {
    case dtype::f32: return wire::dtype::f32;
    case dtype::bf16: return wire::dtype::bf16;
    case dtype::f16: return wire::dtype::f16;
  }
  return wire::dtype::u8;
}

std::optional<dtype> tensor_dtype(wire::dtype d) {
  switch (d) {
    case wire::dtype::f32: return dtype::f32;
    case wire::dtype::bf16: return dtype::bf16;
    case wire::dtype::f16: return dtype::f16;
    case wire::dtype::i32:
    case wire::dtype::i64:
    case wire::dtype::u8: return std::nullopt;
  }
  return std::nullopt;
}

struct proxy_state {
  int to_rank = 0, to_process = 0;
  std::shared_ptr<net::p2p_transport> transport;
  caf::actor coordinator;
  std::string host;
  uint16_t port = 0;
  uint64_t next_id = 0;
  std::vector<pipeline_tensor_msg> waiting;  // sent before the address arrived
  static inline const char* name = "pipeline_proxy";
};

void forward(caf::stateful_actor<proxy_state>* self, pipeline_tensor_msg m) {
  auto& s = self->state;
  if (!m.value.where().is_cpu()) {
    // The transport reads host memory: a GPU stage sends a stage elsewhere a host copy (stage.cpp).
    caf::anon_send(s.coordinator, pipeline_failure{s.to_rank, "pipeline link to rank " + std::to_string(s.to_rank) +
                                                                  ": a tensor on " + m.value.where().to_string() +
                                                                  " cannot cross the host transport"});
    return;
  }
  wire::tensor_meta meta;
  meta.tensor_id = s.next_id++;
  meta.name = wire_name(m, s.to_rank);
  meta.type = wire_dtype(m.value.type());
  meta.shape = m.value.shape();
  const tensor keep = m.value;  // frozen; its bytes stay valid until the transport is done
  const auto bytes = static_cast<size_t>(keep.nbytes());
  s.transport->send(s.to_process, s.host, s.port, std::move(meta), keep.raw(), bytes,
                    [keep, coordinator = s.coordinator, to = s.to_rank](std::optional<std::string> err) {
                      if (err && *err != "stopped")
                        caf::anon_send(coordinator, pipeline_failure{to, "pipeline link to rank " + std::to_string(to) +
                                                                             ": " + *err});
                    });
}

// Stands for a stage in another process: what a local stage sends it crosses on the transport.
caf::behavior pipeline_proxy(caf::stateful_actor<proxy_state>* self, int to_rank, int to_process,
                             std::shared_ptr<net::p2p_transport> transport, caf::actor coordinator) {
  auto& s = self->state;
  s.to_rank = to_rank;
  s.to_process = to_process;
  s.transport = std::move(transport);
  s.coordinator = std::move(coordinator);
  return {
      [self](pipeline_tensor_msg& m) {
        if (self->state.port == 0) self->state.waiting.push_back(std::move(m));
        else forward(self, std::move(m));
      },
      [self](address_atom, const std::string& host, int32_t port) {
        auto& s = self->state;
        s.host = host;
        s.port = static_cast<uint16_t>(port);
        for (auto& m : s.waiting) forward(self, std::move(m));
        s.waiting.clear();
      },
  };
}

using link_id_atom = caf::atom_constant<caf::atom("linkid")>;

void report(const caf::actor& coordinator, int rank, const std::string& what) {
  caf::anon_send(coordinator, pipeline_failure{rank, what});
}

std::string link_name(int from, int to) {
  return "pipeline link from rank " + std::to_string(from) + " to rank " + std::to_string(to);
}

// One end of the device link from -> to, joined with the id `id` gives (the sending end makes
// it there and sends it on); null, with the failure reported as its rank's, when it cannot be.
std::shared_ptr<net::device_link> join_end(net::device_group_engine& engine, bool sender, int device_index, int from,
                                           int to, const caf::actor& coordinator,
                                           const std::function<std::string()>& id) {
  try {
    std::shared_ptr<net::device_link> link = engine.join_link(id(), sender, device_index);
    if (!link) throw std::runtime_error(engine.name() + " has no links between devices");
    return link;
  } catch (const std::exception& e) {
    report(coordinator, sender ? from : to, link_name(from, to) + ": joining it failed: " + e.what());
    return nullptr;
  }
}

// The sending end of the device link from a local stage to one in another process (one per
// pair and direction: a link's sends and receives are matched in order). Detached: joining the
// link waits for its other end. Once the transport's address is known it makes the link's id,
// sends it, and joins; every device tensor the stage hands it then goes as an announcement on
// the transport and its bytes on the link, in that order, the tensor kept until the link is done
// with it. What the stage sends from the host goes on the transport, through the host proxy.
struct link_sender_state {
  int from_rank = 0, to_rank = 0, to_process = 0, device_index = 0;
  std::shared_ptr<net::p2p_transport> transport;
  std::shared_ptr<net::device_group_engine> engine;
  caf::actor host_proxy, coordinator;
  std::string host;
  uint16_t port = 0;
  uint64_t next_id = uint64_t{1} << 63;  // apart from the host proxy's ids on the same connection
  std::shared_ptr<net::device_link> link;
  std::vector<pipeline_tensor_msg> waiting;  // handed over before the link was joined
  static inline const char* name = "pipeline_link_sender";
};

void send_on_link(caf::stateful_actor<link_sender_state>* self, pipeline_tensor_msg m) {
  auto& s = self->state;
  const std::string where = link_name(s.from_rank, s.to_rank) + " on " + s.engine->name();
  wire::tensor_meta meta;
  meta.tensor_id = s.next_id++;
  meta.name = wire_name(m, s.to_rank, s.from_rank);
  meta.type = wire_dtype(m.value.type());
  meta.shape = m.value.shape();
  meta.shape.insert(meta.shape.begin(), 0);
  auto failed = [coordinator = s.coordinator, to = s.to_rank, where](std::optional<std::string> err) {
    if (err && *err != "stopped") report(coordinator, to, where + ": " + *err);
  };
  s.transport->send(s.to_process, s.host, s.port, std::move(meta), nullptr, 0, failed);
  const tensor keep = m.value;  // until the link has read it
  s.link->send(keep.raw(), static_cast<size_t>(keep.nbytes()), [keep, failed](std::optional<std::string> err) {
    failed(std::move(err));
  });
}

void join_sending_end(caf::stateful_actor<link_sender_state>* self) {
  auto& s = self->state;
  s.link = join_end(*s.engine, true, s.device_index, s.from_rank, s.to_rank, s.coordinator, [&s] {
    const std::string id = s.engine->make_id();
    wire::tensor_meta meta;
    meta.tensor_id = s.next_id++;
    meta.name = link_id_wire_name(s.from_rank, s.to_rank);
    meta.type = wire::dtype::u8;
    meta.shape = {static_cast<int64_t>(id.size())};
    auto bytes = std::make_shared<const std::string>(id);  // until the transport has written it
    s.transport->send(s.to_process, s.host, s.port, std::move(meta), bytes->data(), bytes->size(),
                      [bytes](std::optional<std::string>) {});  // a failed send fails the join's peer
    return id;
  });
  if (!s.link) return;
  for (auto& m : s.waiting) send_on_link(self, std::move(m));
  s.waiting.clear();
}

caf::behavior pipeline_link_sender(caf::stateful_actor<link_sender_state>* self, link_sender_state init) {
  self->state = std::move(init);
  return {
      [self](pipeline_tensor_msg& m) {
        auto& s = self->state;
        if (m.value.where().is_cpu()) self->send(s.host_proxy, std::move(m));
        else if (!s.link) s.waiting.push_back(std::move(m));
        else send_on_link(self, std::move(m));
      },
      [self](address_atom, const std::string& host, int32_t port) {
        self->state.host = host;
        self->state.port = static_cast<uint16_t>(port);
        join_sending_end(self);
      },
  };
}

// The receiving end of the device link from a stage in another process to a local one. Detached,
// as the sending end. It joins once the link's id arrives; for each announcement, in order, it
// posts the receive of the bytes into device memory of the stage's device, and the stage gets the
// tensor once they are there.
struct link_receiver_state {
  int from_rank = 0, to_rank = 0;
  device where;
  std::shared_ptr<net::device_group_engine> engine;
  caf::actor stage, coordinator;
  std::shared_ptr<net::device_link> link;
  std::vector<pipeline_tensor_msg> waiting;  // announced before the link was joined
  static inline const char* name = "pipeline_link_receiver";
};

void receive_on_link(caf::stateful_actor<link_receiver_state>* self, pipeline_tensor_msg m) {
  auto& s = self->state;
  shape_t dims(m.value.shape().begin() + 1, m.value.shape().end());  // after the announcement's 0
  m.value = tensor::uninitialized(std::move(dims), m.value.type(), s.where);
  tensor into = m.value;
  s.link->recv(into.raw(), static_cast<size_t>(into.nbytes()),
               [m = std::move(m), stage = s.stage, coordinator = s.coordinator, from = s.from_rank, to = s.to_rank,
                engine = s.engine->name()](std::optional<std::string> err) mutable {
                 if (err) {
                   if (*err != "stopped") report(coordinator, to, link_name(from, to) + " on " + engine + ": " + *err);
                   return;
                 }
                 m.value.freeze();
                 caf::anon_send(stage, std::move(m));
               });
}

caf::behavior pipeline_link_receiver(caf::stateful_actor<link_receiver_state>* self, link_receiver_state init) {
  self->state = std::move(init);
  return {
      [self](pipeline_tensor_msg& m) {
        auto& s = self->state;
        if (!s.link) s.waiting.push_back(std::move(m));
        else receive_on_link(self, std::move(m));
      },
      [self](link_id_atom, const std::string& id) {
        auto& s = self->state;
        if (s.link) return;
        s.link = join_end(*s.engine, false, s.where.index, s.from_rank, s.to_rank, s.coordinator, [&id] { return id; });
        if (!s.link) return;
        for (auto& m : s.waiting) receive_on_link(self, std::move(m));
        s.waiting.clear();
      },
  };
}

}  // namespace

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

void mesh_links::receiver::refuse(int from, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu);
  caf::anon_send(coordinator, pipeline_failure{-1, "pipeline link from process " + std::to_string(from) + ": " + why});
}

void mesh_links::receiver::deliver(int from, const wire::tensor_meta& meta, std::vector<uint8_t> bytes) {
  pipeline_tensor_msg m;
  int to = -1, from_rank = -1;
  caf::actor stage;
  const bool link_id = parse_link_id_wire_name(meta.name, from_rank, to);
  const wire_kind kind = link_id ? wire_kind::none : parse_wire_name(meta.name, m, from_rank, to);
  const bool announced = kind == wire_kind::announced;
  if (!link_id && kind == wire_kind::none)
    return refuse(from, "a tensor named \"" + meta.name + "\" is no pipeline tensor");
  {
    std::lock_guard<std::mutex> lock(mu);
    if (link_id || announced) {
      auto it = device_in.find({from_rank, to});
      if (it != device_in.end()) stage = it->second;
    } else {
      auto it = local.find(to);
      if (it != local.end()) stage = it->second;
    }
  }
  if (!stage && (link_id || announced))
    return refuse(from, "a device link's tensor from rank " + std::to_string(from_rank) + " to rank " +
                            std::to_string(to) + ", which this process has no link for");
  if (!stage) return refuse(from, "a tensor for rank " + std::to_string(to) + ", which is not in this process");
  if (link_id) {
    if (meta.type != wire::dtype::u8) return refuse(from, "a device link's id that is not bytes");
    caf::anon_send(stage, link_id_atom::value, std::string(bytes.begin(), bytes.end()));
    return;
  }
  if (announced && (meta.shape.empty() || meta.shape.front() != 0))
    return refuse(from, "a device link's announcement whose shape does not start with 0");
  const std::optional<dtype> type = tensor_dtype(meta.type);
  if (!type)
    return refuse(from, "a tensor of wire dtype " + std::to_string(static_cast<int>(meta.type)) + ", not f32, bf16 or f16");
  int64_t n = 1;
  for (int64_t d : meta.shape) n *= d;
  if (static_cast<uint64_t>(n) * size_of(*type) != bytes.size())
    return refuse(from, "a tensor whose shape does not match its bytes");
  m.value = tensor::uninitialized(meta.shape, *type, device{});
  if (n > 0) std::memcpy(m.value.raw(), bytes.data(), bytes.size());
  m.value.freeze();
  caf::anon_send(stage, std::move(m));
}

int comm_group_id(const sched::mesh& m, sched::axis a, int rank) {
  return a == sched::axis::dp ? m.group_index(a, rank) : m.groups(sched::axis::dp) + m.group_index(sched::axis::tp, rank);
}
int comm_params_group_id(const sched::mesh& m, int rank) {
  return m.groups(sched::axis::dp) + m.groups(sched::axis::tp) + m.group_index(sched::axis::dp, rank);
}
int comm_group_count(const sched::mesh& m) { return 2 * m.groups(sched::axis::dp) + m.groups(sched::axis::tp); }

rank_collective mesh_links::collective_of(int rank) {
  const sched::mesh& m = plan_.mesh;
  if (m.dp == 1) return {};
  const sched::mesh_coords at = m.coords_of(rank);
  const int id = comm_group_id(m, sched::axis::dp, rank);
  if (!m.group_spans_processes(sched::axis::dp, rank)) {
    local_group& g = local_groups_[id];
    if (g.members.empty()) {
      g.members = device_group(id, m.group(sched::axis::dp, rank));
      g.on_device = !g.members.empty();
      if (!g.on_device) {
        g.members = spawn_collective_group(sys_, m.dp, collective_options_from_env());
        actors_.insert(actors_.end(), g.members.begin(), g.members.end());
        collectives_.insert(collectives_.end(), g.members.begin(), g.members.end());
      }
    }
    return {g.members.at(static_cast<size_t>(at.dp)), g.on_device};
  }
  // On the devices through an engine that spans processes (NCCL), when the members all have one;
  // else through the host's back end.
  if (caf::actor c = spanning_device_member(id, at.dp, m.group(sched::axis::dp, rank))) return {c, true};
  if (args_.mpi) {
    net_collective_args a;
    std::shared_ptr<net::group_backend> member = args_.mpi->take(id);
    a.env = launch_env{at.dp, m.dp, args_.local_host, 0, "mpi"};
    a.make_backend = [member] { return member; };
    return {spawn_member(std::move(a))};
  }
  return {spawn_member(spanning_member(id, at.dp, m.dp, rank))};
}

net_collective_args mesh_links::spanning_member(int id, int member, int size, int rank) {
  return args_.gloo ? gloo_member(id, member, size) : ring_member(id, member, size, rank);
}

net_collective_args mesh_links::gloo_member(int id, int member, int size) {
  net_collective_args a;
  a.env = launch_env{member, size, args_.local_host, 0, "gloo"};
  const net::gloo_options g{args_.local_host, args_.ring.io_timeout_ms};
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

std::shared_ptr<tp_group> mesh_links::tp_of(int rank) {
  const sched::mesh& m = plan_.mesh;
  if (m.tp == 1) return nullptr;
  const int t = m.coords_of(rank).tp;
  const int id = comm_group_id(m, sched::axis::tp, rank);
  if (!m.group_spans_processes(sched::axis::tp, rank)) {
    auto& g = local_tp_[id];
    if (g.empty()) g = device_tp_group(m.group_index(sched::axis::tp, rank), m.group(sched::axis::tp, rank));
    if (g.empty()) g = net::make_local_tp_group(m.tp, {args_.join_timeout_ms});
    return g.at(static_cast<size_t>(t));
  }
  if (auto d = spanning_device_tp_member(id, t, m.group(sched::axis::tp, rank))) return d;
  return remote_group_member(id, t, m.tp, rank);
}

std::shared_ptr<tp_group> mesh_links::params_of(int rank) {
  const sched::mesh& m = plan_.mesh;
  if (!args_.zero3 || m.dp == 1) return nullptr;
  const int d = m.coords_of(rank).dp;
  const int id = comm_params_group_id(m, rank);
  if (!m.group_spans_processes(sched::axis::dp, rank)) {
    auto& g = local_tp_[id];
    if (g.empty()) g = net::make_local_tp_group(m.dp, {args_.join_timeout_ms});
    return g.at(static_cast<size_t>(d));
  }
  return remote_group_member(id, d, m.dp, rank);
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
        proxy = sys_.spawn(pipeline_proxy, q, m.process_of(q), transport_, coordinator);
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
    throw std::invalid_argument(link_name(r, q) + ": no engine for links between devices in different processes");
  const device here = args_.device_of(r);
  spdlog::info("pipeline ranks {} ({}) and {} pass their tensors over links between the devices through {}, across "
               "processes", r, here.to_string(), q, engine->name());
  link_sender_state out;
  out.from_rank = r;
  out.to_rank = q;
  out.to_process = plan_.mesh.process_of(q);
  out.device_index = here.index;
  out.transport = transport_;
  out.engine = engine;
  out.host_proxy = host_proxy;
  out.coordinator = coordinator;
  caf::actor sender = sys_.spawn<caf::detached>(pipeline_link_sender, std::move(out));
  link_receiver_state in;
  in.from_rank = q;
  in.to_rank = r;
  in.where = here;
  in.engine = engine;
  in.stage = stage;
  in.coordinator = coordinator;
  caf::actor receiver = sys_.spawn<caf::detached>(pipeline_link_receiver, std::move(in));
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
    out.ring_groups.push_back(l.group);
    out.ring_hosts.push_back(args_.local_host);
    out.ring_ports.push_back(l.port.get());
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
      caf::anon_send(to, address_atom::value, a.p2p_hosts[p], a.p2p_ports[p]);
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
