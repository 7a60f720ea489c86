#include "backend/cpu/llama_forward.h"

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

bool SameActivation(const kernels::MatrixView& a, const kernels::MatrixView& b,
                    kernels::ActPrecision p) {
  return kernels::ActivationType(a.type, p) == kernels::ActivationType(b.type, p);
}

void Range(int64_t n, int parts, int i, int64_t align, int64_t* b, int64_t* e) {
  ThreadPool::Split(n, parts, i, align, b, e);
}

}  // namespace

LlamaForward::LlamaForward(const ModelConfig& config, const LlamaWeights& weights, ThreadPool& pool,
                           const CpuOptions& options, int max_chunk, int max_context)
    : c_(config),
      w_(weights),
      pool_(pool),
      exact_(options.exact),
      act_precision_(options.precision == CpuOptions::Precision::kInt8
                         ? kernels::ActPrecision::kInt8
                         : kernels::ActPrecision::kSplit16),
      kv_cache_(options.kv_cache),
      max_chunk_(max_chunk),
      profile_(options.profile_stages),
      clocks_(static_cast<size_t>(pool.capacity())) {
  // OpenCpuBackend refused a block this backend cannot plan.
  Result<std::vector<PlannedStep>> plan = Plan(c_);
  if (plan.ok()) plan_ = std::move(plan.value());
  q_dim_ = c_.n_head * c_.head_dim;
  kv_dim_ = c_.n_head_kv * c_.head_dim;
  inv_freq_ = RopeInverseFrequencies(c_);
  if (c_.sliding_window > 0) inv_freq_local_ = RopeInverseFrequencies(c_, /*local=*/true);
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
  scratch_.assign(pool_.capacity(), std::vector<float>(static_cast<size_t>(width) + 64));
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
    // (A region per thread, for teams of one thread each: PreparedFor.)
    const size_t threads = static_cast<size_t>(pool_.capacity());
    prep_in_.resize(threads * kernels::PreparedBytes(c_.n_embd, max_chunk_));
    prep_att_.resize(threads * kernels::PreparedBytes(q_dim_, max_chunk_));
    prep_h_.resize(threads * kernels::PreparedBytes(c_.n_ff, max_chunk_));
  }
  claims_ = std::make_unique<Claim[]>(static_cast<size_t>(c_.n_layer));
}

const char* LlamaForward::StageName(int stage) {
  static constexpr const char* kNames[kStages] = {"norm, quantize (QKV input)",
                                                  "Q, K, V matmuls",
                                                  "attention",
                                                  "Wo",
                                                  "norm, quantize (FFN input)",
                                                  "gate, up, SwiGLU",
                                                  "down",
                                                  "wait for other teams",
                                                  "output head"};
  return stage >= 0 && stage < kStages ? kNames[stage] : "?";
}

void LlamaForward::Embed(const Team& tm) {
  int64_t b, e;
  Range(tm.n, tm.size, tm.index, 1, &b, &e);
  const TensorInfo& t = *w_.token_embd;
  const size_t row = kernels::RowBytes(t.type, c_.n_embd);
  for (int64_t i = tm.t0 + b; i < tm.t0 + e; ++i) {
    float* x = &x_[i * c_.n_embd];
    kernels::DequantizeRow(t.type, static_cast<const uint8_t*>(t.data) + row * ids_[i], x,
                           c_.n_embd);
    if (c_.embed_scale != 1.0f)
      for (int j = 0; j < c_.n_embd; ++j) x[j] *= c_.embed_scale;
  }
}

// Rows [0, n) of in (the team's, E wide) -> out, RMS-normalized.
void LlamaForward::Normalize(const Team& tm, int n, const std::vector<float>& w, const float* in,
                             float* out) {
  int64_t b, e;
  Range(n, tm.size, tm.index, 1, &b, &e);
  for (int64_t i = b; i < e; ++i)
    kernels::RmsNorm(in + i * c_.n_embd, w.data(), c_.rms_eps, c_.n_embd, out + i * c_.n_embd);
}

// in: n rows of w.cols fp32 (the team's) -> `out`: the same rows quantized
// for w's dot product (QuantizedRows).
void LlamaForward::Quantize(const Team& tm, int n, const kernels::MatrixView& w, const float* in,
                            uint8_t* out) {
  if (exact_) return;
  const DType act = kernels::ActivationType(w.type, act_precision_);
  const size_t row = kernels::RowBytes(act, w.cols);
  int64_t b, e;
  Range(n, tm.size, tm.index, 1, &b, &e);
  for (int64_t i = b; i < e; ++i)
    kernels::QuantizeActivations(act, in + i * w.cols, out + i * row, w.cols);
}

// The team's rows of `buf`, a buffer of activation rows quantized for w
// (nullptr on the exact path, which quantizes nothing).
uint8_t* LlamaForward::QuantizedRows(const Team& tm, std::vector<uint8_t>& buf,
                                     const kernels::MatrixView& w) const {
  if (exact_) return nullptr;
  return buf.data() +
         static_cast<size_t>(tm.t0) *
             kernels::RowBytes(kernels::ActivationType(w.type, act_precision_), w.cols);
}

// y[t, r] = W[r] . x[t] for the n tokens at x / xq / y (the team's rows) and r
// in [r0, r1): from the prepared activations `prep` when given, else from the
// quantized rows (or fp32 on the exact path).
void LlamaForward::MatMulRows(const Team& tm, const kernels::MatrixView& w, int n, const float* x,
                              const uint8_t* xq, const uint8_t* prep, float* y, int64_t ldy,
                              int64_t r0, int64_t r1) {
  if (r0 >= r1) return;
  if (exact_) {
    kernels::MatMulF32(w, x, n, r0, r1, y, ldy, scratch_[tm.tid].data());
    return;
  }
  const DType act = kernels::ActivationType(w.type, act_precision_);
  if (prep != nullptr) {
    kernels::MatMulPrepared(w, act, prep, n, r0, r1, y, ldy);
  } else {
    kernels::MatMulQuantized(w, act, xq, kernels::RowBytes(act, w.cols), n, r0, r1, y, ldy);
  }
}

// x[t, r] += (W x_in)[t, r] for the team's tokens and rows [r0, r1): the
// prepared path adds in the matmul's own store, the others through xn_ (the
// same fp32 sum either way).
void LlamaForward::AddMatMulRows(const Team& tm, const kernels::MatrixView& w, const float* x,
                                 const uint8_t* xq, const uint8_t* prep, int64_t r0, int64_t r1) {
  const int64_t E = c_.n_embd;
  float* xt = x_.data() + tm.t0 * E;
  if (prep != nullptr && !exact_) {
    kernels::MatMulPrepared(w, kernels::ActivationType(w.type, act_precision_), prep, tm.n, r0, r1,
                            xt, E,
                            /*accumulate=*/true);
    return;
  }
  float* yt = xn_.data() + tm.t0 * E;
  MatMulRows(tm, w, tm.n, x, xq, prep, yt, E, r0, r1);
  for (int t = 0; t < tm.n; ++t)
    for (int64_t r = r0; r < r1; ++r) xt[t * E + r] += yt[t * E + r];
}

// x += W in for the team's tokens: `in` quantized into the team's rows of
// q_buf and prepared into `prep`, then each thread's share of W's rows
// (ForRows) adding its own output rows. With `post_norm` (post_norms), W in
// goes to xn_ first, and each token's row is RMS-normalized, then added.
void LlamaForward::AddProjection(const Team& tm, const kernels::MatrixView& w, const float* in,
                                 std::vector<uint8_t>& q_buf, uint8_t* prep,
                                 const std::vector<float>& post_norm) {
  uint8_t* xq = QuantizedRows(tm, q_buf, w);
  Quantize(tm, tm.n, w, in, xq);
  const bool prepared = Prepare(tm, tm.n, w, xq, prep);
  Sync(tm);
  if (post_norm.empty()) {
    ForRows(tm, w.rows, [&](int64_t r0, int64_t r1) {
      AddMatMulRows(tm, w, in, xq, prepared ? prep : nullptr, r0, r1);
    });
    Sync(tm);
    return;
  }
  const int64_t E = c_.n_embd;
  float* yt = xn_.data() + tm.t0 * E;
  ForRows(tm, w.rows, [&](int64_t r0, int64_t r1) {
    MatMulRows(tm, w, tm.n, in, xq, prepared ? prep : nullptr, yt, E, r0, r1);
  });
  Sync(tm);
  float* xt = x_.data() + tm.t0 * E;
  int64_t b, e;
  Range(tm.n, tm.size, tm.index, 1, &b, &e);
  for (int64_t t = b; t < e; ++t) {
    kernels::RmsNorm(yt + t * E, post_norm.data(), c_.rms_eps, E, yt + t * E);
    for (int64_t r = 0; r < E; ++r) xt[t * E + r] += yt[t * E + r];
  }
  Sync(tm);
}

uint8_t* LlamaForward::PreparedFor(const Team& tm, std::vector<uint8_t>& prep, int64_t cols) const {
  if (exact_) return nullptr;  // the exact path prepares nothing
  // One region of max_chunk tokens per thread; a team of all threads uses the first.
  const size_t region = tm.size == 1 ? static_cast<size_t>(tm.tid) : 0;
  return prep.data() + region * kernels::PreparedBytes(cols, max_chunk_);
}

// Prepares this thread's share of the team's n token rows of `xq` (those
// Quantize gave it) for `w` into the team's region `prep`; false (nothing
// done) where `w` has no prepared path.
bool LlamaForward::Prepare(const Team& tm, int n, const kernels::MatrixView& w, const uint8_t* xq,
                           uint8_t* prep) {
  if (exact_) return false;
  const DType act = kernels::ActivationType(w.type, act_precision_);
  if (!kernels::HasPreparedPath(w, act)) return false;
  int64_t b, e;
  Range(n, tm.size, tm.index, 1, &b, &e);
  const size_t row = kernels::RowBytes(act, w.cols);
  if (e > b)
    kernels::PrepareRows(w, act, xq + b * row, row, static_cast<int>(b), static_cast<int>(e), n,
                         prep);
  return true;
}

// Whether `w` can use the rows prepared for `prepared_for` (same kernels, same input).
bool LlamaForward::SharesPrepared(const kernels::MatrixView& w,
                                  const kernels::MatrixView& prepared_for) const {
  return w.type == prepared_for.type && w.cols == prepared_for.cols &&
         w.layout == prepared_for.layout;
}

const float* LlamaForward::RopeCos(int layer, int t) const {
  const size_t at = static_cast<size_t>(t) * (c_.n_rot / 2);
  return c_.Sliding(layer) ? &rope_cos_local_[at] : &rope_cos_[at];
}
const float* LlamaForward::RopeSin(int layer, int t) const {
  const size_t at = static_cast<size_t>(t) * (c_.n_rot / 2);
  return c_.Sliding(layer) ? &rope_sin_local_[at] : &rope_sin_[at];
}

// Adds query head h's bias, normalizes it (qk_norm) and rotates it (token t
// of the batch).
void LlamaForward::RopeQuery(const LayerWeights& l, int layer, int t, int h, bool qk_norm) {
  const int hd = c_.head_dim;
  float* q = &q_[static_cast<size_t>(t) * q_dim_ + static_cast<size_t>(h) * hd];
  if (!l.bq.empty())
    for (int i = 0; i < hd; ++i) q[i] += l.bq[h * hd + i];
  if (qk_norm) kernels::RmsNorm(q, l.q_norm.data(), c_.rms_eps, hd, q);
  kernels::RopeApply(q, c_.n_rot, RopeCos(layer, t), RopeSin(layer, t), c_.rope_neox);
}

// Adds KV head g's biases, normalizes k (qk_norm), rotates it, and stores k
// and v at token t's position.
void LlamaForward::RopeStoreKv(const LayerWeights& l, int layer, int t, int g, bool qk_norm,
                               KvStore& kv) {
  const int hd = c_.head_dim;
  float* k = &k_[static_cast<size_t>(t) * kv_dim_ + static_cast<size_t>(g) * hd];
  float* v = &v_[static_cast<size_t>(t) * kv_dim_ + static_cast<size_t>(g) * hd];
  if (!l.bk.empty())
    for (int i = 0; i < hd; ++i) k[i] += l.bk[g * hd + i];
  if (!l.bv.empty())
    for (int i = 0; i < hd; ++i) v[i] += l.bv[g * hd + i];
  if (qk_norm) kernels::RmsNorm(k, l.k_norm.data(), c_.rms_eps, hd, k);
  kernels::RopeApply(k, c_.n_rot, RopeCos(layer, t), RopeSin(layer, t), c_.rope_neox);
  const int bs = kv.block_size(), pos = pos_[t];
  const int32_t block = Table(kv, layer, t)[pos / bs];
  kv.Put(false, layer, block, pos % bs, g, k);
  kv.Put(true, layer, block, pos % bs, g, v);
}

// Biases, rotations and K/V stores of the team's tokens, split over its threads.
void LlamaForward::RopeAndStore(const Team& tm, const LayerWeights& l, int layer, bool qk_norm,
                                KvStore& kv) {
  const int heads = c_.n_head + c_.n_head_kv;
  int64_t b, e;
  Range(static_cast<int64_t>(tm.n) * heads, tm.size, tm.index, 1, &b, &e);
  for (int64_t it = b; it < e; ++it) {
    const int t = tm.t0 + static_cast<int>(it / heads), h = static_cast<int>(it % heads);
    if (h < c_.n_head) {
      RopeQuery(l, layer, t, h, qk_norm);
    } else {
      RopeStoreKv(l, layer, t, h - c_.n_head, qk_norm, kv);
    }
  }
}

// Whether Attention does RopeAndStore's work itself (see Attention).
bool LlamaForward::AttentionFuses(const Team& tm, bool decode_only) const {
  return decode_only && static_cast<int64_t>(tm.n) * c_.n_head_kv >= 4 * tm.size;
}

// Causal attention of every (token, head) of the team over its own
// sequence's cache: att[t, h] = sum_j softmax_j(q.k_j / sqrt(hd)) v_j, j <= pos(t).
// The work items are (token, KV head) with the GQA group's query heads
// together (K and V read once for them), or single heads when there are too
// few items to keep every thread busy; a head's numbers are the same either
// way (kernels/attention.h), so the split never changes them. The team's
// threads claim runs of items from the layer's counter as they finish (a slower
// core does less). With `fused` (AttentionFuses: every token is its
// sequence's only one in the batch, items of whole groups) an item first
// rotates and stores its own token's K/V head and rotates its query heads: no
// other item reads them.
void LlamaForward::Attention(const Team& tm, const LayerWeights& l, int layer, bool fused,
                             bool qk_norm, KvStore& kv) {
  const int hd = c_.head_dim;
  const int group = c_.n_head / c_.n_head_kv;
  const float scale = c_.AttnScale();
  // Sliding layers attend to the last `window` positions only.
  const int window = c_.Sliding(layer) ? c_.sliding_window : 0;
  float* scratch = scratch_[tm.tid].data();
  const int64_t grouped = static_cast<int64_t>(tm.n) * c_.n_head_kv;
  const int per_item = grouped >= 4 * tm.size ? group : 1;
  const int items_per_token = c_.n_head / per_item;
  kernels::PagedKv pk = kv.Layer(layer);
  const int64_t items = static_cast<int64_t>(tm.n) * items_per_token;
  // Item `it`: token t, query heads [h, h + per_item), KV head h / group.
  auto token = [&](int64_t it) { return tm.t0 + static_cast<int>(it / items_per_token); };
  auto head = [&](int64_t it) { return static_cast<int>(it % items_per_token) * per_item; };
  // An item over its window only: the table's entries before it may have
  // been let go (kv::kNoBlock), so nothing fetches its rows from position 0.
  auto windowed = [&](int64_t it) { return window > 0 && pos_[token(it)] + 1 > window; };
  // Item `it`, the thread's next being `next` (or none: -1).
  auto item = [&](int64_t it, int64_t next) {
    const int t = token(it), h = head(it);
    if (fused) {
      RopeStoreKv(l, layer, t, h / group, qk_norm, kv);
      for (int i = 0; i < per_item; ++i) RopeQuery(l, layer, t, h + i, qk_norm);
    }
    pk.block_table = Table(kv, layer, t);
    const size_t off = static_cast<size_t>(t) * q_dim_ + static_cast<size_t>(h) * hd;
    const int len = pos_[t] + 1;
    if (window > 0 && len > window) {
      kernels::AttendPagedFrom(&q_[off], per_item, hd, pk, h / group, len - window, len, scale,
                               scratch, &att_[off]);
      return;
    }
    const bool ahead = next >= 0 && !windowed(next);
    kernels::AttendNext nx{};
    if (ahead) nx = {Table(kv, layer, token(next)), head(next) / group, pos_[token(next)] + 1};
    kernels::AttendPaged(&q_[off], per_item, hd, pk, h / group, len, scale, scratch, &att_[off],
                         ahead ? &nx : nullptr);
  };
  // Each item's call fetches the next one's rows while it computes (the
  // first item of a run: its K rows before it).
  auto items_from = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    pk.block_table = Table(kv, layer, token(begin));
    if (!windowed(begin))
      kernels::AttendPrefetch(pk, hd, head(begin) / group, pos_[token(begin)] + 1);
    for (int64_t it = begin; it < end; ++it) item(it, it + 1 < end ? it + 1 : -1);
  };
  if (tm.size == 1) {
    items_from(0, items);
    return;
  }
  const int64_t run = std::max<int64_t>(1, items / (8 * tm.size));
  std::atomic<int64_t>& counter = claims_[layer].next;
  for (int64_t c = counter.fetch_add(1, std::memory_order_relaxed); c * run < items;
       c = counter.fetch_add(1, std::memory_order_relaxed))
    items_from(c * run, std::min(items, (c + 1) * run));
}

// Teams of one thread each need this many tokens (fewer, and one thread's
// matmuls would not fill its vector pipes), and about equal work: the largest
// share within this factor of the mean.
constexpr int kMinTeamTokens = 4;
constexpr double kMaxTeamImbalance = 1.25;

void LlamaForward::Teams(std::span<const BatchSegment> batch) {
  const int threads = pool_.size();
  const int n = static_cast<int>(ids_.size());
  teams_.assign(1, Team{});
  teams_[0].size = threads;
  teams_[0].n = n;
  if (threads < 2 || n < kMinTeamTokens * threads) return;
  // A segment's work: its tokens, each with attention over its context (a
  // token's matmuls cost about as much as attention over 4096 positions).
  std::vector<double> cost;
  double total = 0;
  for (const BatchSegment& s : batch) {
    cost.push_back(s.n_tokens * (1.0 + (s.pos0 + s.n_tokens) / 4096.0));
    total += cost.back();
  }
  // Whole segments in order, each team taking them until it reaches its share.
  std::vector<Team> teams;
  size_t seg = 0;
  int t = 0;
  double done = 0;
  for (int k = 0; k < threads; ++k) {
    Team tm;
    tm.tid = k;
    tm.t0 = t;
    double mine = 0;
    const double target = total * (k + 1) / threads;
    while (seg < batch.size() && (k == threads - 1 || done + cost[seg] / 2 <= target)) {
      mine += cost[seg];
      done += cost[seg];
      t += batch[seg].n_tokens;
      ++seg;
    }
    tm.n = t - tm.t0;
    if (tm.n < kMinTeamTokens || mine > kMaxTeamImbalance * total / threads) return;
    teams.push_back(tm);
  }
  teams_ = std::move(teams);
}

Result<std::vector<PlannedStep>> LlamaForward::Plan(const ModelConfig& c) {
  static constexpr StepKind kSteps[] = {
      {kStepNormQkv, runs::kNormQkv},
      {kStepAttention, runs::kRopeAttention},
      {kStepAttention, runs::kQkNormRopeAttention},
      {kStepWo, runs::kWoAdd},
      {kStepWo, runs::kWoPostNormAdd},
      {kStepNormGateUp, runs::kNormGateUp},
      {kStepDown, runs::kDownAdd},
      {kStepDown, runs::kDownPostNormAdd},
  };
  return PlanBlock(c.block, kSteps, ArchName(c.arch), "the CPU backend");
}

// A step's norm weight: the one of its op `i` (a norm, or a post norm whose
// absence leaves the step's last op an add: then none).
const std::vector<float>& LlamaForward::NormOf(const LayerWeights& l, const PlannedStep& s,
                                               size_t i) const {
  static const std::vector<float> kNone;
  if (i >= s.ops.size() || (s.ops[i].op != Op::kNorm && s.ops[i].op != Op::kPostNorm)) return kNone;
  const std::vector<float>* w = LayerVector(l, s.ops[i].weight);
  return w != nullptr ? *w : kNone;
}

// Every layer for one team's tokens (the rows [t0, t0 + n) of every
// activation buffer), each layer the planned steps of the model's block.
void LlamaForward::Layers(const Team& tm, KvStore& kv, bool decode_only) {
  const int E = c_.n_embd;
  const int n = tm.n;
  const size_t t0 = static_cast<size_t>(tm.t0);
  float* x = x_.data() + t0 * E;
  float* xn = xn_.data() + t0 * E;
  float* att = att_.data() + t0 * q_dim_;
  float* hh = h_.data() + t0 * c_.n_ff;
  float* up = up_.data() + t0 * c_.n_ff;
  auto rows_of = [&](std::vector<uint8_t>& buf, const kernels::MatrixView& w) {
    return QuantizedRows(tm, buf, w);
  };
  uint8_t* prep_in = PreparedFor(tm, prep_in_, E);
  uint8_t* prep_att = PreparedFor(tm, prep_att_, q_dim_);
  uint8_t* prep_h = PreparedFor(tm, prep_h_, c_.n_ff);
  const bool fuse_attention = AttentionFuses(tm, decode_only);

  Embed(tm);
  Sync(tm);
  for (int layer = 0; layer < c_.n_layer; ++layer) {
    const LayerWeights& l = w_.layers[layer];
    for (const PlannedStep& step : plan_) {
      switch (step.id) {
        case kStepNormQkv: {  // h = rms(x); q, k, v = W h
          Normalize(tm, n, NormOf(l, step, 0), x, xn);
          Quantize(tm, n, l.wq, xn, rows_of(xq_, l.wq));
          // K and V usually share Q's activation type; quantize again if not.
          const bool k_same = SameActivation(l.wk, l.wq, act_precision_);
          const bool v_same = SameActivation(l.wv, l.wq, act_precision_);
          if (!k_same) Quantize(tm, n, l.wk, xn, rows_of(xq_k_, l.wk));
          if (!v_same) Quantize(tm, n, l.wv, xn, rows_of(xq_v_, l.wv));
          const bool q_prep = Prepare(tm, n, l.wq, rows_of(xq_, l.wq), prep_in);
          Sync(tm);
          EndStage(tm.tid, kStageNormQkv);
          // Q, K and V: each thread its share of the rows, no barrier between them.
          auto qkv = [&](const kernels::MatrixView& w, bool same, std::vector<uint8_t>& xq,
                         float* y, int64_t ldy) {
            const uint8_t* prep = q_prep && same && SharesPrepared(w, l.wq) ? prep_in : nullptr;
            const uint8_t* xqt = rows_of(xq, w);
            ForRows(tm, w.rows, [&](int64_t r0, int64_t r1) {
              MatMulRows(tm, w, n, xn, xqt, prep, y + t0 * ldy, ldy, r0, r1);
            });
          };
          qkv(l.wq, true, xq_, q_.data(), q_dim_);
          qkv(l.wk, k_same, k_same ? xq_ : xq_k_, k_.data(), kv_dim_);
          qkv(l.wv, v_same, v_same ? xq_ : xq_v_, v_.data(), kv_dim_);
          Sync(tm);
          EndStage(tm.tid, kStageQkv);
          break;
        }
        case kStepAttention: {  // [q/k norms], RoPE and K/V stores, attention
          const bool qk_norm = step.ops[0].op == Op::kQkNorm;
          if (!fuse_attention) {
            RopeAndStore(tm, l, layer, qk_norm, kv);
            Sync(tm);
          }
          Attention(tm, l, layer, fuse_attention, qk_norm, kv);
          // Attention leaves the memory bus idle: fetch this thread's share of
          // Wo meanwhile (at decode, where the matmuls wait on memory).
          if (decode_only)
            ForRows(tm, l.wo.rows,
                    [&](int64_t r0, int64_t r1) { kernels::PrefetchRows(l.wo, r0, r1); });
          Sync(tm);
          EndStage(tm.tid, kStageAttention);
          break;
        }
        case kStepWo:  // x += [post norm of] Wo att
          AddProjection(tm, l.wo, att, attq_, prep_att, NormOf(l, step, 1));
          EndStage(tm.tid, kStageWo);
          break;
        case kStepNormGateUp: {  // h = rms(x); a = act(Wgate h) * Wup h
          Normalize(tm, n, NormOf(l, step, 0), x, xn);
          Quantize(tm, n, l.w_gate, xn, rows_of(xq_, l.w_gate));
          const bool up_same = SameActivation(l.w_up, l.w_gate, act_precision_);
          if (!up_same) Quantize(tm, n, l.w_up, xn, rows_of(xq_k_, l.w_up));
          const bool g_prep = Prepare(tm, n, l.w_gate, rows_of(xq_, l.w_gate), prep_in) &&
                              up_same && SharesPrepared(l.w_up, l.w_gate);
          Sync(tm);
          EndStage(tm.tid, kStageNormFfn);
          // Gate and up rows of the thread's share together, then the gate on them.
          const Activation act = step.ops[2].act;
          const uint8_t* gate_q = rows_of(xq_, l.w_gate);
          const uint8_t* up_q = rows_of(up_same ? xq_ : xq_k_, l.w_up);
          ForRows(tm, l.w_gate.rows, [&](int64_t r0, int64_t r1) {
            const uint8_t* prep = g_prep ? prep_in : nullptr;
            MatMulRows(tm, l.w_gate, n, xn, gate_q, prep, hh, c_.n_ff, r0, r1);
            MatMulRows(tm, l.w_up, n, xn, up_q, prep, up, c_.n_ff, r0, r1);
            for (int t = 0; t < n; ++t) {
              float* g = &hh[t * c_.n_ff + r0];
              if (act == Activation::kGeluTanh) {
                kernels::GeGluTanh(g, &up[t * c_.n_ff + r0], r1 - r0, g);
              } else {
                kernels::SwiGlu(g, &up[t * c_.n_ff + r0], r1 - r0, g);
              }
            }
          });
          Sync(tm);
          EndStage(tm.tid, kStageGateUp);
          break;
        }
        case kStepDown:  // x += [post norm of] Wdown a
          AddProjection(tm, l.w_down, hh, hq_, prep_h, NormOf(l, step, 1));
          EndStage(tm.tid, kStageDown);
          break;
      }
    }
  }
}

// The output head on the batch's requested rows (gathered into rows
// [0, n_out) of xn_), by the team of all threads.
void LlamaForward::Head(const Team& all, float* logits) {
  const int E = c_.n_embd;
  const int n_out = static_cast<int>(out_rows_.size());
  if (n_out == 0) return;
  {
    int64_t b, e;
    Range(n_out, all.size, all.index, 1, &b, &e);
    for (int64_t i = b; i < e; ++i)
      kernels::RmsNorm(&x_[static_cast<size_t>(out_rows_[i]) * E], w_.output_norm.data(),
                       c_.rms_eps, E, &xn_[i * E]);
  }
  uint8_t* xq = QuantizedRows(all, xq_, w_.output);
  uint8_t* prep = PreparedFor(all, prep_in_, E);
  Quantize(all, n_out, w_.output, xn_.data(), xq);
  const bool h_prep = Prepare(all, n_out, w_.output, xq, prep);
  Sync(all);
  ForRows(all, w_.output.rows, [&](int64_t r0, int64_t r1) {
    MatMulRows(all, w_.output, n_out, xn_.data(), xq, h_prep ? prep : nullptr, logits, c_.n_vocab,
               r0, r1);
  });
}

void LlamaForward::Forward(std::span<const BatchSegment> batch, KvStore& kv, float* logits) {
  // Flatten the batch: one row per new token.
  ids_.clear();
  pos_.clear();
  table_.clear();
  slide_table_.clear();
  out_rows_.clear();
  for (const BatchSegment& seg : batch) {
    for (int i = 0; i < seg.n_tokens; ++i) {
      if (seg.pos0 + i >= seg.logits_from) out_rows_.push_back(static_cast<int>(ids_.size()));
      ids_.push_back(seg.tokens[i]);
      pos_.push_back(seg.pos0 + i);
      table_.push_back(seg.block_table);
      slide_table_.push_back(seg.slide_table);
    }
  }
  const int n = static_cast<int>(ids_.size());
  // RoPE angles per token, shared by every head and layer.
  const size_t half = static_cast<size_t>(c_.n_rot / 2);
  rope_cos_.resize(n * half);
  rope_sin_.resize(n * half);
  for (int t = 0; t < n; ++t)
    kernels::RopeCosSin(c_.n_rot, pos_[t], inv_freq_.data(), &rope_cos_[t * half],
                        &rope_sin_[t * half]);
  if (!inv_freq_local_.empty()) {
    rope_cos_local_.resize(n * half);
    rope_sin_local_.resize(n * half);
    for (int t = 0; t < n; ++t)
      kernels::RopeCosSin(c_.n_rot, pos_[t], inv_freq_local_.data(), &rope_cos_local_[t * half],
                          &rope_sin_local_[t * half]);
  }
  for (int i = 0; i < c_.n_layer; ++i) claims_[i].next.store(0, std::memory_order_relaxed);
  const bool decode_only = std::all_of(batch.begin(), batch.end(),
                                       [](const BatchSegment& s) { return s.n_tokens == 1; });
  Teams(batch);
  // The output head always as one team of all threads: its matrix (the
  // largest) is then read once, not once per team.
  Team all;
  all.size = pool_.size();
  all.n = n;
  timing_ = profile_ && decode_only;
  if (timing_) ++profiled_passes_;
  pool_.Run([&](int tid) {
    if (timing_) clocks_[tid].last = std::chrono::steady_clock::now();
    Team tm = teams_.size() == 1 ? teams_[0] : teams_[tid];
    tm.tid = tid;
    tm.index = teams_.size() == 1 ? tid : 0;
    Layers(tm, kv, decode_only);
    if (teams_.size() > 1) pool_.Barrier();
    EndStage(tid, kStageWait);
    Team head = all;
    head.tid = head.index = tid;
    Head(head, logits);
    EndStage(tid, kStageHead);
  });
}

}  // namespace braid
