#include "exec/regex_dfa.h"
#include "exec/token_mask.h"
#include "runtime/constraint.h"

namespace braid::rt {

Result<RegexConstraint> RegexConstraint::Compile(std::string_view pattern) {
  BRAID_ASSIGN_OR_RETURN(RegexDfa dfa, RegexDfa::Compile(pattern));
  return RegexConstraint(std::make_shared<const RegexDfa>(std::move(dfa)));
}

bool RegexConstraint::FullMatch(std::string_view text) const { return dfa_->FullMatch(text); }

size_t RegexConstraint::num_states() const { return dfa_->num_states(); }

LogitsProcessor RegexConstraint::NewProcessor(const Model& tokenizer) const {
  auto mask = std::make_shared<RegexMask>(dfa_, TokenTable::ForModel(tokenizer));
  return [mask](std::span<const int32_t> generated, std::span<float> logits) {
    (*mask)(generated, logits);
  };
}

}  // namespace braid::rt
