// Pattern -> syntax tree -> Thompson NFA over bytes -> DFA (subset
// construction), then the states that cannot reach a match are pruned to
// kDead.
//
// Patterns come from templates, i.e. from outside, so every stage is bounded
// and answers an error instead of exhausting the stack, memory or time: the
// pattern's length, the nesting of groups and repeats (the parser and the NFA
// builder recurse once per level), the sizes of the NFA and of the DFA, and the
// work and memory of the subset construction. The syntax tree lives in one
// vector with children as indices, so freeing it never recurses.
#include "exec/regex_dfa.h"

#include <algorithm>
#include <bitset>
#include <map>

namespace braid::rt {
namespace {

constexpr size_t kMaxPatternBytes = 64 * 1024;
// Groups and repeats inside one another (Rust's regex-syntax has the same
// default): the parser recurses about three frames per group and the NFA
// builder up to three per level, a few thousand small frames at most.
constexpr int kMaxNesting = 250;
constexpr int kMaxNfaStates = 50000;
constexpr int kMaxDfaStates = 10000;
// NFA states held across all DFA states (4 bytes each): 8 MB.
constexpr size_t kMaxSubsetEntries = 2'000'000;
constexpr int kMaxRepeat = 1000;

using ByteSet = std::bitset<256>;

// The syntax tree, flat: a node names its children by index into `nodes`.
struct Ast {
  enum class Kind { kEmpty, kSet, kSeq, kAlt, kRepeat };
  struct Node {
    Kind kind = Kind::kEmpty;
    ByteSet set;
    std::vector<int> kids;
    int min = 0, max = -1;  // kRepeat; max -1 = unbounded
    int nesting = 0;        // groups and repeats on the deepest path from here down
    size_t at = 0;          // pattern offset where the node starts, for errors
  };
  std::vector<Node> nodes;

  Node& operator[](int i) { return nodes[static_cast<size_t>(i)]; }
  const Node& operator[](int i) const { return nodes[static_cast<size_t>(i)]; }
  int Add(Kind k, size_t at) {
    nodes.emplace_back();
    nodes.back().kind = k;
    nodes.back().at = at;
    return static_cast<int>(nodes.size()) - 1;
  }
  int Set(const ByteSet& s, size_t at) {
    const int i = Add(Kind::kSet, at);
    (*this)[i].set = s;
    return i;
  }
  int Range(int lo, int hi, size_t at) {
    ByteSet s;
    for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
    return Set(s, at);
  }
  void AddKid(int parent, int kid) {
    Node& p = (*this)[parent];
    p.kids.push_back(kid);
    p.nesting = std::max(p.nesting, (*this)[kid].nesting);
  }
  // Every multi-byte UTF-8 sequence (loosely: lead byte and continuation
  // bytes) as three more alternatives of `alt`.
  void AddMultibyte(int alt, size_t at) {
    const int two = Add(Kind::kSeq, at);
    AddKid(two, Range(0xC2, 0xDF, at));
    AddKid(two, Range(0x80, 0xBF, at));
    const int three = Add(Kind::kSeq, at);
    AddKid(three, Range(0xE0, 0xEF, at));
    for (int i = 0; i < 2; ++i) AddKid(three, Range(0x80, 0xBF, at));
    const int four = Add(Kind::kSeq, at);
    AddKid(four, Range(0xF0, 0xF4, at));
    for (int i = 0; i < 3; ++i) AddKid(four, Range(0x80, 0xBF, at));
    AddKid(alt, two);
    AddKid(alt, three);
    AddKid(alt, four);
  }
};
using Kind = Ast::Kind;

ByteSet ClassOf(char c) {
  ByteSet s;
  auto range = [&](int lo, int hi) {
    for (int x = lo; x <= hi; ++x) s.set(static_cast<size_t>(x));
  };
  switch (c) {
    case 'd':
    case 'D':
      range('0', '9');
      break;
    case 'w':
    case 'W':
      range('0', '9');
      range('a', 'z');
      range('A', 'Z');
      s.set('_');
      break;
    case 's':
    case 'S':
      for (char x : std::string(" \t\n\r\f\v")) s.set(static_cast<uint8_t>(x));
      break;
    default:
      break;
  }
  if (c == 'D' || c == 'W' || c == 'S') {
    ByteSet ascii;
    for (int x = 0; x < 128; ++x) ascii.set(static_cast<size_t>(x));
    s = ascii & ~s;
  }
  return s;
}

ByteSet Ascii() {
  ByteSet s;
  for (int x = 0; x < 128; ++x) s.set(static_cast<size_t>(x));
  return s;
}

// Recursive descent; each function returns the index of the node it built.
class Parser {
 public:
  Parser(std::string_view p, Ast* ast) : p_(p), ast_(*ast) {}

  Result<int> ParseAll() {
    if (p_.size() > kMaxPatternBytes) {
      pos_ = kMaxPatternBytes;
      return Error("pattern longer than " + std::to_string(kMaxPatternBytes) + " bytes");
    }
    if (!p_.empty() && p_.front() == '^') pos_ = 1;
    if (p_.size() > pos_ && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\'))
      end_ = p_.size() - 1;
    else
      end_ = p_.size();
    BRAID_ASSIGN_OR_RETURN(int a, ParseAlt());
    if (pos_ < end_) return Error("unbalanced ')'");
    return a;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("regex: " + what + " at " + std::to_string(pos_));
  }
  Status TooDeep() const {
    return Error("groups and repeats nested deeper than " + std::to_string(kMaxNesting));
  }
  bool AtEnd() const { return pos_ >= end_; }
  char Peek() const { return p_[pos_]; }

  Result<int> ParseAlt() {
    const size_t at = pos_;
    BRAID_ASSIGN_OR_RETURN(int first, ParseSeq());
    if (AtEnd() || Peek() != '|') return first;
    const int alt = ast_.Add(Kind::kAlt, at);
    ast_.AddKid(alt, first);
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      BRAID_ASSIGN_OR_RETURN(int next, ParseSeq());
      ast_.AddKid(alt, next);
    }
    return alt;
  }

  Result<int> ParseSeq() {
    const int seq = ast_.Add(Kind::kSeq, pos_);
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      BRAID_ASSIGN_OR_RETURN(int atom, ParseAtom());
      while (!AtEnd()) {
        int lo = 0, hi = 0;
        const size_t at = pos_;
        const char c = Peek();
        if (c == '*') {
          lo = 0;
          hi = -1;
          ++pos_;
        } else if (c == '+') {
          lo = 1;
          hi = -1;
          ++pos_;
        } else if (c == '?') {
          lo = 0;
          hi = 1;
          ++pos_;
        } else if (c == '{') {
          size_t save = pos_;
          if (!ParseBraces(&lo, &hi)) {
            pos_ = save;
            break;
          }
          if (hi != -1 && hi < lo)
            return Error("bad repeat {" + std::to_string(lo) + "," + std::to_string(hi) + "}");
          if (lo > kMaxRepeat || hi > kMaxRepeat)
            return Error("repeat count above " + std::to_string(kMaxRepeat));
        } else {
          break;
        }
        // A repeat of a repeat (`a**`, `a{2}{3}`) nests one level deeper.
        if (ast_[atom].nesting >= kMaxNesting) {
          pos_ = at;
          return TooDeep();
        }
        const int rep = ast_.Add(Kind::kRepeat, ast_[atom].at);
        ast_[rep].min = lo;
        ast_[rep].max = hi;
        ast_.AddKid(rep, atom);
        ast_[rep].nesting += 1;
        atom = rep;
      }
      ast_.AddKid(seq, atom);
    }
    return seq;
  }

  // {m} {m,} {m,n}; false (nothing consumed) when not a quantifier.
  bool ParseBraces(int* lo, int* hi) {
    ++pos_;
    auto number = [&](int* out) {
      size_t start = pos_;
      long v = 0;
      while (!AtEnd() && Peek() >= '0' && Peek() <= '9' && v < 100000)
        v = v * 10 + (p_[pos_++] - '0');
      *out = static_cast<int>(v);
      return pos_ > start;
    };
    if (!number(lo)) return false;
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      *hi = *lo;
      return true;
    }
    if (AtEnd() || Peek() != ',') return false;
    ++pos_;
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      *hi = -1;
      return true;
    }
    if (!number(hi)) return false;
    if (AtEnd() || Peek() != '}') return false;
    ++pos_;
    return true;
  }

  Result<int> ParseAtom() {
    const size_t at = pos_;
    const char c = Peek();
    if (c == '(') {
      // Checked on the way in: the recursion below is what the bound protects.
      if (depth_ >= kMaxNesting) return TooDeep();
      ++pos_;
      ++depth_;
      if (p_.substr(pos_, 2) == "?:") pos_ += 2;
      BRAID_ASSIGN_OR_RETURN(int inner, ParseAlt());
      if (AtEnd() || Peek() != ')') return Error("missing ')'");
      // The group's node is fresh (built by this ParseAlt), so it can carry
      // the group's level.
      if (ast_[inner].nesting >= kMaxNesting) return TooDeep();
      ast_[inner].nesting += 1;
      ++pos_;
      --depth_;
      return inner;
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      const int alt = ast_.Add(Kind::kAlt, at);
      ByteSet s = Ascii();
      s.reset('\n');
      ast_.AddKid(alt, ast_.Set(s, at));
      ast_.AddMultibyte(alt, at);
      return alt;
    }
    if (c == '*' || c == '+' || c == '?')
      return Error(std::string("nothing to repeat before '") + c + "'");
    if (c == '\\') {
      ++pos_;
      if (AtEnd()) return Error("trailing '\\'");
      const char e = p_[pos_++];
      if (std::string("dDwWsS").find(e) != std::string::npos) {
        if (e == 'D' || e == 'W' || e == 'S') {
          const int alt = ast_.Add(Kind::kAlt, at);
          ast_.AddKid(alt, ast_.Set(ClassOf(e), at));
          ast_.AddMultibyte(alt, at);
          return alt;
        }
        return ast_.Set(ClassOf(e), at);
      }
      ByteSet s;
      s.set(EscapeByte(e));
      return ast_.Set(s, at);
    }
    // A literal; a multi-byte UTF-8 character is one atom.
    const auto lead = static_cast<uint8_t>(c);
    size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (len == 1) {
      ++pos_;
      ByteSet s;
      s.set(lead);
      return ast_.Set(s, at);
    }
    const int seq = ast_.Add(Kind::kSeq, at);
    for (size_t i = 0; i < len && !AtEnd(); ++i) {
      ByteSet s;
      s.set(static_cast<uint8_t>(p_[pos_++]));
      ast_.AddKid(seq, ast_.Set(s, at));
    }
    return seq;
  }

  static uint8_t EscapeByte(char e) {
    switch (e) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      default:
        return static_cast<uint8_t>(e);
    }
  }

  Result<int> ParseClass() {
    const size_t at = pos_;
    ++pos_;  // '['
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    ByteSet s;
    const int alt = ast_.Add(Kind::kAlt, at);
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      char c = Peek();
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      int lo;
      if (c == '\\') {
        ++pos_;
        if (AtEnd()) return Error("missing ']'");
        const char e = p_[pos_++];
        if (std::string("dDwWsS").find(e) != std::string::npos) {
          s |= ClassOf(e);
          continue;
        }
        lo = EscapeByte(e);
      } else if (static_cast<uint8_t>(c) >= 0x80) {
        // A non-ASCII character in a class: one alternative of its bytes.
        const auto lead = static_cast<uint8_t>(c);
        size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        const int seq = ast_.Add(Kind::kSeq, pos_);
        for (size_t i = 0; i < len && !AtEnd(); ++i) {
          ByteSet b;
          b.set(static_cast<uint8_t>(p_[pos_]));
          ast_.AddKid(seq, ast_.Set(b, pos_));
          ++pos_;
        }
        ast_.AddKid(alt, seq);
        continue;
      } else {
        lo = static_cast<uint8_t>(c);
        ++pos_;
      }
      int hi = lo;
      if (pos_ + 1 < end_ && Peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        char h = p_[pos_++];
        if (h == '\\') {
          if (AtEnd()) return Error("missing ']'");
          h = static_cast<char>(EscapeByte(p_[pos_++]));
        }
        hi = static_cast<uint8_t>(h);
        if (hi < lo) return Error("bad range in []");
      }
      for (int x = lo; x <= hi; ++x) s.set(static_cast<size_t>(x));
    }
    if (negate) {
      // Every non-ASCII character is admitted, listed ones included.
      const int out = ast_.Add(Kind::kAlt, at);
      ast_.AddKid(out, ast_.Set(Ascii() & ~s, at));
      ast_.AddMultibyte(out, at);
      return out;
    }
    if (ast_[alt].kids.empty()) return ast_.Set(s, at);
    if (s.any()) ast_.AddKid(alt, ast_.Set(s, at));
    return alt;
  }

  std::string_view p_;
  Ast& ast_;
  size_t pos_ = 0, end_ = 0;
  int depth_ = 0;  // groups open around pos_
};

// Thompson NFA: each state has epsilon edges and at most one byte-set edge.
struct Nfa {
  struct State {
    std::vector<int> eps;
    ByteSet set;
    int next = -1;  // target of the byte-set edge
  };
  std::vector<State> states;
  bool overflow = false;
  size_t overflow_at = 0;  // pattern offset of the node being built when it overflowed

  int Add(const Ast::Node& from) {
    if (!overflow && static_cast<int>(states.size()) >= kMaxNfaStates) {
      overflow = true;
      overflow_at = from.at;
    }
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
  // Builds node `i` between fresh states; returns {start, end}. Recurses once
  // per tree level, which the parser bounds (kMaxNesting).
  std::pair<int, int> Build(const Ast& ast, int i) {
    const Ast::Node& a = ast[i];
    if (overflow) {
      int s = Add(a);
      return {s, s};
    }
    switch (a.kind) {
      case Kind::kEmpty: {
        int s = Add(a);
        return {s, s};
      }
      case Kind::kSet: {
        int s = Add(a), e = Add(a);
        states[static_cast<size_t>(s)].set = a.set;
        states[static_cast<size_t>(s)].next = e;
        return {s, e};
      }
      case Kind::kSeq: {
        int s = Add(a), cur = s;
        for (int k : a.kids) {
          auto [ks, ke] = Build(ast, k);
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          cur = ke;
        }
        return {s, cur};
      }
      case Kind::kAlt: {
        int s = Add(a), e = Add(a);
        for (int k : a.kids) {
          auto [ks, ke] = Build(ast, k);
          states[static_cast<size_t>(s)].eps.push_back(ks);
          states[static_cast<size_t>(ke)].eps.push_back(e);
        }
        return {s, e};
      }
      case Kind::kRepeat: {
        const int kid = a.kids[0];
        int s = Add(a), cur = s;
        for (int n = 0; n < a.min && !overflow; ++n) {
          auto [ks, ke] = Build(ast, kid);
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          cur = ke;
        }
        if (a.max == -1) {
          auto [ks, ke] = Build(ast, kid);
          int e = Add(a);
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          states[static_cast<size_t>(cur)].eps.push_back(e);
          states[static_cast<size_t>(ke)].eps.push_back(ks);
          states[static_cast<size_t>(ke)].eps.push_back(e);
          return {s, e};
        }
        int e = Add(a);
        for (int n = a.min; n < a.max && !overflow; ++n) {
          auto [ks, ke] = Build(ast, kid);
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          states[static_cast<size_t>(cur)].eps.push_back(e);
          cur = ke;
        }
        states[static_cast<size_t>(cur)].eps.push_back(e);
        return {s, e};
      }
    }
    int s = Add(a);
    return {s, s};
  }

  // The epsilon closure of `set`, sorted, keeping only the states that
  // matter to a DFA state: those with a byte edge, and `keep` (the accepting
  // state). Two closures with the same such states behave alike, and the
  // sets stay several times smaller. Adds the states and edges it visits to
  // *steps.
  std::vector<int> Closure(const std::vector<int>& set, int keep, size_t* steps) {
    if (mark_.size() != states.size()) mark_.assign(states.size(), 0);
    if (++stamp_ == 0) {  // wrapped: clear the marks once
      std::fill(mark_.begin(), mark_.end(), 0);
      stamp_ = 1;
    }
    std::vector<int> stack = set, out;
    for (int s : set) mark_[static_cast<size_t>(s)] = stamp_;
    while (!stack.empty()) {
      int s = stack.back();
      stack.pop_back();
      if (states[static_cast<size_t>(s)].next >= 0 || s == keep) out.push_back(s);
      const auto& eps = states[static_cast<size_t>(s)].eps;
      *steps += 1 + eps.size();
      for (int t : eps)
        if (mark_[static_cast<size_t>(t)] != stamp_) {
          mark_[static_cast<size_t>(t)] = stamp_;
          stack.push_back(t);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  // Visited marks for Closure: a state is visited when its mark equals
  // stamp_, so no per-call clearing of an NFA-sized array.
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
};

// Bytes that no NFA edge tells apart form one class; the subset construction
// steps once per class instead of once per byte value (a pattern over
// letters and digits has a handful of classes, not 256).
struct ByteClasses {
  std::array<uint8_t, 256> of{};  // the class of each byte
  std::vector<uint8_t> first;     // a byte of each class
};

ByteClasses Classify(const Nfa& nfa) {
  std::array<int, 256> cls{};
  int n = 1;
  ByteSet last;
  for (const auto& st : nfa.states) {
    // Consecutive states often share a set (repeats copy the same atom).
    if (st.next < 0 || st.set == last) continue;
    last = st.set;
    // Split every class into its bytes in and out of this set.
    std::array<int, 512> split;
    split.fill(-1);
    int m = 0;
    for (size_t b = 0; b < 256; ++b) {
      int& id = split[static_cast<size_t>(cls[b] * 2 + (st.set.test(b) ? 1 : 0))];
      if (id < 0) id = m++;
      cls[b] = id;
    }
    n = m;
    if (n == 256) break;
  }
  ByteClasses out;
  out.first.assign(static_cast<size_t>(n), 0);
  std::vector<bool> seen(static_cast<size_t>(n));
  for (size_t b = 0; b < 256; ++b) {
    const auto c = static_cast<size_t>(cls[b]);
    out.of[b] = static_cast<uint8_t>(c);
    if (!seen[c]) seen[c] = true, out.first[c] = static_cast<uint8_t>(b);
  }
  return out;
}

}  // namespace

Result<RegexDfa> RegexDfa::Compile(std::string_view pattern) {
  size_t steps = 0;
  return CompileWithin(pattern, kMaxSteps, &steps);
}

Result<RegexDfa> RegexDfa::Compile(std::string_view pattern, size_t* steps_left) {
  const size_t max_steps = std::min(*steps_left, kMaxSteps);
  size_t steps = 0;
  Result<RegexDfa> dfa = CompileWithin(pattern, max_steps, &steps);
  *steps_left -= std::min(steps, *steps_left);
  if (!dfa.ok() && steps > max_steps && max_steps < kMaxSteps)
    return Status::ResourceExhausted("regex: pattern needs more construction steps than the " +
                                     std::to_string(max_steps) +
                                     " left of a budget shared with other patterns");
  return dfa;
}

Result<RegexDfa> RegexDfa::CompileWithin(std::string_view pattern, size_t max_steps,
                                         size_t* steps_taken) {
  size_t& steps = *steps_taken;
  Ast ast;
  Parser parser(pattern, &ast);
  BRAID_ASSIGN_OR_RETURN(int root, parser.ParseAll());
  Nfa nfa;
  auto [start, accept] = nfa.Build(ast, root);
  if (nfa.overflow)
    return Status::InvalidArgument("regex: pattern too large (more than " +
                                   std::to_string(kMaxNfaStates) + " NFA states) at " +
                                   std::to_string(nfa.overflow_at));
  const ByteClasses classes = Classify(nfa);

  // Subset construction. A DFA state is a sorted set of NFA states; the map
  // owns each set once and `sets` points into it (map nodes do not move).
  std::map<std::vector<int>, int> ids;
  std::vector<const std::vector<int>*> sets;
  std::vector<std::array<int, 256>> table;
  std::vector<bool> accepting;
  size_t entries = 0;
  auto too_large = [](const std::string& what) {
    return Status::InvalidArgument("regex: pattern too large for a DFA (more than " + what + ")");
  };
  auto intern = [&](std::vector<int> set) -> Result<int> {
    steps += set.size();  // the map's comparisons
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    // A pattern like (a|b)*a(a|b){20} needs 2^21 states: refuse it here,
    // before its memory and time grow.
    if (sets.size() >= static_cast<size_t>(kMaxDfaStates))
      return too_large(std::to_string(kMaxDfaStates) + " states");
    entries += set.size();
    if (entries > kMaxSubsetEntries)
      return too_large(std::to_string(kMaxSubsetEntries) + " NFA states across its states");
    const int id = static_cast<int>(sets.size());
    accepting.push_back(std::binary_search(set.begin(), set.end(), accept));
    it = ids.emplace(std::move(set), id).first;
    sets.push_back(&it->first);
    table.emplace_back();
    return id;
  };
  BRAID_RETURN_IF_ERROR(intern(nfa.Closure({start}, accept, &steps)).status());
  std::vector<int> next;
  std::vector<int> by_class(classes.first.size());
  for (size_t i = 0; i < sets.size(); ++i) {
    for (size_t k = 0; k < classes.first.size(); ++k) {
      const size_t b = classes.first[k];
      next.clear();
      for (int s : *sets[i]) {
        const auto& st = nfa.states[static_cast<size_t>(s)];
        if (st.next >= 0 && st.set.test(b)) next.push_back(st.next);
      }
      steps += sets[i]->size();
      by_class[k] = kDead;
      if (!next.empty()) {
        std::sort(next.begin(), next.end());
        next.erase(std::unique(next.begin(), next.end()), next.end());
        BRAID_ASSIGN_OR_RETURN(by_class[k], intern(nfa.Closure(next, accept, &steps)));
      }
      if (steps > max_steps) return too_large(std::to_string(max_steps) + " construction steps");
    }
    for (size_t b = 0; b < 256; ++b) table[i][b] = by_class[classes.of[b]];
  }

  // Prune states that cannot reach an accepting state (reverse reachability).
  const size_t n = table.size();
  std::vector<std::vector<int>> rev(n);
  for (size_t i = 0; i < n; ++i)
    for (int t : table[i])
      if (t >= 0) rev[static_cast<size_t>(t)].push_back(static_cast<int>(i));
  std::vector<bool> live(n);
  std::vector<int> stack;
  for (size_t i = 0; i < n; ++i)
    if (accepting[i]) {
      live[i] = true;
      stack.push_back(static_cast<int>(i));
    }
  while (!stack.empty()) {
    int s = stack.back();
    stack.pop_back();
    for (int p : rev[static_cast<size_t>(s)])
      if (!live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = true;
        stack.push_back(p);
      }
  }
  if (!live[0]) return Status::InvalidArgument("regex: the pattern matches nothing");
  std::vector<int> remap(n, kDead);
  RegexDfa dfa;
  for (size_t i = 0; i < n; ++i)
    if (live[i]) remap[i] = static_cast<int>(dfa.table_.size()), dfa.table_.emplace_back();
  dfa.accepting_.resize(dfa.table_.size());
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    auto& row = dfa.table_[static_cast<size_t>(remap[i])];
    for (size_t b = 0; b < 256; ++b)
      row[b] = table[i][b] < 0 ? kDead : remap[static_cast<size_t>(table[i][b])];
    dfa.accepting_[static_cast<size_t>(remap[i])] = accepting[i];
  }
  return dfa;
}

int RegexDfa::Walk(int state, std::string_view bytes) const {
  for (char c : bytes) {
    state = Next(state, static_cast<uint8_t>(c));
    if (state < 0) return kDead;
  }
  return state;
}

bool RegexDfa::CanContinue(int state) const {
  if (state < 0) return false;
  for (int t : table_[static_cast<size_t>(state)])
    if (t >= 0) return true;
  return false;
}

}  // namespace braid::rt
