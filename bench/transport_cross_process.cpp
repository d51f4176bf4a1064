// Measure first: one message of 1, 16 and 64 MiB from one process to another on loopback,
// through CAF's middleman (a remote actor replying with the size) and through a plain TCP
// socket (length prefix, one-byte reply). The ratio decided whether bulk bytes needed a data
// plane of their own (bench/README.md). It deliberately measures one message at a time, as a
// gradient bucket would cross, not a stream.
//
// usage: transport_cross_process [MiB ...]
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "comm/tcp_socket.hpp"

namespace {

struct blob {
  std::vector<char> bytes;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, blob& x) {
  return f(caf::meta::type_name("blob"), x.bytes);
}

struct config : caf::actor_system_config {
  config() {
    add_message_type<blob>("blob");
    load<caf::io::middleman>();
    set("scheduler.max-threads", 2);
  }
};

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }
int reps(double mib) { return mib <= 1 ? 20 : mib <= 16 ? 5 : 3; }

void report(const char* what, double mib, double s) {
  std::printf("%-10s %6.0f MiB %9.2f ms %7.2f GB/s\n", what, mib, s * 1e3, mib * (1 << 20) / s / 1e9);
  std::fflush(stdout);
}

void bench_middleman(const std::vector<double>& sizes) {
  int port_pipe[2], done_pipe[2];  // one pipe per direction: a process must not read its own bytes
  if (pipe(port_pipe) != 0 || pipe(done_pipe) != 0) return;
  const pid_t child = fork();  // before either actor system exists
  if (child == 0) {
    config cfg;
    caf::actor_system sys{cfg};
    auto sink = sys.spawn([](caf::event_based_actor*) -> caf::behavior {
      return {[](const blob& b) { return static_cast<uint64_t>(b.bytes.size()); }};
    });
    auto port = sys.middleman().publish(sink, 0, "127.0.0.1");
    const uint16_t p = port ? *port : 0;
    if (write(port_pipe[1], &p, sizeof p) != sizeof p) std::_Exit(2);
    char c;
    if (read(done_pipe[0], &c, 1) < 0) std::_Exit(2);  // the parent says when it is done
    caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    std::_Exit(0);
  }
  uint16_t port = 0;
  if (read(port_pipe[0], &port, sizeof port) != sizeof port || port == 0) return;
  {
    config cfg;
    caf::actor_system sys{cfg};
    auto remote = sys.middleman().remote_actor("127.0.0.1", port);
    if (!remote) {
      std::fprintf(stderr, "middleman: %s\n", sys.render(remote.error()).c_str());
      return;
    }
    caf::scoped_actor self{sys};
    for (double mib : sizes) {
      const size_t n = static_cast<size_t>(mib * (1 << 20));
      double total = 0;
      for (int i = 0; i <= reps(mib); ++i) {  // the first round is a warm-up
        blob b{std::vector<char>(n, 'x')};
        const auto t0 = clock_type::now();
        self->request(*remote, std::chrono::seconds(60), std::move(b))
            .receive([](uint64_t) {}, [&](caf::error& e) { std::fprintf(stderr, "%s\n", sys.render(e).c_str()); });
        if (i > 0) total += seconds_since(t0);
      }
      report("middleman", mib, total / reps(mib));
    }
  }
  const char done = 1;
  if (write(done_pipe[1], &done, 1) != 1) return;
  waitpid(child, nullptr, 0);
}

void bench_socket(const std::vector<double>& sizes) {
  auto listener = troupe::net::listen_tcp("127.0.0.1", 0);
  const uint16_t port = troupe::net::local_port(listener.get());
  const pid_t child = fork();
  if (child == 0) {
    auto c = troupe::net::accept_tcp(listener.get(), 10000);
    std::vector<char> buf;
    for (;;) {
      uint64_t n = 0;
      try {
        troupe::net::read_all(c.get(), &n, 8, 60000, "size");
      } catch (const troupe::net::net_error&) {
        std::_Exit(0);  // the parent closed: done
      }
      buf.resize(n);
      troupe::net::read_all(c.get(), buf.data(), n, 60000, "payload");
      const char ack = 1;
      troupe::net::write_all(c.get(), &ack, 1, 60000, "ack");
    }
  }
  listener.close();
  auto s = troupe::net::connect_tcp("127.0.0.1", port, 10000);
  troupe::net::tune_bulk(s.get(), 4 << 20);
  for (double mib : sizes) {
    const uint64_t n = static_cast<uint64_t>(mib * (1 << 20));
    std::vector<char> payload(n, 'x');
    double total = 0;
    for (int i = 0; i <= reps(mib); ++i) {
      const auto t0 = clock_type::now();
      troupe::net::write_all(s.get(), &n, 8, 60000, "size");
      troupe::net::write_all(s.get(), payload.data(), n, 60000, "payload");
      char ack;
      troupe::net::read_all(s.get(), &ack, 1, 60000, "ack");
      if (i > 0) total += seconds_since(t0);
    }
    report("tcp socket", mib, total / reps(mib));
  }
  s.close();
  waitpid(child, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atof(argv[i]));
  if (sizes.empty()) sizes = {1, 16, 64};
  bench_socket(sizes);
  bench_middleman(sizes);
  return 0;
}
