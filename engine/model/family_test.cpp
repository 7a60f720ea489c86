// The family tables: lookups by arch and by name, and the shapes and
// presence rules the loader validates with.
#include "model/family.h"

#include <doctest/doctest.h>

#include <set>

namespace braid {
namespace {

TEST_CASE("families: found by arch, GGUF architecture and model_type") {
  CHECK(FamilyNames() == "llama, mistral, qwen2, qwen3, gemma3");
  for (Arch a : {Arch::kLlama, Arch::kMistral, Arch::kQwen2}) {
    const Family* f = FindFamily(a);
    REQUIRE(f != nullptr);
    CHECK(f->arch == a);
    CHECK(FindFamilyByGgufArch(ArchName(a)) == f);
    CHECK(FindFamilyByHfModelType(ArchName(a)) == f);
    CHECK(BlockString(f->block) == BlockString(LlamaBlock()));
  }
  CHECK(FindFamilyByGgufArch("gpt2") == nullptr);
  CHECK(FindFamilyByHfModelType("gemma") == nullptr);
  CHECK(FindFamily(Arch::kQwen2)->qkv_bias);
  CHECK(FindFamily(Arch::kQwen2)->gguf_rope_neox);
  CHECK_FALSE(FindFamily(Arch::kLlama)->gguf_rope_neox);
}

TEST_CASE("families: each role once, shapes and presence from the config") {
  for (const Family* f : Families()) {
    std::set<TensorRole> roles;
    for (const auto& list : {f->globals, f->layer})
      for (const TensorSpec& t : list) CHECK(roles.insert(t.role).second);
  }
  ModelConfig c;
  c.n_vocab = 100, c.n_embd = 64, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 16, c.n_ff = 96;
  c.n_rot = 16;
  const Family& llama = *FindFamily(Arch::kLlama);
  const TensorSpec* k = FindTensorSpec(llama, TensorRole::kWk);
  REQUIRE(k != nullptr);
  CHECK(TensorName(*k, 3) == "blk.3.attn_k.weight");
  CHECK(TensorShape(*k, c) == std::vector<int64_t>{64, 32});
  CHECK(TensorShape(*FindTensorSpec(llama, TensorRole::kWDown), c) == std::vector<int64_t>{96, 64});
  CHECK(TensorShape(*FindTensorSpec(llama, TensorRole::kRopeFreqs), c) == std::vector<int64_t>{8});
  const TensorSpec* out = FindTensorSpec(llama, TensorRole::kOutput);
  CHECK(TensorName(*out) == "output.weight");
  CHECK(TensorRequired(*out, c));
  c.tied_embeddings = true;
  CHECK_FALSE(TensorRequired(*out, c));
  const TensorSpec* bq = FindTensorSpec(llama, TensorRole::kBq);
  CHECK_FALSE(TensorRequired(*bq, c));
  c.qkv_bias = true;
  CHECK(TensorRequired(*bq, c));
}

TEST_CASE("families: a model's features, and a backend that lacks one refuses it by name") {
  ModelConfig c;
  c.arch = Arch::kQwen2;
  c.qkv_bias = true;
  CHECK(RequiredOps(c) == std::vector<std::string>{"qkv_bias"});
  c.arch = Arch::kGemma3;
  c.qkv_bias = false;
  c.block.assign(Gemma3Family().block.begin(), Gemma3Family().block.end());
  c.embed_scale = 8.0f;
  c.sliding_window = 512;
  CHECK(RequiredOps(c) == std::vector<std::string>{"gelu_tanh", "embed_scale", "sliding_window"});
  static constexpr std::string_view kSome[] = {"qkv_bias", "embed_scale", "sliding_window"};
  const Status s = CheckOps(c, 4096, kSome, "the test backend");
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message() ==
        "the test backend cannot run this gemma3 model: it lacks the op 'gelu_tanh'");
  c.block.assign(Qwen3Family().block.begin(), Qwen3Family().block.end());
  c.embed_scale = 1.0f;
  // A window as long as the context never slides (Mistral 7B v0.1 at 4096).
  c.sliding_window = 4096;
  static constexpr std::string_view kNone[] = {"qkv_bias"};
  CHECK(RequiredOps(c, 4096).empty());
  CHECK(RequiredOps(c, 8192) == std::vector<std::string>{"sliding_window"});
  CHECK(CheckOps(c, 4096, kNone, "the test backend").ok());
  CHECK(CheckOps(c, 8192, kNone, "the test backend").code() == StatusCode::kUnsupported);
}

TEST_CASE("families: each writes its block once; presence of norms follows it") {
  CHECK(BlockString(LlamaFamily().block) ==
        "norm qkv rope attention wo add norm gate_up gate down add");
  CHECK(BlockString(Qwen3Family().block) ==
        "norm qkv qk_norm rope attention wo add norm gate_up gate down add");
  CHECK(BlockString(Gemma3Family().block) ==
        "norm qkv qk_norm rope attention wo post_norm add norm gate_up gate down post_norm add");
  for (const Family* f : Families()) {
    // Every norm a block reads has a tensor in its family's table, and is
    // required by it.
    ModelConfig c;
    c.block.assign(f->block.begin(), f->block.end());
    for (TensorRole role :
         {TensorRole::kAttnNorm, TensorRole::kFfnNorm, TensorRole::kAttnQNorm,
          TensorRole::kAttnKNorm, TensorRole::kPostAttnNorm, TensorRole::kPostFfnNorm}) {
      const TensorSpec* spec = FindTensorSpec(*f, role);
      CAPTURE(f->gguf_arch);
      CAPTURE(static_cast<int>(role));
      if (BlockReads(c.block, role)) {
        REQUIRE(spec != nullptr);
        CHECK(TensorRequired(*spec, c));
      } else if (spec != nullptr) {
        CHECK_FALSE(TensorRequired(*spec, c));
      }
    }
  }
  ModelConfig gemma;
  gemma.block.assign(Gemma3Family().block.begin(), Gemma3Family().block.end());
  CHECK(gemma.GateActivation() == Activation::kGeluTanh);
  CHECK(gemma.Has(Op::kPostNorm));
  CHECK_FALSE(ModelConfig{}.Has(Op::kQkNorm));
  CHECK(ModelConfig{}.GateActivation() == Activation::kSilu);
}

TEST_CASE("PlanBlock: the longest step at each op; an op no step covers is named") {
  enum { kA, kB, kC };
  static constexpr Op kNormQkv[] = {Op::kNorm, Op::kQkv};
  static constexpr Op kNorm[] = {Op::kNorm};
  static constexpr Op kRopeAttn[] = {Op::kRope, Op::kAttention};
  static constexpr Op kRest[] = {Op::kWo, Op::kAdd};
  static constexpr StepKind kSteps[] = {{kB, kNorm}, {kA, kNormQkv}, {kC, kRopeAttn}, {kC, kRest}};
  static constexpr BlockOp kBlock[] = {{Op::kNorm, TensorRole::kAttnNorm},
                                       {Op::kQkv},
                                       {Op::kRope},
                                       {Op::kAttention},
                                       {Op::kWo},
                                       {Op::kAdd},
                                       {Op::kNorm, TensorRole::kFfnNorm}};
  Result<std::vector<PlannedStep>> plan = PlanBlock(kBlock, kSteps, "llama", "the test backend");
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 4);
  CHECK((*plan)[0].id == kA);
  CHECK((*plan)[0].ops.size() == 2);
  CHECK((*plan)[1].id == kC);
  CHECK((*plan)[2].ops.data() == &kBlock[4]);
  CHECK((*plan)[3].id == kB);
  CHECK((*plan)[3].ops[0].weight == TensorRole::kFfnNorm);
  // The same ops in another order: q/k norms where no step starts with them.
  static constexpr BlockOp kOther[] = {{Op::kNorm}, {Op::kQkv}, {Op::kQkNorm}, {Op::kRope}};
  Result<std::vector<PlannedStep>> bad = PlanBlock(kOther, kSteps, "qwen3", "the test backend");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kUnsupported);
  CHECK(bad.status().message() ==
        "the test backend cannot run this qwen3 model: it has no step for the op 'qk_norm' at op "
        "3 of its block, after 'qkv' (norm qkv qk_norm rope)");
  static constexpr BlockOp kBadNorm[] = {{Op::kNorm, TensorRole::kWq}, {Op::kQkv}};
  Result<std::vector<PlannedStep>> weight =
      PlanBlock(kBadNorm, kSteps, "llama", "the test backend");
  REQUIRE_FALSE(weight.ok());
  CHECK(weight.status().code() == StatusCode::kInvalidArgument);
  CHECK(weight.status().message() ==
        "the llama block's op 1 ('norm') names a weight that is no norm's");
}

TEST_CASE("families: Qwen3 and Gemma 3 name their q/k norms; Gemma 3 its post norms") {
  const Family& qwen3 = *FindFamilyByGgufArch("qwen3");
  const Family& gemma3 = *FindFamilyByHfModelType("gemma3_text");
  CHECK(BlockReads(qwen3.block, TensorRole::kAttnQNorm));
  CHECK(std::string(TensorName(*FindTensorSpec(qwen3, TensorRole::kAttnQNorm), 0)) ==
        "blk.0.attn_q_norm.weight");
  CHECK(FindTensorSpec(qwen3, TensorRole::kPostAttnNorm) == nullptr);
  CHECK(std::string(FindTensorSpec(gemma3, TensorRole::kFfnNorm)->hf) ==
        "pre_feedforward_layernorm.weight");
  CHECK(std::string(FindTensorSpec(gemma3, TensorRole::kPostFfnNorm)->gguf) ==
        "post_ffw_norm.weight");
  ModelConfig c;
  c.head_dim = 256;
  CHECK(TensorShape(*FindTensorSpec(gemma3, TensorRole::kAttnKNorm), c) ==
        std::vector<int64_t>{256});
}

}  // namespace
}  // namespace braid
