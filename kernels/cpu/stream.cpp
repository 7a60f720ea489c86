// The weight-streaming variant in use (kernels/stream.h).
#include "kernels/stream.h"

#include "cpu/kernel_table.h"

namespace braid::kernels {

namespace cpu {
std::atomic<bool> g_stream_temporal{false};
}  // namespace cpu

const char* StreamVariantName(StreamVariant v) {
  return v == StreamVariant::kTemporal ? "t0" : "nt";
}

bool ParseStreamVariant(std::string_view name, StreamVariant* v) {
  if (name == "nt") {
    *v = StreamVariant::kNonTemporal;
  } else if (name == "t0") {
    *v = StreamVariant::kTemporal;
  } else {
    return false;
  }
  return true;
}

StreamVariant CurrentStreamVariant() {
  return cpu::g_stream_temporal.load(std::memory_order_relaxed) ? StreamVariant::kTemporal
                                                                : StreamVariant::kNonTemporal;
}

void SetStreamVariant(StreamVariant v) {
  cpu::g_stream_temporal.store(v == StreamVariant::kTemporal, std::memory_order_relaxed);
}

}  // namespace braid::kernels
