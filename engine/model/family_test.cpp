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
    CHECK_FALSE(f->qk_norm);
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

TEST_CASE("families: a model's ops, and a backend that lacks one refuses it by name") {
  ModelConfig c;
  c.arch = Arch::kQwen2;
  c.qkv_bias = true;
  CHECK(RequiredOps(c) == std::vector<std::string>{"qkv_bias"});
  c.arch = Arch::kGemma3;
  c.qkv_bias = false;
  c.qk_norm = c.post_norms = true;
  c.activation = Activation::kGeluTanh;
  c.embed_scale = 8.0f;
  c.sliding_window = 512;
  CHECK(RequiredOps(c) == std::vector<std::string>{"qk_norm", "post_norms", "gelu_tanh",
                                                   "embed_scale", "sliding_window"});
  static constexpr std::string_view kSome[] = {"qkv_bias", "qk_norm", "post_norms"};
  const Status s = CheckOps(c, 4096, kSome, "the test backend");
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message() ==
        "the test backend cannot run this gemma3 model: it lacks the op 'gelu_tanh'");
  c.activation = Activation::kSilu;
  c.embed_scale = 1.0f;
  // A window as long as the context never slides (Mistral 7B v0.1 at 4096).
  c.sliding_window = 4096;
  CHECK(RequiredOps(c, 4096) == std::vector<std::string>{"qk_norm", "post_norms"});
  CHECK(RequiredOps(c, 8192) ==
        std::vector<std::string>{"qk_norm", "post_norms", "sliding_window"});
  CHECK(CheckOps(c, 4096, kSome, "the test backend").ok());
  CHECK(CheckOps(c, 8192, kSome, "the test backend").code() == StatusCode::kUnsupported);
}

TEST_CASE("families: Qwen3 and Gemma 3 name their q/k norms; Gemma 3 its post norms") {
  const Family& qwen3 = *FindFamilyByGgufArch("qwen3");
  const Family& gemma3 = *FindFamilyByHfModelType("gemma3_text");
  CHECK(qwen3.qk_norm);
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
