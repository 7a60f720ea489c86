#include "model/block.h"

#include <algorithm>

namespace braid {

const char* OpName(Op op) {
  switch (op) {
    case Op::kNorm:
      return "norm";
    case Op::kQkv:
      return "qkv";
    case Op::kQkNorm:
      return "qk_norm";
    case Op::kRope:
      return "rope";
    case Op::kAttention:
      return "attention";
    case Op::kWo:
      return "wo";
    case Op::kPostNorm:
      return "post_norm";
    case Op::kAdd:
      return "add";
    case Op::kGateUp:
      return "gate_up";
    case Op::kGate:
      return "gate";
    case Op::kDown:
      return "down";
  }
  return "?";
}

std::span<const BlockOp> LlamaBlock() {
  static constexpr BlockOp kBlock[] = {
      {Op::kNorm, TensorRole::kAttnNorm},
      {Op::kQkv},
      {Op::kRope},
      {Op::kAttention},
      {Op::kWo},
      {Op::kAdd},
      {Op::kNorm, TensorRole::kFfnNorm},
      {Op::kGateUp},
      {Op::kGate, {}, Activation::kSilu},
      {Op::kDown},
      {Op::kAdd},
  };
  return kBlock;
}

std::string BlockString(std::span<const BlockOp> block) {
  std::string s;
  for (const BlockOp& o : block) s += (s.empty() ? "" : " ") + std::string(OpName(o.op));
  return s;
}

Activation GateActivation(std::span<const BlockOp> block) {
  for (const BlockOp& o : block)
    if (o.op == Op::kGate) return o.act;
  return Activation::kSilu;
}

bool BlockReads(std::span<const BlockOp> block, TensorRole role) {
  return std::any_of(block.begin(), block.end(), [&](const BlockOp& o) {
    switch (o.op) {
      case Op::kNorm:
      case Op::kPostNorm:
        return o.weight == role;
      case Op::kQkNorm:
        return role == TensorRole::kAttnQNorm || role == TensorRole::kAttnKNorm;
      default:
        return false;
    }
  });
}

Result<std::vector<PlannedStep>> PlanBlock(std::span<const BlockOp> block,
                                           std::span<const StepKind> steps,
                                           const std::string& model, const std::string& backend) {
  for (size_t i = 0; i < block.size(); ++i) {
    const BlockOp& o = block[i];
    const bool norm_weight =
        o.weight == TensorRole::kAttnNorm || o.weight == TensorRole::kFfnNorm ||
        o.weight == TensorRole::kPostAttnNorm || o.weight == TensorRole::kPostFfnNorm;
    if ((o.op == Op::kNorm || o.op == Op::kPostNorm) && !norm_weight)
      return Status::InvalidArgument("the " + model + " block's op " + std::to_string(i + 1) +
                                     " ('" + OpName(o.op) + "') names a weight that is no norm's");
  }
  std::vector<PlannedStep> plan;
  size_t at = 0;
  while (at < block.size()) {
    const StepKind* best = nullptr;
    for (const StepKind& s : steps) {
      if (s.ops.empty() || s.ops.size() > block.size() - at) continue;
      bool match = true;
      for (size_t i = 0; i < s.ops.size() && match; ++i) match = block[at + i].op == s.ops[i];
      if (match && (best == nullptr || s.ops.size() > best->ops.size())) best = &s;
    }
    if (best == nullptr) {
      std::string where = "op " + std::to_string(at + 1) + " of its block";
      if (at > 0) where += ", after '" + std::string(OpName(block[at - 1].op)) + "'";
      return Status::Unsupported(backend + " cannot run this " + model +
                                 " model: it has no step for the op '" + OpName(block[at].op) +
                                 "' at " + where + " (" + BlockString(block) + ")");
    }
    plan.push_back({best->id, block.subspan(at, best->ops.size())});
    at += best->ops.size();
  }
  return plan;
}

}  // namespace braid
