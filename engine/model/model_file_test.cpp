#include "model/model_file.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "kernels/quant.h"
#include "model/gguf_reader.h"
#include "model/test_files.h"

namespace braid {
namespace {

using test::GgufBuilder;
using test::TinyModel;

// Loads `bytes` written as DIR/m.gguf.
struct Loaded {
  test::TempDir dir;
  std::string path;
  Result<std::unique_ptr<ModelFile>> model = Status::Internal("not loaded");
};

std::unique_ptr<Loaded> LoadGgufBytes(const std::string& bytes) {
  auto l = std::make_unique<Loaded>();
  l->path = l->dir.Write("m.gguf", bytes);
  l->model = LoadModelFile(l->path);
  return l;
}

void ExpectLoadError(const Loaded& l, StatusCode code, const std::string& needle) {
  const Status& s = l.model.status();
  INFO("message: ", s.message());
  REQUIRE_FALSE(l.model.ok());
  CHECK(s.code() == code);
  CHECK(s.message().rfind(l.path + ": ", 0) == 0);
  CHECK(s.message().find(needle) != std::string::npos);
}

// Removes tensor `name` from a builder.
void Drop(GgufBuilder* g, const std::string& name) {
  auto& t = g->tensors();
  t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& x) { return x.name == name; }),
          t.end());
}

GgufBuilder::Tensor& Get(GgufBuilder* g, const std::string& name) {
  for (auto& t : g->tensors()) {
    if (t.name == name) return t;
  }
  FAIL("no tensor " << name);
  return g->tensors().front();
}

// ---- the bundled model -----------------------------------------------------------------

TEST_CASE("model file: the bundled SmolLM2 GGUF has the expected configuration") {
  const std::string path = BRAID_MODEL_PATH;
  if (!std::filesystem::exists(path)) {
    MESSAGE("skipped: " << path << " not found (run scripts/setup.sh)");
    return;
  }
  auto m = LoadModelFile(path);
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  const ModelConfig& c = m.value()->config();
  CHECK(c.arch == Arch::kLlama);
  CHECK(c.n_layer == 30);
  CHECK(c.n_embd == 576);
  CHECK(c.n_ff == 1536);
  CHECK(c.n_head == 9);
  CHECK(c.n_head_kv == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.n_rot == 64);
  CHECK(c.n_vocab == 49152);
  CHECK(c.n_ctx == 8192);
  CHECK(c.rope_base == 100000.0f);
  CHECK(c.rms_eps == doctest::Approx(1e-5f));
  CHECK(c.tied_embeddings);
  CHECK_FALSE(c.rope_neox);
  CHECK_FALSE(c.qkv_bias);
  CHECK(c.rope_scaling.factor == 0.0f);
  const GgufFile* g = m.value()->gguf();
  REQUIRE(g != nullptr);
  CHECK(g->version() == 3);
  CHECK(g->alignment() == 32);
  CHECK(m.value()->tokenizer_json_path().empty());
  // Facts read with the gguf Python package: 272 tensors, 210 Q4_1, 61 F32, 1 Q8_0.
  int q4_1 = 0, f32 = 0, q8_0 = 0, other = 0;
  for (const TensorInfo& t : g->tensors()) {
    switch (t.type) {
      case kernels::DType::kQ4_1:
        ++q4_1;
        break;
      case kernels::DType::kF32:
        ++f32;
        break;
      case kernels::DType::kQ8_0:
        ++q8_0;
        break;
      default:
        ++other;
    }
  }
  CHECK(g->tensors().size() == 272);
  CHECK(q4_1 == 30 * 7);
  CHECK(f32 == 61);
  CHECK(q8_0 == 1);
  CHECK(other == 0);
  const TensorInfo* embd = m.value()->Find("token_embd.weight");
  REQUIRE(embd != nullptr);
  CHECK(embd->type == kernels::DType::kQ8_0);
  CHECK(embd->shape == std::vector<int64_t>{576, 49152});
  CHECK(embd->nbytes == size_t{49152} * 18 * 34);
  CHECK(m.value()->Find("output.weight") == nullptr);
  CHECK(m.value()->Find("blk.29.ffn_down.weight")->shape == std::vector<int64_t>{1536, 576});
  CHECK(g->GetStringArray("tokenizer.ggml.tokens").value().size() == 49152);
  CHECK(g->GetString("tokenizer.ggml.model").value() == "gpt2");
}

// ---- GGUF configs ------------------------------------------------------------------------

TEST_CASE("model file: a tiny llama GGUF loads with its config and tensors") {
  TinyModel tm;
  auto l = LoadGgufBytes(test::TinyGguf(tm).Build());
  REQUIRE_MESSAGE(l->model.ok(), l->model.status().message());
  const ModelFile& m = *l->model.value();
  const ModelConfig& c = m.config();
  CHECK(c.arch == Arch::kLlama);
  CHECK(std::string(ArchName(c.arch)) == "llama");
  CHECK(c.n_vocab == 10);  // from the token list
  CHECK(c.n_embd == 8);
  CHECK(c.n_layer == 2);
  CHECK(c.n_head == 2);
  CHECK(c.n_head_kv == 1);
  CHECK(c.head_dim == 4);
  CHECK(c.n_rot == 4);
  CHECK(c.n_ff == 16);
  CHECK(c.n_ctx == 64);
  CHECK(c.rope_base == 500000.0f);
  CHECK(c.rms_eps == 1e-6f);
  CHECK_FALSE(c.tied_embeddings);
  CHECK_FALSE(c.rope_neox);
  CHECK_FALSE(c.qkv_bias);
  CHECK(m.path() == l->path);
  REQUIRE(m.gguf() != nullptr);
  const TensorInfo* q = m.Find("blk.1.attn_q.weight");
  REQUIRE(q != nullptr);
  CHECK(q->shape == std::vector<int64_t>{8, 8});
  CHECK(q->data == m.gguf()->FindTensor("blk.1.attn_q.weight")->data);
  CHECK(m.Find("nope") == nullptr);
}

TEST_CASE("model file: GGUF defaults and optional keys") {
  TinyModel tm;
  tm.tied = true;
  tm.n_head_kv = 2;
  GgufBuilder g;
  g.KvString("general.architecture", "mistral");
  g.KvU32("mistral.context_length", 32);
  g.Kv<uint64_t>("mistral.embedding_length", test::kTU64, 8);  // counts may be u64
  g.KvU32("mistral.block_count", 2);
  g.KvU32("mistral.feed_forward_length", 16);
  g.KvU32("mistral.attention.head_count", 2);
  g.KvU32("mistral.attention.key_length", 4);
  g.KvU32("mistral.rope.dimension_count", 2);
  for (const auto& t : test::TinyTensors(tm)) g.AddTensor(t.gguf_name, 0, t.ne);
  auto l = LoadGgufBytes(g.Build());
  REQUIRE_MESSAGE(l->model.ok(), l->model.status().message());
  const ModelConfig& c = l->model.value()->config();
  CHECK(c.arch == Arch::kMistral);
  CHECK(c.n_head_kv == 2);         // defaults to head_count
  CHECK(c.rope_base == 10000.0f);  // default
  CHECK(c.rms_eps == 1e-5f);       // default
  CHECK(c.n_vocab == 10);          // from token_embd.weight
  CHECK(c.head_dim == 4);
  CHECK(c.n_rot == 2);
  CHECK(c.tied_embeddings);
}

TEST_CASE("model file: qwen2 GGUF uses neox rope and QKV bias") {
  TinyModel tm;
  tm.arch = "qwen2";
  tm.qkv_bias = true;
  auto l = LoadGgufBytes(test::TinyGguf(tm).Build());
  REQUIRE_MESSAGE(l->model.ok(), l->model.status().message());
  CHECK(l->model.value()->config().arch == Arch::kQwen2);
  CHECK(l->model.value()->config().rope_neox);
  CHECK(l->model.value()->config().qkv_bias);

  GgufBuilder g = test::TinyGguf(tm);
  Drop(&g, "blk.1.attn_v.bias");
  ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kNotFound,
                  "missing tensor 'blk.1.attn_v.bias'");
  GgufBuilder wrong = test::TinyGguf(tm);
  Get(&wrong, "blk.0.attn_k.bias").ne = {8};
  ExpectLoadError(*LoadGgufBytes(wrong.Build()), StatusCode::kCorruption,
                  "tensor 'blk.0.attn_k.bias' has shape [8], expected [4]");
}

TEST_CASE("model file: Llama 3 rope scaling keys are read") {
  TinyModel tm;
  GgufBuilder g = test::TinyGguf(tm);
  g.KvString("llama.rope.scaling.type", "llama3");
  g.KvF32("llama.rope.scaling.factor", 8.0f);
  g.KvF32("llama.rope.scaling.low_freq_factor", 1.0f);
  g.KvF32("llama.rope.scaling.high_freq_factor", 4.0f);
  g.KvU32("llama.rope.scaling.original_context_length", 8192);
  auto l = LoadGgufBytes(g.Build());
  REQUIRE_MESSAGE(l->model.ok(), l->model.status().message());
  const RopeScaling& rs = l->model.value()->config().rope_scaling;
  CHECK(rs.factor == 8.0f);
  CHECK(rs.low_freq_factor == 1.0f);
  CHECK(rs.high_freq_factor == 4.0f);
  CHECK(rs.original_context == 8192);

  GgufBuilder yarn = test::TinyGguf(tm);
  yarn.KvString("llama.rope.scaling.type", "yarn");
  yarn.KvF32("llama.rope.scaling.factor", 4.0f);
  ExpectLoadError(*LoadGgufBytes(yarn.Build()), StatusCode::kUnsupported,
                  "rope scaling type 'yarn' is not supported");
}

TEST_CASE("model file: bad GGUF configurations are named") {
  TinyModel tm;
  {
    GgufBuilder g;
    g.KvString("general.architecture", "gpt2");
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kUnsupported,
                    "architecture 'gpt2' is not supported");
  }
  {
    GgufBuilder g;
    g.KvU32("general.architecture", 1);
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kInvalidArgument,
                    "key 'general.architecture' has type u32");
  }
  {
    GgufBuilder g;
    g.KvString("general.name", "x");
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "missing key 'general.architecture'");
  }
  {
    GgufBuilder g;
    g.KvString("general.architecture", "llama");
    g.KvU32("llama.context_length", 8);
    g.KvU32("llama.embedding_length", 8);
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "missing key 'llama.block_count'");
  }
  {
    GgufBuilder g = test::TinyGguf(tm);
    g.KvU32("llama.block_count", 5000);  // a second, duplicate key is a parse error
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "duplicate metadata key 'llama.block_count'");
  }
  {
    GgufBuilder g;
    g.KvString("general.architecture", "llama");
    g.KvU32("llama.context_length", 8);
    g.KvU32("llama.embedding_length", 8);
    g.KvU32("llama.block_count", 5000);
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "key 'llama.block_count' is 5000, outside [1, 1024]");
  }
  {
    // head_count_kv must divide head_count.
    TinyModel odd = tm;
    odd.n_head = 4;
    odd.n_head_kv = 3;
    odd.n_embd = 8;
    GgufBuilder g = test::TinyGguf(odd);
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "n_head (4) is not a multiple of n_head_kv (3)");
  }
  {
    // Odd head_dim: 3 heads of 3.
    TinyModel odd = tm;
    odd.n_embd = 9;
    odd.n_head = 3;
    odd.n_head_kv = 3;
    ExpectLoadError(*LoadGgufBytes(test::TinyGguf(odd).Build()), StatusCode::kCorruption,
                    "head_dim 3 is odd");
  }
}

TEST_CASE("model file: missing tensors and wrong shapes are named") {
  TinyModel tm;
  {
    GgufBuilder g = test::TinyGguf(tm);
    Drop(&g, "blk.1.attn_k.weight");
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kNotFound,
                    "missing tensor 'blk.1.attn_k.weight'");
  }
  {
    GgufBuilder g = test::TinyGguf(tm);
    Get(&g, "blk.1.ffn_up.weight").ne = {8, 15};
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "tensor 'blk.1.ffn_up.weight' has shape [8, 15], expected [8, 16]");
  }
  {
    GgufBuilder g = test::TinyGguf(tm);
    Get(&g, "token_embd.weight").ne = {8, 11};
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "tensor 'token_embd.weight' has shape [8, 11], expected [8, 10]");
  }
  {
    GgufBuilder g = test::TinyGguf(tm);
    Get(&g, "blk.0.attn_output.weight").ne = {8, 8, 1};
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "has shape [8, 8, 1], expected [8, 8]");
  }
  {
    GgufBuilder g = test::TinyGguf(tm);
    Drop(&g, "output_norm.weight");
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kNotFound,
                    "missing tensor 'output_norm.weight'");
  }
  {
    GgufBuilder g = test::TinyGguf(tm);
    g.AddTensor("rope_freqs.weight", 0, {3});
    ExpectLoadError(*LoadGgufBytes(g.Build()), StatusCode::kCorruption,
                    "tensor 'rope_freqs.weight' has shape [3], expected [2]");
  }
}

TEST_CASE("ValidateTensors checks the configuration first") {
  ModelConfig c;
  c.n_vocab = 10;
  c.n_embd = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_head_kv = 2;
  c.head_dim = 4;
  c.n_rot = 6;
  c.n_ff = 16;
  c.n_ctx = 8;
  std::map<std::string, TensorInfo, std::less<>> none;
  Status s = ValidateTensors(c, none, "p");
  CHECK(s.message() == "p: n_rot is 6, outside [2, 4]");
  c.n_rot = 4;
  c.n_ctx = 0;
  CHECK(ValidateTensors(c, none, "p").message() == "p: n_ctx is 0, outside [1, 16777216]");
  c.n_ctx = 8;
  CHECK(ValidateTensors(c, none, "p").message() == "p: missing tensor 'token_embd.weight'");
}

// ---- Hugging Face checkpoints ------------------------------------------------------------

// Writes config.json and model.safetensors for `tm` into a fresh directory.
struct HfDir {
  test::TempDir dir;
  Result<std::unique_ptr<ModelFile>> Load(const std::string& which = "") {
    return LoadModelFile(which.empty() ? dir.path() : dir.path() + "/" + which);
  }
};

std::unique_ptr<HfDir> MakeHf(const TinyModel& tm, const std::string& config_extra = "",
                              test::SafetensorsBuilder* weights = nullptr) {
  auto d = std::make_unique<HfDir>();
  d->dir.Write("config.json", test::TinyHfConfig(tm, config_extra));
  test::SafetensorsBuilder st = weights ? *weights : test::TinySafetensors(tm);
  d->dir.Write("model.safetensors", st.Build());
  return d;
}

TEST_CASE("model file: a Hugging Face checkpoint maps names and shapes to GGUF") {
  TinyModel tm;
  test::SafetensorsBuilder st = test::TinySafetensors(tm);
  st.AddTensor("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2});
  auto d = MakeHf(tm, "", &st);
  for (const std::string which : {"", "config.json", "model.safetensors"}) {
    auto m = d->Load(which);
    REQUIRE_MESSAGE(m.ok(), m.status().message());
    const ModelConfig& c = m.value()->config();
    CHECK(c.arch == Arch::kLlama);
    CHECK(c.n_vocab == 10);
    CHECK(c.n_embd == 8);
    CHECK(c.n_layer == 2);
    CHECK(c.n_head_kv == 1);
    CHECK(c.head_dim == 4);
    CHECK(c.n_ff == 16);
    CHECK(c.n_ctx == 64);
    CHECK(c.rope_base == 1e6f);
    CHECK(c.rms_eps == 1e-6f);
    CHECK(c.rope_neox);
    CHECK_FALSE(c.qkv_bias);
    CHECK_FALSE(c.tied_embeddings);
    CHECK(m.value()->gguf() == nullptr);
    CHECK(m.value()->tokenizer_json_path() == d->dir.path() + "/tokenizer.json");
    const TensorInfo* k = m.value()->Find("blk.1.attn_k.weight");
    REQUIRE(k != nullptr);
    CHECK(k->name == "blk.1.attn_k.weight");
    CHECK(k->type == kernels::DType::kBF16);
    CHECK(k->shape == std::vector<int64_t>{8, 4});
    CHECK(m.value()->Find("output.weight") != nullptr);
    CHECK(m.value()->Find("blk.0.ffn_down.weight")->shape == std::vector<int64_t>{16, 8});
    CHECK(m.value()->Find("model.layers.0.self_attn.rotary_emb.inv_freq") == nullptr);
  }
}

TEST_CASE("model file: Hugging Face tied embeddings, qwen2 biases and rope scaling") {
  TinyModel tied;
  tied.tied = true;
  auto t = MakeHf(tied);
  auto m = t->Load();
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  CHECK(m.value()->config().tied_embeddings);

  // tie_word_embeddings false and no lm_head: the output head is missing.
  test::SafetensorsBuilder no_head = test::TinySafetensors(tied);
  auto u = MakeHf(TinyModel{}, "", &no_head);
  auto um = u->Load();
  REQUIRE_FALSE(um.ok());
  CHECK(um.status().message() == u->dir.path() +
                                     "/model.safetensors: missing tensor 'lm_head.weight' "
                                     "(config.json does not set tie_word_embeddings)");

  TinyModel qwen;
  qwen.arch = "qwen2";
  qwen.qkv_bias = true;
  auto q = MakeHf(qwen);
  auto qm = q->Load();
  REQUIRE_MESSAGE(qm.ok(), qm.status().message());
  CHECK(qm.value()->config().qkv_bias);
  CHECK(qm.value()->config().rope_neox);
  CHECK(qm.value()->Find("blk.1.attn_q.bias")->shape == std::vector<int64_t>{8});

  TinyModel nobias;
  nobias.arch = "qwen2";
  auto nb = MakeHf(nobias);
  auto nbm = nb->Load();
  REQUIRE_FALSE(nbm.ok());
  CHECK(nbm.status().message() ==
        nb->dir.path() +
            "/model.safetensors: missing tensor 'model.layers.0.self_attn.q_proj.bias'");

  TinyModel l3;
  auto r =
      MakeHf(l3,
             ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":32.0,\"low_freq_factor\":1.0,"
             "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192},\"head_dim\":4");
  auto rm = r->Load();
  REQUIRE_MESSAGE(rm.ok(), rm.status().message());
  CHECK(rm.value()->config().rope_scaling.factor == 32.0f);
  CHECK(rm.value()->config().rope_scaling.original_context == 8192);
}

TEST_CASE("model file: Mistral's sliding_window, transformers 5's rope_parameters") {
  TinyModel mistral;
  mistral.arch = "mistral";
  auto d = MakeHf(mistral, ",\"sliding_window\":16");
  auto m = d->Load();
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  const ModelConfig& c = m.value()->config();
  CHECK(c.sliding_window == 16);
  CHECK(c.Sliding(0));
  CHECK(c.Sliding(1));
  CHECK(c.rope_local_base == c.rope_base);
  // A window as long as the context changes nothing.
  auto whole = MakeHf(mistral, ",\"sliding_window\":64")->Load();
  REQUIRE(whole.ok());
  CHECK(whole.value()->config().sliding_window == 0);

  TinyModel llama;
  auto r =
      MakeHf(llama, ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":500000.0}");
  auto rm = r->Load();
  REQUIRE_MESSAGE(rm.ok(), rm.status().message());
  CHECK(rm.value()->config().rope_base == 500000.0f);
  auto bad = MakeHf(llama, ",\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4.0}");
  auto bm = bad->Load();
  REQUIRE_FALSE(bm.ok());
  CHECK(bm.status().message().find("rope_scaling type 'yarn' is not supported") !=
        std::string::npos);
}

TEST_CASE("model file: bad Gemma 3 configs are named") {
  TinyModel gemma;
  gemma.arch = "gemma3_text";
  const auto err = [&](const std::string& extra) {
    auto m = MakeHf(gemma, extra)->Load();
    REQUIRE_FALSE(m.ok());
    return m.status().message();
  };
  CHECK(err(",\"sliding_window\":4,\"layer_types\":[\"sliding_attention\"]")
            .find("'layer_types' is not a list of 2 layer types") != std::string::npos);
  CHECK(err(",\"sliding_window\":4,\"layer_types\":[\"sliding_attention\",\"chunked\"]")
            .find("layer_types[1] is 'chunked'") != std::string::npos);
  CHECK(
      err(",\"final_logit_softcapping\":30.0").find("'final_logit_softcapping' is not supported") !=
      std::string::npos);
}

TEST_CASE("model file: bad Hugging Face configs and weights are named") {
  TinyModel tm;
  auto expect = [](HfDir* d, StatusCode code, const std::string& needle) {
    auto m = d->Load();
    INFO("message: ", m.status().message());
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == code);
    CHECK(m.status().message().find(needle) != std::string::npos);
  };
  {
    auto d = MakeHf(tm);
    d->dir.Write("config.json", "{\"model_type\":\"gemma\"}");
    expect(d.get(), StatusCode::kUnsupported, "config.json: model_type 'gemma' is not supported");
  }
  {
    auto d = MakeHf(tm);
    d->dir.Write("config.json", "{\"model_type\":\"llama\",\"hidden_size\":8");
    expect(d.get(), StatusCode::kCorruption, "config.json: invalid JSON at byte");
  }
  {
    auto d = MakeHf(tm);
    d->dir.Write("config.json", "{\"model_type\":\"llama\"}");
    expect(d.get(), StatusCode::kCorruption, "config.json: missing 'hidden_size'");
  }
  {
    auto d = MakeHf(tm, ",\"num_key_value_heads\":-1");  // duplicate key in config.json
    expect(d.get(), StatusCode::kCorruption, "duplicate key 'num_key_value_heads'");
  }
  {
    auto d = MakeHf(tm);
    d->dir.Write("config.json", "{\"model_type\":\"llama\",\"hidden_size\":8.5}");
    expect(d.get(), StatusCode::kCorruption, "'hidden_size' is not an integer");
  }
  {
    auto d = MakeHf(tm);
    d->dir.Write("config.json", "{\"model_type\":\"llama\",\"hidden_size\":99999999999999999999}");
    expect(d.get(), StatusCode::kCorruption, "'hidden_size' is not an integer");
  }
  {
    auto d = MakeHf(tm);
    d->dir.Write("config.json", "{\"model_type\":\"llama\",\"hidden_size\":1000000}");
    expect(d.get(), StatusCode::kCorruption, "'hidden_size' is 1000000, outside [1, 65536]");
  }
  {
    auto d = MakeHf(tm);
    d->dir.Write("config.json", "{\"model_type\":\"llama\",\"hidden_act\":\"gelu\"}");
    expect(d.get(), StatusCode::kUnsupported, "hidden_act \"gelu\" is not supported");
  }
  {
    auto d = MakeHf(tm, ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0}");
    expect(d.get(), StatusCode::kUnsupported, "rope_scaling type 'yarn' is not supported");
  }
  {
    test::SafetensorsBuilder st = test::TinySafetensors(tm);
    st.tensors()[3].dtype = "I8";  // the dtype is checked before the sizes
    auto d = MakeHf(tm, "", &st);
    expect(d.get(), StatusCode::kUnsupported, "has dtype I8");
  }
  {
    test::SafetensorsBuilder st;
    for (const auto& t : test::TinyTensors(tm)) {
      std::vector<uint64_t> shape(t.ne.rbegin(), t.ne.rend());
      if (t.hf_name == "model.layers.1.mlp.up_proj.weight") shape = {8, 16};  // transposed
      st.AddTensor(t.hf_name, "F32", shape);
    }
    auto d = MakeHf(tm, "", &st);
    expect(d.get(), StatusCode::kCorruption,
           "/model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' has shape [8, 16], "
           "expected [16, 8]");
  }
  {
    test::TempDir empty;
    auto m = LoadModelFile(empty.path());
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == StatusCode::kNotFound);
    CHECK(m.status().message().find(empty.path() + ": directory has neither") == 0);
  }
  {
    auto m = LoadModelFile("/nonexistent/braid/model.gguf");
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == StatusCode::kNotFound);
    CHECK(m.status().message().find("/nonexistent/braid/model.gguf: ") == 0);
  }
}

// FP8 checkpoints: every projection F8_E4M3 holding 1.0 (0x38) with scales
// beside it: q by blocks of 3 x 4 (partial at the edge), k per row, v one
// for the matrix; the rest by blocks of 1.0.
struct Fp8Checkpoint {
  test::SafetensorsBuilder st;
  std::map<std::string, std::vector<float>> scales;  // HF name -> values
  std::string Build() const {
    std::string b = st.Build();
    const size_t data = 8 + st.Header().size();
    for (const auto& t : const_cast<test::SafetensorsBuilder&>(st).tensors()) {
      auto it = scales.find(t.name);
      if (it != scales.end())
        std::memcpy(&b[data + t.begin], it->second.data(), it->second.size() * sizeof(float));
    }
    return b;
  }
};

Fp8Checkpoint MakeFp8(const TinyModel& tm) {
  Fp8Checkpoint c;
  for (const auto& t : test::TinyTensors(tm)) {
    std::vector<uint64_t> shape(t.ne.rbegin(), t.ne.rend());
    const bool proj = t.hf_name.find("proj.weight") != std::string::npos;
    c.st.AddTensor(t.hf_name, proj ? "F8_E4M3" : "BF16", shape, proj ? 0x38 : 1);
    if (!proj) continue;
    const uint64_t n = shape[0], k = shape[1];
    if (t.hf_name.find("k_proj") != std::string::npos) {
      c.st.AddTensor(t.hf_name + "_scale", "F32", {n});
      std::vector<float>& v = c.scales[t.hf_name + "_scale"];
      for (uint64_t r = 0; r < n; ++r) v.push_back(static_cast<float>(r + 1));
    } else if (t.hf_name.find("v_proj") != std::string::npos) {
      c.st.AddTensor(t.hf_name + "_scale", "F32", {});
      c.scales[t.hf_name + "_scale"] = {0.25f};
    } else {
      const uint64_t nb = (n + 2) / 3, kb = (k + 3) / 4;
      c.st.AddTensor(t.hf_name + "_scale_inv", "F32", {nb, kb});
      std::vector<float>& v = c.scales[t.hf_name + "_scale_inv"];
      const bool q = t.hf_name.find("q_proj") != std::string::npos;
      for (uint64_t i = 0; i < nb * kb; ++i)
        v.push_back(q ? 0.5f * static_cast<float>(i + 1) : 1.0f);
    }
  }
  return c;
}

TEST_CASE("model file: FP8 matrices are dequantized into the checkpoint's dtype") {
  // As transformers loads them with dtype "auto": a bf16 checkpoint's in
  // bf16 (half of fp32's memory), an f16 one's in f16, others in fp32.
  TinyModel tm;
  const std::string quant =
      ",\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[3,4]}";
  Fp8Checkpoint c = MakeFp8(tm);
  for (auto& [name, v] : c.scales)
    if (name.find("v_proj") != std::string::npos) v = {0.1f};  // rounds in bf16 and f16
  const float bf = kernels::Bf16ToFp32(kernels::Fp32ToBf16(0.1f));
  const float hf = kernels::Fp16ToFp32(kernels::Fp32ToFp16(0.1f));
  struct Case {
    std::string config;
    kernels::DType type;
    float v;
  };
  for (const Case& k : {Case{",\"torch_dtype\":\"bfloat16\"", kernels::DType::kBF16, bf},
                        Case{",\"dtype\":\"bfloat16\"", kernels::DType::kBF16, bf},
                        Case{",\"torch_dtype\":\"float16\"", kernels::DType::kF16, hf},
                        Case{",\"torch_dtype\":\"float32\"", kernels::DType::kF32, 0.1f},
                        Case{"", kernels::DType::kF32, 0.1f}}) {
    INFO("config: ", k.config);
    auto d = std::make_unique<HfDir>();
    d->dir.Write("config.json", test::TinyHfConfig(tm, quant + k.config));
    d->dir.Write("model.safetensors", c.Build());
    auto m = d->Load();
    REQUIRE_MESSAGE(m.ok(), m.status().message());
    const TensorInfo* v = m.value()->Find("blk.0.attn_v.weight");
    REQUIRE(v != nullptr);
    CHECK(v->type == k.type);
    std::vector<float> got(static_cast<size_t>(v->elements()));
    kernels::DequantizeRow(v->type, v->data, got.data(), v->elements());
    for (float x : got) CHECK(x == k.v);
    const TensorInfo* q = m.value()->Find("blk.0.attn_q.weight");  // exact in every type
    REQUIRE(q != nullptr);
    CHECK(q->type == k.type);
    std::vector<float> qv(static_cast<size_t>(q->elements()));
    kernels::DequantizeRow(q->type, q->data, qv.data(), q->elements());
    for (int r = 0; r < 8; ++r)
      for (int col = 0; col < 8; ++col)
        CHECK(qv[r * 8 + col] == 0.5f * static_cast<float>((r / 3) * 2 + col / 4 + 1));
  }
}

TEST_CASE("model file: FP8 checkpoints are dequantized with their scales") {
  TinyModel tm;
  const std::string quant =
      ",\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[3,4]}";
  Fp8Checkpoint c = MakeFp8(tm);
  auto d = std::make_unique<HfDir>();
  d->dir.Write("config.json", test::TinyHfConfig(tm, quant));
  d->dir.Write("model.safetensors", c.Build());
  auto m = d->Load();
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  auto values = [&](const std::string& name) {
    const TensorInfo* t = m.value()->Find(name);
    REQUIRE(t != nullptr);
    CHECK(t->type == kernels::DType::kF32);
    const auto* f = static_cast<const float*>(t->data);
    return std::vector<float>(f, f + t->elements());
  };
  const std::vector<float> q = values("blk.0.attn_q.weight");  // [8, 8], blocks [3, 2]
  REQUIRE(q.size() == 64);
  for (int r = 0; r < 8; ++r)
    for (int col = 0; col < 8; ++col)
      CHECK(q[r * 8 + col] == 0.5f * static_cast<float>((r / 3) * 2 + col / 4 + 1));
  const std::vector<float> k = values("blk.1.attn_k.weight");  // [4, 8], per row
  for (int r = 0; r < 4; ++r)
    for (int col = 0; col < 8; ++col) CHECK(k[r * 8 + col] == static_cast<float>(r + 1));
  for (float v : values("blk.0.attn_v.weight")) CHECK(v == 0.25f);  // one scale
  for (float v : values("blk.1.ffn_down.weight")) CHECK(v == 1.0f);
  CHECK(m.value()->Find("blk.0.attn_norm.weight")->type == kernels::DType::kBF16);

  auto expect = [&](const std::string& config, Fp8Checkpoint ck, StatusCode code,
                    const std::string& needle) {
    HfDir bad;
    bad.dir.Write("config.json", test::TinyHfConfig(tm, config));
    bad.dir.Write("model.safetensors", ck.Build());
    auto r = bad.Load();
    INFO("message: ", r.status().message());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == code);
    CHECK(r.status().message().find(needle) != std::string::npos);
  };
  {
    Fp8Checkpoint ck = MakeFp8(tm);  // down's scales left out
    auto& ts = ck.st.tensors();
    for (auto& t : ts)
      if (t.name == "model.layers.1.mlp.down_proj.weight_scale_inv")
        t.name = "model.layers.1.mlp.down_proj.other";
    expect(quant, ck, StatusCode::kCorruption,
           "tensor 'model.layers.1.mlp.down_proj.weight' is F8_E4M3 with no "
           "'model.layers.1.mlp.down_proj.weight_scale_inv' or "
           "'model.layers.1.mlp.down_proj.weight_scale' beside it");
  }
  expect(
      ",\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[4,4]}",
      MakeFp8(tm), StatusCode::kCorruption,
      "is F8_E4M3 [8, 16] in blocks of 4 x 4, so 'model.layers.0.mlp.down_proj.weight_scale_inv' "
      "should be [2, 4]");
  expect(",\"quantization_config\":{\"weight_block_size\":[0,4]}", MakeFp8(tm),
         StatusCode::kCorruption,
         "quantization_config.weight_block_size is not two positive sizes");
  {
    Fp8Checkpoint ck = MakeFp8(tm);  // k's per-row scales: 3 for 4 rows
    for (auto& t : ck.st.tensors())
      if (t.name == "model.layers.0.self_attn.k_proj.weight_scale") {
        t.shape = {3};
        t.end = t.begin + 12;
      }
    expect(quant, ck, StatusCode::kCorruption,
           "with 4 rows, but 'model.layers.0.self_attn.k_proj.weight_scale' holds 3 scales");
  }
}

TEST_CASE("DequantizeFp8 refuses what is not a matrix and empty blocks") {
  const uint8_t bytes[6] = {0x38, 0x40, 0xc4, 0x01, 0x7e, 0x00};
  const float one = 1.0f;
  TensorInfo q{"w", kernels::DType::kF8_E4M3, {6}, bytes, 6};
  TensorInfo s{"w_scale", kernels::DType::kF32, {}, &one, 4};
  auto find = [&](const std::string& n) { return n == "w_scale" ? &s : nullptr; };
  std::vector<float> out;
  Status st = DequantizeFp8(q, "w", 1, 1, find, "w", &out);
  CHECK(st.code() == StatusCode::kUnsupported);
  CHECK(st.message() == "w but not a matrix");
  q.shape = {3, 2};
  CHECK(DequantizeFp8(q, "w", 0, 4, find, "w", &out).code() == StatusCode::kInvalidArgument);
  REQUIRE(DequantizeFp8(q, "w", 1, 1, find, "w", &out).ok());  // one scale for the matrix
  CHECK(out == std::vector<float>{1.0f, 2.0f, -3.0f, 0x1p-9f, 448.0f, 0.0f});
}

TEST_CASE("model file: a sharded Hugging Face checkpoint loads from its directory") {
  TinyModel tm;
  test::TempDir dir;
  dir.Write("config.json", test::TinyHfConfig(tm));
  test::SafetensorsBuilder a, b;
  std::string map;
  int i = 0;
  for (const auto& t : test::TinyTensors(tm)) {
    const bool first = (i++ % 2) == 0;
    (first ? a : b).AddTensor(t.hf_name, "F16", std::vector<uint64_t>(t.ne.rbegin(), t.ne.rend()));
    map += (map.empty() ? "" : ",") + std::string("\"") + t.hf_name + "\":\"" +
           (first ? "a.safetensors" : "b.safetensors") + "\"";
  }
  dir.Write("a.safetensors", a.Build());
  dir.Write("b.safetensors", b.Build());
  dir.Write("model.safetensors.index.json", "{\"weight_map\":{" + map + "}}");
  auto m = LoadModelFile(dir.path());
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  CHECK(m.value()->Find("blk.1.ffn_down.weight")->type == kernels::DType::kF16);
  CHECK(m.value()->Find("token_embd.weight")->shape == std::vector<int64_t>{8, 10});
}

TEST_CASE("model file: errors name a checkpoint's own tensors and the file holding them") {
  TinyModel tm;
  // Sharded: a misshaped tensor names its shard, a missing one the index.
  auto sharded = [&](const std::string& drop, const std::string& misshape) {
    auto d = std::make_unique<HfDir>();
    d->dir.Write("config.json", test::TinyHfConfig(tm));
    test::SafetensorsBuilder a, b;
    std::string map;
    int i = 0;
    for (const auto& t : test::TinyTensors(tm)) {
      if (t.hf_name == drop) continue;
      const bool first = (i++ % 2) == 0;
      std::vector<uint64_t> shape(t.ne.rbegin(), t.ne.rend());
      if (t.hf_name == misshape) shape[0] += 1;
      (first ? a : b).AddTensor(t.hf_name, "F16", shape);
      map += (map.empty() ? "" : ",") + std::string("\"") + t.hf_name + "\":\"" +
             (first ? "a.safetensors" : "b.safetensors") + "\"";
    }
    d->dir.Write("a.safetensors", a.Build());
    d->dir.Write("b.safetensors", b.Build());
    d->dir.Write("model.safetensors.index.json", "{\"weight_map\":{" + map + "}}");
    return d;
  };
  {
    auto d = sharded("model.embed_tokens.weight", "");
    auto m = d->Load();
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == StatusCode::kNotFound);
    CHECK(m.status().message() == d->dir.path() +
                                      "/model.safetensors.index.json: missing tensor "
                                      "'model.embed_tokens.weight'");
  }
  {
    // The 2nd tensor in order (model.norm.weight) lands in b.safetensors.
    auto d = sharded("", "model.norm.weight");
    auto m = d->Load();
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == StatusCode::kCorruption);
    CHECK(m.status().message() ==
          d->dir.path() + "/b.safetensors: tensor 'model.norm.weight' has shape [9], expected [8]");
  }
  {
    auto d = sharded("model.layers.1.self_attn.k_proj.weight", "");
    auto m = d->Load();
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().message() == d->dir.path() +
                                      "/model.safetensors.index.json: missing tensor "
                                      "'model.layers.1.self_attn.k_proj.weight'");
  }
  {
    // One file: named as given, here through config.json.
    test::SafetensorsBuilder st;
    for (const auto& t : test::TinyTensors(tm)) {
      std::vector<uint64_t> shape(t.ne.rbegin(), t.ne.rend());
      if (t.hf_name == "model.embed_tokens.weight") shape = {11, 8};
      st.AddTensor(t.hf_name, "F32", shape);
    }
    auto d = MakeHf(tm, "", &st);
    auto m = d->Load("config.json");
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().message() == d->dir.path() +
                                      "/model.safetensors: tensor 'model.embed_tokens.weight' has "
                                      "shape [11, 8], expected [10, 8]");
  }
}

}  // namespace
}  // namespace braid
