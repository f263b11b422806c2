// engine_loop.cc - the thread that drives a Scheduler for other threads' requests.
#include "rollout/engine_loop.h"

#include "common/observe/log.h"

namespace rlrun::rollout {

EngineLoop::EngineLoop(Scheduler& scheduler, const EngineLoopOptions& options)
    : scheduler_(scheduler), options_(options), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() { stop(); }

Status EngineLoop::submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return unavailable("the server is stopping; retry on another server");
    if (stats_.unfinished >= options_.max_requests)
      return resource_exhausted(str("the server has ", stats_.unfinished, " unfinished requests, its limit; retry later"));
    inbox_.push_back({std::move(request), std::move(sink)});
    ++stats_.requests;
    ++stats_.unfinished;
  }
  wake_.notify_one();
  return {};
}

void EngineLoop::cancel(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // stop() cancels everything anyway
    cancels_.push_back(request_id);
  }
  wake_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

EngineLoopStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool EngineLoop::take_inbox(std::vector<Submitted>* submitted, std::vector<uint64_t>* cancels) {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait(lock, [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || scheduler_.can_step(); });
  submitted->swap(inbox_);
  cancels->swap(cancels_);
  inbox_.clear();
  cancels_.clear();
  return !stopping_;
}

void EngineLoop::run() {
  std::vector<Submitted> submitted;
  std::vector<uint64_t> cancels;
  bool running = true;
  while (running) {
    running = take_inbox(&submitted, &cancels);
    for (Submitted& s : submitted) {
      const uint64_t id = s.request.request_id;
      active_[id] = {std::move(s.sink), s.request.num_samples};
      scheduler_.add(std::move(s.request));
      // A refused request (scheduler.h: error outputs) finishes with fewer outputs than samples.
      if (!scheduler_.is_active(id)) active_[id].second = 0;
    }
    for (uint64_t id : cancels) scheduler_.cancel(id);
    if (running && scheduler_.can_step()) {
      if (Status s = scheduler_.step(); !s.ok()) log::warn(str("engine step failed (its batch got errors): ", s.message()));
    }
    deliver();
  }
  std::vector<uint64_t> unfinished;
  for (const auto& entry : active_) unfinished.push_back(entry.first);
  for (uint64_t id : unfinished) scheduler_.cancel(id);
  deliver();
}

void EngineLoop::deliver() {
  const std::vector<StreamedToken> tokens = scheduler_.take_streamed();
  for (size_t i = 0; i < tokens.size();) {  // one call per run of one request's tokens
    size_t j = i;
    while (j < tokens.size() && tokens[j].request_id == tokens[i].request_id) ++j;
    if (auto it = active_.find(tokens[i].request_id); it != active_.end())
      it->second.first->on_tokens(std::span<const StreamedToken>(tokens).subspan(i, j - i));
    i = j;
  }
  // Stats first, then the sinks: whoever a sink wakes sees the request counted as finished.
  std::vector<std::pair<std::shared_ptr<GenerationSink>, SampleOutput>> finished;
  for (SampleOutput& out : scheduler_.take_finished()) {
    auto it = active_.find(out.request_id);
    if (it == active_.end()) continue;
    finished.emplace_back(it->second.first, std::move(out));
    if (it->second.second > 0) --it->second.second;
  }
  const size_t before = active_.size();
  std::erase_if(active_, [](const auto& entry) { return entry.second.second == 0; });
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.unfinished -= static_cast<int64_t>(before - active_.size());
    stats_.scheduler = scheduler_.stats();
  }
  for (auto& [sink, out] : finished) sink->on_finished(std::move(out));
}

}  // namespace rlrun::rollout
