#include "backend/cpu/llama_weights.h"

#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "kernels/huge_pages.h"
#include "kernels/quant.h"

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
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ4_0:
    case DType::kQ4_1: case DType::kQ8_0: case DType::kQ4_K: case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

Result<kernels::MatrixView> Matrix(const ModelFile& f, const std::string& name) {
  BRAID_ASSIGN_OR_RETURN(const TensorInfo* t, Need(f, name));
  if (t->shape.size() != 2)
    return Status::Corruption(f.path() + ": tensor '" + name + "' is not a matrix");
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

// A small tensor converted to fp32 (norm weights and biases).
Result<std::vector<float>> Vector(const ModelFile& f, const std::string& name) {
  BRAID_ASSIGN_OR_RETURN(const TensorInfo* t, Need(f, name));
  const kernels::DTypeInfo& info = kernels::Info(t->type);
  if (t->elements() % info.block_elems != 0)
    return Status::Corruption(f.path() + ": tensor '" + name + "' size is not a whole number of blocks");
  std::vector<float> v(static_cast<size_t>(t->elements()));
  kernels::DequantizeRow(t->type, t->data, v.data(), t->elements());
  return v;
}

}  // namespace

void InterleaveForFastPath(LlamaWeights* w) {
  std::vector<kernels::MatrixView*> todo;
  for (LayerWeights& l : w->layers)
    for (kernels::MatrixView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) todo.push_back(m);
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

Result<LlamaWeights> BuildLlamaWeights(const ModelFile& f) {
  const ModelConfig& c = f.config();
  LlamaWeights w;
  BRAID_ASSIGN_OR_RETURN(w.token_embd, Need(f, "token_embd.weight"));
  w.layers.resize(c.n_layer);
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    BRAID_ASSIGN_OR_RETURN(l.attn_norm, Vector(f, p + "attn_norm.weight"));
    BRAID_ASSIGN_OR_RETURN(l.wq, Matrix(f, p + "attn_q.weight"));
    BRAID_ASSIGN_OR_RETURN(l.wk, Matrix(f, p + "attn_k.weight"));
    BRAID_ASSIGN_OR_RETURN(l.wv, Matrix(f, p + "attn_v.weight"));
    BRAID_ASSIGN_OR_RETURN(l.wo, Matrix(f, p + "attn_output.weight"));
    if (c.qkv_bias) {
      BRAID_ASSIGN_OR_RETURN(l.bq, Vector(f, p + "attn_q.bias"));
      BRAID_ASSIGN_OR_RETURN(l.bk, Vector(f, p + "attn_k.bias"));
      BRAID_ASSIGN_OR_RETURN(l.bv, Vector(f, p + "attn_v.bias"));
    }
    BRAID_ASSIGN_OR_RETURN(l.ffn_norm, Vector(f, p + "ffn_norm.weight"));
    BRAID_ASSIGN_OR_RETURN(l.w_gate, Matrix(f, p + "ffn_gate.weight"));
    BRAID_ASSIGN_OR_RETURN(l.w_up, Matrix(f, p + "ffn_up.weight"));
    BRAID_ASSIGN_OR_RETURN(l.w_down, Matrix(f, p + "ffn_down.weight"));
  }
  BRAID_ASSIGN_OR_RETURN(w.output_norm, Vector(f, "output_norm.weight"));
  if (c.tied_embeddings || !f.Find("output.weight")) {
    BRAID_ASSIGN_OR_RETURN(w.output, Matrix(f, "token_embd.weight"));
  } else {
    BRAID_ASSIGN_OR_RETURN(w.output, Matrix(f, "output.weight"));
  }
  return w;
}

}  // namespace braid
