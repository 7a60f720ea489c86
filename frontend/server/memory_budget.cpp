#include "server/memory_budget.h"

#include <algorithm>
#include <cstdio>

namespace braid::server {

std::string Bytes(size_t n) {
  char buf[32];
  if (n >= (size_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(n) / (1 << 30));
  } else if (n >= (size_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%zu MB", n >> 20);
  } else {
    std::snprintf(buf, sizeof buf, "%zu KB", (n + 1023) >> 10);
  }
  return buf;
}

Status RunAccount::Take(size_t bytes) {
  Status s = budget_->Take(client_, bytes);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ += bytes;
  }
  return s;
}

size_t RunAccount::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

void RunAccount::Close() {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(bytes, held_);
  }
  if (bytes) budget_->Give(client_, bytes);
}

std::function<std::string(size_t)> TakeMemory(std::shared_ptr<RunAccount> account) {
  return [account = std::move(account)](size_t bytes) {
    Status s = account->Take(bytes);
    return s.ok() ? std::string() : s.message();
  };
}

bool MemoryBudget::CouldFit(size_t bytes) const {
  return (!client_cap_ || bytes <= client_cap_) && (!global_cap_ || bytes <= global_cap_);
}

std::shared_ptr<RunAccount> MemoryBudget::Open(const std::string& client) {
  return std::make_shared<RunAccount>(shared_from_this(), client);
}

Status MemoryBudget::Take(const std::string& client, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t& mine = by_client_[client];
  if (client_cap_ && mine + bytes > client_cap_) {
    const std::string who =
        client.empty() ? "runs of no client hold " : "client '" + client + "' holds ";
    return Status::ResourceExhausted(
        "memory budget: " + who + Bytes(mine) + " in live runs and needs " + Bytes(bytes) +
        " more, over the per-client cap of " + Bytes(client_cap_) + " (--client-memory-mb)");
  }
  if (global_cap_ && held_ + bytes > global_cap_)
    return Status::ResourceExhausted(
        "memory budget: live runs hold " + Bytes(held_) + " and need " + Bytes(bytes) +
        " more, over the server's cap of " + Bytes(global_cap_) + " (--memory-mb)");
  mine += bytes;
  held_ += bytes;
  return Status::Ok();
}

void MemoryBudget::Give(const std::string& client, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_client_.find(client);
  if (it == by_client_.end()) return;
  it->second -= std::min(it->second, bytes);
  held_ -= std::min(held_, bytes);
  if (it->second == 0) by_client_.erase(it);
}

size_t MemoryBudget::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

size_t MemoryBudget::held_by(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_client_.find(client);
  return it == by_client_.end() ? 0 : it->second;
}

}  // namespace braid::server
