// completions: what runs once a stream has got past a point. The driver calls a host function
// (cudaLaunchHostFunc) on a thread of its own where no CUDA call is allowed, and where freeing a
// tensor (a cudaEventRecord, a cudaFree on the caching allocator's out-of-memory path) or
// dropping the last handle of a communicator (ncclCommDestroy) would break that rule. So the host
// function here only hands a number to the completion thread, which runs the callback, and
// destroys what it captured, on an ordinary thread. The same thread polls the streams that have
// callbacks outstanding, so a fault (a kernel's illegal address) is reported naming the action
// that waited for it, rather than showing up as a stall; and before it runs a callback it reads
// the GPU's kernel_fault slot (kernel_faults.hpp), so bad data a kernel found (a token outside the
// vocabulary) is reported the same way.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace troupe::cuda {

// Runs `done` on the completion thread once `stream` has run what was enqueued on it so far. If
// the stream faults first, or a kernel of the GPU recorded bad data, `fault` runs there instead
// with a message naming `what` and the error (without one, the message goes to stderr and the
// process aborts: a GPU whose context faulted cannot run on). Neither may wait for the stream. Throws troupe::cuda::error when the
// host function cannot be enqueued.
void after(cudaStream_t stream, std::string what, std::function<void()> done,
           std::function<void(const std::string&)> fault = {});

// Blocks until every callback whose stream point was reached has run (tests, and teardown that
// must see the callbacks' effects).
void drain_completions();

}  // namespace troupe::cuda
