#include "remote/openai_stream.h"

#include <nlohmann/json.hpp>

namespace braid::remote {
namespace {

using nlohmann::json;

Status Bad(const std::string& what, std::string_view data) {
  constexpr size_t kShown = 200;
  std::string shown(data.substr(0, kShown));
  if (data.size() > kShown) shown += "...";
  return Status::Corruption("streamed chunk: " + what + " in '" + shown + "'");
}

// An integer field that may be absent or null.
bool ReadCount(const json& obj, const char* key, int* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) return false;
  *out = static_cast<int>(it->get<int64_t>());
  return true;
}

}  // namespace

std::string CompletionRequestBody(const GenerationRequest& request, const std::string& model) {
  const SamplingParams& s = request.sampling;
  json body;
  body["model"] = model;
  if (!request.prompt.empty())
    body["prompt"] = request.prompt;
  else
    body["prompt"] = request.prompt_text;
  body["max_tokens"] = s.max_tokens;
  body["temperature"] = s.temperature;
  body["top_p"] = s.top_p;
  // Folded into 31 bits: every such server takes that range (llama-server's
  // seed is 32-bit, vLLM's a signed 64-bit one); smaller seeds pass unchanged.
  body["seed"] = static_cast<int64_t>((s.seed ^ (s.seed >> 32)) & 0x7fffffff);
  if (!s.stop.empty()) body["stop"] = s.stop;
  if (s.frequency_penalty != 0) body["frequency_penalty"] = s.frequency_penalty;
  if (s.presence_penalty != 0) body["presence_penalty"] = s.presence_penalty;
  // Beyond the OpenAI fields, only when asked for: vLLM and SGLang take
  // these names; a strict OpenAI server would refuse them.
  if (s.repetition_penalty != 1.0f) body["repetition_penalty"] = s.repetition_penalty;
  if (!s.stop_tokens.empty()) body["stop_token_ids"] = s.stop_tokens;
  if (s.ignore_eos) body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (request.top_logprobs >= 0) body["logprobs"] = request.top_logprobs;
  return body.dump();
}

void SseReader::Feed(std::string_view bytes, std::vector<std::string>* events) {
  partial_.append(bytes);
  size_t start = 0;
  while (true) {
    const size_t nl = partial_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(partial_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Line(line, events);
    start = nl + 1;
  }
  partial_.erase(0, start);
}

std::optional<std::string> SseReader::Finish() {
  if (!partial_.empty()) {
    std::vector<std::string> ignored;
    std::string last = std::move(partial_);
    partial_.clear();
    if (!last.empty() && last.back() == '\r') last.pop_back();
    Line(last, &ignored);
  }
  if (!has_data_) return std::nullopt;
  has_data_ = false;
  return std::move(data_);
}

void SseReader::Line(std::string_view line, std::vector<std::string>* events) {
  if (line.empty()) {  // the end of an event
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (!line.starts_with("data:")) return;  // comments and other fields
  line.remove_prefix(5);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(line);
  has_data_ = true;
}

Result<CompletionChunk> ParseCompletionChunk(std::string_view data) {
  CompletionChunk c;
  if (data == "[DONE]") {
    c.done = true;
    return c;
  }
  const json j = json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("not JSON", data);
  if (!j.is_object()) return Bad("not a JSON object", data);
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    c.error = ErrorBodyMessage(std::string(data));
    return c;
  }
  if (auto choices = j.find("choices"); choices != j.end() && !choices->is_null()) {
    if (!choices->is_array()) return Bad("\"choices\" is not an array", data);
    if (!choices->empty()) {
      const json& ch = (*choices)[0];
      if (!ch.is_object()) return Bad("choices[0] is not an object", data);
      if (auto t = ch.find("text"); t != ch.end() && !t->is_null()) {
        if (!t->is_string()) return Bad("choices[0].text is not a string", data);
        c.text = t->get<std::string>();
      }
      if (auto f = ch.find("finish_reason"); f != ch.end() && !f->is_null()) {
        if (!f->is_string()) return Bad("choices[0].finish_reason is not a string", data);
        c.finish_reason = f->get<std::string>();
      }
      if (auto lp = ch.find("logprobs"); lp != ch.end() && lp->is_object()) {
        auto tl = lp->find("token_logprobs");
        if (tl != lp->end() && tl->is_array())
          for (const json& v : *tl) c.logprobs.push_back(v.is_number() ? v.get<float>() : 0.0f);
      }
    }
  }
  if (auto u = j.find("usage"); u != j.end() && !u->is_null()) {
    if (!u->is_object()) return Bad("\"usage\" is not an object", data);
    c.has_usage = true;
    if (!ReadCount(*u, "prompt_tokens", &c.usage.prompt_tokens) ||
        !ReadCount(*u, "completion_tokens", &c.usage.generated_tokens))
      return Bad("a usage count is not a non-negative integer", data);
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
      if (!ReadCount(*d, "cached_tokens", &c.usage.cached_tokens))
        return Bad("usage.prompt_tokens_details.cached_tokens is not a non-negative integer", data);
  }
  return c;
}

std::string ErrorBodyMessage(std::string_view body) {
  const json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j.is_object()) {
    for (const char* key : {"error", "message", "detail"}) {
      auto it = j.find(key);
      if (it == j.end()) continue;
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object()) {
        auto m = it->find("message");
        if (m != it->end() && m->is_string()) return m->get<std::string>();
      }
      return it->dump();
    }
  }
  constexpr size_t kShown = 300;
  std::string shown(body.substr(0, kShown));
  if (body.size() > kShown) shown += "...";
  return shown;
}

}  // namespace braid::remote
