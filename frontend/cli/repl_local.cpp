// braid repl on the embedded stack: one run and one Lua state in this
// process, fed input by input through the driver.
#include <cstdio>
#include <map>
#include <mutex>

#include "cli/repl_session.h"
#include "cli/stack.h"
#include "lua/driver.h"
#include "report/run_report.h"
#include "runtime/runtime.h"

namespace braid::cli {
namespace {

class LocalSession : public ReplSession {
 public:
  LocalSession(Stack& stack, std::shared_ptr<rt::Run> run, std::unique_ptr<lua::LuaState> state,
               const lua::DriverOptions& options)
      : stack_(stack),
        run_(std::move(run)),
        state_(std::move(state)),
        driver_(*run_, *state_, options) {
    // Token events come on engine threads; they go to the input's echo, if any.
    run_->Watch([this](const rt::RunEvent& e) {
      if (e.kind != rt::RunEvent::Kind::kTokens) return;
      std::lock_guard<std::mutex> lock(mu_);
      if (on_tokens_) on_tokens_(e.var, e.text);
    });
  }
  ~LocalSession() override {
    run_->Watch(nullptr);
    run_->Cancel();
    run_->Finish(Status::Ok());
  }

  Result<std::vector<std::string>> Evaluate(const std::string& name, const std::string& source,
                                            bool program, const std::vector<std::string>& args,
                                            const std::string& dir,
                                            const TokenFn& on_tokens) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      on_tokens_ = on_tokens;
    }
    Result<std::vector<std::string>> r = std::vector<std::string>{};
    if (program) {
      driver_.set_script_dir(dir.empty() ? "." : dir);
      r = driver_.EvaluateProgram(name, source, args);
      driver_.set_script_dir(".");
    } else {
      r = driver_.Evaluate(name, source);
    }
    std::lock_guard<std::mutex> lock(mu_);
    on_tokens_ = nullptr;
    return r;
  }

  std::string run_id() const override { return run_->id(); }

  Result<std::vector<ReplVar>> Vars(const std::string& run) override {
    BRAID_RETURN_IF_ERROR(Live(run));
    std::map<rt::NodeId, std::string> labels;
    for (const rt::NodeInfo& n : run_->Nodes()) labels[n.id] = n.label;
    std::vector<ReplVar> out;
    for (const rt::VarInfo& v : run_->Vars()) {
      out.push_back({v.id, v.name, rt::VarStateName(v.state),
                     v.state == rt::VarState::kReady ? v.value : v.error, v.producer,
                     v.producer ? labels[v.producer] : ""});
    }
    return out;
  }

  Result<std::vector<std::string>> Runs() override {
    const auto nodes = run_->Nodes();
    size_t done = 0;
    for (const auto& n : nodes) done += n.state == rt::NodeState::kDone;
    std::vector<std::string> lines = {
        run_->id() + "  this session: " + std::to_string(nodes.size()) + " calls (" +
        std::to_string(done) + " done), " + std::to_string(run_->Vars().size()) + " variables"};
    // Earlier runs in the store (their calls: braid runs ID).
    if (auto stored = stack_.runtime->StoredRuns(10); stored.ok()) {
      for (const rt::RunRecord& r : *stored) {
        if (r.id == run_->id()) continue;
        lines.push_back(r.id + "  " + r.state + ", " + r.program + ", " +
                        std::to_string(r.nodes_done) + " calls done (stored)");
      }
    }
    return lines;
  }

  Status Graph(const std::string& run, const std::string& path) override {
    BRAID_RETURN_IF_ERROR(Live(run));
    report::WriteGraph(*run_, path);
    return Status::Ok();
  }

  Result<std::vector<std::string>> Stats() override {
    std::vector<std::string> lines = {stack_.KvSummary()};
    for (size_t e = 0; e < stack_.engines.size(); ++e) {
      const EngineStats st = stack_.engines[e]->stats();
      char line[512];
      std::snprintf(line, sizeof line,
                    "engine %zu: %llu requests, %llu prompt tokens (%llu from the prefix cache), "
                    "%llu generated, %d running, %d waiting, KV blocks %d of %d in use",
                    e, static_cast<unsigned long long>(st.requests_finished),
                    static_cast<unsigned long long>(st.prompt_tokens),
                    static_cast<unsigned long long>(st.cached_prompt_tokens),
                    static_cast<unsigned long long>(st.generated_tokens), st.running, st.waiting,
                    st.kv_blocks_total - st.kv_blocks_free, st.kv_blocks_total);
      lines.push_back(line);
    }
    return lines;
  }

  Result<std::vector<std::string>> Models() override {
    std::vector<std::string> lines;
    for (size_t e = 0; e < stack_.engines.size(); ++e) {
      const Model* m = stack_.engines[e]->model();
      lines.push_back("engine " + std::to_string(e) + ": " +
                      (m ? m->info().path + " (" + m->info().arch + ", " + m->info().device + ")"
                         : std::string("remote")));
    }
    return lines;
  }

  std::string Banner() const override { return stack_.KvSummary() + "; run " + run_->id(); }

 private:
  // Only the session's own run is live in this process.
  Status Live(const std::string& run) const {
    if (run.empty() || run == run_->id()) return Status::Ok();
    return Status::NotFound("run " + run + " is not live in this session (braid runs " + run +
                            " shows what the store recorded of it)");
  }

  Stack& stack_;
  std::shared_ptr<rt::Run> run_;
  std::unique_ptr<lua::LuaState> state_;
  lua::Driver driver_;
  std::mutex mu_;
  TokenFn on_tokens_;
};

}  // namespace

Result<std::unique_ptr<ReplSession>> OpenLocalReplSession(Stack& stack, size_t lua_memory_bytes,
                                                          double lua_seconds,
                                                          const std::atomic<bool>* interrupt) {
  rt::RunOptions runo;
  runo.program = "repl";
  BRAID_ASSIGN_OR_RETURN(std::shared_ptr<rt::Run> run, stack.runtime->StartRun(runo));
  lua::DriverOptions d;
  d.limits.memory_bytes = lua_memory_bytes;
  d.limits.cpu_seconds = lua_seconds;
  d.interrupt = interrupt;
  d.script_dir = ".";
  d.log = [](std::string_view line) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  std::unique_ptr<lua::LuaState> state = lua::LuaState::Create(d.limits);
  if (!state) return Status::ResourceExhausted("cannot create a Lua state");
  return std::unique_ptr<ReplSession>(new LocalSession(stack, std::move(run), std::move(state), d));
}

}  // namespace braid::cli
