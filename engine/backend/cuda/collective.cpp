#include "backend/cuda/collective.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace braid {
namespace {

// The NCCL entry points in use, resolved from the library once.
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  // Symmetric windows, since 2.27 (null in older libraries).
  decltype(&ncclMemAlloc) mem_alloc = nullptr;
  decltype(&ncclMemFree) mem_free = nullptr;
  decltype(&ncclCommWindowRegister) window_register = nullptr;
  decltype(&ncclCommWindowDeregister) window_deregister = nullptr;
  std::string error;  // why loading failed, or empty
};

const NcclApi& Nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    // BRAID_NCCL_LIBRARY names the file; otherwise the loader's search path.
    const char* env = std::getenv("BRAID_NCCL_LIBRARY");
    const std::string name = env && *env ? env : "libnccl.so.2";
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      api.error = "tensor parallelism needs NCCL, and " + name + " could not be loaded (" +
                  (why ? why : "unknown error") +
                  "); put its folder on LD_LIBRARY_PATH or name the file in BRAID_NCCL_LIBRARY";
      return;
    }
    auto sym = [&](const char* s) {
      void* p = dlsym(lib, s);
      if (!p && api.error.empty()) api.error = name + " lacks " + s;
      return p;
    };
    api.get_version = reinterpret_cast<decltype(api.get_version)>(sym("ncclGetVersion"));
    api.error_string = reinterpret_cast<decltype(api.error_string)>(sym("ncclGetErrorString"));
    api.init_all = reinterpret_cast<decltype(api.init_all)>(sym("ncclCommInitAll"));
    api.destroy = reinterpret_cast<decltype(api.destroy)>(sym("ncclCommDestroy"));
    api.all_reduce = reinterpret_cast<decltype(api.all_reduce)>(sym("ncclAllReduce"));
    api.group_start = reinterpret_cast<decltype(api.group_start)>(sym("ncclGroupStart"));
    api.group_end = reinterpret_cast<decltype(api.group_end)>(sym("ncclGroupEnd"));
    api.mem_alloc = reinterpret_cast<decltype(api.mem_alloc)>(dlsym(lib, "ncclMemAlloc"));
    api.mem_free = reinterpret_cast<decltype(api.mem_free)>(dlsym(lib, "ncclMemFree"));
    api.window_register =
        reinterpret_cast<decltype(api.window_register)>(dlsym(lib, "ncclCommWindowRegister"));
    api.window_deregister =
        reinterpret_cast<decltype(api.window_deregister)>(dlsym(lib, "ncclCommWindowDeregister"));
  });
  return api;
}

Status NcclStatus(ncclResult_t r, const char* what) {
  return Status::Internal(std::string("NCCL error in ") + what + ": " + Nccl().error_string(r));
}

class NcclRank final : public Collective {
 public:
  NcclRank(ncclComm_t comm, int rank, int size, bool windows)
      : comm_(comm), rank_(rank), size_(size), windows_(windows) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllReduceSum(float* buf, size_t n, void* stream) override {
    const ncclResult_t r = Nccl().all_reduce(buf, buf, n, ncclFloat32, ncclSum, comm_,
                                             static_cast<cudaStream_t>(stream));
    return r == ncclSuccess ? Status::Ok() : NcclStatus(r, "ncclAllReduce");
  }
  void* ReduceBuffer(size_t bytes) override {
    const NcclApi& api = Nccl();
    if (!windows_) {
      note_ = "buffers not registered (BRAID_NCCL_WINDOWS=0)";
      return nullptr;
    }
    if (!api.mem_alloc || !api.mem_free || !api.window_register || !api.window_deregister) {
      note_ = "no symmetric windows in this NCCL";
      return nullptr;
    }
    void* p = nullptr;
    ncclResult_t r = api.mem_alloc(&p, bytes);
    if (r != ncclSuccess) {
      note_ = std::string("ncclMemAlloc: ") + api.error_string(r);
      return nullptr;
    }
    ncclWindow_t win = nullptr;
    r = api.window_register(comm_, p, bytes, &win, NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess) {
      api.mem_free(p);
      note_ = std::string("ncclCommWindowRegister: ") + api.error_string(r);
      return nullptr;
    }
    cudaGetDevice(&device_);
    buffers_.push_back({p, win});
    note_ = "symmetric windows";
    return p;
  }
  std::string buffers() const override { return note_; }
  // Deregisters the windows (within the caller's ncclGroupStart/End: the
  // call is collective and one thread makes it for every rank).
  void Deregister() {
    for (auto& b : buffers_) Nccl().window_deregister(comm_, b.win);
  }
  // Frees the windows' memory, after the communicator is gone.
  void Free() {
    if (!buffers_.empty()) cudaSetDevice(device_);
    for (auto& b : buffers_) Nccl().mem_free(b.p);
    buffers_.clear();
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
  bool windows_;
  int device_ = 0;  // of the windows' memory
  struct Window {
    void* p;
    ncclWindow_t win;
  };
  std::vector<Window> buffers_;
  std::string note_;
};

}  // namespace

Result<std::unique_ptr<NcclGroup>> NcclGroup::Open(const std::vector<int>& devices) {
  const NcclApi& api = Nccl();
  if (!api.error.empty()) return Status::Unsupported(api.error);
  std::unique_ptr<NcclGroup> g(new NcclGroup());
  int v = 0;
  api.get_version(&v);
  // Codes since 2.9: major * 10000 + minor * 100 + patch.
  g->version_ = "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                std::to_string(v % 100);
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  const ncclResult_t r = api.init_all(comms.data(), n, devices.data());
  if (r != ncclSuccess) return NcclStatus(r, "ncclCommInitAll");
  const char* windows = std::getenv("BRAID_NCCL_WINDOWS");
  const bool use_windows = !(windows && std::string(windows) == "0");
  for (int i = 0; i < n; ++i) {
    g->comms_.push_back(comms[static_cast<size_t>(i)]);
    g->ranks_.push_back(
        std::make_unique<NcclRank>(comms[static_cast<size_t>(i)], i, n, use_windows));
  }
  return g;
}

NcclGroup::~NcclGroup() {
  const NcclApi& api = Nccl();
  api.group_start();
  for (auto& r : ranks_) static_cast<NcclRank&>(*r).Deregister();
  api.group_end();
  for (void* c : comms_) api.destroy(static_cast<ncclComm_t>(c));
  for (auto& r : ranks_) static_cast<NcclRank&>(*r).Free();
}

}  // namespace braid
