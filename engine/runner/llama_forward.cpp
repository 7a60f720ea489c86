#include "runner/llama_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace braid {

using kernels::DType;
using kernels::ThreadPool;

namespace {

// base^(-2i/n_rot) for i < n_rot/2, with Llama 3 frequency scaling when set:
// long wavelengths are divided by `factor`, short ones kept, the band between
// interpolated smoothly (Meta's reference implementation).
std::vector<float> InverseFrequencies(const ModelConfig& c) {
  std::vector<float> f(c.n_rot / 2);
  for (int i = 0; i < c.n_rot / 2; ++i)
    f[i] = static_cast<float>(std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.n_rot));
  const RopeScaling& s = c.rope_scaling;
  if (s.factor > 0.0f) {
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

bool SameActivation(const kernels::MatrixView& a, const kernels::MatrixView& b,
                    kernels::ActPrecision p) {
  return kernels::ActivationType(a.type, p) == kernels::ActivationType(b.type, p);
}

void Range(int64_t n, int parts, int i, int64_t align, int64_t* b, int64_t* e) {
  ThreadPool::Split(n, parts, i, align, b, e);
}

}  // namespace

LlamaForward::LlamaForward(const ModelConfig& config, const LlamaWeights& weights,
                           ThreadPool& pool, const ModelOptions& options, int max_chunk,
                           int max_context)
    : c_(config), w_(weights), pool_(pool), exact_(options.exact),
      act_precision_(options.precision == ModelOptions::Precision::kInt8
                         ? kernels::ActPrecision::kInt8
                         : kernels::ActPrecision::kSplit16),
      kv_cache_(options.kv_cache),
      max_chunk_(max_chunk) {
  q_dim_ = c_.n_head * c_.head_dim;
  kv_dim_ = c_.n_head_kv * c_.head_dim;
  inv_freq_ = InverseFrequencies(c_);
  const size_t m = static_cast<size_t>(max_chunk_);
  x_.resize(m * c_.n_embd);
  xn_.resize(m * c_.n_embd);
  q_.resize(m * q_dim_);
  k_.resize(m * kv_dim_);
  v_.resize(m * kv_dim_);
  att_.resize(m * q_dim_);
  h_.resize(m * c_.n_ff);
  up_.resize(m * c_.n_ff);
  // Per thread: a dequantized row, or the scores of a GQA group's heads.
  const int group = c_.n_head / std::max(c_.n_head_kv, 1);
  const int width = std::max({c_.n_embd, c_.n_ff, q_dim_, group * max_context, 1});
  scratch_.assign(pool_.size(), std::vector<float>(static_cast<size_t>(width) + 64));
  // Quantized activation buffers: max_chunk rows of the widest input each
  // buffer receives (sized once here, not per forward pass).
  auto ensure = [&](std::vector<uint8_t>& buf, const kernels::MatrixView& w) {
    if (exact_) return;
    const size_t need =
        m * kernels::RowBytes(kernels::ActivationType(w.type, act_precision_), w.cols);
    if (buf.size() < need) buf.resize(need);
  };
  for (const LayerWeights& l : w_.layers) {
    for (const auto* mv : {&l.wq, &l.wk, &l.wv, &l.w_gate, &l.w_up}) ensure(xq_, *mv);
    ensure(xq_k_, l.wk);
    ensure(xq_k_, l.w_up);
    ensure(xq_v_, l.wv);
    ensure(attq_, l.wo);
    ensure(hq_, l.w_down);
  }
  ensure(xq_, w_.output);
  // Prepared activation buffers: max_chunk rows of the input width each receives.
  if (!exact_) {
    prep_in_.resize(kernels::PreparedBytes(c_.n_embd, m));
    prep_att_.resize(kernels::PreparedBytes(q_dim_, m));
    prep_h_.resize(kernels::PreparedBytes(c_.n_ff, m));
  }
  n_sites_ = c_.n_layer * kSitesPerLayer + 1;
  claims_ = std::make_unique<Claim[]>(static_cast<size_t>(n_sites_));
}

void LlamaForward::Embed(int tid, int n, const int32_t* tokens) {
  int64_t b, e;
  Range(n, pool_.size(), tid, 1, &b, &e);
  const TensorInfo& t = *w_.token_embd;
  const size_t row = kernels::RowBytes(t.type, c_.n_embd);
  for (int64_t i = b; i < e; ++i)
    kernels::DequantizeRow(t.type, static_cast<const uint8_t*>(t.data) + row * tokens[i],
                           &x_[i * c_.n_embd], c_.n_embd);
}

void LlamaForward::Normalize(int tid, int n, const std::vector<float>& w, const float* in,
                             float* out) {
  int64_t b, e;
  Range(n, pool_.size(), tid, 1, &b, &e);
  for (int64_t i = b; i < e; ++i)
    kernels::RmsNorm(in + i * c_.n_embd, w.data(), c_.rms_eps, c_.n_embd, out + i * c_.n_embd);
}

// in: [n, cols] fp32 -> out: [n] rows quantized for `weight_type`'s dot product.
void LlamaForward::Quantize(int tid, int n, int64_t cols, const float* in, DType weight_type,
                            std::vector<uint8_t>& out) {
  if (exact_) return;
  const DType act = kernels::ActivationType(weight_type, act_precision_);
  const size_t row = kernels::RowBytes(act, cols);
  int64_t b, e;
  Range(n, pool_.size(), tid, 1, &b, &e);
  for (int64_t i = b; i < e; ++i) kernels::QuantizeActivations(act, in + i * cols, &out[i * row], cols);
}

// y[t, r] = W[r] . x[t] for r in [r0, r1): from the prepared activations
// `prep` when given, else from the quantized rows (or fp32 on the exact path).
void LlamaForward::MatMulRows(int tid, const kernels::MatrixView& w, int n, const float* x,
                              const std::vector<uint8_t>& xq, const uint8_t* prep, float* y,
                              int64_t ldy, int64_t r0, int64_t r1) {
  if (r0 >= r1) return;
  if (exact_) {
    kernels::MatMulF32(w, x, n, r0, r1, y, ldy, scratch_[tid].data());
    return;
  }
  const DType act = kernels::ActivationType(w.type, act_precision_);
  if (prep != nullptr) {
    kernels::MatMulPrepared(w, act, prep, n, r0, r1, y, ldy);
  } else {
    kernels::MatMulQuantized(w, act, xq.data(), kernels::RowBytes(act, w.cols), n, r0, r1, y, ldy);
  }
}

// x[t, r] += (W x_in)[t, r] for rows [r0, r1): the prepared path adds in the
// matmul's own store, the others through xn_ (the same fp32 sum either way).
void LlamaForward::AddMatMulRows(int tid, const kernels::MatrixView& w, int n, const float* x,
                                 const std::vector<uint8_t>& xq, const uint8_t* prep, int64_t r0, int64_t r1) {
  const int64_t E = c_.n_embd;
  if (prep != nullptr && !exact_) {
    kernels::MatMulPrepared(w, kernels::ActivationType(w.type, act_precision_), prep, n, r0, r1, x_.data(), E,
                            /*accumulate=*/true);
    return;
  }
  MatMulRows(tid, w, n, x, xq, prep, xn_.data(), E, r0, r1);
  for (int t = 0; t < n; ++t)
    for (int64_t r = r0; r < r1; ++r) x_[t * E + r] += xn_[t * E + r];
}

// Prepares this thread's token rows (the same rows Quantize gave it) of `xq`
// for `w` into `prep`; false (nothing done) where `w` has no prepared path.
bool LlamaForward::Prepare(int tid, int n, const kernels::MatrixView& w,
                           const std::vector<uint8_t>& xq, std::vector<uint8_t>& prep) {
  if (exact_) return false;
  const DType act = kernels::ActivationType(w.type, act_precision_);
  if (!kernels::HasPreparedPath(w, act)) return false;
  if (prep.size() < kernels::PreparedBytes(w.cols, max_chunk_)) return false;  // sized in the constructor
  int64_t b, e;
  Range(n, pool_.size(), tid, 1, &b, &e);
  const size_t row = kernels::RowBytes(act, w.cols);
  if (e > b)
    kernels::PrepareRows(w, act, xq.data() + b * row, row, static_cast<int>(b), static_cast<int>(e), n, prep.data());
  return true;
}

// Whether `w` can use the rows prepared for `prepared_for` (same kernels, same input).
bool LlamaForward::SharesPrepared(const kernels::MatrixView& w, const kernels::MatrixView& prepared_for) const {
  return w.type == prepared_for.type && w.cols == prepared_for.cols && w.layout == prepared_for.layout;
}

// Adds query head h's bias and rotates it (token t of the batch).
void LlamaForward::RopeQuery(const LayerWeights& l, int t, int h) {
  const int hd = c_.head_dim;
  const size_t half = static_cast<size_t>(c_.n_rot / 2);
  float* q = &q_[static_cast<size_t>(t) * q_dim_ + static_cast<size_t>(h) * hd];
  if (!l.bq.empty()) for (int i = 0; i < hd; ++i) q[i] += l.bq[h * hd + i];
  kernels::RopeApply(q, c_.n_rot, &rope_cos_[t * half], &rope_sin_[t * half], c_.rope_neox);
}

// Adds KV head g's biases, rotates k, and stores k and v at token t's position.
void LlamaForward::RopeStoreKv(const LayerWeights& l, int layer, int t, int g, KvStore& kv) {
  const int hd = c_.head_dim;
  const size_t half = static_cast<size_t>(c_.n_rot / 2);
  float* k = &k_[static_cast<size_t>(t) * kv_dim_ + static_cast<size_t>(g) * hd];
  float* v = &v_[static_cast<size_t>(t) * kv_dim_ + static_cast<size_t>(g) * hd];
  if (!l.bk.empty()) for (int i = 0; i < hd; ++i) k[i] += l.bk[g * hd + i];
  if (!l.bv.empty()) for (int i = 0; i < hd; ++i) v[i] += l.bv[g * hd + i];
  kernels::RopeApply(k, c_.n_rot, &rope_cos_[t * half], &rope_sin_[t * half], c_.rope_neox);
  const int bs = kv.block_size(), pos = pos_[t];
  kv.Put(false, layer, table_[t][pos / bs], pos % bs, g, k);
  kv.Put(true, layer, table_[t][pos / bs], pos % bs, g, v);
}

// Biases, rotations and K/V stores of every token, split over the threads.
void LlamaForward::RopeAndStore(int tid, const LayerWeights& l, int layer, int n, KvStore& kv) {
  const int heads = c_.n_head + c_.n_head_kv;
  int64_t b, e;
  Range(static_cast<int64_t>(n) * heads, pool_.size(), tid, 1, &b, &e);
  for (int64_t it = b; it < e; ++it) {
    const int t = static_cast<int>(it / heads), h = static_cast<int>(it % heads);
    if (h < c_.n_head) {
      RopeQuery(l, t, h);
    } else {
      RopeStoreKv(l, layer, t, h - c_.n_head, kv);
    }
  }
}

// Whether Attention does RopeAndStore's work itself (AttentionFuses).
bool LlamaForward::AttentionFuses(int n, bool decode_only) const {
  return decode_only && static_cast<int64_t>(n) * c_.n_head_kv >= 4 * pool_.size();
}

// Causal attention of every (token, head) of the batch over its own
// sequence's cache: att[t, h] = sum_j softmax_j(q.k_j / sqrt(hd)) v_j, j <= pos(t).
// The work items are (token, KV head) with the GQA group's query heads
// together (K and V read once for them), or single heads when there are too
// few items to keep every thread busy; a head's numbers are the same either
// way (kernels/attention.h), so the split never changes them. Threads claim
// runs of items from counter `site` as they finish (a slower core does less).
// With `fused` (AttentionFuses: every token is its sequence's only one in the
// batch, items of whole groups) an item first rotates and stores its own
// token's K/V head and rotates its query heads: no other item reads them.
void LlamaForward::Attention(int tid, const LayerWeights& l, int layer, int site, int n, bool fused,
                             KvStore& kv) {
  const int hd = c_.head_dim;
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* scratch = scratch_[tid].data();
  const int64_t grouped = static_cast<int64_t>(n) * c_.n_head_kv;
  const int per_item = grouped >= 4 * pool_.size() ? group : 1;
  const int items_per_token = c_.n_head / per_item;
  kernels::PagedKv pk = kv.Layer(layer);
  const int64_t items = static_cast<int64_t>(n) * items_per_token;
  const int64_t run = std::max<int64_t>(1, items / (8 * pool_.size()));
  std::atomic<int64_t>& counter = claims_[site].next;
  for (int64_t c = counter.fetch_add(1, std::memory_order_relaxed); c * run < items;
       c = counter.fetch_add(1, std::memory_order_relaxed)) {
    for (int64_t it = c * run; it < std::min(items, (c + 1) * run); ++it) {
      const int t = static_cast<int>(it / items_per_token);
      const int h = static_cast<int>(it % items_per_token) * per_item;  // first query head
      if (fused) {
        RopeStoreKv(l, layer, t, h / group, kv);
        for (int i = 0; i < per_item; ++i) RopeQuery(l, t, h + i);
      }
      pk.block_table = table_[t];
      const size_t off = static_cast<size_t>(t) * q_dim_ + static_cast<size_t>(h) * hd;
      kernels::AttendPaged(&q_[off], per_item, hd, pk, h / group, pos_[t] + 1, scale, scratch,
                           &att_[off]);
    }
  }
}

void LlamaForward::Forward(std::span<const BatchSegment> batch, KvStore& kv, float* logits) {
  // Flatten the batch: one row per new token.
  ids_.clear();
  pos_.clear();
  table_.clear();
  out_rows_.clear();
  for (const BatchSegment& seg : batch) {
    for (int i = 0; i < seg.n_tokens; ++i) {
      if (seg.pos0 + i >= seg.logits_from)
        out_rows_.push_back(static_cast<int>(ids_.size()));
      ids_.push_back(seg.tokens[i]);
      pos_.push_back(seg.pos0 + i);
      table_.push_back(seg.block_table);
    }
  }
  const int n = static_cast<int>(ids_.size());
  const int E = c_.n_embd;
  // RoPE angles per token, shared by every head and layer.
  const size_t half = static_cast<size_t>(c_.n_rot / 2);
  rope_cos_.resize(n * half);
  rope_sin_.resize(n * half);
  for (int t = 0; t < n; ++t)
    kernels::RopeCosSin(c_.n_rot, pos_[t], inv_freq_.data(), &rope_cos_[t * half], &rope_sin_[t * half]);
  const int n_out = static_cast<int>(out_rows_.size());

  for (int i = 0; i < n_sites_; ++i) claims_[i].next.store(0, std::memory_order_relaxed);
  const bool decode_only = std::all_of(batch.begin(), batch.end(),
                                       [](const BatchSegment& s) { return s.n_tokens == 1; });
  const bool fuse_attention = AttentionFuses(n, decode_only);

  pool_.Run([&](int tid) {
    Embed(tid, n, ids_.data());
    pool_.Barrier();
    for (int layer = 0; layer < c_.n_layer; ++layer) {
      const LayerWeights& l = w_.layers[layer];
      const int site = layer * kSitesPerLayer;
      // Attention block.
      Normalize(tid, n, l.attn_norm, x_.data(), xn_.data());
      Quantize(tid, n, E, xn_.data(), l.wq.type, xq_);
      // K and V usually share Q's activation type; quantize again if not.
      const bool k_same = SameActivation(l.wk, l.wq, act_precision_);
      const bool v_same = SameActivation(l.wv, l.wq, act_precision_);
      if (!k_same) Quantize(tid, n, E, xn_.data(), l.wk.type, xq_k_);
      if (!v_same) Quantize(tid, n, E, xn_.data(), l.wv.type, xq_v_);
      const bool q_prep = Prepare(tid, n, l.wq, xq_, prep_in_);
      pool_.Barrier();
      // Q, K and V rows in chunks taken by whichever thread is free (on the
      // prepared path; else each thread its share). No barrier between them.
      auto qkv = [&](const kernels::MatrixView& w, bool same, const std::vector<uint8_t>& xq, float* y,
                     int64_t ldy, int s) {
        const uint8_t* prep = q_prep && same && SharesPrepared(w, l.wq) ? prep_in_.data() : nullptr;
        ForRows(tid, s, w.rows, n, prep != nullptr, [&](int64_t r0, int64_t r1) {
          MatMulRows(tid, w, n, xn_.data(), xq, prep, y, ldy, r0, r1);
        });
      };
      qkv(l.wq, true, xq_, q_.data(), q_dim_, site + 0);
      qkv(l.wk, k_same, k_same ? xq_ : xq_k_, k_.data(), kv_dim_, site + 1);
      qkv(l.wv, v_same, v_same ? xq_ : xq_v_, v_.data(), kv_dim_, site + 2);
      pool_.Barrier();
      if (!fuse_attention) {
        RopeAndStore(tid, l, layer, n, kv);
        pool_.Barrier();
      }
      Attention(tid, l, layer, site + 6, n, fuse_attention, kv);
      pool_.Barrier();
      Quantize(tid, n, q_dim_, att_.data(), l.wo.type, attq_);
      const bool o_prep = Prepare(tid, n, l.wo, attq_, prep_att_);
      pool_.Barrier();
      // x += Wo * att, each chunk adding its own output rows.
      ForRows(tid, site + 3, l.wo.rows, n, o_prep, [&](int64_t r0, int64_t r1) {
        AddMatMulRows(tid, l.wo, n, att_.data(), attq_, o_prep ? prep_att_.data() : nullptr, r0, r1);
      });
      pool_.Barrier();
      // Feed-forward block.
      Normalize(tid, n, l.ffn_norm, x_.data(), xn_.data());
      Quantize(tid, n, E, xn_.data(), l.w_gate.type, xq_);
      const bool up_same = SameActivation(l.w_up, l.w_gate, act_precision_);
      if (!up_same) Quantize(tid, n, E, xn_.data(), l.w_up.type, xq_k_);
      const bool g_prep = Prepare(tid, n, l.w_gate, xq_, prep_in_) && up_same && SharesPrepared(l.w_up, l.w_gate);
      pool_.Barrier();
      // Gate and up rows of a chunk together, then SwiGLU on them.
      ForRows(tid, site + 4, l.w_gate.rows, n, g_prep, [&](int64_t r0, int64_t r1) {
        const uint8_t* prep = g_prep ? prep_in_.data() : nullptr;
        MatMulRows(tid, l.w_gate, n, xn_.data(), xq_, prep, h_.data(), c_.n_ff, r0, r1);
        MatMulRows(tid, l.w_up, n, xn_.data(), up_same ? xq_ : xq_k_, prep, up_.data(), c_.n_ff, r0, r1);
        for (int t = 0; t < n; ++t)
          kernels::SwiGlu(&h_[t * c_.n_ff + r0], &up_[t * c_.n_ff + r0], r1 - r0, &h_[t * c_.n_ff + r0]);
      });
      pool_.Barrier();
      Quantize(tid, n, c_.n_ff, h_.data(), l.w_down.type, hq_);
      const bool d_prep = Prepare(tid, n, l.w_down, hq_, prep_h_);
      pool_.Barrier();
      ForRows(tid, site + 5, l.w_down.rows, n, d_prep, [&](int64_t r0, int64_t r1) {
        AddMatMulRows(tid, l.w_down, n, h_.data(), hq_, d_prep ? prep_h_.data() : nullptr, r0, r1);
      });
      pool_.Barrier();
    }
    // Output head on the requested rows, gathered into xn_.
    if (n_out == 0) return;
    {
      int64_t b, e;
      Range(n_out, pool_.size(), tid, 1, &b, &e);
      for (int64_t i = b; i < e; ++i)
        kernels::RmsNorm(&x_[static_cast<size_t>(out_rows_[i]) * E], w_.output_norm.data(),
                         c_.rms_eps, E, &xn_[i * E]);
    }
    Quantize(tid, n_out, E, xn_.data(), w_.output.type, xq_);
    const bool h_prep = Prepare(tid, n_out, w_.output, xq_, prep_in_);
    pool_.Barrier();
    ForRows(tid, c_.n_layer * kSitesPerLayer, w_.output.rows, n_out, h_prep, [&](int64_t r0, int64_t r1) {
      MatMulRows(tid, w_.output, n_out, xn_.data(), xq_, h_prep ? prep_in_.data() : nullptr, logits,
                 c_.n_vocab, r0, r1);
    });
  });
}

}  // namespace braid
