// One rank of a multi-process training job, started by process_job.test.cpp (fork/exec): a
// small MLP on Fashion-MNIST through run_training with cfg.process set. Rank 0 prints
// "PORT <n>" (its control gate) on stdout first, and at the end "LOSS <hex double>" per step,
// then "OK", or "FAILED <report>" and exit 1. With parameter servers, rank 0 also prints
// "UPDATE server replica step unit version_read version_applied slowest held" per applied push. It has no gtest main: it is a process (gtest only records the fake GPU's checks).
//
// usage: process_job_helper RANK WORLD MASTER_ADDR MASTER_PORT SECRET OUT_DIR STEPS PEER_TIMEOUT_S
//                           [STRAGGLE_MS [MESH [WATCHDOG_S]]]
// MESH ("dp2.pp2.tp1"): the mesh spread over the WORLD processes (less any server processes of
// its variant, process_job_config.hpp); default: dp = WORLD. Rank 0
// also prints "PARAMS <hash>" of the final parameters. A "gpu:" variant puts every rank of its
// process on a fake GPU and fails unless the layers ran there with the device's memory; a
// "gpunccl:" one (--backend nccl) fails unless its data-parallel groups reduced on the devices,
// through Gloo standing for NCCL (gloo_device_engine.hpp), and, where its pipeline spans
// processes, unless its stages' tensors crossed the engine's links between the devices.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/run/training_job.hpp"
#include "actors/plan/accelerators.hpp"
#include "tests/actors/fake_device.hpp"
#include "tests/actors/gloo_device_engine.hpp"
#include "tests/actors/process_job_config.hpp"
#include "tests/kernels/fake_gpu.hpp"

int main(int argc, char** argv) {
  if (argc < 9) {
    std::fprintf(stderr, "usage: %s RANK WORLD MASTER_ADDR MASTER_PORT SECRET OUT_DIR STEPS PEER_TIMEOUT_S [MS]\n", argv[0]);
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("stderr"));  // stdout carries PORT/LOSS lines
  const double straggle = argc > 9 ? std::atof(argv[9]) : 0.0;
  troupe::train_config cfg = troupe::test::small_dp_config(std::atoi(argv[2]), argv[6], std::atoll(argv[7]), straggle);
  if (argc > 10) {  // MESH, or gpt:MESH for the small GPT, after zeroN: / nvme: prefixes
    std::string text = argv[10];
    const troupe::test::job_variant variant = troupe::test::take_variant(text);
    const bool gpt = text.rfind("gpt:", 0) == 0;
    const auto m = troupe::sched::parse_mesh(gpt ? text.substr(4) : text);
    if (!m) {
      std::fprintf(stderr, "bad mesh %s\n", argv[10]);
      return 2;
    }
    cfg = gpt ? troupe::test::small_gpt_mesh_config(*m, argv[6], std::atoll(argv[7]))
              : troupe::test::small_mesh_config(*m, argv[6], std::atoll(argv[7]), straggle);
    troupe::test::apply(variant, cfg);
  }
  if (argc > 11) cfg.watchdog_seconds = std::atof(argv[11]);
  std::string variant_text = argc > 10 ? argv[10] : "";
  const troupe::test::job_variant devices = troupe::test::take_variant(variant_text);
  const bool fake_gpu = devices.fake_gpu;
  auto& p = cfg.process;
  p.index = std::atoi(argv[1]);
  cfg.mesh.processes = std::atoi(argv[2]) - cfg.server_processes;  // WORLD counts the server processes
  p.master_addr = argv[3];
  p.master_port = static_cast<uint16_t>(std::atoi(argv[4]));
  p.secret = argv[5];
  p.peer_timeout_seconds = std::atof(argv[8]);
  p.join_timeout_seconds = 30;
  p.on_listening = [](uint16_t port) {
    std::printf("PORT %u\n", port);
    std::fflush(stdout);
  };
  troupe::job_extras extras;
  std::vector<std::shared_ptr<troupe::test::fake_device>> gpus;
  const auto engine = std::make_shared<troupe::test::gloo_device_engine>("", !devices.no_links);
  if (fake_gpu) {
    troupe::test::fake_ops();
    for (int r = 0; r < cfg.mesh.ranks(); ++r)
      gpus.push_back(std::make_shared<troupe::test::fake_device>(troupe::test::fake_gpu, true));
    extras.device_of = [gpus](int rank) -> std::shared_ptr<troupe::device_queue> { return gpus.at(static_cast<size_t>(rank)); };
    cfg.devices = {troupe::test::fake_gpu};  // what every process knows of every rank's device
    extras.device_collectives = engine;
  }
  try {
    const int matmuls = fake_gpu ? troupe::test::fake_ops().calls("matmul_forward") : 0;
    troupe::train_summary s = troupe::run_training(cfg, extras);
    if (fake_gpu && troupe::test::fake_ops().calls("matmul_forward") == matmuls)
      throw std::runtime_error("no layer ran on the fake GPU");
    if (devices.nccl && cfg.mesh.dp > 1 && troupe::net::backend_built(troupe::net::backend_kind::gloo) &&
        engine->joins() == 0)
      throw std::runtime_error("no data-parallel group reduced its buckets on the fake GPUs");
    bool pipeline_elsewhere = false;  // a server process (--servers) holds no rank
    if (devices.nccl && cfg.process.index < cfg.mesh.processes)
      for (int r : cfg.mesh.ranks_of_process(cfg.process.index))
        pipeline_elsewhere = pipeline_elsewhere || (cfg.mesh.pp > 1 && cfg.mesh.group_spans_processes(troupe::sched::axis::pp, r));
    if (pipeline_elsewhere && engine->link_bytes() == 0)
      throw std::runtime_error("no pipeline tensor crossed a link between the fake GPUs");
    if (::testing::UnitTest::GetInstance()->ad_hoc_test_result().Failed())
      throw std::runtime_error("an op on the fake GPU got a pointer outside its memory (see stderr)");
    for (double l : s.losses) std::printf("LOSS %a\n", l);
    if (cfg.process.index == 0) std::printf("PARAMS %016llx\n", static_cast<unsigned long long>(troupe::test::bytes_hash(s.final_params)));
    for (const auto& u : s.server_updates)  // parameter servers: every applied push (process 0 only)
      std::printf("UPDATE %d %d %lld %lld %lld %lld %lld %d\n", u.server, u.replica, static_cast<long long>(u.step),
                  static_cast<long long>(u.unit), static_cast<long long>(u.version_read),
                  static_cast<long long>(u.version_applied), static_cast<long long>(u.slowest), u.held ? 1 : 0);
    std::printf("OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAILED %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
}
