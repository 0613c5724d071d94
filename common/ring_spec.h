// The flight recorder's window (`stallscope run --ring`, STALLSCOPE_RING):
// SECONDS or SIZE, parsed once for the command line and the preload library.
//   30, 30s, 30sec, 2min             a time window
//   64K, 64KB, 64KiB, 64M, 64MB, 64MiB, 1G, 1GB, 1GiB   a size (binary units;
//                                    case-insensitive)
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace stallscope::trace {

struct RingSpec {
  uint64_t window_ns = 0;  // 0: no time limit
  uint64_t bytes = 0;      // 0: no size limit
};

// A time window is bounded in memory too.
inline constexpr uint64_t kRingDefaultBytes = uint64_t{256} << 20;

// False when `s` is neither.
inline bool ParseRingSpec(const char* s, RingSpec* out) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || !(v > 0) || v > 1e12) return false;
  struct Unit {
    const char* name;
    double seconds, bytes;
  };
  static constexpr Unit kUnits[] = {
      {"", 1, 0},          {"s", 1, 0},          {"sec", 1, 0},         {"min", 60, 0},
      {"k", 0, 1024.0},    {"kb", 0, 1024.0},    {"kib", 0, 1024.0},    {"m", 0, 1048576.0},
      {"mb", 0, 1048576.0}, {"mib", 0, 1048576.0}, {"g", 0, 1073741824.0}, {"gb", 0, 1073741824.0},
      {"gib", 0, 1073741824.0},
  };
  for (const Unit& u : kUnits) {
    if (strcasecmp(end, u.name) != 0) continue;
    RingSpec r;
    if (u.seconds > 0) {
      const double ns = v * u.seconds * 1e9;
      if (ns < 1e6 || ns > 1e18) return false;  // 1 ms to about 30 years
      r.window_ns = static_cast<uint64_t>(ns);
      r.bytes = kRingDefaultBytes;
    } else {
      const double b = v * u.bytes;
      if (b < 65536 || b > 1e15) return false;  // 64 KiB or more
      r.bytes = static_cast<uint64_t>(b);
    }
    *out = r;
    return true;
  }
  return false;
}

}  // namespace stallscope::trace
