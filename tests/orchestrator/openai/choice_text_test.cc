// ChoiceText: tokens to text as they arrive, cut before stop strings, streamed without ever
// sending bytes a later token could change.
#include "orchestrator/openai/choice_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rlrun::orchestrator::openai {
namespace {

engine::Tokenizer tiny_tokenizer() {
  auto t = engine::Tokenizer::load(std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

// Feeds `text`'s tokens one at a time; returns what the stream handed out, concatenated.
std::string stream_all(ChoiceText& choice, const engine::Tokenizer& tok, const std::string& text) {
  std::string streamed;
  for (int32_t id : tok.encode(text)) {
    const float lp = -1.0f;
    const bool stopped = choice.append({&id, 1}, {&lp, 1});
    streamed += choice.take_delta(stopped);
    if (stopped) break;
  }
  return streamed + choice.take_delta(true);
}

TEST(ChoiceText, TheTextDoesNotDependOnHowTheTokensArrived) {
  // A model's embedding rows past the tokenizer's vocabulary can be sampled: such an id has no
  // text, one by one or all at once (the non-streamed answer once was "" here, the stream not).
  const engine::Tokenizer tok = tiny_tokenizer();
  std::vector<int32_t> ids = tok.encode("a st");
  ids.insert(ids.begin() + 1, tok.vocab_size() + 5);
  ids.push_back(tok.vocab_size() + 7);
  const std::vector<float> lps(ids.size(), -1.0f);
  ChoiceText whole(tok, {}), one_by_one(tok, {});
  whole.append(ids, lps);
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    one_by_one.append({&ids[i], 1}, {&lps[i], 1});
    streamed += one_by_one.take_delta(false);
  }
  streamed += one_by_one.take_delta(true);
  EXPECT_EQ(whole.text(), "a st");
  EXPECT_EQ(one_by_one.text(), whole.text());
  EXPECT_EQ(streamed, whole.text());
  EXPECT_EQ(whole.ids(), ids);
}

TEST(ChoiceText, WithoutStopStringsTheStreamIsTheText) {
  const engine::Tokenizer tok = tiny_tokenizer();
  ChoiceText c(tok, {});
  const std::string text = "What is the sum of 12 and 30?";
  EXPECT_EQ(stream_all(c, tok, text), text);
  EXPECT_EQ(c.text(), text);
  EXPECT_FALSE(c.stopped());
  EXPECT_EQ(c.ids(), tok.encode(text));
  EXPECT_EQ(c.logprobs().size(), c.ids().size());
}

TEST(ChoiceText, TextEndsBeforeAStopStringSpanningTokens) {
  const engine::Tokenizer tok = tiny_tokenizer();
  const std::string text = "the sum is 42 and then more";
  ChoiceText c(tok, {"nothing", "and the"});
  const std::string streamed = stream_all(c, tok, text);
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.text(), "the sum is 42 ");
  EXPECT_EQ(streamed, "the sum is 42 ");  // "and" was held back, never sent
  EXPECT_LT(c.ids().size(), tok.encode(text).size());  // tokens after the stop were ignored
}

TEST(ChoiceText, APartialStopStringIsReleasedWhenItDoesNotComplete) {
  const engine::Tokenizer tok = tiny_tokenizer();
  ChoiceText c(tok, {"12 and 40"});
  EXPECT_EQ(stream_all(c, tok, "sum of 12 and 30"), "sum of 12 and 30");
  EXPECT_FALSE(c.stopped());
}

TEST(ChoiceText, IncompleteUtf8TailsAreFound) {
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xc3"), 1u);          // first byte of é
  EXPECT_EQ(incomplete_utf8_tail("a\xc3\xa9"), 0u);      // é
  EXPECT_EQ(incomplete_utf8_tail("\xe2\x82"), 2u);       // two bytes of €
  EXPECT_EQ(incomplete_utf8_tail("\xf0\x9f\x98"), 3u);   // three bytes of an emoji
  EXPECT_EQ(incomplete_utf8_tail("\xf0\x9f\x98\x80"), 0u);
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
}

}  // namespace
}  // namespace rlrun::orchestrator::openai
