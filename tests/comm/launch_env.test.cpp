// Launcher environment: each launcher's variables, flags, precedence when launchers nest, and
// every bad value or contradiction giving an error that names the variable.
#include <gtest/gtest.h>

#include "comm/launch_env.hpp"

using troupe::launch_flags;
using troupe::parse_launch_env;
using env_map = std::map<std::string, std::string>;

namespace {

troupe::launch_env ok(const env_map& e, const launch_flags& f = {}) {
  auto r = parse_launch_env(e, f);
  EXPECT_TRUE(r.env.has_value()) << r.error;
  return r.env.value_or(troupe::launch_env{});
}

std::string err(const env_map& e, const launch_flags& f = {}) {
  auto r = parse_launch_env(e, f);
  EXPECT_FALSE(r.env.has_value());
  return r.error;
}

}  // namespace

TEST(LaunchEnv, NothingSetIsOneProcess) {
  auto e = ok({{"HOME", "/root"}});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.source, "single");
}

TEST(LaunchEnv, Torchrun) {
  auto e = ok({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "12345"}});
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 12345);
  EXPECT_EQ(e.source, "torchrun");
}

TEST(LaunchEnv, MpirunNeedsAnAddressFromFlagsOrEnv) {
  const env_map mpi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  EXPECT_NE(err(mpi).find("MASTER_ADDR"), std::string::npos);
  launch_flags f;
  f.master_addr = "127.0.0.2";
  auto e = ok(mpi, f);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.master_addr, "127.0.0.2");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.source, "mpirun");
  env_map with_env = mpi;
  with_env["MASTER_ADDR"] = "127.0.0.3";
  EXPECT_EQ(ok(with_env).master_addr, "127.0.0.3");
  EXPECT_EQ(ok(with_env, f).master_addr, "127.0.0.2");  // the flag wins over the variable
}

TEST(LaunchEnv, MpirunWithTheAddressFromMpiNeedsNoneButOtherLaunchersStillDo) {
  launch_flags f;
  f.address_from_mpi = true;
  const auto e = ok({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, f);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.master_addr, "");  // process 0 says it over MPI
  EXPECT_EQ(err({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, f).find("needs a rendezvous address") != std::string::npos, true);
  EXPECT_EQ(err({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}, f).find("needs a rendezvous address") != std::string::npos,
            true);
  env_map given = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}};
  EXPECT_EQ(ok(given, f).master_addr, "10.0.0.1");  // one given is used
}

TEST(LaunchEnv, Srun) {
  auto e = ok({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "80"}});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.source, "srun");
}

TEST(LaunchEnv, FlagsAlone) {
  launch_flags f{"2", "3", "127.0.0.1", "4000"};
  auto e = ok({}, f);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_EQ(e.master_port, 4000);
  EXPECT_EQ(e.source, "flags");
}

TEST(LaunchEnv, NestedLaunchersTheMostSpecificWins) {
  // torchrun inside an srun allocation: SLURM_PROCID is the node's task, RANK the process.
  auto e = ok({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
               {"MASTER_ADDR", "a"}});
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.source, "torchrun");
}

TEST(LaunchEnv, FlagContradictingTheLauncherNamesBoth) {
  launch_flags f;
  f.rank = "1";
  f.world_size = "4";
  auto msg = err({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}}, f);
  EXPECT_NE(msg.find("--rank=1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("RANK=\"2\""), std::string::npos) << msg;
  f.rank = "2";
  f.world_size = "3";
  msg = err({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}}, f);
  EXPECT_NE(msg.find("WORLD_SIZE"), std::string::npos) << msg;
  f.world_size = "4";
  EXPECT_EQ(ok({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}}, f).source, "flags");  // agreeing is fine
}

TEST(LaunchEnv, HalfAPairIsAnError) {
  EXPECT_NE(err({{"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(err({{"OMPI_COMM_WORLD_SIZE", "2"}}).find("OMPI_COMM_WORLD_RANK"), std::string::npos);
  EXPECT_NE(err({{"SLURM_PROCID", "0"}}).find("SLURM_NTASKS"), std::string::npos);
  launch_flags f;
  f.rank = "0";
  EXPECT_NE(err({}, f).find("--world-size"), std::string::npos);
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  const env_map base = {{"MASTER_ADDR", "a"}};
  auto with = [&](env_map extra) {
    env_map e = base;
    e.insert(extra.begin(), extra.end());
    return err(e);
  };
  EXPECT_NE(with({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK=\"x\""), std::string::npos);
  EXPECT_NE(with({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}).find("RANK=\"-1\""), std::string::npos);
  EXPECT_NE(with({{"RANK", "1"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=\"0\""), std::string::npos);
  EXPECT_NE(with({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("is not below"), std::string::npos);
  EXPECT_NE(with({{"RANK", "1 "}, {"WORLD_SIZE", "2"}}).find("RANK"), std::string::npos);
  EXPECT_NE(with({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2x"}}).find("SLURM_NTASKS"), std::string::npos);
  EXPECT_NE(with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT=\"70000\""),
            std::string::npos);
  EXPECT_NE(with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}).find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(err({{"MASTER_ADDR", ""}}).find("MASTER_ADDR"), std::string::npos);
  launch_flags f;
  f.master_port = "http";
  EXPECT_NE(err({}, f).find("--master-port=\"http\""), std::string::npos);
}

TEST(LaunchEnv, KubeflowTrainerNodeIsTheFirstRankOfItsProcesses) {
  auto e = ok({{"PET_NNODES", "3"}, {"PET_NPROC_PER_NODE", "4"}, {"PET_NODE_RANK", "2"},
               {"PET_MASTER_ADDR", "trainjob-node-0-0.trainjob"}, {"PET_MASTER_PORT", "29400"}});
  EXPECT_EQ(e.source, "kubeflow");
  EXPECT_EQ(e.rank, 8);
  EXPECT_EQ(e.world_size, 12);
  EXPECT_EQ(e.node_processes, 4);
  EXPECT_EQ(e.master_addr, "trainjob-node-0-0.trainjob");
  EXPECT_EQ(e.master_port, 29400);
}

TEST(LaunchEnv, KubeflowWithoutProcessesPerNodeIsOneProcessPerNode) {
  auto e = ok({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"MASTER_ADDR", "node0"}});
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.node_processes, 1);
  EXPECT_EQ(e.master_addr, "node0");  // PET_MASTER_ADDR absent: MASTER_ADDR
}

TEST(LaunchEnv, TorchrunInsideAKubeflowPodWins) {
  // A pod whose command is torchrun: its children carry RANK beside the pod's PET_ variables.
  auto e = ok({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_NPROC_PER_NODE", "2"}, {"RANK", "3"},
               {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"}});
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.node_processes, 1);
}

TEST(LaunchEnv, KubeflowBadValuesAreNamed) {
  EXPECT_NE(err({{"PET_NNODES", "2"}}).find("PET_NODE_RANK is not"), std::string::npos);
  EXPECT_NE(err({{"PET_NODE_RANK", "0"}}).find("PET_NNODES is not"), std::string::npos);
  EXPECT_NE(err({{"PET_NNODES", "1:4"}, {"PET_NODE_RANK", "0"}}).find("elastic range"), std::string::npos);
  EXPECT_NE(err({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "0"}, {"PET_NPROC_PER_NODE", "auto"}, {"MASTER_ADDR", "a"}})
                .find("PET_NPROC_PER_NODE=\"auto\""),
            std::string::npos);
  EXPECT_NE(err({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "2"}, {"MASTER_ADDR", "a"}}).find("not below PET_NNODES"),
            std::string::npos);
  EXPECT_NE(err({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}}).find("rendezvous address"), std::string::npos);
  launch_flags f;
  f.rank = "1";
  f.world_size = "2";
  EXPECT_NE(err({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"MASTER_ADDR", "a"}}, f).find("use one"),
            std::string::npos);
}
