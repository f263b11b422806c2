#include "orchestrator/data/prompt_source.h"

namespace rlrun::orchestrator {

PromptSource::PromptSource(Task& task, const PromptFormat& format, int64_t prefetch)
    : task_(task), format_(format), prefetch_(prefetch < 0 ? 0 : prefetch) {}

PromptSource::~PromptSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Prompt PromptSource::draw() {
  Prompt p;
  p.problem = task_.next_train();
  Result<std::vector<int32_t>> ids = format_.ids(p.problem);
  if (ids.ok()) {
    p.ids = std::move(*ids);
  } else {
    render_errors_.write(log::Level::kWarn, str("a prompt is skipped: ", format_.description(), ": ",
                                                ids.status().message()));
  }
  return p;
}

void PromptSource::skip(uint64_t n) {
  task_.skip_train(n);
  consumed_ += n;
}

Prompt PromptSource::next() {
  ++consumed_;
  if (prefetch_ == 0) return draw();
  if (!thread_.joinable()) thread_ = std::thread([this] { fill(); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !ready_.empty() || error_ != nullptr; });
  if (ready_.empty()) std::rethrow_exception(error_);
  Prompt p = std::move(ready_.front());
  ready_.pop_front();
  lock.unlock();
  cv_.notify_all();  // room for one more
  return p;
}

void PromptSource::fill() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || static_cast<int64_t>(ready_.size()) < prefetch_; });
      if (stop_) return;
    }
    try {
      Prompt p = draw();  // outside the lock: next() takes what is ready meanwhile
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(p));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
}

}  // namespace rlrun::orchestrator
