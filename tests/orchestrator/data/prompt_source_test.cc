// PromptSource: the same prompts in the same order with and without prefetch, counted as handed
// out (not as drawn ahead), and a resume that skips what was handed out.
#include "orchestrator/data/prompt_source.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "orchestrator/roles/model_from_config.h"

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

TEST(PromptSource, DestroyedWhileItsThreadWaitsForRoom) {
  const engine::Tokenizer tok = tokenizer();
  std::unique_ptr<Task> task = reverse_task();
  {
    const PromptFormat raw = PromptFormat::raw(tok);
    PromptSource source(*task, raw, 2);
    (void)source.next();  // the thread fills its buffer and waits
  }  // must not hang
  SUCCEED();
}

}  // namespace
}  // namespace rlrun::orchestrator
