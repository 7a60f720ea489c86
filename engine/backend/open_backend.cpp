// ParseDevice and OpenBackend: a device name to the backend that runs there.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/system_probe.h"
#ifdef BRAID_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
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
  const char* first = device.data() + prefix.size();
  const char* last = device.data() + device.size();
  int index = -1;
  const auto [end, ec] = std::from_chars(first, last, index);
  if (first == last || ec != std::errc() || end != last || index < 0 || index > kMaxDeviceIndex)
    return Status::InvalidArgument("device '" + device + "': the GPU index must be in [0, " +
                                   std::to_string(kMaxDeviceIndex) + "]");
  spec.index = index;
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

Result<std::vector<std::string>> ExpandDevices(const std::string& device) {
  std::vector<std::string> out;
  if (device == "cuda:all") {
    int n = 0;
#ifdef BRAID_HAVE_CUDA
    n = CudaDeviceCount();
#endif
    if (n == 0) return Status::InvalidArgument("device 'cuda:all': no GPU is visible");
    for (int i = 0; i < n; ++i) out.push_back("cuda:" + std::to_string(i));
    return out;
  }
  const std::string prefix = "cuda:";
  if (device.find(',') == std::string::npos || device.compare(0, prefix.size(), prefix) != 0) {
    BRAID_RETURN_IF_ERROR(ParseDevice(device).status());
    return std::vector<std::string>{device};
  }
  std::vector<int> seen;
  size_t at = prefix.size();
  while (at <= device.size()) {
    size_t comma = device.find(',', at);
    if (comma == std::string::npos) comma = device.size();
    const std::string one = prefix + device.substr(at, comma - at);
    BRAID_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDevice(one));
    if (std::find(seen.begin(), seen.end(), spec.index) != seen.end())
      return Status::InvalidArgument("device '" + device + "': GPU " + std::to_string(spec.index) +
                                     " is listed twice");
    seen.push_back(spec.index);
    out.push_back(one);
    at = comma + 1;
  }
  return out;
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
