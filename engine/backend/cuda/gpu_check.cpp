// braid_gpu_check: the CUDA backend's correctness checks and benchmarks, run
// by scripts/gpu/run_all.sh on a GPU machine. Every command prints one JSON
// object on stdout (and `run` writes its results to a folder).
//
//   run --model DIR --prompts P.json --out-dir D [--device cuda]
//       per prompt: every position's logits (D/p{i}.f32, raw fp32 [T, vocab])
//       and the greedy continuation of prompts.json's greedy_tokens
//   compare-cpu --model DIR [--prompts P.json]
//       the CUDA backend against the CPU backend's exact path: per-position
//       logits cosine and greedy continuations; exits 1 unless every
//       cosine >= 0.999 and every continuation is the same
// Without a GPU every command exits 77 (skipped). Every command takes
// --weights fp8: the CUDA layer weights quantized at load, and --kv fp8: the
// CUDA backend's KV cache in e4m3 (ModelOptions).
//   batch --model DIR --prompts P.json --gen N
//       the serving engine on the GPU: every prompt alone, then all at once;
//       greedy tokens must be the same
//   decode --model DIR --prompt 128 --gen 128
//       batch-1 greedy decode tokens/s (ids picked on the device) against
//       the weight-read roofline from the copy bandwidth measured in the
//       same run; also through the Model API (logits to the host)
//   sweep --model DIR --batches 1,8,32,128 --prompt 512 --gen 128
//       decode steps of B sequences: tokens/s against the roofline and
//       against cuBLAS's own GEMM rate at that batch
//   spec --model DIR --prompt 128 --gen 128
//       speculative decoding through Generate: the time of a forward pass
//       over n tokens of one sequence against one token, then greedy
//       generation with --spec off, ngram and suffix (tokens/s, guesses
//       kept, tokens per pass); exits 1 if speculation changes the output
//   serve-spec --model DIR --batches 1,16,64 --prompt 128 --gen 128 [--modes LIST]
//       speculative decoding in the serving engine: B requests at once with
//       each --spec value in LIST (default off,ngram,suffix,ngram:8:fixed;
//       off first, the reference), e.g. draft=8 or draft=FILE:4:fixed: generated
//       tokens/s, guesses kept, tokens per decode pass, and how many outputs
//       are the same as with speculation off
//   tier-equal --model DIR
//       the host KV tier changes no greedy output: 64 requests in waves over
//       8 prefixes of 768 tokens on a pool of about two and a half, tier off
//       then on; exits 1 unless all are the same and the tier was read
//   cascade --model DIR --batches 64 --prefix 4096 --prompt 32 --gen 128
//       B requests over one cached prefix of P tokens, each with its own
//       `prompt` tokens after it, greedy, all at once: with cascade
//       attention off and on (BRAID_CUDA_CASCADE), and the same batch
//       without the prefix (a step without the long attention), with CUDA
//       graphs and eagerly (BRAID_CUDA_GRAPHS=0):
//       decode tokens/s and ms per decode step, so attention's share and
//       the eager step's; the outputs with cascade on against off and
//       against each request alone, and eager against graphs
//   tp --model DIR [--ranks 2] [--prompt 128 --gen 128]
//       tensor parallelism against the one-GPU backend: per-position logits
//       cosine and greedy continuations of three prompts, for the
//       tensor-parallel path through NCCL over one GPU (a group of one:
//       the code path of every group, all-reduces included) and over
//       --ranks GPUs (through NCCL where the host has them, else the ranks
//       share GPU 0 and sum through cuBLAS, outside CUDA graphs: the
//       shards' arithmetic, not the interconnect; on several GPUs also
//       with BRAID_NCCL_WINDOWS=0, the summed buffers not registered as
//       NCCL symmetric windows); then batch-1 and batch-64 decode tokens/s
//       of each (not of ranks sharing a GPU).
//       Each backend's argmax and top 64 must also be exactly those of its
//       own logits of the same pass (the ranks' slices of the output head
//       meeting on the host), in an eager pass and a graphed one.
//       Exits 1 unless every cosine >= 0.999 and every continuation is the
//       same, also those of eight sequences decoding over one shared
//       prefix (cascade attention).
//   copy --model DIR [--blocks N] [--device cuda:0+1] [--share R]
//       the host KV tier's block copies (KvMemory::CopyOut/CopyIn): a pool
//       of N blocks of 16 slots (default: at most 4 GiB and half the free
//       memory) filled from random host bytes, then every block out to
//       page-locked host memory in a random order (d2h_gb_per_s) and back in
//       (h2d_gb_per_s), timed on the copy stream, against one large
//       cudaMemcpyAsync each way (link_*_gb_per_s); the round trip must be
//       byte-exact. Then forward passes against copies in flight: one that
//       writes blocks a copy out reads waits for it, one after WaitCopies
//       reads what was copied in. --share R: R
//       tensor-parallel ranks on GPU 0 (TpKv on a one-GPU host). Exits 1
//       unless every check holds.
//   engines --model DIR [--device cuda:all|cuda:0,1|cuda:N] [--share K]
//       one serving engine per GPU of the list (ExpandDevices, as braid run
//       and serve open them for --device cuda:all; cuda, the default, is
//       cuda:all), K per GPU with --share (several engines' state on one
//       device), opened one after another; then 32 ragged greedy requests
//       through every engine at once. Exits 1 unless each engine's outputs
//       equal those of the first engine running each request alone.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/collective.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/tp_backend.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/open.h"

namespace braid {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// How many outputs of `x` equal those of `y` at the same index.
int CountSame(const std::vector<std::vector<int32_t>>& x,
              const std::vector<std::vector<int32_t>>& y) {
  int same = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) same += x[i] == y[i];
  return same;
}

// f(), with the seconds it took in *seconds.
template <typename F>
auto Timed(F&& f, double* seconds) {
  const auto t0 = Clock::now();
  auto r = f();
  *seconds = Since(t0);
  return r;
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "braid_gpu_check: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Check(Result<T> r, const char* what) {
  if (!r.ok()) Fail(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}
void Check(const Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + s.ToString());
}

struct Args {
  std::string cmd, model, prompts, out_dir, device = "cuda", batches = "1,8,32,128";
  std::string modes = "off,ngram,suffix,ngram:8:fixed";  // serve-spec's --spec values
  int prompt = 128, gen = 128, ctx = 0, prefix = 4096, ranks = 2;
  int blocks = 0, share = 1;  // copy's pool (0: sized from memory) and ranks on one GPU
  ModelOptions::Weights weights = ModelOptions::Weights::kBf16;   // --weights bf16|fp8
  ModelOptions::KvCache kv_cache = ModelOptions::KvCache::kBf16;  // --kv bf16|fp8
};

Args Parse(int argc, char** argv) {
  if (argc < 2)
    Fail(
        "usage: braid_gpu_check "
        "run|compare-cpu|batch|decode|sweep|spec|serve-spec|serve-equal|tier-equal|slides-equal|"
        "cascade|tp|"
        "copy|engines "
        "--model DIR "
        "...");
  Args a;
  a.cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) Fail("missing value after " + k);
    const std::string v = argv[++i];
    if (k == "--model")
      a.model = v;
    else if (k == "--prompts")
      a.prompts = v;
    else if (k == "--out-dir")
      a.out_dir = v;
    else if (k == "--device")
      a.device = v;
    else if (k == "--batches")
      a.batches = v;
    else if (k == "--modes")
      a.modes = v;
    else if (k == "--prompt")
      a.prompt = std::stoi(v);
    else if (k == "--gen")
      a.gen = std::stoi(v);
    else if (k == "--ctx")
      a.ctx = std::stoi(v);
    else if (k == "--prefix")
      a.prefix = std::stoi(v);
    else if (k == "--ranks")
      a.ranks = std::stoi(v);
    else if (k == "--blocks")
      a.blocks = std::stoi(v);
    else if (k == "--share")
      a.share = std::stoi(v);
    else if (k == "--weights" && (v == "bf16" || v == "fp8"))
      a.weights = v == "fp8" ? ModelOptions::Weights::kFp8 : ModelOptions::Weights::kBf16;
    else if (k == "--kv" && (v == "bf16" || v == "fp8"))
      a.kv_cache = v == "fp8" ? ModelOptions::KvCache::kFp8 : ModelOptions::KvCache::kBf16;
    else
      Fail("unknown option " + k);
  }
  if (a.model.empty()) Fail("--model is required");
  return a;
}

std::unique_ptr<Model> OpenModel(const Args& a, const std::string& device, bool exact,
                                 double* seconds = nullptr) {
  ModelOptions o;
  o.path = a.model;
  o.require_tokenizer = false;  // prompts are token ids
  o.device = device;
  if (device != "cpu") {
    o.weights = a.weights;
    o.kv_cache = a.kv_cache;
  }
  o.context = a.ctx;
  o.cpu.exact = exact;
  const auto t0 = Clock::now();
  auto m = Check(Model::Open(o), "opening the model");
  if (seconds) *seconds = Since(t0);
  return m;
}

struct Prompts {
  std::vector<std::vector<int32_t>> prompts;
  int greedy_tokens = 32;
};

Prompts ReadPrompts(const std::string& path) {
  std::ifstream f(path);
  if (!f) Fail("cannot read " + path);
  Json j = Json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.contains("prompts")) Fail(path + ": not a prompts file");
  Prompts p;
  p.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  p.greedy_tokens = j.value("greedy_tokens", 32);
  return p;
}

int Argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

// Every position's logits of `prompt`, then `n` greedy tokens.
void Evaluate(Model& m, const std::vector<int32_t>& prompt, int n, std::vector<float>* all,
              std::vector<int32_t>* greedy) {
  auto seq = m.NewSequence();
  Check(seq->Eval(prompt, all, true), "evaluating a prompt");
  const int V = m.info().n_vocab;
  std::vector<float> logits(all->end() - V, all->end());
  for (int i = 0; i < n; ++i) {
    const int32_t id = Argmax(logits.data(), V);
    greedy->push_back(id);
    if (i + 1 < n) Check(seq->Eval(std::span<const int32_t>(&id, 1), &logits), "decoding");
  }
}

int Run(const Args& a) {
  const Prompts p = ReadPrompts(a.prompts);
  double load_s = 0;
  auto m = OpenModel(a, a.device, false, &load_s);
  Json out;
  out["device"] = m->info().device;
  out["kernels"] = m->info().isa;
  out["load_seconds"] = load_s;
  out["load_gb_per_s"] = m->info().weight_bytes / load_s / 1e9;
  for (size_t i = 0; i < p.prompts.size(); ++i) {
    std::vector<float> all;
    std::vector<int32_t> greedy;
    Evaluate(*m, p.prompts[i], p.greedy_tokens, &all, &greedy);
    const std::string file = "p" + std::to_string(i) + ".f32";
    std::ofstream f(a.out_dir + "/" + file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(all.data()), all.size() * sizeof(float));
    if (!f) Fail("cannot write " + a.out_dir + "/" + file);
    out["prompts"].push_back(
        {{"greedy", greedy}, {"logits", file}, {"n_tokens", p.prompts[i].size()}});
  }
  std::ofstream(a.out_dir + "/result.json") << out.dump(1);
  std::printf("%s\n", Json{{"load_seconds", load_s},
                           {"load_gb_per_s", out["load_gb_per_s"]},
                           {"prompts", p.prompts.size()}}
                          .dump()
                          .c_str());
  return 0;
}

double Cosine(const float* a, const float* b, int n) {
  double ab = 0, aa = 0, bb = 0;
  for (int i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb + 1e-30);
}

int CompareCpu(const Args& a) {
  Prompts p;
  if (!a.prompts.empty()) {
    p = ReadPrompts(a.prompts);
  } else {
    std::mt19937 rng(3);
    for (int len : {5, 17, 40}) {
      std::vector<int32_t> ids(len);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % 256);
      p.prompts.push_back(ids);
    }
    p.greedy_tokens = 16;
  }
  auto cpu = OpenModel(a, "cpu", true);
  auto gpu = OpenModel(a, a.device, false);
  const int V = cpu->info().n_vocab;
  double min_cos = 1, max_diff = 0;
  int same = 0;
  struct Divergence {
    size_t prompt, step;
    double gap;  // the CPU's top-1 minus top-2 logit there
  };
  std::vector<Divergence> diverged;
  Json rows = Json::array();
  for (size_t pi = 0; pi < p.prompts.size(); ++pi) {
    const auto& prompt = p.prompts[pi];
    std::vector<float> lc, lg;
    std::vector<int32_t> gc, gg;
    Evaluate(*cpu, prompt, p.greedy_tokens, &lc, &gc);
    Evaluate(*gpu, prompt, p.greedy_tokens, &lg, &gg);
    for (size_t t = 0; t < prompt.size(); ++t) {
      min_cos = std::min(min_cos, Cosine(&lc[t * V], &lg[t * V], V));
      for (int v = 0; v < V; ++v)
        max_diff =
            std::max(max_diff, static_cast<double>(std::fabs(lc[t * V + v] - lg[t * V + v])));
    }
    if (gc == gg) {
      ++same;
    } else {
      // The CPU's logits at the first step where the two differ (both saw
      // the same tokens before it).
      size_t k = 0;
      while (gc[k] == gg[k]) ++k;
      std::vector<int32_t> history = prompt;
      history.insert(history.end(), gc.begin(), gc.begin() + k);
      std::vector<float> all;
      auto seq = cpu->NewSequence();
      Check(seq->Eval(history, &all), "evaluating a prefix");
      std::partial_sort(all.begin(), all.begin() + 2, all.end(), std::greater<float>());
      diverged.push_back({pi, k, all[0] - all[1]});
    }
    rows.push_back({{"cpu", gc}, {"cuda", gg}});
  }
  // bf16 weights against fp32: a continuation may part where the CPU's top
  // two logits are closer than the largest logit difference seen.
  bool ties_only = true;
  Json exceptions = Json::array();
  for (const Divergence& d : diverged) {
    exceptions.push_back({{"prompt", d.prompt}, {"step", d.step}, {"cpu_top2_gap", d.gap}});
    ties_only &= d.gap < max_diff;
  }
  Json out = {{"min_cosine", min_cos},
              {"max_abs_diff", max_diff},
              {"greedy_identical", same},
              {"prompts", p.prompts.size()},
              {"exceptions", exceptions},
              {"greedy", rows},
              {"pass", min_cos >= 0.999 && ties_only}};
  std::printf("%s\n", out.dump().c_str());
  return out["pass"].get<bool>() ? 0 : 1;
}

int Batch(const Args& a) {
  const Prompts p = ReadPrompts(a.prompts);
  EngineOptions o;
  o.model.path = a.model;
  o.model.require_tokenizer = false;  // prompts are token ids
  o.model.device = a.device;
  o.model.weights = a.weights;
  o.model.kv_cache = a.kv_cache;
  o.model.context = a.ctx;
  o.max_batch_tokens = 2048;
  o.max_running = 64;
  int most = 0;
  for (const auto& q : p.prompts) most = std::max(most, static_cast<int>(q.size()));
  o.kv_tokens = static_cast<int>(p.prompts.size()) * (most + a.gen + 16);
  auto engine = Check(Engine::Open(o), "opening the engine");
  auto request = [&](const std::vector<int32_t>& prompt) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = a.gen;
    r.sampling.ignore_eos = true;
    r.cache_salt = 0;
    return r;
  };
  std::vector<std::vector<int32_t>> alone, together;
  for (const auto& q : p.prompts) {
    auto h = Check(engine->Submit(request(q)), "submitting");
    alone.push_back(h->Wait().tokens);
  }
  // Fresh salt so that the second round recomputes rather than reusing the cache.
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& q : p.prompts) {
    GenerationRequest r = request(q);
    r.cache_salt = 1;
    hs.push_back(Check(engine->Submit(std::move(r)), "submitting"));
  }
  for (auto& h : hs) together.push_back(h->Wait().tokens);
  int same = 0;
  Json diffs = Json::array();
  for (size_t i = 0; i < alone.size(); ++i) {
    if (alone[i] == together[i]) {
      ++same;
      continue;
    }
    size_t k = 0;
    while (k < alone[i].size() && k < together[i].size() && alone[i][k] == together[i][k]) ++k;
    diffs.push_back({{"prompt", i}, {"first_difference", k}});
  }
  Json out = {{"identical", same}, {"total", alone.size()}, {"differences", diffs}};
  engine->Shutdown();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// Greedy decode of `B` sequences of `prompt` random tokens for `gen` steps
// straight on the backend (ids picked on the device); seconds per step,
// after 3 warm-up steps, and the prefill tokens/s.
struct DecodeTiming {
  double step_s = 0, prefill_tokens_per_s = 0;
  std::vector<int32_t> tokens;  // the first sequence's greedy tokens
};
DecodeTiming TimeDecode(Backend& backend, int n_vocab, int B, int prompt_len, int gen,
                        std::mt19937& rng) {
  const int bs = 16;
  const int per_seq = (prompt_len + gen + bs - 1) / bs;
  auto kv = Check(backend.AllocateKv(B * per_seq, bs), "allocating KV");
  std::vector<std::vector<int32_t>> tables(B, std::vector<int32_t>(per_seq));
  for (int s = 0; s < B; ++s)
    for (int i = 0; i < per_seq; ++i) tables[s][i] = s * per_seq + i;
  std::vector<std::vector<int32_t>> prompts(B, std::vector<int32_t>(prompt_len));
  for (auto& p : prompts)
    for (auto& id : p) id = static_cast<int32_t>(rng() % n_vocab);
  // Prefill, several sequences per forward pass (a prompt longer than the
  // backend's chunk in chunks of its own); the last token's argmax is each
  // sequence's first generated token.
  std::vector<int32_t> next(B);
  const int chunk = std::min(prompt_len, backend.max_chunk());
  const int per_pass = std::max(1, backend.max_chunk() / prompt_len);
  const auto tp = Clock::now();
  for (int s0 = 0; s0 < B; s0 += per_pass) {
    for (int pos0 = 0; pos0 < prompt_len; pos0 += chunk) {
      std::vector<BatchSegment> segs;
      for (int s = s0; s < std::min(B, s0 + per_pass); ++s) {
        BatchSegment g;
        g.tokens = prompts[s].data() + pos0;
        g.n_tokens = std::min(chunk, prompt_len - pos0);
        g.pos0 = pos0;
        g.block_table = tables[s].data();
        g.logits_from = prompt_len - 1;
        segs.push_back(g);
      }
      Check(backend.ForwardArgmax(segs, *kv, next.data() + s0), "prefill");
    }
  }
  DecodeTiming t;
  t.prefill_tokens_per_s = static_cast<double>(B) * prompt_len / Since(tp);
  std::vector<int32_t> cur(B);
  std::vector<BatchSegment> segs(B);
  const int warm = 3;
  Clock::time_point t0;
  for (int step = 0; step < gen; ++step) {
    if (step == warm) t0 = Clock::now();
    cur = next;
    for (int s = 0; s < B; ++s) {
      segs[s].tokens = &cur[s];
      segs[s].n_tokens = 1;
      segs[s].pos0 = prompt_len + step;
      segs[s].block_table = tables[s].data();
      segs[s].logits_from = segs[s].pos0;
    }
    // A profiler picks the timed steps by this range (scripts/gpu/profile_step.sh).
    if (step >= warm) nvtxRangePushA("decode_step");
    Check(backend.ForwardArgmax(segs, *kv, next.data()), "decode");
    if (step >= warm) nvtxRangePop();
    t.tokens.push_back(next[0]);
  }
  t.step_s = Since(t0) / (gen - warm);
  return t;
}

int Decode(const Args& a) {
  auto file = Check(LoadModelFile(a.model), "loading the model file");
  ModelOptions mo;
  mo.path = a.model;
  mo.device = a.device;
  mo.weights = a.weights;
  mo.kv_cache = a.kv_cache;
  auto backend = Check(OpenBackend(*file, mo, a.prompt + a.gen + 16), "opening the backend");
  const int n_vocab = backend->n_vocab();
  std::mt19937 rng(11);
  std::vector<double> steps;
  uint64_t greedy = 1469598103934665603ull;  // FNV-1a of every round's tokens: paths that agree
  for (int round = 0; round < 3; ++round) {
    const DecodeTiming t = TimeDecode(*backend, n_vocab, 1, a.prompt, a.gen, rng);
    steps.push_back(t.step_s);
    for (int32_t id : t.tokens) greedy = (greedy ^ static_cast<uint32_t>(id)) * 1099511628211ull;
  }
  std::sort(steps.begin(), steps.end());
  const double rate = 1.0 / steps[steps.size() / 2];
  ModelInfo info;
  backend->Describe(&info);  // after the run: with the kernel choices it measured
  backend.reset();
  // The same through the public Model API, logits copied to the host and
  // the token picked there (what `braid generate` does today).
  auto m = OpenModel(a, a.device, false);
  std::vector<int32_t> prompt(a.prompt);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % n_vocab);
  auto seq = m->NewSequence();
  std::vector<float> logits;
  Check(seq->Eval(prompt, &logits), "prefill");
  const auto t0 = Clock::now();
  for (int i = 0; i < a.gen; ++i) {
    const int32_t id = Argmax(logits.data(), static_cast<int>(logits.size()));
    Check(seq->Eval(std::span<const int32_t>(&id, 1), &logits), "decode");
  }
  const double model_rate = a.gen / Since(t0);
  const double bw = Check(MeasureCudaCopyBandwidth(0), "copy bandwidth");
  const double roofline = bw * 1e9 / info.bytes_per_token;
  Json out = {{"tokens_per_s", rate},
              {"model_api_tokens_per_s", model_rate},
              {"copy_gb_per_s", bw},
              {"bytes_per_token", info.bytes_per_token},
              {"roofline_tokens_per_s", roofline},
              {"roofline_share", rate / roofline},
              {"prompt", a.prompt},
              {"gen", a.gen},
              {"greedy_fnv", std::to_string(greedy)},
              {"kernels", info.isa}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int Sweep(const Args& a) {
  std::vector<int> batches;
  for (size_t i = 0; i < a.batches.size();) {
    size_t j = a.batches.find(',', i);
    if (j == std::string::npos) j = a.batches.size();
    batches.push_back(std::stoi(a.batches.substr(i, j - i)));
    i = j + 1;
  }
  auto file = Check(LoadModelFile(a.model), "loading the model file");
  const ModelConfig& c = file->config();
  ModelOptions mo;
  mo.path = a.model;
  mo.device = a.device;
  mo.weights = a.weights;
  mo.kv_cache = a.kv_cache;
  const int context = a.prompt + a.gen + 16;
  auto backend = Check(OpenBackend(*file, mo, context), "opening the backend");
  ModelInfo info;
  backend->Describe(&info);
  const double bw = Check(MeasureCudaCopyBandwidth(0), "copy bandwidth");
  Json rows = Json::array();
  std::mt19937 rng(5);
  for (int B : batches) {
    const DecodeTiming t = TimeDecode(*backend, c.n_vocab, B, a.prompt, a.gen, rng);
    const double tok_s = B / t.step_s;
    const double gemm_s = Check(MeasureGemmSeconds(c, B, 0), "GEMM rate");
    // Roofline: weights once per step plus each sequence's KV at its mean length.
    const double kv_bytes =
        static_cast<double>(backend->KvBlockBytes(1)) * B * (a.prompt + a.gen / 2.0);
    const double roof_step = (info.bytes_per_token + kv_bytes) / (bw * 1e9);
    rows.push_back({{"batch", B},
                    {"tokens_per_s", tok_s},
                    {"step_ms", t.step_s * 1e3},
                    {"prefill_tokens_per_s", t.prefill_tokens_per_s},
                    {"roofline_tokens_per_s", B / roof_step},
                    {"roofline_share", roof_step / t.step_s},
                    {"cublas_gemm_ms", gemm_s * 1e3},
                    {"cublas_tokens_per_s", B / gemm_s},
                    {"share_of_cublas", gemm_s / t.step_s}});
    std::fprintf(stderr, "batch %d: %.1f tok/s, step %.2f ms (cuBLAS GEMMs %.2f ms)\n", B, tok_s,
                 t.step_s * 1e3, gemm_s * 1e3);
  }
  backend->Describe(&info);  // with the kernel choices it measured
  Json out = {
      {"rows", rows},       {"copy_gb_per_s", bw}, {"bytes_per_token", info.bytes_per_token},
      {"prompt", a.prompt}, {"gen", a.gen},        {"kernels", info.isa}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int Spec(const Args& a) {
  auto m = OpenModel(a, a.device, false);
  const int n_vocab = m->info().n_vocab;
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(a.prompt);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % n_vocab);

  // What checking guesses costs: a pass over n tokens against one token.
  Json passes = Json::array();
  {
    auto seq = m->NewSequence();
    std::vector<float> logits;
    Check(seq->Eval(prompt, &logits), "prefill");
    double one = 0;
    for (int n : {1, 2, 3, 5, 9, 17}) {
      std::vector<int32_t> toks(n);
      for (auto& id : toks) id = static_cast<int32_t>(rng() % n_vocab);
      std::vector<double> t;
      for (int rep = 0; rep < 11; ++rep) {
        const auto t0 = Clock::now();
        Check(seq->Eval(toks, &logits, n > 1), "pass");
        if (rep > 0) t.push_back(Since(t0));
        seq->Truncate(static_cast<int>(prompt.size()));
      }
      std::sort(t.begin(), t.end());
      const double ms = 1e3 * t[t.size() / 2];
      if (n == 1) one = ms;
      passes.push_back({{"tokens", n}, {"ms", ms}, {"vs_one", ms / one}});
    }
  }

  // Greedy generation with each proposer; the best of 2 runs.
  SamplingParams sp = SamplingParams::Greedy();
  sp.max_tokens = a.gen;
  sp.ignore_eos = true;
  Json runs = Json::array();
  std::vector<int32_t> plain;
  bool same = true;
  for (auto kind :
       {SpecOptions::Kind::kOff, SpecOptions::Kind::kNgram, SpecOptions::Kind::kSuffix}) {
    SpecOptions spec;
    spec.kind = kind;
    GenerateResult best;
    double rate = 0;
    for (int rep = 0; rep < 2; ++rep) {
      GenerateResult g = Check(Generate(*m, prompt, sp, {}, spec), "generate");
      const double r = (g.tokens.size() - 1) / g.decode_seconds;
      if (r > rate) rate = r, best = std::move(g);
    }
    if (kind == SpecOptions::Kind::kOff) plain = best.tokens;
    const bool equal = best.tokens == plain;
    same &= equal;
    runs.push_back({{"spec", spec.name()},
                    {"tokens_per_s", rate},
                    {"proposed", best.spec_proposed},
                    {"accepted", best.spec_accepted},
                    {"tokens_per_pass",
                     best.decode_steps ? (best.tokens.size() - 1.0) / best.decode_steps : 1.0},
                    {"same_as_plain", equal}});
  }
  Json out = {{"prompt", a.prompt}, {"gen", a.gen}, {"passes", passes}, {"runs", runs}};
  std::printf("%s\n", out.dump().c_str());
  return same ? 0 : 1;
}

int ServeSpec(const Args& a) {
  std::vector<int> batches;
  for (size_t at = 0; at < a.batches.size();) {
    size_t comma = a.batches.find(',', at);
    if (comma == std::string::npos) comma = a.batches.size();
    batches.push_back(std::stoi(a.batches.substr(at, comma - at)));
    at = comma + 1;
  }
  const int most = *std::max_element(batches.begin(), batches.end());
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  Json rows = Json::array();
  std::vector<std::vector<std::vector<int32_t>>> plain(batches.size());
  std::vector<std::string> modes;
  for (size_t at = 0; at <= a.modes.size();) {
    size_t comma = a.modes.find(',', at);
    if (comma == std::string::npos) comma = a.modes.size();
    modes.push_back(a.modes.substr(at, comma - at));
    at = comma + 1;
  }
  if (modes.empty() || modes[0] != "off") Fail("--modes: the first must be off (the reference)");
  for (const std::string& mode_name : modes) {
    const char* mode = mode_name.c_str();
    EngineOptions o;
    o.model.path = a.model;
    o.model.require_tokenizer = false;  // prompts are token ids
    o.model.device = a.device;
    o.model.weights = a.weights;
    o.model.kv_cache = a.kv_cache;
    o.model.context = a.ctx;
    o.max_batch_tokens = a.device == "cpu" ? 256 : 2048;
    o.max_running = most;
    o.kv_tokens = (most + 1) * (a.prompt + a.gen + 48);
    o.spec = Check(ParseSpecOptions(mode), "--spec");
    auto engine = Check(Engine::Open(o), "opening the engine");
    if (prompts.empty()) {
      const int n_vocab = engine->model()->info().n_vocab;
      for (int i = 0; i < most + 1; ++i) {
        std::vector<int32_t> p(a.prompt);
        for (auto& id : p) id = static_cast<int32_t>(rng() % n_vocab);
        prompts.push_back(std::move(p));
      }
    }
    auto run = [&](int b, uint64_t salt) {
      std::vector<std::shared_ptr<RequestHandle>> hs;
      for (int i = 0; i < b; ++i) {
        GenerationRequest r;
        r.prompt = prompts[i];
        r.sampling.temperature = 0;
        r.sampling.max_tokens = a.gen;
        r.sampling.ignore_eos = true;
        r.cache_salt = salt;
        hs.push_back(Check(engine->Submit(std::move(r)), "submitting"));
      }
      std::vector<std::vector<int32_t>> out;
      for (auto& h : hs) {
        const Completion c = h->Wait();
        if (c.finish_reason != "length")
          Fail(std::string(mode) + ": a request ended with '" + c.finish_reason + "': " + c.error);
        out.push_back(c.tokens);
      }
      return out;
    };
    run(1, 1000);  // warm-up: kernel choices, step costs
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const int b = batches[bi];
      const EngineStats s0 = engine->stats();
      const auto t0 = Clock::now();
      std::vector<std::vector<int32_t>> out = run(b, 1 + bi);
      const double secs = Since(t0);
      const EngineStats s1 = engine->stats();
      if (std::string(mode) == "off") plain[bi] = out;
      int same = 0;
      for (int i = 0; i < b; ++i) same += out[i] == plain[bi][i];
      const double proposed = s1.spec_proposed - s0.spec_proposed;
      const double accepted = s1.spec_accepted - s0.spec_accepted;
      const double passes = s1.decode_passes - s0.decode_passes;
      const double tokens = s1.decode_tokens_out - s0.decode_tokens_out;
      rows.push_back({{"spec", mode},
                      {"batch", b},
                      {"seconds", secs},
                      {"tokens_per_s", b * a.gen / secs},
                      {"proposed", proposed},
                      {"accepted", accepted},
                      {"tokens_per_pass", passes > 0 ? tokens / passes : 1.0},
                      {"steps", s1.steps - s0.steps},
                      {"forward_s", s1.forward_seconds - s0.forward_seconds},
                      {"propose_s", s1.propose_seconds - s0.propose_seconds},
                      {"same_as_off", same}});
      std::fprintf(stderr,
                   "%s batch %d: %.1f tok/s, %.0f of %.0f kept, %.2f tokens/pass, %d/%d same; "
                   "%llu steps, forward %.1f ms, proposing %.1f ms of %.1f ms\n",
                   mode, b, b * a.gen / secs, accepted, proposed,
                   passes > 0 ? tokens / passes : 1.0, same, b,
                   static_cast<unsigned long long>(s1.steps - s0.steps),
                   1e3 * (s1.forward_seconds - s0.forward_seconds),
                   1e3 * (s1.propose_seconds - s0.propose_seconds), 1e3 * secs);
    }
    engine->Shutdown();
  }
  Json out = {{"prompt", a.prompt}, {"gen", a.gen}, {"rows", rows}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// An engine on the model of `a` for requests given as token ids, 2,048
// positions of context.
EngineOptions IdsEngineOptions(const Args& a) {
  EngineOptions o;
  o.model.path = a.model;
  o.model.require_tokenizer = false;  // prompts are token ids
  o.model.device = a.device;
  o.model.weights = a.weights;
  o.model.kv_cache = a.kv_cache;
  o.model.context = 2048;
  return o;
}

// 64 mixed requests (random prompts of 5-600 tokens, half of them behind one
// 512-token shared prefix, 16-128 new tokens each) one at a time, then all at
// once with a KV pool a third of what they need together (forcing preemption
// by recompute): greedy outputs identical. Then seeded sampling (temperature
// 0.8, top-k 40, top-p 0.95) one at a time through the device's top-k rows
// and through whole logits rows (a no-op logits processor asks for them):
// identical draws; and sampled batched against alone, reported.
int ServeEqual(const Args& a) {
  std::mt19937 rng(5);
  const int n = 64, shared = 512;
  std::uniform_int_distribution<int> plen(5, 600), glen(16, 128);
  std::vector<int> lens, gens;
  size_t need = 0;
  for (int i = 0; i < n; ++i) {
    lens.push_back(plen(rng) + (i % 2 == 0 ? shared : 0));
    gens.push_back(glen(rng));
    need += lens.back() + gens.back() + 16;
  }
  EngineOptions o = IdsEngineOptions(a);
  o.kv_tokens = static_cast<int>(need / 3);
  o.kv_growth_reserve = 0;  // admit what fits the step, so that decoding preempts
  auto engine = Check(Engine::Open(o), "opening the engine");
  std::uniform_int_distribution<int32_t> pick(100, engine->model()->info().n_vocab - 1);
  std::vector<int32_t> prefix(shared);
  for (int32_t& t : prefix) t = pick(rng);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    if (i % 2 == 0) r.prompt = prefix;
    while (static_cast<int>(r.prompt.size()) < lens[i]) r.prompt.push_back(pick(rng));
    r.sampling = SamplingParams::Greedy();
    r.sampling.max_tokens = gens[i];
    r.sampling.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  auto run = [&](std::vector<GenerationRequest> rs, bool together, uint64_t salt) {
    std::vector<std::vector<int32_t>> out;
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (auto& r : rs) {
      r.cache_salt = salt;
      auto h = Check(engine->Submit(std::move(r)), "submitting");
      if (together)
        hs.push_back(h);
      else
        out.push_back(h->Wait().tokens);
    }
    for (auto& h : hs) out.push_back(h->Wait().tokens);
    return out;
  };
  double alone_s = 0, together_s = 0;
  const auto alone = Timed([&] { return run(reqs, false, 1); }, &alone_s);
  const uint64_t pre0 = engine->stats().preemptions;
  const auto together = Timed([&] { return run(reqs, true, 2); }, &together_s);
  const uint64_t preempted = engine->stats().preemptions - pre0;
  // Sampling.
  std::vector<GenerationRequest> sampled = reqs, full;
  for (size_t i = 0; i < sampled.size(); ++i) {
    SamplingParams& sp = sampled[i].sampling;
    sp.temperature = 0.8f, sp.top_k = 40, sp.top_p = 0.95f, sp.min_p = 0.05f, sp.seed = 1000 + i;
  }
  full = sampled;
  for (auto& r : full) r.logits_processor = [](std::span<const int32_t>, std::span<float>) {};
  const auto s_top = run(sampled, false, 3);
  const auto s_full = run(full, false, 4);
  const auto s_together = run(sampled, true, 5);
  Json out = {{"requests", n},
              {"kv_pool_tokens", engine->stats().kv_blocks_total * o.block_size},
              {"tokens_needed_together", need},
              {"preemptions", preempted},
              {"cascade_passes", engine->stats().cascade_passes},
              {"cascade_tokens", engine->stats().cascade_tokens},
              {"greedy_identical", CountSame(alone, together)},
              {"alone_s", alone_s},
              {"together_s", together_s},
              {"sampled_top_k_rows_vs_whole_rows_identical", CountSame(s_top, s_full)},
              {"sampled_batched_vs_alone_identical", CountSame(s_top, s_together)}};
  engine->Shutdown();
  std::printf("%s\n", out.dump().c_str());
  return CountSame(alone, together) == n && CountSame(s_top, s_full) == n && preempted > 0 ? 0 : 1;
}

// The host KV tier changes no greedy output: 64 requests in waves of 8 over
// 8 prefixes of 768 tokens, on a pool that holds about two and a half of
// them, with the tier off and on (the same requests, one engine each).
int TierEqual(const Args& a) {
  std::mt19937 rng(17);
  const int n = 64, n_prefix = 8, prefix_len = 768;
  auto open = [&](int64_t host) {
    EngineOptions o = IdsEngineOptions(a);
    o.kv_tokens = prefix_len * 5 / 2;
    o.kv_growth_reserve = 0;
    o.kv_host_bytes = host;
    return Check(Engine::Open(o), "opening the engine");
  };
  std::vector<GenerationRequest> reqs;
  {
    auto probe = open(0);
    std::uniform_int_distribution<int32_t> pick(100, probe->model()->info().n_vocab - 1);
    std::uniform_int_distribution<int> slen(5, 64), glen(16, 64);
    std::vector<std::vector<int32_t>> prefixes(n_prefix);
    for (auto& p : prefixes)
      for (int k = 0; k < prefix_len; ++k) p.push_back(pick(rng));
    for (int i = 0; i < n; ++i) {
      GenerationRequest r;
      r.prompt = prefixes[static_cast<size_t>((i * 3) % n_prefix)];
      for (int k = slen(rng); k > 0; --k) r.prompt.push_back(pick(rng));
      r.sampling = SamplingParams::Greedy();
      r.sampling.max_tokens = glen(rng);
      r.sampling.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    probe->Shutdown();
  }
  auto run = [&](int64_t host, EngineStats* stats) {
    auto engine = open(host);
    std::vector<std::vector<int32_t>> out;
    for (int at = 0; at < n; at += 8) {
      std::vector<std::shared_ptr<RequestHandle>> wave;
      for (int i = at; i < at + 8; ++i)
        wave.push_back(Check(engine->Submit(reqs[static_cast<size_t>(i)]), "submitting"));
      for (auto& h : wave) out.push_back(h->Wait().tokens);
    }
    *stats = engine->stats();
    engine->Shutdown();
    return out;
  };
  EngineStats off, on;
  double off_s = 0, on_s = 0;
  const auto without = Timed([&] { return run(0, &off); }, &off_s);
  const auto with = Timed([&] { return run(int64_t{8} << 30, &on); }, &on_s);
  const int same = CountSame(without, with);
  Json out = {{"requests", n},
              {"greedy_identical", same},
              {"kv_pool_tokens", on.kv_blocks_total * 16},
              {"off_s", off_s},
              {"on_s", on_s},
              {"off_cached_prompt_tokens", off.cached_prompt_tokens},
              {"on_cached_prompt_tokens", on.cached_prompt_tokens},
              {"on_host_prompt_tokens", on.host_prompt_tokens},
              {"host_blocks_in", on.host_blocks_in},
              {"host_blocks_out", on.host_blocks_out},
              {"host_copy_failures", on.host_copy_failures}};
  std::printf("%s\n", out.dump().c_str());
  return same == n && on.host_prompt_tokens > 0 && on.host_copy_failures == 0 ? 0 : 1;
}

// A hybrid model's sliding layers in slides change no greedy output: 32
// requests (prompts of 200-1,400 tokens, half behind one 700-token shared
// prefix, 16-64 new tokens each) one at a time with slides off, then all at
// once with slides on, four running and 256 tokens a step on a pool a third
// of what they need (few slides: they are taken back from cached blocks).
// Also prints the positions the default memory share holds each way.
int SlidesEqual(const Args& a) {
  std::mt19937 rng(23);
  const int n = 32, shared = 700;
  std::uniform_int_distribution<int> plen(200, 700), glen(16, 64);
  auto open = [&](bool slides, int kv_tokens) {
    EngineOptions o = IdsEngineOptions(a);
    o.kv_tokens = kv_tokens;
    o.kv_slides = slides;
    if (kv_tokens > 0) {
      o.max_running = 4;
      o.max_batch_tokens = 256;
      o.kv_growth_reserve = 0;
    }
    return Check(Engine::Open(o), "opening the engine");
  };
  // The default pool (sized from memory) both ways.
  int64_t capacity[2] = {0, 0};
  uint64_t bytes[2] = {0, 0};
  int slides_total = 0, n_vocab = 0;
  for (int on = 0; on < 2; ++on) {
    auto e = open(on == 1, 0);
    capacity[on] = static_cast<int64_t>(e->stats().kv_blocks_total) * 16;
    bytes[on] = e->stats().kv_pool_bytes;
    if (on) slides_total = e->stats().kv_slides_total;
    n_vocab = e->model()->info().n_vocab;
    e->Shutdown();
  }
  std::vector<GenerationRequest> reqs;
  size_t need = 0;
  {
    std::uniform_int_distribution<int32_t> pick(100, n_vocab - 1);
    std::vector<int32_t> prefix(shared);
    for (int32_t& t : prefix) t = pick(rng);
    for (int i = 0; i < n; ++i) {
      GenerationRequest r;
      if (i % 2 == 0) r.prompt = prefix;
      const int len = plen(rng) + (i % 4 == 1 ? 700 : 0);
      while (static_cast<int>(r.prompt.size()) < len + (i % 2 == 0 ? shared : 0))
        r.prompt.push_back(pick(rng));
      r.sampling = SamplingParams::Greedy();
      r.sampling.max_tokens = glen(rng);
      r.sampling.ignore_eos = true;
      need += r.prompt.size() + static_cast<size_t>(r.sampling.max_tokens) + 16;
      reqs.push_back(std::move(r));
    }
  }
  auto run = [&](bool slides, bool together, EngineStats* stats) {
    auto engine = open(slides, static_cast<int>(need / 3));
    std::vector<std::vector<int32_t>> out;
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (const auto& r : reqs) {
      auto h = Check(engine->Submit(r), "submitting");
      if (together)
        hs.push_back(h);
      else
        out.push_back(h->Wait().tokens);
    }
    for (auto& h : hs) out.push_back(h->Wait().tokens);
    *stats = engine->stats();
    engine->Shutdown();
    return out;
  };
  EngineStats off, on;
  double off_s = 0, on_s = 0;
  const auto without = Timed([&] { return run(false, false, &off); }, &off_s);
  const auto with = Timed([&] { return run(true, true, &on); }, &on_s);
  const int same = CountSame(without, with);
  Json out = {{"requests", n},
              {"greedy_identical", same},
              {"kv_pool_tokens", on.kv_blocks_total * 16},
              {"kv_slides", on.kv_slides_total},
              {"slides_taken_back", on.kv_slides_taken_back},
              {"preemptions", on.preemptions},
              {"cached_prompt_tokens", on.cached_prompt_tokens},
              {"off_alone_s", off_s},
              {"on_together_s", on_s},
              {"default_pool_tokens_without_slides", capacity[0]},
              {"default_pool_tokens_with_slides", capacity[1]},
              {"default_pool_bytes_without_slides", bytes[0]},
              {"default_pool_bytes_with_slides", bytes[1]},
              {"default_slides", slides_total}};
  std::printf("%s\n", out.dump().c_str());
  return same == n && on.kv_slides_total > 0 && on.kv_slides_taken_back > 0 ? 0 : 1;
}

int Cascade(const Args& a) {
  const int B = std::stoi(a.batches), P = a.prefix;
  std::mt19937 rng(13);
  std::vector<int32_t> prefix;
  std::vector<std::vector<int32_t>> suffixes;
  struct Phase {
    std::string name;
    double decode_s = 0, step_ms = 0, tokens_per_s = 0;
    uint64_t steps = 0, cascade_passes = 0;
    std::vector<std::vector<int32_t>> out;
  };
  // One engine per phase (the backend reads BRAID_CUDA_CASCADE when it opens).
  auto phase = [&](const std::string& name, bool cascade, bool with_prefix, bool alone) {
    setenv("BRAID_CUDA_CASCADE", cascade ? "1" : "0", 1);
    EngineOptions o;
    o.model.path = a.model;
    o.model.require_tokenizer = false;  // prompts are token ids
    o.model.device = a.device;
    o.model.weights = a.weights;
    o.model.kv_cache = a.kv_cache;
    o.model.context = a.ctx;
    o.max_batch_tokens = 2048;
    o.max_running = B + 1;
    o.kv_tokens = P + (B + 2) * (a.prompt + a.gen + 32);
    auto engine = Check(Engine::Open(o), "opening the engine");
    const int n_vocab = engine->model()->info().n_vocab;
    if (prefix.empty()) {
      prefix.resize(P);
      for (auto& id : prefix) id = static_cast<int32_t>(rng() % n_vocab);
      for (int i = 0; i <= B; ++i) {
        std::vector<int32_t> s(a.prompt);
        for (auto& id : s) id = static_cast<int32_t>(rng() % n_vocab);
        suffixes.push_back(std::move(s));
      }
    }
    auto request = [&](int i) {
      GenerationRequest r;
      if (with_prefix) r.prompt = prefix;
      r.prompt.insert(r.prompt.end(), suffixes[i].begin(), suffixes[i].end());
      r.sampling.temperature = 0;
      r.sampling.max_tokens = a.gen;
      r.sampling.ignore_eos = true;
      return r;
    };
    // The prefix cached first (with request B's own suffix), as a system
    // prompt would be.
    Check(engine->Submit(request(B)), "submitting")->Wait();
    Phase ph;
    ph.name = name;
    const EngineStats s0 = engine->stats();
    if (alone) {
      for (int i = 0; i < B; ++i)
        ph.out.push_back(Check(engine->Submit(request(i)), "submitting")->Wait().tokens);
    } else {
      std::vector<std::shared_ptr<RequestHandle>> hs;
      for (int i = 0; i < B; ++i) hs.push_back(Check(engine->Submit(request(i)), "submitting"));
      double first = 0, end = 0;
      for (auto& h : hs) {
        const Completion c = h->Wait();
        if (c.finish_reason != "length") Fail(name + ": a request ended early: " + c.error);
        first = std::max(first, c.timings.ttft_ms);
        end = std::max(end, c.timings.total_ms);
        ph.out.push_back(c.tokens);
      }
      // Every request decodes from the last first token on: the decode phase.
      ph.decode_s = (end - first) / 1e3;
      ph.step_ms = 1e3 * ph.decode_s / std::max(1, a.gen - 1);
      ph.tokens_per_s = B * (a.gen - 1) / std::max(1e-9, ph.decode_s);
    }
    ph.steps = engine->stats().steps - s0.steps;
    ph.cascade_passes = engine->stats().cascade_passes - s0.cascade_passes;
    engine->Shutdown();
    std::fprintf(
        stderr, "%s: %.2f ms a decode step, %.0f decode tok/s, %llu steps (%llu cascade)\n",
        name.c_str(), ph.step_ms, ph.tokens_per_s, static_cast<unsigned long long>(ph.steps),
        static_cast<unsigned long long>(ph.cascade_passes));
    return ph;
  };
  const Phase off = phase("cascade off", false, true, false);
  const Phase on = phase("cascade on", true, true, false);
  const Phase bare = phase("no prefix", true, false, false);
  // The same step without CUDA graphs: what running a step eagerly costs.
  setenv("BRAID_CUDA_GRAPHS", "0", 1);
  const Phase eager = phase("no prefix, eager", true, false, false);
  unsetenv("BRAID_CUDA_GRAPHS");
  const Phase alone = phase("each alone", true, true, true);
  auto same = [](const Phase& x, const Phase& y) { return CountSame(x.out, y.out); };
  Json rows = Json::array();
  for (const Phase* ph : {&off, &on, &bare, &eager})
    rows.push_back({{"phase", ph->name},
                    {"decode_s", ph->decode_s},
                    {"step_ms", ph->step_ms},
                    {"decode_tokens_per_s", ph->tokens_per_s},
                    {"steps", ph->steps},
                    {"cascade_passes", ph->cascade_passes}});
  const double att_off = off.step_ms - bare.step_ms, att_on = on.step_ms - bare.step_ms;
  Json out = {{"requests", B},
              {"prefix", P},
              {"suffix", a.prompt},
              {"gen", a.gen},
              {"rows", rows},
              {"attention_ms_per_step_off", att_off},
              {"attention_ms_per_step_on", att_on},
              {"attention_speedup", att_on > 0 ? att_off / att_on : 0.0},
              {"eager_ms_per_step", eager.step_ms - bare.step_ms},
              {"eager_same_as_graphs", same(eager, bare)},
              {"decode_speedup", off.tokens_per_s > 0 ? on.tokens_per_s / off.tokens_per_s : 0.0},
              {"on_same_as_off", same(on, off)},
              {"on_same_as_alone", same(on, alone)},
              {"off_same_as_alone", same(off, alone)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// Ranks that share one GPU, for checking the shards' arithmetic where the
// host has one GPU (NCCL takes one rank per GPU): the partial sums meet in
// rank 0's buffer through cuBLAS, host threads waiting for each other at
// barriers, so nothing of it can be captured into a graph.
class SharedGpuGroup {
 public:
  explicit SharedGpuGroup(int n) : barrier_(n), bufs_(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(this, r, n));
  }
  ~SharedGpuGroup() {
    if (blas_) cublasDestroy(blas_);
  }
  std::vector<Collective*> ranks() {
    std::vector<Collective*> out;
    for (auto& r : ranks_) out.push_back(r.get());
    return out;
  }

 private:
  struct Rank final : Collective {
    Rank(SharedGpuGroup* g, int r, int n) : g(g), r(r), n(n) {}
    int rank() const override { return r; }
    int size() const override { return n; }
    bool graph_safe() const override { return false; }
    Status AllReduceSum(float* buf, size_t count, void* stream) override {
      return g->Sum(r, buf, count, static_cast<cudaStream_t>(stream));
    }
    SharedGpuGroup* g;
    int r, n;
  };
  Status Sum(int r, float* buf, size_t count, cudaStream_t stream) {
    if (cudaStreamSynchronize(stream) != cudaSuccess) return Status::Internal("rank sync");
    bufs_[static_cast<size_t>(r)] = buf;
    barrier_.arrive_and_wait();  // every partial is ready
    Status st;
    if (r == 0) {
      if (!blas_ && cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS)
        st = Status::Internal("cublasCreate");
      const float one = 1.0f;
      for (size_t i = 1; i < bufs_.size() && st.ok(); ++i)
        if (cublasSaxpy(blas_, static_cast<int>(count), &one, bufs_[i], 1, buf, 1) !=
            CUBLAS_STATUS_SUCCESS)
          st = Status::Internal("cublasSaxpy");
      if (cudaDeviceSynchronize() != cudaSuccess) st = Status::Internal("sum sync");
    }
    barrier_.arrive_and_wait();  // rank 0 holds the sum
    if (r != 0 && cudaMemcpyAsync(buf, bufs_[0], count * sizeof(float), cudaMemcpyDeviceToDevice,
                                  stream) == cudaSuccess)
      cudaStreamSynchronize(stream);
    barrier_.arrive_and_wait();  // every rank has it before rank 0's buffer moves on
    return st;
  }
  std::barrier<> barrier_;
  std::vector<float*> bufs_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  cublasHandle_t blas_ = nullptr;
};

// Every position's logits of `prompt` in one forward pass, then `n` greedy
// tokens one decode step each (ids picked on the device).
void EvaluateBackend(Backend& b, const std::vector<int32_t>& prompt, int n, std::vector<float>* all,
                     std::vector<int32_t>* greedy) {
  const int bs = 16, blocks = (static_cast<int>(prompt.size()) + n + bs) / bs;
  auto kv = Check(b.AllocateKv(blocks, bs), "allocating KV");
  std::vector<int32_t> table(blocks);
  for (int i = 0; i < blocks; ++i) table[i] = i;
  BatchSegment s;
  s.tokens = prompt.data();
  s.n_tokens = static_cast<int>(prompt.size());
  s.block_table = table.data();
  s.logits_from = 0;
  const size_t V = static_cast<size_t>(b.n_vocab());
  all->assign(prompt.size() * V, 0.0f);
  Check(b.Forward(std::span<const BatchSegment>(&s, 1), *kv, all->data()), "prefill");
  int32_t id = Argmax(all->data() + (prompt.size() - 1) * V, static_cast<int>(V));
  for (int i = 0; i < n; ++i) {
    greedy->push_back(id);
    if (i + 1 == n) break;
    BatchSegment d;
    d.tokens = &id;
    d.n_tokens = 1;
    d.pos0 = static_cast<int>(prompt.size()) + i;
    d.block_table = table.data();
    d.logits_from = d.pos0;
    int32_t next = -1;
    Check(b.ForwardArgmax(std::span<const BatchSegment>(&d, 1), *kv, &next), "decode");
    id = next;
  }
}

// A backend's argmax and top k against its own logits of the same pass:
// the prompts at once with the last token's logits (an eager pass), then
// one decode token each (a graph's where the backend has them), each pass
// run for its logits, its argmax and its top k (re-running a pass writes
// the same K/V). Whether every row's argmax and top 64 (ids and values)
// are exactly the host's of those logits.
bool OutputsMatchLogits(Backend& b, const std::vector<std::vector<int32_t>>& prompts) {
  const int bs = 16, n = static_cast<int>(prompts.size());
  const int V = b.n_vocab(), k = std::min(Backend::kMaxTopK, V);
  std::vector<std::vector<int32_t>> tables(n);
  int blocks = 0;
  for (int s = 0; s < n; ++s)
    for (int i = 0; i < (static_cast<int>(prompts[s].size()) + 1 + bs - 1) / bs; ++i)
      tables[s].push_back(blocks++);
  auto kv = Check(b.AllocateKv(blocks, bs), "allocating KV");
  std::vector<BatchSegment> segs(n);
  std::vector<int32_t> next(n);
  bool ok = true;
  for (int pass = 0; pass < 2; ++pass) {
    for (int s = 0; s < n; ++s) {
      const int len = static_cast<int>(prompts[s].size());
      segs[s].block_table = tables[s].data();
      segs[s].tokens = pass == 0 ? prompts[s].data() : &next[s];
      segs[s].n_tokens = pass == 0 ? len : 1;
      segs[s].pos0 = pass == 0 ? 0 : len;
      segs[s].logits_from = pass == 0 ? len - 1 : len;
    }
    std::vector<float> logits(static_cast<size_t>(n) * V), values(static_cast<size_t>(n) * k);
    std::vector<int32_t> ids(n), top(static_cast<size_t>(n) * k);
    Check(b.Forward(segs, *kv, logits.data()), "logits");
    Check(b.ForwardArgmax(segs, *kv, ids.data()), "argmax");
    Check(b.ForwardTopK(segs, *kv, k, top.data(), values.data()), "top k");
    for (int s = 0; s < n; ++s) {
      const float* row = &logits[static_cast<size_t>(s) * V];
      std::vector<int> order(V);
      for (int i = 0; i < V; ++i) order[i] = i;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int x, int y) {
        return row[x] > row[y] || (row[x] == row[y] && x < y);
      });
      ok &= ids[s] == order[0];
      for (int j = 0; j < k; ++j)
        ok &= top[s * k + j] == order[j] && values[s * k + j] == row[order[j]];
      next[s] = ids[s];
    }
  }
  return ok;
}

// Eight sequences over one cached 512-token prefix (the same KV blocks, as
// the radix cache shares them), each with 8 tokens of its own, then 16
// greedy decode steps of all eight at once: the steps where shared-prefix
// (cascade) attention applies. The tokens, and the cascade passes counted.
std::vector<int32_t> CascadeGreedy(Backend& b, uint64_t* cascade_passes) {
  const int bs = 16, P = 512, own = 8, steps = 16, n = 8;
  const int shared_blocks = P / bs, own_blocks = (own + steps + bs - 1) / bs;
  auto kv = Check(b.AllocateKv(shared_blocks + n * own_blocks, bs), "allocating KV");
  std::mt19937 rng(23);
  std::vector<int32_t> prefix(P);
  for (auto& id : prefix) id = static_cast<int32_t>(rng() % 1000);
  std::vector<std::vector<int32_t>> tables(n);
  for (int s = 0; s < n; ++s) {
    for (int i = 0; i < shared_blocks; ++i) tables[s].push_back(i);
    for (int i = 0; i < own_blocks; ++i) tables[s].push_back(shared_blocks + s * own_blocks + i);
  }
  BatchSegment pre;
  pre.tokens = prefix.data();
  pre.n_tokens = P;
  pre.block_table = tables[0].data();
  Check(b.Forward(std::span<const BatchSegment>(&pre, 1), *kv, nullptr), "prefix");
  std::vector<std::vector<int32_t>> suffix(n, std::vector<int32_t>(own));
  std::vector<BatchSegment> segs(n);
  for (int s = 0; s < n; ++s) {
    for (auto& id : suffix[s]) id = static_cast<int32_t>(rng() % 1000);
    segs[s].tokens = suffix[s].data();
    segs[s].n_tokens = own;
    segs[s].pos0 = P;
    segs[s].block_table = tables[s].data();
    segs[s].logits_from = P + own - 1;
  }
  std::vector<int32_t> next(n), cur(n), out;
  Check(b.ForwardArgmax(segs, *kv, next.data()), "suffixes");
  uint64_t p0 = 0, t0 = 0, p1 = 0, t1 = 0;
  b.CascadeCounts(&p0, &t0);
  for (int step = 0; step < steps; ++step) {
    cur = next;
    out.insert(out.end(), cur.begin(), cur.end());
    for (int s = 0; s < n; ++s) {
      segs[s].tokens = &cur[s];
      segs[s].n_tokens = 1;
      segs[s].pos0 = P + own + step;
      segs[s].logits_from = segs[s].pos0;
    }
    Check(b.ForwardArgmax(segs, *kv, next.data()), "decode");
  }
  b.CascadeCounts(&p1, &t1);
  *cascade_passes = p1 - p0;
  return out;
}

int TensorParallel(const Args& a) {
  auto file = Check(LoadModelFile(a.model), "loading the model file");
  ModelOptions mo;
  mo.path = a.model;
  mo.device = "cuda:0";
  const int context = std::max(1024, a.prompt + a.gen + 16);
  const int n_vocab = file->config().n_vocab;
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {5, 40, 300}) {
    std::vector<int32_t> ids(len);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % n_vocab);
    prompts.push_back(ids);
  }
  const int n_greedy = 32;
  std::vector<int32_t> ref_cascade;
  std::vector<std::vector<float>> ref_logits(prompts.size());
  std::vector<std::vector<int32_t>> ref_greedy(prompts.size());
  Json variants = Json::array();
  bool pass = true;
  // Evaluates the prompts and times decode on `b`; the first call is the reference.
  auto measure = [&](const std::string& name, Backend& b, bool reference, bool timed) {
    Json v = {{"name", name}, {"device", b.name()}};
    double min_cos = 1, max_diff = 0;
    int same = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<float> all;
      std::vector<int32_t> greedy;
      EvaluateBackend(b, prompts[i], n_greedy, &all, &greedy);
      if (reference) {
        ref_logits[i] = std::move(all);
        ref_greedy[i] = std::move(greedy);
        continue;
      }
      for (size_t t = 0; t < prompts[i].size(); ++t) {
        const float* x = &ref_logits[i][t * n_vocab];
        const float* y = &all[t * n_vocab];
        min_cos = std::min(min_cos, Cosine(x, y, n_vocab));
        for (int k = 0; k < n_vocab; ++k)
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(x[k] - y[k])));
      }
      same += greedy == ref_greedy[i];
    }
    const bool outputs = OutputsMatchLogits(b, prompts);
    v["argmax_topk_match_logits"] = outputs;
    pass &= outputs;
    uint64_t cascade_passes = 0;
    const std::vector<int32_t> cascade = CascadeGreedy(b, &cascade_passes);
    v["cascade_passes"] = cascade_passes;
    if (reference) ref_cascade = cascade;
    if (!reference) {
      v["cascade_greedy_identical"] = cascade == ref_cascade;
      pass &= cascade == ref_cascade;
      v["min_cosine"] = min_cos;
      v["max_abs_diff"] = max_diff;
      v["greedy_identical"] = same;
      v["prompts"] = prompts.size();
      pass &= min_cos >= 0.999 && same == static_cast<int>(prompts.size());
    }
    for (int B : {1, 64}) {
      if (!timed) break;
      std::vector<double> steps;
      for (int round = 0; round < (B == 1 ? 3 : 1); ++round)
        steps.push_back(TimeDecode(b, n_vocab, B, a.prompt, a.gen, rng).step_s);
      std::sort(steps.begin(), steps.end());
      v["decode_tokens_per_s_b" + std::to_string(B)] = B / steps[steps.size() / 2];
    }
    ModelInfo info;
    b.Describe(&info);
    v["kernels"] = info.isa;
    variants.push_back(v);
  };
  {
    auto one = Check(OpenBackend(*file, mo, context), "opening the one-GPU backend");
    measure("one GPU", *one, true, true);
  }
  {
    auto tp1 = Check(OpenTensorParallelBackend(*file, mo, {0}, context),
                     "opening tensor parallelism over one GPU");
    measure("tensor parallel, NCCL, 1 rank", *tp1, false, true);
  }
  if (a.ranks > 1) {
    std::vector<int> devices;
    if (CudaDeviceCount() >= a.ranks) {
      for (int r = 0; r < a.ranks; ++r) devices.push_back(r);
      {
        auto tp = Check(OpenTensorParallelBackend(*file, mo, devices, context),
                        "opening tensor parallelism");
        measure("tensor parallel, NCCL, " + std::to_string(a.ranks) + " GPUs", *tp, false, true);
      }
      // The same with plain buffers, not registered as NCCL symmetric windows.
      setenv("BRAID_NCCL_WINDOWS", "0", 1);
      auto plain = Check(OpenTensorParallelBackend(*file, mo, devices, context),
                         "opening tensor parallelism without windows");
      unsetenv("BRAID_NCCL_WINDOWS");
      measure("tensor parallel, NCCL, " + std::to_string(a.ranks) + " GPUs, no windows", *plain,
              false, true);
    } else {
      devices.assign(static_cast<size_t>(a.ranks), 0);
      SharedGpuGroup group(a.ranks);
      auto tp = Check(OpenTensorParallelBackend(*file, mo, devices, context, group.ranks()),
                      "opening ranks on one GPU");
      // Untimed: the ranks wait for each other on the host at every sum.
      measure("tensor parallel, " + std::to_string(a.ranks) + " ranks sharing GPU 0", *tp, false,
              false);
    }
  }
  Json out = {{"variants", variants},
              {"gpus", CudaDeviceCount()},
              {"prompt", a.prompt},
              {"gen", a.gen},
              {"pass", pass}};
  std::printf("%s\n", out.dump().c_str());
  return pass ? 0 : 1;
}

// Page-aligned host memory, page-locked through `kv` (RegisterHost) while it lives.
class HostBlocks {
 public:
  HostBlocks(KvMemory& kv, size_t bytes) : kv_(kv), bytes_((bytes + 4095) / 4096 * 4096) {
    p_ = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes_));
    if (!p_) Fail("cannot allocate " + std::to_string(bytes_ >> 20) + " MiB of host memory");
    Check(kv.RegisterHost(p_, bytes_), "page-locking host memory");
  }
  HostBlocks(const HostBlocks&) = delete;
  HostBlocks& operator=(const HostBlocks&) = delete;
  ~HostBlocks() {
    kv_.UnregisterHost(p_);
    std::free(p_);
  }
  uint8_t* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  KvMemory& kv_;
  size_t bytes_;
  uint8_t* p_ = nullptr;
};

// Seeded random bytes (splitmix64) over p[0, bytes), bytes a multiple of 8.
void FillRandom(uint8_t* p, size_t bytes, uint64_t seed) {
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(p + i, &z, 8);
  }
}

// Copies every block of `order` out to (or in from) its own place in
// `host` (block b at b * block_bytes()), without waiting.
Result<uint64_t> StartCopy(KvMemory& kv, uint8_t* host, const std::vector<int32_t>& order,
                           bool out) {
  const size_t bb = kv.block_bytes();
  if (out) {
    std::vector<uint8_t*> dst(order.size());
    for (size_t i = 0; i < order.size(); ++i) dst[i] = host + static_cast<size_t>(order[i]) * bb;
    return kv.CopyOut(order, dst);
  }
  std::vector<const uint8_t*> src(order.size());
  for (size_t i = 0; i < order.size(); ++i) src[i] = host + static_cast<size_t>(order[i]) * bb;
  return kv.CopyIn(src, order);
}

// Polls until the copies up to `fence` are done; the seconds the copy took
// on its stream.
double FinishCopy(KvMemory& kv, uint64_t fence) {
  while (!kv.CopiesDone(fence)) std::this_thread::sleep_for(std::chrono::microseconds(20));
  return kv.TakeCopySeconds(fence);
}

// A copy of `order` in one direction, waited for: GB/s on the copy stream,
// and microseconds per block of the call that enqueued it.
struct CopyRate {
  double gb_per_s = 0, enqueue_us_per_block = 0;
};
CopyRate TimeCopy(KvMemory& kv, uint8_t* host, const std::vector<int32_t>& order, bool out) {
  const auto t0 = Clock::now();
  const uint64_t fence = Check(StartCopy(kv, host, order, out), out ? "copy out" : "copy in");
  const double enqueue = Since(t0);
  const double s = FinishCopy(kv, fence);
  CopyRate r;
  r.gb_per_s = static_cast<double>(order.size()) * kv.block_bytes() / std::max(s, 1e-9) / 1e9;
  r.enqueue_us_per_block = 1e6 * enqueue / std::max<size_t>(1, order.size());
  return r;
}

// One large copy each way between pinned host memory and GPU `device` (the
// median of 5 after a warm-up): the link's own rate, GB/s.
std::pair<double, double> LinkRates(int device, uint8_t* pinned, size_t bytes) {
  bytes = std::min(bytes, size_t{1} << 30);
  void* dev = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
    Fail("link bandwidth: cannot set up the copy");
  auto rate = [&](bool d2h) {
    std::vector<double> gbs;
    for (int i = 0; i < 6; ++i) {
      cudaEventRecord(e0, s);
      if (d2h)
        cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, s);
      else
        cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, s);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (i > 0) gbs.push_back(bytes / (std::max(ms, 1e-6f) * 1e-3) / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    return gbs[gbs.size() / 2];
  };
  const double d2h = rate(true), h2d = rate(false);
  const cudaError_t e = cudaGetLastError();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  cudaFree(dev);
  if (e != cudaSuccess) Fail(std::string("link bandwidth: ") + cudaGetErrorString(e));
  return {d2h, h2d};
}

double MaxAbsDiff(const std::vector<float>& x, const std::vector<float>& y) {
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i)
    d = std::max(d, static_cast<double>(std::fabs(x[i] - y[i])));
  return d;
}

// Forward passes against the copies, over blocks X (the first seven) of the
// pool: a 100-token sequence P is prefilled there and decoded one token
// (logits R). (1) Every block copied out, X last, and at once another
// sequence Q prefilled into X: that pass writes blocks the copy still
// reads, so it must wait for the copy. (2) Every block copied back in, X
// last, and WaitCopies: the next pass must wait for it, and the same decode
// then gives R again (not Q's logits). (3) The other blocks copied in
// without WaitCopies: a pass over X need not wait (whether it overlapped
// the copy is reported, not checked: it needs the copy to outlast the pass).
Json CheckOrdering(Backend& b, KvMemory& kv, uint8_t* host, std::mt19937& rng, bool* pass) {
  const int bs = kv.block_size(), P = 100;
  const int nx = (P + 1 + bs - 1) / bs;
  if (kv.n_blocks() < 2 * nx) Fail("copy: the pool is too small for the ordering check");
  std::vector<int32_t> table(nx), others, order;
  for (int i = 0; i < nx; ++i) table[i] = i;
  for (int i = nx; i < kv.n_blocks(); ++i) others.push_back(i);
  auto others_then_x = [&] {
    std::shuffle(others.begin(), others.end(), rng);
    order = others;
    order.insert(order.end(), table.begin(), table.end());
    return order;
  };
  auto tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& id : t) id = static_cast<int32_t>(rng() % b.n_vocab());
    return t;
  };
  auto prefill = [&](const std::vector<int32_t>& t) {
    BatchSegment s;
    s.tokens = t.data();
    s.n_tokens = static_cast<int>(t.size());
    s.block_table = table.data();
    Check(b.Forward(std::span<const BatchSegment>(&s, 1), kv, nullptr), "prefill");
  };
  const int32_t next = static_cast<int32_t>(rng() % b.n_vocab());
  auto decode = [&] {  // `next` at position P, its logits
    BatchSegment d;
    d.tokens = &next;
    d.n_tokens = 1;
    d.pos0 = P;
    d.block_table = table.data();
    d.logits_from = P;
    std::vector<float> logits(static_cast<size_t>(b.n_vocab()));
    Check(b.Forward(std::span<const BatchSegment>(&d, 1), kv, logits.data()), "decode");
    return logits;
  };
  prefill(tokens(P));
  const std::vector<float> r = decode();

  const uint64_t out = Check(StartCopy(kv, host, others_then_x(), true), "copy out");
  const bool out_running = !kv.CopiesDone(out);
  prefill(tokens(P + 1));
  const bool out_waited = kv.CopiesDone(out);
  FinishCopy(kv, out);
  const std::vector<float> rq = decode();

  const uint64_t in = Check(StartCopy(kv, host, others_then_x(), false), "copy in");
  const bool in_running = !kv.CopiesDone(in);
  Check(kv.WaitCopies(in), "WaitCopies");
  const std::vector<float> restored = decode();
  const bool in_waited = kv.CopiesDone(in);
  FinishCopy(kv, in);

  std::shuffle(others.begin(), others.end(), rng);
  const uint64_t other = Check(StartCopy(kv, host, others, false), "copy in");
  const std::vector<float> beside = decode();
  const bool overlapped = !kv.CopiesDone(other);
  FinishCopy(kv, other);

  const double restored_diff = MaxAbsDiff(restored, r), q_diff = MaxAbsDiff(rq, r),
               beside_diff = MaxAbsDiff(beside, r);
  const bool ok =
      out_waited && in_waited && restored_diff <= 1e-2 && q_diff >= 0.1 && beside_diff <= 1e-2;
  *pass &= ok;
  return {{"write_waited_for_copy_out", out_waited},
          {"copy_out_was_running", out_running},
          {"forward_waited_for_copy_in", in_waited},
          {"copy_in_was_running", in_running},
          {"restored_max_abs_diff", restored_diff},
          {"overwritten_max_abs_diff", q_diff},
          {"unwaited_forward_max_abs_diff", beside_diff},
          {"unwaited_forward_overlapped_copy", overlapped},
          {"pass", ok}};
}

// The copies of one pool of n blocks: 3 rounds each way in random orders,
// the round trip, and the ordering check; the link's rate on `link_device`.
Json MeasureCopies(Backend& b, int n, int bs, int link_device, std::mt19937& rng, bool* pass) {
  auto kv = Check(b.AllocateKv(n, bs), "allocating KV");
  const size_t bb = kv->block_bytes(), total = static_cast<size_t>(n) * bb;
  Json j = {{"blocks", n}, {"block_bytes", bb}};
  HostBlocks ref(*kv, total), scratch(*kv, total);
  FillRandom(ref.get(), ref.bytes(), 12345);
  const auto [d2h, h2d] = LinkRates(link_device, scratch.get(), total);
  j["link_d2h_gb_per_s"] = d2h;
  j["link_h2d_gb_per_s"] = h2d;
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[i] = i;
  // The pool's pattern: every block in from the random bytes.
  const Result<uint64_t> fill = StartCopy(*kv, ref.get(), order, false);
  if (!fill.ok()) Fail("copy in: " + fill.status().ToString());
  FinishCopy(*kv, *fill);
  auto median = [](std::vector<CopyRate> v, double CopyRate::*field) {
    std::sort(v.begin(), v.end(),
              [&](const CopyRate& x, const CopyRate& y) { return x.*field < y.*field; });
    return v[v.size() / 2].*field;
  };
  std::vector<CopyRate> outs, ins;
  for (int round = 0; round < 3; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    outs.push_back(TimeCopy(*kv, scratch.get(), order, true));
  }
  bool exact = std::memcmp(ref.get(), scratch.get(), total) == 0;
  for (int round = 0; round < 3; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    ins.push_back(TimeCopy(*kv, scratch.get(), order, false));
  }
  // Out again over zeros: what went in came back.
  std::memset(scratch.get(), 0, total);
  std::shuffle(order.begin(), order.end(), rng);
  TimeCopy(*kv, scratch.get(), order, true);
  exact &= std::memcmp(ref.get(), scratch.get(), total) == 0;
  *pass &= exact;
  j["d2h_gb_per_s"] = median(outs, &CopyRate::gb_per_s);
  j["h2d_gb_per_s"] = median(ins, &CopyRate::gb_per_s);
  j["d2h_enqueue_us_per_block"] = median(outs, &CopyRate::enqueue_us_per_block);
  j["h2d_enqueue_us_per_block"] = median(ins, &CopyRate::enqueue_us_per_block);
  j["round_trip_exact"] = exact;
  j["ordering"] = CheckOrdering(b, *kv, scratch.get(), rng, pass);
  return j;
}

int CopyBlocks(const Args& a) {
  auto file = Check(LoadModelFile(a.model), "loading the model file");
  ModelOptions mo;
  mo.path = a.model;
  mo.device = a.device;
  mo.weights = a.weights;
  mo.kv_cache = a.kv_cache;
  const int context = 1024, bs = 16;
  const DeviceSpec spec = Check(ParseDevice(a.device), "parsing --device");
  if (spec.kind != DeviceSpec::Kind::kCuda) Fail("copy: --device must name a GPU");
  std::unique_ptr<SharedGpuGroup> group;  // outlives the backend
  std::unique_ptr<Backend> backend;
  if (a.share > 1) {
    group = std::make_unique<SharedGpuGroup>(a.share);
    backend = Check(OpenTensorParallelBackend(*file, mo, std::vector<int>(a.share, spec.index),
                                              context, group->ranks()),
                    "opening ranks on one GPU");
  } else {
    backend = Check(OpenBackend(*file, mo, context), "opening the backend");
  }
  // Bytes of a block on one GPU (ranks sharing one hold a part each).
  const uint64_t gpu_block = backend->KvBlockBytes(bs) * std::max(1, a.share);
  const uint64_t pool = std::min<uint64_t>(uint64_t{4} << 30, backend->KvMemoryAvailable() / 2);
  const int n = a.blocks > 0 ? a.blocks : static_cast<int>(pool / gpu_block);
  std::mt19937 rng(29);
  bool pass = true;
  Json out = MeasureCopies(*backend, n, bs, spec.index, rng, &pass);
  out["device"] = backend->name();
  out["pass"] = pass;
  std::printf("%s\n", out.dump().c_str());
  return pass ? 0 : 1;
}

int Engines(const Args& a) {
  const std::string list = a.device == "cuda" ? "cuda:all" : a.device;
  std::vector<std::string> devices;
  for (const std::string& d : Check(ExpandDevices(list, 1), "the device list"))
    for (int k = 0; k < std::max(1, a.share); ++k) devices.push_back(d);
  auto open = [&](const std::string& d) {
    EngineOptions o;
    o.model.path = a.model;
    o.model.require_tokenizer = false;  // prompts are token ids
    o.model.device = d;
    o.model.weights = a.weights;
    o.model.kv_cache = a.kv_cache;
    o.model.context = 1024;
    o.kv_tokens = 32 * 1024;
    return Check(Engine::Open(o), ("opening an engine on " + d).c_str());
  };
  // Each request alone on an engine of its own, closed before the others
  // open: a prompt found in an engine's prefix cache computes only its last
  // token, which may round differently, so every engine compared starts cold.
  std::unique_ptr<Engine> single = open(devices[0]);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> plen(5, 300);
  std::uniform_int_distribution<int32_t> pick(100, single->model()->info().n_vocab - 1);
  std::vector<GenerationRequest> reqs(32);
  for (GenerationRequest& r : reqs) {
    r.prompt.resize(static_cast<size_t>(plen(rng)));
    for (int32_t& t : r.prompt) t = pick(rng);
    r.sampling = SamplingParams::Greedy();
    r.sampling.max_tokens = 32;
    r.sampling.ignore_eos = true;
  }
  std::vector<std::vector<int32_t>> alone;
  for (GenerationRequest r : reqs)
    alone.push_back(Check(single->Submit(std::move(r)), "submitting")->Wait().tokens);
  single.reset();
  std::vector<std::unique_ptr<Engine>> engines;
  Json opened = Json::array();
  for (const std::string& d : devices) {
    const auto t0 = Clock::now();
    engines.push_back(open(d));
    opened.push_back({{"device", d}, {"open_seconds", Since(t0)}});
  }
  // Every engine at once: the requests interleaved over the engines.
  std::vector<std::vector<std::shared_ptr<RequestHandle>>> handles(engines.size());
  const auto t0 = Clock::now();
  for (const GenerationRequest& r : reqs)
    for (size_t e = 0; e < engines.size(); ++e)
      handles[e].push_back(Check(engines[e]->Submit(GenerationRequest(r)), "submitting"));
  Json per = Json::array();
  bool pass = true;
  for (size_t e = 0; e < engines.size(); ++e) {
    int same = 0;
    for (size_t i = 0; i < reqs.size(); ++i) same += handles[e][i]->Wait().tokens == alone[i];
    pass &= same == static_cast<int>(reqs.size());
    per.push_back({{"device", devices[e]}, {"identical", same}});
  }
  const double together_s = Since(t0);
  Json out = {{"engines", opened},
              {"requests", reqs.size()},
              {"together_seconds", together_s},
              {"outputs", per},
              {"pass", pass}};
  std::printf("%s\n", out.dump().c_str());
  return pass ? 0 : 1;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  using namespace braid;
  const Args a = Parse(argc, argv);
  if (a.device != "cpu" && CudaDeviceCount() == 0) {
    std::printf("skipped: no GPU\n");
    return 77;  // CTest's SKIP_RETURN_CODE
  }
  if (a.cmd == "run") return Run(a);
  if (a.cmd == "compare-cpu") return CompareCpu(a);
  if (a.cmd == "batch") return Batch(a);
  if (a.cmd == "decode") return Decode(a);
  if (a.cmd == "sweep") return Sweep(a);
  if (a.cmd == "spec") return Spec(a);
  if (a.cmd == "serve-spec") return ServeSpec(a);
  if (a.cmd == "serve-equal") return ServeEqual(a);
  if (a.cmd == "tier-equal") return TierEqual(a);
  if (a.cmd == "slides-equal") return SlidesEqual(a);
  if (a.cmd == "cascade") return Cascade(a);
  if (a.cmd == "tp") return TensorParallel(a);
  if (a.cmd == "copy") return CopyBlocks(a);
  if (a.cmd == "engines") return Engines(a);
  Fail("unknown command '" + a.cmd + "'");
}
