// PatternMatcher: Lua 5.4 patterns (reference manual §6.4.1) with a step
// budget, so that a pathological pattern can be stopped part way.
//
// Lua's own matcher runs inside one C call, where no count hook can fire: a
// backtracking pattern such as string.rep("a*", 30) .. "c" against
// string.rep("a", 30) .. "b" holds the thread for as long as it takes. This
// one counts its steps (one per recursive match attempt and one per subject
// character an expansion or balance scan looks at) and every
// kPatternCheckEvery steps asks a callback whether to go on; the sandbox
// answers with its instruction, time and interrupt limits.
//
// It depends on no Lua state: errors and the stop come back as a MatchStatus
// and a message, never as a longjmp, and the matcher holds nothing that needs
// destroying (fixed arrays only), so a Lua C function may keep one in its frame
// while Lua raises through it. The semantics, recursion bound and error
// messages are Lua 5.4's; the Lua glue (string.find, match, gmatch, gsub) is in
// lua_string_lib.cpp.
//
// Threading: a PatternMatcher belongs to one thread; it only reads the
// subject and pattern, which must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace braid::lua {

// Lua's LUA_MAXCAPTURES and MAXCCALLS (the bound on nested match attempts).
inline constexpr int kPatternMaxCaptures = 32;
inline constexpr int kPatternMaxDepth = 200;
// Steps between two calls of the step callback.
inline constexpr uint64_t kPatternCheckEvery = 4096;

// Asked every kPatternCheckEvery steps with the steps taken since the last
// call; returns true to stop the match (MatchStatus::kStopped).
struct PatternStepCallback {
  bool (*fn)(void* ctx, uint64_t steps) = nullptr;
  void* ctx = nullptr;
};

enum class MatchStatus {
  kNoMatch,  // the pattern does not match at that position
  kMatch,    // matched; end() and the captures say what
  kError,    // a malformed pattern or capture use: error() says which
  kStopped,  // the step callback asked to stop
};

// One capture after a match: a substring of the subject, or a position
// capture "()" (its value is start + 1, Lua's 1-based index).
struct PatternCapture {
  size_t start = 0;
  size_t len = 0;
  bool position = false;
};

class PatternMatcher {
 public:
  PatternMatcher(std::string_view subject, std::string_view pattern, PatternStepCallback cb = {});

  // Whether the pattern contains none of Lua's special characters
  // ("^$*+?.([%-"), so string.find may search it as plain text.
  static bool NoSpecials(std::string_view pattern);
  // Byte offset of the first occurrence of `needle` in `hay` at or after
  // `from`, or npos (an empty needle is found at `from`).
  static size_t FindPlain(std::string_view hay, std::string_view needle, size_t from);

  // Matches the pattern from byte `pattern_start` (1 after a '^' anchor the
  // caller skipped) against the subject at byte `at` (<= subject size).
  // Resets the captures and the recursion depth, not the step count.
  MatchStatus MatchAt(size_t at, size_t pattern_start = 0);

  // After kMatch: the end of the match (byte offset, exclusive) and the
  // captures. capture_count() is the number of captures the pattern closed
  // or opened (Lua's `level`).
  size_t end() const { return end_; }
  int capture_count() const { return level_; }

  // The value of capture `i` (0-based) of a match from `start` to end(), as
  // Lua's captures are pushed: with no captures in the pattern, capture 0
  // is the whole match. Returns false with error() set for an index the
  // pattern lacks ("invalid capture index %N") or a capture left open
  // ("unfinished capture").
  bool GetCapture(int i, size_t start, PatternCapture* out);

  // The message of the last kError or failed GetCapture.
  const char* error() const { return error_; }
  uint64_t steps() const { return steps_; }

 private:
  static constexpr ptrdiff_t kUnfinished = -1;
  static constexpr ptrdiff_t kPosition = -2;

  const char* Match(const char* s, const char* p);
  const char* ClassEnd(const char* p);
  bool SingleMatch(const char* s, const char* p, const char* ep) const;
  const char* MaxExpand(const char* s, const char* p, const char* ep);
  const char* MinExpand(const char* s, const char* p, const char* ep);
  const char* StartCapture(const char* s, const char* p, ptrdiff_t what);
  const char* EndCapture(const char* s, const char* p);
  const char* MatchBalance(const char* s, const char* p);
  const char* MatchBackReference(const char* s, int digit);
  // The pattern byte at p, or '\0' at or past its end (Lua's strings carry a
  // terminating zero that its matcher reads there; this reads the same).
  char At(const char* p) const { return p < p_end_ ? *p : '\0'; }
  // Counts one step; false once the match must stop (callback or error).
  bool Step();
  void Fail(const char* message);

  const char* src_init_;
  const char* src_end_;
  const char* p_init_;
  const char* p_end_;
  PatternStepCallback cb_;
  uint64_t steps_ = 0;
  int depth_ = 0;  // match attempts still allowed to nest
  int level_ = 0;
  bool aborted_ = false;
  bool stopped_ = false;
  size_t end_ = 0;
  struct Capture {
    const char* init;
    ptrdiff_t len;
  } capture_[kPatternMaxCaptures];
  const char* error_ = "";
  char error_buf_[64] = {0};
};

}  // namespace braid::lua
