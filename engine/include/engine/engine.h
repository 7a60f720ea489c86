// The serving engine: many concurrent callers share one model through an
// iteration-level step loop (continuous batching, chunked prefill, a paged KV
// cache with radix prefix sharing, preemption by recompute).
//
// Thread safety: every method may be called from any thread. The step loop
// runs on the engine's own thread; request callbacks run on it too and must
// not block (hand the data off).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/request.h"
#include "engine/spec.h"
#include "engine/status.h"

namespace braid {

// The "vtc" admission policy's accounts: virtual token counters per client
// (GenerationRequest::client; Sheng et al., OSDI'24). The "plas" policy
// prices service with the same weights (not client_weights) and levels its
// programs by program_quantum.
struct FairnessOptions {
  double prompt_weight = 1.0;     // service per prompt token computed (w_p)
  double generated_weight = 2.0;  // service per token generated (w_q)
  // Service per prompt token found in the prefix cache (w_c). 0: a cache hit
  // is free, as the engine did no work for it; w_p: VTC as first published,
  // which prices every prompt token alike.
  double cached_weight = 0.0;
  // Each client's share (default 1): a client of weight 2 gets twice the
  // service of one of weight 1 while both wait.
  std::map<std::string, double> client_weights;
  // Locality within fairness (deficit longest-prefix-match): a request of
  // a client up to this much service ahead of the least-served waiting
  // client may go first when more of its prompt is cached. 0 = plain VTC;
  // larger trades fairness (the service gap grows by up to this) for
  // prefix-cache hits.
  double locality_bound = 0;
  // Programs of one client (vtc), or all programs (plas): least attained
  // service in levels, the first below this much service, each next one up
  // to twice the last; programs at one level in the order they started.
  // 0 = one level (start order).
  double program_quantum = 256;
};

struct EngineOptions {
  ModelOptions model;
  int kv_blocks = 0;      // KV pool size in blocks; 0 = enough for kv_tokens
  int kv_tokens = 16384;  // used when kv_blocks is 0; 0 = sized from memory:
  // with kv_blocks and kv_tokens 0, the pool takes this fraction of the memory
  // available when the engine opens (the backend's: the host's MemAvailable
  // for the CPU, the device's free memory after the weights for CUDA), at
  // least one full context and at most 4 Mi tokens. Its pages are touched
  // only as it fills. 0 = the backend's choice (0.3 on the CPU, 0.9 on CUDA).
  double kv_memory_fraction = 0;
  int kv_memory_split = 1;  // engines sharing that memory: each takes fraction / split
  int block_size = 16;      // tokens per KV block
  // Sequences decoding together; 0 = the backend's choice (64 on the CPU,
  // 256 on CUDA).
  int max_running = 0;
  // Tokens per step (the chunked prefill budget), <= the backend's
  // max_chunk; 0 = the backend's choice (256 on the CPU, 1,024 on CUDA).
  int max_batch_tokens = 0;
  int latency_batch_tokens = 0;
  // A target for a step's forward pass, in milliseconds (0: none): prompt
  // chunks join a step only up to the token count whose measured steps stay
  // within it (sched/step_budget.h; a block's worth of them at least), so
  // decoding sequences see inter-token times near the target while prompts
  // are computed beside them. Decodes are never held back.
  double step_ms = 0;
  // KV kept for the growth of running sequences at admission
  // (SchedulerConfig::growth_reserve): the share of their allowed output
  // counted at first, 0 = none.
  double kv_growth_reserve = 0.5;
  // Which cached prefixes eviction takes first: "lru" (least recently used)
  // or "next-use" (those nobody expects to read again, then the ones
  // expected furthest in the future: Engine::ExpectUse).
  std::string evict = "lru";
  // Anti-thrashing admission (SchedulerConfig::anti_thrash): a request is
  // admitted only while every running one keeps room for all of its output,
  // and one that does not continue an expected context may not evict one.
  bool anti_thrash = false;
  // The lower KV tier in host memory (engine/kv/kv_tier.h): blocks evicted
  // from the pool are copied there and copied back on a later hit instead of
  // recomputed. Its size in bytes: 0 = none, -1 = a quarter of the host's
  // available memory. Greedy outputs are the same with it or without.
  int64_t kv_host_bytes = 0;
  // A hybrid model's sliding layers (Gemma 3: five in six) keep their KV in
  // slides apart from the blocks (kv::BlockPool), enough for every running
  // sequence's window (max_running x (window + max_batch_tokens); sized
  // from memory, at most half of it), so a long context costs the other
  // layers' KV; slides no window needs stay for prefix hits until taken
  // back. Off, with the host tier, or on a backend without slides (tensor
  // parallelism), a block holds every layer's share.
  bool kv_slides = true;
  // With the tier: prefixes expected back (ExpectUse, Prefetch) are copied
  // back ahead of their request, into free blocks.
  bool kv_host_prefetch = true;
  int max_waiting = 4096;  // queued requests beyond which Submit refuses
  // Admission order: "fcfs", "priority", "vtc" (fair sharing between
  // clients, with `fairness`), "lpm" (longest cached prefix first, as
  // SGLang) or "plas" (program-level least attained service across all
  // programs, as Autellix, with `fairness`); sched/policy.h.
  std::string policy = "priority";
  FairnessOptions fairness;
  // Speculative decoding for every request (off by default): the proposer,
  // and the most guesses a sequence checks per step; how many each actually
  // checks is chosen per step from measured acceptance and step cost.
  SpecOptions spec;
};

// A submitted request. Deltas arrive through the callback given to Submit,
// or can be pulled with Next; Wait returns the whole Completion.
class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  virtual uint64_t id() const = 0;
  // The next delta, waiting up to timeout_ms (-1 = forever); nullopt on timeout
  // or after the final delta was taken.
  virtual std::optional<Delta> Next(int timeout_ms = -1) = 0;
  // Blocks until the request finished; the full result.
  virtual Completion Wait() = 0;
  virtual bool finished() const = 0;
  // Asks the engine to stop the request; its blocks are freed at the next
  // step and it finishes with reason "cancelled". Idempotent.
  virtual void Cancel() = 0;
  // Changes the request's goal class, priority and deadline (relative to
  // now) while it waits or runs, without restarting it: a caller that
  // started work early raises it once someone waits for the result. Takes
  // effect at the engine's next step; ignored once the request finished.
  virtual void SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) = 0;
};

using DeltaCallback = std::function<void(const Delta&)>;

struct EngineStats {
  int running = 0, waiting = 0;
  int kv_blocks_total = 0, kv_blocks_free = 0, kv_blocks_cached = 0;
  // Slides (EngineOptions::kv_slides): in all, and taken back from blocks
  // whose slide no window held so far.
  int kv_slides_total = 0;
  uint64_t kv_slides_taken_back = 0;
  uint64_t kv_pool_bytes = 0;  // the KV pool's size (all blocks, K and V)
  // The memory the pool could take when the engine opened
  // (Backend::KvMemoryAvailable: the host's, or the device's after the weights).
  uint64_t kv_memory_available = 0;
  uint64_t requests_finished = 0, requests_cancelled = 0, preemptions = 0;
  uint64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0;
  // The lower KV tier (EngineOptions::kv_host_bytes): prompt tokens of
  // finished prompts copied back from it (cached_prompt_tokens counts the
  // device's hits), its slots and those in use (blocks), blocks and bytes
  // copied each way, and seconds of copies: copied back for a step that
  // waited for them (exposed) or ahead of the step that read them
  // (prefetched: hidden behind other steps); copied out on eviction.
  uint64_t host_prompt_tokens = 0;
  int kv_host_blocks_total = 0, kv_host_blocks_used = 0;
  uint64_t kv_host_bytes = 0;
  uint64_t host_blocks_in = 0, host_blocks_out = 0, host_bytes_in = 0, host_bytes_out = 0;
  uint64_t host_copy_failures = 0;
  double host_in_exposed_seconds = 0, host_in_hidden_seconds = 0, host_out_seconds = 0;
  uint64_t steps = 0;
  // Of those, the steps that computed no prompt token (decode only,
  // speculation's checks included): their count, the tokens they produced
  // and their forward passes' seconds, apart from the steps with prefill;
  // and the positions their decodes attended (each sequence's length, summed
  // over the steps): the KV such steps read.
  uint64_t decode_steps = 0, decode_step_tokens = 0, decode_step_context_tokens = 0;
  double decode_step_seconds = 0;
  // Speculative decoding: guesses checked and kept; decode passes (a
  // sequence's share of a step, from its last token on) and the tokens they
  // produced, so tokens per target pass = decode_tokens_out / decode_passes;
  // seconds spent proposing guesses and in forward passes.
  uint64_t spec_proposed = 0, spec_accepted = 0;
  uint64_t decode_passes = 0, decode_tokens_out = 0;
  double propose_seconds = 0, forward_seconds = 0;
  // Shared-prefix (cascade) attention (Backend::CascadeCounts): the
  // forward passes that used it, and the decode tokens that did.
  uint64_t cascade_passes = 0, cascade_tokens = 0;
  // CPU thread pool (Backend::PoolCounts): its passes, and those run on fewer
  // threads while the machine was oversubscribed (CpuOptions::adapt_threads).
  uint64_t pool_passes = 0, pool_narrowed_passes = 0;
  double prefill_tokens_per_s = 0;  // recent (exponential average over steps)
  double decode_tokens_per_s = 0;
  // With CpuOptions::profile_stages: the forward passes of decode-only
  // batches so far, and per stage of them (in order) the seconds each thread
  // spent in it, summed over those passes.
  struct StageTime {
    std::string stage;
    std::vector<double> seconds;  // per thread
  };
  uint64_t profiled_passes = 0;
  std::vector<StageTime> forward_stages;
  // Per client (GenerationRequest::client) with requests queued or running,
  // and those seen lately: the service the engine gave it so far (prompt
  // tokens computed, cache hits excluded, and tokens generated), its queue
  // and running counts, and the vtc policy's virtual counter (0 under the
  // others).
  struct ClientStats {
    std::string client;
    uint64_t prompt_tokens = 0, generated_tokens = 0;
    int waiting = 0, running = 0;
    double counter = 0;
  };
  std::vector<ClientStats> clients;
};

// The KV pool's blocks when sized from memory (EngineOptions::kv_tokens 0):
// fraction * available / block_bytes, within [min_blocks, max_blocks].
int KvBlocksForMemory(uint64_t available, double fraction, size_t block_bytes, int min_blocks,
                      int max_blocks);

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);
  virtual ~Engine() = default;

  // Validates and queues a request. Errors (the engine keeps serving
  // everyone else): empty prompt, prompt + max_tokens beyond the context or
  // the KV pool, invalid sampling values, a full queue.
  virtual Result<std::shared_ptr<RequestHandle>> Submit(GenerationRequest request,
                                                        DeltaCallback on_delta = {}) = 0;

  // Brings back to the device what a lower KV tier (EngineOptions::
  // kv_host_bytes) holds of the cached prefix of `tokens`, ahead of the
  // request expected to read it, into free blocks only. Returns the tokens
  // it brings back (0: none, or no tier).
  virtual int Prefetch(const std::vector<int32_t>& tokens, uint64_t salt) { return 0; }
  // Leading tokens of `tokens` already cached under `salt`.
  virtual int ProbePrefix(const std::vector<int32_t>& tokens, uint64_t salt) = 0;
  // Keeps the cached prefix of `tokens` resident until Unpin (0 = nothing cached).
  virtual uint64_t Pin(const std::vector<int32_t>& tokens, uint64_t salt) = 0;
  virtual void Unpin(uint64_t pin) = 0;
  // Tells the engine that a request is expected to read the cached prefix of
  // `tokens` again in about `in_ms` (an agent's context while its tool
  // runs). It keeps nothing resident: with EngineOptions::evict "next-use"
  // it orders eviction, and anti-thrashing admission keeps new work off it.
  // With `hold`, it is also kept resident until ForgetUse, as by Pin, except
  // that the engine breaks the hold when it needs the room: for the first
  // waiting request while nothing runs, and for a request that continues an
  // expected context (holds expected furthest in the future first). Holds
  // together keep at most half the pool; past that a context is only expected.
  // Returns an id for ForgetUse; 0 when nothing of it is cached (or the
  // engine keeps no cache).
  virtual uint64_t ExpectUse(const std::vector<int32_t>& tokens, uint64_t salt, double in_ms,
                             bool hold = false) {
    return 0;
  }
  virtual void ForgetUse(uint64_t id) {}

  virtual EngineStats stats() const = 0;
  // The model this engine runs in this process; null for an engine that runs
  // elsewhere (a remote server), whose callers tokenize with their own copy.
  virtual Model* model() = 0;
  // Stops the step loop; pending requests finish with reason "cancelled".
  virtual void Shutdown() = 0;
  // False while the engine cannot take work (a remote server that stopped
  // answering); callers place requests elsewhere until it is true again.
  virtual bool alive() const { return true; }
};

}  // namespace braid
