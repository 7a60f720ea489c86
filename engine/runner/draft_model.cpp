// OpenDraftModel (engine/model.h).
#include <algorithm>

#include "engine/model.h"

namespace braid {

Result<std::unique_ptr<Model>> OpenDraftModel(const SpecOptions& spec, const ModelOptions& options,
                                              const Model& target) {
  if (spec.kind != SpecOptions::Kind::kDraft) return std::unique_ptr<Model>();
  const ModelInfo& t = target.info();
  ModelOptions o = options;
  o.context = t.context;
  if (!spec.draft_model.empty()) {
    o.path = spec.draft_model;
    o.layers = 0;
  } else {
    const int own = options.layers > 0 ? options.layers : t.n_layer;
    if (spec.draft_layers >= own)
      return Status::InvalidArgument("--spec draft=" + std::to_string(spec.draft_layers) +
                                     ": the draft must have fewer layers than the target's " +
                                     std::to_string(own));
    o.layers = spec.draft_layers > 0 ? spec.draft_layers : std::max(1, own / 4);
  }
  auto draft = Model::Open(o);
  if (!draft.ok()) return Status(draft.status().code(), "draft model: " + draft.status().message());
  const ModelInfo& d = (*draft)->info();
  if (d.n_vocab != t.n_vocab)
    return Status::InvalidArgument("draft model " + o.path + " has " + std::to_string(d.n_vocab) +
                                   " tokens, the target " + std::to_string(t.n_vocab) +
                                   ": they must share the tokenizer");
  for (int32_t id = 0; id < t.n_vocab; ++id)
    if ((*draft)->TokenBytes(id) != target.TokenBytes(id))
      return Status::InvalidArgument("draft model " + o.path + " has another tokenizer: token " +
                                     std::to_string(id) + " is '" + (*draft)->TokenBytes(id) +
                                     "' there and '" + target.TokenBytes(id) + "' in the target");
  return std::move(draft).value();
}

}  // namespace braid
