// The TOML config of `troupe train`: settings land in train_config, and every kind of bad input
// (unknown table or key, wrong type, out-of-range value, broken syntax) is refused with the file,
// line and key named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include "cli/config_file.hpp"

using namespace troupe;

namespace {

struct config_case : ::testing::Test {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("troupe-config-" + std::to_string(::getpid()) + ".toml");
  ~config_case() override { std::filesystem::remove(path); }
  train_config load(const std::string& text) {
    std::ofstream(path) << text;
    return cli::load_config_file(path.string(), train_config{});
  }
  std::string error(const std::string& text) {
    try {
      load(text);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }
};

}  // namespace

TEST_F(config_case, EverySectionIsApplied) {
  auto c = load(R"(
[train]
epochs = 2
batch_size = 64
seed = 7
threads = 2
out = "runs/x"
max_steps = 10
[model]
kind = "mlp"
hidden = [128, 64, 32]
[optimizer]
kind = "sgd"
lr = 0.05
momentum = 0.8
weight_decay = 0.0
[data]
fashion_mnist = "/data/fm"
)");
  EXPECT_EQ(c.epochs, 2);
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.out_dir, "runs/x");
  EXPECT_EQ(c.max_steps, 10);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{128, 64, 32}));
  EXPECT_EQ(c.optim.kind, "sgd");
  EXPECT_FLOAT_EQ(c.optim.lr, 0.05f);
  EXPECT_FLOAT_EQ(c.optim.momentum, 0.8f);
  EXPECT_FLOAT_EQ(c.optim.weight_decay, 0.0f);
  EXPECT_EQ(c.fashion_mnist_dir, "/data/fm");
}

TEST_F(config_case, UnspecifiedKeysKeepTheirDefaults) {
  auto c = load("[train]\nepochs = 3\n");
  EXPECT_EQ(c.epochs, 3);
  EXPECT_EQ(c.batch_size, 128);
  EXPECT_EQ(c.optim.kind, "adamw");
  EXPECT_FLOAT_EQ(c.optim.lr, 1e-3f);
}

TEST_F(config_case, UnknownKeyIsNamedWithItsLineAndTheKnownKeys) {
  auto msg = error("[train]\nepochs = 3\nepoch = 4\n");
  EXPECT_NE(msg.find(":3: train.epoch: unknown key"), std::string::npos) << msg;
  EXPECT_NE(msg.find("epochs"), std::string::npos) << msg;
}

TEST_F(config_case, UnknownTableIsRefused) {
  auto msg = error("[trian]\nepochs = 3\n");
  EXPECT_NE(msg.find("trian: unknown table"), std::string::npos) << msg;
}

TEST_F(config_case, WrongTypeIsRefused) {
  auto msg = error("[train]\nepochs = \"five\"\n");
  EXPECT_NE(msg.find("train.epochs: expected an integer"), std::string::npos) << msg;
  msg = error("[optimizer]\nlr = \"fast\"\n");
  EXPECT_NE(msg.find("optimizer.lr: expected a number"), std::string::npos) << msg;
}

TEST_F(config_case, OutOfRangeValuesAreRefused) {
  EXPECT_NE(error("[train]\nbatch_size = 0\n").find("train.batch_size: must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(error("[optimizer]\nlr = -1.0\n").find("optimizer.lr: must be positive"), std::string::npos);
  EXPECT_NE(error("[optimizer]\nmomentum = 1.5\n").find("momentum must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error("[model]\nkind = \"cnn\"\n").find("model.kind: must be \"mlp\" or \"gpt\""), std::string::npos);
  EXPECT_NE(error("[model]\nhidden = []\n").find("model.hidden"), std::string::npos);
}

TEST_F(config_case, SyntaxErrorNamesTheLine) {
  auto msg = error("[train]\nepochs = 3\nbatch_size = = 4\n");
  EXPECT_NE(msg.find(path.string() + ":3:"), std::string::npos) << msg;
}

TEST(ParseWidths, AcceptsCommaListsAndRefusesTheRest) {
  EXPECT_EQ(cli::parse_widths("256,256,128"), (std::vector<int64_t>{256, 256, 128}));
  EXPECT_THROW(cli::parse_widths("256,,128"), std::invalid_argument);
  EXPECT_THROW(cli::parse_widths("256,x"), std::invalid_argument);
  EXPECT_THROW(cli::parse_widths("-3"), std::invalid_argument);
}
