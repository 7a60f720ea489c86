// The fair program pool: FairQueue's rule on random operation sequences
// against its invariants, the order it serves clients in, and WorkPool on
// threads: one client's stuck jobs leave a thread for another's.
#include "server/work_pool.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>

namespace braid::server {
namespace {

// How long a wait for something that must happen may take before the test
// fails: only a bound on a hang, far beyond what a loaded machine needs.
constexpr auto kHang = std::chrono::seconds(60);

// Pops every job that may start now; returns the clients in order.
std::vector<std::string> PopAll(FairQueue& q) {
  std::vector<std::string> order;
  std::string client;
  std::function<void()> job;
  while (q.Pop(&client, &job)) {
    job();
    order.push_back(client);
  }
  return order;
}

TEST_CASE("FairQueue: clients take turns; each client's jobs keep their order") {
  FairQueue q(0);
  std::vector<std::string> ran;
  for (const char* name : {"a1", "a2", "a3"})
    q.Push("alice", [&ran, name] { ran.push_back(name); });
  for (const char* name : {"b1", "b2"}) q.Push("bob", [&ran, name] { ran.push_back(name); });
  q.Push("carol", [&ran] { ran.push_back("c1"); });
  // No job returns in between: each pop gives the client with the fewest
  // running, the one served least recently among equals.
  CHECK(PopAll(q) == std::vector<std::string>{"alice", "bob", "carol", "alice", "bob", "alice"});
  CHECK(ran == std::vector<std::string>{"a1", "b1", "c1", "a2", "b2", "a3"});
  CHECK(q.running() == 6);
  CHECK(q.running("alice") == 3);
}

TEST_CASE("FairQueue: a client at its cap waits; the others go on") {
  FairQueue q(2);
  for (int i = 0; i < 5; ++i) q.Push("alice", [] {});
  CHECK(PopAll(q) == std::vector<std::string>{"alice", "alice"});
  CHECK(q.queued() == 3);
  q.Push("bob", [] {});
  CHECK(PopAll(q) == std::vector<std::string>{"bob"});
  q.Done("alice");
  CHECK(PopAll(q) == std::vector<std::string>{"alice"});
  CHECK(q.Clear().size() == 2);
  CHECK(q.queued() == 0);
}

// Random pushes, pops and completions checked against the rule's
// invariants: the cap holds; nothing may start only when every client with
// jobs is at its cap; the client served has the fewest running among those
// that may start; each client's jobs start in the order they came, each
// exactly once.
TEST_CASE("FairQueue: random operations keep the rule's invariants") {
  for (int cap : {0, 1, 3}) {
    std::mt19937 rng(1234 + cap);
    FairQueue q(cap);
    const std::vector<std::string> names = {"a", "b", "c", "d"};
    std::map<std::string, int> pushed, started, running;
    std::map<std::string, std::deque<int>> waiting;  // each client's job numbers, in order
    std::set<int> seen;
    int next = 0;
    constexpr int kNone = 1 << 30;  // no client may start a job
    for (int step = 0; step < 20000; ++step) {
      const int op = static_cast<int>(rng() % 3);
      const std::string& who = names[rng() % names.size()];
      if (op == 0) {  // a job comes
        const int n = next++;
        q.Push(who, [&seen, n] { CHECK(seen.insert(n).second); });
        waiting[who].push_back(n);
        ++pushed[who];
      } else if (op == 1) {  // a thread is free
        auto may_start = [&](const std::string& c) {
          return !waiting[c].empty() && (cap <= 0 || running[c] < cap);
        };
        int fewest = kNone;
        for (const auto& c : names)
          if (may_start(c)) fewest = std::min(fewest, running[c]);
        std::string client;
        std::function<void()> job;
        const bool popped = q.Pop(&client, &job);
        CHECK(popped == (fewest != kNone));
        if (!popped) continue;
        CHECK(may_start(client));
        CHECK(running[client] == fewest);
        const int expected = waiting[client].front();
        waiting[client].pop_front();
        size_t before = seen.size();
        job();
        CHECK(seen.size() == before + 1);
        CHECK(seen.count(expected) == 1);  // the oldest of its client
        ++running[client];
        ++started[client];
        if (cap > 0) CHECK(running[client] <= cap);
      } else if (running[who] > 0) {  // one of who's jobs returns
        q.Done(who);
        --running[who];
      }
      int total = 0;
      size_t queued = 0;
      for (const auto& c : names) {
        total += running[c];
        queued += waiting[c].size();
        CHECK(q.running(c) == running[c]);
      }
      CHECK(q.running() == total);
      CHECK(q.queued() == queued);
    }
  }
}

// A gate jobs wait at until the test opens it.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

template <typename F>
bool WaitUntil(F done) {
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST_CASE("WorkPool: one client's stuck jobs leave threads for another client") {
  // 4 threads, at most 3 per client: alice's 10 stuck jobs hold 3.
  WorkPool pool(4, 100, 3);
  Gate gate;
  std::atomic<int> alice_done{0};
  for (int i = 0; i < 10; ++i)
    REQUIRE(pool.TrySubmit("alice", [&] {
      gate.Wait();
      ++alice_done;
    }));
  REQUIRE(WaitUntil([&] { return pool.running("alice") == 3; }));
  CHECK(pool.queued() == 7);
  // bob's jobs run one after the other on the thread left, while alice's
  // are still stuck.
  std::atomic<int> bob_done{0};
  for (int i = 0; i < 3; ++i) REQUIRE(pool.TrySubmit("bob", [&] { ++bob_done; }));
  CHECK(WaitUntil([&] { return bob_done == 3; }));
  CHECK(alice_done == 0);
  CHECK(pool.running("alice") == 3);
  gate.Open();
  CHECK(WaitUntil([&] { return alice_done == 10; }));
  CHECK(WaitUntil([&] { return pool.running() == 0; }));
}

TEST_CASE("WorkPool: without a cap one client may use every thread; the queue is bounded") {
  WorkPool pool(3, 2);
  Gate gate;
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {  // one at a time: the queue holds 2
    REQUIRE(pool.TrySubmit("", [&] {
      gate.Wait();
      ++done;
    }));
    REQUIRE(WaitUntil([&] { return pool.running() == i + 1; }));
  }
  CHECK(pool.TrySubmit("", [&] { ++done; }));
  CHECK(pool.TrySubmit("x", [&] { ++done; }));
  CHECK_FALSE(pool.HasRoom());
  CHECK_FALSE(pool.TrySubmit("y", [&] { ++done; }));  // 2 wait already
  gate.Open();
  CHECK(WaitUntil([&] { return done == 5; }));
}

TEST_CASE("WorkPool: Stop drops queued jobs and joins the running ones") {
  std::atomic<int> ran{0};
  Gate gate;
  {
    WorkPool pool(1, 10, 0);
    REQUIRE(pool.TrySubmit("a", [&] {
      gate.Wait();
      ++ran;
    }));
    REQUIRE(WaitUntil([&] { return pool.running() == 1; }));
    REQUIRE(pool.TrySubmit("a", [&] { ++ran; }));
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gate.Open();
    });
    pool.Stop();
    opener.join();
    CHECK_FALSE(pool.TrySubmit("a", [&] { ++ran; }));
  }
  CHECK(ran == 1);
}

}  // namespace
}  // namespace braid::server
