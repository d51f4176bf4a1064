// Checkpoint files: shard files through uring_store, the manifest through Cap'n Proto, and the
// commit as a sequence of fsync'd renames, each a point the crash tests stop at.
#include "storage/checkpoint.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <stdexcept>

#include "storage/checkpoint.capnp.h"
#include "storage/input_file.hpp"
#include "storage/output_file.hpp"

namespace troupe::storage {

namespace fs = std::filesystem;

namespace {

constexpr int64_t page = 4096;
constexpr const char* manifest_name = "manifest.capnp";
constexpr const char* partial_suffix = ".partial";

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

void reached(const checkpoint_io& io, const std::string& point) {
  if (io.at_write_point) io.at_write_point(point);
}

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  throw std::runtime_error(path + ": " + what + " failed (" + std::strerror(errno) + ")");
}

// fsync of a directory makes the renames and creations inside it durable.
void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_errno("open", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail_errno("fsync", dir);
}

void write_synced(const std::string& path, const void* data, size_t bytes) {
  const int fd = open_output_file(path, O_WRONLY | O_TRUNC);  // a planted link is replaced, not followed
  const char* p = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail_errno("write", path);
    }
    p += n, left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_errno("fsync", path);
  }
  ::close(fd);
}

void rename_synced(const std::string& from, const std::string& to, const std::string& dir) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail_errno("rename to " + to, from);
  sync_dir(dir);
}

// A checkpoint's small files through the one bounded reader: a FIFO planted as `latest` or a
// manifest that is /dev/zero is refused by name, not waited on or read until memory runs out.
constexpr uint64_t latest_limit = 4096;
constexpr uint64_t manifest_limit = uint64_t{256} << 20;

// The step of a committed checkpoint's directory name, or -1.
int64_t step_of(const std::string& name) {
  constexpr std::string_view prefix = "step-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

void to_schema(schema::ModelSpec::Builder b, const model_spec& m) {
  b.setKind(to_string(m.kind));
  b.setInputs(m.inputs);
  auto h = b.initHidden(static_cast<unsigned>(m.hidden.size()));
  for (unsigned i = 0; i < m.hidden.size(); ++i) h.set(i, m.hidden[i]);
  b.setClasses(m.classes);
  b.setVocab(m.vocab);
  b.setContext(m.context);
  b.setChannels(m.channels);
  b.setHeads(m.heads);
  b.setBlocks(m.blocks);
  b.setExperts(m.experts);
  b.setTopK(m.top_k);
  b.setMoeEvery(m.moe_every);
  b.setCapacityFactor(m.capacity_factor);
  b.setAuxLossCoefficient(m.aux_loss_coefficient);
}

model_spec from_schema(schema::ModelSpec::Reader r, const std::string& path) {
  model_spec m;
  const std::string kind = r.getKind();
  const std::optional<model_kind> k = parse_model_kind(kind);
  if (!k) throw bad_manifest(path + ": model.kind \"" + kind + "\" is not a model this troupe builds (mlp, gpt)");
  m.kind = *k;
  m.inputs = r.getInputs();
  m.hidden.clear();
  for (auto v : r.getHidden()) m.hidden.push_back(v);
  m.classes = r.getClasses();
  m.vocab = r.getVocab();
  m.context = r.getContext();
  m.channels = r.getChannels();
  m.heads = r.getHeads();
  m.blocks = r.getBlocks();
  m.experts = r.getExperts();
  if (m.experts > 0) {  // a dense model's manifest leaves these 0; model_spec's defaults stand
    m.top_k = r.getTopK();
    m.moe_every = r.getMoeEvery();
    m.capacity_factor = r.getCapacityFactor();
    m.aux_loss_coefficient = r.getAuxLossCoefficient();
  }
  return m;
}

bool same_model(const model_spec& a, const model_spec& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == model_kind::mlp) return a.inputs == b.inputs && a.hidden == b.hidden && a.classes == b.classes;
  // The router's settings (top_k, capacity, the loss's coefficient) change no parameter: a run
  // may resume with others.
  return a.vocab == b.vocab && a.context == b.context && a.channels == b.channels && a.heads == b.heads &&
         a.blocks == b.blocks && a.experts == b.experts && (a.experts == 0 || a.moe_every == b.moe_every);
}

std::vector<unsigned char> serialize(const checkpoint_manifest& m) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Manifest>();
  b.setFormatVersion(m.format_version);
  to_schema(b.initModel(), m.model);
  b.setMesh(m.mesh);
  b.setZero(m.zero);
  b.setOffload(m.offload);
  b.setStep(m.step);
  b.setOptimizerSteps(m.optimizer_steps);
  b.setOptimizer(m.optimizer);
  b.setOptimizerConfig(m.optimizer_config);
  b.setSeed(m.seed);
  b.setBatchSize(m.batch_size);
  b.setStepsPerEpoch(m.steps_per_epoch);
  b.setGlobalFloats(m.global_floats);
  auto arrays = b.initArrays(static_cast<unsigned>(m.arrays.size()));
  for (unsigned i = 0; i < m.arrays.size(); ++i) arrays.set(i, m.arrays[i]);
  b.setVocabulary(m.vocabulary);
  auto files = b.initFiles(static_cast<unsigned>(m.files.size()));
  for (unsigned i = 0; i < m.files.size(); ++i) {
    const checkpoint_file& f = m.files[i];
    auto fb = files[i];
    fb.setName(f.name);
    fb.setBytes(f.bytes);
    fb.setWriter(f.writer);
    auto secs = fb.initSections(static_cast<unsigned>(f.sections.size()));
    for (unsigned j = 0; j < f.sections.size(); ++j) {
      secs[j].setArray(f.sections[j].array);
      secs[j].setByteOffset(f.sections[j].byte_offset);
      secs[j].setFloats(f.sections[j].floats);
      secs[j].setCrc32(f.sections[j].crc32);
      secs[j].setDtype(f.sections[j].dtype);
    }
    auto runs = fb.initRuns(static_cast<unsigned>(f.runs.size()));
    for (unsigned j = 0; j < f.runs.size(); ++j) {
      runs[j].setLocal(f.runs[j].local);
      runs[j].setGlobal(f.runs[j].global);
      runs[j].setCount(f.runs[j].count);
    }
  }
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(msg);
  const auto bytes = words.asBytes();
  return std::vector<unsigned char>(bytes.begin(), bytes.end());
}

checkpoint_manifest parse(const std::string& path, const std::string& text) {
  if (text.empty() || text.size() % sizeof(capnp::word) != 0)
    throw std::runtime_error(path + ": not a checkpoint manifest (" + std::to_string(text.size()) +
                             " bytes, not a whole Cap'n Proto message)");
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(text.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), text.data(), text.size());
  checkpoint_manifest m;
  try {
    capnp::ReaderOptions opts;
    opts.traversalLimitInWords = uint64_t{1} << 32;
    capnp::FlatArrayMessageReader reader(words, opts);
    auto r = reader.getRoot<schema::Manifest>();
    m.format_version = r.getFormatVersion();
    if (m.format_version > checkpoint_format_version)
      throw std::runtime_error(path + ": checkpoint format " + std::to_string(m.format_version) +
                               " is newer than this troupe reads (" + std::to_string(checkpoint_format_version) + ")");
    m.model = from_schema(r.getModel(), path);
    m.mesh = r.getMesh();
    m.zero = r.getZero();
    m.offload = r.getOffload();
    m.step = r.getStep();
    m.optimizer_steps = r.getOptimizerSteps();
    m.optimizer = r.getOptimizer();
    m.optimizer_config = r.getOptimizerConfig();
    m.seed = r.getSeed();
    m.batch_size = r.getBatchSize();
    m.steps_per_epoch = r.getStepsPerEpoch();
    m.global_floats = r.getGlobalFloats();
    for (auto a : r.getArrays()) m.arrays.emplace_back(a);
    m.vocabulary = r.getVocabulary();
    for (auto fr : r.getFiles()) {
      checkpoint_file f;
      f.name = fr.getName();
      f.bytes = fr.getBytes();
      f.writer = fr.getWriter();
      for (auto s : fr.getSections())
        f.sections.push_back({s.getArray(), s.getByteOffset(), s.getFloats(), s.getCrc32(), s.getDtype()});
      for (auto run : fr.getRuns()) f.runs.push_back({run.getLocal(), run.getGlobal(), run.getCount()});
      m.files.push_back(std::move(f));
    }
  } catch (const kj::Exception& e) {
    throw std::runtime_error(path + ": not a checkpoint manifest (" + std::string(e.getDescription().cStr()) + ")");
  }
  return m;
}

// The manifest's own consistency: what a corrupt or hand-edited one would break.
void check_fields(const std::string& path, const checkpoint_manifest& m) {
  auto bad = [&](const std::string& why) { throw bad_manifest(path + ": " + why); };
  if (m.format_version == 0) bad("format version 0 (not a checkpoint manifest)");
  if (m.step < 0 || m.global_floats < 0 || m.optimizer_steps < 0) bad("negative step, optimizer steps or size");
  if (m.arrays.empty() || m.arrays.front() != "params") bad("its first array is not \"params\"");
  if (!m.vocabulary.empty() && (m.model.kind != model_kind::gpt || static_cast<int64_t>(m.vocabulary.size()) != m.model.vocab))
    bad("its vocabulary has " + std::to_string(m.vocabulary.size()) + " characters for a " + to_string(m.model.kind) +
        " of vocabulary size " + std::to_string(m.model.vocab));
  for (const checkpoint_file& f : m.files) {
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." || f.name == "..")
      bad("shard file name \"" + f.name + "\" is not a plain file name");
    if (f.sections.size() != m.arrays.size())
      bad(f.name + " has " + std::to_string(f.sections.size()) + " sections for " + std::to_string(m.arrays.size()) + " arrays");
    int64_t floats = -1;
    for (size_t j = 0; j < f.sections.size(); ++j) {
      const checkpoint_section& s = f.sections[j];
      if (s.dtype != "f32") bad(f.name + " section \"" + s.array + "\" is of dtype \"" + s.dtype + "\"; this troupe reads f32");
      if (s.array != m.arrays[j]) bad(f.name + " section " + std::to_string(j) + " is \"" + s.array + "\", not \"" + m.arrays[j] + "\"");
      // Compared without forming byte_offset + 4 * floats: an edited count near 2^62 would wrap it.
      if (f.bytes < 0 || s.byte_offset < 0 || s.floats < 0 || s.byte_offset > f.bytes ||
          s.floats > (f.bytes - s.byte_offset) / 4)
        bad(f.name + " section \"" + s.array + "\" lies outside the file's " + std::to_string(f.bytes) + " bytes");
      if (floats >= 0 && s.floats != floats) bad(f.name + ": sections of different sizes");
      floats = s.floats;
    }
    for (const value_run& r : f.runs)
      if (r.count < 0 || r.local < 0 || r.global < 0 || r.local > floats || r.count > floats - r.local ||
          r.global > m.global_floats || r.count > m.global_floats - r.global)
        bad(f.name + ": a run (local " + std::to_string(r.local) + ", global " + std::to_string(r.global) + ", count " +
            std::to_string(r.count) + ") lies outside its section (" + std::to_string(floats) + " floats) or globalFloats (" +
            std::to_string(m.global_floats) + ")");
  }
  // The files' runs cover every global float (a commit that did not was refused), which bounds
  // globalFloats by the files, whose sizes read_manifest then checks against the disk.
  std::vector<value_run> runs;
  for (const checkpoint_file& f : m.files) runs.insert(runs.end(), f.runs.begin(), f.runs.end());
  const int64_t covered = covered_floats(runs);
  if (covered != m.global_floats)
    bad("globalFloats is " + std::to_string(m.global_floats) + ", but its files hold " + std::to_string(covered) +
        " of them");
  // The values are the unsplit model's parameters: its spec must give the same count.
  int64_t count = 0;
  try {
    count = param_count(m.model);
  } catch (const std::invalid_argument& e) {
    bad(std::string("its model spec is refused: ") + e.what());
  }
  if (count != m.global_floats)
    bad("its model spec (" + describe(m.model) + ") has " + std::to_string(count) + " parameters, but globalFloats is " +
        std::to_string(m.global_floats));
}

}  // namespace

std::vector<std::string> optimizer_state_arrays(const std::string& optimizer, int state_floats) {
  if (state_floats == 0) return {};
  if (optimizer == "adamw" && state_floats == 2) return {"exp_avg", "exp_avg_sq"};
  if (optimizer == "sgd" && state_floats == 1) return {"momentum_buffer"};
  std::vector<std::string> out;
  for (int j = 0; j < state_floats; ++j) out.push_back(optimizer + ".state" + std::to_string(j));
  return out;
}

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string begin_checkpoint(const std::string& root, int64_t step) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw std::runtime_error(root + ": cannot create the checkpoint directory (" + ec.message() + ")");
  const std::string dir = (fs::path(root) / (checkpoint_dir_name(step) + partial_suffix)).string();
  fs::remove_all(dir, ec);  // a crash's leftover: never committed, so nobody loads it
  if (!fs::create_directory(dir, ec) || ec)
    throw std::runtime_error(dir + ": cannot create (" + (ec ? ec.message() : std::string("exists")) + ")");
  return dir;
}

checkpoint_file write_shard_file(const std::string& dir, const std::string& name, const std::string& writer,
                                 const std::vector<std::string>& names, const std::vector<const float*>& arrays,
                                 int64_t floats, std::vector<value_run> runs, const checkpoint_io& io) {
  if (names.size() != arrays.size()) throw std::invalid_argument("write_shard_file: names and arrays differ in number");
  checkpoint_file f;
  f.name = name;
  f.writer = writer;
  f.runs = std::move(runs);
  const int64_t section_bytes = align_up(floats * static_cast<int64_t>(sizeof(float)), page);
  const int64_t total = std::max<int64_t>(page, section_bytes * static_cast<int64_t>(arrays.size()));
  uring_options opt = io.uring;
  opt.block_size = std::min(opt.block_size, align_up(total, page));
  const std::string path = (fs::path(dir) / name).string();
  uring_store store(path, total, opt);
  for (size_t j = 0; j < arrays.size(); ++j) {
    const int64_t bytes = floats * static_cast<int64_t>(sizeof(float));
    const int64_t at = section_bytes * static_cast<int64_t>(j);
    store.submit_write(at, arrays[j], bytes);
    const auto crc = static_cast<uint32_t>(libdeflate_crc32(0, arrays[j], static_cast<size_t>(bytes)));
    f.sections.push_back({names[j], at, floats, crc});
  }
  store.sync();
  f.bytes = store.size();
  reached(io, "shard " + name + " written");
  return f;
}

std::string commit_checkpoint(const std::string& root, const checkpoint_manifest& m, int keep, const checkpoint_io& io) {
  const std::string name = checkpoint_dir_name(m.step);
  const std::string partial = (fs::path(root) / (name + partial_suffix)).string();
  const std::string final_dir = (fs::path(root) / name).string();
  // A partial checkpoint must never look committed: check_fields refuses one whose files do not
  // hold every global float of every array.
  check_fields(partial + "/" + manifest_name, m);
  const std::vector<unsigned char> bytes = serialize(m);
  const std::string tmp = (fs::path(partial) / (std::string(manifest_name) + ".tmp")).string();
  write_synced(tmp, bytes.data(), bytes.size());
  reached(io, "manifest synced");
  rename_synced(tmp, (fs::path(partial) / manifest_name).string(), partial);
  reached(io, "manifest renamed");
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {  // the same step saved before (a resumed run): the new one replaces it
    const std::string old = final_dir + ".replaced";
    fs::remove_all(old, ec);
    rename_synced(final_dir, old, root);
    reached(io, "previous copy moved aside");
    rename_synced(partial, final_dir, root);
    fs::remove_all(old, ec);
  } else {
    rename_synced(partial, final_dir, root);
  }
  reached(io, "directory renamed");
  const std::string latest = (fs::path(root) / "latest").string();
  write_synced(latest + ".tmp", name.data(), name.size());
  reached(io, "latest written");
  rename_synced(latest + ".tmp", latest, root);
  reached(io, "latest renamed");
  if (keep > 0) {
    std::vector<std::string> have = committed_checkpoints(root);
    for (size_t i = 0; i + static_cast<size_t>(keep) < have.size(); ++i) {
      // Out of sight first (a rename), then deleted: a crash mid-delete leaves no half checkpoint
      // under a committed name.
      const std::string gone = have[i] + ".pruned";
      rename_synced(have[i], gone, root);
      fs::remove_all(gone, ec);
      reached(io, "pruned " + fs::path(have[i]).filename().string());
    }
  }
  return final_dir;
}

std::vector<std::string> committed_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && fs::exists(e.path() / manifest_name)) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (p.filename() == manifest_name && fs::is_regular_file(p, ec)) return p.parent_path().string();
  if (!fs::is_directory(p, ec)) throw std::runtime_error(path + ": no such checkpoint (not a directory)");
  if (fs::exists(p / manifest_name, ec)) return p.string();
  if (fs::exists(p / "latest", ec)) {
    std::string name = read_input_file((p / "latest").string(), "checkpoint", latest_limit);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (step_of(name) < 0) throw std::runtime_error((p / "latest").string() + ": names \"" + name + "\", not a checkpoint");
    if (!fs::exists(p / name / manifest_name, ec))
      throw std::runtime_error((p / "latest").string() + " names " + name + ", which has no " + manifest_name);
    return (p / name).string();
  }
  const std::vector<std::string> have = committed_checkpoints(p.string());
  if (have.empty()) throw std::runtime_error(path + ": no committed checkpoint in it (no " + manifest_name + ", no latest)");
  return have.back();
}

checkpoint_manifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / manifest_name).string();
  checkpoint_manifest m = parse(path, read_input_file(path, "checkpoint manifest", manifest_limit));
  check_fields(path, m);
  for (const checkpoint_file& f : m.files) {
    const fs::path file = fs::path(dir) / f.name;
    std::error_code ec;
    // As the shard files are opened (O_NOFOLLOW): a link or a special file is refused here, with
    // the manifest, before the job says it resumed from this checkpoint.
    const fs::file_status st = fs::symlink_status(file, ec);
    if (!ec && st.type() != fs::file_type::regular && st.type() != fs::file_type::not_found)
      throw std::runtime_error(file.string() + ": not a regular file (" +
                               (st.type() == fs::file_type::symlink ? "a symbolic link" : "not a file troupe wrote") +
                               "): a checkpoint's shard files are its own, never links");
    const auto size = fs::file_size(file, ec);
    if (ec) throw std::runtime_error(file.string() + ": missing (written by " + f.writer + ", " + ec.message() + ")");
    if (static_cast<int64_t>(size) != f.bytes)
      throw std::runtime_error(file.string() + ": " + std::to_string(size) + " bytes, the manifest says " +
                               std::to_string(f.bytes) + " (truncated or replaced)");
  }
  return m;
}

void check_compatible(const checkpoint_manifest& m, const std::string& dir, const model_spec& model,
                      const std::string& optimizer) {
  if (!same_model(m.model, model))
    throw std::runtime_error(dir + ": a checkpoint of another model (" + describe(m.model) + "), this job trains " +
                             describe(model));
  if (m.optimizer != optimizer)
    throw std::runtime_error(dir + ": its optimizer state is " + m.optimizer + "'s, this job uses " + optimizer);
}

void read_values(const std::string& dir, const checkpoint_manifest& m, const std::string& array,
                 const std::vector<value_run>& wanted, float* out, const checkpoint_io& io) {
  const auto a = std::find(m.arrays.begin(), m.arrays.end(), array);
  if (a == m.arrays.end()) throw std::runtime_error(dir + ": the checkpoint has no array \"" + array + "\"");
  const auto j = static_cast<size_t>(a - m.arrays.begin());
  std::vector<std::vector<value_run>> saved;
  for (const checkpoint_file& f : m.files) saved.push_back(f.runs);
  std::vector<read_item> items;
  try {
    items = plan_reads(saved, wanted);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(dir + ": " + e.what());
  }
  std::set<size_t> files;
  for (const read_item& it : items) files.insert(it.file);
  for (size_t fi : files) {
    const checkpoint_file& f = m.files[fi];
    const checkpoint_section& s = f.sections[j];
    const std::string path = (fs::path(dir) / f.name).string();
    // Read in pieces of two blocks, all submitted at once; each piece's CRC is taken as soon as it
    // is in, while the later ones are still being read. No zero-fill: every byte is read over.
    std::unique_ptr<float[]> values(new float[static_cast<size_t>(std::max<int64_t>(1, s.floats))]);
    char* const into = reinterpret_cast<char*>(values.get());
    const int64_t total = s.floats * static_cast<int64_t>(sizeof(float));
    uint32_t crc = 0;
    {
      uring_options opt = io.uring;
      opt.existing = true;
      opt.block_size = std::min(opt.block_size, std::max(page, align_up(f.bytes, page)));
      uring_store store(path, 0, opt);
      if (store.size() != f.bytes)
        throw std::runtime_error(path + ": " + std::to_string(store.size()) + " bytes, the manifest says " +
                                 std::to_string(f.bytes) + " (truncated or replaced)");
      const int64_t piece = 2 * opt.block_size;
      std::vector<std::pair<uring_store::ticket, int64_t>> pieces;  // (ticket, first byte)
      for (int64_t at = 0; at < total; at += piece)
        pieces.emplace_back(store.submit_read(s.byte_offset + at, into + at, std::min(piece, total - at)), at);
      for (const auto& [ticket, at] : pieces) {
        store.wait(ticket);
        crc = static_cast<uint32_t>(libdeflate_crc32(crc, into + at, static_cast<size_t>(std::min(piece, total - at))));
      }
    }
    if (crc != s.crc32)
      throw std::runtime_error(path + ": the \"" + array + "\" section's checksum is wrong (CRC-32 " + std::to_string(crc) +
                               ", written " + std::to_string(s.crc32) + "): the file is corrupt");
    for (const read_item& it : items)
      if (it.file == fi) std::copy(values.get() + it.from, values.get() + it.from + it.count, out + it.to);
  }
}

}  // namespace troupe::storage
