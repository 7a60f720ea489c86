#include "runner/draft_runner.h"

#include <algorithm>

#include "backend/backend.h"
#include "runner/backend_model.h"

namespace braid {

Result<std::unique_ptr<DraftRunner>> DraftRunner::Open(Model& draft, int kv_tokens,
                                                       int block_size) {
  auto* model = dynamic_cast<BackendModel*>(&draft);
  if (model == nullptr)
    return Status::InvalidArgument("the draft model does not run on a backend of this process");
  if (kv_tokens < 1 || block_size < 1)
    return Status::InvalidArgument("the draft's KV pool needs tokens and a block size");
  const int blocks = (kv_tokens + block_size - 1) / block_size;
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<KvMemory> kv,
                         model->backend().AllocateKv(blocks, block_size));
  return std::unique_ptr<DraftRunner>(
      new DraftRunner(model->backend(), std::move(kv), draft.info().context));
}

DraftRunner::DraftRunner(Backend& backend, std::unique_ptr<KvMemory> kv, int context)
    : backend_(backend), kv_(std::move(kv)), block_size_(kv_->block_size()), context_(context) {
  for (int b = kv_->n_blocks() - 1; b >= 0; --b) free_.push_back(b);
}

DraftRunner::~DraftRunner() = default;

DraftRunner::Seq::~Seq() { runner_->Release(*this); }

bool DraftRunner::Reserve(Seq& s, int positions) {
  const size_t need = static_cast<size_t>((positions + block_size_ - 1) / block_size_);
  std::lock_guard<std::mutex> lock(mu_);
  if (need <= s.blocks_.size()) return true;
  if (free_.size() < need - s.blocks_.size()) return false;
  while (s.blocks_.size() < need) {
    s.blocks_.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void DraftRunner::Release(Seq& s) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.insert(free_.end(), s.blocks_.begin(), s.blocks_.end());
  s.blocks_.clear();
  s.fed_.clear();
}

size_t DraftRunner::Kept(const Seq& seq, std::span<const int32_t> context) {
  const size_t common = static_cast<size_t>(
      std::mismatch(seq.fed_.begin(), seq.fed_.end(), context.begin(), context.end()).first -
      seq.fed_.begin());
  return std::min(common, context.size() - 1);
}

int DraftRunner::Behind(const Seq& seq, std::span<const int32_t> context) {
  return static_cast<int>(context.size() - Kept(seq, context));
}

void DraftRunner::Propose(std::span<Job> jobs) {
  std::vector<Work> work;
  for (Job& j : jobs) {
    j.out->clear();
    const int n = static_cast<int>(j.context.size());
    const int want = std::min(j.max_tokens, context_ - n + 1);
    if (n == 0 || want <= 0) continue;
    Seq& s = *j.seq;
    s.fed_.resize(Kept(s, j.context));
    if (!Reserve(s, n + want - 1)) continue;
    work.push_back({&j, s.fed_.size(), want});
  }
  if (CatchUp(work) && Extend(work)) return;
  for (Work& w : work) {
    w.job->out->clear();
    w.job->seq->fed_.clear();  // evaluated again from the start next time
  }
}

bool DraftRunner::CatchUp(std::vector<Work>& work) {
  std::vector<BatchSegment> segs;
  std::vector<Work*> owners;
  std::vector<int32_t> ids;
  const int chunk = backend_.max_chunk();
  while (true) {
    segs.clear();
    owners.clear();
    int budget = chunk, rows = 0;
    for (Work& w : work) {
      const size_t left = w.job->context.size() - w.next;
      if (left == 0 || budget == 0) continue;
      BatchSegment seg;
      seg.tokens = w.job->context.data() + w.next;
      seg.n_tokens = static_cast<int>(std::min<size_t>(left, static_cast<size_t>(budget)));
      seg.pos0 = static_cast<int>(w.next);
      seg.block_table = w.job->seq->blocks_.data();
      if (static_cast<size_t>(seg.n_tokens) == left) {
        seg.logits_from = seg.pos0 + seg.n_tokens - 1;
        ++rows;
      }
      budget -= seg.n_tokens;
      segs.push_back(seg);
      owners.push_back(&w);
    }
    if (segs.empty()) return true;
    ids.resize(static_cast<size_t>(rows));
    if (!backend_.ForwardArgmax(segs, *kv_, ids.data()).ok()) return false;
    size_t row = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
      Work& w = *owners[i];
      std::vector<int32_t>& fed = w.job->seq->fed_;
      fed.insert(fed.end(), segs[i].tokens, segs[i].tokens + segs[i].n_tokens);
      w.next += static_cast<size_t>(segs[i].n_tokens);
      if (segs[i].logits_from == BatchSegment::kNoLogits) continue;
      const int32_t id = ids[row++];
      if (id < 0)
        w.want = 0;
      else
        w.job->out->push_back(id);
    }
  }
}

bool DraftRunner::Extend(std::vector<Work>& work) {
  std::vector<BatchSegment> segs;
  std::vector<Work*> owners;
  std::vector<int32_t> ids;
  while (true) {
    segs.clear();
    owners.clear();
    for (Work& w : work) {
      std::vector<int32_t>& out = *w.job->out;
      if (out.empty() || static_cast<int>(out.size()) >= w.want) continue;
      std::vector<int32_t>& fed = w.job->seq->fed_;
      fed.push_back(out.back());
      BatchSegment seg;
      seg.tokens = &fed.back();
      seg.n_tokens = 1;
      seg.pos0 = static_cast<int>(fed.size()) - 1;
      seg.block_table = w.job->seq->blocks_.data();
      seg.logits_from = seg.pos0;
      segs.push_back(seg);
      owners.push_back(&w);
    }
    if (segs.empty()) return true;
    ids.resize(segs.size());
    if (!backend_.ForwardArgmax(segs, *kv_, ids.data()).ok()) return false;
    for (size_t i = 0; i < segs.size(); ++i) {
      Work& w = *owners[i];
      if (ids[i] < 0)
        w.want = 0;
      else
        w.job->out->push_back(ids[i]);
    }
  }
}

void DraftProposer::Propose(std::span<const int32_t> context, int max_tokens,
                            std::vector<int32_t>* out) {
  DraftRunner::Job job{seq_.get(), context, max_tokens, out};
  runner_->Propose(std::span<DraftRunner::Job>(&job, 1));
}

}  // namespace braid
