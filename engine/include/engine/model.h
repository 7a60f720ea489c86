// The embedded inference engine's model API: open a model file, tokenize,
// format chats, evaluate token sequences and generate.
//
// A Model is immutable after Open and may be shared by threads for
// tokenization; evaluation runs on the Model's backend (ModelOptions::device:
// the CPU's thread pool, or a GPU), which takes one forward pass at a time
// (concurrent Sequence::Eval calls wait for each other).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat.h"
#include "engine/prompt.h"
#include "engine/sampling.h"
#include "engine/spec.h"
#include "engine/status.h"

namespace braid {

// Options of the CPU backend (engine/backend/cpu); other backends ignore them.
struct CpuOptions {
  // true: fp32 activations and KV cache everywhere (the parity path); false:
  // activations quantized per block for integer dot products (the fast path;
  // `precision` below).
  bool exact = false;
  // Fast path only. Activations: split 16-bit (~15-bit integers through two int8
  // dot products; the default, closest to the exact path) or int8 (as llama.cpp;
  // about twice the batched matmul throughput, a little less accurate).
  enum class Precision { kSplit16, kInt8 };
  Precision precision = Precision::kSplit16;
  // Fast path only: the KV cache's element type where the attention kernels read
  // it natively (else fp32): fp16 (half the bytes of fp32, the default) or q8
  // (int8 with a scale per row: a quarter). The exact path keeps fp32.
  enum class KvCache { kF16, kF32, kQ8 };
  KvCache kv_cache = KvCache::kF16;
  // Time each stage of the forward passes of decode-only batches, per thread
  // (EngineStats::forward_stages); a clock read per stage and thread.
  bool profile_stages = false;
  // Fast path only: how decode streams the weights (kernels/stream.h). kAuto
  // times both variants on 16 decode steps of this model at load (once per
  // process per model size and thread count) and keeps the faster, unless
  // the environment variable BRAID_STREAM (nt, t0 or auto) forces one; the
  // others force one. The choice holds for the whole process.
  enum class Stream { kAuto, kNonTemporal, kTemporal };
  Stream stream = Stream::kAuto;
  // Narrow the thread pool while the machine is oversubscribed and widen it
  // again when it is not (kernels::ThreadPool's adaptive width). On whenever
  // ModelOptions::threads is 0; commands that pass a default count on set it.
  bool adapt_threads = false;
};

struct ModelOptions {
  std::string path;  // .gguf file, or a safetensors checkpoint directory
  // The tokenizer: "" reads the model's own (a GGUF file's metadata, or the
  // tokenizer.json beside a safetensors checkpoint); otherwise a tokenizer.json
  // file, or a directory holding one, read instead (tokenizer_config.json
  // beside it supplies the chat template).
  std::string tokenizer;
  // A checkpoint without a tokenizer is refused by Open, naming the folder and
  // the files looked for. false: it opens anyway and text tokenizes to
  // nothing (tools and tests that feed token ids).
  bool require_tokenizer = true;
  // Where the forward pass runs: "cpu", "cuda" (the first GPU), "cuda:N",
  // or "cuda:N+M" (one model split over those GPUs: tensor parallelism).
  std::string device = "cpu";
  // GPUs per model where the command opens one engine per GPU (--device
  // cuda:all or cuda:0,1): that many make one engine's group (ExpandDevices).
  int tensor_parallel = 1;
  int threads = 0;  // CPU threads; 0 = DefaultCpuThreads() (engine/system_probe.h)
  int context = 0;  // per-sequence capacity; 0 = min(trained context, 4096)
  // 0: every layer. N: only the first N layers, then the final norm and the
  // output head (a draft model made of the model's own first layers).
  int layers = 0;
  // The CUDA backend's layer weights: as the file has them (converted to
  // bf16), or FP8: each matrix of the layers quantized at load to e4m3 with
  // a scale per output row (the embedding and output head stay bf16).
  enum class Weights { kBf16, kFp8 };
  Weights weights = Weights::kBf16;
  // The CUDA backend's KV cache: bf16, or FP8 (e4m3: each value rounded to
  // nearest, beyond +-448 saturated, no scale), half the bytes a token.
  // The CPU backend keeps its own (CpuOptions::kv_cache) and refuses kFp8.
  enum class KvCache { kBf16, kFp8 };
  KvCache kv_cache = KvCache::kBf16;
  CpuOptions cpu;
};

struct ModelInfo {
  std::string path;
  std::string device;        // the backend in use: "cpu", "cuda:0"
  std::string arch;          // "llama", "mistral", "qwen2"
  std::string weight_types;  // e.g. "q4_1 x210, q8_0 x1, f32 x61"
  int n_vocab = 0, n_ctx_train = 0, context = 0, n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0;
  int64_t n_params = 0;
  uint64_t weight_bytes = 0;     // bytes of all weight tensors
  uint64_t bytes_per_token = 0;  // weight bytes read to decode one token (no embedding table)
  // Those bytes per matmul stage of a decode step, in order (Q K V, Wo, gate
  // and up, down per layer, then the output head): threads split each stage
  // by rows, with a barrier between stages.
  std::vector<uint64_t> decode_stages;
  std::string isa;  // kernels in use
  int threads = 0;
  // The weight-streaming variant in use and how it was chosen, e.g.
  // "t0 (measured: nt 8.61, t0 8.32 ms/token)" or "nt (forced)"; empty on the exact path.
  std::string stream;
};

class Sequence;

class Model {
 public:
  static Result<std::unique_ptr<Model>> Open(const ModelOptions& options);
  virtual ~Model() = default;

  virtual const ModelInfo& info() const = 0;

  // Pieces -> ids, BOS added when the model asks for it. Special-token text
  // ("<|im_start|>") becomes special ids only inside allow_special pieces
  // (engine/prompt.h); text from inputs goes in plain pieces, so that it
  // cannot forge a chat turn. BPE runs across the pieces' boundaries.
  virtual std::vector<int32_t> Tokenize(std::span<const PromptPiece> pieces) const = 0;
  // Text from an input: special-token text stays ordinary text.
  std::vector<int32_t> TokenizeText(std::string_view text) const {
    return TokenizeOne(text, false);
  }
  // A raw prompt its author wrote out in full, chat markup included:
  // special-token text becomes special ids. Never for text from inputs.
  std::vector<int32_t> TokenizeRaw(std::string_view text) const { return TokenizeOne(text, true); }
  virtual std::string Detokenize(std::span<const int32_t> ids) const = 0;
  // The bytes of one token (for streaming, see TextStream).
  virtual std::string TokenBytes(int32_t id) const = 0;
  // Whether `id` is a control token (BOS, <|im_start|>, ...), which
  // generated text leaves out.
  virtual bool IsSpecialToken(int32_t id) const = 0;
  virtual bool IsEndOfGeneration(int32_t id) const = 0;
  // Renders messages with the model's chat template: its markup as
  // allow_special pieces, roles and contents as plain pieces (a message cannot
  // open or close a turn). JoinPieces gives the text.
  virtual std::vector<PromptPiece> FormatChat(std::span<const ChatMessage> messages,
                                              bool add_generation_prompt) const = 0;

  // A new empty sequence with its own KV cache.
  virtual std::unique_ptr<Sequence> NewSequence() = 0;

 private:
  std::vector<int32_t> TokenizeOne(std::string_view text, bool allow_special) const {
    const PromptPiece piece{std::string(text), allow_special};
    return Tokenize(std::span<const PromptPiece>(&piece, 1));
  }
};

// One sequence's evaluation state (its KV cache). Not thread-safe.
class Sequence {
 public:
  virtual ~Sequence() = default;
  // Tokens evaluated so far.
  virtual int position() const = 0;
  virtual int capacity() const = 0;
  // Evaluates `tokens` after the current position. `logits` receives
  // n_vocab floats for the last token, or for every token when all_logits
  // (row-major [tokens.size(), n_vocab]). Errors: empty input, ids out of
  // range, capacity exceeded — the sequence is unchanged then.
  virtual Status Eval(std::span<const int32_t> tokens, std::vector<float>* logits,
                      bool all_logits = false) = 0;
  // Forgets every position >= n (n <= position()).
  virtual void Truncate(int n) = 0;
};

// Generated ids -> text that never ends inside a UTF-8 character: the bytes
// of an incomplete one are held back until it completes, invalid bytes
// become U+FFFD, special tokens are left out. Not thread-safe; `model` must
// outlive it.
class TextStream {
 public:
  explicit TextStream(const Model& model) : model_(model) {}
  // The newly complete text (possibly empty).
  std::string Push(int32_t id);
  // What is still held back: an incomplete character ends as U+FFFD.
  std::string Flush();

 private:
  const Model& model_;
  std::string pending_;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (stop string tokens included)
  std::string text;             // generated text, stop string removed
  std::string finish_reason;    // "stop" (EOG or stop string), "length"
  int prompt_tokens = 0;
  double prefill_seconds = 0;  // evaluating the prompt
  double decode_seconds = 0;   // everything after the first token
  // Speculative decoding (SpecOptions on): guesses proposed and accepted,
  // and forward passes after the prompt's.
  int spec_proposed = 0, spec_accepted = 0, decode_steps = 0;
};

// Generates from `prompt` on a fresh sequence. `on_text` receives UTF-8-safe
// text pieces as they are produced (never a broken character, never a partial
// stop string); returning false stops generation ("cancelled" is then not an
// error: finish_reason is "stop"). With `spec` on, each forward pass also
// checks the proposer's guesses of the next tokens; the output is the same
// token for token, greedy or sampled (the same seed gives the same text).
// `draft` is the draft model when spec.kind is kDraft (OpenDraftModel).
Result<GenerateResult> Generate(Model& model, std::span<const int32_t> prompt,
                                const SamplingParams& params,
                                const std::function<bool(std::string_view)>& on_text = {},
                                const SpecOptions& spec = {}, Model* draft = nullptr);

// The draft model `spec` names for `target` (opened with `options`), or null
// when spec.kind is not kDraft: spec.draft_model's file, or the target's own
// first spec.draft_layers layers (0: a quarter of them), on the target's
// device with its context. Errors: the file's, and a draft whose vocabulary
// differs from the target's (the token at the first differing id).
Result<std::unique_ptr<Model>> OpenDraftModel(const SpecOptions& spec, const ModelOptions& options,
                                              const Model& target);

}  // namespace braid
