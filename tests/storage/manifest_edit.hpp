// Rewrites a committed checkpoint's manifest in place, as a user with Cap'n Proto's own tools
// could: the tests' way to hand troupe a manifest that lies about its checkpoint.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "storage/checkpoint.capnp.h"

namespace troupe::test {

inline void edit_manifest(const std::string& dir, const std::function<void(storage::schema::Manifest::Builder)>& edit) {
  const std::string path = (std::filesystem::path(dir) / "manifest.capnp").string();
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::FlatArrayMessageReader reader(words);
  capnp::MallocMessageBuilder msg;
  msg.setRoot(reader.getRoot<storage::schema::Manifest>());
  edit(msg.getRoot<storage::schema::Manifest>());
  const kj::Array<capnp::word> out = capnp::messageToFlatArray(msg);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(out.begin()), static_cast<std::streamsize>(out.size() * sizeof(capnp::word)));
}

}  // namespace troupe::test
