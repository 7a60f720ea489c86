// Runtime: engines, the optional store and the dispatcher thread; StartRun
// creates or resumes runs.
#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "run_impl.h"
#include "store/run_store.h"

namespace braid::rt {
namespace {

std::string NewRunId() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%06llx", static_cast<unsigned long long>(rng() & 0xffffff));
  return std::string("run-") + stamp + "-" + suffix;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string ArgList(const std::vector<std::string>& args) {
  std::string out = "[";
  for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + Quote(args[i]);
  return out + "]";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Whether `options` may resume the stored run: the same program and the same
// arguments, else the calls of one program would be recorded into another's
// run. Returns a warning (not an error) when only the source changed: fixing a
// script and resuming it is what resume is for, and calls whose key still
// matches replay their record.
Result<std::string> CheckResume(const StoredRun& stored, const RunOptions& options) {
  const std::string head = "cannot resume run " + Quote(stored.id) + ": ";
  // Runs recorded before schema version 2 have no hash, and their program is
  // the path as typed then (relative to an unknown directory): only the
  // arguments can be compared.
  const bool legacy = stored.program_hash.empty();
  if (!legacy && stored.program != options.program)
    return Status::InvalidArgument(
        head + "it ran program " + Quote(stored.program) + " (source " + stored.program_hash +
        "), not " + Quote(options.program) +
        (options.program_hash.empty() ? "" : " (source " + options.program_hash + ")"));
  if (stored.args != options.args)
    return Status::InvalidArgument(head + "it ran with arguments " + ArgList(stored.args) +
                                   ", not " + ArgList(options.args));
  if (!legacy && !options.program_hash.empty() && stored.program_hash != options.program_hash)
    return "program " + Quote(options.program) + " changed since run " + Quote(stored.id) +
           " was recorded (source " + stored.program_hash + ", now " + options.program_hash +
           "); calls whose function and inputs are unchanged replay their recorded outputs";
  return std::string();
}

class RuntimeImpl final : public Runtime {
 public:
  explicit RuntimeImpl(std::shared_ptr<RuntimeContext> ctx)
      : ctx_(ctx), dispatcher_(std::make_unique<Dispatcher>(std::move(ctx))) {}
  ~RuntimeImpl() override { dispatcher_.reset(); }

  Result<std::shared_ptr<Run>> StartRun(const RunOptions& options) override {
    std::string id;
    bool resumed = false;
    std::string warning;
    if (!options.resume_id.empty()) {
      if (!ctx_->store)
        return Status::InvalidArgument("cannot resume run '" + options.resume_id +
                                       "': the runtime has no store (db_path)");
      auto run = ctx_->store->GetRun(options.resume_id);
      if (!run.ok()) return run.status();
      BRAID_ASSIGN_OR_RETURN(warning, CheckResume(*run, options));
      id = options.resume_id;
      resumed = true;
      (void)ctx_->store->AppendEvent(id, "run_resumed", "{}");
      if (!warning.empty())
        (void)ctx_->store->AppendEvent(id, "program_changed", JsonString(warning));
    } else {
      id = NewRunId();
      if (ctx_->store) {
        StoredRun r;
        r.id = id;
        r.program = options.program;
        r.args = options.args;
        r.program_hash = options.program_hash;
        r.owner = options.client;
        r.status = "running";
        r.created_unix =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        BRAID_RETURN_IF_ERROR(ctx_->store->CreateRun(r));
        (void)ctx_->store->AppendEvent(id, "run_started", "{}");
      }
    }
    auto run = std::make_shared<RunImpl>(ctx_, id, options, resumed, std::move(warning));
    dispatcher_->Add(run);
    {
      std::lock_guard<std::mutex> lock(live_mu_);
      std::erase_if(live_, [](const auto& kv) { return kv.second.expired(); });
      live_[id] = run;
    }
    return std::shared_ptr<Run>(run);
  }

  Result<std::vector<RunRecord>> StoredRuns(int limit) override {
    if (!ctx_->store) return Status::Unsupported("the runtime has no run store");
    BRAID_ASSIGN_OR_RETURN(std::vector<StoredRun> runs, ctx_->store->ListRuns(limit));
    return Records(runs);
  }

  Result<std::vector<RunRecord>> StoredRunsOf(const std::string& owner, int limit) override {
    if (!ctx_->store) return Status::Unsupported("the runtime has no run store");
    BRAID_ASSIGN_OR_RETURN(std::vector<StoredRun> runs, ctx_->store->ListRunsOf(owner, limit));
    return Records(runs);
  }

  Result<std::optional<std::string>> StoredValue(const std::string& run_id,
                                                 const std::string& key) override {
    if (!ctx_->store) return Status::Unsupported("the runtime has no run store");
    return ctx_->store->FindValue(run_id, key);
  }

  std::shared_ptr<const EnginePlacement> placement() const override { return ctx_->placement; }

 private:
  // The stored runs' summaries; one recorded as running reads "running"
  // while it is live here, else "interrupted".
  Result<std::vector<RunRecord>> Records(const std::vector<StoredRun>& runs) {
    std::vector<RunRecord> out;
    std::lock_guard<std::mutex> lock(live_mu_);
    for (const StoredRun& run : runs) {
      BRAID_ASSIGN_OR_RETURN(RunRecord r, StoredRunRecord(*ctx_->store, run));
      auto live = live_.find(r.id);
      if (r.state == "interrupted" && live != live_.end() && !live->second.expired())
        r.state = "running";
      out.push_back(std::move(r));
    }
    return out;
  }

  std::mutex live_mu_;
  std::map<std::string, std::weak_ptr<RunImpl>> live_;
  std::shared_ptr<RuntimeContext> ctx_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

}  // namespace

std::string ProgramHash(std::string_view source) {
  uint64_t h = 14695981039346656037ull;  // the FNV-1a 64 offset basis
  for (unsigned char c : source) h = (h ^ c) * 1099511628211ull;
  char out[64];
  std::snprintf(out, sizeof out, "fnv1a64:%016llx:%zu", static_cast<unsigned long long>(h),
                source.size());
  return out;
}

Result<std::unique_ptr<Runtime>> Runtime::Open(const RuntimeOptions& options) {
  if (options.engines.empty())
    return Status::InvalidArgument("the runtime needs at least one engine");
  if (!options.engine_names.empty() && options.engine_names.size() != options.engines.size())
    return Status::InvalidArgument("engine_names has " +
                                   std::to_string(options.engine_names.size()) + " names for " +
                                   std::to_string(options.engines.size()) + " engines");
  for (size_t i = 0; i < options.engines.size(); ++i)
    if (!options.engines[i])
      return Status::InvalidArgument("engine " + std::to_string(i) + " is null");
  auto ctx = std::make_shared<RuntimeContext>();
  ctx->placement = std::make_shared<EnginePlacement>(
      PlacementEngines(options.engines, options.engine_names), options.placement);
  ctx->retention = options.retention;
  if (options.retention.pin || options.retention.expect)
    ctx->gaps =
        std::make_shared<GapModel>(options.retention.first_ttl_ms, options.retention.max_ttl_ms);
  ctx->tokenizer = options.tokenizer;
  if (!ctx->tokenizer) ctx->tokenizer = options.engines[0]->model();
  if (!ctx->tokenizer)
    return Status::InvalidArgument(
        "the runtime needs a tokenizer: RuntimeOptions::tokenizer, or a first engine that runs "
        "its model in this process");
  if (options.store) {
    ctx->store = options.store;
  } else if (!options.db_path.empty()) {
    BRAID_ASSIGN_OR_RETURN(auto store, RunStore::Open(options.db_path));
    ctx->store = std::shared_ptr<RunStore>(std::move(store));
  }
  return std::unique_ptr<Runtime>(std::make_unique<RuntimeImpl>(std::move(ctx)));
}

}  // namespace braid::rt
