// `troupe export` of a checkpoint whose manifest was edited (another model, another size) exits
// 2 naming the field and writes no output file; the same checkpoint unedited exports with exit 0.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "storage/checkpoint.hpp"
#include "tests/storage/manifest_edit.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

// A committed checkpoint of an mlp 5-3-2 (26 parameters, no optimizer state) under a fresh root.
std::string small_checkpoint(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path root = fs::path(tmp ? tmp : "/tmp") / ("troupe-export-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  storage::checkpoint_manifest m;
  m.model.inputs = 5, m.model.hidden = {3}, m.model.classes = 2;
  m.step = 1;
  m.optimizer = "sgd";
  m.global_floats = 26;
  m.arrays = {"params"};
  const std::vector<float> v(26, 0.5f);
  const std::string dir = storage::begin_checkpoint(root.string(), 1);
  m.files.push_back(storage::write_shard_file(dir, "rank-0.bin", "rank 0", m.arrays, {v.data()}, 26, {{0, 0, 26}}));
  return storage::commit_checkpoint(root.string(), m, 0);
}

struct run_result {
  int code = -1;
  std::string output;
};

run_result export_of(const std::string& dir, const std::string& out) {
  const std::string log = out + ".log";
  const std::string cmd = std::string(TROUPE_BIN) + " export " + dir + " " + out + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  run_result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(log);
  r.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

TEST(ExportCommand, AnEditedManifestExitsTwoNamingTheFieldAndWritesNothing) {
  const std::string good = small_checkpoint("good");
  const run_result ok = export_of(good, good + ".safetensors");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(fs::exists(good + ".safetensors"));

  const std::string model = small_checkpoint("model");
  test::edit_manifest(model, [](storage::schema::Manifest::Builder m) { m.getModel().setInputs(5000); });
  const run_result r1 = export_of(model, model + ".safetensors");
  EXPECT_EQ(r1.code, 2) << r1.output;
  EXPECT_NE(r1.output.find("model spec (mlp 5000-3-2)"), std::string::npos) << r1.output;
  EXPECT_FALSE(fs::exists(model + ".safetensors"));

  const std::string size = small_checkpoint("size");
  test::edit_manifest(size, [](storage::schema::Manifest::Builder m) { m.setGlobalFloats(int64_t{1} << 40); });
  const run_result r2 = export_of(size, size + ".safetensors");
  EXPECT_EQ(r2.code, 2) << r2.output;
  EXPECT_NE(r2.output.find("globalFloats is 1099511627776"), std::string::npos) << r2.output;
  EXPECT_FALSE(fs::exists(size + ".safetensors"));
}

}  // namespace
}  // namespace troupe
