// The template parser of semantic functions.
//
// Grammar (whitespace inside {{ }} is free):
//   template    := (text | "{{{{" | placeholder)*       "{{{{" is a literal "{{"
//   placeholder := "{{" NAME "}}"                       an input
//                | "{{" KIND NAME option* "}}"          an output, KIND = gen|select|regex
//   option      := KEY "=" value
//   value       := number | STRING | "[" STRING ("," STRING)* "]"
//   STRING      := '"' ( char | "\n" | "\t" | "\"" | "\\" )* '"'
// Any other backslash pair in a string is kept as written (so regex escapes
// such as \d pass through). Options: gen: max_tokens min_tokens stop
// temperature top_p seed; select: choices scoring; regex: pattern
// max_tokens temperature top_p seed.
// A function's messages (earlier chat turns) are templates of the same
// grammar without outputs; their inputs are the function's inputs too.
//
// Templates come from scripts and over HTTP, so the parser is bounded: it
// never recurses (the grammar does not nest), and the template's size, its
// number of placeholders, the length of a list and the work of compiling its
// regex patterns are capped, each with an error that says which and where.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "exec/regex_dfa.h"
#include "runtime/runtime.h"

namespace braid::rt {

const char* VarStateName(VarState s) {
  switch (s) {
    case VarState::kPending:
      return "pending";
    case VarState::kReady:
      return "ready";
    case VarState::kFailed:
      return "failed";
    case VarState::kCancelled:
      return "cancelled";
  }
  return "?";
}

const char* NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kWaiting:
      return "waiting";
    case NodeState::kReady:
      return "ready";
    case NodeState::kRunning:
      return "running";
    case NodeState::kDone:
      return "done";
    case NodeState::kFailed:
      return "failed";
    case NodeState::kCancelled:
      return "cancelled";
  }
  return "?";
}

namespace {

// Well beyond any model's context window (128K tokens is about 512 KB).
constexpr size_t kMaxTemplateBytes = 1 << 20;
constexpr size_t kMaxPlaceholders = 1024;
constexpr size_t kMaxListStrings = 1024;
constexpr size_t kMaxMessages = 1024;
// What all the regex outputs of one template may take to compile together
// (each one alone is bounded by RegexDfa::kMaxSteps): under a second.
constexpr size_t kMaxRegexSteps = 2 * RegexDfa::kMaxSteps;

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A cursor over the template that knows its line and column.
class Cursor {
 public:
  Cursor(const std::string& fn, const std::string& text) : fn_(fn), text_(text) {}

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool StartsWith(std::string_view s) const { return text_.compare(pos_, s.size(), s) == 0; }
  size_t pos() const { return pos_; }
  void Advance(size_t n = 1) {
    for (size_t i = 0; i < n && pos_ < text_.size(); ++i, ++pos_) {
      if (text_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }
  void SkipSpaces() {
    while (!AtEnd() && std::isspace(static_cast<unsigned char>(Peek()))) Advance();
  }
  struct Mark {
    int line, col;
  };
  Mark mark() const { return {line_, col_}; }
  // The line and column of `pos` (at or after the cursor).
  Mark MarkAt(size_t pos) const {
    Mark m = mark();
    for (size_t i = pos_; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++m.line;
        m.col = 1;
      } else {
        ++m.col;
      }
    }
    return m;
  }
  static std::string Where(Mark m) { return std::to_string(m.line) + ":" + std::to_string(m.col); }
  Status Error(Mark at, const std::string& what) const {
    return Status::InvalidArgument(fn_ + ":" + std::to_string(at.line) + ":" +
                                   std::to_string(at.col) + ": " + what);
  }
  Status Error(const std::string& what) const { return Error(mark(), what); }

  std::string Word() {
    std::string w;
    while (!AtEnd() && IsNameChar(Peek())) {
      w += Peek();
      Advance();
    }
    return w;
  }

 private:
  const std::string& fn_;
  const std::string& text_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

struct Value {
  enum class Kind { kNumber, kString, kList } kind = Kind::kNumber;
  std::string text;  // number text or string
  std::vector<std::string> list;
};

Result<std::string> ParseString(Cursor& c) {
  const auto start = c.mark();
  c.Advance();  // opening quote
  std::string out;
  while (true) {
    if (c.AtEnd() || (c.Peek() == '}' && c.Peek(1) == '}'))
      return c.Error(start, "unterminated string");
    char ch = c.Peek();
    if (ch == '"') {
      c.Advance();
      return out;
    }
    if (ch == '\\') {
      char e = c.Peek(1);
      if (e == 'n')
        out += '\n';
      else if (e == 't')
        out += '\t';
      else if (e == '"')
        out += '"';
      else if (e == '\\')
        out += '\\';
      else if (e == '\0')
        return c.Error(start, "unterminated string");
      else {
        out += '\\';
        out += e;
      }
      c.Advance(2);
      continue;
    }
    out += ch;
    c.Advance();
  }
}

// The items of a value written the way other tools write lists: single
// quotes (['yes', 'no']) or bare words (yes|no, yes,no), for error messages.
std::vector<std::string> LooseItems(std::string_view raw) {
  std::vector<std::string> items;
  if (raw.find('\'') != std::string_view::npos) {
    for (size_t a = raw.find('\''); a != std::string_view::npos; a = raw.find('\'', a + 1)) {
      const size_t b = raw.find('\'', a + 1);
      if (b == std::string_view::npos) break;
      items.emplace_back(raw.substr(a + 1, b - a - 1));
      a = b;
    }
    return items;
  }
  std::string item;
  for (char ch : raw) {
    if (ch == '|' || ch == ',') {
      items.push_back(item);
      item.clear();
    } else if (!std::isspace(static_cast<unsigned char>(ch)) && !std::strchr("[]{}\"", ch)) {
      item += ch;
    }
  }
  items.push_back(item);
  std::erase_if(items, [](const std::string& i) { return i.empty(); });
  return items;
}

// `key` with `raw` written as the grammar wants it: KEY="x", or
// KEY=["a","b"] for a list (a list of two examples when nothing is left).
std::string QuotedForm(const std::string& key, std::string_view raw, bool list) {
  std::vector<std::string> items = LooseItems(raw.substr(0, 200));
  if (items.empty()) items = {"yes", "no"};
  if (!list) return key + "=\"" + items[0] + "\"";
  std::string out = key + "=[";
  for (size_t i = 0; i < items.size() && i < 8; ++i) out += (i ? ",\"" : "\"") + items[i] + "\"";
  return out + "]";
}

// The text of the value at the cursor, up to the end of the placeholder
// (for QuotedForm).
std::string_view RawValue(const Cursor& c, const std::string& tmpl) {
  const size_t end = tmpl.find("}}", c.pos());
  return std::string_view(tmpl).substr(c.pos(), end == std::string::npos ? end : end - c.pos());
}

Result<Value> ParseValue(Cursor& c, const std::string& tmpl, const std::string& key,
                         const std::string& where) {
  Value v;
  // 'text': say how strings are written, with the value rewritten.
  if (c.Peek() == '\'') {
    const std::string_view raw = RawValue(c, tmpl);
    if (key == "max_tokens" || key == "temperature" || key == "top_p" || key == "seed") {
      const std::vector<std::string> items = LooseItems(raw);
      return c.Error("bad value for '" + key + "' in " + where +
                     ": numbers are written bare: " + key + "=" + (items.empty() ? "8" : items[0]));
    }
    return c.Error("bad value for '" + key + "' in " + where +
                   ": strings take double quotes: " + QuotedForm(key, raw, key == "choices"));
  }
  if (c.Peek() == '"') {
    v.kind = Value::Kind::kString;
    BRAID_ASSIGN_OR_RETURN(v.text, ParseString(c));
    return v;
  }
  if (c.Peek() == '[' || c.Peek() == '{') {  // ["a", "b"], or Lua's {"a", "b"}
    const char close = c.Peek() == '[' ? ']' : '}';
    const auto start = c.mark();
    v.kind = Value::Kind::kList;
    c.Advance();
    c.SkipSpaces();
    if (c.Peek() == close) {
      c.Advance();
      return v;
    }
    const size_t list_pos = c.pos() - 1;
    while (true) {
      c.SkipSpaces();
      if (c.Peek() == '\'') {
        const std::string_view raw = std::string_view(tmpl).substr(list_pos);
        return c.Error("bad value for '" + key + "' in " + where +
                       ": strings take double quotes: " +
                       QuotedForm(key, raw.substr(0, raw.find("}}")), true));
      }
      if (c.Peek() != '"') {
        if (c.AtEnd() || (close == ']' && c.StartsWith("}}")))
          return c.Error(start, "unterminated list for '" + key + "' in " + where);
        return c.Error("bad value for '" + key + "' in " + where +
                       ": expected a string in the list");
      }
      if (v.list.size() == kMaxListStrings)
        return c.Error("more than " + std::to_string(kMaxListStrings) +
                       " strings in the list for '" + key + "' in " + where);
      BRAID_ASSIGN_OR_RETURN(std::string s, ParseString(c));
      v.list.push_back(std::move(s));
      c.SkipSpaces();
      if (c.Peek() == ',') {
        c.Advance();
        continue;
      }
      if (c.Peek() == close) {
        c.Advance();
        return v;
      }
      if (c.AtEnd() || c.StartsWith("}}"))
        return c.Error(start, "unterminated list for '" + key + "' in " + where);
      return c.Error("bad value for '" + key + "' in " + where + ": expected ',' or '" + close +
                     "'");
    }
  }
  while (!c.AtEnd() && !std::isspace(static_cast<unsigned char>(c.Peek())) && !c.StartsWith("}}")) {
    v.text += c.Peek();
    c.Advance();
  }
  if (v.text.empty()) return c.Error("missing value for '" + key + "' in " + where);
  return v;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}
bool ParseUint(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + static_cast<uint64_t>(ch - '0');
  }
  *out = v;
  return true;
}

// Levenshtein distance (short option names only).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the option of this kind nearest to `key`, when
// one is within a third of its length; else "".
std::string DidYouMean(const std::string& key, OutputSpec::Kind kind) {
  using K = OutputSpec::Kind;
  const std::vector<std::string> known =
      kind == K::kSelect ? std::vector<std::string>{"choices", "scoring"}
      : kind == K::kRegex
          ? std::vector<std::string>{"pattern", "max_tokens", "temperature", "top_p", "seed"}
          : std::vector<std::string>{"max_tokens", "min_tokens", "stop", "temperature",
                                     "top_p",      "seed",       "regex"};
  // Names other APIs give these options (Hugging Face, OpenAI, llama.cpp).
  const std::pair<const char*, const char*> aliases[] = {
      {"max_new_tokens", "max_tokens"},
      {"max_length", "max_tokens"},
      {"n_predict", "max_tokens"},
      {"max_completion_tokens", "max_tokens"},
      {"num_tokens", "max_tokens"},
      {"temp", "temperature"},
      {"stop_sequences", "stop"},
      {"stops", "stop"},
      {"until", "stop"},
      {"options", "choices"},
      {"values", "choices"},
      {"regexp", kind == K::kRegex ? "pattern" : "regex"},
      {"random_seed", "seed"},
      {"p", "top_p"},
  };
  for (const auto& [alias, option] : aliases)
    if (key == alias && std::find(known.begin(), known.end(), option) != known.end())
      return std::string(" (did you mean '") + option + "'?)";
  std::string best;
  size_t best_d = key.size();
  for (const std::string& k : known)
    if (const size_t d = EditDistance(key, k); d < best_d) {
      best_d = d;
      best = k;
    }
  if (best.empty() || best_d * 3 > best.size()) return "";
  return " (did you mean '" + best + "'?)";
}

// Applies one option to `out`; errors point at the option's key. A pattern's
// compilation draws on *regex_steps, shared by the template's patterns.
Status ApplyOption(Cursor& c, Cursor::Mark at, const std::string& key, const Value& v,
                   const std::string& where, size_t* regex_steps, OutputSpec* out) {
  using K = OutputSpec::Kind;
  const bool gen = out->kind == K::kGen, sel = out->kind == K::kSelect, rx = out->kind == K::kRegex;
  auto bad = [&](const std::string& why) {
    return c.Error(at, "bad value for '" + key + "' in " + where + ": " + why);
  };
  const bool number = v.kind == Value::Kind::kNumber;
  if (key == "max_tokens" && (gen || rx)) {
    uint64_t n = 0;
    if (!number || !ParseUint(v.text, &n) || n < 1 || n > 1000000)
      return bad("expected a positive integer, got '" + v.text + "'");
    out->max_tokens = static_cast<int>(n);
  } else if (key == "min_tokens" && gen) {
    uint64_t n = 0;
    if (!number || !ParseUint(v.text, &n) || n > 1000000)
      return bad("expected a non-negative integer, got '" + v.text + "'");
    out->min_tokens = static_cast<int>(n);
  } else if (key == "stop" && gen) {
    if (v.kind == Value::Kind::kString)
      out->stop = {v.text};
    else if (v.kind == Value::Kind::kList)
      out->stop = v.list;
    else
      return bad("expected a string or a list of strings");
    for (const auto& s : out->stop)
      if (s.empty()) return bad("a stop string is empty");
  } else if (key == "temperature" && (gen || rx)) {
    double t = 0;
    if (!number || !ParseDouble(v.text, &t) || t < 0 || t > 100)
      return bad("expected a number >= 0, got '" + v.text + "'");
    out->temperature = static_cast<float>(t);
  } else if (key == "top_p" && (gen || rx)) {
    double p = 0;
    if (!number || !ParseDouble(v.text, &p) || p <= 0 || p > 1)
      return bad("expected a number in (0, 1], got '" + v.text + "'");
    out->top_p = static_cast<float>(p);
  } else if (key == "seed" && (gen || rx)) {
    uint64_t s = 0;
    if (!number || !ParseUint(v.text, &s))
      return bad("expected a non-negative integer, got '" + v.text + "'");
    out->seed = s;
  } else if (key == "choices" && sel) {
    if (v.kind != Value::Kind::kList)  // choices=yes|no, choices="yes,no"
      return bad("expected a list of double-quoted strings: " + QuotedForm(key, v.text, true));
    if (v.list.empty()) return bad("expected a non-empty list of strings");
    std::set<std::string> seen;
    for (const auto& s : v.list) {
      if (s.empty()) return bad("a choice is empty");
      if (!seen.insert(s).second) return bad("duplicate choice \"" + s + "\"");
    }
    out->choices = v.list;
  } else if (key == "scoring" && sel) {
    using S = OutputSpec::Scoring;
    if (v.kind == Value::Kind::kString && v.text == "mean")
      out->scoring = S::kMean;
    else if (v.kind == Value::Kind::kString && v.text == "sum")
      out->scoring = S::kSum;
    else if (v.kind == Value::Kind::kString && v.text == "unconditional")
      out->scoring = S::kUnconditional;
    else
      return bad("expected \"mean\", \"sum\" or \"unconditional\", got '" + v.text + "'");
  } else if ((key == "pattern" && rx) || (key == "regex" && gen)) {
    // {{gen x regex="..."}} is {{regex x pattern="..."}}.
    if (v.kind != Value::Kind::kString || v.text.empty()) return bad("expected a non-empty string");
    if (!out->stop.empty())
      return bad("a regex output ends where its pattern does: no 'stop' with it");
    auto dfa = RegexDfa::Compile(v.text, regex_steps);
    if (!dfa.ok()) return bad(dfa.status().message());
    out->kind = K::kRegex;
    out->pattern = v.text;
  } else if (key == "stop" && rx) {
    return c.Error(
        at, "unknown option 'stop' in " + where + ": a regex output ends where its pattern does");
  } else {
    return c.Error(at, "unknown option '" + key + "' in " + where + DidYouMean(key, out->kind));
  }
  return Status::Ok();
}

// What the templates of one function share while they are parsed: the
// placeholder and regex budgets and the names seen so far.
struct ParseState {
  size_t placeholders = 0;
  size_t regex_steps = kMaxRegexSteps;
  std::set<std::string> input_set, output_set;
  std::vector<std::string> inputs;  // distinct, in order
  std::vector<OutputSpec> outputs;
};

using Piece = SemanticFunction::Piece;

// Checks that the placeholder whose "{{" is at the cursor is closed: a "}}"
// comes before the next "{{" outside a string and before the end. Strings
// cannot hold "}}" (ParseString stops there), so the first "}}" closes it
// wherever it is. Otherwise the error points at the opening "{{" and says
// what went wrong there, instead of whatever the text after it would make
// the option parser say. Scans to the next "}}" or "{{" only, so the
// placeholders of a template are scanned once in all.
Status CheckClosed(const Cursor& c, const std::string& tmpl) {
  const size_t open = c.pos();
  size_t single = std::string::npos;  // the first lone '}' outside a string
  bool in_string = false;
  size_t i = open + 2;
  for (; i < tmpl.size(); ++i) {
    if (tmpl.compare(i, 2, "}}") == 0) return Status::Ok();
    const char ch = tmpl[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (tmpl.compare(i, 2, "{{") == 0) {
      break;
    } else if (ch == '}' && single == std::string::npos) {
      single = i;
    }
  }
  i = std::min(i, tmpl.size());  // past a trailing backslash
  // The placeholder as written: to the lone '}', else its first line,
  // clipped (never inside a UTF-8 character).
  size_t end = single != std::string::npos ? single + 1 : std::min(i, tmpl.find('\n', open));
  const bool clipped = end - open > 40;
  if (clipped) {
    end = open + 40;
    while (end > open && (static_cast<unsigned char>(tmpl[end]) & 0xC0) == 0x80) --end;
  }
  std::string shown = tmpl.substr(open, end - open);
  while (!shown.empty() && std::isspace(static_cast<unsigned char>(shown.back()))) shown.pop_back();
  if (clipped) shown += "...";
  const std::string what = "'" + shown + "' is not closed: ";
  if (single != std::string::npos)
    return c.Error(what + "the '}' at " + Cursor::Where(c.MarkAt(single)) + " needs to be '}}'");
  const std::string escape = "; a literal '{{' is written '{{{{'";
  if (i < tmpl.size())
    return c.Error(what + "no '}}' before the next '{{' at " + Cursor::Where(c.MarkAt(i)) + escape);
  return c.Error(what + "no '}}' before the end of the template" + escape);
}

// Parses one template `tmpl` into `pieces`; errors start with `label`
// ("summarize", "summarize: messages[2]"). Without `outputs_allowed` (a
// message) an output placeholder is an error.
Status ParseTemplate(const std::string& label, const std::string& tmpl, bool outputs_allowed,
                     ParseState& st, std::vector<Piece>* pieces) {
  Cursor c(label, tmpl);
  std::string text;
  auto flush_text = [&] {
    if (!text.empty()) pieces->push_back({Piece::Kind::kText, std::move(text), -1});
    text.clear();
  };
  while (!c.AtEnd()) {
    if (!c.StartsWith("{{")) {
      text += c.Peek();
      c.Advance();
      continue;
    }
    if (c.StartsWith("{{{{")) {  // the escape of a literal "{{"
      text += "{{";
      c.Advance(4);
      continue;
    }
    const auto open = c.mark();
    if (++st.placeholders > kMaxPlaceholders)
      return c.Error(
          open, "more than " + std::to_string(kMaxPlaceholders) + " placeholders in the template");
    BRAID_RETURN_IF_ERROR(CheckClosed(c, tmpl));
    c.Advance(2);
    c.SkipSpaces();
    const auto word_at = c.mark();
    std::string word = c.Word();
    const bool is_output = word == "gen" || word == "select" || word == "regex";
    if (!is_output) {
      // An input reference: {{name}}.
      c.SkipSpaces();
      if (c.AtEnd()) return c.Error(open, "unterminated placeholder '{{'");
      if (!c.StartsWith("}}")) {
        // {{q} ... }}: one brace where two are needed.
        if (!word.empty() && c.Peek() == '}')
          return c.Error(open, "'{{" + word + "}' is not closed: the '}' at " +
                                   Cursor::Where(c.mark()) + " needs to be '}}'");
        if (word.empty()) {
          if (c.Peek() == '{')
            return c.Error(word_at, "empty name in {{ }} (a literal '{{' is written '{{{{')");
          if (c.Peek() == '}') return c.Error(word_at, "empty name in {{ }}");
          return c.Error(word_at,
                         std::string("bad character '") + c.Peek() + "' in a placeholder name");
        }
        // Look for the end to tell "unknown kind" from "unterminated".
        const std::string rest = tmpl.substr(c.pos());
        if (rest.find("}}") == std::string::npos)
          return c.Error(open, "unterminated placeholder '{{'");
        return c.Error(word_at,
                       "unknown placeholder kind '" + word +
                           "' (expected {{name}}, {{gen ...}}, {{select ...}} or {{regex ...}})");
      }
      if (word.empty()) return c.Error(word_at, "empty name in {{ }}");
      if (!IsNameStart(word[0]))
        return c.Error(word_at, "bad name '" + word + "': must start with a letter or '_'");
      c.Advance(2);
      if (st.output_set.count(word))
        return c.Error(word_at, "'" + word + "' is an output and cannot be used as an input");
      flush_text();
      pieces->push_back({Piece::Kind::kInput, word, -1});
      if (st.input_set.insert(word).second) st.inputs.push_back(word);
      continue;
    }
    OutputSpec out;
    out.kind = word == "gen"      ? OutputSpec::Kind::kGen
               : word == "select" ? OutputSpec::Kind::kSelect
                                  : OutputSpec::Kind::kRegex;
    c.SkipSpaces();
    const auto name_at = c.mark();
    out.name = c.Word();
    const std::string where =
        "{{" + word + " " + (out.name.empty() ? std::string("?") : out.name) + " ...}}";
    // Messages are turns the model did not write in this call: what it
    // generates belongs to the final user turn, the prompt.
    if (!outputs_allowed)
      return c.Error(open, "an output (" + where +
                               ") cannot be in a message: outputs go in 'prompt', the final "
                               "user turn");
    if (c.AtEnd()) return c.Error(open, "unterminated placeholder '{{'");
    if (out.name.empty() || c.Peek() == '=') {
      if (c.Peek() == '=' || c.StartsWith("}}") ||
          std::isspace(static_cast<unsigned char>(c.Peek())))
        return c.Error(name_at, "empty name in {{" + word + " ...}}");
      return c.Error(name_at, std::string("bad character '") + c.Peek() +
                                  "' in the output name of {{" + word + " ...}}");
    }
    if (!IsNameStart(out.name[0]))
      return c.Error(name_at, "bad name '" + out.name + "': must start with a letter or '_'");
    if (st.output_set.count(out.name))
      return c.Error(name_at, "duplicate output name '" + out.name + "'");
    if (st.input_set.count(out.name))
      return c.Error(name_at, "'" + out.name + "' is an input and cannot also be an output");
    // Options until "}}".
    std::set<std::string> seen_keys;
    while (true) {
      const bool spaced = !c.AtEnd() && std::isspace(static_cast<unsigned char>(c.Peek()));
      c.SkipSpaces();
      if (c.AtEnd()) return c.Error(open, "unterminated placeholder '{{'");
      if (c.StartsWith("}}")) {
        c.Advance(2);
        break;
      }
      const auto key_at = c.mark();
      if (!spaced) return c.Error(key_at, std::string("unexpected '") + c.Peek() + "' in " + where);
      std::string key = c.Word();
      if (key.empty())
        return c.Error(key_at, std::string("unexpected '") + c.Peek() + "' in " + where);
      if (c.Peek() != '=') {
        if (c.AtEnd()) return c.Error(open, "unterminated placeholder '{{'");
        return c.Error(key_at, "option '" + key + "' needs '=value' in " + where);
      }
      c.Advance();
      if (c.AtEnd()) return c.Error(open, "unterminated placeholder '{{'");
      BRAID_ASSIGN_OR_RETURN(Value v, ParseValue(c, tmpl, key, where));
      if (!seen_keys.insert(key).second)
        return c.Error(key_at, "option '" + key + "' given twice in " + where);
      BRAID_RETURN_IF_ERROR(ApplyOption(c, key_at, key, v, where, &st.regex_steps, &out));
    }
    if (out.kind == OutputSpec::Kind::kSelect && out.choices.empty())
      return c.Error(open, "missing option 'choices' in " + where);
    if (out.kind == OutputSpec::Kind::kRegex && out.pattern.empty())
      return c.Error(open, "missing option 'pattern' in " + where);
    flush_text();
    st.output_set.insert(out.name);
    pieces->push_back({Piece::Kind::kOutput, out.name, static_cast<int>(st.outputs.size())});
    st.outputs.push_back(std::move(out));
  }
  flush_text();
  return Status::Ok();
}

// The roles and order of the messages, and that `system` is given once.
Status CheckMessages(const std::string& name, const FunctionSpec& spec) {
  if (spec.messages.size() > kMaxMessages)
    return Status::InvalidArgument(name + ": " + std::to_string(spec.messages.size()) +
                                   " messages, more than the limit of " +
                                   std::to_string(kMaxMessages));
  for (size_t i = 0; i < spec.messages.size(); ++i) {
    const std::string& role = spec.messages[i].role;
    const std::string where = name + ": messages[" + std::to_string(i + 1) + "]: ";
    if (role != "system" && role != "user" && role != "assistant")
      return Status::InvalidArgument(where + "role '" + role +
                                     "' is not one of system, user, assistant");
    // Chat templates expect the system prompt first (some drop or refuse
    // a later one).
    if (role == "system" && i > 0)
      return Status::InvalidArgument(where + "a system message must be the first message");
    if (role == "system" && !spec.system.empty())
      return Status::InvalidArgument(
          where + "a system message and 'system' both given: give the system text once");
  }
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<const SemanticFunction>> SemanticFunction::Parse(const FunctionSpec& spec) {
  auto fn = std::make_shared<SemanticFunction>();
  fn->spec_ = spec;
  const std::string name = spec.name.empty() ? "<function>" : spec.name;
  if (spec.prompt.size() > kMaxTemplateBytes)
    return Status::InvalidArgument(
        name + ": the template is " + std::to_string(spec.prompt.size()) +
        " bytes, more than the limit of " + std::to_string(kMaxTemplateBytes));
  BRAID_RETURN_IF_ERROR(CheckMessages(name, spec));
  size_t total = spec.prompt.size();
  for (const ChatMessage& m : spec.messages) total += m.content.size();
  if (total > kMaxTemplateBytes)
    return Status::InvalidArgument(name + ": the prompt and messages are " + std::to_string(total) +
                                   " bytes, more than the limit of " +
                                   std::to_string(kMaxTemplateBytes));
  // Messages first: they come first in the conversation, so their inputs
  // come first in inputs(), and a name used as an input there cannot become
  // an output in the prompt.
  ParseState st;
  for (size_t i = 0; i < spec.messages.size(); ++i) {
    fn->message_pieces_.emplace_back();
    BRAID_RETURN_IF_ERROR(ParseTemplate(name + ": messages[" + std::to_string(i + 1) + "]",
                                        spec.messages[i].content, /*outputs_allowed=*/false, st,
                                        &fn->message_pieces_.back()));
  }
  BRAID_RETURN_IF_ERROR(
      ParseTemplate(name, spec.prompt, /*outputs_allowed=*/true, st, &fn->pieces_));
  fn->inputs_ = std::move(st.inputs);
  fn->outputs_ = std::move(st.outputs);
  if (fn->outputs_.empty())
    return Status::InvalidArgument(
        name +
        ": the template has no output ({{gen NAME}}, {{select NAME ...}} or {{regex NAME ...}})");
  return std::shared_ptr<const SemanticFunction>(std::move(fn));
}

}  // namespace braid::rt
