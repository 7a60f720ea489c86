#include "backend/cuda/collective.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <mutex>

namespace braid {
namespace {

// The NCCL entry points in use, resolved from the library once.
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
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
  });
  return api;
}

Status NcclStatus(ncclResult_t r, const char* what) {
  return Status::Internal(std::string("NCCL error in ") + what + ": " + Nccl().error_string(r));
}

class NcclRank final : public Collective {
 public:
  NcclRank(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllReduceSum(float* buf, size_t n, void* stream) override {
    const ncclResult_t r = Nccl().all_reduce(buf, buf, n, ncclFloat32, ncclSum, comm_,
                                             static_cast<cudaStream_t>(stream));
    return r == ncclSuccess ? Status::Ok() : NcclStatus(r, "ncclAllReduce");
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
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
  for (int i = 0; i < n; ++i) {
    g->comms_.push_back(comms[static_cast<size_t>(i)]);
    g->ranks_.push_back(std::make_unique<NcclRank>(comms[static_cast<size_t>(i)], i, n));
  }
  return g;
}

NcclGroup::~NcclGroup() {
  for (void* c : comms_) Nccl().destroy(static_cast<ncclComm_t>(c));
}

}  // namespace braid
