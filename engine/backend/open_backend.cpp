// ParseDevice and OpenBackend: a device name to the backend that runs there.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/system_probe.h"
#ifdef BRAID_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/tp_backend.h"
#endif

namespace braid {
namespace {

// Far above any host's GPU count; keeps "cuda:99999999999" out of an int.
constexpr int kMaxDeviceIndex = 1023;

}  // namespace

Result<DeviceSpec> ParseDevice(const std::string& device) {
  DeviceSpec spec;
  if (device == "cpu") return spec;
  spec.kind = DeviceSpec::Kind::kCuda;
  if (device == "cuda") return spec;
  const std::string prefix = "cuda:";
  if (device.compare(0, prefix.size(), prefix) != 0)
    return Status::InvalidArgument("unknown device '" + device + "' (cpu, cuda or cuda:N)");
  if (device == "cuda:all" || device.find(',') != std::string::npos)
    return Status::InvalidArgument("device '" + device +
                                   "': several GPUs are for the engines of braid run, serve and "
                                   "repl (one engine each); this takes one");
  // "cuda:N" or a tensor-parallel group "cuda:N+M+...".
  const char* first = device.data() + prefix.size();
  const char* last = device.data() + device.size();
  for (;;) {
    int index = -1;
    const auto [end, ec] = std::from_chars(first, last, index);
    if (first == last || ec != std::errc() || (end != last && *end != '+') || index < 0 ||
        index > kMaxDeviceIndex)
      return Status::InvalidArgument("device '" + device + "': the GPU index must be in [0, " +
                                     std::to_string(kMaxDeviceIndex) + "]");
    if (std::find(spec.group.begin(), spec.group.end(), index) != spec.group.end())
      return Status::InvalidArgument("device '" + device + "': GPU " + std::to_string(index) +
                                     " is listed twice");
    spec.group.push_back(index);
    if (end == last) break;
    first = end + 1;
  }
  spec.index = spec.group[0];
  if (spec.group.size() == 1) spec.group.clear();
  return spec;
}

Result<std::unique_ptr<Backend>> OpenBackend(const ModelFile& file, const ModelOptions& options,
                                             int context) {
  BRAID_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDevice(options.device));
  switch (spec.kind) {
    case DeviceSpec::Kind::kCpu:
      return OpenCpuBackend(file, options, context);
    case DeviceSpec::Kind::kCuda:
#ifdef BRAID_HAVE_CUDA
      if (!spec.group.empty()) return OpenTensorParallelBackend(file, options, spec.group, context);
      // BRAID_CUDA_TP_ONE=1: cuda:N as a tensor-parallel group of one GPU,
      // so that the whole tensor-parallel path (NCCL included) runs on one.
      if (const char* one = std::getenv("BRAID_CUDA_TP_ONE"); one && std::string(one) == "1")
        return OpenTensorParallelBackend(file, options, {spec.index}, context);
      return OpenCudaBackend(file, options, spec.index, context);
#else
      return Status::Unsupported(
          "device '" + options.device +
          "': this build has no CUDA backend (configure with nvcc available, -DBRAID_CUDA=ON)");
#endif
  }
  return Status::Internal("unknown device kind");
}

Status Backend::ForwardArgmax(std::span<const BatchSegment> batch, KvMemory& kv, int32_t* ids) {
  size_t rows = 0;
  for (const BatchSegment& s : batch)
    if (s.logits_from < s.pos0 + s.n_tokens)
      rows += s.pos0 + s.n_tokens - std::max(s.pos0, s.logits_from);
  const size_t V = static_cast<size_t>(n_vocab());
  std::vector<float> logits(rows * V);
  BRAID_RETURN_IF_ERROR(Forward(batch, kv, logits.data()));
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * V;
    const bool finite = std::all_of(row, row + V, [](float x) { return std::isfinite(x); });
    ids[r] = finite ? static_cast<int32_t>(std::max_element(row, row + V) - row) : -1;
  }
  return Status::Ok();
}

Status Backend::ForwardTopK(std::span<const BatchSegment> batch, KvMemory& kv, int k, int32_t* ids,
                            float* values) {
  const size_t V = static_cast<size_t>(n_vocab());
  if (k < 1 || k > kMaxTopK || static_cast<size_t>(k) > V)
    return Status::InvalidArgument("top-k of logits rows needs k in [1, " +
                                   std::to_string(std::min<size_t>(kMaxTopK, V)) + "], got " +
                                   std::to_string(k));
  size_t rows = 0;
  for (const BatchSegment& s : batch)
    if (s.logits_from < s.pos0 + s.n_tokens)
      rows += s.pos0 + s.n_tokens - std::max(s.pos0, s.logits_from);
  std::vector<float> logits(rows * V);
  BRAID_RETURN_IF_ERROR(Forward(batch, kv, logits.data()));
  std::vector<int32_t> order(V);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * V;
    for (size_t i = 0; i < V; ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int j = 0; j < k; ++j) {
      ids[r * k + j] = order[j];
      values[r * k + j] = row[order[j]];
    }
    if (!std::all_of(row, row + V, [](float x) { return std::isfinite(x); })) ids[r * k] = -1;
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ExpandDevices(const std::string& device, int tensor_parallel) {
  if (tensor_parallel < 1)
    return Status::InvalidArgument("tensor parallelism must be 1 or more GPUs, got " +
                                   std::to_string(tensor_parallel));
  std::vector<int> gpus;  // a list to group, or empty for one device as given
  const std::string prefix = "cuda:";
  if (device == "cuda:all") {
    int n = 0;
#ifdef BRAID_HAVE_CUDA
    n = CudaDeviceCount();
#endif
    if (n == 0) return Status::InvalidArgument("device 'cuda:all': no GPU is visible");
    for (int i = 0; i < n; ++i) gpus.push_back(i);
  } else if (device.find(',') != std::string::npos && device.compare(0, 5, prefix) == 0) {
    size_t at = prefix.size();
    while (at <= device.size()) {
      size_t comma = device.find(',', at);
      if (comma == std::string::npos) comma = device.size();
      BRAID_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDevice(prefix + device.substr(at, comma - at)));
      if (!spec.group.empty())
        return Status::InvalidArgument("device '" + device +
                                       "': a list of GPUs takes --tp to group them, not '+'");
      if (std::find(gpus.begin(), gpus.end(), spec.index) != gpus.end())
        return Status::InvalidArgument("device '" + device + "': GPU " +
                                       std::to_string(spec.index) + " is listed twice");
      gpus.push_back(spec.index);
      at = comma + 1;
    }
  } else {
    BRAID_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDevice(device));
    if (tensor_parallel == 1) return std::vector<std::string>{device};
    if (spec.kind != DeviceSpec::Kind::kCuda || !spec.group.empty())
      return Status::InvalidArgument("--tp " + std::to_string(tensor_parallel) +
                                     " splits a model over GPUs: give --device cuda:all or a "
                                     "list such as cuda:0,1");
    gpus.push_back(spec.index);
  }
  const int n = static_cast<int>(gpus.size());
  if (n % tensor_parallel != 0)
    return Status::InvalidArgument("device '" + device + "': " + std::to_string(n) +
                                   " GPU(s) do not split into groups of --tp " +
                                   std::to_string(tensor_parallel));
  std::vector<std::string> out;
  for (int g = 0; g < n; g += tensor_parallel) {
    std::string name = prefix;
    for (int i = g; i < g + tensor_parallel; ++i)
      name += (i > g ? "+" : "") + std::to_string(gpus[static_cast<size_t>(i)]);
    out.push_back(name);
  }
  return out;
}

double MeasureDeviceGemmRate(const std::string& device) {
  const Result<DeviceSpec> spec = ParseDevice(device);
  if (!spec.ok() || spec.value().kind != DeviceSpec::Kind::kCuda) return 0;
#ifdef BRAID_HAVE_CUDA
  const Result<double> rate = MeasureCudaGemmRate(spec.value().index);
  return rate.ok() ? rate.value() : 0;
#else
  return 0;
#endif
}

double MeasureDeviceCopyBandwidth(const std::string& device) {
  const Result<DeviceSpec> spec = ParseDevice(device);
  if (!spec.ok() || spec.value().kind != DeviceSpec::Kind::kCuda) return 0;
#ifdef BRAID_HAVE_CUDA
  const Result<double> gbs = MeasureCudaCopyBandwidth(spec.value().index);
  return gbs.ok() ? gbs.value() * 1e9 : 0;
#else
  return 0;
#endif
}

}  // namespace braid
