// Python call sites at blocking calls (see python_frames.h).
//
// How it works. PyGILState_GetThisThreadState() is a thread-local lookup that
// is valid whether or not this thread holds the GIL; it gives this thread's
// PyThreadState. While this thread sits inside a hooked CUDA call its own
// frame chain cannot change, and every code object on it is kept alive by its
// frame, so the chain can be read without the GIL:
//   3.9, 3.10   tstate->frame, PyFrameObject f_back / f_code / f_lasti
//   3.11, 3.12  tstate->cframe->current_frame, _PyInterpreterFrame previous /
//               f_code / prev_instr / owner
//   3.13        tstate->current_frame, previous / f_executable / instr_ptr /
//               owner; offsets taken from _PyRuntime.debug_offsets
// Offsets were read from each version's own headers (offsetof), and are only
// valid for the default (GIL, non-debug, non-Py_TRACE_REFS) build; any other
// build fails the type checks below (ob_type must be &PyCode_Type etc.) and
// yields no Python stack rather than a wrong one.
//
// Per (code object, instruction offset) the interned "file\tfunction" string
// id and the line are cached in a small seqlock table, so the common case
// reads a handful of words per frame and makes no call into CPython. A cache
// miss calls PyCode_Addr2Line (a pure walk over the immutable line table) and
// decodes co_filename / co_name from the str object's compact storage itself.
#include "python_frames.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>

#include "fast_unwind.h"
#include "recorder.h"

namespace stallscope {

void* RealDlsym(void* handle, const char* name);  // hooks.cc: glibc's dlsym

namespace python {
namespace {

// ---------------------------------------------------------------------------
// Per-version layouts (x86-64 / LP64, default build).

struct Layout {
  int minor = 0;
  bool frame_objects = false;   // 3.9/3.10: chain of PyFrameObject
  bool lasti_in_units = false;  // 3.10: f_lasti counts 2-byte code units
  uint32_t ts_frame = 0;        // PyThreadState: frame / cframe / current_frame
  int32_t cframe_current = -1;  // 3.11/3.12: _PyCFrame.current_frame
  uint32_t fr_back = 0;         // f_back / previous
  uint32_t fr_code = 0;         // f_code / f_executable
  uint32_t fr_instr = 0;        // f_lasti (int) / prev_instr / instr_ptr
  int32_t fr_owner = -1;        // _PyInterpreterFrame.owner (char)
  uint32_t co_firstlineno = 0;  // int
  uint32_t co_filename = 0;
  uint32_t co_name = 0;
  uint32_t co_linetable = 0;        // co_lnotab on 3.9 (cache key only)
  int32_t co_code_adaptive = -1;    // 3.11+: first code unit, inline
  int32_t co_firsttraceable = -1;   // 3.11+: int
  uint32_t ascii_size = 0;          // sizeof(PyASCIIObject)
  uint32_t compact_size = 0;        // sizeof(PyCompactUnicodeObject)
  uint32_t uni_length = 16;         // PyASCIIObject.length
  uint32_t uni_state = 32;          // PyASCIIObject.state
  bool uni_has_ready = false;       // <= 3.11: state.ready bit
};

constexpr uint32_t kObType = 8;   // PyObject.ob_type
constexpr uint32_t kObSize = 16;  // PyVarObject.ob_size
constexpr char kOwnedByGenerator = 1;
constexpr char kOwnedByCStack = 3;  // 3.12+ shim frames

// One row per CPython minor version (the offsets of its default x86-64
// build; 3.13's are replaced at run time by the interpreter's own
// _Py_DebugOffsets, see Init13).
constexpr Layout kLayouts[] = {
    {.minor = 9, .frame_objects = true, .ts_frame = 24, .fr_back = 24, .fr_code = 32,
     .fr_instr = 104, .co_firstlineno = 40, .co_filename = 104, .co_name = 112, .co_linetable = 120,
     .ascii_size = 48, .compact_size = 72, .uni_has_ready = true},
    {.minor = 10, .frame_objects = true, .lasti_in_units = true, .ts_frame = 24, .fr_back = 24,
     .fr_code = 32, .fr_instr = 96, .co_firstlineno = 40, .co_filename = 104, .co_name = 112,
     .co_linetable = 120, .ascii_size = 48, .compact_size = 72, .uni_has_ready = true},
    {.minor = 11, .ts_frame = 56, .cframe_current = 8, .fr_back = 48, .fr_code = 32, .fr_instr = 56,
     .fr_owner = 69, .co_firstlineno = 72, .co_filename = 112, .co_name = 120, .co_linetable = 136,
     .co_code_adaptive = 184, .co_firsttraceable = 168, .ascii_size = 48, .compact_size = 72,
     .uni_has_ready = true},
    {.minor = 12, .ts_frame = 56, .cframe_current = 0, .fr_back = 8, .fr_code = 0, .fr_instr = 56,
     .fr_owner = 70, .co_firstlineno = 68, .co_filename = 112, .co_name = 120, .co_linetable = 136,
     .co_code_adaptive = 192, .co_firsttraceable = 176, .ascii_size = 40, .compact_size = 56},
    {.minor = 13, .ts_frame = 72, .fr_back = 8, .fr_code = 0, .fr_instr = 56, .fr_owner = 70,
     .co_firstlineno = 68, .co_filename = 112, .co_name = 120, .co_linetable = 136,
     .co_code_adaptive = 200, .co_firsttraceable = 184, .ascii_size = 40, .compact_size = 56},
};

bool LayoutFor(int minor, Layout* l) {
  for (const Layout& row : kLayouts) {
    if (row.minor == minor) {
      *l = row;
      return true;
    }
  }
  return false;
}

template <typename T>
inline T Load(uintptr_t base, uint32_t off) {
  T v;
  memcpy(&v, reinterpret_cast<const void*>(base + off), sizeof v);
  return v;
}

// Cheap sanity check before dereferencing: non-null, outside the zero page,
// 8-byte aligned, a canonical user-space address.
inline bool Plausible(uintptr_t p) {
  return p >= 4096 && (p & 7) == 0 && p < (uintptr_t{1} << 47);
}

// _Py_DebugOffsets as laid out in CPython 3.13 (Include/internal/
// pycore_runtime.h): field positions (offsetof, checked against 3.13.0).
bool Init13(uintptr_t runtime, Layout* l) {
  if (!Plausible(runtime) || memcmp(reinterpret_cast<const void*>(runtime), "xdebugpy", 8) != 0)
    return false;
  uint64_t version = Load<uint64_t>(runtime, 8);
  if (((version >> 16) & 0xffff) != 0x030d) return false;
  auto off = [&](uint32_t pos) { return Load<uint64_t>(runtime, pos); };
  uint64_t ob_type = off(360), ascii_size = off(560), uni_state = off(544), uni_length = off(552);
  uint64_t v[] = {off(184), off(232), off(240), off(248), off(264),
                  off(280), off(288), off(304), off(312), off(344)};
  for (uint64_t x : v)
    if (x > 4096) return false;
  // Pointer fields must be aligned (owner and firstlineno are not pointers).
  for (int i : {0, 1, 2, 3, 5, 6, 7, 9})
    if (v[i] % 8 != 0) return false;
  // A free-threaded or trace-refs build moves ob_type and the str header:
  // those layouts are not supported (no Python stacks rather than wrong ones).
  if (ob_type != kObType || ascii_size != 40 || uni_state != 32 || uni_length != 16) return false;
  l->ts_frame = uint32_t(v[0]);
  l->fr_back = uint32_t(v[1]);
  l->fr_code = uint32_t(v[2]);
  l->fr_instr = uint32_t(v[3]);
  l->fr_owner = int32_t(v[4]);
  l->co_filename = uint32_t(v[5]);
  l->co_name = uint32_t(v[6]);
  l->co_linetable = uint32_t(v[7]);
  l->co_firstlineno = uint32_t(v[8]);
  // _co_firsttraceable is not published; it sits 16 bytes before
  // co_code_adaptive in 3.13.0. Only use it when that layout is the one seen.
  l->co_firsttraceable = v[9] == 200 ? 184 : -1;
  l->co_code_adaptive = int32_t(v[9]);
  l->ascii_size = 40;
  l->compact_size = 56;
  return true;
}

// ---------------------------------------------------------------------------
// Runtime state, resolved once.

struct Runtime {
  Layout l;
  void* (*get_tstate)() = nullptr;
  int (*is_initialized)() = nullptr;
  int (*is_finalizing)() = nullptr;
  int (*addr2line)(void*, int) = nullptr;
  uintptr_t code_type = 0;
  uintptr_t unicode_type = 0;
  uintptr_t frame_type = 0;  // 3.9/3.10
};

enum Status : int { kUnknown = 0, kReady = 1, kAbsent = 2, kOff = 3 };

// Published once, never freed. Resolution takes no lock: threads that race on
// the first call each resolve, the first to publish wins (a lock here could
// deadlock against the loader lock: a hook may run inside a constructor).
std::atomic<const Runtime*> g_runtime{nullptr};
std::atomic<int> g_status{kUnknown};
// The interpreter's mapped address range (libpython, or a static python
// executable), so native unwinding can stop where the Python frames begin.
std::atomic<uintptr_t> g_interp_lo{0}, g_interp_hi{0};

void FindInterpreterRange(void* symbol) {
  Dl_info info{};
  if (!symbol || !dladdr(symbol, &info) || !info.dli_fbase) return;
  struct Match {
    uintptr_t base, lo = ~uintptr_t{0}, hi = 0;
  } m{reinterpret_cast<uintptr_t>(info.dli_fbase)};
  recorder::WalkModules(
      [](dl_phdr_info* pi, size_t, void* arg) {
        auto* m = static_cast<Match*>(arg);
        uintptr_t lo = ~uintptr_t{0}, hi = 0;
        for (int i = 0; i < pi->dlpi_phnum; ++i) {
          if (pi->dlpi_phdr[i].p_type != PT_LOAD) continue;
          uintptr_t a = pi->dlpi_addr + pi->dlpi_phdr[i].p_vaddr;
          lo = std::min(lo, a);
          hi = std::max(hi, uintptr_t(a + pi->dlpi_phdr[i].p_memsz));
        }
        if (m->base < lo || m->base >= hi) return 0;
        m->lo = lo;
        m->hi = hi;
        return 1;
      },
      &m);
  if (m.hi) {
    g_interp_lo.store(m.lo, std::memory_order_relaxed);
    g_interp_hi.store(m.hi, std::memory_order_release);
  }
}
std::atomic<int64_t> g_next_probe_ns{0};

int64_t CoarseNowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void* Sym(const char* name) { return RealDlsym(RTLD_DEFAULT, name); }

// Python's minor version (3.X), or -1 when it cannot be told.
int DetectMinor() {
  if (auto* hex = static_cast<const unsigned long*>(Sym("Py_Version"))) {  // 3.11+
    unsigned long v = *hex;
    return ((v >> 24) & 0xff) == 3 ? int((v >> 16) & 0xff) : -1;
  }
  auto get_version = reinterpret_cast<const char* (*)()>(Sym("Py_GetVersion"));
  if (!get_version) return -1;
  const char* s = get_version();  // a static string, e.g. "3.9.18 (main, ...)"
  if (!s || s[0] != '3' || s[1] != '.') return -1;
  int minor = 0, digits = 0;
  for (const char* p = s + 2; *p >= '0' && *p <= '9' && digits < 3; ++p, ++digits)
    minor = minor * 10 + (*p - '0');
  return digits ? minor : -1;
}

// Resolves symbols and the layout into *out: kReady, kAbsent (no CPython
// symbols) or kOff (an unsupported CPython, or turned off).
int Resolve(Runtime* out) {
  if (const char* e = getenv("STALLSCOPE_PYTHON_STACKS"); e && strcmp(e, "0") == 0) return kOff;
  Runtime rt;
  rt.get_tstate = reinterpret_cast<void* (*)()>(Sym("PyGILState_GetThisThreadState"));
  if (!rt.get_tstate) return kAbsent;  // not (yet) a Python process
  int minor = DetectMinor();
  if (minor < 9 || !LayoutFor(minor, &rt.l)) return kOff;
  rt.is_initialized = reinterpret_cast<int (*)()>(Sym("Py_IsInitialized"));
  rt.is_finalizing = reinterpret_cast<int (*)()>(Sym("Py_IsFinalizing"));  // 3.13+
  if (!rt.is_finalizing) rt.is_finalizing = reinterpret_cast<int (*)()>(Sym("_Py_IsFinalizing"));
  rt.addr2line = reinterpret_cast<int (*)(void*, int)>(Sym("PyCode_Addr2Line"));
  rt.code_type = reinterpret_cast<uintptr_t>(Sym("PyCode_Type"));
  rt.unicode_type = reinterpret_cast<uintptr_t>(Sym("PyUnicode_Type"));
  if (rt.l.frame_objects) {
    rt.frame_type = reinterpret_cast<uintptr_t>(Sym("PyFrame_Type"));
    if (!rt.frame_type) return kOff;
  }
  if (!rt.is_initialized || !rt.is_finalizing || !rt.addr2line || !rt.code_type ||
      !rt.unicode_type)
    return kOff;
  if (minor == 13 && !Init13(reinterpret_cast<uintptr_t>(Sym("_PyRuntime")), &rt.l)) return kOff;
  *out = rt;
  return kReady;
}

// The resolved runtime, or nullptr when there is no usable CPython (yet).
const Runtime* GetRuntime() {
  const Runtime* rt = g_runtime.load(std::memory_order_acquire);
  if (__builtin_expect(rt != nullptr, 1)) return rt;
  int s = g_status.load(std::memory_order_acquire);
  if (s == kOff) return nullptr;
  if (s == kAbsent && CoarseNowNs() < g_next_probe_ns.load(std::memory_order_relaxed))
    return nullptr;
  Runtime local;
  s = Resolve(&local);
  if (s == kAbsent) {
    // A program that embeds Python may load it later: look again in a second.
    g_next_probe_ns.store(CoarseNowNs() + 1000000000, std::memory_order_relaxed);
    g_status.store(kAbsent, std::memory_order_release);
    return nullptr;
  }
  if (s == kOff) {
    g_status.store(kOff, std::memory_order_release);
    return nullptr;
  }
  FindInterpreterRange(reinterpret_cast<void*>(local.get_tstate));
  auto* mine = new Runtime(local);
  const Runtime* expected = nullptr;
  if (!g_runtime.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
    delete mine;
    return expected;
  }
  return mine;
}

// ---------------------------------------------------------------------------
// str decoding (compact strings only: every code object's names are).

struct Buf {
  char* p;
  size_t cap;
  size_t len = 0;
  void Put(char c) {
    if (len < cap) p[len++] = c;
  }
  void PutCodePoint(uint32_t c) {
    if (c < 0x80) {
      Put(char(c));
    } else if (c < 0x800) {
      Put(char(0xc0 | (c >> 6)));
      Put(char(0x80 | (c & 0x3f)));
    } else if (c < 0x10000) {
      Put(char(0xe0 | (c >> 12)));
      Put(char(0x80 | ((c >> 6) & 0x3f)));
      Put(char(0x80 | (c & 0x3f)));
    } else {
      Put(char(0xf0 | (c >> 18)));
      Put(char(0x80 | ((c >> 12) & 0x3f)));
      Put(char(0x80 | ((c >> 6) & 0x3f)));
      Put(char(0x80 | (c & 0x3f)));
    }
  }
};

// Appends the UTF-8 of str object `s`, at most `max_chars` code points; when
// longer, keeps the tail (file paths) or the head (names). False when `s`
// is not an exact, compact str.
bool AppendStr(const Layout& l, uintptr_t s, uintptr_t unicode_type, size_t max_chars,
               bool keep_tail, Buf* out) {
  if (!Plausible(s) || Load<uintptr_t>(s, kObType) != unicode_type) return false;
  uint32_t state = Load<uint32_t>(s, l.uni_state);
  uint32_t kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || (l.uni_has_ready && !((state >> 7) & 1))) return false;
  if (kind != 1 && kind != 2 && kind != 4) return false;
  int64_t n = Load<int64_t>(s, l.uni_length);
  if (n < 0 || n > (int64_t{1} << 30)) return false;
  uintptr_t data = s + (ascii ? l.ascii_size : l.compact_size);
  size_t first = 0, count = size_t(n);
  if (count > max_chars) {
    if (keep_tail) first = count - max_chars;
    count = max_chars;
  }
  if (kind == 1 && ascii) {
    for (size_t i = 0; i < count; ++i) out->Put(Load<char>(data, uint32_t(first + i)));
    return true;
  }
  for (size_t i = first; i < first + count; ++i) {
    uint32_t c = kind == 1   ? Load<uint8_t>(data, uint32_t(i))
                 : kind == 2 ? Load<uint16_t>(data, uint32_t(2 * i))
                             : Load<uint32_t>(data, uint32_t(4 * i));
    out->PutCodePoint(c);
  }
  return true;
}

// ---------------------------------------------------------------------------
// Site cache: (code object, instruction byte offset) -> (string id, line).
// Seqlock entries: readers never wait, a writer that finds an entry busy
// skips caching (so a fork in the middle of a write only loses one slot).

struct Site {
  uintptr_t code;
  int32_t offset;
  int32_t firstlineno;
  uintptr_t filename, name, linetable;  // validate: an address reused by
                                        // another code object misses
};

struct CacheEntry {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> name_id{0};
  std::atomic<int64_t> line{0};
  std::atomic<uint64_t> key[5] = {};  // code, offset|firstlineno, filename, name, linetable
};

constexpr size_t kCacheSize = 4096;  // power of two
CacheEntry g_cache[kCacheSize];

inline void KeyWords(const Site& s, uint64_t k[5]) {
  k[0] = s.code;
  k[1] = (uint64_t(uint32_t(s.offset)) << 32) | uint32_t(s.firstlineno);
  k[2] = s.filename;
  k[3] = s.name;
  k[4] = s.linetable;
}

inline size_t Slot(const Site& s) {
  uint64_t h = (uint64_t(s.code) >> 4) * 0x9e3779b97f4a7c15ull ^ uint64_t(uint32_t(s.offset)) * 0xc2b2ae3d27d4eb4full;
  return size_t(h >> 40) & (kCacheSize - 1);
}

bool CacheGet(const Site& s, uint32_t* id, int32_t* line) {
  uint64_t k[5];
  KeyWords(s, k);
  CacheEntry& e = g_cache[Slot(s)];
  uint32_t s1 = e.seq.load(std::memory_order_acquire);
  if (s1 & 1) return false;
  bool match = true;
  for (int i = 0; i < 5; ++i) match &= e.key[i].load(std::memory_order_relaxed) == k[i];
  uint32_t v = e.name_id.load(std::memory_order_relaxed);
  int64_t ln = e.line.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.seq.load(std::memory_order_relaxed) != s1 || !match || v == 0) return false;
  *id = v;
  *line = int32_t(ln);
  return true;
}

void CachePut(const Site& s, uint32_t id, int32_t line) {
  uint64_t k[5];
  KeyWords(s, k);
  CacheEntry& e = g_cache[Slot(s)];
  uint32_t s0 = e.seq.load(std::memory_order_relaxed);
  if ((s0 & 1) || !e.seq.compare_exchange_strong(s0, s0 + 1, std::memory_order_acquire))
    return;
  std::atomic_thread_fence(std::memory_order_release);
  for (int i = 0; i < 5; ++i) e.key[i].store(k[i], std::memory_order_relaxed);
  e.name_id.store(id, std::memory_order_relaxed);
  e.line.store(line, std::memory_order_relaxed);
  e.seq.store(s0 + 2, std::memory_order_release);
}

// The interned "file\tfunction" id and line of a frame; false on anything odd.
bool Symbolize(const Runtime& rt, uintptr_t code, int32_t offset, uint32_t* id, int32_t* line) {
  const Layout& l = rt.l;
  Site s;
  s.code = code;
  s.offset = offset;
  s.firstlineno = Load<int32_t>(code, l.co_firstlineno);
  s.filename = Load<uintptr_t>(code, l.co_filename);
  s.name = Load<uintptr_t>(code, l.co_name);
  s.linetable = Load<uintptr_t>(code, l.co_linetable);
  if (__builtin_expect(CacheGet(s, id, line), 1)) return true;

  char text[1024 + 1 + 256];
  Buf b{text, sizeof text};
  if (!AppendStr(l, s.filename, rt.unicode_type, 1024 / 4, true, &b)) return false;
  b.Put('\t');
  if (!AppendStr(l, s.name, rt.unicode_type, 256 / 4, false, &b)) return false;
  if (!Plausible(s.linetable)) return false;
  int32_t ln = offset < 0 ? s.firstlineno : rt.addr2line(reinterpret_cast<void*>(code), offset);
  if (ln < 0) ln = 0;
  uint32_t v = recorder::InternString(text, b.len);
  if (v == 0) return false;
  CachePut(s, v, ln);
  *id = v;
  *line = ln;
  return true;
}

inline bool IsCode(const Runtime& rt, uintptr_t code) {
  return Plausible(code) && Load<uintptr_t>(code, kObType) == rt.code_type;
}

// ---------------------------------------------------------------------------
// Frame walks. Each fills pairs[2*i] = string id, pairs[2*i+1] = line.

int WalkFrameObjects(const Runtime& rt, uintptr_t tstate, uint64_t* pairs, bool* stopped) {
  const Layout& l = rt.l;
  int n = 0;
  uintptr_t f = Load<uintptr_t>(tstate, l.ts_frame);
  for (int guard = 0; f && n < kMaxFrames && guard < 4 * kMaxFrames; ++guard) {
    if (!Plausible(f) || Load<uintptr_t>(f, kObType) != rt.frame_type) {
      *stopped = true;
      break;
    }
    uintptr_t code = Load<uintptr_t>(f, l.fr_code);
    if (!IsCode(rt, code)) {
      *stopped = true;
      break;
    }
    int32_t lasti = Load<int32_t>(f, l.fr_instr);
    int32_t offset = lasti < 0 ? -1 : (l.lasti_in_units ? lasti * 2 : lasti);
    uint32_t id;
    int32_t line;
    if (!Symbolize(rt, code, offset, &id, &line)) {
      *stopped = true;
      break;
    }
    pairs[2 * n] = id;
    pairs[2 * n + 1] = uint64_t(uint32_t(line));
    ++n;
    f = Load<uintptr_t>(f, l.fr_back);
  }
  return n;
}

int WalkInterpreterFrames(const Runtime& rt, uintptr_t tstate, uint64_t* pairs, bool* stopped) {
  const Layout& l = rt.l;
  uintptr_t f;
  if (l.cframe_current >= 0) {
    uintptr_t cframe = Load<uintptr_t>(tstate, l.ts_frame);
    if (!Plausible(cframe)) {
      *stopped = cframe != 0;
      return 0;
    }
    f = Load<uintptr_t>(cframe, uint32_t(l.cframe_current));
  } else {
    f = Load<uintptr_t>(tstate, l.ts_frame);
  }
  int n = 0;
  for (int guard = 0; f && n < kMaxFrames && guard < 4 * kMaxFrames; ++guard) {
    if (!Plausible(f)) {
      *stopped = true;
      break;
    }
    uintptr_t next = Load<uintptr_t>(f, l.fr_back);
    char owner = Load<char>(f, uint32_t(l.fr_owner));
    uintptr_t code = Load<uintptr_t>(f, l.fr_code);
    // Shim frames (C-stack entry frames, 3.12+) and frames whose executable
    // is not a code object carry no Python line.
    if (owner == kOwnedByCStack && l.minor >= 12) {
      f = next;
      continue;
    }
    if (!IsCode(rt, code)) {
      f = next;
      continue;
    }
    uintptr_t instr = Load<uintptr_t>(f, l.fr_instr);
    uintptr_t start = code + uint32_t(l.co_code_adaptive);
    int64_t units = Load<int64_t>(code, kObSize);  // Py_SIZE: code units
    if (units <= 0 || units > (int64_t{1} << 28)) {
      *stopped = true;
      break;
    }
    // Incomplete frames (pushed, not yet at their first traceable
    // instruction) are skipped, as CPython's own tracebacks do.
    if (instr < start || instr >= start + 2 * uint64_t(units) || (instr & 1)) {
      f = next;
      continue;
    }
    int32_t unit = int32_t((instr - start) / 2);
    if (owner != kOwnedByGenerator && l.co_firsttraceable >= 0 &&
        unit < Load<int32_t>(code, uint32_t(l.co_firsttraceable))) {
      f = next;
      continue;
    }
    uint32_t id;
    int32_t line;
    if (!Symbolize(rt, code, unit * 2, &id, &line)) {
      *stopped = true;
      break;
    }
    pairs[2 * n] = id;
    pairs[2 * n + 1] = uint64_t(uint32_t(line));
    ++n;
    f = next;
  }
  return n;
}

// The thread has Python frames, but the walk stopped before it read one (a
// frame or code object that fails its checks, a name the string table had no
// room for): the call's site cannot be read. Counted (python_sites_lost), and
// the call gets a one-frame stack naming kLostSiteFile, so that the analyzer
// counts it on its hotspot (sites_lost) rather than losing it silently.
uint32_t LostSite() {
  recorder::CountDiagnostic(trace::DiagnosticId::kPythonSitesLost);
  static std::atomic<uint32_t> name{0};
  uint32_t id = name.load(std::memory_order_relaxed);
  if (id == 0) {
    char text[64];
    const int len = snprintf(text, sizeof text, "%s\tframe walk stopped", trace::kLostSiteFile);
    id = recorder::InternString(text, size_t(len));
    if (id == 0) return 0;
    name.store(id, std::memory_order_relaxed);
  }
  const uint64_t pair[2] = {id, 0};
  return recorder::InternPythonStack(pair, 1);
}

}  // namespace

bool InInterpreter(uint64_t pc) {
  uintptr_t hi = g_interp_hi.load(std::memory_order_acquire);
  return hi && pc >= g_interp_lo.load(std::memory_order_relaxed) && pc < hi;
}

uint32_t CaptureStack() {
  const Runtime* runtime = GetRuntime();
  if (!runtime) return 0;
  const Runtime& rt = *runtime;
  // Finalization frees other threads' states: read nothing once it began.
  if (!rt.is_initialized() || rt.is_finalizing()) return 0;
  int saved_errno = errno;
  uint32_t result = 0;
  uintptr_t tstate = reinterpret_cast<uintptr_t>(rt.get_tstate());
  if (Plausible(tstate)) {
    uint64_t pairs[2 * kMaxFrames];
    bool stopped = false;
    int n = rt.l.frame_objects ? WalkFrameObjects(rt, tstate, pairs, &stopped)
                               : WalkInterpreterFrames(rt, tstate, pairs, &stopped);
    if (n > 0) {
      result = recorder::InternPythonStack(pairs, size_t(n));
    } else if (stopped) {
      result = LostSite();
    }
  } else if (tstate != 0) {
    result = LostSite();
  }
  errno = saved_errno;
  return result;
}

}  // namespace python
}  // namespace stallscope
