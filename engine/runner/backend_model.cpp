#include "runner/backend_model.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "kernels/dtype.h"
#include "model/family.h"

namespace braid {
namespace {

constexpr int kSeqBlockSize = 16;

// A sequence with private KV memory whose block table is the identity.
class BackendSequence final : public Sequence {
 public:
  BackendSequence(BackendModel& model, int capacity)
      : model_(model), capacity_(capacity), table_((capacity + kSeqBlockSize - 1) / kSeqBlockSize) {
    for (size_t i = 0; i < table_.size(); ++i) table_[i] = static_cast<int32_t>(i);
    auto kv = model.backend().AllocateKv(static_cast<int>(table_.size()), kSeqBlockSize);
    if (kv.ok()) {
      kv_ = std::move(kv).value();
    } else {
      kv_status_ = kv.status();  // every Eval reports it
    }
  }

  int position() const override { return pos_; }
  int capacity() const override { return capacity_; }

  Status Eval(std::span<const int32_t> tokens, std::vector<float>* logits,
              bool all_logits) override {
    if (!kv_) return kv_status_;
    if (tokens.empty()) return Status::InvalidArgument("no tokens to evaluate");
    const int n_vocab = model_.config().n_vocab;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= n_vocab)
        return Status::InvalidArgument("token id " + std::to_string(tokens[i]) + " at index " +
                                       std::to_string(i) + " is outside the vocabulary [0, " +
                                       std::to_string(n_vocab) + ")");
    if (pos_ + static_cast<int64_t>(tokens.size()) > capacity_)
      return Status::OutOfRange(std::to_string(pos_) + " + " + std::to_string(tokens.size()) +
                                " tokens exceed the context of " + std::to_string(capacity_));
    Backend& backend = model_.backend();
    const size_t chunk = static_cast<size_t>(backend.max_chunk());
    const size_t n = tokens.size();
    const int start = pos_;
    if (logits) logits->resize((all_logits ? n : 1) * static_cast<size_t>(n_vocab));
    for (size_t b = 0; b < n; b += chunk) {
      const size_t m = std::min(chunk, n - b);
      const bool last = b + m == n;
      float* out = nullptr;
      if (logits && all_logits)
        out = logits->data() + b * n_vocab;
      else if (logits && last)
        out = logits->data();
      // Chunks whose logits nobody wants still compute the last row's head
      // into scratch; it costs one row of the output matmul.
      if (!out) {
        scratch_.resize(n_vocab);
        out = scratch_.data();
      }
      BatchSegment seg;
      seg.tokens = tokens.data() + b;
      seg.n_tokens = static_cast<int>(m);
      seg.pos0 = pos_;
      seg.block_table = table_.data();
      seg.logits_from = logits && all_logits ? seg.pos0 : seg.pos0 + seg.n_tokens - 1;
      const Status s = backend.Forward(std::span<const BatchSegment>(&seg, 1), *kv_, out);
      if (!s.ok()) {
        pos_ = start;  // the sequence is unchanged
        return s;
      }
      pos_ += static_cast<int>(m);
    }
    return Status::Ok();
  }

  void Truncate(int n) override { pos_ = std::clamp(n, 0, pos_); }

 private:
  BackendModel& model_;
  int capacity_;
  std::vector<int32_t> table_;
  std::unique_ptr<KvMemory> kv_;
  Status kv_status_;
  int pos_ = 0;
  std::vector<float> scratch_;
};

// The tensors of `family` the forward pass reads that `f` holds: globals
// (layer -1), then every layer's. `fn(spec, layer, tensor)`.
template <typename F>
void ForEachReadTensor(const ModelFile& f, const Family& family, F&& fn) {
  for (const TensorSpec& t : family.globals)
    if (const TensorInfo* x = t.read ? f.Find(TensorName(t)) : nullptr) fn(t, -1, *x);
  for (int l = 0; l < f.config().n_layer; ++l)
    for (const TensorSpec& t : family.layer)
      if (const TensorInfo* x = t.read ? f.Find(TensorName(t, l)) : nullptr) fn(t, l, *x);
}

// The model's part of ModelInfo: what the file holds, whatever the backend.
void DescribeFile(const ModelFile& f, ModelInfo* i) {
  const ModelConfig& c = f.config();
  const Family& family = *FindFamily(c.arch);
  i->arch = ArchName(c.arch);
  i->n_vocab = c.n_vocab;
  i->n_ctx_train = c.n_ctx;
  i->n_layer = c.n_layer;
  i->n_embd = c.n_embd;
  i->n_head = c.n_head;
  i->n_head_kv = c.n_head_kv;
  // Weight types ("q4_1 x210, q8_0 x1, f32 x61") and bytes.
  std::map<std::string, int> counts;
  ForEachReadTensor(f, family, [&](const TensorSpec&, int, const TensorInfo& t) {
    counts[kernels::Info(t.type).name]++;
    i->weight_bytes += t.nbytes;
  });
  for (const auto& [name, count] : counts)
    i->weight_types += (i->weight_types.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  // Parameters: the layers' (those the config asks for), the embedding table
  // and the output head where it is a matrix of its own (the final norm's
  // n_embd are left out, as they always were).
  ForEachReadTensor(f, family, [&](const TensorSpec& s, int layer, const TensorInfo& t) {
    if (layer >= 0 && TensorRequired(s, c)) i->n_params += t.elements();
  });
  const TensorInfo* embd = f.Find(TensorName(*FindTensorSpec(family, TensorRole::kTokenEmbd)));
  const TensorInfo* head = f.Find(TensorName(*FindTensorSpec(family, TensorRole::kOutput)));
  i->n_params += embd->elements();
  if (!c.tied_embeddings && head != nullptr) i->n_params += head->elements();
}

// ChatML templates that open with a default system turn embed its text as a
// literal: '<|im_start|>system\n' + TEXT + '<|im_end|>'. Returns TEXT or "".
std::string DefaultSystemPrompt(const std::string& tmpl) {
  const std::string open = "<|im_start|>system\\n";
  size_t a = tmpl.find(open);
  if (a == std::string::npos) return "";
  a += open.size();
  size_t b = tmpl.find("<|im_end|>", a);
  if (b == std::string::npos) return "";
  std::string text = tmpl.substr(a, b - a);
  if (text.find('{') != std::string::npos || text.find('\'') != std::string::npos) return "";
  return text;
}

// The tokenizer options.tokenizer names (a tokenizer.json file or a
// directory holding one), else the model's own: its GGUF metadata, or the
// tokenizer.json beside a safetensors checkpoint. A checkpoint without one
// is refused unless options.require_tokenizer is false (null then): every
// prompt would tokenize to nothing and fail as "empty" much later.
Result<std::unique_ptr<Tokenizer>> OpenTokenizer(const ModelFile& file,
                                                 const ModelOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!options.tokenizer.empty()) {
    if (!fs::is_directory(options.tokenizer, ec)) return Tokenizer::FromJsonFile(options.tokenizer);
    const fs::path json = fs::path(options.tokenizer) / "tokenizer.json";
    if (!fs::exists(json, ec))
      return Status::NotFound("tokenizer " + options.tokenizer +
                              ": the folder has no tokenizer.json");
    return Tokenizer::FromJsonFile(json.string());
  }
  if (file.gguf()) return Tokenizer::FromGguf(*file.gguf());
  const fs::path json = file.tokenizer_json_path();
  if (fs::exists(json, ec)) return Tokenizer::FromJsonFile(json.string());
  if (!options.require_tokenizer) return std::unique_ptr<Tokenizer>();
  // Name what is there that we do not read: SentencePiece and vocab/merges files.
  const fs::path dir = json.parent_path();
  std::string others;
  for (const char* name : {"tokenizer.model", "vocab.json", "merges.txt"})
    if (fs::exists(dir / name, ec)) others += std::string(others.empty() ? "" : ", ") + name;
  return Status::NotFound(
      options.path + ": no tokenizer: looked for " + json.string() +
      " (with tokenizer_config.json beside it for the chat template)" +
      (others.empty() ? std::string() : "; found " + others + ", which braid does not read") +
      "; give a tokenizer.json file, or a folder holding one, with --tokenizer PATH");
}

}  // namespace

Result<std::unique_ptr<Model>> Model::Open(const ModelOptions& options) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<BackendModel> m, BackendModel::Load(options));
  return std::unique_ptr<Model>(std::move(m));
}

Result<std::unique_ptr<BackendModel>> BackendModel::Load(const ModelOptions& options) {
  if (options.threads < 0 || options.threads > 1024)
    return Status::InvalidArgument("threads must be in [0, 1024], got " +
                                   std::to_string(options.threads));
  if (options.context < 0)
    return Status::InvalidArgument("context must be >= 0, got " + std::to_string(options.context));
  BRAID_RETURN_IF_ERROR(ParseDevice(options.device).status());
  std::unique_ptr<BackendModel> m(new BackendModel());
  BRAID_ASSIGN_OR_RETURN(m->file_, LoadModelFile(options.path));
  if (options.layers < 0)
    return Status::InvalidArgument("layers must be >= 0, got " + std::to_string(options.layers));
  if (options.layers > 0) BRAID_RETURN_IF_ERROR(m->file_->KeepLayers(options.layers));
  const ModelConfig& c = m->file_->config();
  BRAID_ASSIGN_OR_RETURN(m->tokenizer_, OpenTokenizer(*m->file_, options));
  if (m->tokenizer_ && m->tokenizer_->n_vocab() > c.n_vocab)
    return Status::Corruption((options.tokenizer.empty() ? options.path : options.tokenizer) +
                              ": tokenizer has " + std::to_string(m->tokenizer_->n_vocab()) +
                              " tokens but the model only " + std::to_string(c.n_vocab));

  int context = options.context;
  if (context == 0) context = std::min(c.n_ctx > 0 ? c.n_ctx : 4096, 4096);
  BRAID_ASSIGN_OR_RETURN(m->backend_, OpenBackend(*m->file_, options, context));

  ModelInfo& i = m->info_;
  i.path = options.path;
  i.device = m->backend_->name();
  i.context = context;
  DescribeFile(*m->file_, &i);
  m->backend_->Describe(&i);

  if (m->tokenizer_) {
    const std::string& tmpl = m->tokenizer_->chat_template();
    ChatFormat fallback =
        c.arch == Arch::kLlama && m->tokenizer_->pre_tokenizer() == PreTokenizer::kSentencePiece
            ? ChatFormat::kLlama2
            : ChatFormat::kChatML;
    m->chat_format_ = DetectChatFormat(tmpl, fallback);
    if (m->chat_format_ == ChatFormat::kChatML) m->default_system_ = DefaultSystemPrompt(tmpl);
  }
  return m;
}

std::vector<int32_t> BackendModel::Tokenize(std::span<const PromptPiece> pieces) const {
  if (!tokenizer_) return {};
  return tokenizer_->Encode(pieces, tokenizer_->add_bos_by_default());
}

std::string BackendModel::Detokenize(std::span<const int32_t> ids) const {
  return tokenizer_ ? tokenizer_->Decode(ids) : std::string();
}

std::string BackendModel::TokenBytes(int32_t id) const {
  return tokenizer_ ? tokenizer_->TokenBytes(id) : std::string();
}

bool BackendModel::IsSpecialToken(int32_t id) const {
  return tokenizer_ && tokenizer_->IsSpecial(id);
}

bool BackendModel::IsEndOfGeneration(int32_t id) const {
  return tokenizer_ && tokenizer_->IsEog(id);
}

std::vector<PromptPiece> BackendModel::FormatChat(std::span<const ChatMessage> messages,
                                                  bool add_generation_prompt) const {
  return ApplyChatTemplatePieces(chat_format_, messages, add_generation_prompt, default_system_);
}

std::unique_ptr<Sequence> BackendModel::NewSequence() {
  return std::make_unique<BackendSequence>(*this, info_.context);
}

}  // namespace braid
