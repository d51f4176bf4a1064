#!/usr/bin/env bash
# Every benchmark of bench/README.md, one after the other, each printing its table with the
# ratio against its peer. `scripts/setup.sh bench` installs the peers (PyTorch, Gloo, Open MPI, fio)
# and calls this. Takes about half an hour on 2 cores; run it on an otherwise idle machine.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
# Every program picks its OpenBLAS kernels itself (kernels/blas_runtime.hpp).

echo "== MLP training throughput: troupe against PyTorch"
/usr/bin/python3 "$here/mlp_vs_pytorch.py" --build "$build" --repeats 3
echo "== CPU training speed: MLP and GPT at 1 and 2 threads, --pp 2, --dp 2 against DDP, and the sgemm bound"
/usr/bin/python3 "$here/cpu_vs_pytorch.py" --build "$build" --repeats 3
echo "== GPT over dp x pp x tp meshes: troupe against PyTorch DTensor tensor parallel (gloo)"
/usr/bin/python3 "$here/tp_vs_pytorch.py" --build "$build" --repeats 3
echo "== A mixture-of-experts GPT: troupe against a plain PyTorch MoE, dp 1 and dp 2 (DDP, gloo)"
/usr/bin/python3 "$here/moe_vs_pytorch.py" --build "$build" --repeats 3
echo "== Context parallelism: troupe's three --cp-mode forms against a PyTorch Ulysses over gloo, cp 2 as 2 processes"
/usr/bin/python3 "$here/cp_vs_pytorch.py" --build "$build" --repeats 3
echo "== Live slow-rank and slow-link detection: on against off over two processes"
/usr/bin/python3 "$here/detection_overhead.py" --troupe "$build/troupe" --repeats 3
echo "== In-process all-reduce: troupe collectives against Gloo and memcpy"
"$build/bench/allreduce_bench"
echo "== Cross-process all-reduce: troupe TCP ring against Gloo and Open MPI"
"$here/cross_process_allreduce.sh" "$build"
echo "== Collective back ends (MPI, Gloo, TCP ring) through the actor against each engine called directly"
for np in 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$build/bench/backend_bench" 1 16 64
done
echo "== Activation transfer between processes: troupe p2p transport against a plain TCP socket"
"$build/bench/p2p_bench"
echo "== Pipeline step time against the ideal (P=2)"
"$build/bench/pipeline_step_time" 20
echo "== Actor message round trip against a mutex and condition variable"
"$build/bench/actor_message_overhead" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
echo "== NVMe offload: storage/uring_store against fio (io_uring, O_DIRECT)"
"$build/bench/offload_bench" --dir "${TROUPE_OFFLOAD_DIR:-/tmp}"
echo "== Checkpoints: write and read bandwidth against fio, and the step time of checkpointing every K steps"
"$build/bench/checkpoint_bench" --dir "${TROUPE_OFFLOAD_DIR:-/tmp}"
echo "== ZeRO 1/2 and optimizer offload: step time against plain DP, NVMe I/O hidden behind the update"
"$build/bench/zero_bench" --dir "${TROUPE_OFFLOAD_DIR:-/tmp}"
echo "== Parameter servers (BSP, SSP s=1,3, ASP) against sync DP with one replica at 3x the step time"
"$build/bench/ps_straggler_bench"
echo "== troupe's own jobs: the forecast (troupe plan --calibrate, troupe train --forecast) against their runs"
"$build/tests/actors/actors_job_forecast_timing_tests"
