#include "request/delta_queue.h"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace braid {
namespace {

Delta TextDelta(const std::string& text) {
  Delta d;
  d.text = text;
  return d;
}

TEST_CASE("a consumer sees a producer's deltas in order, then the final one, then nothing") {
  DeltaQueue q;
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) q.Push(TextDelta(std::to_string(i)));
    Delta last;
    last.finish_reason = "stop";
    Completion c;
    c.text = "all";
    c.finish_reason = "stop";
    q.Finish(last, c);
  });
  std::vector<std::string> seen;
  bool final_seen = false;
  while (auto d = q.Next(-1)) {
    CHECK_FALSE(final_seen);
    if (d->finished) {
      final_seen = true;
      CHECK(d->finish_reason == "stop");
    } else {
      seen.push_back(d->text);
    }
  }
  producer.join();
  REQUIRE(final_seen);
  REQUIRE(seen.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(seen[static_cast<size_t>(i)] == std::to_string(i));
  CHECK(q.finished());
  CHECK(q.Wait().text == "all");
  // Closed: the final delta was taken, so Next returns at once, even forever.
  CHECK_FALSE(q.Next(-1).has_value());
}

TEST_CASE("Next times out with nothing queued; Wait blocks until Finish") {
  DeltaQueue q;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(q.Next(20).has_value());
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(15));
  CHECK_FALSE(q.finished());
  Completion got;
  std::thread waiter([&] { got = q.Wait(); });
  q.Push(TextDelta("a"));
  Completion c;
  c.finish_reason = "cancelled";
  q.Finish(Delta(), c);
  waiter.join();
  CHECK(got.finish_reason == "cancelled");
  // The deltas stay queued after Finish until taken.
  CHECK(q.Next(0)->text == "a");
  CHECK(q.Next(0)->finished);
  CHECK_FALSE(q.Next(0).has_value());
}

TEST_CASE("a finished queue with its deltas taken by the callback only still closes Next") {
  std::vector<std::string> via_callback;
  Completion in_callback;
  DeltaQueue* self = nullptr;
  DeltaQueue q([&](const Delta& d) {
    via_callback.push_back(d.finished ? "<end>" : d.text);
    // The final delta's callback may wait on the request: it is done.
    if (d.finished) in_callback = self->Wait();
  });
  self = &q;
  q.Push(TextDelta("x"));
  q.Push(TextDelta("y"));
  Completion c;
  c.text = "xy";
  q.Finish(Delta(), c);
  CHECK(via_callback == std::vector<std::string>{"x", "y", "<end>"});
  CHECK(in_callback.text == "xy");
  CHECK(q.Next(-1)->text == "x");
  CHECK(q.Next(-1)->text == "y");
  CHECK(q.Next(-1)->finished);
  CHECK_FALSE(q.Next(-1).has_value());
}

}  // namespace
}  // namespace braid
