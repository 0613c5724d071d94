// Whether CUPTI's records stopped arriving (see StallTracker); used by the
// recorder's writer, under its write lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>

namespace stallscope::recorder {

// Detects that CUPTI records stopped arriving (another client took the
// activity buffers, or disabled kinds). State under g_write_mu.
//  (a) Per thread, the submissions (ApiRecords with a correlation id and a
//      successful result) above the highest external id CUPTI acknowledged
//      through an external-correlation record. Kept as runs of consecutive
//      sequence numbers, so a long stall costs a few words, not one per call.
//  (b) Submissions CUPTI acknowledged whose device record never came (the
//      job disabled the kernel kind, or work was still queued at exit).
// (a) is evaluated right after a forced CUPTI flush (everything submitted
// before it must have been acknowledged: CUPTI writes the external-correlation
// record at submission), counting only submissions written before that flush,
// and at the final drain. (b) only at the final drain: during the run, device
// records legitimately lag behind queued work, however long the queue is.
constexpr uint64_t kStallThreshold = 256;
constexpr uint64_t kSeqMask = (uint64_t{1} << 40) - 1;
struct StallTracker {
  struct Thread {
    uint64_t max_ack = 0;
    std::deque<std::pair<uint64_t, uint64_t>> runs;  // [lo, hi] unacknowledged
  };
  std::unordered_map<uint32_t, Thread> threads;
  uint64_t unacked = 0;            // (a): sum of the runs' lengths
  // (b): CUPTI correlation ids acknowledged (external-correlation record)
  // whose device record has not come yet; a correlation record always
  // precedes its device record. CUPTI numbers submissions in order, and
  // device records come back within a bounded distance of the newest
  // acknowledgement: one bit per id in a window that slides past ids whose
  // record came. The window holds at most an eighth of the memory budget in
  // bits (one id per byte of budget, 64 Ki to 64 Mi ids): an id that far
  // behind the newest is counted missing for good.
  struct Outstanding {
    uint64_t window_ids = uint64_t{1} << 26;
    uint64_t base = 0;  // the id of words.front()'s bit 0, a multiple of 64
    std::deque<uint64_t> words;
    uint64_t count = 0;    // ids in the window waiting for their record
    uint64_t expired = 0;  // ids pushed out of the window without one
    void PopFront() {
      const uint64_t n = uint64_t(__builtin_popcountll(words.front()));
      count -= n;
      expired += n;
      words.pop_front();
      base += 64;
    }
    void Set(uint64_t id) {
      if (words.empty()) base = id & ~uint64_t{63};
      if (id < base) return;  // behind the window: counted when it left
      if (id - base >= window_ids + 64 * uint64_t(words.size())) {
        // A jump past the whole window: everything in it has expired.
        while (!words.empty()) PopFront();
        base = id & ~uint64_t{63};
      }
      const uint64_t w = (id - base) / 64;
      while (words.size() <= w) words.push_back(0);
      const uint64_t bit = uint64_t{1} << ((id - base) % 64);
      if (!(words[w] & bit)) {
        words[w] |= bit;
        ++count;
      }
      while (uint64_t(words.size()) * 64 > window_ids) PopFront();
    }
    void Clear(uint64_t id) {
      if (words.empty() || id < base || (id - base) / 64 >= words.size()) return;
      const uint64_t w = (id - base) / 64;
      const uint64_t bit = uint64_t{1} << ((id - base) % 64);
      if (words[w] & bit) {
        words[w] &= ~bit;
        --count;
      }
      while (!words.empty() && words.front() == 0) {
        words.pop_front();
        base += 64;
      }
    }
    uint64_t Missing() const { return count + expired; }
  };
  Outstanding outstanding;
  // The window of (b) holds one id per byte of the memory budget.
  explicit StallTracker(uint64_t budget_bytes) {
    outstanding.window_ids =
        std::clamp<uint64_t>(budget_bytes, uint64_t{1} << 16, uint64_t{1} << 26) & ~uint64_t{63};
  }
  void Acknowledged(uint32_t correlation) { outstanding.Set(correlation); }
  void DeviceRecord(uint32_t correlation) { outstanding.Clear(correlation); }
  uint64_t worst = 0;              // largest stall seen, the diagnostic's count

  void Ack(uint64_t external) {
    Thread& t = threads[uint32_t(external >> 40)];
    uint64_t seq = external & kSeqMask;
    if (seq <= t.max_ack) return;
    t.max_ack = seq;
    while (!t.runs.empty() && t.runs.front().first <= seq) {
      auto& r = t.runs.front();
      if (r.second <= seq) {
        unacked -= r.second - r.first + 1;
        t.runs.pop_front();
      } else {
        unacked -= seq - r.first + 1;
        r.first = seq + 1;
        break;
      }
    }
  }
  void Submit(uint64_t external, bool ok) {
    if (!ok) return;
    Thread& t = threads[uint32_t(external >> 40)];
    uint64_t seq = external & kSeqMask;
    if (seq <= t.max_ack) return;
    if (!t.runs.empty() && t.runs.back().second + 1 == seq)
      t.runs.back().second = seq;
    else
      t.runs.push_back({seq, seq});
    unacked++;
  }
  bool Suspect() const { return unacked >= kStallThreshold; }
  // (a) says CUPTI stopped acknowledging submissions: its records went to
  // someone else. (b) alone, at exit, cannot tell a disabled kind from work
  // still queued on the GPU when the job exited without a final
  // synchronize: it gets a diagnostic of its own that names both.
  // `own_dropped`: the device records the recorder itself dropped (its
  // budget), which are not CUPTI's to deliver.
  struct Verdict {
    uint64_t records_stopped = 0;  // (a): the largest stall, when this raised it
    uint64_t missing_at_exit = 0;  // (b): at the final evaluation only
  };
  Verdict Evaluate(bool final, uint64_t own_dropped) {
    Verdict v;
    if (unacked >= kStallThreshold && unacked > worst) {
      worst = unacked;
      v.records_stopped = worst;
    }
    // A lower bound on the records that never came.
    const uint64_t all = outstanding.Missing();
    const uint64_t missing = all > own_dropped ? all - own_dropped : 0;
    if (final && unacked < kStallThreshold && missing >= kStallThreshold) v.missing_at_exit = missing;
    return v;
  }
};

}  // namespace stallscope::recorder
