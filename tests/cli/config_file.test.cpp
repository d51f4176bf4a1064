// The TOML config of `troupe train`: settings land in train_config, and every kind of bad input
// (unknown table or key, wrong type, out-of-range or non-finite value, broken syntax) is refused
// with the file, line and key named, by the same table of tunables that checks the flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <unistd.h>

#include "cli/config_file.hpp"
#include "cli/tunables.hpp"

using namespace troupe;

namespace {

struct config_case : ::testing::Test {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("troupe-config-" + std::to_string(::getpid()) + ".toml");
  ~config_case() override { std::filesystem::remove(path); }
  train_config load(const std::string& text) {
    std::ofstream(path) << text;
    const train_config defaults;  // named: GCC 12 warns (wrongly) of an unset vector in a temporary one
    return cli::load_config_file(path.string(), defaults);
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
  EXPECT_EQ(c.optim.kind, optimizer_kind::sgd);
  EXPECT_FLOAT_EQ(c.optim.lr, 0.05f);
  EXPECT_FLOAT_EQ(c.optim.momentum, 0.8f);
  EXPECT_FLOAT_EQ(c.optim.weight_decay, 0.0f);
  EXPECT_EQ(c.fashion_mnist_dir, "/data/fm");
}

TEST_F(config_case, UnspecifiedKeysKeepTheirDefaults) {
  auto c = load("[train]\nepochs = 3\n");
  EXPECT_EQ(c.epochs, 3);
  EXPECT_EQ(c.batch_size, 128);
  EXPECT_EQ(c.optim.kind, optimizer_kind::adamw);
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
  EXPECT_NE(error("[train]\nbatch_size = 0\n").find(":2: train.batch_size: must be in 1..10000000, got 0"),
            std::string::npos);
  EXPECT_NE(error("[optimizer]\nlr = -1.0\n").find("optimizer.lr: must be a finite number in (0, 100], got -1"),
            std::string::npos);
  EXPECT_NE(error("[optimizer]\nmomentum = 1.5\n").find("optimizer.momentum: must be a finite number in [0, 1)"),
            std::string::npos);
  EXPECT_NE(error("[model]\nkind = \"cnn\"\n").find("model.kind: must be one of mlp, gpt, got \"cnn\""), std::string::npos);
  EXPECT_NE(error("[model]\nhidden = []\n").find("model.hidden: expected at least one value"), std::string::npos);
}

// toml++ reads 64-bit integers; they used to be cast to int or uint16_t: threads 4294967297 ran 1
// thread, ranks 4294967298 ran dp 2, master_port 70000 became 4464.
TEST_F(config_case, IntegersBeyondTheirRangeAreRefusedNotTruncated) {
  std::string msg = error("[train]\nthreads = 4294967297\n");
  EXPECT_NE(msg.find(":2: train.threads: must be in 1.."), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 4294967297"), std::string::npos) << msg;
  msg = error("[data_parallel]\nranks = 4294967298\n");
  EXPECT_NE(msg.find("data_parallel.ranks: must be in 1..256, got 4294967298"), std::string::npos) << msg;
  msg = error("[process]\nmaster_port = 70000\n");
  EXPECT_NE(msg.find("process.master_port: must be in 1..65535, got 70000"), std::string::npos) << msg;
  msg = error("[pipeline]\nstages = 4294967298\n");
  EXPECT_NE(msg.find("pipeline.stages: must be in 1..256"), std::string::npos) << msg;
  msg = error("[train]\nseed = -1\n");
  EXPECT_NE(msg.find("train.seed: must be >= 0, got -1"), std::string::npos) << msg;
}

TEST_F(config_case, NanAndInfinityAreRefused) {
  for (const char* text : {"[data_parallel]\nbucket_mb = nan\n", "[pipeline]\nwatchdog_seconds = inf\n",
                           "[process]\npeer_timeout = nan\n", "[optimizer]\nlr = inf\n",
                           "[data_parallel]\nbucket_mb = -inf\n"}) {
    const std::string msg = error(text);
    EXPECT_NE(msg.find(":2: "), std::string::npos) << text << " -> " << msg;
    EXPECT_NE(msg.find("must be a finite number in"), std::string::npos) << text << " -> " << msg;
  }
}

// The connection handshake's deadline is twice peer_timeout in int milliseconds: 0.0001 s made it
// 0 ms and 1e300 s overflowed, and either refused a real worker as if its secret were wrong.
TEST_F(config_case, PeerTimeoutCannotMakeAZeroOrOverflowingDeadline) {
  EXPECT_NE(error("[process]\npeer_timeout = 0.0001\n").find("process.peer_timeout: must be a finite number in [1, 86400]"),
            std::string::npos);
  EXPECT_NE(error("[process]\npeer_timeout = 1e300\n").find("got 1e+300"), std::string::npos);
  EXPECT_EQ(load("[process]\npeer_timeout = 1\n").process.peer_timeout_seconds, 1.0);
}

TEST_F(config_case, RecordsWhichKeysTheFileSet) {
  std::ofstream(path) << "[process]\nmaster_addr = \"node0\"\nmaster_port = 29999\n";
  std::set<std::string> given;
  const train_config defaults;
  const train_config c = cli::load_config_file(path.string(), defaults, &given);
  EXPECT_EQ(c.process.master_addr, "node0");
  EXPECT_EQ(c.process.master_port, 29999);
  EXPECT_EQ(given, (std::set<std::string>{"process.master_addr", "process.master_port"}));
}

// One check for a flag and a config key: the same rule, the same words.
TEST_F(config_case, AFlagAndItsKeyAreRefusedWithTheSameWords) {
  std::string flag_msg;
  try {
    cli::parse_flag(*cli::find_flag("--peer-timeout"), {"0.0001"});
  } catch (const std::invalid_argument& e) {
    flag_msg = e.what();
  }
  ASSERT_FALSE(flag_msg.empty());
  EXPECT_NE(error("[process]\npeer_timeout = 0.0001\n").find("process.peer_timeout: " + flag_msg), std::string::npos);
  EXPECT_EQ(cli::find_flag("--peer-timeout"), cli::find_key("process.peer_timeout"));
}

TEST(Tunables, EveryEntryHasANameAHelpAndAnEffect) {
  for (const auto& t : cli::tunables()) {
    EXPECT_FALSE(t.flag.empty() && t.key.empty()) << t.help;
    EXPECT_FALSE(t.help.empty()) << t.flag << t.key;
    EXPECT_TRUE(static_cast<bool>(t.apply)) << t.flag << t.key;
  }
}

TEST(Tunables, ThreadsAreBoundedByTheMachineAndOpenBlas) {
  const cli::tunable& t = *cli::find_flag("--threads");
  EXPECT_EQ(t.max_int, cli::max_threads());
  EXPECT_LE(cli::max_threads(), 64);  // Debian 12's OpenBLAS is built for 64; more hangs in it
  EXPECT_THROW(cli::parse_flag(t, {std::to_string(cli::max_threads() + 1)}), std::invalid_argument);
  EXPECT_EQ(cli::parse_flag(t, {"1"}).integer, 1);
}

TEST(Tunables, FlagTextIsParsedStrictly) {
  const cli::tunable& epochs = *cli::find_flag("--epochs");
  for (const char* bad : {"", "1e3", " 2", "3x", "-", "99999999999999999999999"})
    EXPECT_THROW(cli::parse_flag(epochs, {bad}), std::invalid_argument) << bad;
  const cli::tunable& lr = *cli::find_flag("--lr");
  for (const char* bad : {"nan", "inf", "-1", "0", "1e300", "fast"})
    EXPECT_THROW(cli::parse_flag(lr, {bad}), std::invalid_argument) << bad;
  EXPECT_FLOAT_EQ(static_cast<float>(cli::parse_flag(lr, {"5e-4"}).number), 5e-4f);
  EXPECT_THROW(cli::parse_flag(*cli::find_flag("--hidden"), {""}), std::invalid_argument);
}

TEST(Tunables, DeviceListIsReadInOrderAndABadItemIsNamed) {
  const cli::tunable& t = *cli::find_flag("--device");
  EXPECT_EQ(cli::find_key("train.device"), &t);
  train_config c;
  t.apply(c, cli::parse_flag(t, {"cuda:1,cpu,cuda"}));
  ASSERT_EQ(c.devices.size(), 3u);
  EXPECT_EQ(c.devices[0], (device{device_type::cuda, 1}));
  EXPECT_EQ(c.devices[1], (device{device_type::cpu, 0}));
  EXPECT_EQ(c.devices[2], (device{device_type::cuda, 0}));
  for (const char* bad : {"gpu", "cuda:", "cuda:0,,cpu", "cuda:x", ",cuda"}) {
    try {
      t.apply(c, cli::parse_flag(t, {bad}));
      ADD_FAILURE() << bad << " was taken for devices";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find('"'), std::string::npos) << bad << ": " << e.what();
    }
  }
}

TEST_F(config_case, MatmulPrecisionIsReadFromTheFileAndAnUnknownOneIsNamed) {
  EXPECT_EQ(load("[train]\nepochs = 1\n").matmul, matmul_precision::f32);
  EXPECT_EQ(load("[train]\nmatmul_precision = \"bf16\"\n").matmul, matmul_precision::bf16);
  const std::string e = error("[train]\nmatmul_precision = \"fp16\"\n");
  EXPECT_NE(e.find("train.matmul_precision"), std::string::npos) << e;
  EXPECT_NE(e.find("fp16"), std::string::npos) << e;
  EXPECT_EQ(cli::find_flag("--matmul-precision"), cli::find_key("train.matmul_precision"));
}

// Over several processes a GPU job's buckets and activations cross through host memory; a
// tensor-parallel group's sums have no such path, so tp on GPUs is refused, naming the device.
TEST(Validate, AGpuJobOverSeveralProcessesIsAcceptedAndWithTensorParallelismOnlyThroughNccl) {
  train_config c;
  c.devices = {device{device_type::cuda, 0}};
  c.mesh.dp = 2;
  c.mesh.processes = 2;
  EXPECT_NO_THROW(validate(c));
  c.mesh.dp = 1;
  c.mesh.tp = 2;
  c.model.kind = model_kind::gpt;
  try {
    validate(c);
    FAIL() << "tensor parallelism on GPUs over two processes was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor parallelism on GPUs over 2 processes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("give --backend nccl"), std::string::npos) << e.what();
  }
  c.backend = net::backend_kind::nccl;
  if (net::backend_built(net::backend_kind::nccl)) {
    EXPECT_NO_THROW(validate(c));
  } else {
    EXPECT_THROW(validate(c), std::invalid_argument) << "nccl in a build without it";
  }
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
