// Hostile and malformed tokenizer files and inputs: every one gives a Status naming the file and
// the field at fault, or (for input text) a valid encoding; nothing crashes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <climits>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace rlrun::engine {
namespace {

using nlohmann::json;

const std::string kTinyPath = std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json";

std::string tiny_text() {
  std::ifstream in(kTinyPath, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Loads tiny.json edited by `edit` and expects an error mentioning the file and `field`.
void expect_error(const std::function<void(json&)>& edit, const std::string& field) {
  json tok = json::parse(tiny_text());
  edit(tok);
  auto result = Tokenizer::from_json(tok.dump(), "hostile.json");
  ASSERT_FALSE(result.ok()) << "accepted a file that should fail at " << field;
  const std::string& message = result.status().message();
  EXPECT_EQ(message.rfind("hostile.json: ", 0), 0u) << message;
  EXPECT_NE(message.find(field), std::string::npos) << "message does not name `" << field << "`: " << message;
}

TEST(TokenizerHostile, TruncatedJsonIsAnErrorAtEveryLength) {
  const std::string text = tiny_text();
  ASSERT_GT(text.size(), 1000u);
  for (size_t len = 0; len < text.size(); len += 37) {
    auto result = Tokenizer::from_json(std::string_view(text).substr(0, len), "cut.json");
    ASSERT_FALSE(result.ok()) << "length " << len;
    EXPECT_NE(result.status().message().find("cut.json: not valid JSON"), std::string::npos)
        << result.status().message();
  }
}

// Loads 400 randomly mutated copies of `text`; each must load or fail cleanly, and encode/decode.
void mutations_never_crash(const std::string& text) {
  std::mt19937 rng(7);
  int loaded = 0;
  const std::string alphabet = "\"{}[],:0123456789-.eE abcnul\\\x01\xff";
  for (int trial = 0; trial < 400; ++trial) {
    std::string mutated = text;
    for (int k = 0; k < 1 + trial % 3; ++k) {
      size_t at = rng() % mutated.size();
      char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: mutated[at] = c; break;
        case 1: mutated.insert(mutated.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: mutated.erase(at, 1); break;
      }
    }
    auto result = Tokenizer::from_json(mutated, "mutated.json");
    if (!result.ok()) continue;
    ++loaded;
    auto ids = result->encode("What is 12 + 30? <|im_end|> ünï 🎉");
    (void)result->decode(ids);
  }
  EXPECT_GT(loaded, 0);  // some mutations land in harmless places (string contents)
}

TEST(TokenizerHostile, RandomByteMutationsNeverCrash) { mutations_never_crash(tiny_text()); }

// tiny.json as a SentencePiece-style file: the normalizers, Metaspace and decoders get mutated too.
TEST(TokenizerHostile, RandomByteMutationsOfSentencePieceStyleNeverCrash) {
  json tok = json::parse(tiny_text());
  tok["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}},
                                                              {{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}}}};
  tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
                                                                   {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}}}}};
  tok["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                                        {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}},
                                                        {{"type", "Metaspace"}, {"replacement", "\u2581"}}}}};
  tok["model"]["byte_fallback"] = true;
  ASSERT_TRUE(Tokenizer::from_json(tok.dump(), "sp.json").ok());
  mutations_never_crash(tok.dump(2));
}

TEST(TokenizerHostile, WrongTypesNameTheField) {
  expect_error([](json& t) { t = json::array(); }, "(top level)");
  expect_error([](json& t) { t = json::object(); }, "model");
  expect_error([](json& t) { t["model"]["type"] = "WordPiece"; }, "model.type");
  expect_error([](json& t) { t["model"]["type"] = 3; }, "model.type");
  expect_error([](json& t) { t["model"]["vocab"] = json::array(); }, "model.vocab");
  expect_error([](json& t) { t["model"]["vocab"]["a"] = "x"; }, "model.vocab[\"a\"]");
  expect_error([](json& t) { t["model"]["vocab"]["a"] = -5; }, "model.vocab[\"a\"]");
  expect_error([](json& t) { t["model"]["vocab"]["a"] = 1000000000000LL; }, "model.vocab[\"a\"]");
  expect_error([](json& t) { t["model"]["vocab"]["a"] = 1.5; }, "model.vocab[\"a\"]");
  expect_error([](json& t) { t["model"]["vocab"]["zz"] = 4000000; }, "ids are sparse");
  expect_error([](json& t) { t["model"]["dropout"] = 0.1; }, "model.dropout");
  expect_error([](json& t) { t["model"]["byte_fallback"] = "no"; }, "model.byte_fallback");
  expect_error([](json& t) { t["model"]["unk_token"] = "<nope>"; }, "model.unk_token");
  expect_error([](json& t) { t["model"].erase("merges"); }, "model.merges");
  expect_error([](json& t) { t["model"]["merges"] = "a b"; }, "model.merges");
  expect_error([](json& t) { t["model"]["merges"][0] = 5; }, "model.merges[0]");
  expect_error([](json& t) { t["model"]["merges"][1] = "abc"; }, "model.merges[1]");
  expect_error([](json& t) { t["model"]["merges"][1] = json::array({"a"}); }, "model.merges[1]");
  expect_error([](json& t) { t["added_tokens"] = json::object(); }, "added_tokens");
  expect_error([](json& t) { t["added_tokens"][0]["id"] = "0"; }, "added_tokens[0].id");
  expect_error([](json& t) { t["added_tokens"][1].erase("id"); }, "added_tokens[1].id");
  expect_error([](json& t) { t["added_tokens"][0]["special"] = "yes"; }, "added_tokens[0].special");
  expect_error([](json& t) { t["added_tokens"][2]["content"] = ""; }, "added_tokens[2].content");
  expect_error([](json& t) { t["added_tokens"][2] = 7; }, "added_tokens[2]");
  expect_error([](json& t) { t["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer.type");
  expect_error([](json& t) { t["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}}; },
               "normalizer.normalizers[1].type");
  // A Regex Replace would change the ids: refused, naming the pattern (a String one is supported).
  expect_error([](json& t) { t["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}}; },
               "normalizer.pattern");
  expect_error([](json& t) { t["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", " "}}; },
               "normalizer.pattern.String");
  expect_error([](json& t) { t["normalizer"] = {{"type", "Prepend"}}; }, "normalizer.prepend");
  expect_error([](json& t) {
    json doubling = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aa"}};
    t["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
    for (int i = 0; i < 40; ++i) t["normalizer"]["normalizers"].push_back(doubling);  // 2^40-fold
  }, "normalizer: its Replace steps could grow");
  expect_error([](json& t) { t["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer");
  expect_error([](json& t) { t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}}; },
               "pre_tokenizer.replacement");
  expect_error([](json& t) { t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}}; },
               "pre_tokenizer.prepend_scheme");
  expect_error([](json& t) { std::swap(t["pre_tokenizer"]["pretokenizers"][0], t["pre_tokenizer"]["pretokenizers"][1]); },
               "pre_tokenizer.pretokenizers[0]");
  expect_error([](json& t) { t["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}; },
               "pre_tokenizer.pretokenizers[0].pattern");
  expect_error([](json& t) { t["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}}; },
               "pre_tokenizer.pretokenizers[0].behavior");
  expect_error([](json& t) { t["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Split"}, {"pattern", "a"}, {"behavior", "Isolated"}}; },
               "pre_tokenizer.pretokenizers[0].pattern");
  expect_error([](json& t) { t["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type");
  expect_error([](json& t) { t["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "CTC"}}}}}; },
               "decoder.decoders[1].type");
  expect_error([](json& t) { t["decoder"] = {{"type", "Replace"}, {"pattern", {{"Regex", "x"}}}, {"content", "y"}}; },
               "decoder.pattern");
  expect_error([](json& t) { t["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}}; },
               "decoder.start");
}

TEST(TokenizerHostile, MergesReferringToUnknownTokens) {
  expect_error([](json& t) { t["model"]["merges"].push_back("<nope> a"); }, "token `<nope>` is not in model.vocab");
  expect_error([](json& t) { t["model"]["merges"].push_back("a <nope>"); }, "token `<nope>` is not in model.vocab");
  // Both halves exist but their concatenation does not.
  expect_error([](json& t) { t["model"]["merges"].push_back("q z"); }, "merged token `qz` is not in model.vocab");
  expect_error([](json& t) { t["model"]["merges"].push_back(json::array({"q", "z"})); }, "model.merges[");
}

TEST(TokenizerHostile, DeeplyNestedInputIsRefused) {
  json nested = {{"type", "NFC"}};
  for (int i = 0; i < 100; ++i) nested = {{"type", "Sequence"}, {"normalizers", json::array({nested})}};
  expect_error([&](json& t) { t["normalizer"] = nested; }, "nested deeper");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(Tokenizer::from_json(deep, "deep.json").ok());
}

TEST(TokenizerHostile, MissingFileIsNotFound) {
  auto result = Tokenizer::load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(TokenizerHostile, DecodeRejectsIdsOutOfRange) {
  auto tok = Tokenizer::load(kTinyPath);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  for (int32_t bad : {-1, tok->vocab_size(), tok->vocab_size() + 1, INT_MAX, INT_MIN}) {
    std::vector<int32_t> ids = {5, bad};
    auto result = tok->decode(ids);
    ASSERT_FALSE(result.ok()) << bad;
    EXPECT_NE(result.status().message().find("ids[1] = " + std::to_string(bad)), std::string::npos)
        << result.status().message();
  }
  EXPECT_FALSE(tok->id_to_token(-3).has_value());
  EXPECT_FALSE(tok->is_special(INT_MAX));
}

TEST(TokenizerHostile, InvalidUtf8InputRoundTripsByteForByte) {
  auto tok = Tokenizer::load(kTinyPath);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::vector<std::string> texts = {"\xff", "abc\xc3", "\xe2\x82", "\xed\xa0\x80 surrogate", "a\0b", "\xc0\xaf",
                                    "12\xf4\x90\x80\x80" "34", "<|im_end|\xff>", "\xf0\x9f\x8e"};
  texts[4] = std::string("a\0b", 3);
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    texts.push_back(s);
  }
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok->encode(text);
    auto raw = tok->decode(ids, {.lossy_utf8 = false});
    ASSERT_TRUE(raw.ok());
    EXPECT_EQ(*raw, text);  // no normalizer: byte-level BPE keeps every byte
    auto lossy = tok->decode(ids);
    ASSERT_TRUE(lossy.ok());
  }
  auto lossy = tok->decode(tok->encode("a\xff" "b"));
  ASSERT_TRUE(lossy.ok());
  EXPECT_EQ(*lossy, "a\xEF\xBF\xBD" "b");  // U+FFFD
}

TEST(TokenizerHostile, MergesAsPairsEqualMergesAsStrings) {
  json tok = json::parse(tiny_text());
  for (auto& m : tok["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  auto pairs = Tokenizer::from_json(tok.dump(), "pairs.json");
  auto strings = Tokenizer::load(kTinyPath);
  ASSERT_TRUE(pairs.ok()) << pairs.status().to_string();
  ASSERT_TRUE(strings.ok());
  for (const char* text : {"What is the answer? 12 + 3", "<|im_start|>assistant\nReverse it.<|im_end|>", "  the end  "}) {
    EXPECT_EQ(pairs->encode(text), strings->encode(text)) << text;
  }
}

}  // namespace
}  // namespace rlrun::engine
