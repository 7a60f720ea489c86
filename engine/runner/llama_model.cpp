#include "runner/llama_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "kernels/quant.h"
#include "kernels/stream.h"

namespace braid {
namespace {

constexpr int kMaxChunk = 256;  // tokens per forward pass
constexpr int kSeqBlockSize = 16;

// A sequence with a private KV store whose block table is the identity.
class LlamaSequence final : public Sequence {
 public:
  LlamaSequence(LlamaModel& model, int capacity)
      : model_(model),
        kv_(model.config().n_layer, (capacity + kSeqBlockSize - 1) / kSeqBlockSize, kSeqBlockSize,
            model.config().n_head_kv, model.config().head_dim, model.KvTypeFor(kSeqBlockSize),
            model.KTransposed(kSeqBlockSize)),
        capacity_(capacity),
        table_(kv_.n_blocks()) {
    for (int i = 0; i < kv_.n_blocks(); ++i) table_[i] = i;
  }

  int position() const override { return pos_; }
  int capacity() const override { return capacity_; }

  Status Eval(std::span<const int32_t> tokens, std::vector<float>* logits,
              bool all_logits) override {
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
    const size_t n = tokens.size();
    if (logits) logits->resize((all_logits ? n : 1) * static_cast<size_t>(n_vocab));
    for (size_t b = 0; b < n; b += model_.max_chunk()) {
      const size_t m = std::min<size_t>(model_.max_chunk(), n - b);
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
      model_.Forward(std::span<const BatchSegment>(&seg, 1), kv_, out);
      pos_ += static_cast<int>(m);
    }
    return Status::Ok();
  }

  void Truncate(int n) override { pos_ = std::clamp(n, 0, pos_); }

 private:
  LlamaModel& model_;
  KvStore kv_;
  int capacity_;
  std::vector<int32_t> table_;
  int pos_ = 0;
  std::vector<float> scratch_;
};

std::string DescribeTypes(const ModelFile& f, const ModelConfig& c) {
  (void)c;
  std::map<std::string, int> counts;
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight", "output.weight"};
  for (int i = 0; i < c.n_layer; ++i)
    for (const char* s :
         {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
          "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
          "ffn_down.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias"})
      names.push_back("blk." + std::to_string(i) + "." + s);
  for (const std::string& n : names)
    if (const TensorInfo* t = f.Find(n)) counts[kernels::Info(t->type).name]++;
  std::string out;
  for (const auto& [name, count] : counts)
    out += (out.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  return out;
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

// Median seconds of `steps` single-token steps of `seq` (after `warm` untimed
// ones), from position 0; infinity if a step fails.
double StepSeconds(Sequence& seq, int warm, int steps) {
  seq.Truncate(0);
  std::vector<double> ts;
  std::vector<float> logits;
  const int32_t id = 0;
  for (int i = 0; i < warm + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!seq.Eval(std::span<const int32_t>(&id, 1), &logits).ok())
      return std::numeric_limits<double>::infinity();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (i >= warm) ts.push_back(dt.count());
  }
  std::nth_element(ts.begin(), ts.begin() + ts.size() / 2, ts.end());
  return ts[ts.size() / 2];
}

// Measured choices of this process by (weight bytes per token, threads):
// what decides between the variants is how the working set compares with the
// caches the threads share.
struct MeasuredStream {
  kernels::StreamVariant choice;
  std::string note;
};
std::mutex g_stream_mu;
std::map<std::pair<uint64_t, int>, MeasuredStream> g_streams;

}  // namespace

// Sets the weight-streaming variant (kernels/stream.h) and says how it was
// chosen: forced by the options or BRAID_STREAM, else measured on this model
// (once per process for its size and thread count) on a short sequence of
// its own: two rounds, each 1 + 3 single-token steps under each variant in
// turn; the variant with the lower best-round median step time is kept (the
// non-temporal one on a tie within 1%).
Result<std::string> LlamaModel::ChooseStream(ModelOptions::Stream option) {
  using kernels::StreamVariant;
  if (option == ModelOptions::Stream::kAuto) {
    if (const char* env = std::getenv("BRAID_STREAM");
        env != nullptr && std::string(env) != "auto") {
      StreamVariant v;
      if (!kernels::ParseStreamVariant(env, &v))
        return Status::InvalidArgument(std::string("BRAID_STREAM must be nt, t0 or auto, got '") +
                                       env + "'");
      kernels::SetStreamVariant(v);
      return std::string(kernels::StreamVariantName(v)) + " (forced by BRAID_STREAM)";
    }
  } else {
    const StreamVariant v = option == ModelOptions::Stream::kTemporal ? StreamVariant::kTemporal
                                                                      : StreamVariant::kNonTemporal;
    kernels::SetStreamVariant(v);
    return std::string(kernels::StreamVariantName(v)) + " (forced)";
  }
  std::lock_guard<std::mutex> lock(g_stream_mu);
  const auto key = std::make_pair(info_.bytes_per_token, info_.threads);
  auto it = g_streams.find(key);
  if (it == g_streams.end()) {
    constexpr int kWarm = 1, kSteps = 3, kRounds = 2;
    if (info_.context < kWarm + kSteps) {
      kernels::SetStreamVariant(StreamVariant::kNonTemporal);
      return std::string("nt (default: the context is too short to time decode)");
    }
    LlamaSequence seq(*this, kWarm + kSteps);  // a KV cache of just those positions
    const StreamVariant variants[2] = {StreamVariant::kNonTemporal, StreamVariant::kTemporal};
    double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    for (int r = 0; r < kRounds; ++r)
      for (int v = 0; v < 2; ++v) {
        kernels::SetStreamVariant(variants[v]);
        best[v] = std::min(best[v], StepSeconds(seq, kWarm, kSteps));
      }
    MeasuredStream m;
    m.choice = best[1] < 0.99 * best[0] ? StreamVariant::kTemporal : StreamVariant::kNonTemporal;
    char note[160];
    std::snprintf(note, sizeof note, "measured: nt %.2f, t0 %.2f ms/token", 1e3 * best[0],
                  1e3 * best[1]);
    m.note = note;
    it = g_streams.emplace(key, std::move(m)).first;
  }
  kernels::SetStreamVariant(it->second.choice);
  return std::string(kernels::StreamVariantName(it->second.choice)) + " (" + it->second.note + ")";
}

Result<std::unique_ptr<Model>> Model::Open(const ModelOptions& options) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m, LlamaModel::Load(options));
  return std::unique_ptr<Model>(std::move(m));
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::Load(const ModelOptions& options) {
  if (options.threads < 0 || options.threads > 1024)
    return Status::InvalidArgument("threads must be in [0, 1024], got " +
                                   std::to_string(options.threads));
  if (options.context < 0)
    return Status::InvalidArgument("context must be >= 0, got " + std::to_string(options.context));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  BRAID_ASSIGN_OR_RETURN(m->file_, LoadModelFile(options.path));
  const ModelConfig& c = m->file_->config();
  if (m->file_->gguf()) {
    BRAID_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromGguf(*m->file_->gguf()));
  } else if (!m->file_->tokenizer_json_path().empty()) {
    auto tok = Tokenizer::FromJsonFile(m->file_->tokenizer_json_path());
    if (tok.ok()) {
      m->tokenizer_ = std::move(tok).value();
    } else if (tok.status().code() != StatusCode::kNotFound) {
      return tok.status();
    }
  }
  if (m->tokenizer_ && m->tokenizer_->n_vocab() > c.n_vocab)
    return Status::Corruption(options.path + ": tokenizer has " +
                              std::to_string(m->tokenizer_->n_vocab()) +
                              " tokens but the model only " + std::to_string(c.n_vocab));
  BRAID_ASSIGN_OR_RETURN(m->weights_, BuildLlamaWeights(*m->file_));
  if (!options.exact) InterleaveForFastPath(&m->weights_);

  int threads = options.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  int context = options.context;
  if (context == 0) context = std::min(c.n_ctx > 0 ? c.n_ctx : 4096, 4096);
  m->pool_ = std::make_unique<kernels::ThreadPool>(threads);
  m->forward_ =
      std::make_unique<LlamaForward>(c, m->weights_, *m->pool_, options, kMaxChunk, context);

  ModelInfo& i = m->info_;
  i.path = options.path;
  i.arch = ArchName(c.arch);
  i.weight_types = DescribeTypes(*m->file_, c);
  i.n_vocab = c.n_vocab;
  i.n_ctx_train = c.n_ctx;
  i.context = context;
  i.n_layer = c.n_layer;
  i.n_embd = c.n_embd;
  i.n_head = c.n_head;
  i.n_head_kv = c.n_head_kv;
  auto add = [&](const kernels::MatrixView& w) {
    i.n_params += w.rows * w.cols;
    i.bytes_per_token += w.rows * w.row_bytes;
    i.decode_stages.back() += w.rows * w.row_bytes;
  };
  for (const LayerWeights& l : m->weights_.layers) {
    for (const auto& stage : {std::vector<const kernels::MatrixView*>{&l.wq, &l.wk, &l.wv},
                              {&l.wo},
                              {&l.w_gate, &l.w_up},
                              {&l.w_down}}) {
      i.decode_stages.push_back(0);
      for (const auto* w : stage) add(*w);
    }
    i.n_params += static_cast<int64_t>(l.attn_norm.size() + l.ffn_norm.size() + l.bq.size() +
                                       l.bk.size() + l.bv.size());
  }
  i.decode_stages.push_back(0);
  add(m->weights_.output);
  if (!c.tied_embeddings && m->file_->Find("output.weight"))
    i.n_params += m->weights_.token_embd->elements();
  for (const char* n : {"token_embd.weight", "output.weight", "output_norm.weight"})
    if (const TensorInfo* t = m->file_->Find(n)) i.weight_bytes += t->nbytes;
  for (int l = 0; l < c.n_layer; ++l)
    for (const char* s : {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                          "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
                          "ffn_up.weight", "ffn_down.weight"})
      if (const TensorInfo* t = m->file_->Find("blk." + std::to_string(l) + "." + s))
        i.weight_bytes += t->nbytes;
  i.isa = options.exact
              ? std::string("fp32 (") + kernels::KernelIsa() + ")"
              : std::string(kernels::KernelIsa()) +
                    (options.precision == ModelOptions::Precision::kInt8 ? ", int8" : ", split16") +
                    " activations";
  switch (m->KvTypeFor(kSeqBlockSize)) {
    case kernels::KvType::kF32:
      i.isa += ", fp32 KV";
      break;
    case kernels::KvType::kF16:
      i.isa += ", fp16 KV";
      break;
    case kernels::KvType::kQ8:
      i.isa += ", q8 KV";
      break;
  }
  i.threads = threads;

  if (m->tokenizer_) {
    const std::string& tmpl = m->tokenizer_->chat_template();
    ChatFormat fallback =
        c.arch == Arch::kLlama && m->tokenizer_->pre_tokenizer() == PreTokenizer::kSentencePiece
            ? ChatFormat::kLlama2
            : ChatFormat::kChatML;
    m->chat_format_ = DetectChatFormat(tmpl, fallback);
    if (m->chat_format_ == ChatFormat::kChatML) m->default_system_ = DefaultSystemPrompt(tmpl);
  }
  if (!options.exact) {
    BRAID_ASSIGN_OR_RETURN(i.stream, m->ChooseStream(options.stream));
  }
  return m;
}

std::vector<int32_t> LlamaModel::Tokenize(std::span<const PromptPiece> pieces) const {
  if (!tokenizer_) return {};
  return tokenizer_->Encode(pieces, tokenizer_->add_bos_by_default());
}

std::string LlamaModel::Detokenize(std::span<const int32_t> ids) const {
  return tokenizer_ ? tokenizer_->Decode(ids) : std::string();
}

std::string LlamaModel::TokenBytes(int32_t id) const {
  return tokenizer_ ? tokenizer_->TokenBytes(id) : std::string();
}

bool LlamaModel::IsEndOfGeneration(int32_t id) const { return tokenizer_ && tokenizer_->IsEog(id); }

std::vector<PromptPiece> LlamaModel::FormatChat(std::span<const ChatMessage> messages,
                                                bool add_generation_prompt) const {
  return ApplyChatTemplatePieces(chat_format_, messages, add_generation_prompt, default_system_);
}

std::unique_ptr<Sequence> LlamaModel::NewSequence() {
  return std::make_unique<LlamaSequence>(*this, info_.context);
}

void LlamaModel::Forward(std::span<const BatchSegment> batch, KvStore& kv, float* logits) {
  std::lock_guard<std::mutex> lock(forward_mu_);
  forward_->Forward(batch, kv, logits);
}

void LlamaModel::StageProfile(uint64_t* passes, std::vector<EngineStats::StageTime>* stages) {
  std::lock_guard<std::mutex> lock(forward_mu_);
  *passes = forward_->profiled_passes();
  stages->clear();
  for (int s = 0; s < LlamaForward::kStages; ++s) {
    EngineStats::StageTime st{LlamaForward::StageName(s), {}};
    for (int t = 0; t < pool_->size(); ++t) st.seconds.push_back(forward_->stage_seconds(t)[s]);
    stages->push_back(std::move(st));
  }
}

}  // namespace braid
