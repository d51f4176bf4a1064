// fio as a benchmark's peer, shared by offload_bench and checkpoint_bench: running it (or noticing
// that it is missing), reading a bandwidth out of its JSON, and naming the file system under a
// directory, which decides what O_DIRECT means there. It does not build fio's command lines: each
// bench states its own, so that its README can quote them.
#pragma once

#include <sys/statfs.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace troupe::bench {

// A command's standard output, and whether it exited 0; nullopt also when it could not start, so
// a missing fio and a failing one read the same to the caller (the peer was not measured).
inline std::optional<std::string> run_command(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (::pclose(p) != 0) return std::nullopt;
  return out;
}

// `s` as one word for /bin/sh.
inline std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// "fio-3.33", or nullopt where fio is not on the PATH.
inline std::optional<std::string> fio_version() {
  auto v = run_command("fio --version");
  if (v) v->erase(v->find_last_not_of("\n ") + 1);
  return v;
}

// jobs[0].<dir>.bw_bytes from fio's JSON: the first "bw_bytes" directly inside the object that is
// the value of the first job's "<dir>" key (the same word also appears as a value: "rw" : "write").
// With --group_reporting jobs[0] is the whole group.
inline std::optional<double> fio_bw_bytes(const std::string& json, const std::string& dir) {
  const auto jobs = json.find("\"jobs\"");
  if (jobs == std::string::npos) return std::nullopt;
  const std::string key = "\"" + dir + "\"";
  size_t at = std::string::npos;
  for (size_t k = json.find(key, jobs); k != std::string::npos; k = json.find(key, k + 1)) {
    const auto colon = json.find_first_not_of(" \t\n", k + key.size());
    if (colon == std::string::npos || json[colon] != ':') continue;
    const auto brace = json.find_first_not_of(" \t\n", colon + 1);
    if (brace != std::string::npos && json[brace] == '{') {
      at = brace;
      break;
    }
  }
  if (at == std::string::npos) return std::nullopt;
  int depth = 0;
  for (size_t i = at; i < json.size(); ++i) {
    if (json[i] == '{') ++depth;
    else if (json[i] == '}' && --depth == 0) break;
    else if (depth == 1 && json.compare(i, 10, "\"bw_bytes\"") == 0) {
      const auto colon = json.find(':', i);
      return std::strtod(json.c_str() + colon + 1, nullptr);
    }
  }
  return std::nullopt;
}

// tmpfs takes O_DIRECT on recent kernels but is memory, and overlayfs passes it to what lies
// below: a figure means little without this name beside it.
inline std::string fs_type(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53: return "ext2/3/4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794c7630: return "overlayfs";
    default: {
      char b[32];
      std::snprintf(b, sizeof b, "0x%lx", static_cast<unsigned long>(s.f_type));
      return b;
    }
  }
}

}  // namespace troupe::bench
