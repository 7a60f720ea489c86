#include <doctest/doctest.h>

#include "runtime/runtime.h"

using namespace braid;
using namespace braid::rt;

namespace {
Result<std::shared_ptr<const SemanticFunction>> P(const std::string& prompt,
                                                  const std::string& system = "") {
  return SemanticFunction::Parse({"fn", system, prompt});
}
std::string Err(const std::string& prompt) {
  auto r = P(prompt);
  if (r.ok()) return "(parsed)";
  return r.status().message();
}
}  // namespace

TEST_CASE("template: inputs, outputs and pieces in order") {
  auto r =
      P("Doc: {{doc}}\nTitle: {{gen title max_tokens=8 stop=\"\\n\"}} by {{ author }} {{doc}}"
        "{{select mood choices=[\"good\", \"bad\"]}}{{regex year pattern=\"[0-9]{4}\" "
        "max_tokens=4}}");
  REQUIRE(r.ok());
  const auto& fn = **r;
  CHECK(fn.inputs() == std::vector<std::string>{"doc", "author"});
  REQUIRE(fn.outputs().size() == 3);
  CHECK(fn.outputs()[0].name == "title");
  CHECK(fn.outputs()[0].kind == OutputSpec::Kind::kGen);
  CHECK(fn.outputs()[0].max_tokens == 8);
  CHECK(fn.outputs()[0].stop == std::vector<std::string>{"\n"});
  CHECK(fn.outputs()[1].kind == OutputSpec::Kind::kSelect);
  CHECK(fn.outputs()[1].choices == std::vector<std::string>{"good", "bad"});
  CHECK(fn.outputs()[2].kind == OutputSpec::Kind::kRegex);
  CHECK(fn.outputs()[2].pattern == "[0-9]{4}");
  CHECK(fn.outputs()[2].max_tokens == 4);
  const auto& p = fn.pieces();
  REQUIRE(p.size() == 10);
  CHECK(p[0].kind == SemanticFunction::Piece::Kind::kText);
  CHECK(p[0].text == "Doc: ");
  CHECK(p[1].kind == SemanticFunction::Piece::Kind::kInput);
  CHECK(p[1].text == "doc");
  CHECK(p[2].text == "\nTitle: ");
  CHECK(p[3].kind == SemanticFunction::Piece::Kind::kOutput);
  CHECK(p[3].output == 0);
  CHECK(p[5].text == "author");
  CHECK(p[7].kind == SemanticFunction::Piece::Kind::kInput);
  CHECK(p[8].output == 1);
  CHECK(p[9].output == 2);
}

TEST_CASE("template: options and escapes") {
  auto r =
      P("{{gen a temperature=0.7 top_p=0.9 seed=42 stop=[\"x\", \"say \\\"hi\\\"\", \"a\\\\b\"] "
        "max_tokens=3}}");
  REQUIRE(r.ok());
  const auto& o = (*r)->outputs()[0];
  CHECK(o.temperature == doctest::Approx(0.7));
  CHECK(o.top_p == doctest::Approx(0.9));
  REQUIRE(o.seed.has_value());
  CHECK(*o.seed == 42);
  CHECK(o.stop == std::vector<std::string>{"x", "say \"hi\"", "a\\b"});
  // Regex escapes pass through strings unchanged.
  auto rx = P("{{regex n pattern=\"\\d+\\.\\d\"}}");
  REQUIRE(rx.ok());
  CHECK((*rx)->outputs()[0].pattern == "\\d+\\.\\d");
  // Defaults.
  auto d = P("{{gen a}}");
  REQUIRE(d.ok());
  CHECK((*d)->outputs()[0].max_tokens == 128);
  CHECK((*d)->outputs()[0].temperature == 0.0f);
  CHECK(!(*d)->outputs()[0].seed.has_value());
}

TEST_CASE("template: Lua-style lists, gen regex= as a regex output, did-you-mean") {
  // choices={"a","b"} (Lua's braces) as well as ["a","b"], also next to "}}".
  for (const char* t :
       {"{{select s choices={\"a\", \"b\"}}}", "{{select s choices={\"a\",\"b\"} }}",
        "{{select s choices=[\"a\", \"b\"]}}"}) {
    auto f = P(t);
    REQUIRE_MESSAGE(f.ok(), t << ": " << f.status().ToString());
    CHECK((*f)->outputs()[0].choices == std::vector<std::string>{"a", "b"});
  }
  auto stop = P("{{gen g stop={\"x\", \"y\"}}}");
  REQUIRE(stop.ok());
  CHECK((*stop)->outputs()[0].stop == std::vector<std::string>{"x", "y"});
  CHECK(Err("{{select s choices={\"a\", \"b\"]}}").find("expected ',' or '}'") !=
        std::string::npos);
  CHECK(Err("{{select s choices={\"a\"").find("is not closed") != std::string::npos);
  // {{gen x regex="..."}} is {{regex x pattern="..."}}, options kept.
  auto g = P("{{gen year regex=\"[0-9]{4}\" max_tokens=8}}");
  REQUIRE(g.ok());
  CHECK((*g)->outputs()[0].kind == OutputSpec::Kind::kRegex);
  CHECK((*g)->outputs()[0].pattern == "[0-9]{4}");
  CHECK((*g)->outputs()[0].max_tokens == 8);
  CHECK(Err("{{gen y stop=\"x\" regex=\"a\"}}").find("no 'stop' with it") != std::string::npos);
  CHECK(
      Err("{{gen y regex=\"a\" stop=\"x\"}}").find("a regex output ends where its pattern does") !=
      std::string::npos);
  CHECK(Err("{{gen y regex=\"(a\"}}").find("bad value for 'regex'") != std::string::npos);
  CHECK(Err("{{regex y regex=\"a\"}}").find("unknown option 'regex'") != std::string::npos);
  // Did you mean: the nearest option of that kind, only when close.
  CHECK(Err("{{select s choice=[\"a\"]}}").find("(did you mean 'choices'?)") != std::string::npos);
  CHECK(Err("{{regex r patern=\"a\"}}").find("(did you mean 'pattern'?)") != std::string::npos);
  CHECK(Err("{{gen g temprature=0}}").find("(did you mean 'temperature'?)") != std::string::npos);
  CHECK(Err("{{gen g colour=1}}").find("did you mean") == std::string::npos);
}

TEST_CASE("template: option names and list forms of other tools are answered") {
  // Names other APIs use for the same options.
  CHECK(Err("{{gen a max_new_tokens=8}}") ==
        "fn:1:9: unknown option 'max_new_tokens' in {{gen a ...}} (did you mean 'max_tokens'?)");
  CHECK(Err("{{regex r pattern=\"a\" max_length=8}}").find("(did you mean 'max_tokens'?)") !=
        std::string::npos);
  CHECK(Err("{{gen a temp=0.5}}").find("(did you mean 'temperature'?)") != std::string::npos);
  CHECK(Err("{{gen a stop_sequences=[\"x\"]}}").find("(did you mean 'stop'?)") !=
        std::string::npos);
  CHECK(Err("{{select s options=[\"x\"]}}").find("(did you mean 'choices'?)") != std::string::npos);
  CHECK(Err("{{regex r regexp=\"a\"}}").find("(did you mean 'pattern'?)") != std::string::npos);
  CHECK(Err("{{gen a regexp=\"a\"}}").find("(did you mean 'regex'?)") != std::string::npos);
  // An alias of an option of another kind is not suggested.
  CHECK(Err("{{select s choices=[\"x\"] max_new_tokens=3}}").find("did you mean") ==
        std::string::npos);
  // Choices as bare words or one string: the accepted form, with their words.
  CHECK(Err("{{select s choices=yes|no}}") ==
        "fn:1:12: bad value for 'choices' in {{select s ...}}: expected a list of double-quoted "
        "strings: choices=[\"yes\",\"no\"]");
  CHECK(Err("{{select s choices=\"yes, no\"}}").find(": choices=[\"yes\",\"no\"]") !=
        std::string::npos);
  // Single quotes, in a list or alone.
  CHECK(Err("{{select s choices=['yes', 'no']}}") ==
        "fn:1:21: bad value for 'choices' in {{select s ...}}: strings take double quotes: "
        "choices=[\"yes\",\"no\"]");
  CHECK(Err("{{select s choices={'a','b'}}}").find("double quotes: choices=[\"a\",\"b\"]") !=
        std::string::npos);
  CHECK(Err("{{gen a stop='\\n'}}") ==
        "fn:1:14: bad value for 'stop' in {{gen a ...}}: strings take double quotes: "
        "stop=\"\\n\"");
  CHECK(Err("{{select s choices='x'}}").find("double quotes: choices=[\"x\"]") !=
        std::string::npos);
  CHECK(Err("{{gen a max_tokens='8'}}") ==
        "fn:1:20: bad value for 'max_tokens' in {{gen a ...}}: numbers are written bare: "
        "max_tokens=8");
}

TEST_CASE("template: errors name the function, line:column and the problem") {
  CHECK(Err("hi\n  {{gen summary max_token=3}}") ==
        "fn:2:17: unknown option 'max_token' in {{gen summary ...}} (did you mean 'max_tokens'?)");
  CHECK(Err("{{gen a max_tokens=zero}}") ==
        "fn:1:9: bad value for 'max_tokens' in {{gen a ...}}: expected a positive integer, got "
        "'zero'");
  CHECK(Err("{{gen a max_tokens=0}}").find("bad value for 'max_tokens'") != std::string::npos);
  CHECK(Err("{{gen a min_tokens=-1}}").find("bad value for 'min_tokens'") != std::string::npos);
  CHECK(Err("{{gen a min_token=1}}").find("(did you mean 'min_tokens'?)") != std::string::npos);
  CHECK(Err("{{select a choices=[\"x\"] min_tokens=1}}").find("min_tokens") != std::string::npos);
  CHECK(Err("{{gen a temperature=-1}}").find("fn:1:9: bad value for 'temperature'") == 0);
  CHECK(Err("{{gen a top_p=1.5}}").find("expected a number in (0, 1]") != std::string::npos);
  CHECK(Err("{{gen a seed=-3}}").find("bad value for 'seed'") != std::string::npos);
  CHECK(Err("{{gen a stop=3}}").find("bad value for 'stop'") != std::string::npos);
  CHECK(Err("ab\ncd {{gen a max_tokens=3") ==
        "fn:2:4: '{{gen a max_tokens=3' is not closed: no '}}' before the end of the template; a "
        "literal '{{' is written '{{{{'");
  CHECK(Err("x {{doc").find("fn:1:3: '{{doc' is not closed: no '}}' before the end") == 0);
  CHECK(Err("{{gen a stop=\"abc}}") == "fn:1:14: unterminated string");
  CHECK(Err("{{gen a stop=[\"a\", \"b\"}}") ==
        "fn:1:14: unterminated list for 'stop' in {{gen a ...}}");
  CHECK(Err("{{gen a}} {{gen a}}") == "fn:1:17: duplicate output name 'a'");
  CHECK(Err("{{gen a}} {{a}}") == "fn:1:13: 'a' is an output and cannot be used as an input");
  CHECK(Err("{{a}} {{gen a}}") == "fn:1:13: 'a' is an input and cannot also be an output");
  CHECK(Err("{{}}") == "fn:1:3: empty name in {{ }}");
  CHECK(Err("{{gen }}") == "fn:1:7: empty name in {{gen ...}}");
  CHECK(Err("{{gen max_tokens=3}}") == "fn:1:7: empty name in {{gen ...}}");
  CHECK(Err("{{select s}}") == "fn:1:1: missing option 'choices' in {{select s ...}}");
  CHECK(Err("{{select s choices=[]}}").find("expected a non-empty list") != std::string::npos);
  CHECK(Err("{{select s choices=[\"a\",\"a\"]}}").find("duplicate choice") != std::string::npos);
  CHECK(Err("{{select s choices=[\"a\"] max_tokens=3}}") ==
        "fn:1:26: unknown option 'max_tokens' in {{select s ...}}");
  CHECK(Err("{{regex r}}") == "fn:1:1: missing option 'pattern' in {{regex r ...}}");
  CHECK(Err("{{regex r pattern=\"(ab\"}}")
            .find("bad value for 'pattern' in {{regex r ...}}: regex: missing ')'") !=
        std::string::npos);
  CHECK(Err("{{regex r pattern=\"a\" stop=\"x\"}}").find("unknown option 'stop'") !=
        std::string::npos);
  CHECK(Err("{{gen a max_tokens}}") ==
        "fn:1:9: option 'max_tokens' needs '=value' in {{gen a ...}}");
  CHECK(Err("{{gen a max_tokens=3 max_tokens=4}}") ==
        "fn:1:22: option 'max_tokens' given twice in {{gen a ...}}");
  CHECK(Err("{{foo bar}}").find("unknown placeholder kind 'foo'") != std::string::npos);
  CHECK(Err("{{9x}}").find("bad name '9x'") != std::string::npos);
  CHECK(Err("plain text").find("has no output") != std::string::npos);
}

TEST_CASE("template: an unclosed placeholder is named where it opens") {
  // One closing brace: the '}' is named, not the text after it.
  CHECK(Err("Q: {{q} {{gen a}}") ==
        "fn:1:4: '{{q}' is not closed: the '}' at 1:7 needs to be '}}'");
  CHECK(Err("{{gen a}} {{q}") == "fn:1:11: '{{q}' is not closed: the '}' at 1:14 needs to be '}}'");
  CHECK(Err("{{q} and }} {{gen a}}") ==
        "fn:1:1: '{{q}' is not closed: the '}' at 1:4 needs to be '}}'");
  // An output left open before more text and another placeholder: not
  // "option 'Done' needs '=value'".
  CHECK(Err("{{gen a max_tokens=8\nDone.\n{{gen b}}") ==
        "fn:1:1: '{{gen a max_tokens=8' is not closed: no '}}' before the next '{{' at 3:1; a "
        "literal '{{' is written '{{{{'");
  CHECK(Err("Answer: {{gen a max_tokens=8 Done.")
            .find("fn:1:9: '{{gen a max_tokens=8 Done.' is "
                  "not closed: no '}}' before the end") == 0);
  // A long placeholder is shown clipped.
  CHECK(Err("{{gen a stop=\"" + std::string(100, 'x') + "\"")
            .find("fn:1:1: '{{gen a stop=\"" + std::string(26, 'x') + "...' is not closed") == 0);
  // "{{" inside a string does not open another placeholder; "}}" always closes.
  auto s = P("{{gen a stop=\"{{\"}}");
  REQUIRE_MESSAGE(s.ok(), s.status().message());
  CHECK((*s)->outputs()[0].stop == std::vector<std::string>{"{{"});
  CHECK(Err("{{gen a stop=\"{{b}}") == "fn:1:14: unterminated string");
}

TEST_CASE("template: '{{{{' is a literal '{{'") {
  auto r = P("Write {{{{name}} for a field: {{x}} {{{{{{{{ {{gen a}}");
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  const auto& p = (*r)->pieces();
  REQUIRE(p.size() == 4);
  CHECK(p[0].text == "Write {{name}} for a field: ");
  CHECK(p[1].kind == SemanticFunction::Piece::Kind::kInput);
  CHECK(p[1].text == "x");
  CHECK(p[2].text == " {{{{ ");
  CHECK((*r)->inputs() == std::vector<std::string>{"x"});
  // Three braces are a placeholder with an empty name, and say so.
  CHECK(Err("{{{x}}}") == "fn:1:3: empty name in {{ }} (a literal '{{' is written '{{{{')");
}

TEST_CASE("template: size is bounded: huge templates, many placeholders, long lists") {
  // 1 MiB parses; one byte more is refused before any parsing.
  std::string big(1 << 20, 'x');
  big.replace(0, 9, "{{gen a}}");
  auto r = P(big);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK((*r)->pieces().size() == 2);
  CHECK(Err(big + "x") == "fn: the template is 1048577 bytes, more than the limit of 1048576");
  CHECK(Err(std::string(64 << 20, '{')) ==
        "fn: the template is 67108864 bytes, more than the limit of 1048576");
  // 1,024 placeholders parse; the 1,025th is refused where it opens.
  std::string many = "{{gen out}}";
  for (int i = 1; i < 1024; ++i) many += "{{x}}";
  CHECK(P(many).ok());
  CHECK(Err(many + "\n{{x}}") == "fn:2:1: more than 1024 placeholders in the template");
  std::string choices;
  for (int i = 0; i < 1024; ++i) choices += (i ? ",\"c" : "\"c") + std::to_string(i) + "\"";
  auto sel = P("{{select s choices=[" + choices + "]}}");
  REQUIRE_MESSAGE(sel.ok(), sel.status().message());
  CHECK((*sel)->outputs()[0].choices.size() == 1024);
  CHECK(Err("{{select s choices=[" + choices + ", \"more\"]}}") ==
        "fn:1:" + std::to_string(23 + choices.size()) +
            ": more than 1024 strings in the list for 'choices' in {{select s ...}}");
}

TEST_CASE("template: deep nesting fails cleanly (the grammar does not nest)") {
  // Runs of '{' are escapes ("{{{{" is "{{"), one more opens a placeholder.
  CHECK(Err(std::string(200000, '{')).find("has no output") != std::string::npos);
  CHECK(Err("x " + std::string(100002, '{') + std::string(100000, '}')) ==
        "fn:1:100005: empty name in {{ }}");
  CHECK(Err("x {{ " + std::string(200000, '{'))
            .find("fn:1:3: '{{' is not closed: no '}}' before the next '{{' at 1:6") == 0);
  CHECK(Err("{{select s choices=" + std::string(100000, '[') + "}}") ==
        "fn:1:21: bad value for 'choices' in {{select s ...}}: expected a string in the list");
  CHECK(Err("{{gen a stop=[\"a\"" + std::string(100000, ']') + "}}") ==
        "fn:1:19: unexpected ']' in {{gen a ...}}");
  // A regex output's pattern is bounded by the regex compiler's nesting limit.
  CHECK(Err("{{regex r pattern=\"" + std::string(9000, '(') + "a" + std::string(9000, ')') +
            "\"}}") ==
        "fn:1:11: bad value for 'pattern' in {{regex r ...}}: regex: groups and repeats nested "
        "deeper "
        "than 250 at 250");
  CHECK(Err("{{regex r pattern=\"a" + std::string(1000000, '*') + "\"}}") ==
        "fn:1:11: bad value for 'pattern' in {{regex r ...}}: regex: pattern longer than 65536 "
        "bytes at "
        "65536");
}

TEST_CASE("template: the regex outputs of one template share a compile budget") {
  // Each pattern alone compiles (about 12.5M construction steps); four of
  // them exceed the template's 40M.
  const std::string costly = "(a?){1000}a{1000}";
  CHECK(P("{{regex r pattern=\"" + costly + "\"}}").ok());
  std::string t;
  for (int i = 0; i < 4; ++i)
    t += "{{regex r" + std::to_string(i) + " pattern=\"" + costly + "\"}}";
  const std::string e = Err(t);
  CHECK(e.find("fn:1:132: bad value for 'pattern' in {{regex r3 ...}}: regex: pattern needs more "
               "construction steps than the ") == 0);
  CHECK(e.find(" left of a budget shared with other patterns") != std::string::npos);
  // Cheap patterns are many before they add up.
  std::string cheap;
  for (int i = 0; i < 200; ++i)
    cheap += "{{regex d" + std::to_string(i) + " pattern=\"[0-9]{4}-[0-9]{2}-[0-9]{2}\"}}";
  CHECK(P(cheap).ok());
}

namespace {
Result<std::shared_ptr<const SemanticFunction>> WithMessages(std::vector<ChatMessage> messages,
                                                             const std::string& prompt,
                                                             const std::string& system = "") {
  FunctionSpec spec{"fn", system, prompt};
  spec.messages = std::move(messages);
  return SemanticFunction::Parse(spec);
}
std::string MsgErr(std::vector<ChatMessage> messages, const std::string& prompt = "{{gen a}}",
                   const std::string& system = "") {
  auto r = WithMessages(std::move(messages), prompt, system);
  return r.ok() ? "(parsed)" : r.status().message();
}
}  // namespace

TEST_CASE("template: messages are templates of inputs; their inputs come first") {
  auto r = WithMessages({{"system", "You answer about {{topic}}."},
                         {"user", "Here is {{doc}}"},
                         {"assistant", "Read {{ doc }}. Ask."}},
                        "Q: {{q}} on {{topic}}? {{gen a}}");
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  const auto& fn = **r;
  CHECK(fn.chat());
  CHECK(fn.inputs() == std::vector<std::string>{"topic", "doc", "q"});
  REQUIRE(fn.message_pieces().size() == 3);
  const auto& m1 = fn.message_pieces()[1];
  REQUIRE(m1.size() == 2);
  CHECK(m1[0].kind == SemanticFunction::Piece::Kind::kText);
  CHECK(m1[0].text == "Here is ");
  CHECK(m1[1].kind == SemanticFunction::Piece::Kind::kInput);
  CHECK(m1[1].text == "doc");
  CHECK(fn.message_pieces()[2].size() == 3);
  REQUIRE(fn.outputs().size() == 1);
  CHECK(fn.outputs()[0].name == "a");
  // Without messages or system a function is not chat-style.
  CHECK_FALSE((*P("{{gen a}}"))->chat());
  CHECK((*P("{{gen a}}", "sys"))->chat());
}

TEST_CASE("template: messages hold no outputs; roles and system are checked") {
  CHECK(MsgErr({{"user", "hi"}, {"assistant", "The answer:\n  {{gen a max_tokens=3}}"}}) ==
        "fn: messages[2]:2:3: an output ({{gen a ...}}) cannot be in a message: outputs go in "
        "'prompt', the final user turn");
  CHECK(MsgErr({{"user", "{{select s choices=[\"x\"]}}"}})
            .find("fn: messages[1]:1:1: an output "
                  "({{select s ...}})") == 0);
  CHECK(MsgErr({{"user", "ok {{regex r pattern=\"a\"}}"}}).find("fn: messages[1]:1:4: an output") ==
        0);
  // Other template errors point into the message too.
  CHECK(MsgErr({{"user", "a\nb {{doc"}}).find("fn: messages[1]:2:3: '{{doc' is not closed") == 0);
  CHECK(MsgErr({{"user", "hi"}, {"bot", "x"}}) ==
        "fn: messages[2]: role 'bot' is not one of system, user, assistant");
  CHECK(MsgErr({{"user", "hi"}, {"system", "x"}}) ==
        "fn: messages[2]: a system message must be the first message");
  CHECK(MsgErr({{"system", "x"}}, "{{gen a}}", "also system") ==
        "fn: messages[1]: a system message and 'system' both given: give the system text once");
  // A message's input cannot become an output of the prompt.
  CHECK(MsgErr({{"user", "{{a}}"}}, "{{gen a}}") ==
        "fn:1:7: 'a' is an input and cannot also be an output");
  // The messages count against the template's size bound.
  CHECK(MsgErr({{"user", std::string(700000, 'x')}}, std::string(400000, 'y') + "{{gen a}}")
            .find("the prompt and messages are 1100009 bytes, more than the limit") !=
        std::string::npos);
  CHECK(MsgErr({{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u2"}}) == "(parsed)");
}

TEST_CASE("template: '{{{{' is a literal '{{' in messages too") {
  auto m = WithMessages({{"user", "say {{{{hi}}"}}, "{{gen a}}");
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  CHECK((*m)->message_pieces()[0][0].text == "say {{hi}}");
  CHECK((*m)->inputs().empty());
}
