#include "orchestrator/tasks/tasks.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <unordered_set>

namespace rlrun::orchestrator {
namespace {

std::unique_ptr<Task> task(const std::string& name, int eval_size = 32) {
  TaskSpec spec;
  spec.name = name;
  spec.eval_size = eval_size;
  auto t = make_task(spec);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

TEST(Tasks, ExtractAnswerTakesTrimmedFirstLine) {
  EXPECT_EQ(extract_answer("  42 \nmore"), "42");
  EXPECT_EQ(extract_answer("7"), "7");
  EXPECT_EQ(extract_answer(""), "");
}

TEST(Tasks, ArithmeticRewardsExactAnswerOnly) {
  auto t = task("arithmetic");
  Problem p = t->next_train();
  ASSERT_FALSE(p.answer.empty());
  // the answer is the true value of the prompt
  const std::string expr = p.prompt.substr(0, p.prompt.size() - 1);
  const size_t op = expr.find_first_of("+-", 1);
  const long a = std::stol(expr.substr(0, op)), b = std::stol(expr.substr(op + 1));
  EXPECT_EQ(std::stol(p.answer), expr[op] == '+' ? a + b : a - b);
  EXPECT_EQ(t->reward(p, p.answer + "\n"), 1.0);
  EXPECT_EQ(t->reward(p, p.answer + "0"), 0.0);
  EXPECT_EQ(t->reward(p, ""), 0.0);
}

TEST(Tasks, EvalSetIsHeldOutFromTraining) {
  for (const char* name : {"arithmetic", "reverse", "sort", "countdown"}) {
    auto t = task(name, 40);
    ASSERT_EQ(t->eval_set().size(), 40u) << name;
    std::unordered_set<std::string> eval;
    for (const Problem& p : t->eval_set()) eval.insert(p.prompt);
    for (int i = 0; i < 2000; ++i) ASSERT_FALSE(eval.count(t->next_train().prompt)) << name;
  }
}

// task.operations and task.question_format: chat models are asked in words.
TEST(Tasks, ArithmeticOperationsAndQuestionFormat) {
  TaskSpec spec;
  spec.operations = "*";
  spec.max_digits = 1;
  spec.question_format = "What is {a} {op_word} {b}? ({a}{op}{b})";
  auto t = make_task(spec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  for (int i = 0; i < 20; ++i) {
    const Problem p = (*t)->next_train();
    int a = -1, b = -1;
    ASSERT_EQ(std::sscanf(p.prompt.c_str(), "What is %d times %d?", &a, &b), 2) << p.prompt;
    EXPECT_EQ(p.prompt, "What is " + std::to_string(a) + " times " + std::to_string(b) + "? (" + std::to_string(a) +
                            "*" + std::to_string(b) + ")");
    EXPECT_EQ(p.answer, std::to_string(a * b));
  }
  spec.operations = "+/";
  EXPECT_NE(make_task(spec).status().message().find("task.operations"), std::string::npos);
}

// task.subtraction: the sign of a difference (non_negative by default, any, negative).
TEST(Tasks, ArithmeticSubtractionSign) {
  for (const char* sign : {"non_negative", "any", "negative"}) {
    TaskSpec spec;
    spec.operations = "-";
    spec.min_digits = spec.max_digits = 2;
    spec.subtraction = sign;
    spec.question_format = "What is {a} minus {b}?";
    auto t = make_task(spec);
    ASSERT_TRUE(t.ok()) << t.status().message();
    int negative = 0, positive = 0;
    for (int i = 0; i < 200; ++i) {
      const Problem p = (*t)->next_train();
      int a = -1, b = -1;
      ASSERT_EQ(std::sscanf(p.prompt.c_str(), "What is %d minus %d?", &a, &b), 2) << p.prompt;
      EXPECT_EQ(p.answer, std::to_string(a - b)) << p.prompt;
      negative += a < b;
      positive += a > b;
    }
    const std::string s = sign;
    if (s == "non_negative") EXPECT_EQ(negative, 0);
    if (s == "negative") EXPECT_EQ(positive, 0);
    if (s == "any") EXPECT_TRUE(negative > 50 && positive > 50) << negative << " negative, " << positive << " positive";
  }
}

TEST(Tasks, ReverseAndSort) {
  auto r = task("reverse");
  Problem p = r->next_train();
  std::string s = p.prompt.substr(8, p.prompt.size() - 9);  // "reverse " ... ":"
  EXPECT_EQ(p.answer, std::string(s.rbegin(), s.rend()));
  EXPECT_EQ(r->reward(p, p.answer), 1.0);
  auto so = task("sort");
  Problem q = so->next_train();
  EXPECT_TRUE(std::is_sorted(q.answer.begin(), q.answer.end()));
  EXPECT_EQ(so->reward(q, q.answer), 1.0);
  EXPECT_EQ(so->reward(q, q.answer + "z"), 0.0);
}

// Format warm-start answers have a correct answer's shape and are right only by chance.
TEST(Tasks, FormatExamplesHaveTheAnswersShapeAndChanceAccuracy) {
  std::mt19937_64 rng(3);
  for (const char* name : {"arithmetic", "reverse", "sort", "countdown"}) {
    auto t = task(name);
    int right = 0;
    const int n = 2000;
    for (int i = 0; i < n; ++i) {
      const Problem p = t->next_train();
      const std::optional<std::string> text = t->format_example(p, rng);
      ASSERT_TRUE(text.has_value()) << name;
      right += t->correct(p, *text);
      if (std::string(name) == "arithmetic") {
        EXPECT_EQ(text->size(), p.answer.size()) << p.prompt << " -> " << *text;
        EXPECT_EQ(text->find_first_not_of("0123456789"), std::string::npos) << *text;
      } else if (std::string(name) == "countdown") {
        // every given number appears
        for (int64_t x : p.numbers) EXPECT_NE(text->find(std::to_string(x)), std::string::npos) << *text;
      } else {
        ASSERT_EQ(text->size(), p.answer.size()) << p.prompt;
        for (char c : *text) EXPECT_NE(p.answer.find(c), std::string::npos) << p.prompt << " -> " << *text;
      }
    }
    EXPECT_LT(right, n / 4) << name << ": the format examples carry the answers";
  }
  TaskSpec spec;
  spec.name = "reverse";
  spec.min_length = spec.max_length = 4;
  auto fixed = make_task(spec);
  ASSERT_TRUE(fixed.ok());
  std::set<std::string> seen;  // the order is random, not a fixed function of the answer
  const Problem p = (*fixed)->next_train();
  for (int i = 0; i < 50; ++i) seen.insert(*(*fixed)->format_example(p, rng));
  EXPECT_GT(seen.size(), 10u);
}

TEST(Tasks, PartialCreditScoresCharactersButAccuracyIsExact) {
  TaskSpec spec;
  spec.name = "reverse";
  spec.partial_credit = true;
  auto t = make_task(spec);
  ASSERT_TRUE(t.ok());
  Problem p{"reverse abcd:", "dcba", {}, 0};
  EXPECT_DOUBLE_EQ((*t)->reward(p, "dcba\n"), 1.0);
  EXPECT_DOUBLE_EQ((*t)->reward(p, "dcxa"), 0.75);
  EXPECT_DOUBLE_EQ((*t)->reward(p, "dc"), 0.5);        // missing characters count wrong
  EXPECT_DOUBLE_EQ((*t)->reward(p, "dcbaaaaa"), 0.5);  // so do extra ones
  EXPECT_DOUBLE_EQ((*t)->reward(p, ""), 0.0);
  EXPECT_TRUE((*t)->correct(p, "dcba"));
  EXPECT_FALSE((*t)->correct(p, "dcxa"));
  spec.partial_credit = false;
  auto exact = make_task(spec);
  EXPECT_DOUBLE_EQ((*exact)->reward(p, "dcxa"), 0.0);
}

TEST(Tasks, CountdownChecksValueAndNumbersUsed) {
  Problem p{"numbers 3 5 7 target 22:", "", {3, 5, 7}, 22};
  auto t = task("countdown");
  EXPECT_EQ(t->reward(p, "3*5+7"), 1.0);
  EXPECT_EQ(t->reward(p, "(7+5)*3-14"), 0.0);  // 14 is not given
  EXPECT_EQ(t->reward(p, "7*3+1"), 0.0);       // 1 is not given
  EXPECT_EQ(t->reward(p, "5*5-3"), 0.0);       // 5 used twice
  EXPECT_EQ(t->reward(p, "3*5+7=22"), 0.0);    // not an expression
  EXPECT_EQ(t->reward(p, "44/2"), 0.0);
  // generated problems are solvable by their own reference solution
  for (int i = 0; i < 200; ++i) {
    Problem g = t->next_train();
    EXPECT_EQ(t->reward(g, g.answer), 1.0) << g.prompt << " " << g.answer;
  }
}

TEST(Tasks, SameSeedSameProblems) {
  auto a = task("countdown"), b = task("countdown");
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a->next_train().prompt, b->next_train().prompt);
}

class JsonlTaskTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    auto path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
    std::ofstream(path) << text;
    files_.push_back(path);
    return path.string();
  }
  void TearDown() override {
    for (auto& f : files_) std::filesystem::remove(f);
  }
  std::vector<std::filesystem::path> files_;
};

TEST_F(JsonlTaskTest, ReadsRowsAndHoldsOutTheLastOnes) {
  std::string rows;
  for (int i = 0; i < 10; ++i) rows += "{\"prompt\": \"q" + std::to_string(i) + "\", \"answer\": \"" + std::to_string(i) + "\", \"source\": \"x\"}\n";
  TaskSpec spec;
  spec.name = "jsonl";
  spec.dataset = write("ok.jsonl", rows);
  spec.eval_size = 3;
  auto t = make_task(spec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->eval_set().size(), 3u);
  EXPECT_EQ((*t)->eval_set()[0].prompt, "q7");
  for (int i = 0; i < 30; ++i) {
    Problem p = (*t)->next_train();
    EXPECT_NE(p.prompt, "q8");
    EXPECT_EQ((*t)->reward(p, p.answer), 1.0);
  }
}

TEST_F(JsonlTaskTest, ErrorsNameFileAndLine) {
  TaskSpec spec;
  spec.name = "jsonl";
  spec.dataset = write("bad.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n{\"prompt\": 3, \"answer\": \"b\"}\n");
  auto t = make_task(spec);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("bad.jsonl:2: missing string field \"prompt\""), std::string::npos)
      << t.status().message();
  spec.dataset = write("broken.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n{not json\n");
  t = make_task(spec);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("broken.jsonl:2: not valid JSON"), std::string::npos) << t.status().message();
  spec.dataset = "/nonexistent/data.jsonl";
  EXPECT_FALSE(make_task(spec).ok());
  spec.dataset = "";
  EXPECT_NE(make_task(spec).status().message().find("task.dataset"), std::string::npos);
}

// task.prompt_field / task.answer_field name the fields of a row (datasets rarely say "prompt").
TEST_F(JsonlTaskTest, FieldNamesComeFromTheConfig) {
  TaskSpec spec;
  spec.name = "jsonl";
  spec.prompt_field = "question";
  spec.answer_field = "solution";
  std::string rows;
  for (int i = 0; i < 4; ++i) rows += "{\"question\": \"q" + std::to_string(i) + "\", \"solution\": \"" + std::to_string(i) + "\"}\n";
  spec.dataset = write("fields.jsonl", rows);
  spec.eval_size = 1;
  auto t = make_task(spec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->eval_set()[0].prompt, "q3");
  EXPECT_EQ((*t)->eval_set()[0].answer, "3");
  spec.answer_field = "answer";
  t = make_task(spec);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("fields.jsonl:1: missing string field \"answer\" (task.answer_field)"),
            std::string::npos)
      << t.status().message();
}

// A row may hold a chat instead of a prompt string; numbers are answers too; every other field is
// metadata for the reward.
TEST_F(JsonlTaskTest, ChatRowsAndMetadataTravelWithTheProblem) {
  TaskSpec spec;
  spec.name = "jsonl";
  spec.dataset = write("chat.jsonl",
                       "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                       "{\"role\": \"user\", \"content\": \"2+2?\"}], \"answer\": 4, \"level\": 1, \"tags\": [\"a\"]}\n"
                       "{\"prompt\": \"3+3?\", \"answer\": \"6\"}\n"
                       "{\"prompt\": \"4+4?\", \"answer\": \"8\", \"id\": \"x\"}\n");
  spec.eval_size = 1;
  auto t = make_task(spec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE((*t)->has_chat_rows());
  EXPECT_EQ((*t)->eval_set()[0].metadata_json, R"({"id":"x"})");
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    Problem p = (*t)->next_train();
    seen.insert(p.prompt);
    if (p.prompt == "2+2?") {
      EXPECT_EQ(p.answer, "4");
      EXPECT_EQ(p.messages_json,
                R"([{"role":"system","content":"Be brief."},{"role":"user","content":"2+2?"}])");
      EXPECT_EQ(p.metadata_json, R"({"level":1,"tags":["a"]})");
    } else {
      EXPECT_EQ(p.prompt, "3+3?");
      EXPECT_TRUE(p.messages_json.empty());
      EXPECT_EQ(p.metadata_json, "{}");
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"2+2?", "3+3?"}));

  spec.messages_field = "conversation";  // the field names come from the config
  spec.dataset = write("conv.jsonl", "{\"conversation\": [{\"role\": \"user\", \"content\": \"q\"}], \"answer\": \"a\"}\n"
                                     "{\"conversation\": [{\"role\": \"user\", \"content\": \"r\"}], \"answer\": \"b\"}\n");
  spec.eval_size = 0;
  t = make_task(spec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE((*t)->has_chat_rows());
}

TEST_F(JsonlTaskTest, MalformedChatRowsNameFileLineAndField) {
  TaskSpec spec;
  spec.name = "jsonl";
  const auto error = [&](const std::string& row) {
    spec.dataset = write("m.jsonl", "{\"prompt\": \"ok\", \"answer\": \"1\"}\n" + row + "\n");
    auto t = make_task(spec);
    return t.ok() ? std::string("(no error)") : t.status().message();
  };
  EXPECT_NE(error(R"({"messages": [], "answer": "1"})").find("m.jsonl:2: \"messages\" (task.messages_field) must be a non-empty list"),
            std::string::npos);
  EXPECT_NE(error(R"({"messages": [{"role": "user"}], "answer": "1"})").find("m.jsonl:2: \"messages\" (task.messages_field) message 0 needs string"),
            std::string::npos);
  EXPECT_NE(error(R"({"messages": "hi", "answer": "1"})").find("must be a non-empty list"), std::string::npos);
  EXPECT_NE(error(R"({"prompt": "p", "messages": [{"role": "user", "content": "c"}], "answer": "1"})").find("m.jsonl:2: has both"),
            std::string::npos);
  EXPECT_NE(error(R"({"prompt": "p", "answer": null})").find("m.jsonl:2: missing string field \"answer\""), std::string::npos);
  EXPECT_NE(error(R"({"answer": "1"})").find("or chat field \"messages\""), std::string::npos);
  EXPECT_NE(error("\xff\xfe garbage").find("m.jsonl:2: not valid JSON"), std::string::npos);
  spec.dataset = write("blank.jsonl", "\n  \n");
  EXPECT_NE(make_task(spec).status().message().find("the dataset has no rows"), std::string::npos);
}

// task.eval_dataset gives the first eval_size rows; the rows of the training file that are also in
// it are never trained on.
TEST_F(JsonlTaskTest, EvalDatasetIsCappedAndHeldOut) {
  std::string train, eval;
  for (int i = 0; i < 20; ++i) train += "{\"prompt\": \"q" + std::to_string(i) + "\", \"answer\": \"1\"}\n";
  for (int i = 0; i < 10; ++i) eval += "{\"prompt\": \"q" + std::to_string(i) + "\", \"answer\": \"1\"}\n";
  TaskSpec spec;
  spec.name = "jsonl";
  spec.dataset = write("train.jsonl", train);
  spec.eval_dataset = write("eval.jsonl", eval);
  spec.eval_size = 4;
  auto t = make_task(spec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ((*t)->eval_set().size(), 4u);
  EXPECT_EQ((*t)->eval_set()[3].prompt, "q3");
  std::set<std::string> trained;
  for (int i = 0; i < 16; ++i) trained.insert((*t)->next_train().prompt);
  EXPECT_EQ(trained.size(), 16u);  // one epoch: q4..q19, each once
  for (int i = 0; i < 4; ++i) EXPECT_EQ(trained.count("q" + std::to_string(i)), 0u);
}

// Resuming skips rows without reading them and lands where next_train() would have, across epochs.
TEST_F(JsonlTaskTest, SkipTrainMatchesDrawingAcrossEpochs) {
  std::string rows;
  for (int i = 0; i < 7; ++i) rows += "{\"prompt\": \"q" + std::to_string(i) + "\", \"answer\": \"1\"}\r\n";
  TaskSpec spec;
  spec.name = "jsonl";
  spec.dataset = write("skip.jsonl", rows);
  spec.eval_size = 0;
  auto drawn = make_task(spec), skipped = make_task(spec);
  ASSERT_TRUE(drawn.ok() && skipped.ok());
  for (int i = 0; i < 17; ++i) (void)(*drawn)->next_train();
  (*skipped)->skip_train(17);
  for (int i = 0; i < 10; ++i) EXPECT_EQ((*drawn)->next_train().prompt, (*skipped)->next_train().prompt) << i;
}

// The training file streams: a row is read when drawn, so a dataset far larger than what the task
// keeps in memory works, and a row changed under the run is an error naming the file, not a crash.
TEST_F(JsonlTaskTest, TrainingRowsAreReadWhenDrawn) {
  std::string rows;
  for (int i = 0; i < 200000; ++i) rows += "{\"prompt\": \"question number " + std::to_string(i) + " with some padding text\", \"answer\": \"" + std::to_string(i) + "\", \"i\": " + std::to_string(i) + "}\n";
  TaskSpec spec;
  spec.name = "jsonl";
  spec.dataset = write("big.jsonl", rows);
  spec.eval_size = 8;
  auto t = make_task(spec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  for (int i = 0; i < 1000; ++i) {
    Problem p = (*t)->next_train();
    EXPECT_EQ(p.metadata_json, "{\"i\":" + p.answer + "}");
    ASSERT_EQ(p.prompt, "question number " + p.answer + " with some padding text");
  }
  std::ofstream(spec.dataset, std::ios::trunc) << "{\"prompt\": \"gone\"}\n";  // answer missing now
  bool threw = false;
  for (int i = 0; i < 20 && !threw; ++i) {
    try {
      (void)(*t)->next_train();
    } catch (const std::exception& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("big.jsonl"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(threw);
}

}  // namespace
}  // namespace rlrun::orchestrator
