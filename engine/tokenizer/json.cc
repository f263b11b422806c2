// tokenizer/json.cc - tokenizer.json -> TokenizerImpl. Every field is type-checked: a hostile or
// malformed file gives a Status "<file>: <field path>: <what is wrong>", never an exception or a crash.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/observe/log.h"
#include "engine/tokenizer/internal.h"

namespace rlrun::engine {
namespace {

using nlohmann::json;

// Nested Sequences deeper than this are refused (the parser recurses once per level).
constexpr int kMaxSequenceDepth = 16;

// How many times longer the Replace normalizers may make a text (see check_normalizer_growth).
constexpr double kMaxNormalizerGrowth = 64;

// Ids size per-id tables: a larger id in a file is an error, not a multi-GB allocation.
// Ids must also be dense-ish (see check_ids_dense), so memory stays proportional to the file.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

// GPT-2's pre-tokenization regex, as HF's ByteLevel pre-tokenizer hard-codes it.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  Status error(const std::string& path, const std::string& what) const {
    return invalid_argument(str(source_, ": ", path, ": ", what));
  }

  // The member `key` of `obj`, or nullptr when absent or null.
  static const json* member(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }

  Result<bool> get_bool(const json& obj, const std::string& path, const char* key, bool dflt) const {
    const json* v = member(obj, key);
    if (v == nullptr) return dflt;
    if (!v->is_boolean()) return error(path + "." + key, str("expected true or false, got ", v->type_name()));
    return v->get<bool>();
  }

  Result<std::string> get_string(const json& obj, const std::string& path, const char* key) const {
    const json* v = member(obj, key);
    if (v == nullptr) return error(path + "." + key, "missing (expected a string)");
    if (!v->is_string()) return error(path + "." + key, str("expected a string, got ", v->type_name()));
    return v->get<std::string>();
  }

  Result<int32_t> get_id(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) return error(path, str("expected a token id (integer), got ", v.type_name()));
    int64_t id = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), kMaxTokenId + 1))
                                        : v.get<int64_t>();
    if (id < 0 || id > kMaxTokenId) return error(path, str("token id ", v.dump(), " is outside [0, ", kMaxTokenId, "]"));
    return static_cast<int32_t>(id);
  }

  Status parse_model(const json& model, TokenizerImpl* impl) const;
  Status parse_merges(const json& merges, BpeModel* bpe) const;
  Status parse_added_tokens(const json& added, TokenizerImpl* impl) const;
  Status parse_normalizer(const json& n, const std::string& path, int depth, TokenizerImpl* impl) const;
  Status parse_pre_tokenizer(const json& p, const std::string& path, bool last, int depth,
                             TokenizerImpl* impl) const;
  // Replace steps that each lengthen the text multiply: a file whose steps could grow a text more
  // than kMaxNormalizerGrowth-fold is refused, not run out of memory on.
  Status check_normalizer_growth(const std::vector<NormalizerStep>& steps) const;
  Status parse_decoder(const json& d, const std::string& path, int depth, TokenizerImpl* impl) const;
  Status parse_metaspace(const json& p, const std::string& path, MetaspaceStep* step) const;
  // A {"String": s} pattern (HF Replace); a {"Regex": ...} one is refused, naming `path`.
  Result<std::string> get_string_pattern(const json& obj, const std::string& path) const;

 private:
  std::string source_;
};

Status Parser::parse_model(const json& model, TokenizerImpl* impl) const {
  if (!model.is_object()) return error("model", str("expected an object, got ", model.type_name()));
  RLRUN_ASSIGN_OR_RETURN(std::string type, get_string(model, "model", "type"));
  if (type != "BPE") return error("model.type", str("`", type, "` is not supported (only BPE)"));
  if (const json* d = member(model, "dropout"); d != nullptr && !(d->is_number() && d->get<double>() == 0.0)) {
    return error("model.dropout", "BPE dropout is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = member(model, key);
    if (v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      return error(str("model.", key), "is not supported (expected null)");
    }
  }
  BpeModel& bpe = impl->bpe;
  RLRUN_ASSIGN_OR_RETURN(bpe.byte_fallback, get_bool(model, "model", "byte_fallback", false));
  RLRUN_ASSIGN_OR_RETURN(bpe.fuse_unk, get_bool(model, "model", "fuse_unk", false));
  RLRUN_ASSIGN_OR_RETURN(bpe.ignore_merges, get_bool(model, "model", "ignore_merges", false));

  const json* vocab = member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) return error("model.vocab", "missing or not an object {token: id}");
  bpe.vocab.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    RLRUN_ASSIGN_OR_RETURN(int32_t id, get_id(id_json, str("model.vocab[\"", token, "\"]")));
    bpe.vocab.emplace(token, id);
  }
  if (member(model, "unk_token") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(std::string unk, get_string(model, "model", "unk_token"));
    auto it = bpe.vocab.find(unk);
    if (it == bpe.vocab.end()) return error("model.unk_token", str("`", unk, "` is not in model.vocab"));
    bpe.unk_id = it->second;
  }
  const json* merges = member(model, "merges");
  if (merges == nullptr) return error("model.merges", "missing (expected a list)");
  return parse_merges(*merges, &bpe);
}

Status Parser::parse_merges(const json& merges, BpeModel* bpe) const {
  if (!merges.is_array()) return error("model.merges", str("expected a list, got ", merges.type_name()));
  bpe->merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string path = str("model.merges[", rank, "]");
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return error(path, str("`", s, "` is not two tokens separated by one space"));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return error(path, str("expected \"a b\" or [\"a\", \"b\"], got ", m.dump().substr(0, 80)));
    }
    auto l = bpe->vocab.find(left), r = bpe->vocab.find(right), merged = bpe->vocab.find(left + right);
    if (l == bpe->vocab.end()) return error(path, str("token `", left, "` is not in model.vocab"));
    if (r == bpe->vocab.end()) return error(path, str("token `", right, "` is not in model.vocab"));
    if (merged == bpe->vocab.end()) return error(path, str("merged token `", left + right, "` is not in model.vocab"));
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) | static_cast<uint32_t>(r->second);
    bpe->merges[key] = {static_cast<int32_t>(rank), merged->second};  // a repeated pair: the last wins, as in HF
  }
  return Status::ok_status();
}

Status Parser::parse_added_tokens(const json& added, TokenizerImpl* impl) const {
  if (!added.is_array()) return error("added_tokens", str("expected a list, got ", added.type_name()));
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const std::string path = str("added_tokens[", i, "]");
    if (!t.is_object()) return error(path, str("expected an object, got ", t.type_name()));
    AddedToken token;
    RLRUN_ASSIGN_OR_RETURN(token.content, get_string(t, path, "content"));
    if (token.content.empty()) return error(path + ".content", "is empty");
    if (member(t, "id") == nullptr) return error(path + ".id", "missing");
    RLRUN_ASSIGN_OR_RETURN(token.id, get_id(t["id"], path + ".id"));
    RLRUN_ASSIGN_OR_RETURN(token.special, get_bool(t, path, "special", false));
    RLRUN_ASSIGN_OR_RETURN(token.lstrip, get_bool(t, path, "lstrip", false));
    RLRUN_ASSIGN_OR_RETURN(token.rstrip, get_bool(t, path, "rstrip", false));
    RLRUN_ASSIGN_OR_RETURN(token.single_word, get_bool(t, path, "single_word", false));
    RLRUN_ASSIGN_OR_RETURN(token.normalized, get_bool(t, path, "normalized", !token.special));
    // HF gives an added token that is also in the vocab the vocab's id, whatever the file says.
    if (auto it = impl->bpe.vocab.find(token.content); it != impl->bpe.vocab.end() && it->second != token.id) {
      log::warn(str(source_, ": ", path, ": id ", token.id, " but model.vocab has `", token.content,
                    "` at ", it->second, "; using ", it->second, " as HF tokenizers does"));
      token.id = it->second;
    }
    impl->added.push_back(std::move(token));
  }
  return Status::ok_status();
}

Status Parser::parse_normalizer(const json& n, const std::string& path, int depth, TokenizerImpl* impl) const {
  if (!n.is_object()) return error(path, str("expected an object, got ", n.type_name()));
  if (depth > kMaxSequenceDepth) return error(path, str("Sequences nested deeper than ", kMaxSequenceDepth));
  RLRUN_ASSIGN_OR_RETURN(std::string type, get_string(n, path, "type"));
  NormalizerStep step;
  if (type == "NFC") step.kind = NormalizerKind::kNFC;
  else if (type == "NFD") step.kind = NormalizerKind::kNFD;
  else if (type == "NFKC") step.kind = NormalizerKind::kNFKC;
  else if (type == "NFKD") step.kind = NormalizerKind::kNFKD;
  else if (type == "Prepend") {
    step.kind = NormalizerKind::kPrepend;
    RLRUN_ASSIGN_OR_RETURN(step.text, get_string(n, path, "prepend"));
  } else if (type == "Replace") {
    step.kind = NormalizerKind::kReplace;
    RLRUN_ASSIGN_OR_RETURN(step.text, get_string_pattern(n, path));
    RLRUN_ASSIGN_OR_RETURN(step.content, get_string(n, path, "content"));
  } else if (type == "Strip") {
    step.kind = NormalizerKind::kStrip;
    RLRUN_ASSIGN_OR_RETURN(step.strip_left, get_bool(n, path, "strip_left", true));
    RLRUN_ASSIGN_OR_RETURN(step.strip_right, get_bool(n, path, "strip_right", true));
  } else if (type == "Sequence") {
    const json* list = member(n, "normalizers");
    if (list == nullptr || !list->is_array()) return error(path + ".normalizers", "missing or not a list");
    for (size_t i = 0; i < list->size(); ++i) {
      RLRUN_RETURN_IF_ERROR(parse_normalizer((*list)[i], str(path, ".normalizers[", i, "]"), depth + 1, impl));
    }
    return Status::ok_status();
  } else {
    return error(path + ".type", str("normalizer `", type, "` is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Sequence)"));
  }
  impl->normalizers.push_back(std::move(step));
  return Status::ok_status();
}

Result<SplitBehavior> parse_behavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument(str("`", s, "` is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous"));
}

Status Parser::parse_pre_tokenizer(const json& p, const std::string& path, bool last, int depth,
                                   TokenizerImpl* impl) const {
  if (!p.is_object()) return error(path, str("expected an object, got ", p.type_name()));
  if (depth > kMaxSequenceDepth) return error(path, str("Sequences nested deeper than ", kMaxSequenceDepth));
  RLRUN_ASSIGN_OR_RETURN(std::string type, get_string(p, path, "type"));
  if (type == "Sequence") {
    const json* list = member(p, "pretokenizers");
    if (list == nullptr || !list->is_array()) return error(path + ".pretokenizers", "missing or not a list");
    for (size_t i = 0; i < list->size(); ++i) {
      bool is_last = last && i + 1 == list->size();
      RLRUN_RETURN_IF_ERROR(
          parse_pre_tokenizer((*list)[i], str(path, ".pretokenizers[", i, "]"), is_last, depth + 1, impl));
    }
    return Status::ok_status();
  }
  if (type == "ByteLevel") {
    if (!last) return error(path, "ByteLevel must be the last pre-tokenizer (it maps text to byte symbols)");
    ByteLevelStep& step = impl->byte_level;
    step.present = true;
    RLRUN_ASSIGN_OR_RETURN(step.add_prefix_space, get_bool(p, path, "add_prefix_space", true));
    RLRUN_ASSIGN_OR_RETURN(step.use_regex, get_bool(p, path, "use_regex", true));
    if (step.use_regex) {
      RLRUN_ASSIGN_OR_RETURN(step.regex, Regex::compile(kGpt2Pattern, false));
    }
    return Status::ok_status();
  }
  if (impl->byte_level.present) return error(path, "ByteLevel must be the last pre-tokenizer");
  PreTokenizerStep pre;
  SplitStep& step = pre.split;
  if (type == "Metaspace") {
    pre.is_metaspace = true;
    RLRUN_RETURN_IF_ERROR(parse_metaspace(p, path, &pre.metaspace));
  } else if (type == "Digits") {
    RLRUN_ASSIGN_OR_RETURN(bool individual, get_bool(p, path, "individual_digits", false));
    RLRUN_ASSIGN_OR_RETURN(step.regex, Regex::compile(individual ? R"(\p{N})" : R"(\p{N}+)", false));
  } else if (type == "Split") {
    const json* pattern = member(p, "pattern");
    if (pattern == nullptr || !pattern->is_object()) return error(path + ".pattern", "missing or not an object {\"Regex\": ...} / {\"String\": ...}");
    bool literal = pattern->contains("String");
    if (!literal && !pattern->contains("Regex")) return error(path + ".pattern", "expected a key `Regex` or `String`");
    RLRUN_ASSIGN_OR_RETURN(std::string text, get_string(*pattern, path + ".pattern", literal ? "String" : "Regex"));
    auto regex = Regex::compile(text, literal);
    if (!regex.ok()) return error(path + ".pattern", regex.status().message());
    step.regex = std::move(regex).value();
    RLRUN_ASSIGN_OR_RETURN(std::string behavior, get_string(p, path, "behavior"));
    auto b = parse_behavior(behavior);
    if (!b.ok()) return error(path + ".behavior", b.status().message());
    step.behavior = *b;
    RLRUN_ASSIGN_OR_RETURN(step.invert, get_bool(p, path, "invert", false));
  } else {
    return error(path + ".type", str("pre-tokenizer `", type, "` is not supported (supported: ByteLevel, Metaspace, Split, Digits, Sequence)"));
  }
  impl->pre_steps.push_back(std::move(pre));
  return Status::ok_status();
}

Result<std::string> Parser::get_string_pattern(const json& obj, const std::string& path) const {
  const json* pattern = member(obj, "pattern");
  if (pattern == nullptr || !pattern->is_object()) return error(path + ".pattern", "missing or not an object {\"String\": ...}");
  if (pattern->contains("Regex")) {
    return error(path + ".pattern", "a Regex pattern is not supported here (only {\"String\": ...})");
  }
  RLRUN_ASSIGN_OR_RETURN(std::string text, get_string(*pattern, path + ".pattern", "String"));
  if (text.empty()) return error(path + ".pattern.String", "is empty");
  return text;
}

Status Parser::check_normalizer_growth(const std::vector<NormalizerStep>& steps) const {
  double growth = 1;
  for (const NormalizerStep& step : steps) {
    // NFKC and friends grow a char at most 18-fold (U+FDFA), but not again on a second pass.
    if (step.kind == NormalizerKind::kReplace && step.content.size() > step.text.size()) {
      growth *= static_cast<double>(step.content.size()) / static_cast<double>(step.text.size());
    }
  }
  if (growth > kMaxNormalizerGrowth) {
    return error("normalizer", str("its Replace steps could grow a text ", growth, "-fold (at most ",
                                   kMaxNormalizerGrowth, " is accepted)"));
  }
  return Status::ok_status();
}

Status Parser::parse_metaspace(const json& p, const std::string& path, MetaspaceStep* step) const {
  RLRUN_ASSIGN_OR_RETURN(step->replacement, get_string(p, path, "replacement"));
  size_t end = 0;
  if (step->replacement.empty() || next_code_point(step->replacement, &end) < 0 || end != step->replacement.size()) {
    return error(path + ".replacement", "must be one character");
  }
  RLRUN_ASSIGN_OR_RETURN(step->split, get_bool(p, path, "split", true));
  std::string scheme = "always";
  if (member(p, "prepend_scheme") != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(scheme, get_string(p, path, "prepend_scheme"));
  } else if (member(p, "add_prefix_space") != nullptr) {  // files from before prepend_scheme
    RLRUN_ASSIGN_OR_RETURN(bool add, get_bool(p, path, "add_prefix_space", true));
    scheme = add ? "always" : "never";
  }
  if (scheme == "always") step->prepend_scheme = PrependScheme::kAlways;
  else if (scheme == "first") step->prepend_scheme = PrependScheme::kFirst;
  else if (scheme == "never") step->prepend_scheme = PrependScheme::kNever;
  else return error(path + ".prepend_scheme", str("`", scheme, "` is not one of always, first, never"));
  RLRUN_ASSIGN_OR_RETURN(step->splitter.regex, Regex::compile(step->replacement, true));
  step->splitter.behavior = SplitBehavior::kMergedWithNext;
  return Status::ok_status();
}

Status Parser::parse_decoder(const json& d, const std::string& path, int depth, TokenizerImpl* impl) const {
  if (!d.is_object()) return error(path, str("expected an object, got ", d.type_name()));
  if (depth > kMaxSequenceDepth) return error(path, str("Sequences nested deeper than ", kMaxSequenceDepth));
  RLRUN_ASSIGN_OR_RETURN(std::string type, get_string(d, path, "type"));
  if (type == "Sequence") {
    const json* list = member(d, "decoders");
    if (list == nullptr || !list->is_array()) return error(path + ".decoders", "missing or not a list");
    for (size_t i = 0; i < list->size(); ++i) {
      RLRUN_RETURN_IF_ERROR(parse_decoder((*list)[i], str(path, ".decoders[", i, "]"), depth + 1, impl));
    }
    return Status::ok_status();
  }
  DecoderStep step;
  if (type == "ByteLevel") {
    step.kind = DecoderKind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecoderKind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderKind::kFuse;
  } else if (type == "Replace") {
    step.kind = DecoderKind::kReplace;
    RLRUN_ASSIGN_OR_RETURN(step.pattern, get_string_pattern(d, path));
    RLRUN_ASSIGN_OR_RETURN(step.content, get_string(d, path, "content"));
  } else if (type == "Strip") {
    step.kind = DecoderKind::kStrip;
    RLRUN_ASSIGN_OR_RETURN(step.content, get_string(d, path, "content"));
    size_t end = 0;
    if (step.content.empty() || next_code_point(step.content, &end) < 0 || end != step.content.size()) {
      return error(path + ".content", "must be one character");
    }
    for (auto [key, field] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      const json* v = member(d, key);
      if (v == nullptr || !v->is_number_unsigned()) return error(str(path, ".", key), "missing or not a count");
      *field = static_cast<int32_t>(std::min<uint64_t>(v->get<uint64_t>(), 1 << 20));
    }
  } else if (type == "Metaspace") {
    step.kind = DecoderKind::kMetaspace;
    MetaspaceStep m;
    RLRUN_RETURN_IF_ERROR(parse_metaspace(d, path, &m));
    step.replacement = m.replacement;
    step.metaspace_prepend = m.prepend_scheme != PrependScheme::kNever;
  } else {
    return error(path + ".type", str("decoder `", type, "` is not supported (supported: ByteLevel, ByteFallback, "
                                     "Fuse, Replace, Strip, Metaspace, Sequence)"));
  }
  impl->decoders.push_back(std::move(step));
  return Status::ok_status();
}

}  // namespace

std::string token_bytes(const std::string& token) {
  static const std::unordered_map<int32_t, char> char_to_byte = [] {
    std::unordered_map<int32_t, char> m;
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      m[next_code_point(byte_to_unicode()[b], &i)] = static_cast<char>(b);
    }
    return m;
  }();
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    auto it = char_to_byte.find(next_code_point(token, &i));
    if (it == char_to_byte.end()) return token;
    out.push_back(it->second);
  }
  return out;
}

namespace {

int32_t max_token_id(const TokenizerImpl& impl) {
  int32_t max_id = -1;
  for (const auto& [token, id] : impl.bpe.vocab) max_id = std::max(max_id, id);
  for (const AddedToken& t : impl.added) max_id = std::max(max_id, t.id);
  return max_id;
}

void build_id_tables(TokenizerImpl* impl) {
  const int32_t max_id = max_token_id(*impl);
  const size_t n = static_cast<size_t>(max_id + 1);
  impl->id_token.assign(n, {});
  impl->id_bytes.assign(n, {});
  impl->id_assigned.assign(n, 0);
  impl->id_special.assign(n, 0);
  for (const auto& [token, id] : impl->bpe.vocab) {
    impl->id_token[id] = token;
    impl->id_assigned[id] = 1;
  }
  for (const AddedToken& t : impl->added) {  // an added token names its id over the vocab entry
    impl->id_token[t.id] = t.content;
    impl->id_assigned[t.id] = 1;
    impl->id_special[t.id] = t.special;
  }
  for (size_t id = 0; id < n; ++id) impl->id_bytes[id] = token_bytes(impl->id_token[id]);
  for (const AddedToken& t : impl->added) {
    (t.normalized ? impl->added_normalized : impl->added_raw).push_back(&t);
    (t.normalized ? impl->added_normalized_first : impl->added_raw_first)[static_cast<uint8_t>(t.content[0])] = true;
  }
  for (auto* list : {&impl->added_raw, &impl->added_normalized}) {
    std::stable_sort(list->begin(), list->end(), [](const AddedToken* a, const AddedToken* b) {
      return a->content.size() > b->content.size();
    });
  }
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    auto it = impl->bpe.vocab.find(byte_to_unicode()[b]);
    impl->bpe.byte_ids[b] = it == impl->bpe.vocab.end() ? -1 : it->second;
    const std::string byte_token = str("<0x", kHex[b >> 4], kHex[b & 15], ">");  // HF format!("<{:#04X}>")
    it = impl->bpe.vocab.find(byte_token);
    impl->bpe.fallback_ids[b] = it == impl->bpe.vocab.end() ? -1 : it->second;
  }
}

}  // namespace

Result<std::shared_ptr<TokenizerImpl>> parse_tokenizer_json(std::string_view json_text,
                                                            const std::string& source_name) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return invalid_argument(str(source_name, ": not valid JSON (truncated or corrupt file?): ", e.what()));
  }
  return parse_tokenizer_json(root, source_name);
}

Result<std::shared_ptr<TokenizerImpl>> parse_tokenizer_json(const nlohmann::json& root, const std::string& source_name) {
  Parser parser(source_name);
  if (!root.is_object()) return parser.error("(top level)", str("expected an object, got ", root.type_name()));
  auto impl = std::make_shared<TokenizerImpl>();
  impl->source_name = source_name;
  const json* model = Parser::member(root, "model");
  if (model == nullptr) return parser.error("model", "missing");
  RLRUN_RETURN_IF_ERROR(parser.parse_model(*model, impl.get()));
  if (const json* added = Parser::member(root, "added_tokens")) {
    RLRUN_RETURN_IF_ERROR(parser.parse_added_tokens(*added, impl.get()));
  }
  if (const json* n = Parser::member(root, "normalizer")) {
    RLRUN_RETURN_IF_ERROR(parser.parse_normalizer(*n, "normalizer", 0, impl.get()));
    RLRUN_RETURN_IF_ERROR(parser.check_normalizer_growth(impl->normalizers));
  }
  if (const json* pre = Parser::member(root, "pre_tokenizer")) {
    RLRUN_RETURN_IF_ERROR(parser.parse_pre_tokenizer(*pre, "pre_tokenizer", true, 0, impl.get()));
  }
  impl->bpe.byte_level = impl->byte_level.present;
  if (const json* decoder = Parser::member(root, "decoder")) {
    RLRUN_RETURN_IF_ERROR(parser.parse_decoder(*decoder, "decoder", 0, impl.get()));
  } else {
    impl->has_decoder = false;
  }
  // post_processor (e.g. TemplateProcessing adding BOS) is not read: encode() adds no special tokens.
  const size_t n_tokens = impl->bpe.vocab.size() + impl->added.size();
  if (static_cast<size_t>(max_token_id(*impl)) >= 2 * n_tokens + 1024) {
    return parser.error("model.vocab", str("ids are sparse: the largest is ", max_token_id(*impl), " for only ",
                                           n_tokens, " tokens"));
  }
  build_id_tables(impl.get());
  return impl;
}

}  // namespace rlrun::engine
