#include "orchestrator/data/packer.h"

#include <algorithm>
#include <numeric>

#include "common/check.h"

namespace rlrun::orchestrator {
namespace {

// Each row's length rounded up to pad_to_multiple_of, never beyond seq_len.
void pad_rows(std::vector<PackedRow>& rows, const PackOptions& o) {
  for (PackedRow& r : rows) {
    const int64_t m = o.pad_to_multiple_of;
    r.padded_tokens = std::min(o.seq_len, (r.tokens + m - 1) / m * m);
  }
}

std::vector<PackedRow> first_fit_decreasing(const std::vector<int64_t>& lengths, const PackOptions& o,
                                            std::vector<int>* dropped) {
  std::vector<int> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  // stable: equal lengths keep arrival order, so packing is deterministic
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lengths[a] > lengths[b]; });
  std::vector<PackedRow> rows;
  for (int i : order) {
    const int64_t len = lengths[i];
    if (len > o.seq_len) {
      dropped->push_back(i);
      continue;
    }
    if (len <= 0) continue;  // nothing to train on
    auto fit = std::find_if(rows.begin(), rows.end(), [&](const PackedRow& r) { return r.tokens + len <= o.seq_len; });
    if (fit == rows.end()) {
      rows.emplace_back();
      fit = rows.end() - 1;
    }
    fit->sequences.push_back(i);
    fit->tokens += len;
  }
  pad_rows(rows, o);
  std::sort(dropped->begin(), dropped->end());
  return rows;
}

// Rows enough for min_micro_batches full micro-batches on every rank: when first-fit gives no
// more, the sequences go longest first into the least-filled of that many rows (one with room), so
// each row, and so each rank, gets about an equal share (first-fit would fill the first rows and
// leave the last short, a rank idle while another computes); as many rows as sequences when there
// are fewer.
std::vector<PackedRow> pack_rows(const std::vector<int64_t>& lengths, const PackOptions& o, std::vector<int>* dropped) {
  std::vector<PackedRow> rows = first_fit_decreasing(lengths, o, dropped);
  const size_t wanted = static_cast<size_t>(o.num_ranks) * o.micro_batch_rows * o.min_micro_batches;
  if (rows.size() > wanted) return rows;
  std::vector<int> order;
  for (const PackedRow& r : rows) order.insert(order.end(), r.sequences.begin(), r.sequences.end());
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lengths[a] > lengths[b]; });
  std::vector<PackedRow> spread(wanted);
  for (int i : order) {
    PackedRow* best = nullptr;
    for (PackedRow& r : spread) {
      if (r.tokens + lengths[i] <= o.seq_len && (best == nullptr || r.tokens < best->tokens)) best = &r;
    }
    if (best == nullptr) best = &spread.emplace_back();
    best->sequences.push_back(i);
    best->tokens += lengths[i];
  }
  std::erase_if(spread, [](const PackedRow& r) { return r.sequences.empty(); });
  pad_rows(spread, o);
  return spread;
}

}  // namespace

int64_t PackPlan::rank_tokens(int rank) const {
  int64_t total = 0;
  for (const auto& mb : micro_batches.at(rank))
    for (const PackedRow& r : mb) total += r.tokens;
  return total;
}

PackPlan pack_sequences(const std::vector<int64_t>& lengths, const PackOptions& o) {
  RLRUN_CHECK(o.seq_len >= 1 && o.pad_to_multiple_of >= 1 && o.num_ranks >= 1 && o.micro_batch_rows >= 1 &&
              o.min_micro_batches >= 1);
  PackPlan plan;
  std::vector<PackedRow> rows = pack_rows(lengths, o, &plan.dropped_too_long);

  // Longest rows first onto the least-loaded rank that still has room (LPT scheduling).
  std::stable_sort(rows.begin(), rows.end(),
                   [](const PackedRow& a, const PackedRow& b) { return a.padded_tokens > b.padded_tokens; });
  const size_t cap = (rows.size() + o.num_ranks - 1) / o.num_ranks;  // equal row counts (±1)
  std::vector<std::vector<PackedRow>> per_rank(o.num_ranks);
  std::vector<int64_t> load(o.num_ranks, 0);
  for (PackedRow& row : rows) {
    int best = -1;
    for (int r = 0; r < o.num_ranks; ++r) {
      if (per_rank[r].size() >= cap) continue;
      if (best < 0 || load[r] < load[best]) best = r;
    }
    load[best] += row.padded_tokens;
    plan.tokens += row.tokens;
    per_rank[best].push_back(std::move(row));
  }

  size_t max_rows = 0;
  for (const auto& r : per_rank) max_rows = std::max(max_rows, r.size());
  const size_t n_micro = (max_rows + o.micro_batch_rows - 1) / o.micro_batch_rows;
  plan.micro_batches.resize(o.num_ranks);
  for (int r = 0; r < o.num_ranks; ++r) {
    per_rank[r].resize(n_micro * o.micro_batch_rows);  // padding rows: no sequences, zero tokens
    for (size_t m = 0; m < n_micro; ++m) {
      auto first = per_rank[r].begin() + static_cast<std::ptrdiff_t>(m * o.micro_batch_rows);
      plan.micro_batches[r].emplace_back(first, first + o.micro_batch_rows);
    }
    for (const PackedRow& row : per_rank[r]) plan.padded_tokens += row.padded_tokens;
  }
  return plan;
}

}  // namespace rlrun::orchestrator
