// braid bench: llama-bench style prompt-processing (pp) and text-generation
// (tg) throughput, with the memory read bandwidth measured in the same run
// and the decode roofline it implies (bandwidth over a working set of the
// weights read per token / those bytes).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json_text.h"
#include "cli/model_options.h"
#include "engine/model.h"
#include "engine/system_probe.h"

namespace braid::cli {
namespace {

const char* kBenchHelp =
    "usage: braid bench [-m MODEL] [-p 512] [-n 128] [-r 5] [-t THREADS] [--json FILE]\n"
    "  -p N        prompt tokens per pp test, 0..131064 (0 = skip; default 512)\n"
    "  -n N        generated tokens per tg test, 0..131064 (0 = skip; default 128)\n"
    "  -r N        repetitions, 1..1000 (default 5), after one warm-up\n"
    "  -t N        threads, 0..1024 (default 0: all cores)\n"
    "  --device D  cpu (default), cuda (the first GPU), cuda:N or cuda:0+1 (split over\n"
    "              GPUs 0 and 1: tensor parallelism)\n"
    "  --ctx N     context per sequence, 0..131072 (default: the larger of -p and -n, plus 8)\n"
    "  --exact     fp32 activations and KV cache\n"
    "  --precision split16|int8   fast-path activations (default split16)\n"
    "  --kv TYPE   KV cache: f16 (default; bf16 on CUDA), q8 (int8 + a scale per row,\n"
    "              attention on integer dot products) or f32; on CUDA fp8 (e4m3)\n"
    "  --stream S  weight prefetch: auto (default: both timed at load, the faster\n"
    "              kept), nt (non-temporal) or t0 (ordinary); also BRAID_STREAM\n"
    "  --weights W CUDA layer weights: bf16 (default) or fp8 (e4m3, a scale per row,\n"
    "              quantized at load)\n"
    "  --no-bw     skip the bandwidth probe\n"
    "  --json FILE also write the results as JSON\n"
    "\n"
    "usage: braid bench --serve [-m MODEL] [-c 1,4,16,64] [--prompt-len 256] [--gen-len 128]\n"
    "                   [--shared-prefix 0] [--batch-tokens 256] [-r REPS] [-t THREADS] [--json "
    "FILE]\n"
    "                   [--precision split16|int8] [--kv f16|q8|f32|fp8] [--latency-mix N] "
    "[--profile]\n"
    "  -c LIST              concurrency levels, each 1..4096\n"
    "  --prompt-len N       random prompt tokens per request, 1..32768\n"
    "  --gen-len N          tokens generated per request, 1..32768\n"
    "  --shared-prefix N    a prompt prefix all requests share, 0..32768; with --rate,\n"
    "                       each client's requests share a prefix of their own\n"
    "  --batch-tokens N     tokens per engine step, 0..2048 (default 0: the backend's, 256\n"
    "                       on the CPU, 1024 on CUDA; at most its largest step)\n"
    "  --latency-batch-tokens N  a latency-class step's tokens, 0..2048 (0 = learned)\n"
    "  --step-ms MS         a target for a step's forward pass (as braid serve's; default 0: "
    "none)\n"
    "  --max-running N      sequences decoding together in --rate mode, 0..4096 (default 0:\n"
    "                       the backend's, 64 on the CPU, 256 on CUDA)\n"
    "  --kv-tokens N        the KV pool in --rate mode, 0..4194304 (default 0: from memory)\n"
    "  --kv-reserve R       admission keeps KV for R of running outputs, 0..1 (default 0.5)\n"
    "  --kv-host SIZE       a host-memory tier under the KV cache (as braid serve's; default\n"
    "                       off); --rate rows then say the prompt tokens found on the device\n"
    "                       and in the tier, those computed, and the copies each way\n"
    "  --kv-slides S        on (default) or off: a model whose layers partly slide keeps\n"
    "                       their KV apart (as braid serve's)\n"
    "  --spec KIND[:N][:fixed]   speculative decoding (docs/speculation.md; default off)\n"
    "  -r, --reps N         1..1000 (default 1)\n"
    "  each request's context (shared prefix + prompt + generated tokens) may be at most\n"
    "  131072 tokens, and the largest level's requests together at most 4194304 KV tokens\n"
    "  concurrent requests through the serving engine: throughput, TTFT and\n"
    "  inter-token latency percentiles per concurrency level. Decode tok/s counts\n"
    "  the tokens that came while every request of the level was decoding. With\n"
    "  -r the levels take turns REPS times; per level the run with the median\n"
    "  decode rate is kept, and each level's ratio to the single request run just\n"
    "  before it is printed per repetition.\n"
    "  --latency-mix N  0..256; instead: a latency-class request's inter-token time alone,\n"
    "              then beside N throughput-class requests, and their ratio; with\n"
    "              -r, REPS such pairs and the median ratio.\n"
    "  --profile   also time each stage of the decode-only forward passes per\n"
    "              thread (a clock read per stage) and print them per level.\n"
    "  --rate LIST  request-rate mode instead of -c: per rate (requests/s, each\n"
    "              0.01..100000; 'inf' = all at once), --requests N (1..100000,\n"
    "              default 200) requests arriving as a Poisson process (seeded), with\n"
    "              prompt and output lengths uniform in [F x len, len] for\n"
    "              --random-ratio F (0..1, default 1 = fixed): output tokens/s,\n"
    "              requests/s, TTFT, inter-token and end-to-end latency p50/p99.\n"
    "  --clients LIST  with --rate: requests split between clients in these shares of\n"
    "              the rate (e.g. 1,2; each 1..1000), and each client's service per\n"
    "              window of the run and the largest difference between clients\n"
    "  --policy P  with --rate: the engine's admission order, fcfs (default), priority,\n"
    "              vtc (fair sharing between clients), lpm (longest cached prefix\n"
    "              first) or plas (least attained service per program;\n"
    "              docs/fairness.md)\n"
    "  --locality-bound S  with --policy vtc: locality within fairness, 0..1e9\n"
    "  --cached-weight W   with --policy vtc: service per cached prompt token, 0..1e6\n";

struct Stats {
  double mean = 0, stddev = 0;
  std::vector<double> samples;
};

Stats Summarize(const std::vector<double>& ts) {
  Stats s;
  s.samples = ts;
  for (double t : ts) s.mean += t / ts.size();
  for (double t : ts) s.stddev += (t - s.mean) * (t - s.mean);
  s.stddev = ts.size() > 1 ? std::sqrt(s.stddev / (ts.size() - 1)) : 0.0;
  return s;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Tokens/s of evaluating n random tokens in one batch on a fresh sequence.
Result<double> RunPrompt(Model& m, int n, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick(0, m.info().n_vocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = pick(rng);
  auto seq = m.NewSequence();
  std::vector<float> logits;
  double t0 = Now();
  BRAID_RETURN_IF_ERROR(seq->Eval(ids, &logits));
  return n / (Now() - t0);
}

// Tokens/s of n single-token steps on a fresh sequence (logits every step).
Result<double> RunGenerate(Model& m, int n, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick(0, m.info().n_vocab - 1);
  auto seq = m.NewSequence();
  std::vector<float> logits;
  double t0 = Now();
  for (int i = 0; i < n; ++i) {
    int32_t id = pick(rng);
    BRAID_RETURN_IF_ERROR(seq->Eval(std::span<const int32_t>(&id, 1), &logits));
  }
  return n / (Now() - t0);
}

}  // namespace

int BenchMain(const std::vector<std::string>& argv) {
  Args args(argv);
  if (args.Flag({"-h", "--help"})) {
    std::printf("%s", kBenchHelp);
    return 0;
  }
  if (args.Flag({"--serve"})) return ServeBenchMain(args);
  ModelOptions mo = ReadModelOptions(args);
  mo.require_tokenizer = false;  // prompts are random token ids
  // Sizes up to the longest context a run may ask for (--ctx), repetitions
  // up to a number that still ends the same day.
  int pp = static_cast<int>(args.Int({"-p", "--n-prompt"}, 512, 0, kMaxContext - 8));
  int tg = static_cast<int>(args.Int({"-n", "--n-gen"}, 128, 0, kMaxContext - 8));
  int reps = static_cast<int>(args.Int({"-r", "--repetitions"}, 5, 1, 1000));
  bool no_bw = args.Flag({"--no-bw"});
  std::string json = args.Str({"--json"}, "");
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid bench: %s\n", e.c_str());
    return 2;
  }
  const HostCpuSummary cpu = DescribeHostCpu();  // what every figure below was measured on
  std::printf("cpu: %s; usable: %s\n", cpu.line.c_str(), DescribeUsableCpus().c_str());
  if (mo.context == 0) mo.context = std::max(pp, tg) + 8;
  auto opened = Model::Open(mo);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid: %s\n", opened.status().message().c_str());
    return 1;
  }
  Model& m = **opened;
  const ModelInfo& info = m.info();
  std::mt19937 rng(1234);

  struct Row {
    std::string test;
    Stats s;
  };
  std::vector<Row> rows;
  auto run = [&](const std::string& name, auto fn, int n) -> bool {
    if (n == 0) return true;
    if (auto w = fn(m, std::min(n, 32), rng); !w.ok()) {  // warm-up
      std::fprintf(stderr, "braid bench: %s\n", w.status().ToString().c_str());
      return false;
    }
    std::vector<double> ts;
    for (int r = 0; r < reps; ++r) {
      auto t = fn(m, n, rng);
      if (!t.ok()) {
        std::fprintf(stderr, "braid bench: %s\n", t.status().ToString().c_str());
        return false;
      }
      ts.push_back(*t);
    }
    rows.push_back({name + std::to_string(n), Summarize(ts)});
    return true;
  };
  if (!run("pp", RunPrompt, pp) || !run("tg", RunGenerate, tg)) return 1;

  std::string name = info.path.substr(info.path.find_last_of('/') + 1);
  std::printf("| model | size | params | backend | threads | test | t/s |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
  for (const Row& r : rows)
    std::printf("| %s | %.2f MiB | %.2f M | %s %s | %d | %s | %.2f ± %.2f |\n", name.c_str(),
                info.weight_bytes / 1048576.0, info.n_params / 1e6, info.device.c_str(),
                info.isa.c_str(), info.threads, r.test.c_str(), r.s.mean, r.s.stddev);

  std::printf("\nweight stream: %s\n",
              info.stream.empty() ? "(exact path: none)" : info.stream.c_str());
  // The roofline: the bandwidth at which the weights read per token can
  // stream, measured over a working set of that size with the decode
  // kernels' prefetches, so it is the last-level cache's where they fit there
  // and memory's where they do not; memory's (a 512 MiB buffer) beside it.
  double bw = 0, mem_bw = 0, roofline = 0;
  const bool gpu = info.device.rfind("cuda", 0) == 0;
  if (!no_bw && gpu) {
    // A GPU reads its weights from device memory: the roofline is the
    // device-to-device copy bandwidth (bytes read + written) over the bytes
    // of weights read per token.
    bw = mem_bw = MeasureDeviceCopyBandwidth(info.device);
    roofline = bw / static_cast<double>(info.bytes_per_token);
    std::printf(
        "weights read per token: %.1f MB\n%s copy bandwidth: %.1f GB/s\n"
        "decode roofline: %.1f tok/s\n",
        info.bytes_per_token / 1e6, info.device.c_str(), bw / 1e9, roofline);
    for (const Row& r : rows)
      if (r.test.rfind("tg", 0) == 0)
        std::printf("%s / roofline = %.1f%%\n", r.test.c_str(), 100.0 * r.s.mean / roofline);
  } else if (!no_bw) {
    bw = MeasureStreamBandwidth(info.threads, info.decode_stages);
    mem_bw = MeasureReadBandwidth(info.threads);
    roofline = bw / static_cast<double>(info.bytes_per_token);
    if (cpu.l3_bytes == 0) {
      std::printf("weights read per token: %.1f MB (last-level cache size unknown)\n",
                  info.bytes_per_token / 1e6);
    } else {
      std::printf("weights read per token: %.1f MB, %s the last-level cache (%.0f MiB)\n",
                  info.bytes_per_token / 1e6,
                  info.bytes_per_token <= cpu.l3_bytes ? "inside" : "larger than",
                  cpu.l3_bytes / 1048576.0);
    }
    std::printf(
        "read bandwidth (%d threads): %.1f GB/s streaming the weights as decode does, %.1f GB/s "
        "from memory (512 MiB)\ndecode roofline: %.1f tok/s\n",
        info.threads, bw / 1e9, mem_bw / 1e9, roofline);
    for (const Row& r : rows)
      if (r.test.rfind("tg", 0) == 0)
        std::printf("%s / roofline = %.1f%%\n", r.test.c_str(), 100.0 * r.s.mean / roofline);
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "braid bench: cannot write '%s'\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "{\n  \"model\": \"%s\", \"threads\": %d, \"isa\": \"%s\",\n", name.c_str(),
                 info.threads, info.isa.c_str());
    std::fprintf(f, "  \"cpu\": \"%s\", \"l3_bytes\": %zu,\n", JsonEscape(cpu.model).c_str(),
                 cpu.l3_bytes);
    std::fprintf(f, "  \"weight_bytes\": %llu, \"bytes_per_token\": %llu,\n",
                 static_cast<unsigned long long>(info.weight_bytes),
                 static_cast<unsigned long long>(info.bytes_per_token));
    std::fprintf(f, "  \"weight_stream\": \"%s\",\n", JsonEscape(info.stream).c_str());
    std::fprintf(f,
                 "  \"read_bandwidth_bytes_per_s\": %.0f, \"memory_bandwidth_bytes_per_s\": %.0f, "
                 "\"decode_roofline_tok_s\": %.2f,\n",
                 bw, mem_bw, roofline);
    std::fprintf(f, "  \"results\": [");
    for (size_t i = 0; i < rows.size(); ++i) {
      std::fprintf(
          f, "%s\n    {\"test\": \"%s\", \"avg_ts\": %.3f, \"stddev_ts\": %.3f, \"samples_ts\": [",
          i ? "," : "", rows[i].test.c_str(), rows[i].s.mean, rows[i].s.stddev);
      for (size_t j = 0; j < rows[i].s.samples.size(); ++j)
        std::fprintf(f, "%s%.3f", j ? ", " : "", rows[i].s.samples[j]);
      std::fprintf(f, "]}");
    }
    std::fprintf(f, "\n  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace braid::cli
