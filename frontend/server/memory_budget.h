// The server's memory budget: caps on the bytes live runs hold, per client
// and for the server as a whole (docs/http-api.md, "Memory"). A run's
// account takes from both as the run grows — what its submission is
// estimated to hold when accepted, its Lua heap, the values the runtime
// builds, its result — and gives everything back when the run ends.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/status.h"
#include "runtime/memory_account.h"

namespace braid::server {

class RunAccount;

class MemoryBudget : public std::enable_shared_from_this<MemoryBudget> {
 public:
  // 0: no cap.
  MemoryBudget(size_t global_bytes, size_t client_bytes)
      : global_cap_(global_bytes), client_cap_(client_bytes) {}

  // Whether `bytes` could ever fit one client's runs (else the request is
  // too large, 413, not a matter of waiting).
  bool CouldFit(size_t bytes) const;
  // A new account of `client`'s, holding nothing yet.
  std::shared_ptr<RunAccount> Open(const std::string& client);

  size_t held() const;
  size_t held_by(const std::string& client) const;
  size_t global_cap() const { return global_cap_; }
  size_t client_cap() const { return client_cap_; }

 private:
  friend class RunAccount;
  // ResourceExhausted naming the cap when `bytes` more would pass one.
  Status Take(const std::string& client, size_t bytes);
  void Give(const std::string& client, size_t bytes);

  const size_t global_cap_, client_cap_;
  mutable std::mutex mu_;
  size_t held_ = 0;
  std::map<std::string, size_t> by_client_;
};

// One run's draw on the budget; what it holds goes back at Close or when
// it is destroyed.
class RunAccount : public rt::MemoryAccount {
 public:
  RunAccount(std::shared_ptr<MemoryBudget> budget, std::string client)
      : budget_(std::move(budget)), client_(std::move(client)) {}
  ~RunAccount() override { Close(); }

  Status Take(size_t bytes) override;
  size_t held() const;
  // Gives back what the account holds (the run ended); what is taken later
  // is held again until the next Close.
  void Close();

 private:
  std::shared_ptr<MemoryBudget> budget_;
  const std::string client_;
  mutable std::mutex mu_;
  size_t held_ = 0;
};

// The account as a Lua state's LuaLimits::take_memory.
std::function<std::string(size_t)> TakeMemory(std::shared_ptr<RunAccount> account);

// "1.5 GB", "12 MB", "300 KB": a byte count for messages.
std::string Bytes(size_t n);

}  // namespace braid::server
