// One rank of a multi-process training job, started by process_job.test.cpp (fork/exec): a
// small MLP on Fashion-MNIST through run_training with cfg.process set. Rank 0 prints
// "PORT <n>" (its control gate) on stdout first, and at the end "LOSS <hex double>" per step,
// then "OK", or "FAILED <report>" and exit 1. It deliberately has no gtest: it is a process.
//
// usage: process_job_helper RANK WORLD MASTER_ADDR MASTER_PORT SECRET OUT_DIR STEPS PEER_TIMEOUT_S [STRAGGLE_MS]
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "actors/training_job.hpp"
#include "tests/actors/process_job_config.hpp"

int main(int argc, char** argv) {
  if (argc < 9) {
    std::fprintf(stderr, "usage: %s RANK WORLD MASTER_ADDR MASTER_PORT SECRET OUT_DIR STEPS PEER_TIMEOUT_S [MS]\n", argv[0]);
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("stderr"));  // stdout carries PORT/LOSS lines
  troupe::train_config cfg = troupe::test::small_dp_config(std::atoi(argv[2]), argv[6], std::atoll(argv[7]),
                                                           argc > 9 ? std::atof(argv[9]) : 0.0);
  auto& p = cfg.process;
  p.index = std::atoi(argv[1]);
  cfg.mesh.processes = std::atoi(argv[2]);
  p.master_addr = argv[3];
  p.master_port = static_cast<uint16_t>(std::atoi(argv[4]));
  p.secret = argv[5];
  p.peer_timeout_seconds = std::atof(argv[8]);
  p.join_timeout_seconds = 30;
  p.on_listening = [](uint16_t port) {
    std::printf("PORT %u\n", port);
    std::fflush(stdout);
  };
  try {
    troupe::train_summary s = troupe::run_training(cfg);
    for (double l : s.losses) std::printf("LOSS %a\n", l);
    std::printf("OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAILED %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
}
