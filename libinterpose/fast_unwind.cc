// Native stacks from cached per-address rules (see fast_unwind.h).
#include "fast_unwind.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unwind.h>

#include <cstddef>
#include <new>

// libgcc's FDE lookup (exported since GCC 3.0, not declared in unwind.h):
// the FDE covering `pc`, and the bases its pointers are relative to.
struct dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;
};
extern "C" const void* _Unwind_Find_FDE(void* pc, struct dwarf_eh_bases* bases);

namespace stallscope::recorder {
namespace {

// DWARF register numbers on x86-64.
constexpr unsigned kRbp = 6, kRsp = 7, kRa = 16;

// How a frame's caller is found from the frame's own %rsp and %rbp.
struct Rule {
  enum Kind : uint8_t {
    kNone = 0,      // empty slot
    kStep,          // CFA = (%rsp or %rbp) + cfa_off; RA at CFA + ra_off
    kEnd,           // the return address is undefined: the outermost frame
    kUnsupported,   // libgcc's unwinder only
  };
  Kind kind = kNone;
  bool cfa_on_rbp = false;
  bool rbp_saved = false;  // else the caller's %rbp is this frame's
  int32_t cfa_off = 0;
  int32_t ra_off = 0;
  int32_t rbp_off = 0;
};

constexpr size_t kSlots = 1024;  // four ways from the address's hash (Lookup)

struct Slot {
  uint64_t pc = 0;
  Rule rule;
};

}  // namespace

struct UnwindRules {
  unsigned long long subs = 0;  // the unloads counted when the cache was built
  // The thread's stack (pthread_getattr_np): every slot a walk reads lies
  // between the start's %rsp and its top (0: not known, libgcc walks).
  uint64_t stack_lo = 0, stack_hi = 0;
  UnwindCounts counts;
  Slot slots[kSlots];
};

namespace {

// One register's rule in a CFA program (only %rbp's, %rsp's and the
// return address's are kept).
struct RegRule {
  enum How : uint8_t { kSame, kUndefined, kOffset, kOther };
  How how = kSame;
  int32_t off = 0;
};

struct Row {
  unsigned cfa_reg = kRsp;
  int64_t cfa_off = 8;
  bool cfa_ok = true;  // false: an expression, or a register not followed
  RegRule rbp, rsp, ra;  // (a rule for %rsp itself: libgcc's walk only)
};

class Bytes {
 public:
  Bytes(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}
  bool ok() const { return ok_; }
  bool more() const { return ok_ && p_ < end_; }
  const uint8_t* at() const { return p_; }
  void Skip(uint64_t n) {
    if (n > uint64_t(end_ - p_)) {
      ok_ = false;
      p_ = end_;
    } else {
      p_ += n;
    }
  }
  uint8_t U8() {
    if (p_ >= end_) {
      ok_ = false;
      return 0;
    }
    return *p_++;
  }
  uint64_t Fixed(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(U8()) << (8 * i);
    return v;
  }
  uint64_t Uleb() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = U8();
      if (shift < 64) v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80) || !ok_) return v;
    }
  }
  int64_t Sleb() {
    uint64_t v = 0;
    int shift = 0;
    uint8_t b;
    do {
      b = U8();
      if (shift < 64) v |= uint64_t(b & 0x7f) << shift;
      shift += 7;
    } while ((b & 0x80) && ok_);
    if (shift < 64 && (b & 0x40)) v |= ~uint64_t{0} << shift;
    return int64_t(v);
  }
  // Skips a value of pointer encoding `enc`; false for encodings not handled.
  bool SkipEncoded(uint8_t enc) {
    if (enc == 0xff) return true;  // DW_EH_PE_omit
    if ((enc & 0x70) == 0x50) return false;  // DW_EH_PE_aligned
    switch (enc & 0x0f) {
      case 0x00: Skip(8); return true;  // absptr
      case 0x01: Uleb(); return true;
      case 0x02: case 0x0a: Skip(2); return true;
      case 0x03: case 0x0b: Skip(4); return true;
      case 0x04: case 0x0c: Skip(8); return true;
      case 0x09: Sleb(); return true;
      default: return false;
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint64_t ra_reg = kRa;
  uint8_t fde_enc = 0;
  bool z = false;
  bool signal = false;
  const uint8_t* insns = nullptr;
  const uint8_t* end = nullptr;
};

bool ParseCie(const uint8_t* cie, Cie* out) {
  uint32_t len;
  memcpy(&len, cie, 4);
  if (len == 0 || len == 0xffffffffu) return false;  // a terminator, or 64-bit DWARF
  Bytes b(cie + 4, cie + 4 + len);
  if (b.Fixed(4) != 0) return false;  // not a CIE
  const uint8_t version = b.U8();
  if (version != 1 && version != 3) return false;
  const uint8_t* end = cie + 4 + len;
  const char* aug = reinterpret_cast<const char*>(b.at());
  const size_t aug_len = strnlen(aug, size_t(end - b.at()));
  if (aug_len == size_t(end - b.at())) return false;  // not terminated inside the CIE
  b.Skip(aug_len + 1);
  if (strstr(aug, "eh") != nullptr) return false;
  // Without 'z' the augmentations' data is not skippable (an 'L' puts its
  // pointer in each FDE): none is followed.
  if (aug_len > 0 && aug[0] != 'z') return false;
  out->code_align = b.Uleb();
  out->data_align = b.Sleb();
  out->ra_reg = version == 1 ? b.U8() : b.Uleb();
  out->z = aug[0] == 'z';
  const uint8_t* data_end = nullptr;
  if (out->z) {
    const uint64_t n = b.Uleb();
    if (!b.ok() || n > uint64_t(end - b.at())) return false;
    data_end = b.at() + n;
  }
  for (size_t i = out->z ? 1 : 0; i < aug_len; ++i) {
    switch (aug[i]) {
      case 'R': out->fde_enc = b.U8(); break;
      case 'L': b.U8(); break;
      case 'P': {
        const uint8_t enc = b.U8();
        if (!b.SkipEncoded(enc)) return false;
        break;
      }
      case 'S': out->signal = true; break;
      default:
        if (!out->z) return false;  // an augmentation whose data cannot be skipped
        i = aug_len;                // the rest is skipped by the data's length
        break;
    }
  }
  if (out->z) {
    if (data_end < b.at()) return false;
    b.Skip(uint64_t(data_end - b.at()));
  }
  if (!b.ok()) return false;
  out->insns = b.at();
  out->end = end;
  return true;
}

void SetReg(Row* row, uint64_t reg, RegRule rule) {
  if (reg == kRbp) row->rbp = rule;
  if (reg == kRsp) row->rsp = rule;
  if (reg == kRa) row->ra = rule;
}

// Runs a CFA program from `row`, the rows of locations up to `target`
// (exclusive) applying. False for an instruction not handled.
bool Run(Bytes b, const Cie& cie, uint64_t* loc, uint64_t target, Row* row) {
  Row stack[8];
  int depth = 0;
  while (b.more()) {
    const uint8_t op = b.U8();
    const uint8_t high = op & 0xc0, low = op & 0x3f;
    if (high == 0x40) {  // DW_CFA_advance_loc
      *loc += low * cie.code_align;
      if (*loc >= target) return true;
      continue;
    }
    if (high == 0x80) {  // DW_CFA_offset
      SetReg(row, low, {RegRule::kOffset, int32_t(int64_t(b.Uleb()) * cie.data_align)});
      continue;
    }
    if (high == 0xc0) {  // DW_CFA_restore: unsaved, as libgcc reads it (not the CIE's rule)
      SetReg(row, low, RegRule{});
      continue;
    }
    switch (op) {
      case 0x00: break;  // DW_CFA_nop
      case 0x02: case 0x03: case 0x04: {  // DW_CFA_advance_loc1/2/4
        *loc += b.Fixed(op == 0x02 ? 1 : op == 0x03 ? 2 : 4) * cie.code_align;
        if (*loc >= target) return b.ok();
        break;
      }
      case 0x05: {  // DW_CFA_offset_extended
        const uint64_t reg = b.Uleb();
        SetReg(row, reg, {RegRule::kOffset, int32_t(int64_t(b.Uleb()) * cie.data_align)});
        break;
      }
      case 0x11: {  // DW_CFA_offset_extended_sf
        const uint64_t reg = b.Uleb();
        SetReg(row, reg, {RegRule::kOffset, int32_t(b.Sleb() * cie.data_align)});
        break;
      }
      case 0x06: SetReg(row, b.Uleb(), RegRule{}); break;  // DW_CFA_restore_extended (as DW_CFA_restore)
      case 0x07: SetReg(row, b.Uleb(), {RegRule::kUndefined, 0}); break;  // DW_CFA_undefined
      case 0x08: SetReg(row, b.Uleb(), {RegRule::kSame, 0}); break;       // DW_CFA_same_value
      case 0x09: {  // DW_CFA_register
        const uint64_t reg = b.Uleb();
        b.Uleb();
        SetReg(row, reg, {RegRule::kOther, 0});
        break;
      }
      case 0x0a:  // DW_CFA_remember_state
        if (depth == 8) return false;
        stack[depth++] = *row;
        break;
      case 0x0b:  // DW_CFA_restore_state, the CFA's rule too (as compilers use it around an epilogue)
        if (depth == 0) return false;
        *row = stack[--depth];
        break;
      case 0x0c:  // DW_CFA_def_cfa
        row->cfa_reg = unsigned(b.Uleb());
        row->cfa_off = int64_t(b.Uleb());
        row->cfa_ok = true;
        break;
      case 0x12:  // DW_CFA_def_cfa_sf
        row->cfa_reg = unsigned(b.Uleb());
        row->cfa_off = b.Sleb() * cie.data_align;
        row->cfa_ok = true;
        break;
      case 0x0d:  // DW_CFA_def_cfa_register
        row->cfa_reg = unsigned(b.Uleb());
        row->cfa_ok = true;
        break;
      case 0x0e: row->cfa_off = int64_t(b.Uleb()); break;                   // DW_CFA_def_cfa_offset
      case 0x13: row->cfa_off = b.Sleb() * cie.data_align; break;           // DW_CFA_def_cfa_offset_sf
      case 0x0f: b.Skip(b.Uleb()); row->cfa_ok = false; break;              // DW_CFA_def_cfa_expression
      case 0x10: case 0x16: {  // DW_CFA_expression, DW_CFA_val_expression
        const uint64_t reg = b.Uleb();
        b.Skip(b.Uleb());
        SetReg(row, reg, {RegRule::kOther, 0});
        break;
      }
      case 0x14: case 0x15: {  // DW_CFA_val_offset(_sf)
        const uint64_t reg = b.Uleb();
        if (op == 0x14) b.Uleb(); else b.Sleb();
        SetReg(row, reg, {RegRule::kOther, 0});
        break;
      }
      case 0x2e: b.Uleb(); break;  // DW_CFA_GNU_args_size: no bearing on the CFA
      case 0x2f: {  // DW_CFA_GNU_negative_offset_extended
        const uint64_t reg = b.Uleb();
        SetReg(row, reg, {RegRule::kOffset, int32_t(-int64_t(b.Uleb()) * cie.data_align)});
        break;
      }
      default: return false;  // DW_CFA_set_loc, vendor operations
    }
  }
  return b.ok();
}

// The rule of the frame at `pc` (a return address unless `exact`).
Rule RuleFor(uint64_t pc, bool exact) {
  Rule unsupported;
  unsupported.kind = Rule::kUnsupported;
  const uint64_t lookup = exact ? pc : pc - 1;
  // Code outside every loaded object (a JIT's, its FDEs registered with
  // __register_frame) can be freed and its addresses reused with no unload
  // counted: its frames are libgcc's to walk, every time.
  Dl_info object;
  if (dladdr(reinterpret_cast<void*>(lookup), &object) == 0) return unsupported;
  dwarf_eh_bases bases{};
  const auto* fde = static_cast<const uint8_t*>(_Unwind_Find_FDE(reinterpret_cast<void*>(lookup), &bases));
  if (fde == nullptr) return unsupported;  // libgcc may still find a signal frame here
  uint32_t len;
  memcpy(&len, fde, 4);
  if (len == 0 || len == 0xffffffffu) return unsupported;
  int32_t cie_off;
  memcpy(&cie_off, fde + 4, 4);
  Cie cie;
  if (cie_off <= 0 || !ParseCie(fde + 4 - cie_off, &cie) || cie.signal || cie.ra_reg != kRa) return unsupported;
  Bytes b(fde + 8, fde + 4 + len);
  if (!b.SkipEncoded(cie.fde_enc) || !b.SkipEncoded(cie.fde_enc & 0x0f)) return unsupported;
  if (cie.z) b.Skip(b.Uleb());
  if (!b.ok()) return unsupported;
  // The rows of locations up to the frame's pc apply (libgcc: up to the
  // return address, exclusive; the exact pc inclusive).
  const uint64_t func = reinterpret_cast<uint64_t>(bases.func);
  if (lookup < func) return unsupported;
  const uint64_t target = (exact ? pc + 1 : pc) - func;
  Row row;
  row.ra = {RegRule::kSame, 0};
  uint64_t loc = 0;
  // (An advance in the CIE's program would carry into the FDE's, as libgcc
  // runs them: not followed.)
  if (!Run(Bytes(cie.insns, cie.end), cie, &loc, ~uint64_t{0}, &row) || loc != 0) return unsupported;
  if (!Run(Bytes(b.at(), fde + 4 + len), cie, &loc, target, &row)) return unsupported;
  Rule r;
  if (row.ra.how == RegRule::kUndefined) {
    r.kind = Rule::kEnd;
    return r;
  }
  if (!row.cfa_ok || (row.cfa_reg != kRsp && row.cfa_reg != kRbp) || row.ra.how != RegRule::kOffset ||
      (row.rbp.how != RegRule::kSame && row.rbp.how != RegRule::kOffset) || row.rsp.how != RegRule::kSame ||
      row.cfa_off < 0 ||
      row.cfa_off > (int64_t{1} << 30)) {
    return unsupported;
  }
  r.kind = Rule::kStep;
  r.cfa_on_rbp = row.cfa_reg == kRbp;
  r.cfa_off = int32_t(row.cfa_off);
  r.ra_off = row.ra.off;
  r.rbp_saved = row.rbp.how == RegRule::kOffset;
  r.rbp_off = row.rbp.off;
  return r;
}

int CountUnloads(dl_phdr_info* info, size_t size, void* arg) {
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    *static_cast<unsigned long long*>(arg) = info->dlpi_subs;
  }
  return 1;  // the first object tells
}

struct Collect {
  uint64_t* pcs;
  int max, skip, n = 0, frame = 0;
  bool (*stop)(uint64_t);
};

_Unwind_Reason_Code CollectFrame(_Unwind_Context* ctx, void* arg) {
  auto* c = static_cast<Collect*>(arg);
  if (c->frame++ < c->skip) return _URC_NO_REASON;
  if (c->n >= c->max) return _URC_END_OF_STACK;
  const uint64_t ip = _Unwind_GetIP(ctx);
  if (ip == 0 || (c->stop != nullptr && c->stop(ip))) return _URC_END_OF_STACK;
  c->pcs[c->n++] = ip;
  return _URC_NO_REASON;
}

// The rule of `pc` from the cache, worked out on a miss: four slots from
// the address's hash, the first empty one (or the first) taken.
const Rule& Lookup(UnwindRules* r, uint64_t pc, bool exact) {
  constexpr int kWays = 4;
  const size_t h = size_t((pc * 0x9e3779b97f4a7c15ull) >> 54);
  static_assert(kSlots == 1024);
  Slot* empty = nullptr;
  for (int w = 0; w < kWays; ++w) {
    Slot& slot = r->slots[(h + size_t(w)) & (kSlots - 1)];
    if (slot.rule.kind == Rule::kNone) {
      if (empty == nullptr) empty = &slot;
    } else if (slot.pc == pc) {
      return slot.rule;
    }
  }
  Slot& slot = empty != nullptr ? *empty : r->slots[h];
  slot.pc = pc;
  slot.rule = RuleFor(pc, exact);
  ++r->counts.rules_built;
  return slot.rule;
}

pthread_mutex_t g_walk_mu = PTHREAD_MUTEX_INITIALIZER;  // WalkModules'

}  // namespace

int WalkModules(int (*callback)(dl_phdr_info*, size_t, void*), void* arg) {
  pthread_mutex_lock(&g_walk_mu);
  const int r = dl_iterate_phdr(callback, arg);
  pthread_mutex_unlock(&g_walk_mu);
  return r;
}

void HoldModuleWalks() { pthread_mutex_lock(&g_walk_mu); }

void ReleaseModuleWalks() { pthread_mutex_unlock(&g_walk_mu); }

__attribute__((noinline)) int LibgccBacktrace(uint64_t* pcs, int max, int skip, bool (*stop)(uint64_t)) {
  Collect c{pcs, max, skip, 0, 0, stop};
  _Unwind_Backtrace(CollectFrame, &c);
  return c.n;
}

__attribute__((noinline, no_sanitize("address"))) int FastBacktrace(UnwindRules** rules, uint64_t* pcs, int max, int skip,
                                            bool (*stop)(uint64_t)) {
  uint64_t ip, sp, bp;
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(ip), "=r"(sp), "=r"(bp));
  unsigned long long subs = 0;
  WalkModules(CountUnloads, &subs);
  UnwindRules* r = *rules;
  if (r == nullptr) {
    void* mem = malloc(sizeof(UnwindRules));
    if (mem == nullptr) return -1;
    r = new (mem) UnwindRules;  // (built in place: 24 KB, never on the stack)
    r->subs = subs;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        r->stack_lo = reinterpret_cast<uint64_t>(addr);
        r->stack_hi = r->stack_lo + size;
      }
      pthread_attr_destroy(&attr);
    }
    *rules = r;
  } else if (r->subs != subs) {
    // A module unloaded since the rules were worked out: another may sit at
    // its addresses now.
    for (Slot& slot : r->slots) slot = Slot{};
    r->subs = subs;
  }
  // On another stack than the thread's own (a signal's alternate stack, a
  // coroutine's), or with no stack known: libgcc's.
  if (sp < r->stack_lo || sp >= r->stack_hi) {
    ++r->counts.fallbacks;
    return -1;
  }
  int n = 0;
  for (int frame = 0;; ++frame) {
    if (frame >= skip) {
      if (n >= max || ip == 0 || (stop != nullptr && stop(ip))) return n;
      pcs[n++] = ip;
    }
    // The start frame's pc is exact; every other is a return address (two
    // kinds never share an address: the start is inside this function).
    const Rule& rule = Lookup(r, ip, frame == 0);
    if (rule.kind == Rule::kEnd) return n;
    if (rule.kind != Rule::kStep) {
      ++r->counts.fallbacks;
      return -1;
    }
    const uint64_t cfa = (rule.cfa_on_rbp ? bp : sp) + uint64_t(int64_t(rule.cfa_off));
    const uint64_t ra_at = cfa + uint64_t(int64_t(rule.ra_off));
    const uint64_t bp_at = rule.rbp_saved ? cfa + uint64_t(int64_t(rule.rbp_off)) : ra_at;
    // Each caller's frame lies above its callee's, and what is read lies
    // on the stack, above this frame: anything else is a rule misapplied,
    // and left to libgcc.
    if (cfa <= sp || ra_at < sp || bp_at < sp || ra_at > r->stack_hi - 8 || bp_at > r->stack_hi - 8) {
      ++r->counts.fallbacks;
      return -1;
    }
    uint64_t next_ip, next_bp = bp;
    memcpy(&next_ip, reinterpret_cast<const void*>(ra_at), 8);
    if (rule.rbp_saved) memcpy(&next_bp, reinterpret_cast<const void*>(bp_at), 8);
    ip = next_ip;
    bp = next_bp;
    sp = cfa;
  }
}

void FreeUnwindRules(UnwindRules* rules) { free(rules); }

UnwindCounts CountsOf(const UnwindRules* rules) { return rules != nullptr ? rules->counts : UnwindCounts{}; }

}  // namespace stallscope::recorder
