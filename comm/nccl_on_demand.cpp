// nccl_on_demand: the NCCL functions troupe calls, forwarded to libnccl opened at the first call
// (kernels/cuda/lazy_library.hpp), so a process that never reduces on GPUs never maps it. A
// failure to open it is ncclSystemError, and ncclGetLastError names the library and the reason.
#include <nccl.h>

#include <string>

#include "kernels/cuda/lazy_library.hpp"

namespace {
troupe::cuda::lazy_library& nccl() {
  static troupe::cuda::lazy_library lib(TROUPE_NCCL_SONAME, TROUPE_NCCL_LIBRARY_DIR);
  return lib;
}
constexpr ncclResult_t not_loaded = ncclSystemError;
}  // namespace

TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclGetUniqueId, not_loaded, (ncclUniqueId * id), (id))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclCommInitRank, not_loaded,
                 (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclCommDestroy, not_loaded, (ncclComm_t comm), (comm))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclCommAbort, not_loaded, (ncclComm_t comm), (comm))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclCommGetAsyncError, not_loaded, (ncclComm_t comm, ncclResult_t* error),
                 (comm, error))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclGroupStart, not_loaded, (), ())
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclGroupEnd, not_loaded, (), ())
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclAllReduce, not_loaded,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                  cudaStream_t stream),
                 (send, recv, count, type, op, comm, stream))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclReduceScatter, not_loaded,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                  cudaStream_t stream),
                 (send, recv, count, type, op, comm, stream))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclAllGather, not_loaded,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                  cudaStream_t stream),
                 (send, recv, count, type, comm, stream))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclBroadcast, not_loaded,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                  cudaStream_t stream),
                 (send, recv, count, type, root, comm, stream))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclReduce, not_loaded,
                 (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                  ncclComm_t comm, cudaStream_t stream),
                 (send, recv, count, type, op, root, comm, stream))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclSend, not_loaded,
                 (const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream),
                 (send, count, type, peer, comm, stream))
TROUPE_ON_DEMAND(nccl(), ncclResult_t, ncclRecv, not_loaded,
                 (void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream),
                 (recv, count, type, peer, comm, stream))

extern "C" const char* ncclGetErrorString(ncclResult_t result) {
  using fn = const char* (*)(ncclResult_t);
  static const fn f = reinterpret_cast<fn>(nccl().symbol("ncclGetErrorString"));
  return f ? f(result) : "unhandled system error (NCCL could not be loaded)";
}
extern "C" const char* ncclGetLastError(ncclComm_t comm) {
  using fn = const char* (*)(ncclComm_t);
  static const fn f = reinterpret_cast<fn>(nccl().symbol("ncclGetLastError"));
  if (f) return f(comm);
  static const std::string why = nccl().error();
  return why.c_str();
}
