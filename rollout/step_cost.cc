#include "rollout/step_cost.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::rollout {
namespace {

constexpr int kN = StepCostSums::kFeatures;

// Index of (i, j), i <= j, in the row-by-row upper triangle.
constexpr int pair_index(int i, int j) { return i * kN - i * (i - 1) / 2 + (j - i); }

std::array<double, kN> features(const StepShape& s) {
  return {1.0, static_cast<double>(s.decoding), static_cast<double>(s.prefill_tokens),
          static_cast<double>(s.context_tokens)};
}

// Solves the normal equations restricted to `active` features (Jacobi-scaled, a tiny ridge for
// features that moved together); false when the system is singular.
bool solve(const std::array<double, StepCostSums::kPairs>& xx, const std::array<double, kN>& xy,
           const std::vector<int>& active, std::array<double, kN>& coef) {
  const size_t n = active.size();
  std::vector<double> scale(n);
  for (size_t a = 0; a < n; ++a) {
    const double d = xx[pair_index(active[a], active[a])];
    if (!(d > 0)) return false;
    scale[a] = std::sqrt(d);
  }
  std::vector<std::vector<double>> m(n, std::vector<double>(n + 1));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      const int i = std::min(active[a], active[b]), j = std::max(active[a], active[b]);
      m[a][b] = xx[pair_index(i, j)] / (scale[a] * scale[b]) + (a == b ? 1e-9 : 0.0);
    }
    m[a][n] = xy[active[a]] / scale[a];
  }
  for (size_t c = 0; c < n; ++c) {  // Gaussian elimination, partial pivoting
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(m[r][c]) > std::abs(m[p][c])) p = r;
    if (std::abs(m[p][c]) < 1e-12) return false;
    std::swap(m[c], m[p]);
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (size_t k = c; k <= n; ++k) m[r][k] -= f * m[c][k];
    }
  }
  coef.fill(0.0);
  for (size_t a = 0; a < n; ++a) coef[active[a]] = m[a][n] / m[a][a] / scale[a];
  return true;
}

}  // namespace

void StepCostSums::add(const StepShape& shape, double cpu_seconds, double wall_seconds) {
  const std::array<double, kN> x = features(shape);
  for (int i = 0; i < kN; ++i) {
    for (int j = i; j < kN; ++j) xx_[pair_index(i, j)] += x[i] * x[j];
    xy_cpu_[i] += x[i] * cpu_seconds;
    xy_wall_[i] += x[i] * wall_seconds;
  }
}

StepCostSums& StepCostSums::operator+=(const StepCostSums& other) {
  for (int k = 0; k < kPairs; ++k) xx_[k] += other.xx_[k];
  for (int i = 0; i < kN; ++i) {
    xy_cpu_[i] += other.xy_cpu_[i];
    xy_wall_[i] += other.xy_wall_[i];
  }
  return *this;
}

std::vector<double> StepCostSums::flat() const {
  std::vector<double> out(xx_.begin(), xx_.end());
  out.insert(out.end(), xy_cpu_.begin(), xy_cpu_.end());
  out.insert(out.end(), xy_wall_.begin(), xy_wall_.end());
  return out;
}

Result<StepCostSums> StepCostSums::from_flat(std::span<const double> flat) {
  if (flat.size() != kFlatSize)
    return invalid_argument(str("engine step costs: expected ", kFlatSize, " numbers, got ", flat.size()));
  for (double v : flat)
    if (!std::isfinite(v)) return invalid_argument("engine step costs: a number is not finite");
  if (flat[0] < 0) return invalid_argument("engine step costs: negative step count");
  StepCostSums s;
  std::copy_n(flat.begin(), kPairs, s.xx_.begin());
  std::copy_n(flat.begin() + kPairs, kN, s.xy_cpu_.begin());
  std::copy_n(flat.begin() + kPairs + kN, kN, s.xy_wall_.begin());
  return s;
}

StepCost StepCostSums::fit(bool use_cpu) const {
  const std::array<double, kN>& xy = use_cpu ? xy_cpu_ : xy_wall_;
  std::vector<int> active;
  for (int i = 0; i < kN; ++i)
    if (xx_[pair_index(i, i)] > 0) active.push_back(i);
  std::array<double, kN> coef{};
  while (!active.empty()) {
    if (!solve(xx_, xy, active, coef)) {
      active.pop_back();  // singular: the last feature moved with the others
      continue;
    }
    auto worst = std::min_element(active.begin(), active.end(), [&](int a, int b) { return coef[a] < coef[b]; });
    if (coef[*worst] >= 0) break;
    active.erase(worst);
  }
  if (active.empty()) coef.fill(0.0);
  return {coef[0], coef[1], coef[2], coef[3]};
}

}  // namespace rlrun::rollout
