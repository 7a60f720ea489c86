#include "model/model_config.h"

#include <algorithm>
#include <cmath>

#include "model/family.h"

namespace braid {

const char* ArchName(Arch a) {
  const Family* f = FindFamily(a);
  return f != nullptr ? f->gguf_arch : "unknown";
}

bool ModelConfig::Has(Op op) const {
  return std::any_of(block.begin(), block.end(), [&](const BlockOp& o) { return o.op == op; });
}

Activation ModelConfig::GateActivation() const { return braid::GateActivation(block); }

float ModelConfig::AttnScale() const {
  return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::vector<float> RopeInverseFrequencies(const ModelConfig& c, bool local) {
  const double base = local && c.rope_local_base > 0.0f ? c.rope_local_base : c.rope_base;
  std::vector<float> f(c.n_rot / 2);
  for (int i = 0; i < c.n_rot / 2; ++i)
    f[i] = static_cast<float>(std::pow(base, -2.0 * i / c.n_rot));
  const RopeScaling& s = c.rope_scaling;
  if (s.factor > 0.0f && !local) {
    const double pi = 3.14159265358979323846;
    const double low_wavelen = s.original_context / s.low_freq_factor;
    const double high_wavelen = s.original_context / s.high_freq_factor;
    for (float& freq : f) {
      const double wavelen = 2 * pi / freq;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        freq = static_cast<float>(freq / s.factor);
      } else {
        const double smooth = (s.original_context / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        freq = static_cast<float>((1 - smooth) * freq / s.factor + smooth * freq);
      }
    }
  }
  return f;
}

}  // namespace braid
