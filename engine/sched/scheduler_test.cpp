// The step scheduler against a simulated model: random arrivals, lengths and
// cancellations, checking the plan's invariants at every step.
#include "sched/scheduler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>

namespace braid {
namespace {

struct Sim {
  kv::BlockPool pool;
  kv::RadixCache cache;
  std::unique_ptr<AdmissionPolicy> policy;
  Scheduler sched;
  std::vector<std::unique_ptr<SeqState>> seqs;
  uint64_t next_id = 1;
  double clock = 0;

  Sim(int blocks, const std::string& policy_name, SchedulerConfig cfg,
      const FairnessOptions& fairness = {}, int slides = 0)
      : pool(blocks, slides),
        cache(pool, 16),
        policy(MakePolicy(policy_name, fairness)),
        sched(cfg, pool, cache, *policy) {}

  SeqState* Submit(int prompt, int gen, GoalClass goal = GoalClass::kThroughput, int shared = 0,
                   const std::string& client = "", const std::string& program = "") {
    auto s = std::make_unique<SeqState>();
    s->id = next_id++;
    s->client = client;
    s->program = program;
    // The shared prefix: token 7 throughout, or a client's own prefix.
    const int32_t prefix =
        client.empty() ? 7 : 7 + static_cast<int32_t>(1 + std::hash<std::string>{}(client) % 1000);
    for (int i = 0; i < prompt; ++i)
      s->tokens.push_back(i < shared ? prefix : static_cast<int32_t>(s->id * 1000 + i));
    s->prompt_len = prompt;
    s->max_tokens = gen;
    s->goal = goal;
    s->arrival = clock;
    sched.Add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }

  // Runs one step: checks the plan, commits it, "samples" a token per
  // sampled item and retires finished sequences. Returns the plan.
  StepPlan Step() {
    clock += 1;
    std::set<const SeqState*> was_running;
    for (auto& s : seqs)
      if (s->status == SeqStatus::kRunning) was_running.insert(s.get());
    StepPlan plan = sched.Schedule();
    int total = 0;
    std::set<const SeqState*> seen;
    bool saw_prefill = false;
    for (const ScheduledItem& it : plan.items) {
      CHECK(seen.insert(it.seq).second);  // at most once per step
      CHECK(it.n_tokens > 0);
      CHECK(it.start == it.seq->num_computed);
      CHECK(it.start + it.n_tokens <= static_cast<int>(it.seq->tokens.size()));
      CHECK(static_cast<int>(it.seq->blocks.size()) >= sched.BlocksFor(it.start + it.n_tokens));
      CHECK(it.sample == (it.start + it.n_tokens == static_cast<int>(it.seq->tokens.size())));
      // Blocks let go are a leading run of kNoBlock, before every
      // position the step's queries read (SchedulerConfig::window).
      const SeqState& q = *it.seq;
      const int window = sched.config().window;
      CHECK(q.dropped_blocks * cache.block_size() <=
            (window > 0 ? std::max(0, it.start - window + 1) : 0));
      for (size_t b = 0; b < q.blocks.size(); ++b) {
        if (static_cast<int>(b) < q.dropped_blocks) {
          CHECK(q.blocks[b] == kv::kNoBlock);
        } else {
          REQUIRE(q.blocks[b] != kv::kNoBlock);
          CHECK(pool.refcount(q.blocks[b]) >= 1);
        }
      }
      // With slides: it holds the slides of its blocks from slides_from on,
      // which covers every position the step's queries read in the sliding
      // layers.
      if (const int sw = sched.config().slide_window; sw > 0) {
        CHECK(q.slides_from * cache.block_size() <= std::max(0, it.start - sw + 1));
        for (size_t b = q.slides_from; b < q.blocks.size(); ++b) {
          CHECK(pool.slide(q.blocks[b]) != kv::kNoSlide);
          CHECK(q.slides[b] == pool.slide(q.blocks[b]));  // the slide table it is read through
          CHECK(pool.slide_holds(q.blocks[b]) >= 1);
        }
      }
      total += it.n_tokens;
      // One token left and already running before this step: a decode (or
      // the last prompt token after chunked prefill), planned in pass 1.
      const bool decode = was_running.count(it.seq) && it.n_tokens == 1 &&
                          it.start + 1 == static_cast<int>(it.seq->tokens.size());
      if (decode) CHECK_FALSE(saw_prefill);  // single-token work of running sequences comes first
      saw_prefill |= !decode;
    }
    CHECK(total == plan.n_tokens);
    CHECK(total <= sched.config().max_batch_tokens);
    CHECK(sched.num_running() <= sched.config().max_running);
    sched.Commit(plan);
    for (const ScheduledItem& it : plan.items) {
      if (!it.sample) continue;
      SeqState* s = it.seq;
      s->tokens.push_back(static_cast<int32_t>(s->id * 1000 + 500 + s->generated()));
      if (s->generated() >= s->max_tokens) sched.Remove(s, /*insert=*/true);
    }
    return plan;
  }

  bool Idle() const { return sched.num_running() == 0 && sched.num_waiting() == 0; }
};

TEST_CASE("random workload: invariants hold, everything finishes, no block leaks") {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    SchedulerConfig cfg;
    cfg.max_running = 8;
    cfg.max_batch_tokens = 48;
    // A quarter of the runs have a model whose layers all slide, a quarter
    // a hybrid one whose sliding layers keep few slides.
    if (seed % 4 == 0) cfg.window = 8 + static_cast<int>(seed % 40);
    if (seed % 4 == 2) cfg.slide_window = 8 + static_cast<int>(seed % 40);
    CAPTURE(cfg.window);
    CAPTURE(cfg.slide_window);
    Sim sim(40, "priority", cfg, {}, cfg.slide_window > 0 ? 36 : 0);
    int steps = 0;
    for (int round = 0; round < 400; ++round) {
      if (rng() % 3 == 0) {
        // One draw per statement: argument evaluation order is unspecified.
        const GoalClass g = rng() % 4 == 0 ? GoalClass::kLatency : GoalClass::kThroughput;
        const int prompt = 1 + static_cast<int>(rng() % 120);
        const int gen = 1 + static_cast<int>(rng() % 60);
        const int shared = rng() % 2 ? 32 : 0;
        sim.Submit(prompt, gen, g, shared);
      }
      if (rng() % 17 == 0) {
        // Cancel a random unfinished sequence.
        std::vector<SeqState*> live;
        for (auto& s : sim.seqs)
          if (s->status != SeqStatus::kFinished) live.push_back(s.get());
        if (!live.empty()) sim.sched.Remove(live[rng() % live.size()], false);
      }
      sim.Step();
      ++steps;
    }
    while (!sim.Idle() && steps < 20000) {
      sim.Step();
      ++steps;
    }
    CHECK(sim.Idle());
    for (auto& s : sim.seqs) CHECK(s->status == SeqStatus::kFinished);
    // Everything not free is held by the prefix cache, and eviction frees it all.
    CHECK(sim.pool.num_free() + sim.cache.stats().cached_blocks == sim.pool.num_blocks());
    for (kv::BlockId b : sim.cache.CachedBlocks()) CHECK(sim.pool.slide_holds(b) == 0);
    sim.cache.Evict(sim.pool.num_blocks());
    CHECK(sim.pool.num_free() == sim.pool.num_blocks());
    CHECK(sim.pool.num_free_slides() == sim.pool.num_slides());
  }
}

TEST_CASE("slides: a cached prefix is reused as far as its last window's slides remain") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 64;
  cfg.slide_window = 16;
  Sim sim(32, "fcfs", cfg, {}, /*slides=*/8);
  SeqState* a = sim.Submit(64, 8, GoalClass::kThroughput, /*shared=*/64);
  while (!sim.Idle()) sim.Step();
  // Its 4 prompt blocks are cached; the slides of the first ones were let go.
  const std::vector<int32_t> prefix(a->tokens.begin(), a->tokens.begin() + 64);
  const kv::PrefixMatch cached = sim.cache.Lookup(0, prefix);
  REQUIRE(cached.blocks.size() == 4);
  for (kv::BlockId b : cached.blocks) CHECK(sim.pool.slide_holds(b) == 0);
  auto slides_kept = [&] {
    std::vector<bool> kept;
    for (kv::BlockId b : cached.blocks) kept.push_back(sim.pool.slide(b) != kv::kNoSlide);
    return kept;
  };
  SUBCASE("every slide still there: the whole match") {
    SeqState* b = sim.Submit(64, 4, GoalClass::kThroughput, /*shared=*/64);
    sim.Step();
    CHECK(b->cached_tokens == 48);  // all but the last block: its last token is computed
  }
  SUBCASE("the slides of the match's last window taken back: a shorter match") {
    // New blocks take back the slides let go longest ago, until block 2's
    // (the one a query at 48 reads in a window of 16) is gone.
    std::vector<kv::BlockId> taken;
    while (sim.pool.slide(cached.blocks[2]) != kv::kNoSlide) {
      std::optional<kv::BlockId> t = sim.pool.Allocate();
      REQUIRE(t.has_value());
      taken.push_back(*t);
    }
    for (kv::BlockId t : taken) {
      sim.pool.DropSlide(t);
      sim.pool.Release(t);
    }
    const std::vector<bool> kept = slides_kept();
    CHECK_FALSE(kept[2]);
    // The longest k <= 3 whose window's block (k - 1, for k * 16 - 15 on) has its slide.
    int want = 0;
    for (int k = 3; k > 0; --k)
      if (kept[k - 1]) {
        want = k;
        break;
      }
    SeqState* b = sim.Submit(64, 4, GoalClass::kThroughput, /*shared=*/64);
    sim.Step();
    CHECK(b->cached_tokens == want * 16);
  }
  while (!sim.Idle()) sim.Step();
  CHECK(sim.pool.num_free() + sim.cache.stats().cached_blocks == sim.pool.num_blocks());
}

TEST_CASE("a sliding window lets go of old blocks: a long output fits a small pool") {
  // 6 blocks of 16 = 96 tokens of KV; a prompt of 40 and 400 tokens out.
  auto run = [](int window, int* preemptions, int* most_held, bool* finished) {
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 32;
    cfg.window = window;
    Sim sim(6, "fcfs", cfg);
    SeqState* s = sim.Submit(40, 400);
    *preemptions = 0;
    *most_held = 0;
    for (int i = 0; i < 2000 && !sim.Idle(); ++i) {
      *preemptions += static_cast<int>(sim.Step().preempted.size());
      *most_held = std::max(*most_held, sim.pool.num_blocks() - sim.pool.num_free() -
                                            sim.cache.stats().evictable_blocks);
    }
    *finished = sim.Idle();
    return s->generated();
  };
  int preemptions = 0, held = 0;
  bool finished = false;
  // Held: the window's 24 positions and a step's chunk span at most 4 blocks.
  CHECK(run(24, &preemptions, &held, &finished) == 400);
  CHECK(finished);
  CHECK(preemptions == 0);
  CHECK(held <= 4);
  // Without the window the same sequence outgrows the pool and never ends.
  CHECK(run(0, &preemptions, &held, &finished) < 400);
  CHECK_FALSE(finished);
}

TEST_CASE("a sliding window: the prompt is cached before its blocks are let go") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 64;
  cfg.window = 16;
  Sim sim(32, "fcfs", cfg);
  SeqState* a = sim.Submit(64, 40, GoalClass::kThroughput, /*shared=*/64);
  for (int i = 0; i < 10 && a->status != SeqStatus::kFinished; ++i) sim.Step();
  // 64 + 9 positions computed: blocks before position 73 - 16 + 1 = 58 go.
  CHECK(a->dropped_blocks == 3);
  CHECK(a->inserted_blocks == 4);  // the prompt's 4 blocks, and nothing after the first drop
  SeqState* b = sim.Submit(64, 4, GoalClass::kThroughput, /*shared=*/64);
  sim.Step();
  CHECK(b->cached_tokens == 48);  // all but the last block: its last token is computed
  while (!sim.Idle()) sim.Step();
  CHECK(sim.pool.num_free() + sim.cache.stats().cached_blocks == sim.pool.num_blocks());
}

TEST_CASE("a dry pool preempts the latest-ordered sequence, which later resumes") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 64;
  cfg.growth_reserve = 0;   // admit both, so that the pool runs dry
  Sim sim(6, "fcfs", cfg);  // 96 tokens of KV
  SeqState* a = sim.Submit(30, 40);
  SeqState* b = sim.Submit(30, 40);
  int preempted_b = 0;
  for (int i = 0; i < 200 && !sim.Idle(); ++i) {
    StepPlan p = sim.Step();
    for (SeqState* v : p.preempted) {
      CHECK(v == b);  // the later arrival yields
      ++preempted_b;
    }
  }
  CHECK(sim.Idle());
  CHECK(preempted_b >= 1);
  CHECK(a->generated() == 40);
  CHECK(b->generated() == 40);
  CHECK(b->preemptions == preempted_b);
}

TEST_CASE("admission keeps KV for what runs: few preemptions where the pool is tight") {
  // 32 sequences of 64 prompt tokens generating 192 each, in a pool of 2,048
  // tokens: at most 8 fit whole. Without a reserve, admission fills the pool
  // with prompts and decoding preempts over and over; with it, sequences are
  // admitted as the pool can keep them.
  auto run = [](double reserve, int* steps) {
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 256;
    cfg.max_running = 32;
    cfg.growth_reserve = reserve;
    Sim sim(128, "fcfs", cfg);
    for (int i = 0; i < 32; ++i) sim.Submit(64, 192);
    int preemptions = 0;
    *steps = 0;
    while (!sim.Idle() && *steps < 20000) {
      preemptions += static_cast<int>(sim.Step().preempted.size());
      ++*steps;
    }
    CHECK(sim.Idle());
    for (auto& s : sim.seqs) CHECK(s->generated() == 192);
    return preemptions;
  };
  int steps_off = 0, steps_on = 0;
  const int off = run(0, &steps_off), on = run(0.5, &steps_on);
  MESSAGE("preemptions: no reserve ", off, " in ", steps_off, " steps; reserve ", on, " in ",
          steps_on, " steps");
  CHECK(off >= 20);
  CHECK(on * 5 <= off);
  // Every output here runs to its cap, the worst case for a reserve that
  // decays: fewer sequences decode together, for at most a quarter more steps
  // (on an engine each preemption's recompute costs more than a step).
  CHECK(steps_on * 4 <= steps_off * 5);
}

TEST_CASE("anti-thrashing admission: no turn is preempted before it finishes") {
  // The pool of the test above; outputs all run to their cap, so a reserve
  // that decays admits more than can finish together.
  auto run = [](bool anti_thrash, int* steps) {
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 256;
    cfg.max_running = 32;
    cfg.anti_thrash = anti_thrash;
    Sim sim(128, "fcfs", cfg);
    for (int i = 0; i < 32; ++i) sim.Submit(64, 192);
    int preemptions = 0;
    *steps = 0;
    while (!sim.Idle() && *steps < 20000) {
      preemptions += static_cast<int>(sim.Step().preempted.size());
      ++*steps;
    }
    CHECK(sim.Idle());
    for (auto& s : sim.seqs) CHECK(s->generated() == 192);
    return preemptions;
  };
  int steps_off = 0, steps_on = 0;
  const int off = run(false, &steps_off), on = run(true, &steps_on);
  MESSAGE("preemptions: decaying reserve ", off, " in ", steps_off, " steps; anti-thrashing ", on,
          " in ", steps_on, " steps");
  CHECK(off > 0);
  CHECK(on == 0);
}

TEST_CASE("anti-thrashing admission keeps expected contexts from new work") {
  // A pool of 16 blocks of 16 tokens. A program's context of 8 blocks is
  // cached and expected back (its tool runs); one small sequence runs.
  auto run = [](bool anti_thrash) {
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 512;
    cfg.anti_thrash = anti_thrash;
    cfg.growth_reserve = 0;
    Sim sim(16, "fcfs", cfg);
    SeqState* first = sim.Submit(128, 1);  // the program's last turn
    while (first->status != SeqStatus::kFinished) sim.Step();
    std::vector<int32_t> context = first->tokens;
    context.resize(128);
    const kv::HintId hint = sim.cache.Expect(0, context, 100.0);
    REQUIRE(hint != 0);
    sim.Submit(16, 64);  // something running
    sim.Step();
    SeqState* fresh = sim.Submit(112, 8);  // a new program: 7 blocks + growth
    sim.Step();
    const bool fresh_admitted = fresh->status != SeqStatus::kWaiting;
    // The program's next turn extends its context: anti-thrashing admits it
    // beside the running work (plain admission has let the new program in).
    auto next = std::make_unique<SeqState>();
    next->id = sim.next_id++;
    next->tokens = context;
    for (int i = 0; i < 8; ++i) next->tokens.push_back(9000 + i);
    next->prompt_len = static_cast<int>(next->tokens.size());
    next->max_tokens = 4;
    sim.sched.Add(next.get());
    SeqState* turn = next.get();
    sim.seqs.push_back(std::move(next));
    for (int i = 0; i < 4 && turn->status == SeqStatus::kWaiting; ++i) sim.Step();
    if (anti_thrash) CHECK(turn->status != SeqStatus::kWaiting);
    sim.cache.Forget(hint);
    for (int i = 0; i < 400 && !sim.Idle(); ++i) sim.Step();
    CHECK(sim.Idle());
    return std::make_pair(fresh_admitted, turn->cached_tokens);
  };
  // Plain admission evicts the expected context for new work, and the
  // program's next turn computes it again; anti-thrashing keeps it.
  const auto [plain_fresh, plain_cached] = run(false);
  CHECK(plain_fresh);
  CHECK(plain_cached < 128);
  const auto [kept_fresh, kept_cached] = run(true);
  CHECK_FALSE(kept_fresh);
  CHECK(kept_cached == 128);
}

TEST_CASE("held contexts give way when nothing else could run") {
  // Two programs' contexts are held (their tools run) and fill the pool; a
  // new call arrives while nothing runs: the hold expected furthest breaks.
  for (bool anti_thrash : {false, true}) {
    CAPTURE(anti_thrash);
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 512;
    cfg.anti_thrash = anti_thrash;
    Sim sim(16, "fcfs", cfg);
    std::vector<std::vector<int32_t>> contexts;
    for (int i = 0; i < 2; ++i) {
      SeqState* turn = sim.Submit(128, 1);
      while (turn->status != SeqStatus::kFinished) sim.Step();
      contexts.emplace_back(turn->tokens.begin(), turn->tokens.begin() + 128);
    }
    const kv::HintId soon = sim.cache.Expect(0, contexts[0], 10.0, /*hold=*/true);
    const kv::HintId late = sim.cache.Expect(0, contexts[1], 900.0, /*hold=*/true);
    REQUIRE(sim.cache.stats().holds == 2);
    SeqState* fresh = sim.Submit(64, 8);
    for (int i = 0; i < 400 && !sim.Idle(); ++i) sim.Step();
    CHECK(fresh->status == SeqStatus::kFinished);
    CHECK(sim.cache.stats().holds == 1);
    CHECK(sim.cache.Probe(0, contexts[0]) == 128);  // the one expected sooner stays
    sim.cache.Forget(soon);
    sim.cache.Forget(late);
  }
}

TEST_CASE("chunked prefill respects the budget and decodes keep running") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 32;
  Sim sim(64, "fcfs", cfg);
  SeqState* a = sim.Submit(10, 50);
  sim.Step();  // a's prefill
  SeqState* b = sim.Submit(200, 5);
  for (int i = 0; i < 5; ++i) {
    StepPlan p = sim.Step();
    bool a_in = false;
    for (auto& it : p.items) a_in |= it.seq == a;
    CHECK(a_in);  // the long prefill never stalls a's decode
  }
  CHECK(b->num_computed > 0);
  CHECK(b->num_computed < 200);
}

TEST_CASE("a step-time target caps prompt chunks, never decodes, and lets prompts progress") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 256;
  cfg.max_running = 16;
  Sim sim(512, "fcfs", cfg);
  // Steps measured so far: up to 48 tokens within 10 ms, 49-64 over.
  StepBudget budget(256, 10.0, 16, 1000);
  budget.Observe(16, 4.0);
  budget.Observe(32, 7.0);
  budget.Observe(48, 9.5);
  budget.Observe(64, 12.0);
  REQUIRE(budget.Cap() == 48);
  sim.sched.set_step_budget(&budget);
  std::vector<SeqState*> decoding;
  for (int i = 0; i < 8; ++i) decoding.push_back(sim.Submit(4, 100));
  for (int i = 0; i < 4; ++i) sim.Step();  // their prompts, then decodes
  SeqState* big = sim.Submit(500, 4);
  for (int i = 0; i < 6; ++i) {
    const StepPlan p = sim.Step();
    int decodes = 0, chunk = 0;
    for (const ScheduledItem& it : p.items) {
      if (it.seq == big)
        chunk = it.n_tokens;
      else
        ++decodes;
    }
    CHECK(decodes == 8);     // every decode runs
    CHECK(chunk == 48 - 8);  // the prompt fills the step to the cap
    CHECK(p.n_tokens == 48);
  }
  // Decodes alone over the cap: a granule of prompt still joins each step.
  StepBudget tight(256, 1.0, 16, 1000);
  tight.Observe(8, 3.0);
  REQUIRE(tight.Cap() == 16);
  sim.sched.set_step_budget(&tight);
  for (int i = 0; i < 3; ++i) {
    const int before = big->num_computed;
    const StepPlan p = sim.Step();
    CHECK(p.n_tokens == 8 + 16);
    CHECK(big->num_computed == before + 16);
  }
  sim.sched.set_step_budget(nullptr);
  const int rest = big->prompt_len - big->num_computed;
  REQUIRE(rest > 100);
  CHECK(sim.Step().n_tokens == 8 + rest);  // no target: the rest of the prompt at once
}

TEST_CASE("latency-class work caps the step and is admitted first") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 128;
  cfg.latency_batch_tokens = 4;
  Sim sim(128, "priority", cfg);
  SeqState* t = sim.Submit(100, 20, GoalClass::kThroughput);
  SeqState* l = sim.Submit(3, 20, GoalClass::kLatency);
  StepPlan p = sim.Step();
  REQUIRE(!p.items.empty());
  CHECK(p.items.front().seq == l);
  CHECK(p.n_tokens <= 4);
  for (int i = 0; i < 10; ++i) CHECK(sim.Step().n_tokens <= 4);
  (void)t;
}

TEST_CASE("a shared prompt prefix is served from the cache to later requests") {
  SchedulerConfig cfg;
  Sim sim(64, "fcfs", cfg);
  SeqState* a = sim.Submit(100, 2, GoalClass::kThroughput, 64);
  while (!sim.Idle()) sim.Step();
  SeqState* b = sim.Submit(100, 2, GoalClass::kThroughput, 64);
  sim.Step();
  CHECK(a->cached_tokens == 0);
  CHECK(b->cached_tokens == 64);
}

// Service as VTC defines it, counted from the plans the scheduler ran (not
// from the policy's counters): prompt positions computed for the first time
// (w_p each) and tokens generated (w_q each), per client.
struct ServiceMeter {
  double w_p = 1, w_q = 2;
  std::map<std::string, double> service;
  std::map<const SeqState*, int> prompt_done;  // high-water mark of computed prompt positions
  void Add(const StepPlan& plan) {
    for (const ScheduledItem& it : plan.items) {
      int& done = prompt_done[it.seq];
      const int end = std::min(it.start + it.n_tokens, it.seq->prompt_len);
      const int fresh = std::max(0, end - std::max(it.start, done));
      done = std::max(done, end);
      service[it.seq->client] += w_p * fresh + (it.sample ? w_q : 0.0);
    }
  }
};

// Clients submitting at different rates, each kept backlogged (at least two
// requests waiting): the largest difference in service between two clients
// at any step, divided by each client's weight.
double MaxServiceGap(const std::string& policy, const std::vector<int>& rates,
                     const std::vector<double>& weights, uint32_t seed, int steps, double* bound) {
  std::mt19937 rng(seed);
  SchedulerConfig cfg;
  cfg.max_running = 12;
  cfg.max_batch_tokens = 96;
  FairnessOptions f;
  for (size_t c = 0; c < weights.size(); ++c)
    f.client_weights["c" + std::to_string(c)] = weights[c];
  const int blocks = 48;
  Sim sim(blocks, policy, cfg, f);
  ServiceMeter meter;
  const int max_prompt = 160, max_gen = 48;
  // U = max(w_p * L_input, w_q * M), M the tokens the KV pool holds.
  *bound = 2 * std::max(1.0 * max_prompt, 2.0 * blocks * 16);
  double gap = 0;
  for (int step = 0; step < steps; ++step) {
    for (size_t c = 0; c < rates.size(); ++c) {
      const std::string name = "c" + std::to_string(c);
      int waiting = 0;
      for (auto& s : sim.seqs) waiting += s->status == SeqStatus::kWaiting && s->client == name;
      // Arrivals in proportion to the rate; a floor of two waiting keeps it backlogged.
      int arrivals = static_cast<int>(rng() % 8) < rates[c] ? 1 : 0;
      if (waiting + arrivals < 2) arrivals = 2 - waiting;
      for (int k = 0; k < arrivals; ++k) {
        const int prompt = 8 + static_cast<int>(rng() % (max_prompt - 8));
        const int gen = 1 + static_cast<int>(rng() % max_gen);
        sim.Submit(prompt, gen, GoalClass::kThroughput, 0, name);
      }
    }
    meter.Add(sim.Step());
    double lo = 1e300, hi = -1e300;
    for (size_t c = 0; c < rates.size(); ++c) {
      const double v = meter.service["c" + std::to_string(c)] / weights[c];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    gap = std::max(gap, hi - lo);
  }
  return gap;
}

TEST_CASE("MoreUrgent: latency class, priority, deadline, arrival, id") {
  const Urgency base{GoalClass::kThroughput, 0, std::nullopt, 5.0, 7};
  Urgency latency = base, high = base, due = base, older = base, lower_id = base;
  latency.goal = GoalClass::kLatency;
  latency.priority = -5;
  high.priority = 1;
  due.deadline = 100.0;
  older.arrival = 1.0;
  lower_id.id = 3;
  for (const Urgency* u : {&high, &due, &older, &lower_id}) {
    CHECK(MoreUrgent(latency, *u));
    CHECK(MoreUrgent(*u, base));
    CHECK_FALSE(MoreUrgent(base, *u));
  }
  CHECK(MoreUrgent(high, due));   // priority before deadline
  CHECK(MoreUrgent(due, older));  // a deadline before none, whatever the age
  Urgency sooner = due;
  sooner.deadline = 50.0;
  CHECK(MoreUrgent(sooner, due));
  CHECK_FALSE(MoreUrgent(base, base));
}

TEST_CASE("vtc: backlogged clients' service stays within 2U at every step; fcfs does not") {
  double bound = 0;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    const double vtc = MaxServiceGap("vtc", {1, 3, 6}, {1, 1, 1}, seed, 1500, &bound);
    CHECK(vtc <= bound);
    // The same arrivals in arrival order: service follows demand.
    const double fcfs = MaxServiceGap("fcfs", {1, 3, 6}, {1, 1, 1}, seed, 1500, &bound);
    CHECK(fcfs > bound);
  }
}

TEST_CASE("vtc: weights share service in their ratio") {
  double bound = 0;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    // Weight-normalized service within the bound means service in ratio 1:2:3.
    CHECK(MaxServiceGap("vtc", {4, 4, 4}, {1, 2, 3}, seed, 1500, &bound) <= bound);
    // Unweighted, the heavier clients would fall behind by far more.
    CHECK(MaxServiceGap("vtc", {4, 4, 4}, {1, 1, 1}, seed, 1500, &bound) <= bound);
  }
}

// Twelve clients with prompts of which 96 tokens are the client's own
// prefix, all backlogged, in a pool that holds few of them at once: the
// prompt tokens found in the cache, and the largest service gap.
struct LocalityRun {
  long cached = 0;
  double gap = 0, bound = 0;
};
LocalityRun RunLocality(double locality_bound, uint32_t seed) {
  constexpr int kTenants = 12;
  std::mt19937 rng(seed);
  SchedulerConfig cfg;
  cfg.max_running = 6;
  cfg.max_batch_tokens = 128;
  FairnessOptions f;
  f.locality_bound = locality_bound;
  const int blocks = 40;
  Sim sim(blocks, "vtc", cfg, f);
  ServiceMeter meter;
  LocalityRun out;
  out.bound = 2 * std::max(1.0 * 128, 2.0 * blocks * 16) + locality_bound;
  for (int step = 0; step < 1200; ++step) {
    for (int c = 0; c < kTenants; ++c) {
      const std::string name = "tenant" + std::to_string(c);
      int waiting = 0;
      for (auto& s : sim.seqs) waiting += s->status == SeqStatus::kWaiting && s->client == name;
      for (; waiting < 3; ++waiting)
        sim.Submit(96 + 8 + static_cast<int>(rng() % 24), 1 + static_cast<int>(rng() % 8),
                   GoalClass::kThroughput, 96, name);
    }
    meter.Add(sim.Step());
    double lo = 1e300, hi = -1e300;
    for (int c = 0; c < kTenants; ++c) {
      const double v = meter.service["tenant" + std::to_string(c)];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    out.gap = std::max(out.gap, hi - lo);
  }
  for (auto& s : sim.seqs) out.cached += s->cached_tokens;
  return out;
}

TEST_CASE("vtc with locality: more cache hits, service gap within 2U + the bound") {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    const LocalityRun plain = RunLocality(0, seed), local = RunLocality(600, seed);
    CHECK(plain.gap <= plain.bound);
    CHECK(local.gap <= local.bound);
    CHECK(local.cached > plain.cached * 1.2);
    MESSAGE("cached prompt tokens: plain " << plain.cached << ", locality " << local.cached
                                           << "; gap " << plain.gap << " / " << local.gap);
  }
}

TEST_CASE("vtc: cached prompt tokens cost w_c, charged once per request") {
  for (double wc : {0.0, 1.0}) {
    CAPTURE(wc);
    SchedulerConfig cfg;
    cfg.max_running = 4;
    cfg.max_batch_tokens = 64;
    FairnessOptions f;
    f.cached_weight = wc;
    Sim sim(64, "vtc", cfg, f);
    // The first request computes the 96-token prefix; the second finds it.
    sim.Submit(112, 2, GoalClass::kThroughput, 96, "a");
    while (!sim.Idle()) sim.Step();
    const double after_first = sim.policy->counter("a");
    CHECK(after_first == doctest::Approx(112 + 2 * 2));
    SeqState* second = sim.Submit(112, 2, GoalClass::kThroughput, 96, "a");
    while (!sim.Idle()) sim.Step();
    CHECK(second->cached_tokens == 96);
    CHECK(sim.policy->counter("a") - after_first == doctest::Approx(16 + wc * 96 + 2 * 2));
  }
}

TEST_CASE("vtc: the lift rule") {
  VtcPolicy p({});
  SeqState a, b, a2;
  a.client = a2.client = "a";
  b.client = "b";
  a.id = 1, b.id = 2, a2.id = 3;
  p.OnWaiting(a, {});
  p.OnService(a, 300, 0, 100);  // 300 * 1 + 100 * 2
  CHECK(p.counter("a") == doctest::Approx(500));
  // b arrives while a waits: it starts at a's counter, not at 0.
  std::vector<SeqState*> waiting = {&a};
  p.OnWaiting(b, waiting);
  CHECK(p.counter("b") == doctest::Approx(500));
  // A client whose queue is not empty is not lifted.
  p.OnService(a, 100, 0, 0);
  waiting = {&a, &b};
  p.OnWaiting(a2, waiting);
  CHECK(p.counter("a") == doctest::Approx(600));
  // Nobody else waiting: no lift; a lift never lowers a counter.
  p.OnWaiting(b, {});
  CHECK(p.counter("b") == doctest::Approx(500));
  p.OnService(b, 1000, 0, 0);
  waiting = {&a};
  p.OnWaiting(b, waiting);
  CHECK(p.counter("b") == doctest::Approx(1500));
  // Order: latency class first, then the lower counter.
  CHECK(p.Before(a, b));
  b.goal = GoalClass::kLatency;
  CHECK(p.Before(b, a));
}

TEST_CASE("vtc: accounts of idle one-off clients do not pile up") {
  SchedulerConfig cfg;
  cfg.max_running = 8;
  cfg.max_batch_tokens = 64;
  Sim sim(40, "vtc", cfg);
  auto& vtc = static_cast<VtcPolicy&>(*sim.policy);
  for (int i = 0; i < 2 * static_cast<int>(VtcPolicy::kMaxIdleClients); ++i) {
    SeqState* one = sim.Submit(4, 1, GoalClass::kThroughput, 0, "run" + std::to_string(i));
    for (int k = 0; k < 10 && one->status != SeqStatus::kFinished; ++k) sim.Step();
    REQUIRE(one->status == SeqStatus::kFinished);
  }
  CHECK(vtc.clients() <= VtcPolicy::kMaxIdleClients + 1);
  // A client with work keeps its account.
  sim.Submit(50, 100, GoalClass::kThroughput, 0, "busy");
  for (int k = 0; k < 10; ++k) sim.Step();
  CHECK(vtc.counter("busy") > 0);
}

TEST_CASE("vtc: a low-rate client is not starved by heavy ones") {
  SchedulerConfig cfg;
  cfg.max_running = 8;
  cfg.max_batch_tokens = 64;
  Sim sim(40, "vtc", cfg);
  for (int k = 0; k < 60; ++k) {
    sim.Submit(100, 40, GoalClass::kThroughput, 0, "heavy1");
    sim.Submit(100, 40, GoalClass::kThroughput, 0, "heavy2");
  }
  int worst_wait = 0;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 30; ++i) sim.Step();
    SeqState* light = sim.Submit(20, 4, GoalClass::kThroughput, 0, "light");
    int waited = 0;
    while (light->status == SeqStatus::kWaiting && waited < 1000) {
      sim.Step();
      ++waited;
    }
    worst_wait = std::max(worst_wait, waited);
  }
  // Admitted as soon as a running sequence leaves room (FCFS would queue it
  // behind the heavy clients' backlog of 120 requests).
  CHECK(worst_wait <= 40);
}

TEST_CASE("vtc: preemption takes the client with the highest counter first") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 64;
  cfg.growth_reserve = 0;  // admit both, so that the pool runs dry
  Sim sim(7, "vtc", cfg);  // 112 tokens of KV: two sequences of 100 cannot both finish
  auto& vtc = static_cast<VtcPolicy&>(*sim.policy);
  SeqState* a = sim.Submit(30, 70, GoalClass::kThroughput, 0, "a");
  SeqState* b = sim.Submit(30, 70, GoalClass::kThroughput, 0, "b");
  int preemptions = 0;
  for (int i = 0; i < 400 && !sim.Idle(); ++i) {
    const double ca = vtc.counter("a"), cb = vtc.counter("b");
    StepPlan p = sim.Step();
    for (SeqState* v : p.preempted) {
      // The victim's client had the higher counter when the step began
      // (equal: the later arrival, b).
      CHECK((v == a ? ca > cb : cb >= ca));
      ++preemptions;
    }
  }
  CHECK(sim.Idle());
  CHECK(preemptions >= 1);
  CHECK(a->generated() == 70);
  CHECK(b->generated() == 70);
}

// Four equal programs of one client whose calls arrive interleaved: the
// step at which each program's last call finishes, in order.
std::vector<int> ProgramFinishSteps(const char* policy, double quantum) {
  SchedulerConfig cfg;
  cfg.max_running = 2;
  cfg.max_batch_tokens = 64;
  FairnessOptions f;
  f.program_quantum = quantum;
  Sim sim(64, policy, cfg, f);
  std::map<std::string, std::vector<SeqState*>> calls;
  for (int k = 0; k < 6; ++k)
    for (int p = 0; p < 4; ++p) {
      const std::string program = "p" + std::to_string(p);
      calls[program].push_back(sim.Submit(40, 10, GoalClass::kThroughput, 0, "alice", program));
    }
  std::map<std::string, int> finished;
  for (int step = 1; !sim.Idle() && step < 5000; ++step) {
    sim.Step();
    for (auto& [program, seqs] : calls) {
      bool all = true;
      for (SeqState* s : seqs) all &= s->status == SeqStatus::kFinished;
      if (all) finished.emplace(program, step);
    }
  }
  std::vector<int> out;
  for (auto& [program, step] : finished) out.push_back(step);
  std::sort(out.begin(), out.end());
  return out;
}

TEST_CASE("vtc: programs of a client at one level go in the order they started") {
  // Programs of 360 service each: below a quantum of 1024 they share a
  // level, so the one that started first goes first.
  const std::vector<int> vtc = ProgramFinishSteps("vtc", 1024);
  const std::vector<int> fcfs = ProgramFinishSteps("fcfs", 1024);
  REQUIRE(vtc.size() == 4);
  REQUIRE(fcfs.size() == 4);
  MESSAGE("program finish steps, vtc: " << vtc[0] << " " << vtc[1] << " " << vtc[2] << " " << vtc[3]
                                        << "; fcfs: " << fcfs[0] << " " << fcfs[1] << " " << fcfs[2]
                                        << " " << fcfs[3]);
  // In call arrival order every program waits for the last round of calls;
  // in program order, the first programs are done well before the end.
  CHECK(fcfs[0] > 0.8 * fcfs[3]);
  CHECK(vtc[0] < 0.7 * vtc[3]);
  CHECK(vtc[0] + vtc[1] + vtc[2] + vtc[3] < 0.9 * (fcfs[0] + fcfs[1] + fcfs[2] + fcfs[3]));
}

TEST_CASE("vtc: a client's short program is not starved by its long one") {
  for (const char* policy : {"vtc", "priority"}) {
    CAPTURE(policy);
    SchedulerConfig cfg;
    cfg.max_running = 4;
    cfg.max_batch_tokens = 64;
    Sim sim(40, policy, cfg);
    // A long agent loop's backlog, then a short program of the same client.
    for (int k = 0; k < 40; ++k)
      sim.Submit(60, 20, GoalClass::kThroughput, 0, "alice", "agent-loop");
    for (int k = 0; k < 5; ++k) sim.Step();
    std::vector<SeqState*> short_calls;
    for (int k = 0; k < 3; ++k)
      short_calls.push_back(sim.Submit(30, 5, GoalClass::kThroughput, 0, "alice", "short"));
    int steps = 0;
    auto done = [&] {
      for (SeqState* s : short_calls)
        if (s->status != SeqStatus::kFinished) return false;
      return true;
    };
    while (!done() && steps < 5000) {
      sim.Step();
      ++steps;
    }
    if (std::string(policy) == "vtc") {
      CHECK(steps <= 60);  // as soon as running sequences make room
    } else {
      CHECK(steps > 200);  // behind the loop's backlog, in arrival order
    }
  }
}

TEST_CASE("lpm: a waiting request with a cached prefix is admitted first") {
  for (const char* policy : {"lpm", "fcfs"}) {
    CAPTURE(policy);
    SchedulerConfig cfg;
    cfg.max_running = 1;  // one admission at a time
    Sim sim(64, policy, cfg);
    sim.Submit(100, 2, GoalClass::kThroughput, 64);  // leaves its 64-token prefix cached
    while (!sim.Idle()) sim.Step();
    SeqState* cold = sim.Submit(100, 2);
    SeqState* warm = sim.Submit(100, 2, GoalClass::kThroughput, 64);
    sim.Step();
    if (std::string(policy) == "lpm") {
      CHECK(warm->status == SeqStatus::kRunning);
      CHECK(warm->cached_tokens == 64);
      CHECK(cold->status == SeqStatus::kWaiting);
    } else {
      CHECK(cold->status == SeqStatus::kRunning);  // arrived first
      CHECK(warm->status == SeqStatus::kWaiting);
    }
    while (!sim.Idle()) sim.Step();
    CHECK(cold->generated() == 2);
    CHECK(warm->generated() == 2);
  }
}

TEST_CASE("plas: a new program's call is admitted before a much-served program's") {
  for (const char* policy : {"plas", "fcfs"}) {
    CAPTURE(policy);
    SchedulerConfig cfg;
    cfg.max_running = 1;  // one admission at a time
    cfg.max_batch_tokens = 64;
    Sim sim(64, policy, cfg);
    // An agent loop's first call: 200 prompt tokens and 50 generated, 300
    // service, a level above a new program (quantum 256).
    sim.Submit(200, 50, GoalClass::kThroughput, 0, "", "agent-loop");
    while (!sim.Idle()) sim.Step();
    // The loop's next call, then a new program's call.
    SeqState* next = sim.Submit(40, 5, GoalClass::kThroughput, 0, "", "agent-loop");
    sim.clock += 1;
    SeqState* fresh = sim.Submit(40, 5, GoalClass::kThroughput, 0, "", "new");
    sim.Step();
    if (std::string(policy) == "plas") {
      CHECK(fresh->status == SeqStatus::kRunning);
      CHECK(next->status == SeqStatus::kWaiting);
      CHECK(static_cast<PlasPolicy&>(*sim.policy).program_service("agent-loop") ==
            doctest::Approx(200 + 2 * 50));
    } else {
      CHECK(next->status == SeqStatus::kRunning);  // arrived first
      CHECK(fresh->status == SeqStatus::kWaiting);
    }
    while (!sim.Idle()) sim.Step();
    CHECK(next->generated() == 5);
    CHECK(fresh->generated() == 5);
  }
}

TEST_CASE("plas: a short program is not stuck behind long programs' backlog") {
  for (const char* policy : {"plas", "fcfs"}) {
    CAPTURE(policy);
    SchedulerConfig cfg;
    cfg.max_running = 4;
    cfg.max_batch_tokens = 64;
    Sim sim(40, policy, cfg);
    // Two long agent loops of different clients queue 25 calls each.
    for (int k = 0; k < 25; ++k) {
      sim.Submit(60, 20, GoalClass::kThroughput, 0, "alice", "loop-a");
      sim.Submit(60, 20, GoalClass::kThroughput, 0, "bob", "loop-b");
    }
    for (int k = 0; k < 5; ++k) sim.Step();
    std::vector<SeqState*> short_calls;
    for (int k = 0; k < 3; ++k)
      short_calls.push_back(sim.Submit(30, 5, GoalClass::kThroughput, 0, "carol", "short"));
    int steps = 0;
    auto done = [&] {
      for (SeqState* s : short_calls)
        if (s->status != SeqStatus::kFinished) return false;
      return true;
    };
    while (!done() && steps < 5000) {
      sim.Step();
      ++steps;
    }
    if (std::string(policy) == "plas") {
      CHECK(steps <= 60);  // as soon as running sequences make room
    } else {
      CHECK(steps > 200);  // behind the loops' backlog, in arrival order
    }
    while (!sim.Idle()) sim.Step();
    for (auto& s : sim.seqs) CHECK(s->status == SeqStatus::kFinished);
  }
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

TEST_CASE("a prefix evicted to the lower tier comes back as a load, not a recompute") {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 256;
  cfg.growth_reserve = 0;
  Sim sim(8, "fcfs", cfg);  // 8 blocks of 16 tokens
  auto tier = kv::KvTier::Create(16, 64, 16);
  REQUIRE(tier.ok());
  kv::KvTier& t = **tier;
  sim.cache.set_evict_sink([&](uint64_t salt, uint64_t parent, std::span<const int32_t> tokens,
                               kv::BlockId) { t.Store(salt, parent, tokens); });
  sim.sched.set_tier(&t);
  // A 64-token prompt runs to the end: its 4 blocks stay cached.
  SeqState* a = sim.Submit(64, 2);
  while (a->status != SeqStatus::kFinished) sim.Step();
  const std::vector<int32_t> prompt(a->tokens.begin(), a->tokens.begin() + 64);
  // Unrelated work takes the whole pool: a's blocks are evicted to the tier.
  SeqState* b = sim.Submit(112, 1);
  while (b->status != SeqStatus::kFinished) sim.Step();
  CHECK(sim.cache.Probe(0, prompt) < 64);
  CHECK(t.stats().used >= 3);

  // The same prompt again: the device holds less of it than the tier adds.
  auto again = std::make_unique<SeqState>();
  again->id = 99;
  again->tokens = prompt;
  again->prompt_len = 64;
  again->max_tokens = 1;
  sim.sched.Add(again.get());
  const int device = sim.cache.Probe(0, std::span<const int32_t>(prompt).first(63));
  StepPlan plan = sim.sched.Schedule();
  REQUIRE(plan.loads.size() == 1);
  const TierLoad& load = plan.loads[0];
  CHECK(load.seq == again.get());
  CHECK(load.first_block * 16 == device);
  CHECK(device + static_cast<int>(load.slots.size()) * 16 == 48);  // 63 positions: 3 whole blocks
  REQUIRE(plan.items.size() == 1);
  CHECK(plan.items[0].start == 48);
  CHECK(plan.items[0].n_tokens == 16);
  CHECK(again->num_computed == 48);
  CHECK(again->host_tokens == 48 - device);

  // A failed load sends it back to compute those positions.
  sim.sched.Unload(again.get(), &plan);
  for (kv::SlotId s : load.slots) t.Drop(s);
  CHECK(plan.items.empty());
  CHECK(again->status == SeqStatus::kWaiting);
  CHECK(again->num_computed == 0);
  StepPlan retry = sim.sched.Schedule();
  CHECK(retry.loads.empty());
  REQUIRE(retry.items.size() == 1);
  CHECK(retry.items[0].start == device);
  CHECK(t.CheckInvariants().ok());
  CHECK(sim.cache.CheckInvariants().ok());
}

}  // namespace
}  // namespace braid
