// What the C++ examples share: reading their options, and the options of the
// single-process training loops (train_loop, cuda_train_loop), whose stalls
// the tests switch on by the same names.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace example {

// argv, one option at a time. A missing value or an unknown option ends the
// program with exit code 2 and "PROG: ..." on stderr.
class Args {
 public:
  Args(const char* prog, int argc, char** argv) : prog_(prog), argc_(argc), argv_(argv) {}

  // Moves to the next option; false after the last.
  bool Next() {
    if (++i_ >= argc_) return false;
    opt_ = argv_[i_];
    return true;
  }
  bool Is(const char* name) const { return opt_ == name; }
  // The current option's value (the next argument).
  const char* Value() {
    if (i_ + 1 >= argc_) {
      std::fprintf(stderr, "%s: %s needs a value\n", prog_, opt_.c_str());
      std::exit(2);
    }
    return argv_[++i_];
  }
  long Long() { return std::atol(Value()); }
  int Int() { return std::atoi(Value()); }
  [[noreturn]] void Unknown() const {
    std::fprintf(stderr, "%s: unknown option %s\n", prog_, opt_.c_str());
    std::exit(2);
  }

 private:
  const char* prog_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string opt_;
};

// The stalls and sizes a single-process training loop can be asked for.
struct LoopOptions {
  int steps = 20;
  long input_us = 0;         // --input-us: the host waits this long for each batch
  bool readback = false;     // --readback: the loss read back every step
  bool sync_log = false;     // --sync-log: a synchronizing log line every step
  int tiny = 0;              // --tiny N: N tiny kernels a step
  bool nvtx = true;          // --no-nvtx: no step ranges
  size_t batch_bytes = 1 << 20;
};

// Takes the current option when it is one of LoopOptions'; false otherwise.
inline bool TakeLoopOption(Args& a, LoopOptions* o) {
  if (a.Is("--steps")) o->steps = a.Int();
  else if (a.Is("--input-us")) o->input_us = a.Long();
  else if (a.Is("--readback")) o->readback = true;
  else if (a.Is("--sync-log")) o->sync_log = true;
  else if (a.Is("--tiny")) o->tiny = a.Int();
  else if (a.Is("--no-nvtx")) o->nvtx = false;
  else if (a.Is("--batch-bytes")) o->batch_bytes = size_t(a.Long());
  else return false;
  return true;
}

}  // namespace example
