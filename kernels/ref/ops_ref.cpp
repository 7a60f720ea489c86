// Scalar reference ops (see kernels/ops.h). Sums run in double so the
// reference is more accurate than any SIMD version tested against it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ref/ref.h"

namespace braid::kernels::ref {

// y = x / sqrt(mean(x^2) + eps) * w          x, y, w: [n]
void RmsNorm(const float* x, const float* w, float eps, int64_t n, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

// Rotate pairs by theta_i = pos * inv_freq[i]:
//   (a, b) -> (a cos - b sin, a sin + b cos)
// pairs are (x[2i], x[2i+1]) ("norm") or (x[i], x[i + n_rot/2]) ("neox").   x: [head_dim]
void RopeCosSin(int n_rot, int64_t pos, const float* inv_freq, float* cos, float* sin) {
  for (int i = 0; i < n_rot / 2; ++i) {
    const float theta = static_cast<float>(pos) * inv_freq[i];
    cos[i] = std::cos(theta);
    sin[i] = std::sin(theta);
  }
}

void RopeApply(float* x, int n_rot, const float* cos, const float* sin, bool neox) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cos[i], s = sin[i];
    float* a = neox ? &x[i] : &x[2 * i];
    float* b = neox ? &x[i + half] : &x[2 * i + 1];
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x0 * s + x1 * c;
  }
}

void Rope(float* x, int n_rot, int64_t pos, const float* inv_freq, bool neox) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const float theta = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(theta), s = std::sin(theta);
    float* a = neox ? &x[i] : &x[2 * i];
    float* b = neox ? &x[i + half] : &x[2 * i + 1];
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x0 * s + x1 * c;
  }
}

// x_i = exp(x_i - max) / sum_j exp(x_j - max)      x: [n]
void Softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// out = gate / (1 + exp(-gate)) * up      all: [n]
void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// out = gelu(gate) * up, gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void GeGluTanh(const float* gate, const float* up, int64_t n, float* out) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * up[i];
  }
}

float DotF32(const float* a, const float* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

void Axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

int64_t Argmax(const float* x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
  return best < 0 ? 0 : best;
}

namespace {

// The int8 rows of kQ8 attention (its query heads and its cached K and V):
// s = amax / 127 (NaN left out, as std::max does), element x as round(x / s)
// to nearest even, clamped to [-127, 127], NaN as -127.
struct Sym8Row {
  float scale, inv;
  Sym8Row(const float* x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    scale = amax / 127.0f;
    inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  }
  int8_t operator()(float x) const {
    const float r = std::nearbyint(x * inv);  // |x * inv| <= 127: exact to nearest even
    return static_cast<int8_t>(r >= -127.0f ? std::min(r, 127.0f) : -127.0f);
  }
};

}  // namespace

float QuantizeQuery(const float* q, int head_dim, int8_t* qi, int32_t* sum) {
  const Sym8Row row(q, head_dim);
  *sum = 0;
  for (int d = 0; d < head_dim; ++d) {
    qi[d] = row(q[d]);
    *sum += qi[d];
  }
  return row.scale;
}

float StoreRowQ8(const float* x, int head_dim, int block_size, int slot, bool value,
                 uint8_t* tile) {
  const Sym8Row row(x, head_dim);
  for (int i = 0; i < head_dim; ++i) {
    const int q = row(x[i]);
    if (value) {
      tile[(slot / 4) * 4 * head_dim + 4 * i + slot % 4] =
          static_cast<uint8_t>(static_cast<int8_t>(q));
    } else {
      tile[(i / 4) * 4 * block_size + 4 * slot + i % 4] = static_cast<uint8_t>(q + 128);
    }
  }
  return row.scale;
}

namespace {

// kernels/attention.h's integer attention over a kQ8 cache.
void AttendPagedQ8(const float* q, int n_q, int hd, const PagedKv& kv, int kv_head, int first,
                   int len, float scale, float* scratch, float* out) {
  const auto* k8 = static_cast<const uint8_t*>(kv.k);
  const auto* v8 = static_cast<const int8_t*>(kv.v);
  const int bs = kv.block_size;
  std::vector<int8_t> qi(hd);
  std::vector<int32_t> acc(hd);
  for (int h = 0; h < n_q; ++h) {
    int32_t qsum = 0;
    const float c = QuantizeQuery(q + static_cast<int64_t>(h) * hd, hd, qi.data(), &qsum) * scale;
    float* s = scratch + static_cast<int64_t>(h) * (len - first);  // position j at s[j - first]
    for (int j = first; j < len; ++j) {
      const uint8_t* k = k8 + kv.TileOffset(kv_head, j) + 4 * (j % bs);
      int32_t dot = 0;
      for (int d = 0; d < hd; ++d) dot += static_cast<int32_t>(k[(d / 4) * 4 * bs + d % 4]) * qi[d];
      s[j - first] =
          static_cast<float>(dot - 128 * qsum) * (kv.k_scale[kv.ScaleOffset(kv_head, j)] * c);
    }
    const float mx = *std::max_element(s, s + (len - first));
    double sum = 0.0;
    float wmax = 0.0f;
    for (int j = first; j < len; ++j) {
      const float e = std::exp(s[j - first] - mx);
      sum += e;
      s[j - first] = e * kv.v_scale[kv.ScaleOffset(kv_head, j)];
      wmax = std::max(wmax, s[j - first]);
    }
    const float r = wmax > 0.0f ? 255.0f / wmax : 0.0f;
    const float back = wmax / 255.0f * static_cast<float>(1.0 / sum);
    float* o = out + static_cast<int64_t>(h) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int j0 = first; j0 < len; j0 += kQ8AttentionRun) {
      std::fill(acc.begin(), acc.end(), 0);
      for (int j = j0; j < std::min(len, j0 + kQ8AttentionRun); ++j) {
        const int32_t u =
            static_cast<int32_t>(std::clamp(std::nearbyint(s[j - first] * r), 0.0f, 255.0f));
        const int8_t* v = v8 + kv.TileOffset(kv_head, j) + ((j % bs) / 4) * 4 * hd + j % 4;
        for (int d = 0; d < hd; ++d) acc[d] += u * v[4 * d];
      }
      for (int d = 0; d < hd; ++d) o[d] += static_cast<float>(acc[d]) * back;
    }
  }
}

}  // namespace

void AttendPaged(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head, int len,
                 float scale, float* scratch, float* out) {
  ref::AttendPagedFrom(q, n_q, head_dim, kv, kv_head, 0, len, scale, scratch, out);
}

// s_hj = scale q_h . k_j (fp64 dot), softmax over j in [first, len),
// out_h = sum_j p_hj v_j.
void AttendPagedFrom(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                     int first, int len, float scale, float* scratch, float* out) {
  if (kv.type == KvType::kQ8)
    return AttendPagedQ8(q, n_q, head_dim, kv, kv_head, first, len, scale, scratch, out);
  // Row j of K or V as fp32 (gathered into `buf` when the cache holds fp16 or
  // K tiles are dimension-major).
  std::vector<float> buf(static_cast<size_t>(head_dim));
  auto row = [&](bool k, int j) -> const float* {
    const void* base = k ? kv.k : kv.v;
    const int64_t off = k ? kv.KOffset(kv_head, j) : kv.Offset(kv_head, j);
    const int64_t step = k ? kv.KDimStride() : 1;
    if (kv.type == KvType::kF32 && step == 1) return static_cast<const float*>(base) + off;
    for (int i = 0; i < head_dim; ++i) {
      buf[i] = kv.type == KvType::kF32
                   ? static_cast<const float*>(base)[off + i * step]
                   : Fp16ToFp32(static_cast<const uint16_t*>(base)[off + i * step]);
    }
    return buf.data();
  };
  for (int h = 0; h < n_q; ++h) {
    const int n = len - first;
    float* p = scratch + static_cast<int64_t>(h) * n;
    const float* qh = q + static_cast<int64_t>(h) * head_dim;
    for (int j = 0; j < n; ++j) p[j] = DotF32(qh, row(true, first + j), head_dim) * scale;
    Softmax(p, n);
    float* o = out + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < head_dim; ++i) o[i] = 0.0f;
    for (int j = 0; j < n; ++j) Axpy(p[j], row(false, first + j), head_dim, o);
  }
}

}  // namespace braid::kernels::ref
