// The Model implementation for the Llama family: owns the model file, the
// tokenizer, the weights' views, the thread pool and the forward pass.
#pragma once

#include <memory>
#include <mutex>

#include "engine/engine.h"
#include "engine/model.h"
#include "kernels/thread_pool.h"
#include "model/model_file.h"
#include "backend/cpu/llama_forward.h"
#include "backend/cpu/llama_weights.h"
#include "tokenizer/tokenizer.h"

namespace braid {

class LlamaModel final : public Model {
 public:
  static Result<std::unique_ptr<LlamaModel>> Load(const ModelOptions& options);

  const ModelInfo& info() const override { return info_; }
  std::vector<int32_t> Tokenize(std::span<const PromptPiece> pieces) const override;
  std::string Detokenize(std::span<const int32_t> ids) const override;
  std::string TokenBytes(int32_t id) const override;
  bool IsEndOfGeneration(int32_t id) const override;
  std::vector<PromptPiece> FormatChat(std::span<const ChatMessage> messages,
                                      bool add_generation_prompt) const override;
  std::unique_ptr<Sequence> NewSequence() override;

  // nullptr for checkpoints shipped without a tokenizer.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const ModelConfig& config() const { return file_->config(); }
  // Runs one forward batch; serialised by a mutex (one pool per model).
  void Forward(std::span<const BatchSegment> batch, KvStore& kv, float* logits);
  int max_chunk() const { return forward_->max_chunk(); }
  kernels::KvType KvTypeFor(int block_size) const { return forward_->KvTypeFor(block_size); }
  bool KTransposed(int block_size) const { return forward_->KTransposed(block_size); }
  // ModelOptions::profile_stages: the decode-only passes timed so far, and per
  // stage the seconds of each thread (waits for a running pass to finish).
  void StageProfile(uint64_t* passes, std::vector<EngineStats::StageTime>* stages);

 private:
  Result<std::string> ChooseStream(ModelOptions::Stream option);
  LlamaModel() = default;
  std::unique_ptr<ModelFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  LlamaWeights weights_;
  std::unique_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<LlamaForward> forward_;
  ModelInfo info_;
  ChatFormat chat_format_ = ChatFormat::kChatML;
  std::string default_system_;
  std::mutex forward_mu_;
};

}  // namespace braid
