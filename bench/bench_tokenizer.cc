// bench_tokenizer - encode/decode throughput of the tokenizer.json BPE, single thread.
//
//   build/bench/bench_tokenizer [tokenizer.json ...]
// Without arguments: configs/tokenizers/tiny.json and, when fetched, the SmolLM2 and Claude v1
// tokenizers under build/models/. The corpus (~2 MB) is generated from a fixed seed: English-like
// words, numbers, code, whitespace runs and non-ASCII text. "cold" is the first pass over the
// corpus on a fresh tokenizer (every distinct word goes through BPE), "warm" a second pass
// (words come from the cache). Prints figures; never fails on time.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using rlrun::engine::Tokenizer;
using rlrun::seconds_since;

std::vector<std::string> make_corpus() {
  const char* words[] = {"the", "of", "and", "to", "in", "is", "that", "for", "it", "with", "as", "was", "on",
                         "model", "training", "reward", "policy", "gradient", "token", "sequence", "Answer",
                         "What", "Reverse", "string", "numbers", "café", "naïve", "日本語", "中文", "русский",
                         "émoji", "👍", "🎉", "def", "return", "self", "int", "std::vector<int>", "{", "}", "()",
                         "==", "+=", "->", "//", "#", "'s", "n't", "x_1", "HTTP/1.1", "<|im_end|>"};
  std::mt19937 rng(1234);
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < (2u << 20)) {
    std::string doc;
    int n = 20 + static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) {
      switch (rng() % 10) {
        case 0: doc += std::to_string(rng() % 100000); break;
        case 1: doc += "\n"; break;
        case 2: doc += std::string(1 + rng() % 6, ' '); break;
        case 3: doc += ", "; break;
        default: doc += words[rng() % (sizeof(words) / sizeof(words[0]))]; doc += ' ';
      }
    }
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

void bench(const std::string& path, const std::vector<std::string>& docs, size_t bytes) {
  auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::load(path);
  if (!tok.ok()) {
    std::printf("%s: %s\n", path.c_str(), tok.status().to_string().c_str());
    return;
  }
  const double load_s = seconds_since(t0);
  std::vector<std::vector<int32_t>> encoded(docs.size());
  for (const char* pass : {"cold", "warm"}) {
    size_t tokens = 0;
    t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < docs.size(); ++i) {
      encoded[i] = tok->encode(docs[i]);
      tokens += encoded[i].size();
    }
    const double s = seconds_since(t0);
    std::printf("  encode %s: %8.0f tokens/s  %6.1f MB/s  (%zu tokens, %.3f s)\n", pass, tokens / s,
                bytes / s / 1e6, tokens, s);
  }
  size_t tokens = 0, out_bytes = 0;
  t0 = std::chrono::steady_clock::now();
  for (const auto& ids : encoded) {
    tokens += ids.size();
    out_bytes += tok->decode(ids)->size();
  }
  const double s = seconds_since(t0);
  std::printf("  decode:      %8.0f tokens/s  (%zu bytes out)   load %.3f s, vocab %d\n", tokens / s, out_bytes,
              load_s, tok->vocab_size());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths(argv + 1, argv + argc);
  if (paths.empty()) {
    const std::string root = RLRUN_BENCH_SOURCE_DIR;
    paths = {root + "/configs/tokenizers/tiny.json"};
    for (const char* m : {"/build/models/smollm2-135m-instruct/tokenizer.json",
                          "/build/models/claude-v1-tokenizer/tokenizer.json"}) {
      if (std::filesystem::exists(root + m)) paths.push_back(root + m);
    }
  }
  const std::vector<std::string> docs = make_corpus();
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  std::printf("corpus: %zu documents, %.2f MB\n", docs.size(), bytes / 1e6);
  for (const std::string& path : paths) {
    std::printf("%s\n", path.c_str());
    bench(path, docs, bytes);
  }
  return 0;
}
