#include "exec/token_mask.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>

namespace braid::rt {

std::shared_ptr<const TokenTable> TokenTable::ForModel(const Model& model) {
  static std::mutex mu;
  static std::map<const Model*, std::shared_ptr<const TokenTable>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[&model];
  if (!slot) {
    auto t = std::make_shared<TokenTable>();
    const int n = model.info().n_vocab;
    t->bytes.resize(static_cast<size_t>(n));
    t->eog.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      t->bytes[static_cast<size_t>(i)] = model.TokenBytes(i);
      t->eog[static_cast<size_t>(i)] = model.IsEndOfGeneration(i);
    }
    slot = std::move(t);
  }
  return slot;
}

int RegexMask::StateAfter(std::span<const int32_t> generated) {
  // Restart when the sequence is not an extension of what was walked
  // (preemption by recompute replays from the start).
  if (generated.size() < walked_.size() ||
      !std::equal(walked_.begin(), walked_.end(), generated.begin())) {
    walked_.clear();
    state_ = dfa_->start();
  }
  for (size_t i = walked_.size(); i < generated.size(); ++i) {
    const int32_t id = generated[i];
    if (id >= 0 && static_cast<size_t>(id) < tokens_->bytes.size())
      state_ = dfa_->Walk(state_, tokens_->bytes[static_cast<size_t>(id)]);
    walked_.push_back(id);
  }
  return state_;
}

void RegexMask::operator()(std::span<const int32_t> generated, std::span<float> logits) {
  const int state = StateAfter(generated);
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), tokens_->bytes.size());
  bool any = false;
  for (size_t id = 0; id < n; ++id) {
    bool allowed;
    if (tokens_->eog[id]) {
      allowed = dfa_->Accepting(state);
    } else {
      const std::string& b = tokens_->bytes[id];
      allowed = !b.empty() && state >= 0 && dfa_->Walk(state, b) != RegexDfa::kDead;
    }
    if (!allowed) logits[id] = kNegInf;
    any |= allowed;
  }
  for (size_t id = n; id < logits.size(); ++id) logits[id] = kNegInf;
  // Nothing can continue (the vocabulary cannot spell the rest): allow EOG
  // so the request ends; the runtime then reports the mismatch.
  if (!any)
    for (size_t id = 0; id < n; ++id)
      if (tokens_->eog[id]) logits[id] = 0.0f;
}

}  // namespace braid::rt
