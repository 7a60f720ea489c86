#include "backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cascade_plan.h"
#include "backend/cuda/collective.h"
#include "kernels/cuda_dequant.h"
#include "kernels/cuda_ops.h"
#include "kernels/quant.h"
#include "model/family.h"

namespace braid {
namespace {

namespace kc = kernels::cuda;

Status CudaStatus(cudaError_t e, const char* what) {
  return Status::Internal(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
Status KernelStatus(int e, const char* what) {
  if (e == -1) return Status::Unsupported(std::string(what) + ": shape not supported");
  return CudaStatus(static_cast<cudaError_t>(e), what);
}
Status BlasStatus(int e, const char* what) {
  return Status::Internal(std::string("cuBLAS error ") + std::to_string(e) + " in " + what);
}

#define CUDA_TRY(expr)                                   \
  do {                                                   \
    const cudaError_t e_ = (expr);                       \
    if (e_ != cudaSuccess) return CudaStatus(e_, #expr); \
  } while (0)
#define KERNEL_TRY(expr)                         \
  do {                                           \
    const int e_ = (expr);                       \
    if (e_ != 0) return KernelStatus(e_, #expr); \
  } while (0)
#define BLAS_TRY(expr)                         \
  do {                                         \
    const int e_ = static_cast<int>(expr);     \
    if (e_ != 0) return BlasStatus(e_, #expr); \
  } while (0)

// Device memory owned by one object.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { Free(); }
  // n elements at p, owned elsewhere (not freed here).
  void Adopt(T* p, size_t n) {
    Free();
    p_ = p;
    n_ = n;
    owned_ = false;
  }
  Status Allocate(size_t n) {
    Free();
    if (n == 0) return Status::Ok();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, n * sizeof(T));
    if (e != cudaSuccess)
      return Status::ResourceExhausted("cannot allocate " + std::to_string(n * sizeof(T) >> 20) +
                                       " MiB of device memory: " + cudaGetErrorString(e));
    p_ = static_cast<T*>(p);
    n_ = n;
    owned_ = true;
    return Status::Ok();
  }
  void Free() {
    if (p_ && owned_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
  bool owned_ = true;
};

// Pinned host memory.
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() {
    if (p_) cudaFreeHost(p_);
  }
  Status Allocate(size_t n) {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    void* p = nullptr;
    CUDA_TRY(cudaMallocHost(&p, std::max<size_t>(n, 1) * sizeof(T)));
    p_ = static_cast<T*>(p);
    n_ = n;
    return Status::Ok();
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// dst[0..n) = bf16 values of a seeded uniform pattern in [-0.05, 0.05) (its
// first 2^20 values repeated): operands for timing products, never zeros.
Status FillNoise(uint16_t* dst, size_t n, uint32_t seed, cudaStream_t stream) {
  const size_t piece = std::min<size_t>(n, size_t{1} << 20);
  std::vector<float> h(piece);
  uint32_t r = seed;
  for (float& v : h) {
    r = r * 1664525u + 1013904223u;
    v = (static_cast<float>(r >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  DeviceArray<float> f;
  BRAID_RETURN_IF_ERROR(f.Allocate(piece));
  CUDA_TRY(cudaMemcpy(f.get(), h.data(), piece * sizeof(float), cudaMemcpyHostToDevice));
  for (size_t at = 0; at < n; at += piece)
    KERNEL_TRY(kc::F32ToBf16(f.get(), std::min(piece, n - at), dst + at, stream));
  CUDA_TRY(cudaStreamSynchronize(stream));  // f goes on return
  return Status::Ok();
}

// The least time in ms of `reps` runs of run() on `stream`, after `warm`
// untimed ones, each run after before() (outside the timed span); 1e30 as
// soon as run() returns false.
template <typename Run, typename Before>
float LeastMs(cudaStream_t stream, int warm, int reps, Run&& run, Before&& before) {
  cudaEvent_t e0, e1;
  if (cudaEventCreate(&e0) != cudaSuccess) return 1e30f;
  if (cudaEventCreate(&e1) != cudaSuccess) {
    cudaEventDestroy(e0);
    return 1e30f;
  }
  float best = 1e30f;
  for (int i = 0; i < warm + reps; ++i) {
    before();
    cudaEventRecord(e0, stream);
    const bool ok = run();
    cudaEventRecord(e1, stream);
    if (!ok || cudaEventSynchronize(e1) != cudaSuccess) {
      best = 1e30f;
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= warm) best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

// Evicts the device's L2 cache before a timed product (a write over twice
// its size), so that the product reads its weights from device memory as
// it does in a forward pass, where the whole model passes through L2
// between two uses of one matrix: timed warm, a matrix that fits in L2
// favours the algorithms that are fastest on cached data (a Wo of the 8B
// shape at 192 rows: chosen warm, 22.3 us in the step; cold, 20.1).
class L2Flush {
 public:
  L2Flush() {
    int device = 0, bytes = 0;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) == cudaSuccess &&
        !buf_.Allocate(2 * static_cast<size_t>(bytes)).ok())
      cudaGetLastError();
  }
  void operator()(cudaStream_t stream) const {
    if (buf_.size() > 0) cudaMemsetAsync(buf_.get(), 0, buf_.size(), stream);
  }

 private:
  DeviceArray<uint8_t> buf_;
};

// bf16 x bf16 -> fp32 GEMMs through cuBLASLt with one plan (layouts and
// algorithm) per shape:
//   y[m, n] (+)= x[m, k] * w[n, k]^T, i.e. column-major D (n x m) = W^T X.
class LtGemm {
 public:
  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm() {
    for (auto* plans : {&plans_, &plans8_})
      for (auto& [k, p] : *plans) {
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.c);
      }
    if (desc_) cublasLtMatmulDescDestroy(desc_);
    if (desc8_) cublasLtMatmulDescDestroy(desc8_);
    if (lt_) cublasLtDestroy(lt_);
  }
  Status Init(cudaStream_t stream) {
    stream_ = stream;
    BLAS_TRY(cublasLtCreate(&lt_));
    BRAID_RETURN_IF_ERROR(NewDesc(&desc_));
    return workspace_.Allocate(size_t{64} << 20);
  }
  // FP8: y[m, n] (+)= (xs[m] * x8[m, :]) . (ws[n] * w8[n, :]), e4m3
  // operands with a scale per row of each (cuBLASLt's outer-vector scaling).
  // Unsupported when this cuBLASLt has no such GEMM for the shape.
  Status RunFp8(const uint8_t* x8, const float* xs, const uint8_t* w8, const float* ws, float* y,
                int m, int n, int k, bool accumulate) {
    if (!desc8_) {
      BRAID_RETURN_IF_ERROR(NewDesc(&desc8_));
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      BLAS_TRY(cublasLtMatmulDescSetAttribute(desc8_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                              sizeof mode));
      BLAS_TRY(cublasLtMatmulDescSetAttribute(desc8_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                              sizeof mode));
    }
    BLAS_TRY(cublasLtMatmulDescSetAttribute(desc8_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws,
                                            sizeof ws));
    BLAS_TRY(cublasLtMatmulDescSetAttribute(desc8_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs,
                                            sizeof xs));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    BRAID_ASSIGN_OR_RETURN(const Plan* plan,
                           PlanFor(&plans8_, desc8_, CUDA_R_8F_E4M3, {w8, x8, beta, m, n, k}));
    const Plan& p = *plan;
    BLAS_TRY(cublasLtMatmul(lt_, desc8_, &alpha, w8, p.a, x8, p.b, &beta, y, p.c, y, p.c, &p.algo,
                            workspace_.get(), workspace_.size(), stream_));
    return Status::Ok();
  }
  // The timed products whose fastest algorithm was not the heuristic's
  // first: "NxK rows M: first -> chosen us", comma-separated.
  const std::string& note() const { return note_; }
  // Whether plans made from now on (of at most kTimedRows rows) have their
  // algorithm timed: on for the products of decode steps, whose row counts
  // are a few graph buckets, off for prefill chunks, whose counts vary from
  // step to step (each new one would be timed in the middle of serving).
  void set_timing(bool on) { timing_ = on; }
  Status Run(const uint16_t* x, const uint16_t* w, float* y, int m, int n, int k, bool accumulate) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    BRAID_ASSIGN_OR_RETURN(const Plan* plan,
                           PlanFor(&plans_, desc_, CUDA_R_16BF, {w, x, beta, m, n, k}));
    const Plan& p = *plan;
    BLAS_TRY(cublasLtMatmul(lt_, desc_, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                            workspace_.get(), workspace_.size(), stream_));
    return Status::Ok();
  }

 private:
  struct Plan {
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ready = false;  // false: cuBLASLt has no algorithm for it
    bool timed = false;  // its algorithm chosen by timing the candidates
  };
  using Plans = std::map<std::tuple<int, int, int>, Plan>;
  // A matmul description for y = x w^T: fp32 compute and scale, W transposed.
  Status NewDesc(cublasLtMatmulDesc_t* desc) {
    BLAS_TRY(cublasLtMatmulDescCreate(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    BLAS_TRY(cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    BLAS_TRY(cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    return Status::Ok();
  }
  // A product as asked for: its operands (W, X), beta and shape.
  struct Product {
    const void* w;
    const void* x;
    float beta;
    int m, n, k;
  };
  // The plan for m x n x k with operands of `type` (made and its algorithm
  // chosen on first use, kept found or not); Unsupported when cuBLASLt has
  // no algorithm for it.
  Result<const Plan*> PlanFor(Plans* plans, cublasLtMatmulDesc_t desc, cudaDataType type,
                              const Product& q) {
    const auto key = std::make_tuple(q.m, q.n, q.k);
    auto it = plans->find(key);
    if (it == plans->end()) {
      Plan p;
      BLAS_TRY(cublasLtMatrixLayoutCreate(&p.a, type, q.k, q.n, q.k));
      BLAS_TRY(cublasLtMatrixLayoutCreate(&p.b, type, q.k, q.m, q.k));
      BLAS_TRY(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, q.n, q.m, q.n));
      it = plans->emplace(key, p).first;  // destroyed with the others, found or not
      BRAID_RETURN_IF_ERROR(Choose(desc, q, &it->second));
    } else if (it->second.ready && !it->second.timed && Timing(q)) {
      BRAID_RETURN_IF_ERROR(Choose(desc, q, &it->second));  // first made outside a decode step
    }
    if (!it->second.ready)
      return Status::Unsupported(std::string("cuBLASLt has no ") +
                                 (type == CUDA_R_8F_E4M3 ? "FP8" : "bf16") + " GEMM for " +
                                 std::to_string(q.m) + "x" + std::to_string(q.n) + "x" +
                                 std::to_string(q.k));
    return &it->second;
  }
  // Whether a new plan for q is to be timed: asked for (set_timing), more
  // rows than the matrix-vector kernel takes (which is timed against the
  // heuristic's first) and at most kTimedRows, and not while a graph is
  // being captured.
  bool Timing(const Product& q) const {
    if (!timing_ || q.m <= kc::kGemvMaxRows || q.m > kTimedRows) return false;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream_, &capturing);
    return capturing == cudaStreamCaptureStatusNone;
  }
  // The heuristic's first algorithm for the plan's layouts under `desc`;
  // when Timing(q), the heuristic's first kCandidates are timed on this
  // device instead, on the product's own operands into a scratch output,
  // and the fastest is kept: at 128-256 rows the heuristic's first choice
  // can be 10-20% slower than another.
  Status Choose(cublasLtMatmulDesc_t desc, const Product& q, Plan* p) {
    cublasLtMatmulPreference_t pref;
    BLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = workspace_.size();
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    const bool timed = Timing(q);
    cublasLtMatmulHeuristicResult_t results[kCandidates]{};
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
        lt_, desc, p->a, p->b, p->c, p->c, pref, timed ? kCandidates : 1, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p->ready = s == CUBLAS_STATUS_SUCCESS && found > 0;
    if (!p->ready) return Status::Ok();
    p->algo = results[0].algo;
    p->timed = timed;
    if (timed && found > 1) TimeCandidates(desc, q, p, results, found);
    return Status::Ok();
  }
  // Each candidate run once, then timed three times (the least kept), each
  // time from a cold L2.
  void TimeCandidates(cublasLtMatmulDesc_t desc, const Product& q, Plan* p,
                      const cublasLtMatmulHeuristicResult_t* results, int found) {
    // The stream's work done before anything here allocates (as GemvChoice
    // explains: under tensor parallelism an all-reduce may still wait here).
    if (cudaStreamSynchronize(stream_) != cudaSuccess) return;
    DeviceArray<float> out;
    if (!out.Allocate(static_cast<size_t>(q.m) * q.n).ok()) return;
    const L2Flush flush;
    const float alpha = 1.0f;
    float first = 0, best = 1e30f;
    int chosen = 0;
    for (int i = 0; i < found; ++i) {
      const float t = LeastMs(
          stream_, 1, 3,
          [&] {
            return cublasLtMatmul(lt_, desc, &alpha, q.w, p->a, q.x, p->b, &q.beta, out.get(), p->c,
                                  out.get(), p->c, &results[i].algo, workspace_.get(),
                                  workspace_.size(), stream_) == CUBLAS_STATUS_SUCCESS;
          },
          [&] { flush(stream_); });
      cudaGetLastError();  // a candidate that failed to launch is not reported again
      if (i == 0) first = t;
      if (t < best) best = t, chosen = i;
    }
    p->algo = results[chosen].algo;
    if (chosen > 0 && first < 1e30f) {
      char note[96];
      std::snprintf(note, sizeof note, "%s%dx%d rows %d: %.1f -> %.1f us",
                    note_.empty() ? "" : ", ", q.n, q.k, q.m, 1e3 * first, 1e3 * best);
      note_ += note;
    }
  }
  static constexpr int kTimedRows = 256;
  static constexpr int kCandidates = 24;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr, desc8_ = nullptr;
  Plans plans_, plans8_;
  DeviceArray<uint8_t> workspace_;
  std::string note_;
  bool timing_ = false;
};

// As CUDA_TRY, for calls whose failure the caller survives (the KV copies,
// page-locking): the error is cleared from the thread's last error too, so
// that the next kernel launch's check does not report it again.
#define CUDA_TRY_CLEAR(expr)        \
  do {                              \
    const cudaError_t e_ = (expr);  \
    if (e_ != cudaSuccess) {        \
      cudaGetLastError();           \
      return CudaStatus(e_, #expr); \
    }                               \
  } while (0)

// Whether the work recorded in `e` is done. "Not ready" is cleared from the
// thread's last error; another error counts as done (the next forward pass
// reports it).
bool Passed(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  cudaGetLastError();
  return r != cudaErrorNotReady;
}

// The KV pool of one GPU. K and V are [layer][block][kv_head][slot][head_dim]
// bf16, so one block of one layer is one contiguous piece.
//
// Copies to and from host memory (the lower KV tier) run on a stream of
// their own, in the order they are asked for, each after every forward pass
// enqueued before it on the backend's stream (an event recorded there). A
// forward pass waits for copies only where told to (WaitCopies: the next
// forward pass waits for that fence) or where it writes a block that a copy
// out still reads (OrderForward); other copies overlap it. Each copy has a
// start and an end event on the copy stream, kept by fence until its time is
// taken: a fence no longer kept is done.
class CudaKv final : public KvMemory {
 public:
  // One extra block past n_blocks takes the writes of padding tokens.
  // `compute` is the backend's stream, `compute_mu` the lock its forward
  // passes hold while they enqueue work there (graph captures included).
  // With n_slides > 0 the layers `sliding` marks keep n_slides slides (and
  // one for padding) instead of blocks (kv::BlockPool). Elements are
  // `cache`'s (bf16 or e4m3).
  static Result<std::unique_ptr<CudaKv>> Make(int device, cudaStream_t compute,
                                              std::mutex* compute_mu, int n_layer, int n_blocks,
                                              int n_slides, const std::vector<bool>& sliding,
                                              int block_size, int n_kv, int head_dim,
                                              kc::KvCache cache) {
    std::unique_ptr<CudaKv> kv(new CudaKv());
    kv->device_ = device;
    kv->compute_ = compute;
    kv->compute_mu_ = compute_mu;
    kv->n_layer_ = n_layer;
    kv->n_blocks_ = n_blocks;
    kv->n_slides_ = n_slides;
    kv->block_size_ = block_size;
    kv->cache_ = cache;
    kv->piece_bytes_ = static_cast<size_t>(block_size) * n_kv * head_dim * kc::KvCacheBytes(cache);
    kv->layer_bytes_ = static_cast<size_t>(n_blocks + 1) * kv->piece_bytes_;
    size_t total = 0;
    for (int i = 0; i < n_layer; ++i) {
      kv->base_.push_back(total);
      kv->slides_.push_back(n_slides > 0 && sliding[static_cast<size_t>(i)]);
      total +=
          static_cast<size_t>(kv->slides_.back() ? n_slides + 1 : n_blocks + 1) * kv->piece_bytes_;
    }
    BRAID_RETURN_IF_ERROR(kv->k_.Allocate(total));
    BRAID_RETURN_IF_ERROR(kv->v_.Allocate(total));
    CUDA_TRY(cudaStreamCreateWithFlags(&kv->copy_, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&kv->computed_, cudaEventDisableTiming));
    kv->out_fence_.assign(static_cast<size_t>(n_blocks) + 1, 0);
    // A strided copy's pitch (one layer's K or V) has a limit (2 GiB).
    int max_pitch = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device));
    kv->strided_ = kv->layer_bytes_ <= static_cast<size_t>(max_pitch);
    return kv;
  }
  ~CudaKv() override {
    cudaSetDevice(device_);
    if (copy_) cudaStreamSynchronize(copy_);  // the host memory may go next
    for (auto& [fence, c] : copies_) {
      cudaEventDestroy(c.start);
      cudaEventDestroy(c.end);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (computed_) cudaEventDestroy(computed_);
    if (copy_) cudaStreamDestroy(copy_);
  }
  int n_blocks() const override { return n_blocks_; }
  int n_slides() const override { return n_slides_; }
  int block_size() const override { return block_size_; }
  size_t bytes() const override { return 2 * k_.size(); }
  kc::KvCache cache() const { return cache_; }
  uint8_t* k(int layer) const { return k_.get() + base_[static_cast<size_t>(layer)]; }
  uint8_t* v(int layer) const { return v_.get() + base_[static_cast<size_t>(layer)]; }
  // Whether layer `layer` is kept in slides (read through slide tables).
  bool InSlides(int layer) const { return slides_[static_cast<size_t>(layer)]; }
  int trash_block() const { return n_blocks_; }
  int trash_slide() const { return n_slides_; }
  // Unique per allocation: graphs bake in the device addresses of one.
  uint64_t id() const { return id_; }

  // A block on the host: every layer's K piece, then every layer's V piece.
  size_t block_bytes() const override { return 2 * n_layer_ * piece_bytes_; }
  // Portable: one registration serves every GPU (tensor parallel ranks).
  Status RegisterHost(void* p, size_t bytes) override {
    CUDA_TRY_CLEAR(cudaSetDevice(device_));
    CUDA_TRY_CLEAR(cudaHostRegister(p, bytes, cudaHostRegisterPortable));
    return Status::Ok();
  }
  void UnregisterHost(void* p) override {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
  }
  Result<uint64_t> CopyOut(std::span<const int32_t> blocks,
                           std::span<uint8_t* const> dst) override {
    return Copy(blocks, dst.data(), true);
  }
  Result<uint64_t> CopyIn(std::span<const uint8_t* const> src,
                          std::span<const int32_t> blocks) override {
    return Copy(blocks, const_cast<uint8_t* const*>(src.data()), false);
  }
  // Copies run in order: waiting for the latest fence asked for covers the others.
  Status WaitCopies(uint64_t fence) override {
    std::lock_guard<std::mutex> lock(mu_);
    wait_ = std::max(wait_, fence);
    return Status::Ok();
  }
  bool CopiesDone(uint64_t fence) override {
    std::lock_guard<std::mutex> lock(mu_);
    return !Running(fence);
  }
  double TakeCopySeconds(uint64_t fence) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = copies_.find(fence);
    if (it == copies_.end()) return 0;
    if (!Passed(it->second.end)) return -1;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, it->second.start, it->second.end) != cudaSuccess) {
      cudaGetLastError();
      ms = 0;
    }
    Release(it);
    return ms * 1e-3;
  }

  // Before a forward pass enqueues anything on `stream`: it waits for the
  // copies WaitCopies asked for, and for copies out of the blocks it writes
  // (`slots`, n of them: block * block_size + offset) that are still running.
  Status OrderForward(cudaStream_t stream, const int32_t* slots, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t fence = std::exchange(wait_, 0);
    for (int t = 0; t < n; ++t) {
      if (slots[t] < 0) continue;
      uint64_t& out = out_fence_[static_cast<size_t>(slots[t] / block_size_)];
      if (out <= fence) continue;  // none, or waited for already
      if (Running(out))
        fence = out;
      else
        out = 0;
    }
    if (!Running(fence)) return Status::Ok();
    CUDA_TRY(cudaStreamWaitEvent(stream, copies_.at(fence).end, 0));
    return Status::Ok();
  }

 private:
  struct Timed {
    cudaEvent_t start = nullptr, end = nullptr;
  };
  // Fences kept before the oldest finished ones whose time nobody took are dropped.
  static constexpr size_t kKeptFences = 4096;

  CudaKv() {
    static std::atomic<uint64_t> next{1};
    id_ = next++;
  }
  // One block of one layer's K (half 0) or V (half 1).
  uint8_t* Piece(int half, int layer, int32_t block) const {
    return (half ? v(layer) : k(layer)) + static_cast<size_t>(block) * piece_bytes_;
  }
  // Whether `fence` is kept and its copy still runs (mu_ held).
  bool Running(uint64_t fence) {
    auto it = copies_.find(fence);
    return it != copies_.end() && !Passed(it->second.end);
  }
  void Release(std::map<uint64_t, Timed>::iterator it) {
    free_events_.push_back(it->second.start);
    free_events_.push_back(it->second.end);
    copies_.erase(it);
  }
  Result<cudaEvent_t> NewEvent() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CUDA_TRY_CLEAR(cudaEventCreate(&e));
    return e;
  }

  // Enqueues the copies of `blocks` to (`out`) or from host[i], between a
  // start and an end event, after the forward passes enqueued so far.
  Result<uint64_t> Copy(std::span<const int32_t> blocks, uint8_t* const* host, bool out) {
    if (n_slides_ > 0)  // a block's sliding layers lie in a slide this memory cannot name
      return Status::Unsupported("KV memory with slides copies no blocks to or from the host");
    for (int32_t b : blocks)
      if (b < 0 || b >= n_blocks_)
        return Status::InvalidArgument("KV copy of block " + std::to_string(b) + " of " +
                                       std::to_string(n_blocks_));
    // No forward pass is enqueueing meanwhile: the event marks the end of
    // the last one, and none is capturing a graph on that stream.
    std::lock_guard<std::mutex> compute_lock(*compute_mu_);
    std::lock_guard<std::mutex> lock(mu_);
    CUDA_TRY_CLEAR(cudaSetDevice(device_));
    Timed t;
    BRAID_ASSIGN_OR_RETURN(t.start, NewEvent());
    auto events = NewEvent();
    if (!events.ok()) {
      free_events_.push_back(t.start);
      return events.status();
    }
    t.end = *events;
    const Status st = Enqueue(blocks, host, out, t);
    if (!st.ok()) {
      // What was enqueued before the failure is done before the caller
      // takes its host memory back.
      if (cudaStreamSynchronize(copy_) != cudaSuccess) cudaGetLastError();
      free_events_.push_back(t.start);
      free_events_.push_back(t.end);
      return st;
    }
    const uint64_t fence = ++fence_;
    copies_.emplace(fence, t);
    if (out)
      for (int32_t b : blocks) out_fence_[static_cast<size_t>(b)] = fence;
    // Bounds what fences nobody takes keep: the oldest, once done, go.
    while (copies_.size() > kKeptFences && Passed(copies_.begin()->second.end))
      Release(copies_.begin());
    return fence;
  }
  Status Enqueue(std::span<const int32_t> blocks, uint8_t* const* host, bool out, Timed t) {
    CUDA_TRY_CLEAR(cudaEventRecord(computed_, compute_));
    CUDA_TRY_CLEAR(cudaStreamWaitEvent(copy_, computed_, 0));
    CUDA_TRY_CLEAR(cudaEventRecord(t.start, copy_));
    if (strided_) {
      // Per block, K then V: n_layer rows of one piece, a layer apart on the
      // device and packed on the host.
      const size_t piece = piece_bytes_, layer_bytes = layer_bytes_;
      for (size_t i = 0; i < blocks.size(); ++i)
        for (int half = 0; half < 2; ++half) {
          uint8_t* dev = (half ? v_ : k_).get() + static_cast<size_t>(blocks[i]) * piece_bytes_;
          uint8_t* h = host[i] + static_cast<size_t>(half) * n_layer_ * piece;
          if (out)
            CUDA_TRY_CLEAR(cudaMemcpy2DAsync(h, piece, dev, layer_bytes, piece, n_layer_,
                                             cudaMemcpyDeviceToHost, copy_));
          else
            CUDA_TRY_CLEAR(cudaMemcpy2DAsync(dev, layer_bytes, h, piece, piece, n_layer_,
                                             cudaMemcpyHostToDevice, copy_));
        }
    } else {
      // Layers too far apart for a strided copy: one copy per piece.
      const size_t piece = piece_bytes_;
      for (size_t i = 0; i < blocks.size(); ++i)
        for (int half = 0; half < 2; ++half)
          for (int layer = 0; layer < n_layer_; ++layer) {
            uint8_t* dev = Piece(half, layer, blocks[i]);
            uint8_t* h = host[i] + (static_cast<size_t>(half) * n_layer_ + layer) * piece;
            CUDA_TRY_CLEAR(cudaMemcpyAsync(out ? h : dev, out ? dev : h, piece,
                                           out ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                           copy_));
          }
    }
    CUDA_TRY_CLEAR(cudaEventRecord(t.end, copy_));
    return Status::Ok();
  }
  uint64_t id_ = 0;
  int device_ = 0;
  int n_layer_ = 0, n_blocks_ = 0, n_slides_ = 0, block_size_ = 0;
  kc::KvCache cache_ = kc::KvCache::kBf16;
  size_t piece_bytes_ = 0;    // of one block of one layer's K (or V)
  size_t layer_bytes_ = 0;    // of one layer kept in blocks
  std::vector<size_t> base_;  // per layer: where its K (or V) starts, in bytes
  std::vector<bool> slides_;  // per layer: kept in slides
  DeviceArray<uint8_t> k_, v_;
  bool strided_ = true;  // else one copy per piece

  cudaStream_t compute_ = nullptr;  // the backend's
  std::mutex* compute_mu_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t computed_ = nullptr;  // the forward passes before a copy
  std::mutex mu_;                   // what follows
  uint64_t fence_ = 0;              // the last one given
  std::map<uint64_t, Timed> copies_;
  std::vector<cudaEvent_t> free_events_;
  uint64_t wait_ = 0;                // the next forward pass waits for this fence
  std::vector<uint64_t> out_fence_;  // per block: its last copy out's fence, or 0
};

// A weight matrix [rows, cols] as the kernels read it: bf16, or e4m3 with a
// scale per row.
struct Weight {
  const uint16_t* bf16 = nullptr;
  const uint8_t* fp8 = nullptr;
  const float* scale = nullptr;
};

// A layer matrix in device memory: bf16, or (FP8 weights) uploaded as bf16,
// then quantized per row and the bf16 copy let go.
struct GpuMatrix {
  DeviceArray<uint16_t> bf16;
  DeviceArray<uint8_t> fp8;
  DeviceArray<float> scale;
  Weight view() const { return {bf16.get(), fp8.get(), scale.get()}; }
};

struct GpuLayer {
  DeviceArray<float> attn_norm, ffn_norm, bqkv;
  DeviceArray<float> q_norm, k_norm;                 // the qk_norm op's
  DeviceArray<float> post_attn_norm, post_ffn_norm;  // post_norm ops'
  GpuMatrix wqkv, wo, wgu, wdown;
  // Where the layer keeps the norm weight of `role` (nullptr: no norm's).
  DeviceArray<float>* Norm(TensorRole role) {
    switch (role) {
      case TensorRole::kAttnNorm:
        return &attn_norm;
      case TensorRole::kFfnNorm:
        return &ffn_norm;
      case TensorRole::kAttnQNorm:
        return &q_norm;
      case TensorRole::kAttnKNorm:
        return &k_norm;
      case TensorRole::kPostAttnNorm:
        return &post_attn_norm;
      case TensorRole::kPostFfnNorm:
        return &post_ffn_norm;
      default:
        return nullptr;
    }
  }
};

// The runs of the block's ops (block.h) this backend executes as one step.
enum StepId { kStepNormQkv, kStepAttention, kStepWo, kStepNormGateUp, kStepDown };
constexpr StepKind kSteps[] = {
    {kStepNormQkv, runs::kNormQkv},
    {kStepAttention, runs::kRopeAttention},
    {kStepAttention, runs::kQkNormRopeAttention},
    {kStepWo, runs::kWoAdd},
    {kStepWo, runs::kWoPostNormAdd},
    {kStepNormGateUp, runs::kNormGateUp},
    {kStepDown, runs::kDownAdd},
    {kStepDown, runs::kDownPostNormAdd},
};
Result<std::vector<PlannedStep>> PlanSteps(const ModelConfig& c) {
  return PlanBlock(c.block, kSteps, ArchName(c.arch), "the CUDA backend");
}

// Batch sizes that decode graphs are captured for.
constexpr int kGraphBuckets[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256};
constexpr int kMaxGraphBatch = 256;
constexpr int kMaxChunk = 2048;
// Segments of at least this many tokens take the GEMM attention path.
constexpr int kPrefillGemmMin = 16;
// Bytes of scores and probabilities one prefill attention pass may use.
constexpr size_t kScoreBytes = size_t{512} << 20;
constexpr size_t kStagingBytes = size_t{64} << 20;

// A block of a [rows, cols] matrix: rows [row0, row0 + rows), columns
// [col0, col0 + cols); -1 for all. A vector's elements are its columns.
struct Slice {
  int64_t row0 = 0, rows = -1, col0 = 0, cols = -1;
};

// What a forward pass returns per logits row (host memory; at most one):
// the logits, the argmax's id or key (kc::ArgmaxRows), or the k largest.
struct Outputs {
  float* logits = nullptr;
  int32_t* ids = nullptr;
  uint64_t* keys = nullptr;
  int k = 0;  // 0: not asked for
  int32_t* topk_ids = nullptr;
  float* topk_values = nullptr;
};

class CudaBackend final : public CudaRank {
 public:
  ~CudaBackend() override {
    cudaSetDevice(device_);  // the members' device memory and handles are this device's
    for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  static Result<std::unique_ptr<CudaBackend>> Open(const ModelFile& file,
                                                   const ModelOptions& options, int device,
                                                   int context, Collective* group) {
    const ModelConfig& c = file.config();
    // The ops' features this backend implements (family.h), and the model's
    // block in its steps.
    static constexpr std::string_view kOps[] = {"qkv_bias",   "gelu_tanh",      "embed_scale",
                                                "attn_scale", "sliding_window", "rope_llama3"};
    BRAID_RETURN_IF_ERROR(CheckOps(c, context, kOps, "the CUDA backend"));
    BRAID_RETURN_IF_ERROR(PlanCudaBlock(c));
    if (options.cpu.kv_cache != CpuOptions::KvCache::kF16)
      return Status::Unsupported(
          "the CUDA backend keeps its KV cache in bf16 (--kv f16, the default) or e4m3 (--kv "
          "fp8); q8 and f32 are the CPU's");
    const int world = group ? group->size() : 1;
    if (c.n_head_kv % world != 0 || c.n_ff % (8 * world) != 0)
      return Status::Unsupported(
          "tensor parallelism over " + std::to_string(world) +
          " GPUs splits the KV heads and the MLP columns evenly; this model has " +
          std::to_string(c.n_head_kv) + " KV heads and " + std::to_string(c.n_ff) +
          " MLP columns (the KV heads must be a multiple of the GPUs, the columns of 8 per GPU)");
    if (VocabSlice(c.n_vocab, world, world - 1).second < 1)
      return Status::Unsupported("tensor parallelism over " + std::to_string(world) +
                                 " GPUs splits the output head's " + std::to_string(c.n_vocab) +
                                 " rows in slices of " + std::to_string(kVocabSliceAlign) +
                                 " or more; there are too few for that many GPUs");
    std::unique_ptr<CudaBackend> b(new CudaBackend(c, group));
    BRAID_RETURN_IF_ERROR(b->Init(file, options, device, context));
    return b;
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  int n_vocab() const override { return c_.n_vocab; }
  int max_chunk() const override { return kMaxChunk; }
  // A step of 1,024 tokens keeps a mixed step of the 8B shape (a prefill
  // chunk beside 200 decodes) near 40 ms; every CUDA graph bucket may decode
  // at once; the pool takes nearly all the memory the weights leave.
  ServingDefaults serving_defaults() const override { return {1024, kMaxGraphBatch, 0.9}; }
  size_t KvBlockBytes(int block_size) const override {
    return size_t{2} * c_.n_layer * block_size * c_.n_head_kv * c_.head_dim *
           kc::KvCacheBytes(kv_cache_);
  }
  uint64_t KvMemoryAvailable() const override {
    size_t free = 0, total = 0;
    cudaSetDevice(device_);
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    const size_t reserve = size_t{1} << 30;  // graphs, cuBLAS and the driver's own
    return free > reserve ? free - reserve : 0;
  }
  Result<std::unique_ptr<KvMemory>> AllocateKv(int n_blocks, int block_size) override {
    return AllocateSlidedKv(n_blocks, 0, block_size);
  }
  // A hybrid model's sliding layers' share of a block (Gemma 3).
  size_t KvSlideBytes(int block_size) const override {
    return KvBlockBytes(block_size) / c_.n_layer * c_.PartlySlidingLayers();
  }
  Result<std::unique_ptr<KvMemory>> AllocateSlidedKv(int n_blocks, int n_slides,
                                                     int block_size) override {
    if (n_blocks < 1 || block_size < 1 || n_slides < 0)
      return Status::InvalidArgument("KV memory needs at least one block of one slot, got " +
                                     std::to_string(n_blocks) + " blocks of " +
                                     std::to_string(block_size));
    if (n_slides > 0 && KvSlideBytes(block_size) == 0)
      return Status::InvalidArgument("slides are for models whose layers partly slide");
    std::vector<bool> sliding;
    for (int i = 0; i < c_.n_layer; ++i) sliding.push_back(c_.Sliding(i));
    std::lock_guard<std::mutex> lock(mu_);
    CUDA_TRY(cudaSetDevice(device_));
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<CudaKv> kv,
                           CudaKv::Make(device_, stream_, &mu_, c_.n_layer, n_blocks, n_slides,
                                        sliding, block_size, c_.n_head_kv, c_.head_dim, kv_cache_));
    return std::unique_ptr<KvMemory>(std::move(kv));
  }
  Status Forward(std::span<const BatchSegment> batch, KvMemory& kv, float* logits) override {
    return Run(batch, kv, {.logits = logits});
  }
  Status ForwardArgmax(std::span<const BatchSegment> batch, KvMemory& kv, int32_t* ids) override {
    return Run(batch, kv, {.ids = ids});
  }
  Status ForwardArgmaxKeys(std::span<const BatchSegment> batch, KvMemory& kv,
                           uint64_t* keys) override {
    return Run(batch, kv, {.keys = keys});
  }
  Status ForwardTopK(std::span<const BatchSegment> batch, KvMemory& kv, int k, int32_t* ids,
                     float* values) override {
    if (k < 1 || k > std::min(kMaxTopK, head_rows_))
      return Status::InvalidArgument("top-k of logits rows needs k in [1, " +
                                     std::to_string(std::min(kMaxTopK, head_rows_)) + "], got " +
                                     std::to_string(k));
    return Run(batch, kv, {.k = k, .topk_ids = ids, .topk_values = values});
  }
  int vocab_begin() const override { return vocab0_; }
  int vocab_end() const override { return vocab0_ + head_rows_; }
  // One decode step at each graph bucket up to max_batch, every token at
  // position 0 of the trash block (which only padding uses).
  Status Prepare(KvMemory& kv_memory, int max_batch) override {
    auto& kv = static_cast<CudaKv&>(kv_memory);
    const int32_t table[1] = {kv.trash_block()}, slides[1] = {kv.trash_slide()};
    const int32_t token = 0;
    std::vector<BatchSegment> batch;
    std::vector<int32_t> ids(kMaxGraphBatch);
    for (int b : kGraphBuckets) {
      if (b > std::max(1, max_batch)) break;
      BatchSegment seg;
      seg.tokens = &token;
      seg.n_tokens = 1;
      seg.pos0 = 0;
      seg.block_table = table;
      if (kv.n_slides() > 0) seg.slide_table = slides;
      seg.logits_from = 0;
      batch.assign(b, seg);
      BRAID_RETURN_IF_ERROR(Run(batch, kv, {.ids = ids.data()}));
    }
    return Status::Ok();
  }
  void CascadeCounts(uint64_t* passes, uint64_t* tokens) const override {
    *passes = cascade_passes_;
    *tokens = cascade_tokens_;
  }
  void Describe(ModelInfo* info) const override {
    info->isa =
        "cuda " + device_name_ +
        (fp8_ ? ", fp8 (e4m3) layer weights with a scale per row (an f16 "
                "tensor-core matrix-vector kernel up to 16 rows), bf16 output head"
              : ", bf16 weights") +
        ", cuBLASLt GEMMs" +
        (kv_cache_ == kc::KvCache::kE4m3 ? ", fp8 (e4m3) KV, read as fp16" : ", bf16 KV") +
        ", paged split-K decode attention" +
        (use_graphs_ ? ", CUDA graphs for decode" : ", decode steps eager (BRAID_CUDA_GRAPHS=0)");
    if (layers_kernel_) info->isa += ", one token's layers in one persistent launch";
    if (!layers_refusal_.empty()) info->isa += "; BRAID_CUDA_LAYERS=1 refused: " + layers_refusal_;
    if (!fp8_gemm_note_.empty()) info->isa += "; " + fp8_gemm_note_;
    if (!gemv_note_.empty()) info->isa += "; few-row products measured: " + gemv_note_;
    if (!gemm_.note().empty())
      info->isa += "; cuBLASLt algorithms timed, the heuristic's first beaten: " + gemm_.note();
    info->threads = 1;
    info->bytes_per_token = bytes_per_token_;
    info->decode_stages.clear();
    info->stream.clear();
  }

 private:
  // This rank's share of the model: its heads, KV heads and MLP columns.
  static ModelConfig Share(const ModelConfig& c, int world) {
    ModelConfig s = c;
    s.n_head /= world;
    s.n_head_kv /= world;
    s.n_ff /= world;
    return s;
  }
  CudaBackend(const ModelConfig& c, Collective* group)
      : full_(c),
        c_(Share(c, group ? group->size() : 1)),
        group_(group),
        rank_(group ? group->rank() : 0) {
    std::tie(vocab0_, head_rows_) = VocabSlice(c.n_vocab, group ? group->size() : 1, rank_);
  }
  // Rank `rank`'s rows of an output head of `n_vocab` rows split over
  // `world` ranks (first, count): equal slices in multiples of
  // kVocabSliceAlign, the last one what is left (possibly none).
  static std::pair<int, int> VocabSlice(int n_vocab, int world, int rank) {
    if (world == 1) return {0, n_vocab};
    const int per =
        (n_vocab + world * kVocabSliceAlign - 1) / (world * kVocabSliceAlign) * kVocabSliceAlign;
    const int first = std::min(n_vocab, rank * per);
    return {first, std::min(n_vocab, first + per) - first};
  }
  Status Init(const ModelFile& file, const ModelOptions& options, int device, int context);
  Status LoadWeights(const ModelFile& file);
  // Uploads block `s` of `t` (any file type) as bf16 at dst, its row r at
  // dst + r * stride (stride 0: the block's columns); or as fp32 when
  // dst_f32 is set (norms, biases).
  Status Upload(const TensorInfo& t, uint16_t* dst, float* dst_f32, int64_t stride = 0,
                Slice s = {});
  // A norm's weight vector into `dst` (allocated here), with the model's
  // norm_offset added to every element.
  Status UploadNorm(const TensorInfo& t, DeviceArray<float>* dst);
  // After a product whose rows were split over the ranks (Wo, down): the
  // ranks' partial products at p[0, n) (the residual x_, or a branch's
  // output before its post norm) become their sum on every rank.
  Status ReduceSum(float* p, size_t n);
  // x_ += the product of a layer's branch, Wo or down (x: its input, k wide),
  // normalized first with post_norm where given (a post_norm op).
  Status AddBranch(const uint16_t* x, const Weight& w, int m, int k, const float* post_norm);
  // With FP8 weights: m's e4m3 rows and scales, then its bf16 copy let go.
  Status Quantize(GpuMatrix* m, int64_t rows, int64_t cols);
  Status Gemm(const uint16_t* x, const uint16_t* w, float* y, int m, int n, int k,
              bool accumulate) {
    return gemm_.Run(x, w, y, m, n, k, accumulate);
  }
  // Forward, returning `out` of the head's rows.
  Status Run(std::span<const BatchSegment> batch, KvMemory& kv, Outputs out);
  // y (+)= x w^T for m rows, x bf16 or, with `norm`, fp32 rows put through
  // RMSNorm first: the matrix-vector kernel for a few rows (the norm fused
  // in), else cuBLASLt. With `gated`, w holds gate and up rows interleaved
  // and the result is act_ = bf16(act(gate) * up) [m, n / 2] (y: scratch).
  // With `rope` (a layer's Q, K and V rows), the matrix-vector kernel may
  // take RoPE and the K/V store behind (rope's RopeStoreKv then is not to
  // run): *rope_fused says whether it did.
  Status Project(const void* x, const float* norm, const Weight& w, float* y, int m, int n, int k,
                 bool accumulate, bool gated = false, const kc::RopeKvArgs* rope = nullptr,
                 bool* rope_fused = nullptr);
  // How the matrix-vector kernel runs a shape: 16-byte pieces in flight per
  // lane (4 or 8; 0: cuBLASLt instead) and warps to a row (1, 2 or 4).
  struct GemvPlan {
    int depth = 0;
    int split = 1;
  };
  GemvPlan GemvChoice(int n, int k, int m, bool fp8 = false);
  // Project with FP8 weights: for one or two rows the matrix-vector kernel
  // on e4m3 weights (CUDA cores, x as it is); else x's rows quantized to
  // e4m3, then the FP8 tensor-core matrix-vector kernel up to
  // kGemvFp8MaxRows rows, or cuBLASLt's FP8 GEMM; where it has none, the
  // weight dequantized to bf16 for the bf16 GEMM.
  Status ProjectFp8(const void* x, const float* norm, const Weight& w, float* y, int m, int n,
                    int k, bool accumulate, bool gated);
  // The matrix-vector kernel (bf16 weights, or e4m3 on CUDA cores): x bf16,
  // or fp32 rows normalized with `norm` first; with `gated`, the gate into
  // act_ instead of y.
  Status RunGemv(const void* x, const float* norm, const Weight& w, float* y, int m, int n, int k,
                 GemvPlan plan, bool accumulate, bool gated, const kc::RopeKvArgs* rope = nullptr);
  // The FP8 tensor-core matrix-vector kernel over x8_ (quantized rows):
  // into y, or with `gated` the gate into act_.
  Status GemvFp8(const Weight& w, float* y, int m, int n, int k, bool accumulate, bool gated);
  // FP8 steps of at most this many rows take the CUDA-core kernel: it reads
  // x as it is (no quantizing kernel before it) and is faster there.
  static constexpr int kFp8CudaCoreRows = 2;
  Status EnsureInputs(size_t table_entries);
  // Enqueues the forward pass over the inputs in device memory.
  // With `argmax`, the keys of the logits rows' largest values into argmax_ too.
  Status Enqueue(CudaKv& kv, int n_tokens, int n_decode, int n_rows, int n_split, bool argmax);
  // Layer i's attention step: q/k norms (with `qk_norm`), RoPE and the K/V
  // stores (unless `rope_done`: the QKV product took them), then attention
  // (cascade, decode, prefill) into att_.
  Status Attend(CudaKv& kv, int i, int n_tokens, int n_decode, int n_split, bool qk_norm,
                bool rope_done);
  // Layer i's RoPE and K/V store of n_tokens rows of qkv_ into q_ and the cache.
  kc::RopeKvArgs RopeArgs(CudaKv& kv, int i, int n_tokens, bool qk_norm) const;
  Status PrefillAttention(CudaKv& kv, int layer, int row0, int n, int pos0, int seq);
  // The positions layer `layer` attends back (its sliding window), or 0.
  int Window(int layer) const { return c_.Sliding(layer) ? c_.sliding_window : 0; }
  int SplitFor(int n_decode) const;

  struct Segment {  // a prefill segment (GEMM attention)
    int row0, n, pos0, seq;
  };
  // Cascade attention: decode tokens whose sequences share their first
  // `keys` positions (the same KV blocks, as the radix cache gives them)
  // attend those once for the group (on tensor cores, or through GEMMs),
  // and their own keys after with the decode kernel; the ranges merge by
  // log-sum-exp.
  struct CascadeGroup {
    int off, m, keys, seq;  // members' entries [off, off + m) of kCascade*; seq: a member's table
  };
  // Finds the groups of this batch (decode tokens only) into groups_ and the
  // kKeyStart / kCascadeRows / kCascadeIndex regions, and CascadeAttention's
  // work. For a step replayed as a graph of `graph_batch` tokens (0: eager)
  // the count of key ranges and of work units depend on that batch size
  // alone (the units past this step's marked idle), so one graph per bucket
  // serves every cascade step.
  void FindCascadeGroups(std::span<const BatchSegment> batch, int bs, int graph_batch);

  const ModelConfig& full_;  // the whole model
  const ModelConfig c_;      // this rank's share (full_ when alone)
  Collective* group_;        // tensor parallelism: this rank's side of the group, or null
  const int rank_;
  // The output head's rows this rank holds: [vocab0_, vocab0_ + head_rows_).
  static constexpr int kVocabSliceAlign = 64;
  int vocab0_ = 0, head_rows_ = 0;
  int device_ = 0;
  std::string device_name_;
  int sms_ = 0;
  int context_ = 0;
  int q_dim_ = 0, kv_dim_ = 0, qkv_dim_ = 0;
  uint64_t bytes_per_token_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  LtGemm gemm_;

  // Weights.
  DeviceArray<uint16_t> embed_, lm_head_own_;
  const uint16_t* lm_head_ = nullptr;
  bool fp8_ = false;  // the layers' matrices are e4m3 (ModelOptions::Weights::kFp8)
  // The KV cache's elements (ModelOptions::kv_cache).
  kc::KvCache kv_cache_ = kc::KvCache::kBf16;
  // FP8 GEMMs: quantized activation rows and their scales; the bf16 copy of
  // a weight where cuBLASLt has no FP8 GEMM for its shape.
  DeviceArray<uint8_t> x8_;
  DeviceArray<float> x8_scale_;
  DeviceArray<uint16_t> dequant_;
  std::string fp8_gemm_note_;
  DeviceArray<float> out_norm_, inv_freq_, inv_freq_local_;  // local: sliding layers' RoPE
  std::vector<GpuLayer> layers_;

  // Activations, [kMaxChunk rows] each.
  DeviceArray<float> x_, qkv_, q_, gu_, logits_, partial_;
  DeviceArray<float> branch_;  // post norms: a branch's output before its norm
  DeviceArray<int32_t> counters_;
  DeviceArray<uint64_t> argmax_;          // the logits rows' argmax keys (kc::ArgmaxRows)
  DeviceArray<uint64_t> argmax_scratch_;  // kc::ArgmaxRows' scratch, zero between calls
  PinnedArray<uint64_t> argmax_host_;
  DeviceArray<int32_t> topk_ids_;
  PinnedArray<int32_t> topk_ids_host_;
  DeviceArray<float> topk_vals_;
  PinnedArray<float> topk_vals_host_;
  DeviceArray<uint16_t> xn_, att_, act_;
  // Prefill attention: gathered K/V and queries, scores, probabilities, outputs.
  DeviceArray<uint16_t> kc_, vc_, qh_, p_, oh_;
  DeviceArray<float> s_;

  // Inputs: host staging (pinned) and device copy with the same layout:
  // ids, pos, slot, tok_seq, decode list, logit rows [kMaxChunk + kMaxGraphBatch each],
  // seq_table [kMaxChunk + 1], ..., then packed block tables (with slides,
  // each segment's block table followed by its slide table).
  enum Region {
    kIds,
    kPos,
    kSlot,
    kTokSeq,
    kDecode,
    kRows,
    kSeqTable,
    kSlideSlot,      // with slides: per token, its slot in the sliding layers
    kSlideTable,     // with slides: per segment, where its slide table starts
    kKeyStart,       // per token: where its decode attention starts (cascade members)
    kCascadeRows,    // per group member: its query row
    kCascadeIndex,   // per group member: its index in the decode list
    kCascadeGroups,  // per group: members' offset, count, prefix keys, a member's segment
    kCascadeWork,    // per CascadeAttention thread block: group, row block, key range
    kRegions
  };
  static constexpr size_t kRegionCap = kMaxChunk + kMaxGraphBatch;
  size_t table_cap_ = 0;
  PinnedArray<int32_t> in_host_;
  DeviceArray<int32_t> in_dev_;
  int32_t* HostRegion(Region r) { return in_host_.get() + r * kRegionCap; }
  int32_t* DevRegion(Region r) const { return in_dev_.get() + r * kRegionCap; }
  int32_t* HostTables() { return in_host_.get() + kRegions * kRegionCap; }
  int32_t* DevTables() const { return in_dev_.get() + kRegions * kRegionCap; }
  PinnedArray<float> logits_host_;
  PinnedArray<uint8_t> staging_;

  std::vector<Segment> prefill_;  // of the batch being enqueued
  // Fusions into the matrix-vector kernel; BRAID_CUDA_UNFUSE=norm,swiglu
  // turns them off one by one, to measure what each is worth.
  bool fuse_norm_ = true, fuse_swiglu_ = true;
  // RoPE and the K/V store in the QKV matrix-vector product's epilogue
  // (BRAID_CUDA_FUSE=rope; off: measured no faster at batch 1).
  bool fuse_rope_ = false;
  kc::Gate gate_ = kc::Gate::kSilu;
  // Keys each lane group of the decode attention kernel loads at once:
  // 4, or BRAID_CUDA_ATTN_KEYS=1 to measure one.
  int attention_keys_ = 4;
  // Decode attention on tensor cores where the shape allows
  // (kc::DecodeAttentionArgs::tensor_cores), or with BRAID_CUDA_ATTN=simt
  // on CUDA cores, to measure the other.
  bool attention_tc_ = true;
  // The fewest keys a decode attention range takes
  // (kc::DecodeAttentionArgs::range_keys); BRAID_CUDA_RANGE_KEYS=1 splits
  // every context as widely as the batch allows, to measure what it costs.
  int attention_range_keys_ = kc::DecodeAttentionArgs{}.range_keys;
  // The most tokens a decode-attention segment of this pass holds
  // (kc::DecodeAttentionArgs::step_keys). With BRAID_CUDA_EARLY_KEYS=1 the
  // keys before (and a cascade group's prefix, CascadeAttentionArgs::
  // early_keys) are loaded before the kernels ahead finish; off by
  // default, as alternating rounds at batch 1 found it no faster.
  int step_keys_ = 0;
  bool early_keys_ = false;
  // Decode-only steps replay CUDA graphs; BRAID_CUDA_GRAPHS=0 runs them
  // eagerly, to measure what the graphs are worth.
  bool use_graphs_ = true;
  // A step of one decode token runs its layers as one persistent launch
  // (kc::DecodeLayers) with BRAID_CUDA_LAYERS=1, where the model allows
  // (layers_refusal_ says why not); off by default: measured slower than
  // one kernel a product (docs/benchmarks.md).
  bool layers_kernel_ = false;
  bool layers_tensor_cores_ = false;  // BRAID_CUDA_LAYERS=tc: its products on tensor cores
  std::string layers_refusal_;
  DeviceArray<kc::DecodeLayer> layer_table_;  // its layers, for layer_table_kv_'s KV memory
  uint64_t layer_table_kv_ = 0;
  DeviceArray<int32_t> layer_counters_;
  Status EnsureLayerTable(CudaKv& kv);
  int cascade_slots_ = 1;  // CascadeAttention blocks the device holds at once
  // Cascade attention for groups of at least kCascadeMin* (on; BRAID_CUDA_CASCADE=0 off).
  bool cascade_ = true;
  static constexpr int kCascadeMinMembers = 4, kCascadeMinKeys = 256;
  std::vector<CascadeGroup> groups_;  // of the batch being enqueued
  std::atomic<uint64_t> cascade_passes_{0}, cascade_tokens_{0};
  // The groups' prefix ranges (kc::CascadeAttention): this step's work
  // units and key ranges per prefix.
  DeviceArray<float> cascade_ranges_;
  int cascade_work_ = 0, cascade_ranges_n_ = 1;
  static constexpr size_t kCascadeRangePairs = 4096;  // (decode token, key range) pairs
  // Per (n, k, probe rows): the matrix-vector kernel's plan, as measured.
  std::map<std::tuple<int, int, int>, GemvPlan> gemv_choice_;
  std::string gemv_note_;
  std::vector<PlannedStep> plan_;          // c_.block in this backend's steps
  std::map<int, cudaGraphExec_t> graphs_;  // by bucket * 17 + cascade key ranges (0: none)
  uint64_t graph_kv_ = 0;                  // the CudaKv::id() whose addresses the graphs bake in
  std::mutex mu_;
};

Status CudaBackend::Init(const ModelFile& file, const ModelOptions& options, int device,
                         int context) {
  const ModelConfig& c = c_;
  fp8_ = options.weights == ModelOptions::Weights::kFp8;
  if (options.kv_cache == ModelOptions::KvCache::kFp8) kv_cache_ = kc::KvCache::kE4m3;
  if (!kc::DecodeAttentionSupports(c.head_dim, c.n_head / std::max(1, c.n_head_kv)) ||
      c.n_head % c.n_head_kv != 0)
    return Status::Unsupported(
        "the CUDA backend supports head_dim 16, 32, 64, 128 or 256 with at most 8 "
        "query heads per KV head; this model has head_dim " +
        std::to_string(c.head_dim) + ", " + std::to_string(full_.n_head) + " heads and " +
        std::to_string(full_.n_head_kv) + " KV heads");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    return Status::Unsupported("no CUDA device is available");
  if (device < 0 || device >= count)
    return Status::InvalidArgument("cuda:" + std::to_string(device) + " does not exist (" +
                                   std::to_string(count) + " device(s))");
  device_ = device;
  context_ = context;
  CUDA_TRY(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 9)
    return Status::Unsupported(std::string("the CUDA backend is built for sm_90; ") + prop.name +
                               " is sm_" + std::to_string(prop.major * 10 + prop.minor));
  device_name_ = prop.name;
  sms_ = prop.multiProcessorCount;
  if (const char* off = std::getenv("BRAID_CUDA_UNFUSE")) {
    const std::string o = off;
    fuse_norm_ = o.find("norm") == std::string::npos;
    fuse_swiglu_ = o.find("swiglu") == std::string::npos;
  }
  if (const char* on = std::getenv("BRAID_CUDA_FUSE"))
    fuse_rope_ = std::string(on).find("rope") != std::string::npos;
  if (const char* keys = std::getenv("BRAID_CUDA_ATTN_KEYS")) {
    const std::string k = keys;
    attention_keys_ = k == "1" ? 1 : 4;
  }
  if (const char* attn = std::getenv("BRAID_CUDA_ATTN"))
    attention_tc_ = std::string(attn) != "simt";
  if (const char* graphs = std::getenv("BRAID_CUDA_GRAPHS"))
    use_graphs_ = std::string(graphs) != "0";
  if (const char* cascade = std::getenv("BRAID_CUDA_CASCADE"))
    cascade_ = std::string(cascade) != "0";
  if (const char* range = std::getenv("BRAID_CUDA_RANGE_KEYS"))
    attention_range_keys_ = std::max(1, std::atoi(range));
  if (const char* early = std::getenv("BRAID_CUDA_EARLY_KEYS"))
    early_keys_ = std::string(early) == "1";
  if (const char* layers = std::getenv("BRAID_CUDA_LAYERS")) {
    const std::string v = layers;
    layers_tensor_cores_ = v == "tc";
    layers_kernel_ = v == "1" || layers_tensor_cores_;
  }
  // A shared prefix is attended once per group for every layer alike; with
  // sliding layers it would be attended outside their windows.
  for (int i = 0; i < c.n_layer; ++i) cascade_ &= !c.Sliding(i);
  cascade_ &= kc::CascadeAttentionSupports(c.head_dim, c.n_head / std::max(1, c.n_head_kv), 16);
  if (cascade_) cascade_slots_ = sms_ * kc::CascadeAttentionBlocksPerSm(c.head_dim);
  BRAID_ASSIGN_OR_RETURN(plan_, PlanSteps(c));
  gate_ = c.GateActivation() == Activation::kGeluTanh ? kc::Gate::kGeluTanh : kc::Gate::kSilu;
  CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  BLAS_TRY(cublasCreate(&blas_));
  BLAS_TRY(cublasSetStream(blas_, stream_));
  BRAID_RETURN_IF_ERROR(gemm_.Init(stream_));

  // The buffers the ranks sum in place (the residual stream, a branch
  // before its post norm) from the collective where it has memory its
  // faster kernels need; first, while every rank is sure to be here (the
  // call is collective).
  const size_t T = kMaxChunk + kMaxGraphBatch;
  auto reduced = [&](DeviceArray<float>* a, size_t n) -> Status {
    if (void* p = group_ ? group_->ReduceBuffer(n * sizeof(float)) : nullptr) {
      a->Adopt(static_cast<float*>(p), n);
      return Status::Ok();
    }
    return a->Allocate(n);
  };
  BRAID_RETURN_IF_ERROR(reduced(&x_, T * c.n_embd));
  if (c.Has(Op::kPostNorm)) BRAID_RETURN_IF_ERROR(reduced(&branch_, T * c.n_embd));

  q_dim_ = c.n_head * c.head_dim;
  kv_dim_ = c.n_head_kv * c.head_dim;
  qkv_dim_ = q_dim_ + 2 * kv_dim_;
  BRAID_RETURN_IF_ERROR(LoadWeights(file));

  if (fp8_) {
    BRAID_RETURN_IF_ERROR(x8_.Allocate(T * std::max({c.n_embd, q_dim_, c.n_ff})));
    BRAID_RETURN_IF_ERROR(x8_scale_.Allocate(T));
  }
  BRAID_RETURN_IF_ERROR(xn_.Allocate(T * std::max(c.n_embd, q_dim_)));
  BRAID_RETURN_IF_ERROR(qkv_.Allocate(T * qkv_dim_));
  BRAID_RETURN_IF_ERROR(q_.Allocate(T * q_dim_));
  BRAID_RETURN_IF_ERROR(att_.Allocate(T * q_dim_));
  BRAID_RETURN_IF_ERROR(gu_.Allocate(T * 2 * c.n_ff));
  BRAID_RETURN_IF_ERROR(act_.Allocate(T * c.n_ff));
  BRAID_RETURN_IF_ERROR(logits_.Allocate(T * static_cast<size_t>(head_rows_)));
  BRAID_RETURN_IF_ERROR(logits_host_.Allocate(T * static_cast<size_t>(head_rows_)));
  BRAID_RETURN_IF_ERROR(argmax_.Allocate(T));
  BRAID_RETURN_IF_ERROR(argmax_scratch_.Allocate(2 * T));
  CUDA_TRY(cudaMemset(argmax_scratch_.get(), 0, argmax_scratch_.size() * sizeof(uint64_t)));
  BRAID_RETURN_IF_ERROR(argmax_host_.Allocate(T));
  BRAID_RETURN_IF_ERROR(topk_ids_.Allocate(T * kMaxTopK));
  BRAID_RETURN_IF_ERROR(topk_ids_host_.Allocate(T * kMaxTopK));
  BRAID_RETURN_IF_ERROR(topk_vals_.Allocate(T * kMaxTopK));
  BRAID_RETURN_IF_ERROR(topk_vals_host_.Allocate(T * kMaxTopK));
  // Split-K partials: at most 4096 (token, split) pairs.
  BRAID_RETURN_IF_ERROR(partial_.Allocate(size_t{4096} * c.n_head * (c.head_dim + 2)));
  BRAID_RETURN_IF_ERROR(counters_.Allocate(T * c.n_head_kv));
  CUDA_TRY(cudaMemset(counters_.get(), 0, counters_.size() * sizeof(int32_t)));
  BRAID_RETURN_IF_ERROR(kc_.Allocate(static_cast<size_t>(context) * kv_dim_));
  BRAID_RETURN_IF_ERROR(vc_.Allocate(static_cast<size_t>(context) * kv_dim_));
  BRAID_RETURN_IF_ERROR(qh_.Allocate(static_cast<size_t>(kMaxChunk) * q_dim_));
  BRAID_RETURN_IF_ERROR(oh_.Allocate(static_cast<size_t>(kMaxChunk) * q_dim_));
  BRAID_RETURN_IF_ERROR(s_.Allocate(kScoreBytes / 6 + context));
  BRAID_RETURN_IF_ERROR(p_.Allocate(kScoreBytes / 6 + context));
  BRAID_RETURN_IF_ERROR(
      cascade_ranges_.Allocate(std::max(T, kCascadeRangePairs) * c.n_head * (c.head_dim + 2)));
  BRAID_RETURN_IF_ERROR(EnsureInputs(size_t{4} * (context / 16 + 2) * 64));
  if (layers_kernel_) {
    // The persistent layers kernel covers the Llama block with bf16 weights, alone on its device.
    layers_refusal_ =
        kc::DecodeLayersRefusal(c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_rot, c.n_ff);
    if (fp8_) layers_refusal_ = "fp8 weights";
    if (group_) layers_refusal_ = "tensor parallelism";
    if (c.Has(Op::kQkNorm) || c.Has(Op::kPostNorm)) layers_refusal_ = "q/k or post norms";
    if (layers_[0].bqkv.get()) layers_refusal_ = "Q/K/V biases";
    for (int i = 0; i < c.n_layer; ++i)
      if (c.Sliding(i)) layers_refusal_ = "sliding windows";
    layers_kernel_ = layers_refusal_.empty();
    if (layers_kernel_) {
      const int n = kc::DecodeLayersCounters(c.n_layer, c.n_head_kv);
      BRAID_RETURN_IF_ERROR(layer_counters_.Allocate(n));
      CUDA_TRY(cudaMemset(layer_counters_.get(), 0, n * sizeof(int32_t)));
      BRAID_RETURN_IF_ERROR(layer_table_.Allocate(c.n_layer));
    }
  }
  for (bool local : {false, true}) {
    const std::vector<float> inv = RopeInverseFrequencies(c, local);
    DeviceArray<float>& d = local ? inv_freq_local_ : inv_freq_;
    BRAID_RETURN_IF_ERROR(d.Allocate(inv.size()));
    CUDA_TRY(cudaMemcpy(d.get(), inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  return Status::Ok();
}

Status CudaBackend::EnsureInputs(size_t table_entries) {
  if (table_entries <= table_cap_) return Status::Ok();
  table_cap_ = std::max(table_entries, 2 * table_cap_);
  const size_t n = kRegions * kRegionCap + table_cap_;
  BRAID_RETURN_IF_ERROR(in_host_.Allocate(n));
  BRAID_RETURN_IF_ERROR(in_dev_.Allocate(n));
  // Graphs captured with the old device pointers are stale.
  for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
  graphs_.clear();
  return Status::Ok();
}

Status CudaBackend::Upload(const TensorInfo& t, uint16_t* dst, float* dst_f32, int64_t stride,
                           Slice s) {
  const int64_t n = t.elements();
  const int64_t cols = t.shape.empty() ? 1 : t.shape[0];
  const int64_t rows = n / cols;
  if (s.rows < 0) s.rows = rows - s.row0;
  if (s.cols < 0) s.cols = cols - s.col0;
  if (s.row0 < 0 || s.col0 < 0 || s.row0 + s.rows > rows || s.col0 + s.cols > cols)
    return Status::Internal(t.name + ": block outside the matrix");
  if (dst_f32) {  // small vectors: convert on the host
    std::vector<float> f(n);
    kernels::DequantizeRow(t.type, t.data, f.data(), n);
    CUDA_TRY(
        cudaMemcpy(dst_f32, f.data() + s.col0, s.cols * sizeof(float), cudaMemcpyHostToDevice));
    return Status::Ok();
  }
  using kernels::DType;
  // The device converts these; the other GGUF types the CPU reads (q5_0 and
  // the K-quants q4_K and q6_K, as in Q4_K_M files) become fp32 rows on the
  // host first and go the fp32 way.
  const DType type = t.type;
  const bool on_host = type == DType::kQ5_0 || type == DType::kQ4_K || type == DType::kQ6_K;
  if (!on_host && type != DType::kBF16 && type != DType::kF16 && type != DType::kF32 &&
      type != DType::kQ4_0 && type != DType::kQ4_1 && type != DType::kQ8_0)
    return Status::Unsupported(t.name + " has type " + kernels::Info(type).name +
                               ", which the CUDA backend does not load (bf16, fp16, fp32, q4_0, "
                               "q4_1, q5_0, q8_0, q4_K and q6_K are converted to bf16)");
  const DType staged = on_host ? DType::kF32 : type;
  const size_t row_bytes = kernels::RowBytes(type, cols);       // in the file
  const size_t staged_bytes = kernels::RowBytes(staged, cols);  // in the staging buffer
  // Pieces of whole rows through two pinned halves of the staging buffer.
  const size_t half = kStagingBytes / 2;
  const int64_t rows_per = std::max<int64_t>(1, static_cast<int64_t>(half / staged_bytes));
  if (staged_bytes > half) return Status::Unsupported(t.name + ": rows too long to stage");
  const bool raw_bf16 = t.type == kernels::DType::kBF16;
  if (stride == 0) stride = s.cols;
  const size_t pitch = static_cast<size_t>(stride) * sizeof(uint16_t);
  const size_t width = static_cast<size_t>(s.cols) * sizeof(uint16_t);  // bytes of a block row
  // Converted rows go straight to dst only when they are the block's rows, packed.
  const bool direct = stride == cols && s.cols == cols;
  DeviceArray<uint8_t> raw;
  DeviceArray<float> f32;
  DeviceArray<uint16_t> bf16;  // converted rows on their way to strided places
  if (!raw_bf16) {
    BRAID_RETURN_IF_ERROR(raw.Allocate(half));
    BRAID_RETURN_IF_ERROR(f32.Allocate(static_cast<size_t>(rows_per) * cols));
    if (!direct) BRAID_RETURN_IF_ERROR(bf16.Allocate(static_cast<size_t>(rows_per) * cols));
  }
  cudaEvent_t done[2];
  CUDA_TRY(cudaEventCreateWithFlags(&done[0], cudaEventDisableTiming));
  CUDA_TRY(cudaEventCreateWithFlags(&done[1], cudaEventDisableTiming));
  Status st;
  int which = 0;
  for (int64_t r = 0; r < s.rows && st.ok(); r += rows_per, which ^= 1) {
    const int64_t m = std::min(rows_per, s.rows - r);
    const size_t bytes = static_cast<size_t>(m) * staged_bytes;
    uint8_t* stage = staging_.get() + which * half;
    if (cudaEventSynchronize(done[which]) != cudaSuccess) break;
    const uint8_t* src = static_cast<const uint8_t*>(t.data) + (s.row0 + r) * row_bytes;
    if (on_host)
      kernels::DequantizeRow(type, src, reinterpret_cast<float*>(stage), m * cols);
    else
      std::memcpy(stage, src, bytes);
    uint16_t* to = dst + r * stride;
    if (raw_bf16) {
      const cudaError_t e = cudaMemcpy2DAsync(to, pitch, stage + s.col0 * sizeof(uint16_t),
                                              row_bytes, width, m, cudaMemcpyHostToDevice, stream_);
      if (e != cudaSuccess) st = CudaStatus(e, "weight upload");
    } else {
      // Other types: convert on the device (one pass of the quantized bytes).
      const cudaError_t e =
          cudaMemcpyAsync(raw.get(), stage, bytes, cudaMemcpyHostToDevice, stream_);
      if (e != cudaSuccess) st = CudaStatus(e, "weight upload");
      int k = kc::DequantizeRow(staged, raw.get(), f32.get(), m * cols, stream_);
      uint16_t* out = direct ? to : bf16.get();
      if (k == 0) k = kc::F32ToBf16(f32.get(), m * cols, out, stream_);
      if (k != 0) st = KernelStatus(k, ("converting " + t.name).c_str());
      if (st.ok() && !direct) {
        const size_t rb = cols * sizeof(uint16_t);
        if (cudaMemcpy2DAsync(to, pitch, out + s.col0, rb, width, m, cudaMemcpyDeviceToDevice,
                              stream_) != cudaSuccess)
          st = Status::Internal("weight upload: strided copy");
      }
      // raw and f32 are reused by the next piece: finish this one first.
      if (st.ok() && cudaStreamSynchronize(stream_) != cudaSuccess) st = Status::Internal("sync");
    }
    if (st.ok()) cudaEventRecord(done[which], stream_);
  }
  if (st.ok()) {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) st = CudaStatus(e, "weight upload");
  }
  cudaEventDestroy(done[0]);
  cudaEventDestroy(done[1]);
  return st;
}

Status CudaBackend::UploadNorm(const TensorInfo& t, DeviceArray<float>* dst) {
  std::vector<float> f(t.elements());
  kernels::DequantizeRow(t.type, t.data, f.data(), static_cast<int64_t>(f.size()));
  for (float& v : f) v += c_.norm_offset;
  BRAID_RETURN_IF_ERROR(dst->Allocate(f.size()));
  CUDA_TRY(cudaMemcpy(dst->get(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
  return Status::Ok();
}

// The tensors of a layer this backend uploads, by role (the family table
// names them).
constexpr TensorRole kUploadedRoles[] = {
    TensorRole::kAttnNorm,   TensorRole::kWq,        TensorRole::kWk,
    TensorRole::kWv,         TensorRole::kBq,        TensorRole::kBk,
    TensorRole::kBv,         TensorRole::kWo,        TensorRole::kFfnNorm,
    TensorRole::kWGate,      TensorRole::kWUp,       TensorRole::kWDown,
    TensorRole::kAttnQNorm,  TensorRole::kAttnKNorm, TensorRole::kPostAttnNorm,
    TensorRole::kPostFfnNorm};

Status CudaBackend::LoadWeights(const ModelFile& file) {
  const ModelConfig& c = c_;
  const Family* family = FindFamily(c.arch);
  if (family == nullptr) return Status::Unsupported(file.path() + ": no such model family");
  // Every tensor the family's block reads is one this backend uploads: a
  // family with more (a new op's weights) is refused, never run without them.
  for (const TensorSpec& t : family->layer) {
    if (!t.read || !TensorRequired(t, c)) continue;
    if (std::find(std::begin(kUploadedRoles), std::end(kUploadedRoles), t.role) ==
        std::end(kUploadedRoles))
      return Status::Unsupported(file.path() + ": the CUDA backend cannot use tensor '" +
                                 TensorName(t, 0) + "'");
  }
  // A role's tensor of layer `layer` (-1: a global one), by the family's name.
  auto name = [&](TensorRole role, int layer) -> Result<std::string> {
    const TensorSpec* spec = FindTensorSpec(*family, role);
    if (spec == nullptr)
      return Status::Unsupported(file.path() + ": the " + std::string(family->gguf_arch) +
                                 " family has no tensor of a role this backend reads");
    return TensorName(*spec, layer);
  };
  auto find = [&](TensorRole role, int layer) -> Result<const TensorInfo*> {
    BRAID_ASSIGN_OR_RETURN(std::string n, name(role, layer));
    const TensorInfo* t = file.Find(n);
    if (!t) return Status::NotFound(file.path() + ": missing tensor '" + n + "'");
    return t;
  };
  BRAID_RETURN_IF_ERROR(staging_.Allocate(kStagingBytes));
  auto matrix_bytes = [&](int64_t rows, int64_t cols) {
    return static_cast<uint64_t>(rows) * cols * sizeof(uint16_t);
  };
  // A layer matrix: bf16, or e4m3 and a float scale per row.
  auto layer_bytes = [&](int64_t rows, int64_t cols) {
    return fp8_ ? static_cast<uint64_t>(rows) * (cols + sizeof(float)) : matrix_bytes(rows, cols);
  };
  if (fp8_ && (c.n_embd % 64 != 0 || q_dim_ % 64 != 0 || c.n_ff % 64 != 0 || qkv_dim_ % 8 != 0))
    return Status::Unsupported(
        "FP8 weights need the layers' inner dimensions to be multiples of 64 (n_embd " +
        std::to_string(c.n_embd) + ", heads x head_dim " + std::to_string(q_dim_) + ", MLP " +
        std::to_string(c.n_ff) + ") and Q, K and V's rows of 8 (" + std::to_string(qkv_dim_) + ")");
  BRAID_ASSIGN_OR_RETURN(const TensorInfo* embd, find(TensorRole::kTokenEmbd, -1));
  BRAID_RETURN_IF_ERROR(embed_.Allocate(static_cast<size_t>(c.n_vocab) * c.n_embd));
  BRAID_RETURN_IF_ERROR(Upload(*embd, embed_.get(), nullptr));
  BRAID_ASSIGN_OR_RETURN(std::string output, name(TensorRole::kOutput, -1));
  const TensorInfo* out = c.tied_embeddings ? nullptr : file.Find(output);
  // The head: this rank's slice of its rows.
  if (out) {
    BRAID_RETURN_IF_ERROR(lm_head_own_.Allocate(static_cast<size_t>(head_rows_) * c.n_embd));
    BRAID_RETURN_IF_ERROR(
        Upload(*out, lm_head_own_.get(), nullptr, 0, {vocab0_, head_rows_, 0, -1}));
    lm_head_ = lm_head_own_.get();
  } else {
    lm_head_ = embed_.get() + static_cast<size_t>(vocab0_) * c.n_embd;
  }
  bytes_per_token_ = matrix_bytes(head_rows_, c.n_embd);
  BRAID_ASSIGN_OR_RETURN(const TensorInfo* on, find(TensorRole::kOutputNorm, -1));
  BRAID_RETURN_IF_ERROR(UploadNorm(*on, &out_norm_));

  layers_ = std::vector<GpuLayer>(c.n_layer);
  const int64_t D = c.n_embd;
  for (int i = 0; i < c.n_layer; ++i) {
    GpuLayer& l = layers_[i];
    auto tensor = [&](TensorRole role) { return find(role, i); };
    // The norms the block reads (whole on every rank: q/k norms are per
    // head dimension).
    for (TensorRole role :
         {TensorRole::kAttnNorm, TensorRole::kFfnNorm, TensorRole::kAttnQNorm,
          TensorRole::kAttnKNorm, TensorRole::kPostAttnNorm, TensorRole::kPostFfnNorm}) {
      if (!BlockReads(c.block, role)) continue;
      BRAID_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(role));
      BRAID_RETURN_IF_ERROR(UploadNorm(*t, l.Norm(role)));
    }

    // Tensor parallelism: this rank's heads of Q, K and V (rows), its MLP
    // columns of gate and up (rows), and the matching columns of Wo and down.
    const int64_t q_rows = q_dim_, kv_rows = kv_dim_, ff = c.n_ff;
    const int64_t parts[3][2] = {
        {rank_ * q_rows, q_rows}, {rank_ * kv_rows, kv_rows}, {rank_ * kv_rows, kv_rows}};
    BRAID_RETURN_IF_ERROR(l.wqkv.bf16.Allocate(static_cast<size_t>(qkv_dim_) * D));
    int64_t row = 0, p = 0;
    for (TensorRole role : {TensorRole::kWq, TensorRole::kWk, TensorRole::kWv}) {
      BRAID_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(role));
      const Slice rows{parts[p][0], parts[p][1], 0, -1};
      BRAID_RETURN_IF_ERROR(Upload(*t, l.wqkv.bf16.get() + row * D, nullptr, 0, rows));
      row += parts[p++][1];
    }
    BRAID_RETURN_IF_ERROR(Quantize(&l.wqkv, qkv_dim_, D));
    if (c.qkv_bias) {
      BRAID_RETURN_IF_ERROR(l.bqkv.Allocate(qkv_dim_));
      int64_t at = 0;
      p = 0;
      for (TensorRole role : {TensorRole::kBq, TensorRole::kBk, TensorRole::kBv}) {
        BRAID_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(role));
        const Slice elems{0, -1, parts[p][0], parts[p][1]};
        BRAID_RETURN_IF_ERROR(Upload(*t, nullptr, l.bqkv.get() + at, 0, elems));
        at += parts[p++][1];
      }
    }
    BRAID_ASSIGN_OR_RETURN(const TensorInfo* wo, tensor(TensorRole::kWo));
    BRAID_RETURN_IF_ERROR(l.wo.bf16.Allocate(static_cast<size_t>(D) * q_dim_));
    BRAID_RETURN_IF_ERROR(
        Upload(*wo, l.wo.bf16.get(), nullptr, 0, {0, -1, rank_ * q_rows, q_rows}));
    BRAID_RETURN_IF_ERROR(Quantize(&l.wo, D, q_dim_));
    // Gate and up rows interleaved (gate j at row 2j, up j at 2j + 1), so
    // that one output pair of the product meets in one place for SwiGLU.
    const Slice ff_rows{rank_ * ff, ff, 0, -1};
    BRAID_RETURN_IF_ERROR(l.wgu.bf16.Allocate(static_cast<size_t>(2) * c.n_ff * D));
    BRAID_ASSIGN_OR_RETURN(const TensorInfo* wg, tensor(TensorRole::kWGate));
    BRAID_RETURN_IF_ERROR(Upload(*wg, l.wgu.bf16.get(), nullptr, 2 * D, ff_rows));
    BRAID_ASSIGN_OR_RETURN(const TensorInfo* wu, tensor(TensorRole::kWUp));
    BRAID_RETURN_IF_ERROR(Upload(*wu, l.wgu.bf16.get() + D, nullptr, 2 * D, ff_rows));
    BRAID_RETURN_IF_ERROR(Quantize(&l.wgu, 2 * c.n_ff, D));
    BRAID_ASSIGN_OR_RETURN(const TensorInfo* wd, tensor(TensorRole::kWDown));
    BRAID_RETURN_IF_ERROR(l.wdown.bf16.Allocate(static_cast<size_t>(D) * c.n_ff));
    BRAID_RETURN_IF_ERROR(Upload(*wd, l.wdown.bf16.get(), nullptr, 0, {0, -1, rank_ * ff, ff}));
    BRAID_RETURN_IF_ERROR(Quantize(&l.wdown, D, c.n_ff));
    bytes_per_token_ += layer_bytes(qkv_dim_, D) + layer_bytes(D, q_dim_) +
                        layer_bytes(2 * c.n_ff, D) + layer_bytes(D, c.n_ff);
  }
  return Status::Ok();
}

Status CudaBackend::Quantize(GpuMatrix* m, int64_t rows, int64_t cols) {
  if (!fp8_) return Status::Ok();
  BRAID_RETURN_IF_ERROR(m->fp8.Allocate(static_cast<size_t>(rows) * cols));
  BRAID_RETURN_IF_ERROR(m->scale.Allocate(rows));
  KERNEL_TRY(kc::QuantizeRowsFp8(m->bf16.get(), rows, static_cast<int>(cols), m->fp8.get(),
                                 m->scale.get(), stream_));
  CUDA_TRY(cudaStreamSynchronize(stream_));
  m->bf16.Free();
  return Status::Ok();
}

int CudaBackend::SplitFor(int n_decode) const {
  // Enough (token, KV head, range) blocks for two waves over the device, at
  // most 4096 (token, range) pairs. A token with a short context uses fewer
  // ranges (DecodeAttentionArgs::range_keys), so one split serves every
  // context and a graph keeps it.
  int split = std::max(1, 2 * sms_ / std::max(1, n_decode * c_.n_head_kv));
  split = std::min(split, std::max(1, 4096 / std::max(1, n_decode)));
  return std::min(split, 32);
}

Status CudaBackend::PrefillAttention(CudaKv& kv, int layer, int row0, int n, int pos0, int seq) {
  const int hd = c_.head_dim, H = c_.n_head, G = c_.n_head / c_.n_head_kv;
  if (pos0 + n > context_)
    return Status::OutOfRange(std::to_string(pos0 + n) + " positions exceed the context of " +
                              std::to_string(context_));
  // The keys from the first any row of the chunk sees: with a sliding
  // window, blocks before it may already be gone.
  const int window = Window(layer);
  const int key0 = window > 0 ? std::max(0, pos0 - window + 1) : 0;
  const int n_keys = pos0 + n - key0;
  const int32_t* table =
      DevTables() + HostRegion(kv.InSlides(layer) ? kSlideTable : kSeqTable)[seq];
  KERNEL_TRY(kc::GatherKv(kv.k(layer), kv.v(layer), kv.cache(), table, key0, n_keys, c_.n_head_kv,
                          hd, kv.block_size(), kc_.get(), vc_.get(), stream_));
  // Query rows per pass so that the scores fit the workspace.
  const size_t per_row = static_cast<size_t>(H) * n_keys;
  const int rows = static_cast<int>(std::max<size_t>(1, std::min<size_t>(n, s_.size() / per_row)));
  const float scale = c_.AttnScale(), one = 1.0f, zero = 0.0f;
  for (int t0 = 0; t0 < n; t0 += rows) {
    const int m = std::min(rows, n - t0);
    KERNEL_TRY(kc::GatherHeads(q_.get(), row0 + t0, m, H, hd, qh_.get(), stream_));
    // S[kvh] (G*m x n_keys) = Q[kvh] K[kvh]^T * scale
    BLAS_TRY(cublasGemmStridedBatchedEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n_keys, G * m, hd, &scale,
                                        kc_.get(), CUDA_R_16BF, hd,
                                        static_cast<int64_t>(n_keys) * hd, qh_.get(), CUDA_R_16BF,
                                        hd, static_cast<int64_t>(G) * m * hd, &zero, s_.get(),
                                        CUDA_R_32F, n_keys, static_cast<int64_t>(G) * m * n_keys,
                                        c_.n_head_kv, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    KERNEL_TRY(
        kc::CausalSoftmax(s_.get(), H * m, m, n_keys, pos0 + t0 - key0, window, p_.get(), stream_));
    // O[kvh] (G*m x hd) = P[kvh] V[kvh]
    BLAS_TRY(cublasGemmStridedBatchedEx(
        blas_, CUBLAS_OP_N, CUBLAS_OP_N, hd, G * m, n_keys, &one, vc_.get(), CUDA_R_16BF, hd,
        static_cast<int64_t>(n_keys) * hd, p_.get(), CUDA_R_16BF, n_keys,
        static_cast<int64_t>(G) * m * n_keys, &zero, oh_.get(), CUDA_R_16BF, hd,
        static_cast<int64_t>(G) * m * hd, c_.n_head_kv, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    KERNEL_TRY(kc::ScatterHeads(oh_.get(), row0 + t0, m, H, hd, att_.get(), stream_));
  }
  return Status::Ok();
}

void CudaBackend::FindCascadeGroups(std::span<const BatchSegment> batch, int bs, int graph_batch) {
  groups_.clear();
  cascade_work_ = 0;
  if (!cascade_ || bs % 16 != 0) return;
  int32_t* key_start = HostRegion(kKeyStart);
  int32_t* rows = HostRegion(kCascadeRows);
  int32_t* index = HostRegion(kCascadeIndex);
  int n = 0;
  for (const PrefixGroup& g :
       FindPrefixGroups(batch, bs, kPrefillGemmMin, kCascadeMinMembers, kCascadeMinKeys)) {
    groups_.push_back({n, static_cast<int>(g.members.size()), g.keys, g.members[0].seg});
    for (const CascadeMember& m : g.members) {
      key_start[m.row] = g.keys;
      rows[n] = m.row;
      index[n++] = m.dec;
    }
  }
  int dec = 0;  // decode tokens of the step
  for (const BatchSegment& s : batch) dec += s.n_tokens < kPrefillGemmMin ? s.n_tokens : 0;
  if (groups_.empty()) return;
  // CascadeAttention's work units (backend/cascade_plan.h).
  CascadeLimits lim;
  lim.rows_per_block = kc::kCascadeBlockRows;
  lim.group = c_.n_head / c_.n_head_kv;
  lim.n_kv = c_.n_head_kv;
  lim.slots = cascade_slots_;
  lim.max_ranges = kc::kMaxPrefixRanges;
  lim.min_members = kCascadeMinMembers;
  lim.min_keys = kCascadeMinKeys;
  lim.range_pairs = static_cast<int>(kCascadeRangePairs);
  lim.work_cap = static_cast<int>(kRegionCap);
  std::vector<CascadeGroupShape> shapes;
  for (const CascadeGroup& g : groups_) shapes.push_back({g.m, g.keys});
  const CascadeWorkPlan plan = PlanCascadeWork(shapes, dec, graph_batch, lim);
  int32_t* gd = HostRegion(kCascadeGroups);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const CascadeGroup& g = groups_[gi];
    gd[4 * gi] = g.off, gd[4 * gi + 1] = g.m, gd[4 * gi + 2] = g.keys, gd[4 * gi + 3] = g.seq;
  }
  std::copy(plan.work.begin(), plan.work.end(), HostRegion(kCascadeWork));
  cascade_work_ = static_cast<int>(plan.work.size());
  cascade_ranges_n_ = plan.ranges;
}

Status CudaBackend::Enqueue(CudaKv& kv, int T, int n_decode, int R, int n_split, bool argmax) {
  const ModelConfig& c = c_;
  const int D = c.n_embd;
  int32_t* ids = DevRegion(kIds);
  KERNEL_TRY(kc::Embed(embed_.get(), ids, T, D, c.embed_scale, x_.get(), stream_));
  bool qk_norm = false;  // the block's attention step begins with q/k norms
  for (const PlannedStep& step : plan_)
    if (step.id == kStepAttention) qk_norm = step.ops[0].op == Op::kQkNorm;
  // One decode token: every layer in one launch, where that is on.
  const bool one_launch =
      layers_kernel_ && T == 1 && n_decode == 1 && groups_.empty() && layer_table_kv_ == kv.id();
  if (one_launch) {
    kc::DecodeLayersArgs a;
    a.layers = layer_table_.get();
    a.n_layer = c.n_layer;
    a.x = x_.get();
    a.qkv = qkv_.get();
    a.att = att_.get();
    a.act = act_.get();
    a.partial = partial_.get();
    a.counters = layer_counters_.get();
    a.tokens = DevRegion(kDecode);
    a.pos = DevRegion(kPos);
    a.slot = DevRegion(kSlot);
    a.tok_seq = DevRegion(kTokSeq);
    a.seq_table = DevRegion(kSeqTable);
    a.tables = DevTables();
    a.inv_freq = inv_freq_.get();
    a.cache = kv.cache();
    a.d = D;
    a.n_head = c.n_head;
    a.n_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.n_rot = c.n_rot;
    a.n_ff = c.n_ff;
    a.block_size = kv.block_size();
    a.neox = c.rope_neox;
    a.gate = gate_;
    a.eps = c.rms_eps;
    a.scale = c.AttnScale();
    a.tensor_cores = layers_tensor_cores_;
    KERNEL_TRY(kc::DecodeLayers(a, stream_));
  }
  for (int i = 0; i < (one_launch ? 0 : c.n_layer); ++i) {
    GpuLayer& l = layers_[i];
    // The weight of norm op `k` of `step` (nullptr where it is no norm).
    auto norm = [&](const PlannedStep& step, size_t k) -> const float* {
      if (k >= step.ops.size() || (step.ops[k].op != Op::kNorm && step.ops[k].op != Op::kPostNorm))
        return nullptr;
      return l.Norm(step.ops[k].weight)->get();
    };
    bool rope_done = false;
    for (const PlannedStep& step : plan_) {
      switch (step.id) {
        case kStepNormQkv: {
          // The q/k norms need a head's whole row: RoPE goes behind the product only without them.
          const kc::RopeKvArgs rope = RopeArgs(kv, i, T, qk_norm);
          BRAID_RETURN_IF_ERROR(Project(x_.get(), norm(step, 0), l.wqkv.view(), qkv_.get(), T,
                                        qkv_dim_, D, false, false,
                                        fuse_rope_ && !qk_norm ? &rope : nullptr, &rope_done));
          break;
        }
        case kStepAttention:
          BRAID_RETURN_IF_ERROR(Attend(kv, i, T, n_decode, n_split, qk_norm, rope_done));
          break;
        case kStepWo:
          BRAID_RETURN_IF_ERROR(AddBranch(att_.get(), l.wo.view(), T, q_dim_, norm(step, 1)));
          break;
        case kStepNormGateUp:
          BRAID_RETURN_IF_ERROR(Project(x_.get(), norm(step, 0), l.wgu.view(), gu_.get(), T,
                                        2 * c.n_ff, D, false, true));
          break;
        case kStepDown:
          BRAID_RETURN_IF_ERROR(AddBranch(act_.get(), l.wdown.view(), T, c.n_ff, norm(step, 1)));
          break;
      }
    }
  }
  if (R == T) {
    // Every row's logits (a decode step): the final norm goes into the
    // product where it can.
    BRAID_RETURN_IF_ERROR(Project(x_.get(), out_norm_.get(), Weight{lm_head_}, logits_.get(), R,
                                  head_rows_, D, false));
  } else if (R > 0) {
    KERNEL_TRY(kc::RmsNorm(x_.get(), out_norm_.get(), DevRegion(kRows), R, D, c.rms_eps, xn_.get(),
                           stream_));
    BRAID_RETURN_IF_ERROR(
        Project(xn_.get(), nullptr, Weight{lm_head_}, logits_.get(), R, head_rows_, D, false));
  }
  if (R > 0 && argmax)
    KERNEL_TRY(kc::ArgmaxRows(logits_.get(), R, head_rows_, vocab0_, argmax_.get(),
                              argmax_scratch_.get(), stream_));
  return Status::Ok();
}

kc::RopeKvArgs CudaBackend::RopeArgs(CudaKv& kv, int i, int T, bool qk_norm) const {
  const ModelConfig& c = c_;
  const GpuLayer& l = layers_[i];
  kc::RopeKvArgs r;
  r.qkv = qkv_.get();
  r.bias = qk_norm ? nullptr : l.bqkv.get();
  r.pos = DevRegion(kPos);
  r.slot = DevRegion(kv.InSlides(i) ? kSlideSlot : kSlot);
  r.inv_freq = c.Sliding(i) ? inv_freq_local_.get() : inv_freq_.get();
  r.q = q_.get();
  r.k_cache = kv.k(i);
  r.v_cache = kv.v(i);
  r.cache = kv.cache();
  r.n = T;
  r.n_head = c.n_head;
  r.n_kv = c.n_head_kv;
  r.head_dim = c.head_dim;
  r.n_rot = c.n_rot;
  r.block_size = kv.block_size();
  r.neox = c.rope_neox;
  return r;
}

Status CudaBackend::Attend(CudaKv& kv, int i, int T, int n_decode, int n_split, bool qk_norm,
                           bool rope_done) {
  const ModelConfig& c = c_;
  const GpuLayer& l = layers_[i];
  // q/k norms take the bias in with them.
  if (qk_norm)
    KERNEL_TRY(kc::QkNorm(qkv_.get(), l.bqkv.get(), l.q_norm.get(), l.k_norm.get(), T, c.n_head,
                          c.n_head_kv, c.head_dim, c.rms_eps, stream_));
  if (!rope_done) KERNEL_TRY(kc::RopeStoreKv(RopeArgs(kv, i, T, qk_norm), stream_));
  if (!groups_.empty()) {
    kc::CascadeAttentionArgs ca;
    ca.q = q_.get();
    ca.k_cache = kv.k(i);
    ca.v_cache = kv.v(i);
    ca.cache = kv.cache();
    ca.tables = DevTables();
    ca.seq_table = DevRegion(kSeqTable);
    ca.groups = DevRegion(kCascadeGroups);
    ca.work = DevRegion(kCascadeWork);
    ca.rows = DevRegion(kCascadeRows);
    ca.index = DevRegion(kCascadeIndex);
    ca.prefix = cascade_ranges_.get();
    ca.n_work = cascade_work_;
    ca.n_head = c.n_head;
    ca.n_kv = c.n_head_kv;
    ca.head_dim = c.head_dim;
    ca.block_size = kv.block_size();
    ca.n_ranges = cascade_ranges_n_;
    ca.scale = c.AttnScale();
    ca.early_keys = early_keys_;
    KERNEL_TRY(kc::CascadeAttention(ca, stream_));
  }
  if (n_decode > 0) {
    kc::DecodeAttentionArgs a;
    a.q = q_.get();
    a.k_cache = kv.k(i);
    a.v_cache = kv.v(i);
    a.cache = kv.cache();
    a.tokens = DevRegion(kDecode);
    a.pos = DevRegion(kPos);
    a.tok_seq = DevRegion(kTokSeq);
    a.seq_table = DevRegion(kv.InSlides(i) ? kSlideTable : kSeqTable);
    a.tables = DevTables();
    a.out = att_.get();
    a.partial = partial_.get();
    a.counters = counters_.get();
    a.n = n_decode;
    a.n_head = c.n_head;
    a.n_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.block_size = kv.block_size();
    a.n_split = n_split;
    a.keys_in_flight = attention_keys_;
    a.range_keys = attention_range_keys_;
    a.step_keys = early_keys_ ? step_keys_ : 0;
    a.tensor_cores = attention_tc_;
    a.scale = c.AttnScale();
    a.window = Window(i);
    if (!groups_.empty()) {
      a.key_start = DevRegion(kKeyStart);
      a.prefix = cascade_ranges_.get();
      a.prefix_ranges = cascade_ranges_n_;
    }
    KERNEL_TRY(kc::DecodeAttention(a, stream_));
  }
  for (const Segment& s : prefill_)
    BRAID_RETURN_IF_ERROR(PrefillAttention(kv, i, s.row0, s.n, s.pos0, s.seq));
  return Status::Ok();
}

Status CudaBackend::EnsureLayerTable(CudaKv& kv) {
  if (!layers_kernel_ || layer_table_kv_ == kv.id()) return Status::Ok();
  std::vector<kc::DecodeLayer> table(c_.n_layer);
  for (int i = 0; i < c_.n_layer; ++i) {
    const GpuLayer& l = layers_[i];
    kc::DecodeLayer& t = table[i];
    t.wqkv = l.wqkv.bf16.get();
    t.wo = l.wo.bf16.get();
    t.wgu = l.wgu.bf16.get();
    t.wdown = l.wdown.bf16.get();
    t.attn_norm = l.attn_norm.get();
    t.ffn_norm = l.ffn_norm.get();
    t.k_cache = kv.k(i);
    t.v_cache = kv.v(i);
  }
  CUDA_TRY(cudaMemcpyAsync(layer_table_.get(), table.data(), table.size() * sizeof(table[0]),
                           cudaMemcpyHostToDevice, stream_));
  CUDA_TRY(cudaStreamSynchronize(stream_));
  layer_table_kv_ = kv.id();
  return Status::Ok();
}

Status CudaBackend::ReduceSum(float* p, size_t n) {
  if (!group_) return Status::Ok();
  return group_->AllReduceSum(p, n, stream_);
}

Status CudaBackend::AddBranch(const uint16_t* x, const Weight& w, int m, int k,
                              const float* post_norm) {
  const int D = c_.n_embd;
  const size_t n = static_cast<size_t>(m) * D;
  if (post_norm != nullptr) {
    // The branch whole (summed over the ranks), normalized, then added.
    BRAID_RETURN_IF_ERROR(Project(x, nullptr, w, branch_.get(), m, D, k, false));
    BRAID_RETURN_IF_ERROR(ReduceSum(branch_.get(), n));
    KERNEL_TRY(kc::RmsNormAdd(branch_.get(), post_norm, m, D, c_.rms_eps, x_.get(), stream_));
    return Status::Ok();
  }
  // Under tensor parallelism rank 0 adds its part to the residual, the
  // others write theirs in its place, and the sum over the ranks is then
  // the residual plus the whole product on every rank.
  BRAID_RETURN_IF_ERROR(Project(x, nullptr, w, x_.get(), m, D, k, rank_ == 0));
  return ReduceSum(x_.get(), n);
}

Status CudaBackend::Project(const void* x, const float* norm, const Weight& w, float* y, int m,
                            int n, int k, bool accumulate, bool gated, const kc::RopeKvArgs* rope,
                            bool* rope_fused) {
  if (rope_fused) *rope_fused = false;
  if (w.fp8) return ProjectFp8(x, norm, w, y, m, n, k, accumulate, gated);
  const GemvPlan plan = m <= kc::kGemvMaxRows ? GemvChoice(n, k, m) : GemvPlan{};
  const int depth = plan.depth;
  // What the product does not fuse runs as kernels of its own around it.
  if (norm && !(depth > 0 && fuse_norm_)) {
    KERNEL_TRY(kc::RmsNorm(static_cast<const float*>(x), norm, nullptr, m, k, c_.rms_eps, xn_.get(),
                           stream_));
    x = xn_.get();
    norm = nullptr;
  }
  const bool epilogue = depth > 0 && gated && fuse_swiglu_ && n % 8 == 0;
  if (depth > 0) {
    const bool fuse_rope = rope && !gated;
    BRAID_RETURN_IF_ERROR(
        RunGemv(x, norm, w, y, m, n, k, plan, accumulate, epilogue, fuse_rope ? rope : nullptr));
    if (rope_fused) *rope_fused = fuse_rope;
  } else {
    BRAID_RETURN_IF_ERROR(Gemm(static_cast<const uint16_t*>(x), w.bf16, y, m, n, k, accumulate));
  }
  if (gated && !epilogue) KERNEL_TRY(kc::GatedActivation(y, m, n / 2, gate_, act_.get(), stream_));
  return Status::Ok();
}

Status CudaBackend::RunGemv(const void* x, const float* norm, const Weight& w, float* y, int m,
                            int n, int k, GemvPlan plan, bool accumulate, bool gated,
                            const kc::RopeKvArgs* rope) {
  kc::GemvArgs g;
  g.depth = plan.depth;
  g.split = plan.split;
  g.w = w.bf16;
  g.w8 = w.fp8;  // null for bf16 weights
  g.w_scale = w.scale;
  g.y = y;
  g.rows = m;
  g.n = n;
  g.k = k;
  g.accumulate = accumulate;
  if (norm) {
    g.xf = static_cast<const float*>(x);
    g.norm = norm;
    g.eps = c_.rms_eps;
  } else {
    g.x = static_cast<const uint16_t*>(x);
  }
  if (gated) {
    g.act = act_.get();
    g.gate = gate_;
  }
  if (rope) g.rope = *rope;
  KERNEL_TRY(kc::Gemv(g, stream_));
  return Status::Ok();
}

Status CudaBackend::GemvFp8(const Weight& w, float* y, int m, int n, int k, bool accumulate,
                            bool gated) {
  kc::GemvFp8Args g;
  g.w = w.fp8;
  g.w_scale = w.scale;
  g.x = x8_.get();
  g.x_scale = x8_scale_.get();
  g.rows = m;
  g.n = n;
  g.k = k;
  g.accumulate = accumulate;
  if (gated) {
    g.act = act_.get();
    g.gate = gate_;
  } else {
    g.y = y;
  }
  KERNEL_TRY(kc::GemvFp8(g, stream_));
  return Status::Ok();
}

Status CudaBackend::ProjectFp8(const void* x, const float* norm, const Weight& w, float* y, int m,
                               int n, int k, bool accumulate, bool gated) {
  bool epilogue = false;
  if (m <= kFp8CudaCoreRows) {
    // The norm and the gate fused, as for bf16 weights.
    epilogue = gated && fuse_swiglu_;
    BRAID_RETURN_IF_ERROR(
        RunGemv(x, norm, w, y, m, n, k, GemvChoice(n, k, m, true), accumulate, epilogue));
  } else {
    // x's rows to e4m3 with a scale each (normalized on the way), for the
    // tensor-core kernel or cuBLASLt's FP8 GEMM.
    if (norm)
      KERNEL_TRY(kc::QuantizeNormRowsFp8(static_cast<const float*>(x), norm, c_.rms_eps, m, k,
                                         x8_.get(), x8_scale_.get(), stream_));
    else
      KERNEL_TRY(kc::QuantizeRowsFp8(static_cast<const uint16_t*>(x), m, k, x8_.get(),
                                     x8_scale_.get(), stream_));
    const Status st =
        m <= kc::kGemvFp8MaxRows
            ? GemvFp8(w, y, m, n, k, accumulate, gated && fuse_swiglu_)
            : gemm_.RunFp8(x8_.get(), x8_scale_.get(), w.fp8, w.scale, y, m, n, k, accumulate);
    if (st.ok()) {
      epilogue = m <= kc::kGemvFp8MaxRows && gated && fuse_swiglu_;
      if (fp8_gemm_note_.empty() && m > kc::kGemvFp8MaxRows)
        fp8_gemm_note_ = "cuBLASLt FP8 GEMMs (a scale per row of each side)";
    } else if (st.code() == StatusCode::kUnsupported) {
      // No FP8 GEMM for this shape: the weight back to bf16, in a buffer
      // that grows to the largest such matrix, for the bf16 GEMM.
      const size_t need = static_cast<size_t>(n) * k;
      if (dequant_.size() < need) {
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        cudaStreamIsCapturing(stream_, &capturing);
        if (capturing != cudaStreamCaptureStatusNone)
          return Status::Internal("FP8 fallback buffer grown during a graph capture");
        CUDA_TRY(cudaStreamSynchronize(stream_));
        BRAID_RETURN_IF_ERROR(dequant_.Allocate(need));
      }
      fp8_gemm_note_ = "bf16 GEMMs over weights dequantized per product (cuBLASLt has no FP8 GEMM)";
      if (norm) {
        KERNEL_TRY(kc::RmsNorm(static_cast<const float*>(x), norm, nullptr, m, k, c_.rms_eps,
                               xn_.get(), stream_));
        x = xn_.get();
      }
      KERNEL_TRY(kc::DequantizeRowsFp8(w.fp8, w.scale, n, k, dequant_.get(), stream_));
      BRAID_RETURN_IF_ERROR(
          Gemm(static_cast<const uint16_t*>(x), dequant_.get(), y, m, n, k, accumulate));
    } else {
      return st;
    }
  }
  if (gated && !epilogue) KERNEL_TRY(kc::GatedActivation(y, m, n / 2, gate_, act_.get(), stream_));
  return Status::Ok();
}

// Times the matrix-vector kernel (4 and 8 pieces in flight per lane, 1, 2
// and 4 warps to a row) against cuBLASLt on this device for a matrix of
// this shape (random bf16, 10 replays of each after a warm-up) the first
// time the shape is used with 1 or kGemvMaxRows rows, and keeps the
// fastest; rows between take the choice for the nearer of the two.
CudaBackend::GemvPlan CudaBackend::GemvChoice(int n, int k, int m, bool fp8) {
  const int probe = m <= (1 + kc::kGemvMaxRows) / 2 ? 1 : kc::kGemvMaxRows;
  // FP8 shapes are keyed apart (negative n): their choice is timed on e4m3.
  const auto key = std::make_tuple(fp8 ? -n : n, k, probe);
  auto it = gemv_choice_.find(key);
  if (it != gemv_choice_.end()) return it->second;
  GemvPlan plan{4, 1};
  // The matrix: bf16 noise, or for FP8 the same bytes read as e4m3 (two per
  // bf16 element) with unit scales.
  DeviceArray<uint16_t> w, x;
  DeviceArray<float> y, scale;
  const size_t w_elems = fp8 ? (static_cast<size_t>(n) * k + 1) / 2 : static_cast<size_t>(n) * k;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream_, &capturing);
  // Under tensor parallelism this runs in the middle of a pass, after
  // all-reduces that wait for the other ranks' matching ones. cudaMalloc and
  // cudaFree take a driver lock that the other ranks' threads may need
  // before they can launch theirs, and cudaFree waits for this device: with
  // an all-reduce of ours still waiting on this stream, that is a deadlock
  // (rank A in cudaFree waits for its all-reduce, rank B waits for the lock
  // before launching the matching one). So the stream's work is waited for
  // first, holding no lock: then our all-reduces have met theirs, and
  // nothing allocated or freed here waits for another rank.
  if (capturing == cudaStreamCaptureStatusNone && cudaStreamSynchronize(stream_) == cudaSuccess &&
      w.Allocate(w_elems).ok() && x.Allocate(static_cast<size_t>(probe) * k).ok() &&
      y.Allocate(static_cast<size_t>(probe) * n).ok() && scale.Allocate(n).ok() &&
      cudaMemset(scale.get(), 0, n * sizeof(float)) == cudaSuccess &&
      FillNoise(w.get(), w.size(), 987654321u, stream_).ok() &&
      FillNoise(x.get(), x.size(), 123456789u, stream_).ok()) {
    auto time = [&](GemvPlan p) {  // p.depth 0: cuBLASLt
      auto run = [&] {
        if (p.depth == 0) {
          (void)Gemm(x.get(), w.get(), y.get(), probe, n, k, false);
          return true;
        }
        kc::GemvArgs g;
        g.w = w.get(), g.x = x.get(), g.y = y.get(), g.rows = probe, g.n = n, g.k = k;
        g.depth = p.depth;
        g.split = p.split;
        if (fp8) {
          g.w8 = reinterpret_cast<const uint8_t*>(w.get());
          g.w_scale = scale.get();
        }
        return kc::Gemv(g, stream_) == 0;
      };
      return LeastMs(stream_, 1, 10, run, [] {});
    };
    char note[320];
    int at = std::snprintf(note, sizeof note, "%s%s%dx%d rows %d: gemv",
                           gemv_note_.empty() ? "" : "; ", fp8 ? "fp8 " : "", n, k, probe);
    float best = 1e30f;
    for (int depth : {4, 8})
      for (int split : {1, 2, 4}) {
        const float t = time({depth, split});
        if (t < best) best = t, plan = {depth, split};
        at += std::snprintf(note + at, sizeof note - at, " %d/%d %.1f", depth, split, 1e3 * t);
      }
    // FP8 rows: the kernel reads half the bytes of a bf16 GEMM, which is
    // not timed against it.
    const float t_blas = fp8 ? 1e30f : time({});
    if (t_blas < best) plan = {};
    if (!fp8) at += std::snprintf(note + at, sizeof note - at, ", cuBLASLt %.1f", 1e3 * t_blas);
    std::snprintf(note + at, sizeof note - at, " us: %s", plan.depth == 0 ? "cuBLASLt" : "");
    gemv_note_ += note;
    if (plan.depth > 0)
      gemv_note_ += "gemv " + std::to_string(plan.depth) + "/" + std::to_string(plan.split);
  }
  gemv_choice_[key] = plan;
  return plan;
}

Status CudaBackend::Run(std::span<const BatchSegment> batch, KvMemory& kv_memory, Outputs out) {
  const bool argmax = out.ids != nullptr || out.keys != nullptr;
  const bool want = out.logits != nullptr || argmax || out.k > 0;
  std::lock_guard<std::mutex> lock(mu_);
  CUDA_TRY(cudaSetDevice(device_));
  auto& kv = static_cast<CudaKv&>(kv_memory);  // allocated by AllocateKv of this backend
  const int bs = kv.block_size();
  const bool slides = kv.n_slides() > 0;
  int T = 0;
  size_t table_entries = 2;
  bool decode_only = true;
  for (const BatchSegment& s : batch) {
    T += s.n_tokens;
    table_entries += (slides ? 2 : 1) * static_cast<size_t>((s.pos0 + s.n_tokens + bs - 1) / bs);
    decode_only &= s.n_tokens == 1;
    if (slides && s.slide_table == nullptr)
      return Status::InvalidArgument(
          "the KV memory keeps slides: every segment needs its slide table");
  }
  if (T == 0) return Status::Ok();
  if (T > kMaxChunk)
    return Status::InvalidArgument("a batch of " + std::to_string(T) +
                                   " tokens exceeds the chunk of " + std::to_string(kMaxChunk));
  BRAID_RETURN_IF_ERROR(EnsureInputs(table_entries));

  // Decode-only batches run padded to a graph bucket, with cascade groups
  // or without (one graph per bucket and count of key ranges).
  const int S = static_cast<int>(batch.size());
  int B = T;
  const bool graph =
      use_graphs_ && decode_only && S <= kMaxGraphBatch && (!group_ || group_->graph_safe());
  if (graph) B = *std::lower_bound(std::begin(kGraphBuckets), std::end(kGraphBuckets), S);
  std::fill_n(HostRegion(kKeyStart), kRegionCap, 0);
  FindCascadeGroups(batch, bs, graph ? B : 0);
  if (!groups_.empty()) {
    ++cascade_passes_;
    for (const CascadeGroup& g : groups_) cascade_tokens_ += g.m;
  }

  int32_t* ids = HostRegion(kIds);
  int32_t* pos = HostRegion(kPos);
  int32_t* slot = HostRegion(kSlot);
  int32_t* tok_seq = HostRegion(kTokSeq);
  int32_t* dec = HostRegion(kDecode);
  int32_t* rows = HostRegion(kRows);
  int32_t* seq_table = HostRegion(kSeqTable);
  int32_t* slide_slot = HostRegion(kSlideSlot);
  int32_t* slide_table = HostRegion(kSlideTable);
  int32_t* tables = HostTables();
  int t = 0, n_decode = 0, R = 0;
  size_t tab = 0;
  std::vector<int> wanted;  // graph: rows of the padded batch whose logits are returned
  prefill_.clear();
  step_keys_ = 0;
  for (int si = 0; si < S; ++si) {
    const BatchSegment& s = batch[si];
    const int n_blocks = (s.pos0 + s.n_tokens + bs - 1) / bs;
    seq_table[si] = static_cast<int32_t>(tab);
    std::memcpy(tables + tab, s.block_table, n_blocks * sizeof(int32_t));
    tab += n_blocks;
    if (slides) {
      slide_table[si] = static_cast<int32_t>(tab);
      std::memcpy(tables + tab, s.slide_table, n_blocks * sizeof(int32_t));
      tab += n_blocks;
    }
    const bool gemm = s.n_tokens >= kPrefillGemmMin;
    if (gemm)
      prefill_.push_back({t, s.n_tokens, s.pos0, si});
    else
      step_keys_ = std::max(step_keys_, s.n_tokens);
    for (int j = 0; j < s.n_tokens; ++j, ++t) {
      const int p = s.pos0 + j;
      ids[t] = s.tokens[j];
      pos[t] = p;
      slot[t] = s.block_table[p / bs] * bs + p % bs;
      if (slides) slide_slot[t] = s.slide_table[p / bs] * bs + p % bs;
      tok_seq[t] = si;
      if (!gemm) dec[n_decode++] = t;
      if (want && p >= s.logits_from) {
        if (graph)
          wanted.push_back(t);
        else
          rows[R++] = t;
      }
    }
  }
  if (graph) {
    // Padding: token 0 at position 0 of a sequence whose only block is the trash block.
    seq_table[S] = static_cast<int32_t>(tab);
    tables[tab++] = kv.trash_block();
    slide_table[S] = static_cast<int32_t>(tab);
    tables[tab++] = kv.trash_slide();
    for (; t < B; ++t) {
      ids[t] = 0;
      pos[t] = 0;
      slot[t] = kv.trash_block() * bs;
      slide_slot[t] = kv.trash_slide() * bs;
      tok_seq[t] = S;
      dec[n_decode++] = t;
    }
    for (int i = 0; i < B; ++i) rows[i] = i;
    R = B;
    // Graphs always end in the argmax: one graph per bucket serves both outputs.
  }
  // Padded, a graph's batch is B decodes: its split is the bucket's.
  const int n_split = SplitFor(n_decode);
  // The KV copies this pass must come after, before it touches the pool.
  BRAID_RETURN_IF_ERROR(kv.OrderForward(stream_, slot, graph ? B : T));
  BRAID_RETURN_IF_ERROR(EnsureLayerTable(kv));
  const size_t in_count = kRegions * kRegionCap + tab;
  CUDA_TRY(cudaMemcpyAsync(in_dev_.get(), in_host_.get(), in_count * sizeof(int32_t),
                           cudaMemcpyHostToDevice, stream_));
  if (graph) {
    if (graph_kv_ != kv.id()) {  // a different KV memory: recapture
      for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
      graphs_.clear();
      graph_kv_ = kv.id();
    }
    const int key = B * (kc::kMaxPrefixRanges + 1) + (groups_.empty() ? 0 : cascade_ranges_n_);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      // Plans (cuBLASLt algorithms, timed) are made outside the capture: run once eagerly.
      gemm_.set_timing(true);
      const Status first = Enqueue(kv, B, n_decode, R, n_split, true);
      gemm_.set_timing(false);
      BRAID_RETURN_IF_ERROR(first);
      cudaGraph_t g = nullptr;
      CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      const Status st = Enqueue(kv, B, n_decode, R, n_split, true);
      const cudaError_t e = cudaStreamEndCapture(stream_, &g);
      BRAID_RETURN_IF_ERROR(st);
      CUDA_TRY(e);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      CUDA_TRY(ie);
      it = graphs_.emplace(key, exec).first;
    } else {
      CUDA_TRY(cudaGraphLaunch(it->second, stream_));
    }
  } else {
    BRAID_RETURN_IF_ERROR(Enqueue(kv, T, n_decode, R, n_split, argmax));
  }
  // This rank's columns of each row (all of them when alone).
  const size_t V = static_cast<size_t>(c_.n_vocab), H = static_cast<size_t>(head_rows_);
  // Top k: over the rows asked for (a graph's are among its first S).
  const int top_rows = graph ? S : R;
  const size_t K = static_cast<size_t>(out.k);
  if (R > 0 && out.k > 0) {
    KERNEL_TRY(kc::TopKRows(logits_.get(), top_rows, head_rows_, out.k, topk_ids_.get(),
                            topk_vals_.get(), stream_));
    CUDA_TRY(cudaMemcpyAsync(topk_ids_host_.get(), topk_ids_.get(), top_rows * K * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream_));
    CUDA_TRY(cudaMemcpyAsync(topk_vals_host_.get(), topk_vals_.get(), top_rows * K * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
  } else if (R > 0 && argmax) {
    CUDA_TRY(cudaMemcpyAsync(argmax_host_.get(), argmax_.get(), R * sizeof(uint64_t),
                             cudaMemcpyDeviceToHost, stream_));
  } else if (R > 0 && out.logits) {
    CUDA_TRY(cudaMemcpyAsync(logits_host_.get(), logits_.get(), R * H * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_TRY(cudaStreamSynchronize(stream_));
  if (!want) return Status::Ok();
  // Rows of the batch whose output was asked for, in order.
  const size_t n_out = graph ? wanted.size() : static_cast<size_t>(R);
  for (size_t i = 0; i < n_out; ++i) {
    const size_t row = graph ? wanted[i] : i;
    if (out.k > 0) {
      const int32_t* ids = topk_ids_host_.get() + row * K;
      // Ids of the whole vocabulary (-1, a row not finite, stays).
      for (size_t j = 0; j < K; ++j)
        out.topk_ids[i * K + j] = ids[j] < 0 ? ids[j] : ids[j] + vocab0_;
      std::memcpy(out.topk_values + i * K, topk_vals_host_.get() + row * K, K * sizeof(float));
    } else if (out.keys) {
      out.keys[i] = argmax_host_.get()[row];
    } else if (out.ids) {
      out.ids[i] = kc::ArgmaxKeyIndex(argmax_host_.get()[row]);
    } else if (H == V && (graph || i == 0)) {
      // Whole contiguous rows when not padded: one copy.
      const size_t count = graph ? 1 : n_out;
      std::memcpy(out.logits + i * V, logits_host_.get() + row * V, count * V * sizeof(float));
    } else if (H < V) {
      std::memcpy(out.logits + i * V + vocab0_, logits_host_.get() + row * H, H * sizeof(float));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Backend>> OpenCudaBackend(const ModelFile& file, const ModelOptions& options,
                                                 int device, int context) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b,
                         CudaBackend::Open(file, options, device, context, nullptr));
  return std::unique_ptr<Backend>(std::move(b));
}

Result<std::unique_ptr<CudaRank>> OpenCudaBackendRank(const ModelFile& file,
                                                      const ModelOptions& options, int device,
                                                      int context, Collective& group) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b,
                         CudaBackend::Open(file, options, device, context, &group));
  return std::unique_ptr<CudaRank>(std::move(b));
}

Status PlanCudaBlock(const ModelConfig& config) { return PlanSteps(config).status(); }

int CudaDeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Result<double> MeasureGemmSeconds(const ModelConfig& c, int m, int device) {
  CUDA_TRY(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  CUDA_TRY(cudaStreamCreate(&stream));
  LtGemm gemm;
  gemm.set_timing(true);  // as the backend's decode steps
  Status st = gemm.Init(stream);
  const int64_t D = c.n_embd, qkv = static_cast<int64_t>(c.n_head + 2 * c.n_head_kv) * c.head_dim,
                q = static_cast<int64_t>(c.n_head) * c.head_dim;
  // One layer's weights (the layers are alike) and the head; random bf16 values.
  const int64_t shapes[5][2] = {{qkv, D}, {D, q}, {2 * c.n_ff, D}, {D, c.n_ff}, {c.n_vocab, D}};
  DeviceArray<uint16_t> w[5];
  DeviceArray<uint16_t> x;
  DeviceArray<float> y;
  int64_t most = 0;
  for (auto& s : shapes) most = std::max({most, s[0], s[1]});
  if (st.ok()) st = x.Allocate(static_cast<size_t>(m) * most);
  if (st.ok()) st = y.Allocate(static_cast<size_t>(m) * most);
  if (st.ok()) st = FillNoise(x.get(), x.size(), 12345u, stream);
  for (int i = 0; i < 5 && st.ok(); ++i) {
    st = w[i].Allocate(static_cast<size_t>(shapes[i][0]) * shapes[i][1]);
    if (st.ok()) st = FillNoise(w[i].get(), w[i].size(), 12346u + i, stream);
  }
  double seconds = 0;
  if (st.ok()) {
    auto step = [&]() -> Status {
      for (int l = 0; l < c.n_layer; ++l)
        for (int i = 0; i < 4; ++i)
          BRAID_RETURN_IF_ERROR(gemm.Run(x.get(), w[i].get(), y.get(), m,
                                         static_cast<int>(shapes[i][0]),
                                         static_cast<int>(shapes[i][1]), i == 1 || i == 3));
      return gemm.Run(x.get(), w[4].get(), y.get(), m, static_cast<int>(shapes[4][0]),
                      static_cast<int>(shapes[4][1]), false);
    };
    st = step();  // plans, outside the capture
    // Replayed as one graph, as the backend runs decode steps.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (st.ok() &&
        cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
      st = step();
      if (cudaStreamEndCapture(stream, &graph) != cudaSuccess && st.ok())
        st = Status::Internal("capturing the GEMMs failed");
    }
    if (st.ok() && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
      st = Status::Internal("instantiating the GEMM graph failed");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> times;
    for (int r = 0; r < 6 && st.ok(); ++r) {
      cudaEventRecord(e0, stream);
      cudaGraphLaunch(exec, stream);
      cudaEventRecord(e1, stream);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (r > 0) times.push_back(ms * 1e-3);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (st.ok()) {
      std::sort(times.begin(), times.end());
      seconds = times[times.size() / 2];
    }
  }
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  BRAID_RETURN_IF_ERROR(st);
  return seconds;
}

Result<double> MeasureCudaGemmRate(int device) {
  CUDA_TRY(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  CUDA_TRY(cudaStreamCreate(&stream));
  const int m = 4096, n = 4096, k = 8192;
  LtGemm gemm;
  Status st = gemm.Init(stream);
  DeviceArray<uint16_t> x, w;
  DeviceArray<float> y;
  if (st.ok()) st = x.Allocate(static_cast<size_t>(m) * k);
  if (st.ok()) st = w.Allocate(static_cast<size_t>(n) * k);
  if (st.ok()) st = y.Allocate(static_cast<size_t>(m) * n);
  if (st.ok()) st = FillNoise(x.get(), x.size(), 54321u, stream);
  if (st.ok()) st = FillNoise(w.get(), w.size(), 54322u, stream);
  float best = 1e30f;
  if (st.ok())
    best = LeastMs(
        stream, 2, 8,
        [&] {
          st = gemm.Run(x.get(), w.get(), y.get(), m, n, k, false);
          return st.ok();
        },
        [] {});
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  BRAID_RETURN_IF_ERROR(st);
  CUDA_TRY(cudaGetLastError());
  if (best >= 1e30f) return Status::Internal("the GEMM was not timed");
  return 2.0 * m * n * k / (best * 1e-3);
}

Result<double> MeasureCudaCopyBandwidth(int device) {
  CUDA_TRY(cudaSetDevice(device));
  const size_t bytes = size_t{2} << 30;
  DeviceArray<uint8_t> a, b;
  BRAID_RETURN_IF_ERROR(a.Allocate(bytes));
  BRAID_RETURN_IF_ERROR(b.Allocate(bytes));
  CUDA_TRY(cudaMemset(a.get(), 1, bytes));
  CUDA_TRY(cudaMemset(b.get(), 2, bytes));
  cudaEvent_t e0, e1;
  CUDA_TRY(cudaEventCreate(&e0));
  CUDA_TRY(cudaEventCreate(&e1));
  std::vector<double> gbs;
  for (int i = 0; i < 8; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), bytes,
                    cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 2) gbs.push_back(2.0 * bytes / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  CUDA_TRY(cudaGetLastError());
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

}  // namespace braid
