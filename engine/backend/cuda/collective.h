// The one collective tensor parallelism needs: a sum over the ranks of a
// group, each rank one GPU driven by its own host thread. NcclGroup is the
// implementation the engines use: NCCL (libnccl.so.2, from the CUDA toolkit
// or the nvidia-nccl wheel) loaded when a group is first made, so that a
// build without tensor parallelism in use needs no NCCL at run time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/status.h"

namespace braid {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf[0, n) = the sum over the ranks of their buf[0, n), in place, enqueued
  // on `stream` (a cudaStream_t of this rank's device). Every rank calls it
  // with the same n, in the same order as its other collectives.
  virtual Status AllReduceSum(float* buf, size_t n, void* stream) = 0;
  // Whether the call may be captured into a CUDA graph (NCCL's may).
  virtual bool graph_safe() const { return true; }
  // `bytes` of device memory on this rank's device for buffers AllReduceSum
  // sums, registered with the library where it has faster kernels for such
  // memory (NCCL's symmetric windows, since 2.27), owned by the collective;
  // null where it has none or registering failed (the caller allocates its
  // own). Collective: every rank calls it, with the same bytes, in the
  // same order.
  virtual void* ReduceBuffer(size_t bytes) { return nullptr; }
  // How the buffers ReduceBuffer gave are registered, for ModelInfo::isa:
  // "symmetric windows", why not, or empty.
  virtual std::string buffers() const { return ""; }
};

// One NCCL communicator per device of a single-process group
// (ncclCommInitAll). ReduceBuffer gives memory from ncclMemAlloc registered
// as a symmetric window (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC),
// for which NCCL 2.27 and later run their low-latency all-reduce kernels;
// BRAID_NCCL_WINDOWS=0 leaves plain cudaMalloc buffers (braid_gpu_check tp
// times both on several GPUs). Errors: NCCL not
// found (the library name and the loader's message), a device NCCL refuses.
class NcclGroup {
 public:
  static Result<std::unique_ptr<NcclGroup>> Open(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  // Rank r's side (r in [0, devices.size())); owned by the group.
  Collective& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }
  // "NCCL 2.28.9".
  const std::string& version() const { return version_; }

 private:
  NcclGroup() = default;
  std::vector<void*> comms_;  // ncclComm_t
  std::vector<std::unique_ptr<Collective>> ranks_;
  std::string version_;
};

}  // namespace braid
