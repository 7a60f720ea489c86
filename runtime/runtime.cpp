// Runtime: engines, the optional store and the dispatcher thread; StartRun
// creates or resumes runs.
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

class RuntimeImpl final : public Runtime {
 public:
  explicit RuntimeImpl(std::shared_ptr<RuntimeContext> ctx)
      : ctx_(ctx), dispatcher_(std::make_unique<Dispatcher>(std::move(ctx))) {}
  ~RuntimeImpl() override { dispatcher_.reset(); }

  Result<std::shared_ptr<Run>> StartRun(const RunOptions& options) override {
    std::string id;
    bool resumed = false;
    if (!options.resume_id.empty()) {
      if (!ctx_->store)
        return Status::InvalidArgument("cannot resume run '" + options.resume_id + "': the runtime has no store (db_path)");
      auto run = ctx_->store->GetRun(options.resume_id);
      if (!run.ok()) return run.status();
      id = options.resume_id;
      resumed = true;
      (void)ctx_->store->AppendEvent(id, "run_resumed", "{}");
    } else {
      id = NewRunId();
      if (ctx_->store) {
        StoredRun r;
        r.id = id;
        r.program = options.program;
        r.args = options.args;
        r.status = "running";
        r.created_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        BRAID_RETURN_IF_ERROR(ctx_->store->CreateRun(r));
        (void)ctx_->store->AppendEvent(id, "run_started", "{}");
      }
    }
    auto run = std::make_shared<RunImpl>(ctx_, id, options, resumed);
    dispatcher_->Add(run);
    return std::shared_ptr<Run>(run);
  }

 private:
  std::shared_ptr<RuntimeContext> ctx_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::Open(const RuntimeOptions& options) {
  if (options.engines.empty()) return Status::InvalidArgument("the runtime needs at least one engine");
  if (!options.engine_names.empty() && options.engine_names.size() != options.engines.size())
    return Status::InvalidArgument("engine_names has " + std::to_string(options.engine_names.size()) +
                                   " names for " + std::to_string(options.engines.size()) + " engines");
  auto ctx = std::make_shared<RuntimeContext>();
  for (size_t i = 0; i < options.engines.size(); ++i) {
    if (!options.engines[i]) return Status::InvalidArgument("engine " + std::to_string(i) + " is null");
    EngineSlot slot;
    slot.engine = options.engines[i];
    slot.name = options.engine_names.empty() ? "engine" + std::to_string(i) : options.engine_names[i];
    ctx->engines.push_back(std::move(slot));
  }
  if (options.store) {
    ctx->store = options.store;
  } else if (!options.db_path.empty()) {
    BRAID_ASSIGN_OR_RETURN(auto store, RunStore::Open(options.db_path));
    ctx->store = std::shared_ptr<RunStore>(std::move(store));
  }
  return std::unique_ptr<Runtime>(std::make_unique<RuntimeImpl>(std::move(ctx)));
}

}  // namespace braid::rt
