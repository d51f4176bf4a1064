// Checkpoints on disk: the reshard planner as a pure function, the write/commit/read round trip,
// a crash at every write point (in a forked writer) leaving a loadable checkpoint, and every bad
// checkpoint refused with its file named.
#include <gtest/gtest.h>

#include <limits>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "storage/checkpoint.hpp"
#include "storage/checkpoint_export.hpp"
#include "tests/storage/manifest_edit.hpp"

namespace troupe::storage {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(tmp ? tmp : "/tmp") / ("troupe_checkpoint_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// ---- plan_reads ----

TEST(CheckpointPlan, ReadsEachWantedRangeFromTheFileThatHoldsIt) {
  // Two files hold global [0, 6) and [6, 10); a reader wants [4, 8) at local 0.
  const std::vector<std::vector<value_run>> saved{{{0, 0, 6}}, {{0, 6, 4}}};
  const auto items = plan_reads(saved, {{0, 4, 4}});
  const std::vector<read_item> want{{0, 4, 0, 2}, {1, 0, 2, 2}};
  EXPECT_EQ(items, want);
}

TEST(CheckpointPlan, OverlappingFilesServeFromTheFirstAndAdjacentPiecesMerge) {
  // File 0 holds [0,4) as two runs; file 1 repeats [2,6) (a replicated tp bias).
  const std::vector<std::vector<value_run>> saved{{{0, 0, 2}, {2, 2, 2}}, {{0, 2, 4}}};
  const auto items = plan_reads(saved, {{10, 0, 6}});
  const std::vector<read_item> want{{0, 0, 10, 4}, {1, 2, 14, 2}};
  EXPECT_EQ(items, want);
}

TEST(CheckpointPlan, ReshardingDp4ToDp2IsAPureFunctionOfTheRuns) {
  // Four ZeRO shards of 100 floats, each 25 in two strided pieces; readers of halves.
  std::vector<std::vector<value_run>> saved(4);
  for (int r = 0; r < 4; ++r) {
    saved[r].push_back({0, r * 12, 12});
    saved[r].push_back({12, 48 + r * 13, 13});
  }
  std::vector<float> global(100);
  std::iota(global.begin(), global.end(), 0.0f);
  std::vector<std::vector<float>> files(4, std::vector<float>(25));
  for (int r = 0; r < 4; ++r)
    for (const auto& run : saved[r])
      for (int64_t i = 0; i < run.count; ++i) files[r][run.local + i] = global[run.global + i];
  for (int half = 0; half < 2; ++half) {
    std::vector<float> out(50, -1);
    for (const read_item& it : plan_reads(saved, {{0, half * 50, 50}}))
      for (int64_t i = 0; i < it.count; ++i) out[it.to + i] = files[it.file][it.from + i];
    for (int i = 0; i < 50; ++i) EXPECT_EQ(out[i], static_cast<float>(half * 50 + i));
  }
}

TEST(CheckpointPlan, AGapNoFileHoldsIsNamed) {
  const std::vector<std::vector<value_run>> saved{{{0, 0, 4}}, {{0, 6, 4}}};
  try {
    plan_reads(saved, {{0, 2, 6}});
    FAIL() << "a gap was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 6)"), std::string::npos) << e.what();
  }
}

TEST(CheckpointPlan, CoveredFloatsCountsOverlapsOnce) {
  EXPECT_EQ(covered_floats({{0, 0, 4}, {0, 2, 4}, {0, 10, 1}}), 7);
  EXPECT_EQ(merge_runs({{4, 14, 2}, {0, 10, 4}, {6, 30, 1}}), (std::vector<value_run>{{0, 10, 6}, {6, 30, 1}}));
}

// ---- files ----

// 744-4-4: 3000 parameters, the floats save() writes (a manifest's model gives its size).
model_spec tiny_mlp() {
  model_spec m;
  m.inputs = 744;
  m.hidden = {4};
  m.classes = 4;
  return m;
}

// A checkpoint of `n` global floats in two files, params = base + i, one state array = -(base + i).
std::string save(const std::string& root, int64_t step, float base, int keep, const checkpoint_io& io = {}) {
  const int64_t n = 3000;  // over 4096 bytes: a section spans pages
  std::vector<float> p(n), s(n);
  for (int64_t i = 0; i < n; ++i) p[i] = base + static_cast<float>(i), s[i] = -p[i];
  const std::string dir = begin_checkpoint(root, step);
  checkpoint_manifest m;
  m.model = tiny_mlp();
  m.step = step;
  m.optimizer = "sgd";
  m.global_floats = n;
  m.arrays = {"params", "momentum_buffer"};
  const int64_t half = n / 2;
  m.files.push_back(write_shard_file(dir, "rank-0.bin", "rank 0", m.arrays, {p.data(), s.data()}, half, {{0, 0, half}}, io));
  m.files.push_back(write_shard_file(dir, "rank-1.bin", "rank 1", m.arrays, {p.data() + half, s.data() + half}, n - half,
                                     {{0, half, n - half}}, io));
  return commit_checkpoint(root, m, keep, io);
}

// Checkpoint 1 under root, uncommitted: one file of `floats` ones at global 0, of `global` floats.
checkpoint_manifest one_file(const std::string& root, int64_t floats, int64_t global) {
  const std::string dir = begin_checkpoint(root, 1);
  const std::vector<float> v(static_cast<size_t>(floats), 1.0f);
  checkpoint_manifest m;
  m.model.inputs = global - 1, m.model.hidden = {}, m.model.classes = 1;  // an mlp of `global` parameters
  m.step = 1;
  m.optimizer = "sgd";
  m.global_floats = global;
  m.arrays = {"params"};
  m.files.push_back(write_shard_file(dir, "rank-0.bin", "rank 0", m.arrays, {v.data()}, floats, {{0, 0, floats}}));
  return m;
}

std::vector<float> load(const std::string& path, const std::string& array = "params") {
  const std::string dir = resolve_checkpoint(path);
  const checkpoint_manifest m = read_manifest(dir);
  std::vector<float> out(static_cast<size_t>(m.global_floats));
  read_values(dir, m, array, {{0, 0, m.global_floats}}, out.data());
  return out;
}

TEST(CheckpointFiles, RoundTripThroughLatestAndPruneKeepsTheNewest) {
  const std::string root = fresh_dir("roundtrip");
  save(root, 2, 100, 2);
  save(root, 4, 200, 2);
  save(root, 6, 300, 2);
  EXPECT_EQ(committed_checkpoints(root).size(), 2u);
  EXPECT_FALSE(fs::exists(fs::path(root) / "step-00000002"));
  const auto p = load(root);
  EXPECT_EQ(p.front(), 300.0f);
  EXPECT_EQ(p.back(), 300.0f + 2999);
  EXPECT_EQ(load(root, "momentum_buffer")[1500], -(300.0f + 1500));
  EXPECT_EQ(load(root + "/step-00000004")[7], 207.0f);
  const checkpoint_manifest m = read_manifest(resolve_checkpoint(root));
  EXPECT_EQ(m.step, 6);
  EXPECT_EQ(m.model.hidden, std::vector<int64_t>{4});
  EXPECT_NO_THROW(check_compatible(m, root, tiny_mlp(), "sgd"));
}

TEST(CheckpointFiles, ACommitThatDoesNotCoverEveryFloatIsRefused) {
  const std::string root = fresh_dir("partial");
  const checkpoint_manifest m = one_file(root, 10, 20);
  EXPECT_THROW(commit_checkpoint(root, m, 0), std::runtime_error);
  EXPECT_TRUE(committed_checkpoints(root).empty());
}

// A writer killed right after point k (fork; the child _exits there) leaves a loadable latest
// checkpoint: the previous one up to the moment `latest` is renamed, the new one after.
TEST(CheckpointCrash, AKillAtEveryWritePointLeavesALoadableCheckpoint) {
  std::vector<std::string> points;
  {
    const std::string root = fresh_dir("points");
    save(root, 1, 100, 1);
    checkpoint_io count;
    count.at_write_point = [&](const std::string& p) { points.push_back(p); };
    save(root, 2, 200, 1, count);
  }
  ASSERT_GE(points.size(), 7u);  // two shards, manifest synced and renamed, directory, latest twice, a prune
  bool committed = false;
  for (size_t k = 0; k < points.size(); ++k) {
    const std::string root = fresh_dir("crash" + std::to_string(k));
    save(root, 1, 100, 1);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      size_t seen = 0;
      checkpoint_io io;
      io.at_write_point = [&](const std::string&) {
        if (seen++ == k) ::_exit(9);
      };
      save(root, 2, 200, 1, io);
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 9) << "the writer was not stopped at " << points[k];
    if (points[k] == "latest renamed") committed = true;
    std::vector<float> p;
    ASSERT_NO_THROW(p = load(root)) << "after a crash at \"" << points[k] << "\"";
    EXPECT_EQ(p[10], (committed ? 200.0f : 100.0f) + 10) << "after a crash at \"" << points[k] << "\"";
    // The next save after the crash goes through (a stale partial directory is cleared).
    save(root, 2, 200, 1);
    EXPECT_EQ(load(root)[10], 210.0f);
  }
  EXPECT_TRUE(committed);
}

// ---- bad checkpoints: each refused, naming the file ----

void expect_refused(const std::function<void()>& f, const std::string& names) {
  try {
    f();
    FAIL() << "not refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

TEST(CheckpointRefusal, ATruncatedShardIsRefusedNamingIt) {
  const std::string root = fresh_dir("truncated");
  const std::string dir = save(root, 1, 100, 0);
  fs::resize_file(fs::path(dir) / "rank-1.bin", 4096);
  expect_refused([&] { read_manifest(dir); }, "rank-1.bin");
}

TEST(CheckpointRefusal, AWrongChecksumIsRefusedNamingTheFile) {
  const std::string root = fresh_dir("checksum");
  const std::string dir = save(root, 1, 100, 0);
  {
    std::fstream f(fs::path(dir) / "rank-0.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  const checkpoint_manifest m = read_manifest(dir);
  std::vector<float> out(3000);
  expect_refused([&] { read_values(dir, m, "params", {{0, 0, 3000}}, out.data()); }, "rank-0.bin");
  // The other array's section of the same file is intact.
  EXPECT_NO_THROW(read_values(dir, m, "momentum_buffer", {{0, 0, 3000}}, out.data()));
}

TEST(CheckpointRefusal, AMissingShardFileIsRefusedNamingIt) {
  const std::string root = fresh_dir("missing");
  const std::string dir = save(root, 1, 100, 0);
  fs::remove(fs::path(dir) / "rank-0.bin");
  expect_refused([&] { read_manifest(dir); }, "rank-0.bin");
}

TEST(CheckpointRefusal, AnotherModelOrOptimizerIsRefusedNamingTheCheckpoint) {
  const std::string root = fresh_dir("model");
  const std::string dir = save(root, 1, 100, 0);
  const checkpoint_manifest m = read_manifest(dir);
  model_spec other = tiny_mlp();
  other.hidden = {5};
  expect_refused([&] { check_compatible(m, dir, other, "sgd"); }, dir);
  expect_refused([&] { check_compatible(m, dir, tiny_mlp(), "adamw"); }, "adamw");
}

TEST(CheckpointRefusal, ANewerFormatIsRefusedNamingBothVersions) {
  const std::string root = fresh_dir("newer");
  checkpoint_manifest m = one_file(root, 4, 4);
  m.format_version = checkpoint_format_version + 1;
  const std::string committed = commit_checkpoint(root, m, 0);
  expect_refused([&] { read_manifest(committed); }, "format " + std::to_string(checkpoint_format_version + 1));
}

TEST(CheckpointRefusal, AGarbledManifestOrADanglingLatestIsRefused) {
  const std::string root = fresh_dir("garbled");
  const std::string dir = save(root, 1, 100, 0);
  {
    std::ofstream f(fs::path(dir) / "manifest.capnp", std::ios::binary | std::ios::trunc);
    f << "not a manifest at all!!";
  }
  expect_refused([&] { read_manifest(dir); }, "manifest.capnp");
  const std::string root2 = fresh_dir("dangling");
  save(root2, 1, 100, 0);
  {
    std::ofstream f(fs::path(root2) / "latest", std::ios::trunc);
    f << "step-00000099";
  }
  expect_refused([&] { resolve_checkpoint(root2); }, "step-00000099");
  expect_refused([&] { resolve_checkpoint(root2 + "/nothing-here"); }, "nothing-here");
}

// A manifest edited to name another model, or another size, is refused by read_manifest (so by
// export and resume alike) naming the field, before a value is read or allocated; export then
// writes nothing. Before: a larger model over-read the values into the output, a larger
// globalFloats allocated what it said.
TEST(CheckpointRefusal, AManifestWhoseModelOrSizeWasEditedIsRefusedNamingTheFieldAndNothingIsExported) {
  const auto refused = [](const std::string& dir, const std::string& names) {
    const std::string out = dir + ".safetensors";
    try {
      export_safetensors(dir, out, true);
      ADD_FAILURE() << "exported an edited checkpoint";
    } catch (const bad_manifest& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
    expect_refused([&] { read_manifest(dir); }, names);
  };
  const std::string wider = save(fresh_dir("edited-model"), 1, 100, 0);
  test::edit_manifest(wider, [](schema::Manifest::Builder m) { m.getModel().getHidden().set(0, 400); });
  refused(wider, "model spec (mlp 744-400-4) has 299604 parameters, but globalFloats is 3000");
  const std::string bigger = save(fresh_dir("edited-size"), 1, 100, 0);
  test::edit_manifest(bigger, [](schema::Manifest::Builder m) { m.setGlobalFloats(int64_t{4} << 30); });
  refused(bigger, "globalFloats is 4294967296, but its files hold 3000 of them");
  const std::string smaller = save(fresh_dir("edited-smaller"), 1, 100, 0);
  test::edit_manifest(smaller, [](schema::Manifest::Builder m) { m.setGlobalFloats(2000); });
  refused(smaller, "or globalFloats (2000)");
  const std::string nonsense = save(fresh_dir("edited-kind"), 1, 100, 0);
  test::edit_manifest(nonsense, [](schema::Manifest::Builder m) { m.getModel().setClasses(-3); });
  refused(nonsense, "its model spec is refused: model.classes must be positive, got -3");
  // A kind this troupe does not build (model_kind is closed): named, with the kinds it builds.
  const std::string unknown = save(fresh_dir("edited-unknown-kind"), 1, 100, 0);
  test::edit_manifest(unknown, [](schema::Manifest::Builder m) { m.getModel().setKind("cnn"); });
  refused(unknown, "model.kind \"cnn\" is not a model this troupe builds (mlp, gpt)");
  // Counts whose byte size wraps around int64 (4 * 2^62 is 0): refused, not read past the file.
  const std::string wrapped = save(fresh_dir("edited-wrap"), 1, 100, 0);
  test::edit_manifest(wrapped, [](schema::Manifest::Builder m) {
    for (auto section : m.getFiles()[0].getSections()) section.setFloats(int64_t{1} << 62);
  });
  refused(wrapped, "lies outside the file's");
  const std::string run = save(fresh_dir("edited-run"), 1, 100, 0);
  test::edit_manifest(run, [](schema::Manifest::Builder m) {
    m.getFiles()[0].getRuns()[0].setCount(std::numeric_limits<int64_t>::max() - 1);
  });
  refused(run, "lies outside its section");
}

}  // namespace
}  // namespace troupe::storage
