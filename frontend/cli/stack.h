// The one place that opens Braid's stack from command-line options: the
// engines on a model, the tokenizer the runtime uses, and the runtime with
// its run store. braid run, braid serve and braid repl share it, so that an
// option means the same in each.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/engine.h"
#include "engine/status.h"
#include "runtime/runtime.h"

namespace braid::cli {

struct StackOptions {
  ModelOptions model;  // -m, -t (in all, split between engines), --ctx, --precision, --kv, ...
  int engines = 1;     // embedded engines on the same model (without engines_file)
  // An engines file (cli/engines_file.h): embedded and remote engines; the
  // model above then tokenizes (and runs nothing unless an entry names it).
  std::string engines_file;
  int kv_tokens = 0;  // per engine; 0 = sized from memory (kv_memory)
  // With kv_tokens 0: this fraction of the memory available, in all (0 = the
  // backend's choice).
  double kv_memory = 0;
  int max_running = 0;      // 0 = the backend's choice
  int max_waiting = 4096;   // queued requests per engine beyond which it refuses
  double kv_reserve = 0.5;  // EngineOptions::kv_growth_reserve
  // --policy: engine admission, "priority", "fcfs", "lpm", "plas" or "vtc".
  std::string policy = "priority";
  std::string evict = "lru";     // --evict: EngineOptions::evict
  bool anti_thrash = false;      // --admit anti-thrash: EngineOptions::anti_thrash
  bool retain_kv = false;        // --retain-kv ttl: RetentionOptions::pin
  int64_t kv_host_bytes = 0;     // --kv-host: EngineOptions::kv_host_bytes, per engine
  bool kv_host_prefetch = true;  // --kv-prefetch: EngineOptions::kv_host_prefetch
  bool kv_slides = true;         // --kv-slides: EngineOptions::kv_slides
  double step_ms = 0;            // --step-ms: EngineOptions::step_ms
  // --fair: "priority" becomes "vtc" (fair sharing between clients), with
  // these shares (--client-weights NAME=W,...).
  bool fair = false;
  std::map<std::string, double> client_weights;
  double locality_bound = 0;     // --locality-bound: FairnessOptions::locality_bound
  double cached_weight = 0;      // --cached-weight: FairnessOptions::cached_weight
  double program_quantum = 256;  // --program-quantum: FairnessOptions::program_quantum
  std::string db;                // run store path; "" = runs are not persisted
  SpecOptions spec;              // speculative decoding in every embedded engine
  rt::Placement placement = rt::Placement::kAffinity;  // --placement: which engine takes a call
};

// The stack's options as --help lines, and those of them that take a value
// (for commands that stop reading options at a positional argument).
extern const char* const kStackHelp;
extern const std::vector<std::string> kStackValueOptions;

// Reads -m/-t/--ctx/--precision/--kv/--stream (ReadModelOptions), --engines
// (a count, or an engines file),
// --kv-tokens, --kv-memory, --max-running, --fair, --client-weights and --db (default DefaultDb();
// "none" = no store). Problems go to args.Error().
StackOptions ReadStackOptions(Args& args);
// --kv-host: "off" or "0" (0), "auto" (-1), MiB, or a size with M or G.
Result<int64_t> ParseKvHost(const std::string& text);

// "NAME=W,NAME=W": each client's share of the engine under fair sharing
// (W > 0, names non-empty and distinct).
Result<std::map<std::string, double>> ParseClientWeights(const std::string& text);

// What OpenStack made. Members are destroyed in reverse order: the runtime
// (its dispatcher thread) before the engines it drives.
struct Stack {
  std::unique_ptr<Model> tokenizer_model;  // opened for tokenization when no engine is embedded
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<std::string> engine_names;
  const Model* tokenizer = nullptr;  // the first embedded engine's model, or tokenizer_model
  std::unique_ptr<rt::Runtime> runtime;
  StackOptions options;
  int kv_block_size = 0;

  // "KV cache N tokens per engine (M MB; ...)", for the start-up lines.
  std::string KvSummary() const;
  // With speculation on: the guesses checked and kept, tokens per decode
  // pass and the share of time spent proposing, over the embedded engines
  // so far ("" when off).
  std::string SpecSummary() const;
};

// Opens the engines, then the runtime over them (creating the store's
// directory). Errors: the model cannot be opened, a bad option, the store
// cannot be opened.
Result<std::unique_ptr<Stack>> OpenStack(const StackOptions& options);

}  // namespace braid::cli
