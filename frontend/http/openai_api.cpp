#include "http/openai_api.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "http/json_body.h"
#include "http/json_schema.h"
#include "runtime/constraint.h"

namespace braid::http {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxBodyDepth = 64;  // JSON nesting accepted in a request body
constexpr int kMaxTopLogprobs = 20;
constexpr size_t kMaxStops = 16;
constexpr size_t kConstraintCacheSize = 64;

// A request refused before reaching an engine.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
  std::string code;
  int retry_after_s = 0;  // > 0: a Retry-After header
};
using MaybeError = std::optional<ApiError>;

ApiError Bad(std::string param, std::string message, std::string code = {}) {
  return {400, std::move(message), std::move(param), std::move(code), 0};
}

Response ToResponse(const ApiError& e) {
  Response r = JsonError(e.status, e.message, {}, e.param, e.code);
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  return r;
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The deepest nesting of arrays and objects in `text`, outside strings
// (checked before parsing: copying and printing parsed JSON recurse).

MaybeError ParseBody(const std::string& body, Json* out) {
  auto parsed = ParseJsonObject(body, kMaxBodyDepth);
  if (!parsed.ok()) return Bad("", parsed.status().message());
  *out = std::move(parsed).value();
  return std::nullopt;
}

// Field readers: an absent or null field leaves *out unset.
const Json* Field(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

MaybeError GetInt(const Json& body, const char* key, int64_t lo, int64_t hi,
                  std::optional<int64_t>* out) {
  const Json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return Bad(key, std::string(key) + " must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return Bad(key, std::string(key) + " must be at most " + std::to_string(hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    return Bad(key, std::string(key) + " must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + std::to_string(x));
  *out = x;
  return std::nullopt;
}

// A number in [lo, hi] (lo excluded when lo_open).
MaybeError GetNumber(const Json& body, const char* key, double lo, double hi, bool lo_open,
                     std::optional<double>* out) {
  const Json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return Bad(key, std::string(key) + " must be a number");
  const double x = v->get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s must be in %s%g, %g], got %g", key, lo_open ? "(" : "[", lo,
                  hi, x);
    return Bad(key, buf);
  }
  *out = x;
  return std::nullopt;
}

MaybeError GetBool(const Json& body, const char* key, bool* out) {
  const Json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return Bad(key, std::string(key) + " must be a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

#define RETURN_IF_API_ERROR(expr) \
  do {                            \
    MaybeError _e = (expr);       \
    if (_e) return _e;            \
  } while (0)

// Everything a completion or chat request asks, validated.
struct Job {
  bool chat = false;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int n = 1;
  int top_logprobs = -1;  // the engine's: -1 none, k >= 0
  bool stream = false, include_usage = false;
  std::shared_ptr<const rt::RegexConstraint> constraint;
};

std::string RandomHex(size_t digits) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < digits; ++i) out += kHex[rng() % 16];
  return out;
}

uint64_t RandomSeed() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t SaltOf(const std::string& client) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : client) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// A token's text for JSON (the bytes; invalid UTF-8 is replaced on output).
std::string TokenText(const Model& tok, int32_t id) { return tok.TokenBytes(id); }

Json TokenBytesJson(const std::string& bytes) {
  Json a = Json::array();
  for (char c : bytes) a.push_back(static_cast<int>(static_cast<uint8_t>(c)));
  return a;
}

// Completions' logprobs: {tokens, token_logprobs, top_logprobs, text_offset};
// *offset advances by each token's bytes.
Json CompletionLogprobs(const Model& tok, const std::vector<TokenLogprob>& lps, size_t* offset) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(),
       offsets = Json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string text = TokenText(tok, lp.id);
    tokens.push_back(text);
    token_lps.push_back(lp.logprob);
    Json top = Json::object();
    for (const auto& [id, l] : lp.top) {
      const std::string t = TokenText(tok, id);
      if (!top.contains(t)) top[t] = l;
    }
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += text.size();
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

// Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}.
Json ChatLogprobs(const Model& tok, const std::vector<TokenLogprob>& lps) {
  Json content = Json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string text = TokenText(tok, lp.id);
    Json top = Json::array();
    for (const auto& [id, l] : lp.top) {
      const std::string t = TokenText(tok, id);
      top.push_back(Json{{"token", t}, {"logprob", l}, {"bytes", TokenBytesJson(t)}});
    }
    content.push_back(Json{{"token", text},
                           {"logprob", lp.logprob},
                           {"bytes", TokenBytesJson(text)},
                           {"top_logprobs", std::move(top)}});
  }
  return Json{{"content", std::move(content)}};
}

Json UsageJson(int prompt_tokens, int completion_tokens, int cached_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", Json{{"cached_tokens", cached_tokens}}}};
}

// An engine's refusal as the API's error.
ApiError SubmitError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kResourceExhausted:
      return {429, "the server is busy: " + s.message(), "", "queue_full", 1};
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return Bad("", s.message());
    case StatusCode::kCancelled:
      return {503, "the server is shutting down: " + s.message(), "", "unavailable", 0};
    default:
      return {500, s.message(), "", "", 0};
  }
}

}  // namespace

// ---- the service ----------------------------------------------------------

struct OpenAiService::Impl {
  OpenAiOptions options;
  int context = 0;
  int64_t created = 0;
  std::shared_ptr<const rt::EnginePlacement> placement;  // the runtime's placement service

  // Compiled response_format constraints by regex (DFA construction can
  // take tens of milliseconds; clients repeat their schemas).
  std::mutex cache_mu;
  std::list<std::pair<std::string, std::shared_ptr<const rt::RegexConstraint>>> cache;

  Result<std::shared_ptr<const rt::RegexConstraint>> Constraint(const std::string& regex) {
    {
      std::lock_guard<std::mutex> lock(cache_mu);
      for (auto it = cache.begin(); it != cache.end(); ++it) {
        if (it->first != regex) continue;
        cache.splice(cache.begin(), cache, it);
        return cache.front().second;
      }
    }
    BRAID_ASSIGN_OR_RETURN(rt::RegexConstraint c, rt::RegexConstraint::Compile(regex));
    auto shared = std::make_shared<const rt::RegexConstraint>(std::move(c));
    std::lock_guard<std::mutex> lock(cache_mu);
    cache.emplace_front(regex, shared);
    if (cache.size() > kConstraintCacheSize) cache.pop_back();
    return shared;
  }

  MaybeError CheckModel(const Json& body) const {
    const Json* m = Field(body, "model");
    if (!m) return std::nullopt;
    if (!m->is_string()) return Bad("model", "model must be a string");
    if (!options.model_name.empty() && m->get<std::string>() != options.model_name)
      return ApiError{404,
                      "the model '" + m->get<std::string>() +
                          "' does not exist (this server has '" + options.model_name + "')",
                      "model", "model_not_found", 0};
    return std::nullopt;
  }

  MaybeError Messages(const Json& body, std::vector<ChatMessage>* out) const {
    const Json* m = Field(body, "messages");
    if (!m) return Bad("messages", "messages is required");
    if (!m->is_array() || m->empty()) return Bad("messages", "messages must be a non-empty array");
    for (size_t i = 0; i < m->size(); ++i) {
      const Json& msg = (*m)[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!msg.is_object()) return Bad(at, at + " must be an object");
      const Json* role = Field(msg, "role");
      if (!role || !role->is_string()) return Bad(at + ".role", at + ".role must be a string");
      std::string r = role->get<std::string>();
      if (r == "developer") r = "system";
      if (r != "system" && r != "user" && r != "assistant")
        return Bad(at + ".role",
                   at + ".role '" + r + "' is not supported (system, developer, user, assistant)");
      const Json* content = Field(msg, "content");
      std::string text;
      if (!content) return Bad(at + ".content", at + ".content is required");
      if (content->is_string()) {
        text = content->get<std::string>();
      } else if (content->is_array()) {
        for (size_t k = 0; k < content->size(); ++k) {
          const Json& part = (*content)[k];
          const std::string pat = at + ".content[" + std::to_string(k) + "]";
          const Json* type = part.is_object() ? Field(part, "type") : nullptr;
          if (!type || !type->is_string() || type->get<std::string>() != "text")
            return Bad(pat, pat + " must be a {\"type\": \"text\"} part (only text is supported)");
          const Json* t = Field(part, "text");
          if (!t || !t->is_string()) return Bad(pat + ".text", pat + ".text must be a string");
          text += t->get<std::string>();
        }
      } else {
        return Bad(at + ".content", at + ".content must be a string or a list of parts");
      }
      out->push_back({r, std::move(text)});
    }
    return std::nullopt;
  }

  // The completions prompt as token ids.
  MaybeError CompletionPrompt(const Json& body, std::vector<int32_t>* out) const {
    const Json* p = Field(body, "prompt");
    if (!p) return Bad("prompt", "prompt is required");
    const Json* one = p;
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
      one = &(*p)[0];
    if (one->is_string()) {
      if (one->get<std::string>().empty()) return Bad("prompt", "prompt is empty");
      *out = options.tokenizer->TokenizeRaw(one->get<std::string>());
    } else if (one->is_array()) {
      if (one->empty()) return Bad("prompt", "prompt is empty");
      const int n_vocab = options.tokenizer->info().n_vocab;
      for (const Json& t : *one) {
        if (!t.is_number_integer())
          return Bad("prompt",
                     "prompt must be a string, a list of one string, or a list of token ids "
                     "(one prompt per request)");
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id >= n_vocab)
          return Bad("prompt", "prompt token " + std::to_string(id) +
                                   " is outside the vocabulary [0, " + std::to_string(n_vocab) +
                                   ")");
        out->push_back(static_cast<int32_t>(id));
      }
    } else {
      return Bad("prompt", "prompt must be a string or a list of token ids");
    }
    if (out->empty()) return Bad("prompt", "prompt has no tokens");
    return std::nullopt;
  }

  MaybeError ResponseFormat(const Json& body, Job* job) {
    const Json* rf = Field(body, "response_format");
    if (!rf) return std::nullopt;
    const Json* type = rf->is_object() ? Field(*rf, "type") : nullptr;
    if (!type || !type->is_string())
      return Bad("response_format", "response_format must be an object with a string type");
    const std::string t = type->get<std::string>();
    std::string regex;
    if (t == "text") {
      return std::nullopt;
    } else if (t == "json_object") {
      regex = JsonObjectRegex();
    } else if (t == "json_schema") {
      const Json* js = Field(*rf, "json_schema");
      if (!js || !js->is_object())
        return Bad("response_format.json_schema", "response_format.json_schema must be an object");
      const Json* schema = Field(*js, "schema");
      if (!schema)
        return Bad("response_format.json_schema.schema",
                   "response_format.json_schema.schema is required");
      auto r = JsonSchemaRegex(Dump(*schema));
      if (!r.ok())
        return Bad("response_format.json_schema.schema",
                   "response_format.json_schema.schema: " + r.status().message());
      regex = std::move(r).value();
    } else {
      return Bad("response_format.type", "response_format.type '" + t +
                                             "' is not supported (text, json_object, json_schema)");
    }
    auto c = Constraint(regex);
    if (!c.ok())
      return Bad("response_format", "response_format cannot be enforced: " + c.status().message());
    job->constraint = std::move(c).value();
    return std::nullopt;
  }

  // Everything both endpoints share, after the prompt is known.
  MaybeError Sampling(const Json& body, Job* job) {
    const std::string prompt_param = job->chat ? "messages" : "prompt";
    const int n_prompt = static_cast<int>(job->prompt.size());
    if (n_prompt >= context)
      return Bad(prompt_param,
                 "the prompt has " + std::to_string(n_prompt) +
                     " tokens, which leaves no room in the context of " + std::to_string(context) +
                     " tokens",
                 "context_length_exceeded");

    SamplingParams& sp = job->sampling;
    sp = SamplingParams{};
    sp.temperature = 1.0f;  // OpenAI's defaults: plain sampling
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.penalty_last_n = -1;

    std::optional<int64_t> max_tokens;
    const char* max_key = "max_tokens";
    if (job->chat && Field(body, "max_completion_tokens")) max_key = "max_completion_tokens";
    RETURN_IF_API_ERROR(GetInt(body, max_key, 0, context, &max_tokens));
    if (!max_tokens) max_tokens = job->chat ? context - n_prompt : 16;
    if (n_prompt + *max_tokens > context)
      return Bad(max_key,
                 "the prompt has " + std::to_string(n_prompt) + " tokens and " + max_key + " is " +
                     std::to_string(*max_tokens) + ": " + std::to_string(n_prompt) + "+" +
                     std::to_string(*max_tokens) + " exceeds the context of " +
                     std::to_string(context) + " tokens",
                 "context_length_exceeded");
    sp.max_tokens = static_cast<int>(*max_tokens);

    std::optional<double> x;
    RETURN_IF_API_ERROR(GetNumber(body, "temperature", 0, 2, false, &x));
    if (x) sp.temperature = static_cast<float>(*x);
    x.reset();
    RETURN_IF_API_ERROR(GetNumber(body, "top_p", 0, 1, true, &x));
    if (x) sp.top_p = static_cast<float>(*x);
    x.reset();
    RETURN_IF_API_ERROR(GetNumber(body, "min_p", 0, 1, false, &x));
    if (x) sp.min_p = static_cast<float>(*x);
    x.reset();
    RETURN_IF_API_ERROR(GetNumber(body, "presence_penalty", -2, 2, false, &x));
    if (x) sp.presence_penalty = static_cast<float>(*x);
    x.reset();
    RETURN_IF_API_ERROR(GetNumber(body, "frequency_penalty", -2, 2, false, &x));
    if (x) sp.frequency_penalty = static_cast<float>(*x);
    x.reset();
    RETURN_IF_API_ERROR(GetNumber(body, "repetition_penalty", 0, 10, true, &x));
    if (x) sp.repetition_penalty = static_cast<float>(*x);
    std::optional<int64_t> i;
    RETURN_IF_API_ERROR(GetInt(body, "top_k", -1, 1 << 20, &i));
    if (i) sp.top_k = *i < 0 ? 0 : static_cast<int>(*i);
    i.reset();
    RETURN_IF_API_ERROR(GetInt(body, "seed", INT64_MIN, INT64_MAX, &i));
    sp.seed = i ? static_cast<uint64_t>(*i) : RandomSeed();
    i.reset();
    RETURN_IF_API_ERROR(GetInt(body, "n", 1, options.max_n, &i));
    job->n = i ? static_cast<int>(*i) : 1;
    RETURN_IF_API_ERROR(GetBool(body, "ignore_eos", &sp.ignore_eos));
    i.reset();
    // vLLM's extension: tokens before a stop or the end of generation counts.
    RETURN_IF_API_ERROR(GetInt(body, "min_tokens", 0, sp.max_tokens, &i));
    if (i) sp.min_tokens = static_cast<int>(*i);

    if (const Json* stop = Field(body, "stop")) {
      if (stop->is_string()) {
        sp.stop.push_back(stop->get<std::string>());
      } else if (stop->is_array()) {
        for (const Json& s : *stop) {
          if (!s.is_string()) return Bad("stop", "stop must be a string or a list of strings");
          sp.stop.push_back(s.get<std::string>());
        }
      } else {
        return Bad("stop", "stop must be a string or a list of strings");
      }
      if (sp.stop.size() > kMaxStops)
        return Bad("stop", "stop has more than " + std::to_string(kMaxStops) + " strings");
      for (const std::string& s : sp.stop)
        if (s.empty()) return Bad("stop", "stop strings must not be empty");
    }

    if (job->chat) {
      bool logprobs = false;
      RETURN_IF_API_ERROR(GetBool(body, "logprobs", &logprobs));
      std::optional<int64_t> top;
      RETURN_IF_API_ERROR(GetInt(body, "top_logprobs", 0, kMaxTopLogprobs, &top));
      if (top && !logprobs) return Bad("top_logprobs", "top_logprobs needs logprobs to be true");
      if (logprobs) job->top_logprobs = top ? static_cast<int>(*top) : 0;
    } else {
      std::optional<int64_t> k;
      RETURN_IF_API_ERROR(GetInt(body, "logprobs", 0, kMaxTopLogprobs, &k));
      if (k) job->top_logprobs = static_cast<int>(*k);
    }

    RETURN_IF_API_ERROR(GetBool(body, "stream", &job->stream));
    if (const Json* so = Field(body, "stream_options")) {
      if (!so->is_object()) return Bad("stream_options", "stream_options must be an object");
      RETURN_IF_API_ERROR(GetBool(*so, "include_usage", &job->include_usage));
    }
    RETURN_IF_API_ERROR(ResponseFormat(body, job));
    const Status s = sp.Validate();
    if (!s.ok()) return Bad("", s.message());
    return std::nullopt;
  }

  // Fields this server does not implement, refused rather than ignored
  // (ignoring them would return something other than what was asked).
  static MaybeError Unsupported(const Json& body) {
    bool echo = false;
    RETURN_IF_API_ERROR(GetBool(body, "echo", &echo));
    if (echo) return Bad("echo", "echo is not supported");
    std::optional<int64_t> best_of;
    RETURN_IF_API_ERROR(GetInt(body, "best_of", 1, 1, &best_of));
    if (const Json* s = Field(body, "suffix"); s && !(s->is_string() && s->empty()))
      return Bad("suffix", "suffix is not supported");
    if (const Json* b = Field(body, "logit_bias"); b && !(b->is_object() && b->empty()))
      return Bad("logit_bias", "logit_bias is not supported");
    for (const char* k : {"tools", "functions"})
      if (const Json* t = Field(body, k); t && !(t->is_array() && t->empty()))
        return Bad(k, std::string(k) + " (tool calling) is not supported");
    return std::nullopt;
  }

  MaybeError ParseJob(const Request& request, bool chat, Job* job) {
    Json body;
    RETURN_IF_API_ERROR(ParseBody(request.body, &body));
    RETURN_IF_API_ERROR(CheckModel(body));
    RETURN_IF_API_ERROR(Unsupported(body));
    job->chat = chat;
    if (chat) {
      std::vector<ChatMessage> messages;
      RETURN_IF_API_ERROR(Messages(body, &messages));
      const std::vector<PromptPiece> pieces = options.tokenizer->FormatChat(messages, true);
      job->prompt = options.tokenizer->Tokenize(pieces);
      if (job->prompt.empty()) return Bad("messages", "the messages render to no tokens");
    } else {
      RETURN_IF_API_ERROR(CompletionPrompt(body, &job->prompt));
    }
    return Sampling(body, job);
  }

  // The engine the placement service chooses for `job`, as the runtime's
  // dispatcher asks it (runtime/placement.h): among the engines that are
  // alive and, for a response_format constraint (a logits mask), local.
  // Null when none can take it: *why names each engine and what it lacks.
  Engine* Pick(const Job& job, uint64_t salt, std::string* why) const {
    rt::PlacementNeeds needs;
    needs.salt = salt;
    needs.needs_local = job.constraint != nullptr;
    needs.latency = options.goal == GoalClass::kLatency;
    const int i = placement->Pick(job.prompt, needs);
    if (i < 0) *why = placement->NoEngineReason(needs.needs_local);
    return i < 0 ? nullptr : placement->engine(i).engine;
  }

  GenerationRequest EngineRequest(const Job& job, const Request& request, int choice) const {
    GenerationRequest g;
    g.prompt = job.prompt;
    g.sampling = job.sampling;
    g.sampling.seed = job.sampling.seed + static_cast<uint64_t>(choice);
    g.goal = options.goal;
    g.cache_salt = options.cache_per_client ? SaltOf(request.client) : 0;
    g.top_logprobs = job.top_logprobs;
    g.client = request.client;
    if (job.constraint) g.logits_processor = job.constraint->NewProcessor(*options.tokenizer);
    return g;
  }

  Response Generate(const Request& request, bool chat);
  Response Whole(const Request& request, const Job& job, Engine* engine);
  Response Stream(const Request& request, const Job& job, Engine* engine);
};

// ---- non-streaming ----------------------------------------------------------

Response OpenAiService::Impl::Whole(const Request& request, const Job& job, Engine* engine) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < job.n; ++i) {
    auto h = engine->Submit(EngineRequest(job, request, i));
    if (!h.ok()) {
      for (auto& p : handles) p->Cancel();
      return ToResponse(SubmitError(h.status()));
    }
    handles.push_back(std::move(h).value());
  }
  // A client that leaves before the answer stops its requests.
  if (request.client_gone)
    request.client_gone->OnGone([handles] {
      for (auto& h : handles) h->Cancel();
    });
  std::vector<Completion> done;
  for (auto& h : handles) done.push_back(h->Wait());

  const Model& tok = *options.tokenizer;
  const bool chat = job.chat;
  Json choices = Json::array();
  int completion_tokens = 0;
  std::string error;
  for (size_t i = 0; i < done.size(); ++i) {
    const Completion& c = done[i];
    const bool failed = c.finish_reason == "error" || c.finish_reason == "cancelled";
    if (options.metrics) options.metrics->ObserveTimings(c.timings, failed);
    if (failed && error.empty())
      error = c.error.empty() ? "the request was cancelled by the engine" : c.error;
    completion_tokens += c.usage.generated_tokens;
    Json choice = {{"index", i}};
    if (chat) {
      choice["message"] = Json{{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = job.top_logprobs >= 0 ? ChatLogprobs(tok, c.logprobs) : Json();
    } else {
      choice["text"] = c.text;
      size_t offset = 0;
      choice["logprobs"] =
          job.top_logprobs >= 0 ? CompletionLogprobs(tok, c.logprobs, &offset) : Json();
    }
    choice["finish_reason"] = c.finish_reason;
    choices.push_back(std::move(choice));
  }
  const int prompt_tokens = static_cast<int>(job.prompt.size());
  if (options.metrics)
    options.metrics->ObserveRequest(request.client, static_cast<uint64_t>(prompt_tokens),
                                    static_cast<uint64_t>(completion_tokens));
  if (!error.empty()) return JsonError(500, "generation failed: " + error);
  Json out = {{"id", (chat ? "chatcmpl-" : "cmpl-") + RandomHex(24)},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", UnixNow()},
              {"model", options.model_name},
              {"choices", std::move(choices)},
              {"usage", UsageJson(prompt_tokens, completion_tokens,
                                  done.empty() ? 0 : done[0].usage.cached_tokens)}};
  return JsonResponse(200, Dump(out));
}

// ---- streaming ----------------------------------------------------------------

namespace {

// One streamed API request: its choices' engine requests feed the event
// stream from the engine thread. Finalizing a choice (usage, metrics) needs
// both its handle (set after Submit returns) and its final delta (which may
// come first); whichever arrives second does it. The last choice sends the
// usage chunk and [DONE].
class StreamState : public std::enable_shared_from_this<StreamState> {
 public:
  StreamState(std::shared_ptr<EventStream> stream, const Model* tok, ServingMetrics* metrics,
              const Job& job, const Request& request, std::string model)
      : stream_(std::move(stream)),
        tok_(tok),
        metrics_(metrics),
        chat_(job.chat),
        logprobs_(job.top_logprobs >= 0),
        include_usage_(job.include_usage),
        prompt_tokens_(static_cast<int>(job.prompt.size())),
        client_(request.client),
        model_(std::move(model)),
        id_((job.chat ? "chatcmpl-" : "cmpl-") + RandomHex(24)),
        created_(UnixNow()),
        choices_(static_cast<size_t>(job.n)),
        remaining_(job.n) {}

  // The client went away: stop every engine request now.
  void ClientGone() {
    client_gone_.store(true);
    CancelAll();
  }

  // Submit failed for some choice: the response is an error, not this stream.
  void Abandon() {
    abandoned_.store(true);
    CancelAll();
  }

  // Chat's first chunk per choice: the role.
  void SendRoles() {
    for (size_t i = 0; i < choices_.size(); ++i) {
      Json delta = {{"role", "assistant"}, {"content", ""}};
      Send(Chunk(Json{{"index", i},
                      {"delta", std::move(delta)},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}}));
    }
  }

  void SetHandle(size_t i, std::shared_ptr<RequestHandle> h) {
    bool final_seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      choices_[i].handle = h;
      final_seen = choices_[i].final_seen;
    }
    if (client_gone_.load() || abandoned_.load() || failed_.load()) h->Cancel();
    if (final_seen) Finalize(i);
  }

  // Engine thread: a delta of choice i.
  void OnDelta(size_t i, const Delta& d) {
    if (!abandoned_.load() && !client_gone_.load()) {
      if (!d.text.empty() || (logprobs_ && !d.logprobs.empty())) Send(Chunk(Piece(i, d)));
      if (d.finished) {
        const bool engine_failed =
            d.finish_reason == "error" || (d.finish_reason == "cancelled" && !failed_.load());
        if (engine_failed) {
          Fail(d.error.empty() ? "the engine stopped the request" : d.error);
        } else if (d.finish_reason != "cancelled") {
          Json c = {{"index", i}};
          if (chat_) {
            c["delta"] = Json::object();
            c["logprobs"] = nullptr;
          } else {
            c["text"] = "";
            c["logprobs"] = nullptr;
          }
          c["finish_reason"] = d.finish_reason;
          Send(Chunk(std::move(c)));
        }
      }
    }
    if (!d.finished) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      choices_[i].final_seen = true;
      if (!choices_[i].handle) return;  // SetHandle finalizes
    }
    Finalize(i);
  }

 private:
  struct Choice {
    std::shared_ptr<RequestHandle> handle;
    bool final_seen = false, finalized = false;
    size_t text_offset = 0;
  };

  void CancelAll() {
    std::vector<std::shared_ptr<RequestHandle>> hs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Choice& c : choices_)
        if (c.handle) hs.push_back(c.handle);
    }
    for (auto& h : hs) h->Cancel();
  }

  // An engine error: one error event; the other choices stop.
  void Fail(const std::string& message) {
    if (failed_.exchange(true)) return;
    Json e = {{"message", "generation failed: " + message},
              {"type", "server_error"},
              {"param", nullptr},
              {"code", nullptr}};
    Send(SseEvent(Dump(Json{{"error", std::move(e)}})));
    CancelAll();
  }

  Json Piece(size_t i, const Delta& d) {
    Json c = {{"index", i}};
    if (chat_) {
      c["delta"] = Json{{"content", d.text}};
      c["logprobs"] = logprobs_ ? ChatLogprobs(*tok_, d.logprobs) : Json();
    } else {
      c["text"] = d.text;
      if (logprobs_) {
        size_t offset;
        {
          std::lock_guard<std::mutex> lock(mu_);
          offset = choices_[i].text_offset;
        }
        c["logprobs"] = CompletionLogprobs(*tok_, d.logprobs, &offset);
        std::lock_guard<std::mutex> lock(mu_);
        choices_[i].text_offset = offset;
      } else {
        c["logprobs"] = nullptr;
      }
    }
    c["finish_reason"] = nullptr;
    return c;
  }

  std::string Chunk(Json choice) {
    Json out = {{"id", id_},
                {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", Json::array({std::move(choice)})}};
    if (include_usage_) out["usage"] = nullptr;
    return SseEvent(Dump(out));
  }

  void Send(std::string event) {
    // No lock held: a send that finds the client too slow cancels the
    // stream, whose OnCancel takes mu_.
    stream_->Send(std::move(event));
  }

  void Finalize(size_t i) {
    std::shared_ptr<RequestHandle> h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (choices_[i].finalized || !choices_[i].handle || !choices_[i].final_seen) return;
      choices_[i].finalized = true;
      h = std::move(choices_[i].handle);  // breaks the handle -> callback -> state cycle
    }
    const Completion c = h->Wait();  // finished: returns at once
    const bool failed = c.finish_reason == "error" || c.finish_reason == "cancelled";
    if (metrics_ && !abandoned_.load()) metrics_->ObserveTimings(c.timings, failed);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      completion_tokens_ += c.usage.generated_tokens;
      if (i == 0) cached_tokens_ = c.usage.cached_tokens;
      last = --remaining_ == 0;
    }
    if (!last || abandoned_.load()) return;
    if (metrics_)
      metrics_->ObserveRequest(client_, static_cast<uint64_t>(prompt_tokens_),
                               static_cast<uint64_t>(completion_tokens_));
    if (include_usage_ && !failed_.load() && !client_gone_.load()) {
      Json out = {{"id", id_},
                  {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                  {"created", created_},
                  {"model", model_},
                  {"choices", Json::array()},
                  {"usage", UsageJson(prompt_tokens_, completion_tokens_, cached_tokens_)}};
      Send(SseEvent(Dump(out)));
    }
    Send(SseEvent("[DONE]"));
    stream_->Close();
  }

  std::shared_ptr<EventStream> stream_;
  const Model* tok_;
  ServingMetrics* metrics_;
  const bool chat_, logprobs_, include_usage_;
  const int prompt_tokens_;
  const std::string client_, model_, id_;
  const int64_t created_;
  std::atomic<bool> client_gone_{false}, abandoned_{false}, failed_{false};

  std::mutex mu_;
  std::vector<Choice> choices_;
  int remaining_;
  int completion_tokens_ = 0, cached_tokens_ = 0;
};

}  // namespace

Response OpenAiService::Impl::Stream(const Request& request, const Job& job, Engine* engine) {
  auto stream = std::make_shared<EventStream>();
  auto state = std::make_shared<StreamState>(stream, options.tokenizer, options.metrics, job,
                                             request, options.model_name);
  std::weak_ptr<StreamState> weak = state;
  stream->OnCancel([weak] {
    if (auto s = weak.lock()) s->ClientGone();
  });
  if (job.chat) state->SendRoles();
  for (int i = 0; i < job.n; ++i) {
    const size_t index = static_cast<size_t>(i);
    auto h = engine->Submit(EngineRequest(job, request, i),
                            [state, index](const Delta& d) { state->OnDelta(index, d); });
    if (!h.ok()) {
      state->Abandon();
      return ToResponse(SubmitError(h.status()));
    }
    state->SetHandle(index, std::move(h).value());
  }
  Response r;
  r.status = 200;
  r.content_type = "text/event-stream";
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.stream = std::move(stream);
  return r;
}

Response OpenAiService::Impl::Generate(const Request& request, bool chat) {
  Job job;
  if (MaybeError e = ParseJob(request, chat, &job)) return ToResponse(*e);
  const uint64_t salt = options.cache_per_client ? SaltOf(request.client) : 0;
  std::string why;
  Engine* engine = Pick(job, salt, &why);
  if (!engine) return ToResponse({503, why, "", "unavailable", 0});
  return job.stream ? Stream(request, job, engine) : Whole(request, job, engine);
}

OpenAiService::OpenAiService(OpenAiOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  const OpenAiOptions& o = impl_->options;
  impl_->context = o.context > 0 ? o.context : (o.tokenizer ? o.tokenizer->info().context : 0);
  impl_->created = UnixNow();
  impl_->placement = o.placement ? o.placement
                                 : std::make_shared<rt::EnginePlacement>(
                                       rt::PlacementEngines(o.engines), rt::Placement::kAffinity);
}

OpenAiService::~OpenAiService() = default;

const OpenAiOptions& OpenAiService::options() const { return impl_->options; }

Response OpenAiService::ListModels(const Request&) const {
  Json model = {{"id", impl_->options.model_name},
                {"object", "model"},
                {"created", impl_->created},
                {"owned_by", "braid"},
                {"max_model_len", impl_->context}};
  return JsonResponse(200, Dump(Json{{"object", "list"}, {"data", Json::array({model})}}));
}

Response OpenAiService::GetModel(const Request&, const std::string& id) const {
  if (id != impl_->options.model_name)
    return JsonError(404, "the model '" + id + "' does not exist", "", "model", "model_not_found");
  return JsonResponse(200, Dump(Json{{"id", impl_->options.model_name},
                                     {"object", "model"},
                                     {"created", impl_->created},
                                     {"owned_by", "braid"},
                                     {"max_model_len", impl_->context}}));
}

Response OpenAiService::Completions(const Request& request) {
  if (!impl_->options.tokenizer || impl_->options.engines.empty())
    return JsonError(503, "no model is loaded");
  return impl_->Generate(request, false);
}

Response OpenAiService::ChatCompletions(const Request& request) {
  if (!impl_->options.tokenizer || impl_->options.engines.empty())
    return JsonError(503, "no model is loaded");
  return impl_->Generate(request, true);
}

Response OpenAiService::Tokenize(const Request& request) const {
  if (!impl_->options.tokenizer) return JsonError(503, "no model is loaded");
  Json body;
  if (MaybeError e = ParseBody(request.body, &body)) return ToResponse(*e);
  if (MaybeError e = impl_->CheckModel(body)) return ToResponse(*e);
  std::vector<int32_t> tokens;
  if (Field(body, "messages")) {
    std::vector<ChatMessage> messages;
    if (MaybeError e = impl_->Messages(body, &messages)) return ToResponse(*e);
    bool add_generation_prompt = true;
    if (MaybeError e = GetBool(body, "add_generation_prompt", &add_generation_prompt))
      return ToResponse(*e);
    tokens = impl_->options.tokenizer->Tokenize(
        impl_->options.tokenizer->FormatChat(messages, add_generation_prompt));
  } else {
    const Json* p = Field(body, "prompt");
    if (!p || !p->is_string())
      return ToResponse(Bad("prompt", "prompt (a string) or messages is required"));
    tokens = impl_->options.tokenizer->TokenizeRaw(p->get<std::string>());
  }
  Json out = {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", impl_->context}};
  return JsonResponse(200, Dump(out));
}

Response OpenAiService::Detokenize(const Request& request) const {
  if (!impl_->options.tokenizer) return JsonError(503, "no model is loaded");
  Json body;
  if (MaybeError e = ParseBody(request.body, &body)) return ToResponse(*e);
  if (MaybeError e = impl_->CheckModel(body)) return ToResponse(*e);
  const Json* t = Field(body, "tokens");
  if (!t || !t->is_array()) return ToResponse(Bad("tokens", "tokens must be a list of token ids"));
  const int n_vocab = impl_->options.tokenizer->info().n_vocab;
  std::vector<int32_t> ids;
  for (const Json& x : *t) {
    if (!x.is_number_integer())
      return ToResponse(Bad("tokens", "tokens must be a list of token ids"));
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= n_vocab)
      return ToResponse(Bad("tokens", "token " + std::to_string(id) +
                                          " is outside the vocabulary [0, " +
                                          std::to_string(n_vocab) + ")"));
    ids.push_back(static_cast<int32_t>(id));
  }
  return JsonResponse(200, Dump(Json{{"prompt", impl_->options.tokenizer->Detokenize(ids)}}));
}

namespace {

// Handlers must not throw: anything unexpected (an allocation failure) is a 500.
template <typename Fn>
Handler Guarded(Fn fn) {
  return [fn](const Request& r, const Params& p) {
    try {
      return fn(r, p);
    } catch (const std::exception& e) {
      return JsonError(500, std::string("internal error: ") + e.what());
    } catch (...) {
      return JsonError(500, "internal error");
    }
  };
}

}  // namespace

void AddOpenAiRoutes(Router* router, std::shared_ptr<OpenAiService> service) {
  auto s = std::move(service);
  router->Add("GET", "/v1/models",
              Guarded([s](const Request& r, const Params&) { return s->ListModels(r); }));
  router->Add("GET", "/v1/models/{id}", Guarded([s](const Request& r, const Params& p) {
                return s->GetModel(r, p.at("id"));
              }));
  router->Add("POST", "/v1/completions",
              Guarded([s](const Request& r, const Params&) { return s->Completions(r); }));
  router->Add("POST", "/v1/chat/completions",
              Guarded([s](const Request& r, const Params&) { return s->ChatCompletions(r); }));
  router->Add("POST", "/tokenize",
              Guarded([s](const Request& r, const Params&) { return s->Tokenize(r); }));
  router->Add("POST", "/detokenize",
              Guarded([s](const Request& r, const Params&) { return s->Detokenize(r); }));
}

}  // namespace braid::http
