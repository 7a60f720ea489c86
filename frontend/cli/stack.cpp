#include "cli/stack.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/engines_file.h"
#include "cli/model_options.h"
#include "engine/open.h"
#include "engine/system_probe.h"

namespace braid::cli {

namespace {
// Bounds of the options that size memory (see the help text).
constexpr long long kMaxKvTokens = 4LL << 20;
}  // namespace

const char* const kStackHelp =
    "  -m, --model PATH        .gguf file or safetensors directory (default: the bundled model)\n"
    "      --tokenizer PATH    a tokenizer.json file, or a folder holding one, instead of the\n"
    "                          model's own (a safetensors directory without tokenizer.json)\n"
    "      --device D          where the model runs: cpu (default), cuda (the first GPU),\n"
    "                          cuda:N, or several GPUs with one engine each: cuda:all\n"
    "                          (every visible GPU) or cuda:0,1; cuda:0+1 splits one model\n"
    "                          over GPUs 0 and 1 (tensor parallelism)\n"
    "      --tp N              GPUs per engine among those --device lists, 1..64 (default 1);\n"
    "                          cuda:all --tp 2 on 4 GPUs: engines on cuda:0+1 and cuda:2+3\n"
    "  -t, --threads N         CPU threads in all, 0..1024 (default 0: the usable cores), split\n"
    "                          between engines\n"
    "      --ctx N             context per sequence, 0..131072 (default 0: the model's, <= 4096)\n"
    "      --precision P       activations: split16 (default, most accurate) or int8 (faster "
    "batches)\n"
    "      --kv TYPE           KV cache: f16 (default), q8 (int8 + a scale per row) or f32;\n"
    "                          on CUDA bf16 (default) or fp8 (e4m3)\n"
    "      --stream S          weight prefetch: auto (default: timed at load), nt or t0\n"
    "      --weights W         CUDA layer weights: bf16 (default) or fp8 (e4m3, quantized at "
    "load)\n"
    "      --engines N|FILE    embedded engines on the same model, 1..64 (default 1); or a\n"
    "                          JSON file listing embedded and remote (OpenAI-compatible)\n"
    "                          engines (docs/http-api.md); -m then gives the tokenizer\n"
    "      --placement P       which engine takes a call when there are several: affinity\n"
    "                          (default: the longest cached prefix among engines not far\n"
    "                          busier than the least loaded), least-loaded or round-robin\n"
    "      --max-running N     sequences an engine decodes together, 1..4096 (default 64\n"
    "                          on the CPU, 256 on CUDA; small = latency-tuned)\n"
    "      --max-waiting N     requests an engine queues beyond those, 0..1000000 (default\n"
    "                          4096; beyond: refused, 429 from the OpenAI routes)\n"
    "      --kv-reserve R      admission keeps KV for R of the running sequences' allowed\n"
    "                          output, decaying while none is preempted, 0..1 (default 0.5;\n"
    "                          0: admit whatever fits this step)\n"
    "      --policy P          each engine's admission order: priority (default: goal class,\n"
    "                          priority, deadline, arrival), fcfs, lpm (longest cached prefix\n"
    "                          first), plas (least attained service per program first) or\n"
    "                          vtc (as --fair)\n"
    "      --program-quantum Q with --policy plas (and vtc's programs): service below which a\n"
    "                          program is at the first level, each next level up to twice\n"
    "                          the last; 0: one level, programs in the order they started,\n"
    "                          0..1e12 (default 256)\n"
    "      --evict E           cached prefixes evicted first: lru (default) or next-use\n"
    "                          (those no program will read again, then the one expected\n"
    "                          furthest away; docs/runtime.md)\n"
    "      --admit A           plain (default) or anti-thrash: admit a call only while every\n"
    "                          running one keeps room for all its output, and keep new\n"
    "                          calls off the contexts of programs expected back\n"
    "      --retain-kv R       off (default) or ttl: keep a call's context pinned until its\n"
    "                          program's next call extends it, for a time learned from the\n"
    "                          gaps between the program's calls (docs/runtime.md)\n"
    "      --kv-host SIZE      a host-memory tier under each engine's KV cache: evicted\n"
    "                          prefixes are copied there and copied back instead of\n"
    "                          recomputed; SIZE in MiB or with a unit (512M, 16G), auto\n"
    "                          (a quarter of the available memory) or off (default)\n"
    "      --kv-prefetch P     with --kv-host: on (default) copies a context expected back\n"
    "                          (a program's next call after a tool) from the tier ahead of\n"
    "                          its call, into free blocks; off: only when the call comes\n"
    "      --kv-slides S       on (default) or off: a model whose layers partly slide\n"
    "                          (Gemma 3) keeps its sliding layers' KV apart, enough for\n"
    "                          every running call's window, so a long context costs only\n"
    "                          the other layers' KV (not with --kv-host, nor with tensor\n"
    "                          parallelism)\n"
    "      --step-ms MS        prompt chunks join a step only up to the size whose measured\n"
    "                          forward passes take at most MS ms (a block of them at least),\n"
    "                          so decoding calls' inter-token times stay near MS; 0 (default):\n"
    "                          every step takes the whole token budget\n"
    "      --kv-tokens N       KV cache tokens per engine, 0..4194304 (default 0: sized from\n"
    "                          memory, see --kv-memory)\n"
    "      --kv-memory F       with --kv-tokens 0: the KV caches take this fraction of the\n"
    "                          memory available at start, split between engines, 0.01..0.95\n"
    "                          (default 0.3 on the CPU, 0.9 of the device memory the\n"
    "                          weights leave on CUDA); pages are used as the caches fill\n"
    "      --spec KIND[:N]     speculative decoding: off (default), ngram (prompt lookup),\n"
    "                          suffix (a suffix tree over the request's context and the\n"
    "                          outputs of earlier calls of the same semantic function),\n"
    "                          draft (a draft model: the model's first quarter of layers),\n"
    "                          draft=L (its first L layers) or draft=FILE (a model with\n"
    "                          the same tokenizer); N: guesses a step at most, 1..32\n"
    "                          (default 8); ':fixed' checks every guess instead of what\n"
    "                          pays (docs/speculation.md)\n"
    "      --fair              share each engine fairly between clients (VTC: virtual token\n"
    "                          counters; a client is an API key, docs/fairness.md)\n"
    "      --client-weights L  with --fair: NAME=W,... each client's share (default 1)\n"
    "      --cached-weight W   with --fair: service per prompt token found in the prefix\n"
    "                          cache, 0..1e6 (default 0: free; 1: priced as computed)\n"
    "      --locality-bound S  with --fair: a client up to S service ahead may go first\n"
    "                          when more of its prompt is cached, 0..1e9 (default 0)\n"
    "      --db PATH           run store (default ~/.cache/braid/runs.db; 'none' disables)\n";

const std::vector<std::string> kStackValueOptions = {"-m",
                                                     "--model",
                                                     "--tokenizer",
                                                     "--device",
                                                     "--tp",
                                                     "-t",
                                                     "--threads",
                                                     "--ctx",
                                                     "--precision",
                                                     "--kv",
                                                     "--stream",
                                                     "--weights",
                                                     "--engines",
                                                     "--placement",
                                                     "--max-running",
                                                     "--max-waiting",
                                                     "--kv-reserve",
                                                     "--policy",
                                                     "--program-quantum",
                                                     "--evict",
                                                     "--admit",
                                                     "--retain-kv",
                                                     "--kv-host",
                                                     "--kv-prefetch",
                                                     "--kv-slides",
                                                     "--step-ms",
                                                     "--kv-tokens",
                                                     "--kv-memory",
                                                     "--spec",
                                                     "--db",
                                                     "--client-weights",
                                                     "--locality-bound",
                                                     "--cached-weight"};

Result<int64_t> ParseKvHost(const std::string& text) {
  if (text == "off" || text == "0") return int64_t{0};
  if (text == "auto") return int64_t{-1};
  size_t used = 0;
  double n = 0;
  try {
    n = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "M" || unit == "MiB") scale = 1 << 20;
  if (unit == "G" || unit == "GiB") scale = 1 << 30;
  if (used == 0 || scale == 0 || !(n > 0) || n * scale > 1e15)
    return Status::InvalidArgument("'" + text +
                                   "' is not a size (MiB, or with M or G: 512M, 16G), auto or off");
  return static_cast<int64_t>(n * scale);
}

StackOptions ReadStackOptions(Args& args) {
  StackOptions o;
  o.model = ReadModelOptions(args);
  // A count, or the path of an engines file.
  const std::string engines = args.Str({"--engines"}, "1");
  if (!engines.empty() && engines.size() <= 3 &&
      engines.find_first_not_of("0123456789") == std::string::npos) {
    o.engines = std::stoi(engines);
    if (o.engines < 1 || o.engines > 64)
      args.Fail("option --engines: " + engines + " is out of range [1, 64]");
  } else {
    o.engines_file = engines;
  }
  o.kv_tokens = static_cast<int>(args.Int({"--kv-tokens"}, 0, 0, kMaxKvTokens));
  o.kv_memory = args.Num({"--kv-memory"}, 0, 0.01, 0.95);
  o.max_running = static_cast<int>(args.Int({"--max-running"}, 0, 1, 4096));
  o.max_waiting = static_cast<int>(args.Int({"--max-waiting"}, 4096, 0, 1000000));
  o.kv_reserve = args.Num({"--kv-reserve"}, 0.5, 0, 1);
  o.policy = args.Str({"--policy"}, "priority");
  if (o.policy != "priority" && o.policy != "fcfs" && o.policy != "lpm" && o.policy != "plas" &&
      o.policy != "vtc")
    args.Fail("option --policy: '" + o.policy + "' is not priority, fcfs, lpm, plas or vtc");
  o.program_quantum = args.Num({"--program-quantum"}, 256, 0, 1e12);
  o.evict = args.Str({"--evict"}, "lru");
  if (o.evict != "lru" && o.evict != "next-use")
    args.Fail("option --evict: '" + o.evict + "' is not lru or next-use");
  const std::string admit = args.Str({"--admit"}, "plain");
  if (admit != "plain" && admit != "anti-thrash")
    args.Fail("option --admit: '" + admit + "' is not plain or anti-thrash");
  o.anti_thrash = admit == "anti-thrash";
  const std::string retain = args.Str({"--retain-kv"}, "off");
  if (retain != "off" && retain != "ttl")
    args.Fail("option --retain-kv: '" + retain + "' is not off or ttl");
  o.retain_kv = retain == "ttl";
  auto host = ParseKvHost(args.Str({"--kv-host"}, "off"));
  if (host.ok())
    o.kv_host_bytes = *host;
  else
    args.Fail("option --kv-host: " + host.status().message());
  const std::string prefetch = args.Str({"--kv-prefetch"}, "on");
  if (prefetch != "on" && prefetch != "off")
    args.Fail("option --kv-prefetch: '" + prefetch + "' is not on or off");
  o.kv_host_prefetch = prefetch == "on";
  const std::string slides = args.Str({"--kv-slides"}, "on");
  if (slides != "on" && slides != "off")
    args.Fail("option --kv-slides: '" + slides + "' is not on or off");
  o.kv_slides = slides == "on";
  o.step_ms = args.Num({"--step-ms"}, 0, 0, 1e6);
  auto spec = ParseSpecOptions(args.Str({"--spec"}, "off"));
  if (spec.ok())
    o.spec = *spec;
  else
    args.Fail(spec.status().message());
  o.fair = args.Flag({"--fair"});
  o.locality_bound = args.Num({"--locality-bound"}, 0, 0, 1e9);
  o.cached_weight = args.Num({"--cached-weight"}, 0, 0, 1e6);
  if (args.Has({"--client-weights"})) {
    auto w = ParseClientWeights(args.Str({"--client-weights"}, ""));
    if (w.ok())
      o.client_weights = *w;
    else
      args.Fail("option --client-weights: " + w.status().message());
  }
  auto placement = rt::ParsePlacement(args.Str({"--placement"}, "affinity"));
  if (placement.ok())
    o.placement = *placement;
  else
    args.Fail("option --placement: " + placement.status().message());
  o.db = args.Str({"--db"}, DefaultDb());
  if (o.db == "none") o.db.clear();
  return o;
}

Result<std::map<std::string, double>> ParseClientWeights(const std::string& text) {
  std::map<std::string, double> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("'" + item + "' is not NAME=WEIGHT");
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    char* end = nullptr;
    const double w = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !(w > 0) || !std::isfinite(w) ||
        w > 1e6)
      return Status::InvalidArgument("the weight of '" + name +
                                     "' must be a number in (0, 1e6], got '" + value + "'");
    if (!out.emplace(name, w).second)
      return Status::InvalidArgument("client '" + name + "' is given twice");
    i = j + 1;
  }
  return out;
}

std::string Stack::KvSummary() const {
  const Engine* local = nullptr;
  for (const auto& e : engines)
    if (!local && e->model()) local = e.get();
  if (!local) return "no embedded engine (every engine is remote)";
  const EngineStats st = local->stats();
  const int tokens = st.kv_blocks_total * kv_block_size;
  char line[256];
  if (options.kv_tokens == 0) {
    std::snprintf(line, sizeof line,
                  "KV cache %d tokens per engine (%.0f MB; %.0f%% of %.1f GB available)", tokens,
                  st.kv_pool_bytes / 1e6,
                  st.kv_memory_available ? 100.0 * st.kv_pool_bytes / st.kv_memory_available : 0.0,
                  st.kv_memory_available / 1e9);
  } else {
    std::snprintf(line, sizeof line, "KV cache %d tokens per engine (%.0f MB)", tokens,
                  st.kv_pool_bytes / 1e6);
  }
  return line;
}

std::string Stack::SpecSummary() const {
  if (!options.spec.on()) return "";
  EngineStats sum;
  for (const auto& e : engines) {
    if (!e->model()) continue;
    const EngineStats st = e->stats();
    sum.spec_proposed += st.spec_proposed;
    sum.spec_accepted += st.spec_accepted;
    sum.decode_passes += st.decode_passes;
    sum.decode_tokens_out += st.decode_tokens_out;
    sum.propose_seconds += st.propose_seconds;
    sum.forward_seconds += st.forward_seconds;
  }
  char line[256];
  std::snprintf(
      line, sizeof line,
      "speculation (%s): %llu of %llu guesses kept (%.0f%%), %.2f tokens per decode pass, "
      "%.1f%% of step time proposing",
      options.spec.name(), static_cast<unsigned long long>(sum.spec_accepted),
      static_cast<unsigned long long>(sum.spec_proposed),
      sum.spec_proposed ? 100.0 * sum.spec_accepted / sum.spec_proposed : 0.0,
      sum.decode_passes ? static_cast<double>(sum.decode_tokens_out) / sum.decode_passes : 0.0,
      sum.forward_seconds > 0
          ? 100.0 * sum.propose_seconds / (sum.propose_seconds + sum.forward_seconds)
          : 0.0);
  return line;
}

namespace {

// One embedded engine's options: `share` of the KV memory budget, `threads`
// of its own.
EngineOptions EmbeddedOptions(const StackOptions& options, int threads, int share) {
  EngineOptions eo;
  eo.model = options.model;
  eo.model.threads = std::max(1, threads);
  eo.model.cpu.adapt_threads = options.model.threads == 0;  // a count of our choosing
  eo.kv_tokens = options.kv_tokens;
  eo.kv_memory_fraction = options.kv_memory;
  eo.kv_memory_split = share;
  eo.max_running = options.max_running;
  eo.max_waiting = options.max_waiting;
  eo.kv_growth_reserve = options.kv_reserve;
  eo.evict = options.evict;
  eo.anti_thrash = options.anti_thrash;
  eo.kv_host_bytes = options.kv_host_bytes;
  eo.kv_host_prefetch = options.kv_host_prefetch;
  eo.kv_slides = options.kv_slides;
  eo.step_ms = options.step_ms;
  eo.policy = options.fair && options.policy == "priority" ? "vtc" : options.policy;
  eo.fairness.client_weights = options.client_weights;
  eo.fairness.locality_bound = options.locality_bound;
  eo.fairness.cached_weight = options.cached_weight;
  eo.fairness.program_quantum = options.program_quantum;
  eo.spec = options.spec;
  return eo;
}

// The engines an engines file lists; embedded ones split the threads that
// their entries do not fix.
Status OpenEnginesFile(const StackOptions& options, int threads, Stack* stack) {
  BRAID_ASSIGN_OR_RETURN(std::vector<EngineSpec> specs, ReadEnginesFile(options.engines_file));
  int embedded = 0;
  for (const EngineSpec& s : specs) embedded += s.kind == EngineSpec::Kind::kEmbedded;
  for (const EngineSpec& s : specs) {
    if (s.kind == EngineSpec::Kind::kRemote) {
      RemoteEngineOptions ro;
      ro.url = s.url;
      ro.model = s.model_name;
      ro.api_key = s.api_key;
      if (s.text_prompt)  // the stack's tokenizer is known once every engine is open
        ro.detokenize = [stack](const std::vector<int32_t>& ids) {
          return stack->tokenizer->Detokenize(ids);
        };
      BRAID_ASSIGN_OR_RETURN(auto engine, OpenRemoteEngine(ro));
      stack->engines.push_back(std::move(engine));
    } else {
      EngineOptions eo =
          EmbeddedOptions(options, s.threads > 0 ? s.threads : threads / embedded, embedded);
      eo.model.path = s.model_path;
      if (s.threads > 0) eo.model.cpu.adapt_threads = false;
      stack->kv_block_size = eo.block_size;
      BRAID_ASSIGN_OR_RETURN(auto engine, Engine::Open(eo));
      if (!stack->tokenizer) stack->tokenizer = engine->model();
      stack->engines.push_back(std::move(engine));
    }
    stack->engine_names.push_back(s.name);
  }
  if (!stack->tokenizer) {
    // Every engine is remote: the model file given with -m tokenizes.
    ModelOptions mo = options.model;
    mo.threads = 1;
    BRAID_ASSIGN_OR_RETURN(stack->tokenizer_model, Model::Open(mo));
    stack->tokenizer = stack->tokenizer_model.get();
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Stack>> OpenStack(const StackOptions& options) {
  auto stack = std::make_unique<Stack>();
  stack->options = options;
  int n = std::max(1, options.engines);
  const int threads = options.model.threads > 0 ? options.model.threads : DefaultCpuThreads();
  // Several GPUs (--device cuda:all or cuda:0,1): one engine on each, or on
  // each group of --tp of them.
  BRAID_ASSIGN_OR_RETURN(const std::vector<std::string> devices,
                         ExpandDevices(options.model.device, options.model.tensor_parallel));
  // A list (even of one GPU, as cuda:all on a one-GPU host gives) sets the engines.
  const bool listed = devices.size() > 1 || devices[0] != options.model.device;
  if (listed && (options.engines > 1 || !options.engines_file.empty()))
    return Status::InvalidArgument("--device " + options.model.device +
                                   " opens one engine per GPU: give it without --engines");
  if (!options.engines_file.empty())
    BRAID_RETURN_IF_ERROR(OpenEnginesFile(options, threads, stack.get()));
  if (listed) n = static_cast<int>(devices.size());
  for (int i = 0; options.engines_file.empty() && i < n; ++i) {
    EngineOptions eo = EmbeddedOptions(options, threads / n, n);
    if (listed) {  // a GPU of its own: its memory is not shared
      eo.model.device = devices[static_cast<size_t>(i)];
      eo.kv_memory_split = 1;
    }
    stack->kv_block_size = eo.block_size;
    BRAID_ASSIGN_OR_RETURN(auto engine, Engine::Open(eo));
    stack->engine_names.push_back("engine" + std::to_string(i));
    stack->engines.push_back(std::move(engine));
  }
  if (!stack->tokenizer) stack->tokenizer = stack->engines[0]->model();
  if (!options.db.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(options.db).parent_path(), ec);
  }
  rt::RuntimeOptions ro;
  for (auto& e : stack->engines) ro.engines.push_back(e.get());
  ro.engine_names = stack->engine_names;
  ro.tokenizer = stack->tokenizer;
  ro.db_path = options.db;
  ro.placement = options.placement;
  // Expectations order eviction (next-use) and keep anti-thrashing
  // admission off the contexts of programs coming back.
  ro.retention.pin = options.retain_kv;
  ro.retention.expect = options.evict == "next-use" || options.anti_thrash;
  BRAID_ASSIGN_OR_RETURN(stack->runtime, rt::Runtime::Open(ro));
  return stack;
}

}  // namespace braid::cli
