#include "backend/cpu/llama_weights.h"

#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "kernels/huge_pages.h"
#include "kernels/quant.h"
#include "model/family.h"

namespace braid {
namespace {

using kernels::DType;

Result<const TensorInfo*> Need(const ModelFile& f, const std::string& name) {
  const TensorInfo* t = f.Find(name);
  if (!t) return Status::NotFound(f.path() + ": missing tensor '" + name + "'");
  return t;
}

bool Multipliable(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

// A view of matrix `name`; Q5_0 matrices are repacked losslessly as Q8_0
// into a buffer kept in `owned` (the Q8_0 kernels then multiply them).
Result<kernels::MatrixView> Matrix(const ModelFile& f, const std::string& name,
                                   std::vector<std::shared_ptr<uint8_t[]>>* owned) {
  BRAID_ASSIGN_OR_RETURN(const TensorInfo* t, Need(f, name));
  if (t->shape.size() != 2)
    return Status::Corruption(f.path() + ": tensor '" + name + "' is not a matrix");
  if (t->type == DType::kQ5_0) {
    const size_t bytes = kernels::RowBytes(DType::kQ8_0, t->shape[0]) * t->shape[1];
    std::shared_ptr<uint8_t[]> buf(new uint8_t[bytes]);
    kernels::RepackQ5_0AsQ8_0(t->data, buf.get(), t->elements());
    kernels::MatrixView m;
    m.type = DType::kQ8_0;
    m.cols = t->shape[0];
    m.rows = t->shape[1];
    m.data = buf.get();
    m.row_bytes = kernels::RowBytes(DType::kQ8_0, m.cols);
    owned->push_back(std::move(buf));
    return m;
  }
  if (!Multipliable(t->type))
    return Status::Unsupported(f.path() + ": tensor '" + name + "' has type " +
                               kernels::Info(t->type).name + ", which has no matmul kernel");
  kernels::MatrixView m;
  m.type = t->type;
  m.cols = t->shape[0];
  m.rows = t->shape[1];
  m.data = t->data;
  m.row_bytes = kernels::RowBytes(t->type, m.cols);
  return m;
}

// A small tensor converted to fp32 (norm weights and biases), plus `offset`.
Result<std::vector<float>> Vector(const ModelFile& f, const std::string& name,
                                  float offset = 0.0f) {
  BRAID_ASSIGN_OR_RETURN(const TensorInfo* t, Need(f, name));
  const kernels::DTypeInfo& info = kernels::Info(t->type);
  if (t->elements() % info.block_elems != 0)
    return Status::Corruption(f.path() + ": tensor '" + name +
                              "' size is not a whole number of blocks");
  std::vector<float> v(static_cast<size_t>(t->elements()));
  kernels::DequantizeRow(t->type, t->data, v.data(), t->elements());
  if (offset != 0.0f)
    for (float& x : v) x += offset;
  return v;
}

}  // namespace

std::vector<float>* LayerVector(LayerWeights& l, TensorRole role) {
  switch (role) {
    case TensorRole::kAttnNorm:
      return &l.attn_norm;
    case TensorRole::kFfnNorm:
      return &l.ffn_norm;
    case TensorRole::kAttnQNorm:
      return &l.q_norm;
    case TensorRole::kAttnKNorm:
      return &l.k_norm;
    case TensorRole::kPostAttnNorm:
      return &l.post_attn_norm;
    case TensorRole::kPostFfnNorm:
      return &l.post_ffn_norm;
    case TensorRole::kBq:
      return &l.bq;
    case TensorRole::kBk:
      return &l.bk;
    case TensorRole::kBv:
      return &l.bv;
    default:
      return nullptr;
  }
}

const std::vector<float>* LayerVector(const LayerWeights& l, TensorRole role) {
  return LayerVector(const_cast<LayerWeights&>(l), role);
}

void InterleaveForFastPath(LlamaWeights* w) {
  std::vector<kernels::MatrixView*> todo;
  for (LayerWeights& l : w->layers)
    for (kernels::MatrixView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      todo.push_back(m);
  todo.push_back(&w->output);
  std::erase_if(todo, [](const kernels::MatrixView* m) {
    return m->layout != kernels::WeightLayout::kRows || !kernels::InterleaveFast(m->type);
  });
  // One buffer for all of them, in the order the forward pass reads them.
  auto bytes = [](const kernels::MatrixView* m) {
    return (kernels::InterleavedBytes(m->type, m->rows, m->cols) + 63) / 64 * 64;
  };
  size_t total = 0;
  for (const kernels::MatrixView* m : todo) total += bytes(m);
  if (total == 0) return;
  std::shared_ptr<uint8_t> buf;
  try {
    buf.reset(static_cast<uint8_t*>(kernels::AllocateLarge(total)), &std::free);
  } catch (const std::bad_alloc&) {
    return;  // out of memory: keep the row layout
  }
  size_t at = 0;
  for (kernels::MatrixView* m : todo) {
    const size_t n = bytes(m);
    *m = kernels::Interleave(*m, buf.get() + at);
    at += n;
  }
  w->packed = std::move(buf);
}

namespace {

// Where the CPU weights keep a per-layer tensor of each role: a matrix or an
// fp32 vector (nullptr for roles the forward pass does not read).
kernels::MatrixView* MatrixFor(LayerWeights& l, TensorRole role) {
  switch (role) {
    case TensorRole::kWq:
      return &l.wq;
    case TensorRole::kWk:
      return &l.wk;
    case TensorRole::kWv:
      return &l.wv;
    case TensorRole::kWo:
      return &l.wo;
    case TensorRole::kWGate:
      return &l.w_gate;
    case TensorRole::kWUp:
      return &l.w_up;
    case TensorRole::kWDown:
      return &l.w_down;
    default:
      return nullptr;
  }
}

}  // namespace

Result<LlamaWeights> BuildLlamaWeights(const ModelFile& f) {
  const ModelConfig& c = f.config();
  const Family* family = FindFamily(c.arch);
  if (family == nullptr) return Status::Unsupported(f.path() + ": no such model family");
  auto global = [&](TensorRole role) { return TensorName(*FindTensorSpec(*family, role)); };
  LlamaWeights w;
  BRAID_ASSIGN_OR_RETURN(w.token_embd, Need(f, global(TensorRole::kTokenEmbd)));
  w.layers.resize(c.n_layer);
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[i];
    // Every tensor the forward pass reads that the config asks for (the
    // Q/K/V biases only where the model has them).
    for (const TensorSpec& t : family->layer) {
      if (!t.read || !TensorRequired(t, c)) continue;
      const std::string name = TensorName(t, i);
      if (kernels::MatrixView* m = MatrixFor(l, t.role)) {
        BRAID_ASSIGN_OR_RETURN(*m, Matrix(f, name, &w.repacked));
      } else if (std::vector<float>* v = LayerVector(l, t.role)) {
        const bool bias =
            t.role == TensorRole::kBq || t.role == TensorRole::kBk || t.role == TensorRole::kBv;
        BRAID_ASSIGN_OR_RETURN(*v, Vector(f, name, bias ? 0.0f : c.norm_offset));
      } else {
        return Status::Unsupported(f.path() + ": the CPU backend cannot use tensor '" + name + "'");
      }
    }
  }
  BRAID_ASSIGN_OR_RETURN(w.output_norm, Vector(f, global(TensorRole::kOutputNorm), c.norm_offset));
  const std::string output = global(TensorRole::kOutput);
  if (c.tied_embeddings || !f.Find(output)) {
    BRAID_ASSIGN_OR_RETURN(w.output, Matrix(f, global(TensorRole::kTokenEmbd), &w.repacked));
  } else {
    BRAID_ASSIGN_OR_RETURN(w.output, Matrix(f, output, &w.repacked));
  }
  return w;
}

}  // namespace braid
