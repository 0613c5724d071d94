// A module fast_unwind_test loads and unloads: its function calls back, so
// a walk passes through a frame of code that is unloaded after it.
extern "C" __attribute__((visibility("default"), noinline)) void UnwindTestThrough(void (*fn)(void*), void* arg) {
  fn(arg);
  asm volatile("" ::: "memory");  // not a tail call
}
