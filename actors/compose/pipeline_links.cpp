// pipeline_links: a stage's pipeline tensors to and from other processes (pipeline_links.hpp).
#include "actors/compose/pipeline_links.hpp"

#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

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

void report(const caf::actor& coordinator, int rank, const std::string& what) {
  caf::anon_send(coordinator, pipeline_failure{rank, what});
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
    report(s.coordinator, s.to_rank,
           "pipeline link to rank " + std::to_string(s.to_rank) + ": a tensor on " + m.value.where().to_string() +
               " cannot cross the host transport");
    return;
  }
  wire::tensor_meta meta;
  meta.tensor_id = s.next_id++;
  meta.name = wire_name(m, s.to_rank);
  meta.type = m.value.type();
  meta.shape = m.value.shape();
  const tensor keep = m.value;  // frozen; its bytes stay valid until the transport is done
  const auto bytes = static_cast<size_t>(keep.nbytes());
  s.transport->send(s.to_process, s.host, s.port, std::move(meta), keep.raw(), bytes,
                    [keep, coordinator = s.coordinator, to = s.to_rank](std::optional<std::string> err) {
                      if (err && *err != "stopped")
                        report(coordinator, to, "pipeline link to rank " + std::to_string(to) + ": " + *err);
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
  std::string label;  // "pipeline link from rank R to rank Q on ENGINE", for its failures
  std::shared_ptr<net::device_link> link;
  std::vector<pipeline_tensor_msg> waiting;  // handed over before the link was joined
  static inline const char* name = "pipeline_link_sender";
};

void send_on_link(caf::stateful_actor<link_sender_state>* self, pipeline_tensor_msg m) {
  auto& s = self->state;
  wire::tensor_meta meta;
  meta.tensor_id = s.next_id++;
  meta.name = wire_name(m, s.to_rank, s.from_rank);
  meta.type = m.value.type();
  meta.shape = m.value.shape();
  meta.shape.insert(meta.shape.begin(), 0);
  auto failed = [coordinator = s.coordinator, to = s.to_rank, label = s.label](std::optional<std::string> err) {
    if (err && *err != "stopped") report(coordinator, to, label + ": " + *err);
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
    meta.type = dtype::u8;
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

caf::actor spawn_pipeline_proxy(caf::actor_system& sys, int to_rank, int to_process,
                                std::shared_ptr<net::p2p_transport> transport, caf::actor coordinator) {
  return sys.spawn(pipeline_proxy, to_rank, to_process, std::move(transport), std::move(coordinator));
}

caf::actor spawn_link_sender(caf::actor_system& sys, const device_link_end& end, int to_process,
                             std::shared_ptr<net::p2p_transport> transport, caf::actor host_proxy) {
  link_sender_state s;
  s.from_rank = end.from_rank;
  s.to_rank = end.to_rank;
  s.to_process = to_process;
  s.device_index = end.where.index;
  s.transport = std::move(transport);
  s.engine = end.engine;
  s.host_proxy = std::move(host_proxy);
  s.coordinator = end.coordinator;
  s.label = link_name(end.from_rank, end.to_rank) + " on " + end.engine->name();
  return sys.spawn<caf::detached>(pipeline_link_sender, std::move(s));
}

caf::actor spawn_link_receiver(caf::actor_system& sys, const device_link_end& end, caf::actor stage) {
  link_receiver_state s;
  s.from_rank = end.from_rank;
  s.to_rank = end.to_rank;
  s.where = end.where;
  s.engine = end.engine;
  s.stage = std::move(stage);
  s.coordinator = end.coordinator;
  return sys.spawn<caf::detached>(pipeline_link_receiver, std::move(s));
}

void send_p2p_address(const caf::actor& to, const std::string& host, int32_t port) {
  caf::anon_send(to, address_atom::value, host, port);
}

void pipeline_receiver::refuse(int from, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu);
  caf::anon_send(coordinator, pipeline_failure{-1, "pipeline link from process " + std::to_string(from) + ": " + why});
}

void pipeline_receiver::deliver(int from, const wire::tensor_meta& meta, std::vector<uint8_t> bytes) {
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
    if (meta.type != dtype::u8) return refuse(from, "a device link's id that is not bytes");
    caf::anon_send(stage, link_id_atom::value, std::string(bytes.begin(), bytes.end()));
    return;
  }
  if (announced && (meta.shape.empty() || meta.shape.front() != 0))
    return refuse(from, "a device link's announcement whose shape does not start with 0");
  // Activations and gradients are floats; integers here are a peer's bug, not a tensor to pass on.
  if (!is_floating(meta.type))
    return refuse(from, std::string("a tensor of dtype ") + to_string(meta.type) + ", not f32, bf16 or f16");
  int64_t n = 1;
  for (int64_t d : meta.shape) n *= d;
  if (static_cast<uint64_t>(n) * size_of(meta.type) != bytes.size())
    return refuse(from, "a tensor whose shape does not match its bytes");
  m.value = tensor::uninitialized(meta.shape, meta.type, device{});
  if (n > 0) std::memcpy(m.value.raw(), bytes.data(), bytes.size());
  m.value.freeze();
  caf::anon_send(stage, std::move(m));
}

}  // namespace troupe
