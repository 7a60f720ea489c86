// Pattern -> AST -> Thompson NFA over bytes -> DFA (subset construction),
// then the states that cannot reach a match are pruned to kDead.
#include "exec/regex_dfa.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <memory>
#include <set>

namespace braid::rt {
namespace {

constexpr int kMaxNfaStates = 50000;
constexpr int kMaxDfaStates = 10000;
constexpr int kMaxRepeat = 1000;

using ByteSet = std::bitset<256>;

struct Ast {
  enum class Kind { kEmpty, kSet, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  ByteSet set;
  std::vector<std::unique_ptr<Ast>> kids;
  int min = 0, max = -1;  // kRepeat; max -1 = unbounded
};
using AstPtr = std::unique_ptr<Ast>;

AstPtr MakeSet(const ByteSet& s) {
  auto a = std::make_unique<Ast>();
  a->kind = Ast::Kind::kSet;
  a->set = s;
  return a;
}
AstPtr MakeRange(int lo, int hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return MakeSet(s);
}
AstPtr MakeNode(Ast::Kind k) {
  auto a = std::make_unique<Ast>();
  a->kind = k;
  return a;
}

// Every multi-byte UTF-8 sequence (loosely: lead byte and continuation bytes).
void AddMultibyte(Ast* alt) {
  auto two = MakeNode(Ast::Kind::kSeq);
  two->kids.push_back(MakeRange(0xC2, 0xDF));
  two->kids.push_back(MakeRange(0x80, 0xBF));
  auto three = MakeNode(Ast::Kind::kSeq);
  three->kids.push_back(MakeRange(0xE0, 0xEF));
  for (int i = 0; i < 2; ++i) three->kids.push_back(MakeRange(0x80, 0xBF));
  auto four = MakeNode(Ast::Kind::kSeq);
  four->kids.push_back(MakeRange(0xF0, 0xF4));
  for (int i = 0; i < 3; ++i) four->kids.push_back(MakeRange(0x80, 0xBF));
  alt->kids.push_back(std::move(two));
  alt->kids.push_back(std::move(three));
  alt->kids.push_back(std::move(four));
}

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

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Result<AstPtr> ParseAll() {
    if (!p_.empty() && p_.front() == '^') pos_ = 1;
    if (p_.size() > pos_ && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\'))
      end_ = p_.size() - 1;
    else
      end_ = p_.size();
    BRAID_ASSIGN_OR_RETURN(AstPtr a, ParseAlt());
    if (pos_ < end_) return Error("unbalanced ')'");
    return a;
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("regex: " + what + " at " + std::to_string(pos_));
  }
  bool AtEnd() const { return pos_ >= end_; }
  char Peek() const { return p_[pos_]; }

  Result<AstPtr> ParseAlt() {
    auto alt = MakeNode(Ast::Kind::kAlt);
    BRAID_ASSIGN_OR_RETURN(AstPtr first, ParseSeq());
    alt->kids.push_back(std::move(first));
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      BRAID_ASSIGN_OR_RETURN(AstPtr next, ParseSeq());
      alt->kids.push_back(std::move(next));
    }
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  Result<AstPtr> ParseSeq() {
    auto seq = MakeNode(Ast::Kind::kSeq);
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      BRAID_ASSIGN_OR_RETURN(AstPtr atom, ParseAtom());
      while (!AtEnd()) {
        int lo = 0, hi = 0;
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
        auto rep = MakeNode(Ast::Kind::kRepeat);
        rep->min = lo;
        rep->max = hi;
        rep->kids.push_back(std::move(atom));
        atom = std::move(rep);
      }
      seq->kids.push_back(std::move(atom));
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

  Result<AstPtr> ParseAtom() {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (p_.substr(pos_, 2) == "?:") pos_ += 2;
      BRAID_ASSIGN_OR_RETURN(AstPtr inner, ParseAlt());
      if (AtEnd() || Peek() != ')') return Error("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      auto alt = MakeNode(Ast::Kind::kAlt);
      ByteSet s;
      for (int x = 0; x < 128; ++x) s.set(static_cast<size_t>(x));
      s.reset('\n');
      alt->kids.push_back(MakeSet(s));
      AddMultibyte(alt.get());
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
          auto alt = MakeNode(Ast::Kind::kAlt);
          alt->kids.push_back(MakeSet(ClassOf(e)));
          AddMultibyte(alt.get());
          return alt;
        }
        return MakeSet(ClassOf(e));
      }
      ByteSet s;
      s.set(EscapeByte(e));
      return MakeSet(s);
    }
    // A literal; a multi-byte UTF-8 character is one atom.
    const auto lead = static_cast<uint8_t>(c);
    size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (len == 1) {
      ++pos_;
      ByteSet s;
      s.set(lead);
      return MakeSet(s);
    }
    auto seq = MakeNode(Ast::Kind::kSeq);
    for (size_t i = 0; i < len && !AtEnd(); ++i) {
      ByteSet s;
      s.set(static_cast<uint8_t>(p_[pos_++]));
      seq->kids.push_back(MakeSet(s));
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

  Result<AstPtr> ParseClass() {
    ++pos_;  // '['
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    ByteSet s;
    auto alt = MakeNode(Ast::Kind::kAlt);
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
        auto seq = MakeNode(Ast::Kind::kSeq);
        for (size_t i = 0; i < len && !AtEnd(); ++i) {
          ByteSet b;
          b.set(static_cast<uint8_t>(p_[pos_++]));
          seq->kids.push_back(MakeSet(b));
        }
        alt->kids.push_back(std::move(seq));
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
      ByteSet ascii;
      for (int x = 0; x < 128; ++x) ascii.set(static_cast<size_t>(x));
      auto out = MakeNode(Ast::Kind::kAlt);
      out->kids.push_back(MakeSet(ascii & ~s));
      AddMultibyte(out.get());  // every non-ASCII character (listed ones included)
      return out;
    }
    if (alt->kids.empty()) return MakeSet(s);
    if (s.any()) alt->kids.push_back(MakeSet(s));
    return alt;
  }

  std::string_view p_;
  size_t pos_ = 0, end_ = 0;
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

  int Add() {
    if (static_cast<int>(states.size()) >= kMaxNfaStates) overflow = true;
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
  // Builds `a` between fresh states; returns {start, end}.
  std::pair<int, int> Build(const Ast& a) {
    if (overflow) {
      int s = Add();
      return {s, s};
    }
    switch (a.kind) {
      case Ast::Kind::kEmpty: {
        int s = Add();
        return {s, s};
      }
      case Ast::Kind::kSet: {
        int s = Add(), e = Add();
        states[static_cast<size_t>(s)].set = a.set;
        states[static_cast<size_t>(s)].next = e;
        return {s, e};
      }
      case Ast::Kind::kSeq: {
        int s = Add(), cur = s;
        for (const auto& k : a.kids) {
          auto [ks, ke] = Build(*k);
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          cur = ke;
        }
        return {s, cur};
      }
      case Ast::Kind::kAlt: {
        int s = Add(), e = Add();
        for (const auto& k : a.kids) {
          auto [ks, ke] = Build(*k);
          states[static_cast<size_t>(s)].eps.push_back(ks);
          states[static_cast<size_t>(ke)].eps.push_back(e);
        }
        return {s, e};
      }
      case Ast::Kind::kRepeat: {
        int s = Add(), cur = s;
        for (int i = 0; i < a.min && !overflow; ++i) {
          auto [ks, ke] = Build(*a.kids[0]);
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          cur = ke;
        }
        if (a.max == -1) {
          auto [ks, ke] = Build(*a.kids[0]);
          int e = Add();
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          states[static_cast<size_t>(cur)].eps.push_back(e);
          states[static_cast<size_t>(ke)].eps.push_back(ks);
          states[static_cast<size_t>(ke)].eps.push_back(e);
          return {s, e};
        }
        int e = Add();
        for (int i = a.min; i < a.max && !overflow; ++i) {
          auto [ks, ke] = Build(*a.kids[0]);
          states[static_cast<size_t>(cur)].eps.push_back(ks);
          states[static_cast<size_t>(cur)].eps.push_back(e);
          cur = ke;
        }
        states[static_cast<size_t>(cur)].eps.push_back(e);
        return {s, e};
      }
    }
    int s = Add();
    return {s, s};
  }

  std::vector<int> Closure(std::vector<int> set) const {
    std::vector<bool> seen(states.size());
    std::vector<int> stack = set, out;
    for (int s : set) seen[static_cast<size_t>(s)] = true;
    while (!stack.empty()) {
      int s = stack.back();
      stack.pop_back();
      out.push_back(s);
      for (int t : states[static_cast<size_t>(s)].eps)
        if (!seen[static_cast<size_t>(t)]) {
          seen[static_cast<size_t>(t)] = true;
          stack.push_back(t);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace

Result<RegexDfa> RegexDfa::Compile(std::string_view pattern) {
  Parser parser(pattern);
  BRAID_ASSIGN_OR_RETURN(AstPtr ast, parser.ParseAll());
  Nfa nfa;
  auto [start, accept] = nfa.Build(*ast);
  if (nfa.overflow)
    return Status::InvalidArgument("regex: pattern too large (more than " +
                                   std::to_string(kMaxNfaStates) + " NFA states)");

  // Subset construction.
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  std::vector<std::array<int, 256>> table;
  std::vector<bool> accepting;
  auto intern = [&](std::vector<int> set) -> int {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    int id = static_cast<int>(sets.size());
    ids.emplace(set, id);
    accepting.push_back(std::binary_search(set.begin(), set.end(), accept));
    sets.push_back(std::move(set));
    table.emplace_back();
    table.back().fill(kDead);
    return id;
  };
  intern(nfa.Closure({start}));
  for (size_t i = 0; i < sets.size(); ++i) {
    if (sets.size() > static_cast<size_t>(kMaxDfaStates))
      return Status::InvalidArgument("regex: pattern too large (more than " +
                                     std::to_string(kMaxDfaStates) + " DFA states)");
    for (int b = 0; b < 256; ++b) {
      std::vector<int> next;
      for (int s : sets[i]) {
        const auto& st = nfa.states[static_cast<size_t>(s)];
        if (st.next >= 0 && st.set.test(static_cast<size_t>(b))) next.push_back(st.next);
      }
      if (next.empty()) continue;
      std::sort(next.begin(), next.end());
      next.erase(std::unique(next.begin(), next.end()), next.end());
      int id = intern(nfa.Closure(std::move(next)));
      table[i][static_cast<size_t>(b)] = id;
    }
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
