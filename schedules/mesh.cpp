// The mesh's arithmetic (see mesh.hpp).
#include "schedules/mesh.hpp"

#include <cstdio>
#include <stdexcept>

namespace troupe::sched {

const char* to_string(axis a) {
  switch (a) {
    case axis::dp:
      return "dp";
    case axis::pp:
      return "pp";
    case axis::tp:
      return "tp";
    case axis::cp:
      return "cp";
    case axis::ep:
      return "ep";
    case axis::edp:
      return "edp";
  }
  return "?";
}

int mesh::size(axis a) const {
  switch (a) {
    case axis::dp:
      return dp * cp;
    case axis::pp:
      return pp;
    case axis::tp:
      return tp;
    case axis::cp:
      return cp;
    case axis::ep:
      return ep;
    case axis::edp:
      return dp * cp / ep;
  }
  return 1;
}

mesh_coords mesh::coords_of(int rank) const {
  if (rank < 0 || rank >= ranks())
    throw std::out_of_range("rank " + std::to_string(rank) + " is not in mesh " + to_string(*this));
  const int replica = rank / (pp * tp);
  return {replica / cp, (rank / tp) % pp, rank % tp, replica % cp};
}

int mesh::rank_of(const mesh_coords& c) const { return ((c.dp * cp + c.cp) * pp + c.pp) * tp + c.tp; }

int mesh::replica_of(int rank) const { return coords_of(rank).dp * cp + coords_of(rank).cp; }

int mesh::place_in(axis a, int rank) const {
  const mesh_coords c = coords_of(rank);
  const int replica = c.dp * cp + c.cp;
  switch (a) {
    case axis::dp: return replica;
    case axis::pp: return c.pp;
    case axis::tp: return c.tp;
    case axis::cp: return c.cp;
    case axis::ep: return replica % ep;
    case axis::edp: return replica / ep;
  }
  return 0;
}

int mesh::group_index(axis a, int rank) const {
  const mesh_coords c = coords_of(rank);
  const int replica = c.dp * cp + c.cp;
  switch (a) {
    case axis::dp: return c.pp * tp + c.tp;
    case axis::pp: return replica * tp + c.tp;
    case axis::tp: return replica * pp + c.pp;
    case axis::cp: return (c.dp * pp + c.pp) * tp + c.tp;
    case axis::ep: return (replica / ep * pp + c.pp) * tp + c.tp;
    case axis::edp: return (replica % ep * pp + c.pp) * tp + c.tp;
  }
  return 0;
}

std::vector<int> mesh::group(axis a, int rank) const {
  const mesh_coords at = coords_of(rank);
  const int replica = at.dp * cp + at.cp;
  std::vector<int> out;
  for (int i = 0; i < size(a); ++i) {
    mesh_coords c = at;
    auto at_replica = [&](int r) {
      c.dp = r / cp;
      c.cp = r % cp;
    };
    switch (a) {
      case axis::dp: at_replica(i); break;
      case axis::ep: at_replica(replica / ep * ep + i); break;
      case axis::edp: at_replica(i * ep + replica % ep); break;
      case axis::pp: c.pp = i; break;
      case axis::tp: c.tp = i; break;
      case axis::cp: c.cp = i; break;
    }
    out.push_back(rank_of(c));
  }
  return out;
}

std::vector<int> mesh::ranks_of_process(int process) const {
  std::vector<int> out;
  const int n = ranks_per_process();
  for (int r = process * n; r < (process + 1) * n; ++r) out.push_back(r);
  return out;
}

bool mesh::group_spans_processes(axis a, int rank) const {
  const auto members = group(a, rank);
  for (int r : members)
    if (process_of(r) != process_of(members.front())) return true;
  return false;
}

std::string to_string(const mesh& m) {
  std::string s = "dp" + std::to_string(m.dp) + ".pp" + std::to_string(m.pp) + ".tp" + std::to_string(m.tp);
  if (m.cp != 1) s += ".cp" + std::to_string(m.cp);
  if (m.ep != 1) s += ".ep" + std::to_string(m.ep);
  if (m.processes != 1) s += "/" + std::to_string(m.processes);
  return s;
}

std::optional<mesh> parse_mesh(const std::string& text) {
  mesh m;
  int used = 0;
  if (std::sscanf(text.c_str(), "dp%d.pp%d.tp%d%n", &m.dp, &m.pp, &m.tp, &used) != 3) return std::nullopt;
  if (static_cast<size_t>(used) != text.size() && text.compare(static_cast<size_t>(used), 3, ".cp") == 0) {
    int more = 0;
    if (std::sscanf(text.c_str() + used, ".cp%d%n", &m.cp, &more) != 1) return std::nullopt;
    used += more;
  }
  if (static_cast<size_t>(used) != text.size() && text.compare(static_cast<size_t>(used), 3, ".ep") == 0) {
    int more = 0;
    if (std::sscanf(text.c_str() + used, ".ep%d%n", &m.ep, &more) != 1) return std::nullopt;
    used += more;
  }
  if (static_cast<size_t>(used) != text.size()) {
    int more = 0;
    if (std::sscanf(text.c_str() + used, "/%d%n", &m.processes, &more) != 1 ||
        static_cast<size_t>(used + more) != text.size())
      return std::nullopt;
  }
  if (!check(m).empty() || to_string(m) != text) return std::nullopt;  // one spelling per mesh
  return m;
}

std::string check(const mesh& m) {
  auto positive = [](const char* name, int v) {
    return v >= 1 ? std::string() : std::string(name) + " must be >= 1, got " + std::to_string(v);
  };
  for (const std::string& e : {positive("dp", m.dp), positive("pp", m.pp), positive("tp", m.tp), positive("cp", m.cp),
                               positive("ep", m.ep), positive("processes", m.processes)})
    if (!e.empty()) return e;
  if (m.ranks() % m.processes != 0)
    return "the mesh's " + std::to_string(m.ranks()) + " ranks (dp " + std::to_string(m.dp) +
           (m.cp > 1 ? " x cp " + std::to_string(m.cp) : std::string()) + " x pp " + std::to_string(m.pp) + " x tp " +
           std::to_string(m.tp) + ") cannot be split evenly over " + std::to_string(m.processes) + " processes";
  if (m.replicas() % m.ep != 0)
    return "ep " + std::to_string(m.ep) + " must divide the " + std::to_string(m.replicas()) + " data-parallel replicas (dp " +
           std::to_string(m.dp) + (m.cp > 1 ? " x cp " + std::to_string(m.cp) : std::string()) +
           "): each expert group is ep of them";
  return {};
}

}  // namespace troupe::sched
