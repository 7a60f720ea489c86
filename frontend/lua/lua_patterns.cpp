#include "lua/lua_patterns.h"

#include <cctype>
#include <cstdio>
#include <cstring>

namespace braid::lua {
namespace {

// Lua's character classes (§6.4.1), on the C library's <ctype.h> as Lua
// does: "%a" letters, "%c" control characters, "%d" digits, "%g" printable
// characters except space, "%l" lower case, "%p" punctuation, "%s" space,
// "%u" upper case, "%w" alphanumerics, "%x" hexadecimal digits and "%z" the
// zero byte (deprecated but still accepted by Lua 5.4); an upper-case letter
// is the complement. Any other character after '%' stands for itself.
bool MatchClass(int c, int cl) {
  bool res;
  switch (std::tolower(cl)) {
    case 'a':
      res = std::isalpha(c);
      break;
    case 'c':
      res = std::iscntrl(c);
      break;
    case 'd':
      res = std::isdigit(c);
      break;
    case 'g':
      res = std::isgraph(c);
      break;
    case 'l':
      res = std::islower(c);
      break;
    case 'p':
      res = std::ispunct(c);
      break;
    case 's':
      res = std::isspace(c);
      break;
    case 'u':
      res = std::isupper(c);
      break;
    case 'w':
      res = std::isalnum(c);
      break;
    case 'x':
      res = std::isxdigit(c);
      break;
    case 'z':
      res = (c == 0);
      break;
    default:
      return cl == c;
  }
  return std::isupper(cl) ? !res : res;
}

int U(char c) { return static_cast<unsigned char>(c); }

// A set "[...]" from p (its '[') to ec (its closing ']'): single characters,
// ranges x-y, %-classes, and a leading '^' for the complement.
bool MatchBracketClass(int c, const char* p, const char* ec) {
  bool sig = true;
  if (p[1] == '^') {
    sig = false;
    ++p;  // the '^'
  }
  while (++p < ec) {
    if (*p == '%') {
      ++p;
      if (MatchClass(c, U(*p))) return sig;
    } else if (p[1] == '-' && p + 2 < ec) {
      p += 2;
      if (U(p[-2]) <= c && c <= U(*p)) return sig;
    } else if (U(*p) == c) {
      return sig;
    }
  }
  return !sig;
}

}  // namespace

PatternMatcher::PatternMatcher(std::string_view subject, std::string_view pattern,
                               PatternStepCallback cb)
    : src_init_(subject.data()),
      src_end_(subject.data() + subject.size()),
      p_init_(pattern.data()),
      p_end_(pattern.data() + pattern.size()),
      cb_(cb) {}

bool PatternMatcher::NoSpecials(std::string_view pattern) {
  return pattern.find_first_of(std::string_view("^$*+?.([%-", 10)) == std::string_view::npos;
}

size_t PatternMatcher::FindPlain(std::string_view hay, std::string_view needle, size_t from) {
  if (from > hay.size()) return std::string_view::npos;
  return hay.find(needle, from);
}

MatchStatus PatternMatcher::MatchAt(size_t at, size_t pattern_start) {
  level_ = 0;
  depth_ = kPatternMaxDepth;
  aborted_ = stopped_ = false;
  const char* e = Match(src_init_ + at, p_init_ + pattern_start);
  if (stopped_) return MatchStatus::kStopped;
  if (aborted_) return MatchStatus::kError;
  if (!e) return MatchStatus::kNoMatch;
  end_ = static_cast<size_t>(e - src_init_);
  return MatchStatus::kMatch;
}

bool PatternMatcher::GetCapture(int i, size_t start, PatternCapture* out) {
  if (i >= level_) {
    if (i != 0) {
      std::snprintf(error_buf_, sizeof error_buf_, "invalid capture index %%%d", i + 1);
      error_ = error_buf_;
      return false;
    }
    *out = {start, end_ - start, false};  // no captures: the whole match
    return true;
  }
  const Capture& c = capture_[i];
  if (c.len == kUnfinished) {
    error_ = "unfinished capture";
    return false;
  }
  size_t init = static_cast<size_t>(c.init - src_init_);
  if (c.len == kPosition) {
    *out = {init, 0, true};
  } else {
    *out = {init, static_cast<size_t>(c.len), false};
  }
  return true;
}

bool PatternMatcher::Step() {
  if (aborted_) return false;
  if ((++steps_ & (kPatternCheckEvery - 1)) == 0 && cb_.fn && cb_.fn(cb_.ctx, kPatternCheckEvery)) {
    stopped_ = aborted_ = true;
    return false;
  }
  return true;
}

void PatternMatcher::Fail(const char* message) {
  if (aborted_) return;
  error_ = message;
  aborted_ = true;
}

// The end of the single-character class at p: "%x", "[set]" or one
// character. nullptr (with an error) when the pattern ends inside it.
const char* PatternMatcher::ClassEnd(const char* p) {
  char c = *p++;
  if (c == '%') {
    if (p == p_end_) {
      Fail("malformed pattern (ends with '%')");
      return nullptr;
    }
    return p + 1;
  }
  if (c == '[') {
    if (At(p) == '^') ++p;
    // The first character of a set is taken as is, so "[]]" is the set of ']'.
    do {
      if (p == p_end_) {
        Fail("malformed pattern (missing ']')");
        return nullptr;
      }
      if (*p++ == '%' && p < p_end_) ++p;  // an escape such as "%]"
    } while (At(p) != ']');
    return p + 1;
  }
  return p;
}

// Whether the subject character at s is in the class from p to ep.
bool PatternMatcher::SingleMatch(const char* s, const char* p, const char* ep) const {
  if (s >= src_end_) return false;
  int c = U(*s);
  switch (*p) {
    case '.':
      return true;
    case '%':
      return MatchClass(c, U(p[1]));
    case '[':
      return MatchBracketClass(c, p, ep - 1);
    default:
      return U(*p) == c;
  }
}

// The rest of the pattern from p, matched at s: the end of the match, or
// nullptr when it does not match (or the match was aborted). Each call is one
// step and one level of nesting; plain characters loop without nesting.
const char* PatternMatcher::Match(const char* s, const char* p) {
  if (!Step()) return nullptr;
  if (depth_-- == 0) {
    Fail("pattern too complex");
    return nullptr;
  }
  const char* result = nullptr;
  for (;;) {
    if (p == p_end_) {
      result = s;
      break;
    }
    bool single = false;  // a single-character class, maybe quantified
    switch (*p) {
      case '(':
        result = At(p + 1) == ')' ? StartCapture(s, p + 2, kPosition)
                                  : StartCapture(s, p + 1, kUnfinished);
        break;
      case ')':
        result = EndCapture(s, p + 1);
        break;
      case '$':
        if (p + 1 == p_end_) {
          result = s == src_end_ ? s : nullptr;
        } else {
          single = true;  // a '$' elsewhere is a plain character
        }
        break;
      case '%': {
        char next = At(p + 1);
        if (next == 'b') {
          s = MatchBalance(s, p + 2);
          if (s) {
            p += 4;
            continue;
          }
        } else if (next == 'f') {
          p += 2;
          if (At(p) != '[') {
            Fail("missing '[' after '%f' in pattern");
            break;
          }
          const char* ep = ClassEnd(p);
          if (!ep) break;
          int prev = s == src_init_ ? 0 : U(s[-1]);
          int cur = s < src_end_ ? U(*s) : 0;
          if (!MatchBracketClass(prev, p, ep - 1) && MatchBracketClass(cur, p, ep - 1)) {
            p = ep;
            continue;
          }
        } else if (next >= '0' && next <= '9') {
          s = MatchBackReference(s, next);
          if (s) {
            p += 2;
            continue;
          }
        } else {
          single = true;
        }
        break;
      }
      default:
        single = true;
        break;
    }
    if (!single) break;
    const char* ep = ClassEnd(p);
    if (!ep) break;
    char q = At(ep);
    if (!SingleMatch(s, p, ep)) {
      if (q == '*' || q == '?' || q == '-') {  // these accept zero repetitions
        p = ep + 1;
        continue;
      }
      break;  // result stays nullptr
    }
    if (q == '?') {
      result = Match(s + 1, ep + 1);
      if (result || aborted_) break;
      p = ep + 1;
      continue;
    }
    if (q == '+') {
      result = MaxExpand(s + 1, p, ep);
    } else if (q == '*') {
      result = MaxExpand(s, p, ep);
    } else if (q == '-') {
      result = MinExpand(s, p, ep);
    } else {
      ++s;
      p = ep;
      continue;
    }
    break;
  }
  ++depth_;
  return aborted_ ? nullptr : result;
}

// "x*" (and "x+" after its first x): the longest run first, then shorter.
const char* PatternMatcher::MaxExpand(const char* s, const char* p, const char* ep) {
  ptrdiff_t i = 0;
  while (SingleMatch(s + i, p, ep)) {
    if (!Step()) return nullptr;
    ++i;
  }
  for (; i >= 0; --i) {
    const char* r = Match(s + i, ep + 1);
    if (r || aborted_) return r;
  }
  return nullptr;
}

// "x-": the shortest run first, then one more x at a time.
const char* PatternMatcher::MinExpand(const char* s, const char* p, const char* ep) {
  for (;;) {
    const char* r = Match(s, ep + 1);
    if (r || aborted_) return r;
    if (!SingleMatch(s, p, ep)) return nullptr;
    ++s;
  }
}

const char* PatternMatcher::StartCapture(const char* s, const char* p, ptrdiff_t what) {
  if (level_ >= kPatternMaxCaptures) {
    Fail("too many captures");
    return nullptr;
  }
  capture_[level_] = {s, what};
  ++level_;
  const char* r = Match(s, p);
  if (!r) --level_;  // undo the capture
  return r;
}

// ')' closes the innermost capture still open.
const char* PatternMatcher::EndCapture(const char* s, const char* p) {
  int l = level_ - 1;
  while (l >= 0 && capture_[l].len != kUnfinished) --l;
  if (l < 0) {
    Fail("invalid pattern capture");
    return nullptr;
  }
  capture_[l].len = s - capture_[l].init;
  const char* r = Match(s, p);
  if (!r) capture_[l].len = kUnfinished;  // undo the close
  return r;
}

// "%bxy" with p at x: from an x at s to its balancing y.
const char* PatternMatcher::MatchBalance(const char* s, const char* p) {
  if (p >= p_end_ - 1) {
    Fail("malformed pattern (missing arguments to '%b')");
    return nullptr;
  }
  if (s >= src_end_ || *s != *p) return nullptr;
  char open = p[0], close = p[1];
  int depth = 1;
  while (++s < src_end_) {
    if (!Step()) return nullptr;
    if (*s == close) {
      if (--depth == 0) return s + 1;
    } else if (*s == open) {
      ++depth;
    }
  }
  return nullptr;
}

// "%1".."%9": the text of a closed capture again. A position capture has no
// text and never matches (as in Lua, where its length reads as huge).
const char* PatternMatcher::MatchBackReference(const char* s, int digit) {
  int l = digit - '1';
  if (l < 0 || l >= level_ || capture_[l].len == kUnfinished) {
    std::snprintf(error_buf_, sizeof error_buf_, "invalid capture index %%%d", l + 1);
    Fail(error_buf_);
    return nullptr;
  }
  if (capture_[l].len == kPosition) return nullptr;
  size_t len = static_cast<size_t>(capture_[l].len);
  if (static_cast<size_t>(src_end_ - s) >= len && std::memcmp(capture_[l].init, s, len) == 0)
    return s + len;
  return nullptr;
}

}  // namespace braid::lua
