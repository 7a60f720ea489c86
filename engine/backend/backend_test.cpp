// Device names and opening backends: ParseDevice's and ExpandDevices' good
// and bad inputs (tensor-parallel groups among them), the CPU backend on a
// tiny model, and the answers of a build with CUDA and no GPUs or NCCL, or
// without CUDA.
#include "backend/backend.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/llama_forward.h"
#include "model/family.h"

#ifdef BRAID_HAVE_CUDA
#include "backend/cuda/collective.h"
#include "backend/cuda/cuda_backend.h"
#endif

namespace braid {
namespace {

const std::string kTiny = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/models/llama_tiny";

TEST_CASE("ParseDevice: cpu, cuda and cuda:N") {
  auto cpu = ParseDevice("cpu");
  REQUIRE(cpu.ok());
  CHECK(cpu->kind == DeviceSpec::Kind::kCpu);
  auto cuda = ParseDevice("cuda");
  REQUIRE(cuda.ok());
  CHECK(cuda->kind == DeviceSpec::Kind::kCuda);
  CHECK(cuda->index == 0);
  auto three = ParseDevice("cuda:3");
  REQUIRE(three.ok());
  CHECK(three->kind == DeviceSpec::Kind::kCuda);
  CHECK(three->index == 3);
  CHECK(ParseDevice("cuda:1023")->index == 1023);
}

TEST_CASE("ParseDevice: bad names and indices say what is wrong") {
  for (const char* name : {"", "CPU", "gpu", "cuda0", "cud:0", "cpu:0", " cpu"}) {
    CAPTURE(name);
    auto d = ParseDevice(name);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    CHECK(d.status().message() ==
          "unknown device '" + std::string(name) + "' (cpu, cuda or cuda:N)");
  }
  for (const char* name : {"cuda:", "cuda:x", "cuda:-1", "cuda:+1", "cuda:1.5", "cuda:1 ",
                           "cuda:1024", "cuda:99999999999999999999"}) {
    CAPTURE(name);
    auto d = ParseDevice(name);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    CHECK(d.status().message() ==
          "device '" + std::string(name) + "': the GPU index must be in [0, 1023]");
  }
}

TEST_CASE("ExpandDevices: one engine per device listed") {
  CHECK(ExpandDevices("cpu").value() == std::vector<std::string>{"cpu"});
  CHECK(ExpandDevices("cuda:3").value() == std::vector<std::string>{"cuda:3"});
  CHECK(ExpandDevices("cuda:0,2").value() == std::vector<std::string>{"cuda:0", "cuda:2"});
  auto twice = ExpandDevices("cuda:1,1");
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().message() == "device 'cuda:1,1': GPU 1 is listed twice");
  auto bad = ExpandDevices("cuda:0,x");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "device 'cuda:x': the GPU index must be in [0, 1023]");
  CHECK_FALSE(ExpandDevices("cuda:0,").ok());
  CHECK_FALSE(ExpandDevices("gpu").ok());
  // Every visible GPU: here, as many as the driver reports (none on a host without one).
  auto all = ExpandDevices("cuda:all");
  if (all.ok()) {
    CHECK_FALSE(all->empty());
    CHECK(all->front() == "cuda:0");
  } else {
    CHECK(all.status().message() == "device 'cuda:all': no GPU is visible");
  }
}

TEST_CASE("ParseDevice: cuda:N+M is one model over those GPUs") {
  auto two = ParseDevice("cuda:0+1");
  REQUIRE(two.ok());
  CHECK(two->kind == DeviceSpec::Kind::kCuda);
  CHECK(two->index == 0);
  CHECK(two->group == std::vector<int>{0, 1});
  CHECK(ParseDevice("cuda:4+5+6+7")->group == std::vector<int>{4, 5, 6, 7});
  CHECK(ParseDevice("cuda:3")->group.empty());
  auto twice = ParseDevice("cuda:2+2");
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().message() == "device 'cuda:2+2': GPU 2 is listed twice");
  for (const char* name : {"cuda:0+", "cuda:+", "cuda:0++1", "cuda:0+x", "cuda:0+1024"}) {
    CAPTURE(name);
    auto d = ParseDevice(name);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().message() ==
          "device '" + std::string(name) + "': the GPU index must be in [0, 1023]");
  }
}

TEST_CASE("ExpandDevices: --tp groups the GPUs, one engine per group") {
  using V = std::vector<std::string>;
  CHECK(ExpandDevices("cuda:0,1,2,3", 2).value() == V{"cuda:0+1", "cuda:2+3"});
  CHECK(ExpandDevices("cuda:0,1,2,3", 4).value() == V{"cuda:0+1+2+3"});
  CHECK(ExpandDevices("cuda:3,1", 2).value() == V{"cuda:3+1"});
  CHECK(ExpandDevices("cuda:0+1").value() == V{"cuda:0+1"});
  CHECK(ExpandDevices("cuda:0,1", 1).value() == V{"cuda:0", "cuda:1"});
  auto odd = ExpandDevices("cuda:0,1,2", 2);
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.status().message() ==
        "device 'cuda:0,1,2': 3 GPU(s) do not split into groups of --tp 2");
  auto one = ExpandDevices("cuda:0", 2);
  REQUIRE_FALSE(one.ok());
  CHECK(one.status().message() == "device 'cuda:0': 1 GPU(s) do not split into groups of --tp 2");
  auto cpu = ExpandDevices("cpu", 2);
  REQUIRE_FALSE(cpu.ok());
  CHECK(cpu.status().message() ==
        "--tp 2 splits a model over GPUs: give --device cuda:all or a list such as cuda:0,1");
  CHECK_FALSE(ExpandDevices("cuda:0+1", 2).ok());
  auto mixed = ExpandDevices("cuda:0+1,2");
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.status().message() ==
        "device 'cuda:0+1,2': a list of GPUs takes --tp to group them, not '+'");
  auto zero = ExpandDevices("cuda:0,1", 0);
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.status().message() == "tensor parallelism must be 1 or more GPUs, got 0");
  auto all = ExpandDevices("cuda:all", 1);
  if (!all.ok()) CHECK(all.status().message() == "device 'cuda:all': no GPU is visible");
}

// Every family's block in each backend's steps; a block whose ops come in an
// order no step covers (a parallel block: attention and MLP both from one
// norm of x, as GPT-J's) refused, naming the op.
TEST_CASE("backends plan every family's block and refuse a block they have no step for") {
  std::vector<std::function<Status(const ModelConfig&)>> plans = {
      [](const ModelConfig& c) { return LlamaForward::Plan(c).status(); }};
#ifdef BRAID_HAVE_CUDA
  plans.push_back([](const ModelConfig& c) { return PlanCudaBlock(c); });
#endif
  const std::string names[] = {"the CPU backend", "the CUDA backend"};
  for (size_t b = 0; b < plans.size(); ++b) {
    for (const Family* f : Families()) {
      ModelConfig c;
      c.arch = f->arch;
      c.block.assign(f->block.begin(), f->block.end());
      CAPTURE(f->gguf_arch);
      CHECK(plans[b](c).ok());
    }
    ModelConfig parallel;
    parallel.block = {{Op::kNorm, TensorRole::kAttnNorm},
                      {Op::kQkv},
                      {Op::kRope},
                      {Op::kAttention},
                      {Op::kWo},
                      {Op::kGateUp},
                      {Op::kGate},
                      {Op::kDown},
                      {Op::kAdd}};
    const Status s = plans[b](parallel);
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK(s.message() == names[b] +
                             " cannot run this llama model: it has no step for the op 'wo' at op 5 "
                             "of its block, after 'attention' (norm qkv rope attention wo gate_up "
                             "gate down add)");
  }
}

TEST_CASE("OpenBackend: the CPU backend runs a batch") {
  auto file = LoadModelFile(kTiny);
  REQUIRE_MESSAGE(file.ok(), file.status().ToString());
  ModelOptions o;
  o.threads = 2;
  o.cpu.stream = CpuOptions::Stream::kTemporal;  // no timing at open
  auto b = OpenBackend(**file, o, 64);
  REQUIRE_MESSAGE(b.ok(), b.status().ToString());
  Backend& backend = **b;
  CHECK(backend.name() == "cpu");
  CHECK(backend.max_chunk() == 256);
  CHECK(backend.KvBlockBytes(16) > 0);
  CHECK(backend.KvMemoryAvailable() > 0);
  ModelInfo info;
  backend.Describe(&info);
  CHECK(info.threads == 2);
  CHECK(info.stream == "t0 (forced)");
  CHECK(info.bytes_per_token > 0);
  CHECK(info.decode_stages.size() == 4 * static_cast<size_t>((*file)->config().n_layer) + 1);

  auto kv = backend.AllocateKv(4, 16);
  REQUIRE(kv.ok());
  CHECK((*kv)->n_blocks() == 4);
  CHECK((*kv)->block_size() == 16);
  CHECK((*kv)->bytes() == 4 * backend.KvBlockBytes(16));
  CHECK_FALSE(backend.AllocateKv(0, 16).ok());

  const std::vector<int32_t> ids = {1, 5, 9};
  const int32_t table[] = {2, 0};
  BatchSegment seg;
  seg.tokens = ids.data();
  seg.n_tokens = static_cast<int>(ids.size());
  seg.block_table = table;
  seg.logits_from = 0;  // every token's row
  std::vector<float> logits(ids.size() * (*file)->config().n_vocab, -1e30f);
  REQUIRE(backend.Forward(std::span<const BatchSegment>(&seg, 1), **kv, logits.data()).ok());
  bool changed = true;
  for (size_t t = 0; t < ids.size(); ++t)
    changed = changed && logits[t * (*file)->config().n_vocab] != -1e30f;
  CHECK(changed);

  // The rows' top k: the largest logits of each row, descending, lower id first on ties.
  const int V = (*file)->config().n_vocab, k = 8;
  std::vector<int32_t> top_ids(ids.size() * k);
  std::vector<float> top_values(ids.size() * k);
  REQUIRE(backend
              .ForwardTopK(std::span<const BatchSegment>(&seg, 1), **kv, k, top_ids.data(),
                           top_values.data())
              .ok());
  for (size_t t = 0; t < ids.size(); ++t) {
    const float* row = &logits[t * V];
    for (int j = 0; j < k; ++j) {
      CHECK(top_values[t * k + j] == row[top_ids[t * k + j]]);
      if (j > 0) CHECK(top_values[t * k + j] <= top_values[t * k + j - 1]);
    }
    int above = 0;  // logits larger than the k-th: exactly those before it
    for (int i = 0; i < V; ++i) above += row[i] > top_values[t * k + k - 1];
    CHECK(above <= k - 1);
  }
  CHECK_FALSE(backend
                  .ForwardTopK(std::span<const BatchSegment>(&seg, 1), **kv, 0, top_ids.data(),
                               top_values.data())
                  .ok());
  CHECK_FALSE(backend
                  .ForwardTopK(std::span<const BatchSegment>(&seg, 1), **kv, Backend::kMaxTopK + 1,
                               top_ids.data(), top_values.data())
                  .ok());

  // KV memory of another backend is refused, not misread.
  struct OtherKv final : KvMemory {
    int n_blocks() const override { return 4; }
    int block_size() const override { return 16; }
    size_t bytes() const override { return 0; }
    size_t block_bytes() const override { return 0; }
    Result<uint64_t> CopyOut(std::span<const int32_t>, std::span<uint8_t* const>) override {
      return Status::Unsupported("no copies");
    }
    Result<uint64_t> CopyIn(std::span<const uint8_t* const>, std::span<const int32_t>) override {
      return Status::Unsupported("no copies");
    }
    double TakeCopySeconds(uint64_t) override { return 0; }
  } other;
  Status s = backend.Forward(std::span<const BatchSegment>(&seg, 1), other, logits.data());
  CHECK(s.code() == StatusCode::kInvalidArgument);
}

TEST_CASE("OpenBackend: a bad device is refused before anything is loaded") {
  auto file = LoadModelFile(kTiny);
  REQUIRE(file.ok());
  ModelOptions o;
  o.device = "tpu";
  auto b = OpenBackend(**file, o, 64);
  REQUIRE_FALSE(b.ok());
  CHECK(b.status().message() == "unknown device 'tpu' (cpu, cuda or cuda:N)");
}

#ifdef BRAID_HAVE_CUDA
TEST_CASE("OpenBackend: a tensor-parallel group names what it lacks") {
  auto file = LoadModelFile(kTiny);
  REQUIRE(file.ok());
  ModelOptions o;
  o.device = "cuda:0+1";
  auto b = OpenBackend(**file, o, 64);
  if (CudaDeviceCount() < 2) {
    REQUIRE_FALSE(b.ok());
    CHECK(b.status().message().find("does not exist") != std::string::npos);
  }
}

TEST_CASE("NcclGroup: a missing NCCL library is named, with the way to point at one") {
  // The library is loaded once per process: this is the only test that asks.
  setenv("BRAID_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  auto g = NcclGroup::Open({0});
  unsetenv("BRAID_NCCL_LIBRARY");
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().code() == StatusCode::kUnsupported);
  const std::string m = g.status().message();
  CHECK(m.rfind("tensor parallelism needs NCCL, and /nonexistent/libnccl.so.2 could not be loaded",
                0) == 0);
  CHECK(m.find("BRAID_NCCL_LIBRARY") != std::string::npos);
}
#else
TEST_CASE("OpenBackend: cuda:0 on a build without the CUDA backend says so") {
  auto file = LoadModelFile(kTiny);
  REQUIRE(file.ok());
  ModelOptions o;
  o.device = "cuda:0";
  auto b = OpenBackend(**file, o, 64);
  REQUIRE_FALSE(b.ok());
  CHECK(b.status().code() == StatusCode::kUnsupported);
  CHECK(b.status().message() ==
        "device 'cuda:0': this build has no CUDA backend (configure with nvcc available, "
        "-DBRAID_CUDA=ON)");
}
#endif

}  // namespace
}  // namespace braid
