// A span of time cut into equal columns, and the ns that intervals of each
// of a few categories cover in each column: what a chart that draws a whole
// run in a few hundred pixels keeps of it (the HTML report's busy/idle
// strip). An interval adds its overlap with each column it meets; the sums
// are doubles, so the same intervals added in the same order give the same
// bits, however they were read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stallscope::analyzer {

class TimeColumns {
 public:
  TimeColumns() = default;
  TimeColumns(int64_t start_ns, int64_t end_ns, size_t columns, size_t categories)
      : start_(start_ns),
        end_(end_ns),
        n_(columns),
        k_(categories),
        ns_per_col_(columns > 0 ? static_cast<double>(end_ns - start_ns) / static_cast<double>(columns) : 0),
        ns_(columns * categories, 0.0) {}

  // [a, b) of category `cat`, clipped to the span.
  void Add(int64_t a, int64_t b, size_t cat) {
    a = std::max(a, start_);
    b = std::min(b, end_);
    if (b <= a || n_ == 0) return;
    double fa = static_cast<double>(a - start_) / ns_per_col_, fb = static_cast<double>(b - start_) / ns_per_col_;
    size_t c = std::min(static_cast<size_t>(fa), n_ - 1);
    while (fa < fb && c < n_) {
      const double edge = std::min(fb, static_cast<double>(c + 1));
      ns_[c * k_ + cat] += (edge - fa) * ns_per_col_;
      fa = edge;
      ++c;
    }
  }

  size_t columns() const { return n_; }
  double width_ns() const { return ns_per_col_; }
  double At(size_t column, size_t cat) const { return ns_[column * k_ + cat]; }

 private:
  int64_t start_ = 0, end_ = 0;
  size_t n_ = 0, k_ = 0;
  double ns_per_col_ = 0;
  std::vector<double> ns_;
};

}  // namespace stallscope::analyzer
