// Test doubles for the runtime's unit tests: a byte-level fake Model, a fake
// Engine that answers every request at once (on the caller's thread), and an
// in-memory RunStore. Header-only; tests only.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "store/run_store.h"

namespace braid::rt::testing {

// One token per byte; id 256 is end-of-generation and the "BOS" is absent.
// Inside allow_special pieces "<|im_start|>" and "<|im_end|>" are the special
// ids 257 and 258 (pieces are matched one at a time), so that tests can see
// which prompt text may produce special tokens.
class FakeModel final : public Model {
 public:
  static constexpr int32_t kImStart = 257, kImEnd = 258;

  FakeModel() {
    info_.n_vocab = 259;
    info_.context = 4096;
  }
  const ModelInfo& info() const override { return info_; }
  std::vector<int32_t> Tokenize(std::span<const PromptPiece> pieces) const override {
    std::vector<int32_t> out;
    for (const PromptPiece& p : pieces) {
      std::string_view t = p.text;
      while (!t.empty()) {
        if (p.allow_special && t.starts_with(kImStartText)) {
          out.push_back(kImStart);
          t.remove_prefix(kImStartText.size());
        } else if (p.allow_special && t.starts_with(kImEndText)) {
          out.push_back(kImEnd);
          t.remove_prefix(kImEndText.size());
        } else {
          out.push_back(static_cast<unsigned char>(t[0]));
          t.remove_prefix(1);
        }
      }
    }
    return out;
  }
  std::string Detokenize(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 256)
        s += static_cast<char>(id);
      else if (id == kImStart)
        s += kImStartText;
      else if (id == kImEnd)
        s += kImEndText;
    }
    return s;
  }
  std::string TokenBytes(int32_t id) const override {
    return id < 256 ? std::string(1, static_cast<char>(id)) : "";
  }
  bool IsSpecialToken(int32_t id) const override { return id >= 256; }
  bool IsEndOfGeneration(int32_t id) const override { return id == 256; }
  std::vector<PromptPiece> FormatChat(std::span<const ChatMessage> messages,
                                      bool add_generation_prompt) const override {
    std::vector<PromptPiece> out;
    for (const auto& m : messages) {
      AppendPiece(out, "<" + m.role + ">", true);
      AppendPiece(out, m.content, false);
      AppendPiece(out, "</" + m.role + ">", true);
    }
    if (add_generation_prompt) AppendPiece(out, "<assistant>", true);
    return out;
  }
  std::unique_ptr<Sequence> NewSequence() override { return nullptr; }

 private:
  static constexpr std::string_view kImStartText = "<|im_start|>", kImEndText = "<|im_end|>";
  ModelInfo info_;
};

class FakeHandle final : public RequestHandle {
 public:
  using GoalFn = std::function<void(GoalClass, int, std::optional<double>)>;
  FakeHandle(uint64_t id, Completion c, GoalFn on_goal = nullptr)
      : id_(id), c_(std::move(c)), on_goal_(std::move(on_goal)) {}
  uint64_t id() const override { return id_; }
  std::optional<Delta> Next(int) override { return std::nullopt; }
  Completion Wait() override { return c_; }
  bool finished() const override { return true; }
  void Cancel() override {}
  void SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) override {
    if (on_goal_) on_goal_(goal, priority, deadline_ms);
  }

 private:
  uint64_t id_;
  Completion c_;
  GoalFn on_goal_;
};

// Answers each request immediately: the reply is respond(prompt text) or,
// when the prompt contains "FAIL", an engine error. Records every request.
// With `hold` set, replies are held back until Release(): requests then stay
// in flight, as in a busy engine. With `remote` set it stands for an engine
// that runs elsewhere (model() null); with `crash_next` set the next request
// fails with an engine error and the engine stops being alive; while
// `refuse_next` is positive, Submit refuses as full (and counts it down).
class FakeEngine final : public Engine {
 public:
  struct Submitted {
    std::string prompt;
    GenerationRequest request;
    int cached = 0;                       // prefix tokens found cached at submission
    int pins_active = 0;                  // pins held when it was submitted
    std::vector<GoalClass> goal_changes;  // SetGoal calls on its handle, in order
  };
  std::atomic<bool> hold{false};
  bool remote = false;
  std::atomic<bool> crash_next{false};
  std::atomic<bool> dead{false};
  std::atomic<int> refuse_next{0};
  EngineStats fake_stats;  // what stats() reports (set before use)
  // Delivers every held reply; returns how many.
  int Release() {
    std::vector<std::function<void()>> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (auto& deliver : held) deliver();
    return static_cast<int>(held.size());
  }
  std::function<std::string(const std::string&)> respond = [](const std::string& p) {
    return "<" + std::to_string(p.size()) + ">";
  };
  // Scores of a request's score_choices (select outputs), given the prompt
  // and each choice's text; unset, no scores are returned (an engine
  // without choice scoring).
  std::function<std::vector<float>(const std::string&, const std::vector<std::string>&)> score;

  Result<std::shared_ptr<RequestHandle>> Submit(GenerationRequest r, DeltaCallback cb) override {
    if (refuse_next > 0) {
      --refuse_next;
      return Status::ResourceExhausted("the fake engine is full");
    }
    std::string prompt = model_.Detokenize(r.prompt);
    Completion c;
    int cached = ProbeLocked(r.prompt);
    {
      std::lock_guard<std::mutex> lock(mu_);
      submitted_.push_back({prompt, r, cached, pins_active_, {}});
      // A held request's prompt is cached only once it is delivered.
      if (!hold) seen_.push_back(r.prompt);
    }
    c.usage.prompt_tokens = static_cast<int>(r.prompt.size());
    c.usage.cached_tokens = cached;
    const bool crash = crash_next.exchange(false);
    if (crash) dead = true;  // before the error is delivered, as a remote engine does
    if (crash || prompt.find("FAIL") != std::string::npos) {
      c.finish_reason = "error";
      c.error = crash ? "the connection was reset" : "fake engine failure";
    } else {
      c.text = respond(prompt);
      if (score && !r.score_choices.empty()) {
        std::vector<std::string> choices;
        for (const auto& ids : r.score_choices) choices.push_back(model_.Detokenize(ids));
        c.choice_logprobs = score(prompt, choices);
      }
      c.finish_reason = "stop";
      c.usage.generated_tokens = static_cast<int>(c.text.size());
    }
    Delta first;
    first.tokens = {1};
    first.text = c.text;
    Delta last;
    last.finished = true;
    last.finish_reason = c.finish_reason;
    last.error = c.error;
    auto deliver = [this, cb, first, last, error = c.finish_reason == "error", held = bool(hold),
                    tokens = r.prompt] {
      if (held) {
        std::lock_guard<std::mutex> lock(mu_);
        seen_.push_back(tokens);
      }
      if (!cb) return;
      if (!error) cb(first);
      cb(last);
    };
    size_t index = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      index = submitted_.size() - 1;
      if (hold) held_.push_back(deliver);
    }
    if (!hold) deliver();
    auto on_goal = [this, index](GoalClass g, int, std::optional<double>) {
      std::lock_guard<std::mutex> lock(mu_);
      submitted_[index].goal_changes.push_back(g);
    };
    std::lock_guard<std::mutex> lock(mu_);
    return std::shared_ptr<RequestHandle>(std::make_shared<FakeHandle>(++next_id_, c, on_goal));
  }
  int ProbePrefix(const std::vector<int32_t>& tokens, uint64_t) override {
    return ProbeLocked(tokens);
  }
  uint64_t Pin(const std::vector<int32_t>& tokens, uint64_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++pins_active_;
    ++pins_total_;
    return ++next_pin_;
  }
  void Unpin(uint64_t pin) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (pin) --pins_active_;
  }
  int Prefetch(const std::vector<int32_t>& tokens, uint64_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    prefetched_.push_back(tokens);
    return 0;
  }
  std::vector<std::vector<int32_t>> prefetched() const {
    std::lock_guard<std::mutex> lock(mu_);
    return prefetched_;
  }
  // A held expectation counts as a pin; plain ones are only counted.
  uint64_t ExpectUse(const std::vector<int32_t>&, uint64_t, double, bool hold) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++expectations_;
    if (hold) {
      ++pins_active_;
      ++pins_total_;
      held_ids_.insert(next_pin_ + 1);
    }
    return ++next_pin_;
  }
  void ForgetUse(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ids_.erase(id)) --pins_active_;
  }
  int expectations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return expectations_;
  }
  EngineStats stats() const override { return fake_stats; }
  Model* model() override { return remote ? nullptr : &model_; }
  bool alive() const override { return !dead; }
  void Shutdown() override {}

  std::vector<Submitted> submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  int pins_active() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pins_active_;
  }
  int pins_total() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pins_total_;
  }

 private:
  // Longest common prefix with any earlier prompt, in whole 16-token blocks.
  int ProbeLocked(const std::vector<int32_t>& tokens) const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = 0;
    for (const auto& s : seen_) {
      size_t i = 0;
      while (i < s.size() && i < tokens.size() && s[i] == tokens[i]) ++i;
      best = std::max(best, i);
    }
    return static_cast<int>(best / 16 * 16);
  }

  FakeModel model_;
  mutable std::mutex mu_;
  std::vector<Submitted> submitted_;
  std::vector<std::vector<int32_t>> seen_;
  std::vector<std::function<void()>> held_;
  uint64_t next_id_ = 0, next_pin_ = 0;
  int pins_active_ = 0, pins_total_ = 0, expectations_ = 0;
  std::vector<std::vector<int32_t>> prefetched_;
  std::set<uint64_t> held_ids_;
};

class MemoryStore final : public RunStore {
 public:
  Status CreateRun(const StoredRun& run) override {
    std::lock_guard<std::mutex> l(mu_);
    runs_[run.id] = run;
    return {};
  }
  Result<StoredRun> GetRun(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = runs_.find(id);
    if (it == runs_.end()) return Status::NotFound("run '" + id + "'");
    return it->second;
  }
  Result<std::vector<StoredRun>> ListRuns(int) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<StoredRun> out;
    for (auto& [id, r] : runs_) out.push_back(r);
    return out;
  }
  Status FinishRun(const std::string& id, const std::string& status,
                   const std::string& error) override {
    std::lock_guard<std::mutex> l(mu_);
    runs_[id].status = status;
    runs_[id].error = error;
    return {};
  }
  Result<int> AddAttempt(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = runs_.find(id);
    if (it == runs_.end()) return Status::NotFound("run '" + id + "'");
    return ++it->second.attempts;
  }
  // Counts only (the SQLite store sums tokens from the events' JSON).
  Result<RunTotals> Totals(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!runs_.count(id)) return Status::NotFound("run '" + id + "'");
    RunTotals t;
    for (const std::string& e : events_[id]) {
      t.nodes_done += e.rfind("node_finished ", 0) == 0;
      t.nodes_failed += e.rfind("node_failed ", 0) == 0;
    }
    return t;
  }
  Status DeleteRun(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!runs_.erase(id)) return Status::NotFound("run '" + id + "'");
    calls_.erase(id);
    values_.erase(id);
    events_.erase(id);
    return {};
  }
  Status RecordCall(const std::string& run_id, const StoredCall& call) override {
    std::lock_guard<std::mutex> l(mu_);
    calls_[run_id][call.key] = call;
    if (auto it = runs_.find(run_id); it != runs_.end()) it->second.attempts = 0;
    return {};
  }
  Result<std::optional<StoredCall>> FindCall(const std::string& run_id,
                                             const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto& m = calls_[run_id];
    auto it = m.find(key);
    if (it == m.end()) return std::optional<StoredCall>();
    return std::optional<StoredCall>(it->second);
  }
  Result<std::vector<StoredCall>> Calls(const std::string& run_id) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<StoredCall> out;
    for (auto& [k, c] : calls_[run_id]) out.push_back(c);
    return out;
  }
  Status RecordValue(const std::string& run_id, const std::string& key,
                     const std::string& value) override {
    std::lock_guard<std::mutex> l(mu_);
    values_[run_id][key] = value;
    return {};
  }
  Result<std::optional<std::string>> FindValue(const std::string& run_id,
                                               const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto& m = values_[run_id];
    auto it = m.find(key);
    if (it == m.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Status AppendEvent(const std::string& run_id, const std::string& kind,
                     const std::string& data) override {
    std::lock_guard<std::mutex> l(mu_);
    events_[run_id].push_back(kind + " " + data);
    return {};
  }
  std::vector<std::string> events(const std::string& run_id) {
    std::lock_guard<std::mutex> l(mu_);
    return events_[run_id];
  }

 private:
  std::mutex mu_;
  std::map<std::string, StoredRun> runs_;
  std::map<std::string, std::map<std::string, StoredCall>> calls_;
  std::map<std::string, std::map<std::string, std::string>> values_;
  std::map<std::string, std::vector<std::string>> events_;
};

}  // namespace braid::rt::testing
