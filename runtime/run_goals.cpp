// A Run's goals: each Want deduces the goal class, task groups, slack and
// priority of every node upstream (graph/deduction.h), from costs estimated
// here (the engines' measured rates, prompts estimated before rendering).
#include <thread>

#include "run_impl.h"

namespace braid::rt {

double RunImpl::EstimateVarTokens(VarId id) {
  DagVar& v = dag_.var(id);
  if (v.state == VarState::kReady) {
    if (v.token_estimate < 0)
      v.token_estimate = static_cast<int>(model().TokenizeText(v.value).size());
    return v.token_estimate;
  }
  if (!v.producer) return 0;
  const DagNode& p = dag_.node(v.producer);
  if (p.kind == DagNode::Kind::kCall) {
    for (const auto& o : p.fn->outputs())
      if (o.name == v.name) return o.kind == OutputSpec::Kind::kSelect ? 4 : o.max_tokens;
    return 0;
  }
  if (p.kind == DagNode::Kind::kJoin) {
    double t = 0;
    for (const auto& part : p.parts)
      t += part.var ? EstimateVarTokens(part.var) : model().TokenizeText(part.text).size();
    return t;
  }
  return 0;
}

double RunImpl::LiteralTokens(const SemanticFunction& fn) {
  auto [it, fresh] = literal_tokens_.emplace(&fn, 0.0);
  if (!fresh) return it->second;
  std::vector<PromptPiece> literal;
  for (const auto& p : fn.pieces())
    if (p.kind == SemanticFunction::Piece::Kind::kText) AppendPiece(literal, p.text, true);
  if (fn.chat()) {
    // The turns without their inputs, through the chat template: its
    // markup is part of every prompt of the function.
    std::vector<ChatMessage> turns;
    if (!fn.spec().system.empty()) turns.push_back({"system", fn.spec().system});
    for (size_t i = 0; i < fn.spec().messages.size(); ++i) {
      turns.push_back({fn.spec().messages[i].role, ""});
      for (const auto& p : fn.message_pieces()[i])
        if (p.kind == SemanticFunction::Piece::Kind::kText) turns.back().content += p.text;
    }
    turns.push_back({"user", JoinPieces(literal)});
    literal = model().FormatChat(turns, /*add_generation_prompt=*/true);
  }
  it->second = static_cast<double>(model().Tokenize(literal).size());
  return it->second;
}

double RunImpl::CostMs(const DagNode& n, const CostModel& rates) {
  if (n.kind != DagNode::Kind::kCall) return 0;
  double prompt = LiteralTokens(*n.fn), gen = 0;
  auto add_inputs = [&](const std::vector<SemanticFunction::Piece>& pieces) {
    for (const auto& p : pieces) {
      if (p.kind != SemanticFunction::Piece::Kind::kInput) continue;
      const Arg& a = n.args.at(p.text);
      prompt += a.var ? EstimateVarTokens(a.var)
                      : static_cast<double>(model().TokenizeText(a.text).size());
    }
  };
  for (const auto& pieces : n.fn->message_pieces()) add_inputs(pieces);
  add_inputs(n.fn->pieces());
  for (const auto& o : n.fn->outputs())
    gen += o.kind == OutputSpec::Kind::kSelect ? 0 : o.max_tokens;
  return rates.CostMs(prompt, gen);
}

Status RunImpl::Want(VarId var, const GetOptions& options) {
  // DAG mode: the program runs inside the runtime, so the client pays one
  // round trip for the whole run (submitting it and reading the result), not
  // one per call or per get. It is charged at the first Want.
  if (dag_mode() && options_.rtt_ms > 0 && !rtt_paid_.exchange(true))
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.rtt_ms));
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(var)) return Status::InvalidArgument("unknown variable " + std::to_string(var));
  if (options.deadline_ms && !(*options.deadline_ms >= 0))
    return Status::InvalidArgument("deadline_ms must be >= 0");
  const CostModel rates = ctx_->Rates();
  DeductionParams params;
  params.now_ms = NowMs();
  params.cost_ms = [&](const DagNode& n) { return CostMs(n, rates); };
  params.groups = dag_mode();
  params.goals = dag_mode();
  params.next_group = &next_group_;
  BRAID_RETURN_IF_ERROR(DeduceGoals(dag_, var, options, params));
  executor_.PushGoals();
  Notify();
  return Status::Ok();
}

}  // namespace braid::rt
