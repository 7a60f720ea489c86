#include "engine/status.h"

#include <doctest/doctest.h>

namespace braid {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd value " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  BRAID_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST_CASE("Result carries a value or the first error") {
  CHECK(Quarter(8).value() == 2);
  Result<int> r = Quarter(6);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK(r.status().ToString() == "invalid argument: odd value 3");
  CHECK(r.status().WithContext("f.gguf").message() == "f.gguf: odd value 3");
}

}  // namespace
}  // namespace braid
