// PromptSource: training prompts ready for dispatch, each a task problem and its token ids (its
// text as task.chat_template gives it to the model: data/prompt_format.h), in the task's draw order.
//
// With a prefetch depth > 0 (enable_prompt_prefetch, prompt_prefetch_buffer_size) a background
// thread draws and tokenizes up to that many prompts ahead of next(), so a task whose rows are
// slow to read or long to tokenize does not hold up dispatch; with 0 each next() draws on the
// caller's thread. The sequence next() returns is the same either way.
//
// Contract:
//  - While a source exists, it alone calls task.next_train() (its const methods stay free to use:
//    eval_set, reward, format_example). `task` and `format` must outlive it.
//  - A prompt the chat template cannot render (raise_exception on its content) gets no ids: the
//    caller skips it like a prompt too long to ask; the error is logged.
//  - consumed() counts the prompts next() handed out: the data position a checkpoint stores.
//    Prompts drawn ahead but not handed out are not counted, so a resumed run (skip(consumed))
//    draws them again and trains the same prompts.
//  - skip() is for resuming and must come before the first next().
//  - next() waits for the thread at most as long as drawing one prompt takes; an exception thrown
//    by the task in the thread is rethrown by next().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/observe/log.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

struct Prompt {
  Problem problem;
  std::vector<int32_t> ids;
};

class PromptSource {
 public:
  PromptSource(Task& task, const PromptFormat& format, int64_t prefetch);
  ~PromptSource();
  PromptSource(const PromptSource&) = delete;
  PromptSource& operator=(const PromptSource&) = delete;

  void skip(uint64_t n);
  Prompt next();
  uint64_t consumed() const { return consumed_; }
  int64_t prefetch() const { return prefetch_; }

 private:
  Prompt draw();
  void fill();  // the prefetch thread

  Task& task_;
  const PromptFormat& format_;
  log::RateLimited render_errors_{std::chrono::seconds(60)};
  const int64_t prefetch_;
  uint64_t consumed_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Prompt> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;  // started by the first next()
};

}  // namespace rlrun::orchestrator
