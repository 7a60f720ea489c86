#include "exec/kept_contexts.h"

#include "exec/prefix_groups.h"

namespace braid::rt {
namespace {

constexpr size_t kMinExtendTokens = 16;  // one KV block
// A kept context comes back from a lower KV tier at this share of the
// expected gap: early enough for the copy, late enough to leave the room to
// others meanwhile.
constexpr double kPrefetchAt = 0.5;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

KeptContexts::KeptContexts(const RuntimeContext* ctx, bool active, std::string program)
    : ctx_(ctx), program_(std::move(program)), active_(active && ctx->gaps != nullptr) {}

void KeptContexts::Keep(const std::string& fn, int engine, std::vector<int32_t> context) {
  if (!active_ || context.empty()) return;
  Kept k;
  k.engine = engine;
  k.fn = program_ + "#" + fn;
  k.finished = Clock::now();
  const GapAdvice advice = ctx_->gaps->Advise(k.fn);
  k.hold.engine = engine;
  if (advice.keep) {
    k.expires = k.finished + std::chrono::microseconds(static_cast<int64_t>(advice.ttl_ms * 1000));
    k.prefetch_at = k.finished + std::chrono::microseconds(
                                     static_cast<int64_t>(advice.expected_ms * kPrefetchAt * 1000));
    k.prefetched = false;
    // One expectation, held when pinning: a pin the engine may break when
    // it needs the room (Engine::ExpectUse).
    k.hold.hint =
        ctx_->engine(engine).engine->ExpectUse(context, 0, advice.expected_ms, ctx_->retention.pin);
  }
  k.tokens = std::move(context);
  if (kept_.size() >= kMaxKept) {
    Release(kept_.front().hold);
    if (!kept_.front().extended) ctx_->gaps->NotExtended(kept_.front().fn);
    kept_.erase(kept_.begin());
  }
  kept_.push_back(std::move(k));
}

// A call extends a kept context when its prompt starts with at least half of
// it (and a KV block's worth): the program's next turn, the transcript
// grown by the tool's output.
std::vector<KeptHold> KeptContexts::Match(const std::vector<int32_t>& prompt) {
  std::vector<KeptHold> holds;
  if (!active_) return holds;
  const Clock::time_point now = Clock::now();
  for (Kept& k : kept_) {
    if (k.extended) continue;
    const size_t common = CommonPrefix(prompt, k.tokens);
    if (common < kMinExtendTokens || 2 * common < k.tokens.size()) continue;
    k.extended = true;
    ctx_->gaps->Extended(k.fn, MsBetween(k.finished, now));
    if (k.hold.hint) holds.push_back(k.hold);
    k.hold.hint = 0;
  }
  return holds;
}

void KeptContexts::Release(const KeptHold& hold) const {
  if (hold.hint) ctx_->engine(hold.engine).engine->ForgetUse(hold.hint);
}

void KeptContexts::Expire(Clock::time_point now, std::optional<Clock::time_point>* next) {
  for (Kept& k : kept_) {
    if (!k.prefetched && !k.extended) {
      if (k.prefetch_at <= now) {
        ctx_->engine(k.engine).engine->Prefetch(k.tokens, 0);
        k.prefetched = true;
      } else if (!*next || k.prefetch_at < **next) {
        *next = k.prefetch_at;
      }
    }
    if (!k.hold.hint) continue;
    if (k.expires <= now) {
      Release(k.hold);
      k.hold.hint = 0;
    } else if (!*next || k.expires < **next) {
      *next = k.expires;
    }
  }
}

void KeptContexts::Drop() {
  for (Kept& k : kept_) {
    Release(k.hold);
    if (!k.extended && ctx_->gaps) ctx_->gaps->NotExtended(k.fn);
  }
  kept_.clear();
  active_ = false;
}

}  // namespace braid::rt
