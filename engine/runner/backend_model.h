// The Model implementation: the model file, its tokenizer and chat format,
// and the Backend that runs its forward passes (engine/backend/). Sequences
// hold KV memory of their own from the backend.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "engine/model.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace braid {

class BackendModel final : public Model {
 public:
  // Loads the file, its tokenizer and the backend options.device names.
  // Errors: bad options, the file's (model/model_file.h), the tokenizer's,
  // the backend's (OpenBackend).
  static Result<std::unique_ptr<BackendModel>> Load(const ModelOptions& options);

  const ModelInfo& info() const override { return info_; }
  std::vector<int32_t> Tokenize(std::span<const PromptPiece> pieces) const override;
  std::string Detokenize(std::span<const int32_t> ids) const override;
  std::string TokenBytes(int32_t id) const override;
  bool IsSpecialToken(int32_t id) const override;
  bool IsEndOfGeneration(int32_t id) const override;
  std::vector<PromptPiece> FormatChat(std::span<const ChatMessage> messages,
                                      bool add_generation_prompt) const override;
  std::unique_ptr<Sequence> NewSequence() override;

  // nullptr for checkpoints shipped without a tokenizer.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const ModelConfig& config() const { return file_->config(); }
  // Runs the forward passes; Forward is serialised inside.
  Backend& backend() { return *backend_; }

 private:
  BackendModel() = default;
  std::unique_ptr<ModelFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;  // reads file_: declared after it, destroyed before
  ModelInfo info_;
  ChatFormat chat_format_ = ChatFormat::kChatML;
  std::string default_system_;
};

}  // namespace braid
