// run/training/step_replay.cc - the batches kept for a restarted trainer group.
#include "orchestrator/run/training/step_replay.h"

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {

void StepReplay::begin(StepRecord record) {
  RLRUN_CHECK(!in_progress_, str("step ", record.step, " begins while step ", in_progress_->step, " is in training"));
  in_progress_ = std::move(record);
}

const StepRecord& StepReplay::completed() {
  RLRUN_CHECK(in_progress_, "no step in training");
  in_progress_->counted = true;
  kept_.push_back(std::move(*in_progress_));
  in_progress_.reset();
  if (static_cast<int64_t>(kept_.size()) > max_kept_) {
    dropped_through_ = kept_.front().step;
    kept_.pop_front();  // max_kept_ >= 1: never the back
  }
  return kept_.back();  // std::deque::push_back and pop_front keep references to other elements valid
}

void StepReplay::checkpointed(int64_t step) {
  while (!kept_.empty() && kept_.front().step <= step) kept_.pop_front();
  if (step >= dropped_through_) dropped_through_ = 0;
}

std::vector<uint64_t> StepReplay::forget_all() {
  std::vector<uint64_t> untrained = samples_untrained();
  kept_.clear();
  in_progress_.reset();
  redo_.clear();
  dropped_through_ = 0;
  return untrained;
}

int64_t StepReplay::rewind(int64_t from_step) {
  RLRUN_CHECK(from_step >= dropped_through_, str("rewind to step ", from_step, ": the batches through step ",
                                                 dropped_through_, " were dropped (trainer_replay_max_steps)"));
  std::deque<StepRecord> redo;
  for (StepRecord& r : kept_)
    if (r.step > from_step) redo.push_back(std::move(r));
  kept_.clear();
  if (in_progress_) redo.push_back(std::move(*in_progress_));
  in_progress_.reset();
  for (StepRecord& r : redo_) redo.push_back(std::move(r));
  for (size_t i = 0; i < redo.size(); ++i) {
    RLRUN_CHECK(redo[i].step == from_step + 1 + static_cast<int64_t>(i),
                str("the batch of step ", from_step + 1 + static_cast<int64_t>(i), " is not kept (found step ", redo[i].step, ")"));
    redo[i].redone = true;
  }
  redo_ = std::move(redo);
  return static_cast<int64_t>(redo_.size());
}

std::optional<StepRecord> StepReplay::take_redo() {
  if (redo_.empty()) return std::nullopt;
  StepRecord r = std::move(redo_.front());
  redo_.pop_front();
  return r;
}

int64_t StepReplay::groups_untrained() const {
  int64_t n = 0;
  if (in_progress_ && !in_progress_->counted) n += static_cast<int64_t>(in_progress_->group_ids.size());
  for (const StepRecord& r : redo_)
    if (!r.counted) n += static_cast<int64_t>(r.group_ids.size());
  return n;
}

std::vector<uint64_t> StepReplay::samples_untrained() const {
  std::vector<uint64_t> ids;
  if (in_progress_ && !in_progress_->counted) ids = in_progress_->sample_ids;
  for (const StepRecord& r : redo_)
    if (!r.counted) ids.insert(ids.end(), r.sample_ids.begin(), r.sample_ids.end());
  return ids;
}

int64_t StepReplay::samples_counted_ahead() const {
  int64_t n = 0;
  for (const StepRecord& r : redo_)
    if (r.counted) n += static_cast<int64_t>(r.sample_ids.size());
  return n;
}

}  // namespace rlrun::orchestrator
