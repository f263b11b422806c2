#include "engine/io/gguf_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "common/observe/log.h"

namespace rlrun::engine {
namespace {

// nlohmann::json, not ordered_json: its objects are std::maps, where ordered_json's search a
// vector (quadratic for a 262k-token vocabulary). Key order means nothing to a tokenizer.json.
using Json = nlohmann::json;

// The split regexes of transformers' GGUF_PRE_TOKENIZER_SPLITS (llama.cpp's pre-tokenizer types
// QWEN2 and LLAMA3; the same patterns as the models' own tokenizer.json files).
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr int64_t kControl = 3, kUserDefined = 4;  // llama.cpp's token types
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// The code point at s[*i] (advancing *i), or -1 for a byte that starts no valid UTF-8 sequence.
int32_t next_code_point(std::string_view s, size_t* i) {
  const auto b = static_cast<uint8_t>(s[*i]);
  const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || *i + n > s.size()) {
    ++*i;
    return -1;
  }
  int32_t cp = n == 1 ? b : b & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    const auto c = static_cast<uint8_t>(s[*i + k]);
    if ((c >> 6) != 2) {
      ++*i;
      return -1;
    }
    cp = cp << 6 | (c & 0x3F);
  }
  static constexpr int32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++*i;
    return -1;
  }
  *i += n;
  return cp;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (next_code_point(s, &i) < 0) return false;
  }
  return true;
}

// GPT-2's byte alphabet: the printable bytes stand for themselves, the other 68 for U+0100..U+0143.
bool in_byte_alphabet(int32_t cp) { return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 323); }

bool spelled_in_byte_alphabet(std::string_view token) {
  for (size_t i = 0; i < token.size();) {
    if (!in_byte_alphabet(next_code_point(token, &i))) return false;
  }
  return true;
}

// The token's UTF-8 bytes written in the byte alphabet (transformers' byte_level_tokenizer does
// this to a token that uses any other char).
std::string byte_level_respelling(std::string_view token) {
  std::string out;
  for (const char c : token) {
    const auto b = static_cast<uint8_t>(c);
    int32_t cp = b;
    if (!in_byte_alphabet(b)) cp = 256 + (b <= 32 ? b : b <= 160 ? b - 127 + 33 : 67);  // 0-32, 127-160, 173
    out += cp < 0x80 ? std::string(1, static_cast<char>(cp))
                     : std::string{static_cast<char>(0xC0 | cp >> 6), static_cast<char>(0x80 | (cp & 0x3F))};
  }
  return out;
}

// Python's str.isspace() (what `not token.strip()` tests).
bool is_python_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Gemma's respelling of a whitespace token that holds a space: one U+2581 per char.
std::string gemma_respelling(std::string_view token) {
  if (token.find(' ') == std::string_view::npos) return std::string(token);
  size_t chars = 0;
  for (size_t i = 0; i < token.size(); ++chars) {
    if (!is_python_space(next_code_point(token, &i))) return std::string(token);
  }
  std::string out;
  for (size_t k = 0; k < chars; ++k) out += kMetaspace;
  return out;
}

// The vocabulary as the tokenizer.json spells it; a token spelled twice keeps its last id (as a
// Python dict built from the list does).
struct Vocab {
  std::vector<std::string> tokens;  // by id
  std::unordered_map<std::string_view, int32_t> ids;
};

Vocab make_vocab(std::vector<std::string> tokens) {
  Vocab v;
  v.tokens = std::move(tokens);
  v.ids.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) v.ids[v.tokens[i]] = static_cast<int32_t>(i);
  return v;
}

// transformers' generate_merges(vocab, vocab_scores={token: -id}): every split of a token into
// two tokens, the token with the smaller (last) id first, then the longer left part first.
Json rebuilt_merges(const Vocab& v) {
  struct Merge {
    int32_t merged;           // the merged token's id: the priority
    int32_t left_chars;       // longer left part first
    std::string_view left, right;
  };
  std::vector<Merge> merges;
  std::vector<size_t> starts;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& token = v.tokens[i];
    const int32_t id = v.ids.at(token);
    if (id != static_cast<int32_t>(i)) continue;  // a respelled duplicate: counted once, at its last id
    starts.clear();
    for (size_t at = 0; at < token.size();) {
      starts.push_back(at);
      next_code_point(token, &at);
    }
    for (size_t k = 1; k < starts.size(); ++k) {
      const std::string_view left = std::string_view(token).substr(0, starts[k]);
      const std::string_view right = std::string_view(token).substr(starts[k]);
      if (v.ids.count(left) != 0 && v.ids.count(right) != 0) merges.push_back({id, static_cast<int32_t>(k), left, right});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return a.merged != b.merged ? a.merged < b.merged : a.left_chars > b.left_chars;
  });
  Json out = Json::array();
  for (const Merge& m : merges) out.push_back(Json::array({std::string(m.left), std::string(m.right)}));
  return out;
}

Json added_token(const std::string& content, int32_t id, bool special) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
          {"normalized", false}, {"special", special}};
}

// The metadata the tokenizer needs: tokens and their types, checked.
struct Metadata {
  std::string model, pre = "default";
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
};

Result<Metadata> read_metadata(const GgufFile& file) {
  Metadata m;
  RLRUN_ASSIGN_OR_RETURN(m.model, file.get_string("tokenizer.ggml.model"));
  if (file.find("tokenizer.ggml.pre") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(m.pre, file.get_string("tokenizer.ggml.pre"));
  }
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  if (tokens.empty()) return invalid_argument(str(file.source(), ": tokenizer.ggml.tokens is empty"));
  m.tokens.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!valid_utf8(tokens[i])) return invalid_argument(str(file.source(), ": tokenizer.ggml.tokens[", i, "] is not valid UTF-8"));
    m.tokens.emplace_back(tokens[i]);
  }
  m.types.assign(tokens.size(), 1);  // 1: normal
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(m.types, file.get_ints("tokenizer.ggml.token_type"));
    if (m.types.size() != tokens.size()) {
      return invalid_argument(str(file.source(), ": tokenizer.ggml.token_type has ", m.types.size(), " entries for ",
                                  tokens.size(), " tokens"));
    }
  }
  return m;
}

// The split before ByteLevel that tokenizer.ggml.pre names, or an error listing the known ones.
Result<Json> byte_level_pre_tokenizer(const GgufFile& file, const std::string& pre) {
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  auto split_then_bytes = [](const char* regex) {
    return Json{{"type", "Sequence"},
                {"pretokenizers", Json::array({Json{{"type", "Split"}, {"pattern", {{"Regex", regex}}},
                                                    {"behavior", "Isolated"}, {"invert", false}},
                                               Json{{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                    {"trim_offsets", true}, {"use_regex", false}}})}};
  };
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return split_then_bytes(kQwen2Split);
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return split_then_bytes(kLlama3Split);
  if (pre == "smollm") {
    return Json{{"type", "Sequence"},
                {"pretokenizers", Json::array({Json{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  }
  if (pre == "default" || pre == "gpt2") return byte_level;
  return invalid_argument(str(file.source(), ": tokenizer.ggml.pre = ", pre, " is not supported (qwen2, deepseek-r1-qwen, ",
                              "llama-bpe, llama3, llama-v3, smollm, gpt2, default)"));
}

Result<Json> byte_level_bpe(const GgufFile& file, const Metadata& m) {
  RLRUN_ASSIGN_OR_RETURN(const Json pre_tokenizer, byte_level_pre_tokenizer(file, m.pre));
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> merges, file.get_strings("tokenizer.ggml.merges"));
  std::vector<std::string> spelled;
  spelled.reserve(m.tokens.size());
  for (const std::string& t : m.tokens) spelled.push_back(spelled_in_byte_alphabet(t) ? t : byte_level_respelling(t));
  const Vocab v = make_vocab(std::move(spelled));
  Json added = Json::array(), vocab = Json::object(), merge_list = Json::array();
  for (size_t i = 0; i < m.tokens.size(); ++i) {
    vocab[v.tokens[i]] = i;
    const bool control = m.types[i] == kControl && v.tokens[i] == m.tokens[i];
    const bool user = m.types[i] == kUserDefined && v.ids.count(m.tokens[i]) != 0;
    if (control || user) added.push_back(added_token(m.tokens[i], v.ids.at(m.tokens[i]), control));
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    if (!valid_utf8(merges[i])) return invalid_argument(str(file.source(), ": tokenizer.ggml.merges[", i, "] is not valid UTF-8"));
    merge_list.push_back(std::string(merges[i]));
  }
  return Json{
      {"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", pre_tokenizer},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"ignore_merges", false}, {"vocab", vocab}, {"merges", merge_list}}},
  };
}

Result<Json> gemma_bpe(const Metadata& m) {
  std::vector<std::string> spelled;
  spelled.reserve(m.tokens.size());
  for (const std::string& t : m.tokens) spelled.push_back(gemma_respelling(t));
  const Vocab v = make_vocab(std::move(spelled));
  Json added = Json::array(), vocab = Json::object();
  for (size_t i = 0; i < m.tokens.size(); ++i) {
    vocab[v.tokens[i]] = i;
    // A respelled token is only in the vocabulary under its new spelling: not added whole.
    const bool control = m.types[i] == kControl && v.ids.count(m.tokens[i]) != 0;
    const bool user = m.types[i] == kUserDefined && v.ids.count(m.tokens[i]) != 0;
    if (control || user) added.push_back(added_token(m.tokens[i], v.ids.at(m.tokens[i]), control));
  }
  const Json unk = v.ids.count("<unk>") != 0 ? Json("<unk>") : Json(nullptr);  // GemmaTokenizer's unk_token
  return Json{
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}}},
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "Sequence"},
                   {"decoders", Json::array({Json{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                                             Json{{"type", "ByteFallback"}}, Json{{"type", "Fuse"}}})}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", true},
                 {"ignore_merges", false}, {"vocab", vocab}, {"merges", rebuilt_merges(v)}}},
  };
}

// The tokenizer.json document of the file's tokenizer.
Result<Json> tokenizer_document(const GgufFile& file) {
  RLRUN_ASSIGN_OR_RETURN(const Metadata m, read_metadata(file));
  Json j;
  if (m.model == "gpt2") {
    RLRUN_ASSIGN_OR_RETURN(j, byte_level_bpe(file, m));
  } else if (m.model == "llama") {
    RLRUN_ASSIGN_OR_RETURN(const std::string arch, file.get_string("general.architecture"));
    if (arch != "gemma" && arch != "gemma2" && arch != "gemma3") {
      return invalid_argument(str(file.source(), ": tokenizer.ggml.model = llama (SentencePiece) is supported in gemma, ",
                                  "gemma2 and gemma3 files; this one is ", arch));
    }
    RLRUN_ASSIGN_OR_RETURN(j, gemma_bpe(m));
  } else {
    return invalid_argument(str(file.source(), ": tokenizer.ggml.model = ", m.model,
                                " is not supported (gpt2: byte-level BPE; llama: SentencePiece, in Gemma files)"));
  }
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  return j;
}

}  // namespace

Result<std::string> gguf_tokenizer_json(const GgufFile& file) {
  RLRUN_ASSIGN_OR_RETURN(const Json j, tokenizer_document(file));
  return j.dump();  // every string was checked to be UTF-8
}

Result<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  RLRUN_ASSIGN_OR_RETURN(const Json j, tokenizer_document(file));
  return Tokenizer::from_json_value(j, path);
}

Result<std::string> gguf_tokenizer_config_json(const GgufFile& file, const ModelConfig& config) {
  RLRUN_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, file.get_strings("tokenizer.ggml.tokens"));
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";  // tokenizer.json as is; not model_type's LlamaTokenizer
  constexpr std::pair<const char*, const char*> kSpecial[] = {{"tokenizer.ggml.bos_token_id", "bos_token"},
                                                              {"tokenizer.ggml.eos_token_id", "eos_token"},
                                                              {"tokenizer.ggml.unknown_token_id", "unk_token"},
                                                              {"tokenizer.ggml.padding_token_id", "pad_token"}};
  for (const auto& [key, name] : kSpecial) {
    if (file.find(key) == nullptr) continue;
    RLRUN_ASSIGN_OR_RETURN(const int64_t id, file.get_int(key));
    if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
      return invalid_argument(str(file.source(), ": ", key, " = ", id, " is not a token id"));
    }
    j[name] = std::string(tokens[id]);
  }
  for (const auto& [key, name] : {std::pair{"tokenizer.ggml.add_bos_token", "add_bos_token"},
                                  std::pair{"tokenizer.ggml.add_eos_token", "add_eos_token"}}) {
    if (file.find(key) == nullptr) continue;
    RLRUN_ASSIGN_OR_RETURN(const bool add, file.get_bool(key));
    j[name] = add;
  }
  if (file.find("tokenizer.chat_template") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(const std::string chat_template, file.get_string("tokenizer.chat_template"));
    j["chat_template"] = chat_template;
  }
  j["model_max_length"] = config.max_position;
  j["clean_up_tokenization_spaces"] = false;
  try {
    return j.dump(2) + "\n";
  } catch (const nlohmann::json::exception&) {
    return invalid_argument(str(file.source(), ": a special token or the chat template is not valid UTF-8"));
  }
}

}  // namespace rlrun::engine
