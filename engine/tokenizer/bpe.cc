// tokenizer/bpe.cc - byte-level BPE over one pre-token: bytes -> byte symbols -> merged ids.
//
// Merging repeatedly joins the adjacent pair with the lowest merge rank, leftmost first among
// equal ranks (HF `Word::merge_all`). A min-heap of candidate pairs over a linked list of symbols
// keeps a word of n bytes at O(n log n), so long whitespace or digit runs stay cheap.
#include <algorithm>
#include <queue>

#include "engine/tokenizer/internal.h"

namespace rlrun::engine {

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      int cp = printable ? b : 256 + extra++;
      std::string s;  // UTF-8 of cp (< 0x800: one or two bytes)
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      t[b] = s;
    }
    return t;
  }();
  return table;
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev, next;  // neighbours in the live list; -1 at the ends
  bool alive;
};

struct Candidate {
  int32_t rank, pos, new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges) {
    std::string mapped;
    if (byte_level) {
      for (unsigned char b : word) mapped += byte_to_unicode()[b];
    }
    if (auto it = vocab.find(byte_level ? std::string_view(mapped) : word); it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto push = [&](int32_t id) {
    int32_t pos = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, pos - 1, -1, true});
    if (pos > 0) symbols[pos - 1].next = pos;
  };
  // One char (its text `chr`): its id, else its byte tokens, else unk, else nothing (HF merge_word).
  auto push_char = [&](int32_t id, std::string_view chr) {
    if (id >= 0) return push(id);
    if (byte_fallback && std::all_of(chr.begin(), chr.end(), [&](char b) { return fallback_ids[static_cast<uint8_t>(b)] >= 0; })) {
      for (char b : chr) push(fallback_ids[static_cast<uint8_t>(b)]);
      return;
    }
    if (unk_id < 0) return;  // no unk token: the char is dropped, as HF does
    if (fuse_unk && !symbols.empty() && symbols.back().id == unk_id) return;
    push(unk_id);
  };
  if (byte_level) {
    for (unsigned char b : word) push_char(byte_ids[b], byte_to_unicode()[b]);
  } else {
    for (size_t i = 0; i < word.size();) {  // an invalid byte is a char of its own (never in the vocab)
      size_t start = i;
      bool valid = next_code_point(word, &i) >= 0;
      std::string_view chr = word.substr(start, i - start);
      auto it = valid ? vocab.find(chr) : vocab.end();
      push_char(it == vocab.end() ? -1 : it->second, chr);
    }
  }

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || symbols[pos].next < 0) return;
    auto it = merges.find(pair_key(symbols[pos].id, symbols[symbols[pos].next].id));
    if (it != merges.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) push_pair(pos);

  while (!heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    // The pair may have changed since it was pushed: merge only if it still is that pair.
    auto it = merges.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges.end() || it->second.second != top.new_id || it->second.first != top.rank) continue;
    Symbol& right = symbols[left.next];
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out->push_back(s.id);
  }
}

}  // namespace rlrun::engine
