// Runs a loop body on a few threads (the analyzer's -j).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace stallscope::analyzer {

// The threads `jobs` asks for (0: one per core), at least one.
inline size_t ThreadsOf(int jobs) {
  const size_t threads = jobs > 0 ? static_cast<size_t>(jobs) : std::thread::hardware_concurrency();
  return std::max<size_t>(threads, 1);
}

// Runs fn(i) for i in [0, n) on up to `jobs` threads (0: one per core).
template <typename Fn>
void ParallelFor(size_t n, int jobs, Fn fn) {
  const size_t threads = std::min(ThreadsOf(jobs), std::max<size_t>(n, 1));
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t k = 0; k < threads; ++k) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace stallscope::analyzer
