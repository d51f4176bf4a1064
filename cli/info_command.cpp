// `troupe info` (see info_command.hpp). One `key: value` per line, so scripts can grep it.
#include "cli/info_command.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <thread>

#include "actors/plan/accelerators.hpp"
#include "cli/flags_reference.hpp"
#include "comm/collective_backend.hpp"
#include "kernels/blas_runtime.hpp"
#include "kernels/gemm_library.hpp"

namespace troupe::cli {

void add_info_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("info", "Show the build's version, the GEMM library and BLAS kernels in use, the cores, the collective back ends, the GPUs and what reduces between them");
  auto flags_reference_only = std::make_shared<bool>(false);
  cmd->add_flag("--flags-reference", *flags_reference_only,
                "Print the reference of every flag and config key (docs/reference/flags.md) and nothing else");
  cmd->callback([&app, &exit_code, flags_reference_only] {
    if (*flags_reference_only) {
      std::fputs(flags_reference(*app.get_subcommand("train")).c_str(), stdout);
      exit_code = 0;
      return;
    }
    gemm_choice gemm;
    try {
      gemm = chosen_gemm_library();
    } catch (const std::invalid_argument& e) {
      spdlog::error("troupe info: {}", e.what());
      exit_code = 2;
      return;
    }
    const blas_kernels& k = ensure_blas_kernels();
    std::printf("version: %s\n", TROUPE_VERSION);
    std::printf("blas kernels: %s\n", k.running.c_str());
    std::printf("blas kernels chosen by OpenBLAS at load: %s\n", k.loaded.c_str());
    std::printf("gemm library: %s (%s; TROUPE_GEMM=openblas|onednn overrides)\n", to_string(gemm.library),
                gemm.reason.c_str());
    for (gemm_library l : all_gemm_libraries) std::printf("gemm library %s: %s\n", to_string(l), describe_gemm_library(l).c_str());
    std::printf("hardware threads: %u\n", std::thread::hardware_concurrency());
    std::printf("collective back ends: %s\n", net::built_backends().c_str());
    std::printf("gpus: %s\n", describe_accelerators().c_str());
    const device_engines engines = gpu_group_engines();
    std::printf("gpu data-parallel groups: %s\n",
                engines.size() > 1 ? "nccl (replicas with a GPU each; across processes with --backend nccl), the device's "
                                     "own ops (replicas sharing one GPU)"
                                   : "through the host (troupe was built without CUDA)");
    std::printf("gpu tensor-parallel groups: %s\n",
                engines.size() > 1 ? "nccl (ranks with a GPU each; across processes with --backend nccl), the device's own "
                                     "ops (ranks sharing one GPU)"
                                   : "none (troupe was built without CUDA)");
    std::printf("gpu pipeline stages in other processes: %s\n",
                engines.size() > 1 ? "nccl send/recv between the GPUs with --backend nccl, else pinned host copies over "
                                     "the point-to-point transport"
                                   : "pinned host copies over the point-to-point transport (troupe was built without CUDA)");
    // The two newest parallel forms, and what of them is built, so a user does not learn it from a refusal.
    std::printf("mesh rank order: tp innermost, then pp, cp, dp (rank ((d * cp + c) * pp + p) * tp + t)\n");
    std::printf("context parallelism (--cp): CPU ranks, in one process or across them; --cp-mode all-gather, ring "
                "(point-to-point steps) or all-to-all (Ulysses), over every back end that spans processes\n");
    std::printf("mixture of experts (--experts): CPU ranks, with dp, pp, cp and ZeRO; --ep N shares the experts over N "
                "consecutive replicas (all-to-all dispatch and combine; with ZeRO 1 and 2, not yet 3)\n");
    exit_code = 0;
  });
}

}  // namespace troupe::cli
