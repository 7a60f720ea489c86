// Generate: prompt evaluation, then sample -> stream -> evaluate, one token at
// a time, on a fresh sequence.
#include <chrono>

#include "engine/model.h"
#include "runner/stop_matcher.h"
#include "sampling/sampler.h"

namespace braid {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Result<GenerateResult> Generate(Model& model, std::span<const int32_t> prompt,
                                const SamplingParams& params,
                                const std::function<bool(std::string_view)>& on_text) {
  BRAID_RETURN_IF_ERROR(params.Validate());
  if (prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  std::unique_ptr<Sequence> seq = model.NewSequence();
  if (static_cast<int64_t>(prompt.size()) >= seq->capacity())
    return Status::OutOfRange("the prompt has " + std::to_string(prompt.size()) +
                              " tokens but the context holds " + std::to_string(seq->capacity()));

  GenerateResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  BRAID_RETURN_IF_ERROR(seq->Eval(prompt, &logits));
  auto t1 = std::chrono::steady_clock::now();
  r.prefill_seconds = Seconds(t0, t1);

  Sampler sampler(params);
  TextStream decoder(model);
  StopMatcher stops(params.stop);
  bool keep_going = true;
  bool stop_string_hit = false;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    r.text += text;
    if (on_text && keep_going) keep_going = on_text(text);
  };

  r.finish_reason = "length";
  for (int i = 0; i < params.max_tokens; ++i) {
    if (!Sampler::AllFinite(logits)) return Sampler::NonFiniteError(seq->position() - 1);
    const int32_t id = sampler.Sample(logits, history);
    const bool eog = !params.ignore_eos && model.IsEndOfGeneration(id);
    bool stop_token = false;
    for (int32_t s : params.stop_tokens) stop_token |= s == id;
    if (eog || stop_token) {
      r.finish_reason = "stop";
      break;
    }
    r.tokens.push_back(id);
    history.push_back(id);
    emit(stops.Push(decoder.Push(id), &stop_string_hit));
    if (stop_string_hit || !keep_going) {
      r.finish_reason = "stop";
      break;
    }
    if (i + 1 == params.max_tokens) break;
    if (seq->position() + 1 > seq->capacity()) break;
    BRAID_RETURN_IF_ERROR(seq->Eval(std::span<const int32_t>(&id, 1), &logits));
  }
  // Release what the UTF-8 decoder and the stop matcher still hold, unless a
  // stop string ended the text.
  if (!stop_string_hit) {
    bool stopped = false;
    emit(stops.Push(decoder.Flush(), &stopped));
    if (!stopped) emit(stops.Flush());
  }
  r.decode_seconds = Seconds(t1, std::chrono::steady_clock::now());
  return r;
}

}  // namespace braid
