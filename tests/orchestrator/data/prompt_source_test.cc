// PromptSource: the same prompts in the same order with and without prefetch, counted as handed
// out (not as drawn ahead), and a resume that skips what was handed out.
#include "orchestrator/data/prompt_source.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "orchestrator/roles/model_from_config.h"
#include "tests/common/eventually.h"

namespace rlrun::orchestrator {
namespace {

std::unique_ptr<Task> reverse_task() {
  TaskSpec spec;
  spec.name = "reverse";
  spec.seed = 7;
  Result<std::unique_ptr<Task>> task = make_task(spec);
  EXPECT_TRUE(task.ok()) << task.status().message();
  return std::move(*task);
}

engine::Tokenizer tokenizer() {
  Result<engine::Tokenizer> t = tokenizer_from(ModelSection{});  // the built-in small tokenizer
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(*t);
}

std::vector<std::string> take(PromptSource& source, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(source.next().problem.prompt);
  return out;
}

TEST(PromptSource, PrefetchChangesNothingButWhenPromptsAreDrawn) {
  const engine::Tokenizer tok = tokenizer();
  std::unique_ptr<Task> a = reverse_task(), b = reverse_task();
  const PromptFormat raw = PromptFormat::raw(tok);
  PromptSource inline_source(*a, raw, 0), prefetched(*b, raw, 4);
  const std::vector<std::string> expected = take(inline_source, 50);
  EXPECT_EQ(take(prefetched, 50), expected);
  EXPECT_EQ(prefetched.consumed(), 50u);  // not the 54 the thread may have drawn
  const Prompt p = prefetched.next();
  EXPECT_EQ(p.ids, tok.encode(p.problem.prompt));
  EXPECT_EQ(p.problem.prompt, inline_source.next().problem.prompt);
}

TEST(PromptSource, AResumedSourceSkipsWhatWasHandedOut) {
  const engine::Tokenizer tok = tokenizer();
  std::unique_ptr<Task> a = reverse_task(), b = reverse_task();
  const PromptFormat raw = PromptFormat::raw(tok);
  PromptSource first(*a, raw, 8);
  const std::vector<std::string> before = take(first, 20), after = take(first, 10);
  PromptSource resumed(*b, raw, 8);
  resumed.skip(first.consumed() - 10);
  EXPECT_EQ(resumed.consumed(), 20u);
  EXPECT_EQ(take(resumed, 10), after);
}

// A task that counts the problems drawn from it (by the source's thread).
class CountingTask : public Task {
 public:
  explicit CountingTask(std::unique_ptr<Task> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  Problem next_train() override {
    ++drawn_;
    return inner_->next_train();
  }
  const std::vector<Problem>& eval_set() const override { return inner_->eval_set(); }
  double reward(const Problem& problem, std::string_view completion) const override {
    return inner_->reward(problem, completion);
  }
  int drawn() const { return drawn_; }

 private:
  std::unique_ptr<Task> inner_;
  std::atomic<int> drawn_{0};
};

TEST(PromptSource, DestroyedWhileItsThreadWaitsForRoom) {
  const engine::Tokenizer tok = tokenizer();
  CountingTask task(reverse_task());
  const PromptFormat raw = PromptFormat::raw(tok);
  auto source = std::make_unique<PromptSource>(task, raw, 2);
  (void)source->next();  // starts the thread, which fills its buffer of 2 and waits for room
  ASSERT_TRUE(testing::eventually([&] { return task.drawn() == 3; }, std::chrono::seconds(10)))
      << "drawn: " << task.drawn();
  EXPECT_EQ(source->consumed(), 1u);
  std::future<void> destroyed = std::async(std::launch::async, [&] { source.reset(); });
  ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "the destructor hangs";
  EXPECT_EQ(task.drawn(), 3) << "nothing drawn past the buffer";
}

}  // namespace
}  // namespace rlrun::orchestrator
