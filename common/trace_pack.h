// Packed chunks (format 4; docs/trace-format.md, "Packed chunks"): the
// per-launch records (kApi, kDevice, kCorrelation) written as varints of
// deltas, with each chunk's repeated call shapes in a dictionary of its own,
// so that a chunk decodes alone (a damaged chunk loses only itself).
//
// Header-only, like the rest of the codec: the packers append to the
// caller's buffer (std::string or std::vector<unsigned char>) and keep their
// dictionary in fixed arrays; the unpackers write into the caller's records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "trace_format.h"

namespace stallscope::trace {

// ChunkHeader::encoding.
enum ChunkEncoding : uint16_t {
  kEncodingRaw = 0,
  // The records packed (PackApi, PackDevice, PackCorrelation); `count` is
  // the number of records.
  kEncodingPacked = 1,
  // The payload is {u32 bytes before compression, u32 bytes of the frame,
  // one zstd frame}, padded to 8: what it decompresses to is the payload of
  // the encoding without this bit.
  kEncodingZstd = 1u << 8,
};

// ---- varints: 7 bits a byte, low first; signed values zigzagged ----

// One record's varints, gathered on the stack and appended in one insert
// (not one insert per varint).
class VarintOut {
 public:
  void Put(uint64_t v) {
    while (v >= 0x80) {
      buf_[n_++] = static_cast<unsigned char>(v | 0x80);
      v >>= 7;
    }
    buf_[n_++] = static_cast<unsigned char>(v);
  }
  template <typename Bytes>
  void AppendTo(Bytes* out) {
    out->insert(out->end(), buf_, buf_ + n_);
    n_ = 0;
  }

 private:
  unsigned char buf_[12 * 10];  // a kApi record's most: 12 varints of at most 10 bytes
  size_t n_ = 0;
};

constexpr uint64_t ZigZag(uint64_t delta) {  // delta: a difference taken mod 2^64
  return (delta << 1) ^ (0 - (delta >> 63));
}
constexpr uint64_t UnZigZag(uint64_t v) { return (v >> 1) ^ (0 - (v & 1)); }

class VarintIn {
 public:
  VarintIn(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  // False past the end of the payload or for a varint over 10 bytes.
  bool Get(uint64_t* v) {
    if (end_ - p_ >= 10) {  // no bound to check per byte; most are one byte
      uint64_t b = *p_++;
      if (b < 0x80) {
        *v = b;
        return true;
      }
      uint64_t x = b & 0x7f;
      for (int shift = 7; shift < 70; shift += 7) {
        b = *p_++;
        x |= (b & 0x7f) << shift;
        if (b < 0x80) {
          *v = x;
          return true;
        }
      }
      return false;
    }
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      x |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = x;
        return true;
      }
    }
    return false;
  }
  // What is left is at most the padding to 8 bytes, all zeros.
  bool AtPadding() const {
    if (end_ - p_ >= 8) return false;
    for (const uint8_t* q = p_; q < end_; ++q)
      if (*q != 0) return false;
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// A chunk's dictionary of call shapes: up to kCapacity, found by hash. A
// shape is kWords 64-bit words that the packer assembles from a record's
// fields in registers (a shape struct filled field by field, then read back
// as words, stalled on store-to-load forwarding: packing a launch record took
// 35.6 ns before this and the single insert, 18.2 ns after).
template <size_t kWords, size_t kCapacity>
class ShapeTable {
 public:
  using Key = uint64_t[kWords];
  void Clear() {  // only the slots in use (a chunk holds a few shapes)
    for (size_t i = 0; i < n_; ++i) slots_[used_[i]] = 0;
    n_ = 0;
  }
  // The index of `k`, adding it when new (then *added is true); -1 when new
  // and the table is full.
  int Find(const Key& k, bool* added) {
    *added = false;
    size_t h = Hash(k) & (kSlots - 1);
    for (;; h = (h + 1) & (kSlots - 1)) {
      const uint16_t slot = slots_[h];
      if (slot == 0) break;
      if (Equal(keys_[slot - 1], k)) return slot - 1;
    }
    if (n_ == kCapacity) return -1;
    for (size_t i = 0; i < kWords; ++i) keys_[n_][i] = k[i];
    used_[n_] = static_cast<uint16_t>(h);
    slots_[h] = static_cast<uint16_t>(++n_);
    *added = true;
    return static_cast<int>(n_ - 1);
  }

 private:
  static constexpr size_t kSlots = 2 * kCapacity;  // a power of two
  static_assert((kSlots & (kSlots - 1)) == 0 && kCapacity < 65535);
  static bool Equal(const Key& a, const Key& b) {
    uint64_t diff = 0;
    for (size_t i = 0; i < kWords; ++i) diff |= a[i] ^ b[i];
    return diff == 0;
  }
  static size_t Hash(const Key& k) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < kWords; ++i) {
      h = (h ^ k[i]) * 0xff51afd7ed558ccdull;
      h ^= h >> 32;
    }
    return static_cast<size_t>(h);
  }
  Key keys_[kCapacity];
  uint16_t used_[kCapacity];  // the slot of each key
  uint16_t slots_[kSlots] = {};
  size_t n_ = 0;
};

inline constexpr size_t kPackShapes = 1024;  // shapes a chunk's dictionary holds

// ---- kApi ----
// Each record: a tag, varint (shape << 2 | correlation mode); the shape, when
// new (shape 0: its fields follow, and it becomes the next index + 1 when the
// dictionary has room); the correlation delta when the mode says so; enter
// as the zigzag delta from the previous record's enter; exit − enter,
// zigzagged. Correlation modes: 0 none, 1 the previous nonzero one + 1, 2 a
// zigzag delta from it follows.
struct ApiShape {
  uint64_t stream, object, bytes;
  uint32_t stack, python_stack;
  uint16_t api, flags;
  int32_t result;
};
static_assert(sizeof(ApiShape) == 40);

class ApiPacker {
 public:
  template <typename Bytes>
  void Pack(Bytes* out, const ApiRecord* r, size_t n) {
    table_.Clear();
    uint64_t prev_enter = 0, prev_corr = 0;
    VarintOut v;
    for (size_t i = 0; i < n; ++i) {
      const ApiRecord& a = r[i];
      const uint64_t key[5] = {a.stream, a.object, a.bytes, a.stack | uint64_t{a.python_stack} << 32,
                               a.api | uint64_t{a.flags} << 16 | uint64_t{static_cast<uint32_t>(a.result)} << 32};
      bool added;
      const int k = table_.Find(key, &added);
      const uint64_t ref = added || k < 0 ? 0 : static_cast<uint64_t>(k) + 1;
      const uint64_t mode = a.correlation == 0 ? 0 : a.correlation == prev_corr + 1 ? 1 : 2;
      v.Put(ref << 2 | mode);
      if (ref == 0) {
        v.Put(a.api);
        v.Put(a.flags);
        v.Put(ZigZag(static_cast<uint64_t>(static_cast<int64_t>(a.result))));
        v.Put(a.stream);
        v.Put(a.object);
        v.Put(a.bytes);
        v.Put(a.stack);
        v.Put(a.python_stack);
      }
      if (mode == 2) v.Put(ZigZag(a.correlation - prev_corr));
      if (a.correlation != 0) prev_corr = a.correlation;
      v.Put(ZigZag(a.enter - prev_enter));
      v.Put(ZigZag(a.exit - a.enter));
      prev_enter = a.enter;
      v.AppendTo(out);
    }
  }

 private:
  ShapeTable<5, kPackShapes> table_;  // ApiShape's fields
};

// Unpacks `count` records, handing each to `emit(const ApiRecord&)` in
// order; nullptr when fine, else what is wrong (the records before the fault
// were handed on). `shapes` is scratch of at least kPackShapes entries. A
// reader that builds its own structures from the records takes them here,
// not through an array of records written and read back.
template <typename Emit>
inline const char* UnpackApiEach(const uint8_t* p, size_t n, uint32_t count, ApiShape* shapes, Emit&& emit) {
  VarintIn in(p, n);
  size_t nshapes = 0;
  uint64_t prev_enter = 0, prev_corr = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t tag, v[8], corr = 0, d_enter, dur;
    if (!in.Get(&tag)) return "api record past the payload";
    const uint64_t ref = tag >> 2, mode = tag & 3;
    ApiShape s;
    if (ref == 0) {
      for (uint64_t& x : v)
        if (!in.Get(&x)) return "api shape past the payload";
      s = ApiShape{v[3], v[4], v[5], static_cast<uint32_t>(v[6]), static_cast<uint32_t>(v[7]),
                   static_cast<uint16_t>(v[0]), static_cast<uint16_t>(v[1]),
                   static_cast<int32_t>(static_cast<int64_t>(UnZigZag(v[2])))};
      if (nshapes < kPackShapes) shapes[nshapes++] = s;
    } else if (ref > nshapes) {
      return "api shape reference past the chunk's dictionary";
    } else {
      s = shapes[ref - 1];
    }
    if (mode == 1) {
      corr = prev_corr + 1;
    } else if (mode == 2) {
      if (!in.Get(&corr)) return "api correlation past the payload";
      corr = prev_corr + UnZigZag(corr);
    } else if (mode == 3) {
      return "api record with an unknown correlation mode";
    }
    if (corr != 0) prev_corr = corr;
    if (!in.Get(&d_enter) || !in.Get(&dur)) return "api times past the payload";
    ApiRecord a;
    a.enter = prev_enter + UnZigZag(d_enter);
    a.exit = a.enter + UnZigZag(dur);
    a.correlation = corr;
    a.stream = s.stream;
    a.object = s.object;
    a.bytes = s.bytes;
    a.stack = s.stack;
    a.api = s.api;
    a.flags = s.flags;
    a.result = s.result;
    a.python_stack = s.python_stack;
    prev_enter = a.enter;
    emit(a);
  }
  return in.AtPadding() ? nullptr : "bytes after the last packed api record";
}

// Unpacks `count` records into `out`; nullptr when fine, else what is wrong.
inline const char* UnpackApi(const uint8_t* p, size_t n, uint32_t count, ApiRecord* out,
                             ApiShape* shapes) {
  return UnpackApiEach(p, n, count, shapes, [&out](const ApiRecord& a) { *out++ = a; });
}

// ---- kDevice ----
// Each record: a tag, varint (shape << 1 | 1 when the CUPTI correlation id is
// the previous record's + 1); the shape when new (as for kApi); else the
// correlation as a zigzag delta; start as the zigzag delta from the previous
// record's end; end − start, zigzagged.
struct DeviceShape {
  uint64_t bytes;
  uint32_t name, stream, device, context;
  uint8_t kind, copy_kind, src_kind, dst_kind;
  uint32_t zero;  // padding, always 0
};
static_assert(sizeof(DeviceShape) == 32);

class DevicePacker {
 public:
  template <typename Bytes>
  void Pack(Bytes* out, const DeviceRecord* r, size_t n) {
    table_.Clear();
    uint64_t prev_end = 0;
    uint32_t prev_corr = 0;
    VarintOut v;
    for (size_t i = 0; i < n; ++i) {
      const DeviceRecord& d = r[i];
      const uint64_t key[4] = {d.bytes, d.name | uint64_t{d.stream} << 32, d.device | uint64_t{d.context} << 32,
                               d.kind | uint64_t{d.copy_kind} << 8 | uint64_t{d.src_kind} << 16 |
                                   uint64_t{d.dst_kind} << 24};
      bool added;
      const int k = table_.Find(key, &added);
      const uint64_t ref = added || k < 0 ? 0 : static_cast<uint64_t>(k) + 1;
      const bool next = d.correlation == static_cast<uint32_t>(prev_corr + 1);
      v.Put(ref << 1 | (next ? 1 : 0));
      if (ref == 0) {
        v.Put(d.bytes);
        v.Put(d.name);
        v.Put(d.stream);
        v.Put(d.device);
        v.Put(d.context);
        v.Put(uint64_t{d.kind} | uint64_t{d.copy_kind} << 8 | uint64_t{d.src_kind} << 16 |
                  uint64_t{d.dst_kind} << 24);
      }
      if (!next) v.Put(ZigZag(static_cast<uint64_t>(static_cast<int64_t>(d.correlation) - prev_corr)));
      v.Put(ZigZag(d.start_ns - prev_end));
      v.Put(ZigZag(d.end_ns - d.start_ns));
      prev_corr = d.correlation;
      prev_end = d.end_ns;
      v.AppendTo(out);
    }
  }

 private:
  ShapeTable<4, kPackShapes> table_;  // DeviceShape's fields
};

// As UnpackApiEach: each record to `emit(const DeviceRecord&)`.
template <typename Emit>
inline const char* UnpackDeviceEach(const uint8_t* p, size_t n, uint32_t count, DeviceShape* shapes,
                                    Emit&& emit) {
  VarintIn in(p, n);
  size_t nshapes = 0;
  uint64_t prev_end = 0;
  uint32_t prev_corr = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t tag, v[6], corr, d_start, dur;
    if (!in.Get(&tag)) return "device record past the payload";
    const uint64_t ref = tag >> 1;
    DeviceShape s;
    if (ref == 0) {
      for (uint64_t& x : v)
        if (!in.Get(&x)) return "device shape past the payload";
      s = DeviceShape{v[0],
                      static_cast<uint32_t>(v[1]),
                      static_cast<uint32_t>(v[2]),
                      static_cast<uint32_t>(v[3]),
                      static_cast<uint32_t>(v[4]),
                      static_cast<uint8_t>(v[5]),
                      static_cast<uint8_t>(v[5] >> 8),
                      static_cast<uint8_t>(v[5] >> 16),
                      static_cast<uint8_t>(v[5] >> 24),
                      0};
      if (nshapes < kPackShapes) shapes[nshapes++] = s;
    } else if (ref > nshapes) {
      return "device shape reference past the chunk's dictionary";
    } else {
      s = shapes[ref - 1];
    }
    if (tag & 1) {
      corr = static_cast<uint32_t>(prev_corr + 1);
    } else {
      if (!in.Get(&corr)) return "device correlation past the payload";
      corr = static_cast<uint32_t>(prev_corr + UnZigZag(corr));
    }
    if (!in.Get(&d_start) || !in.Get(&dur)) return "device times past the payload";
    DeviceRecord d;
    d.start_ns = prev_end + UnZigZag(d_start);
    d.end_ns = d.start_ns + UnZigZag(dur);
    d.bytes = s.bytes;
    d.correlation = static_cast<uint32_t>(corr);
    d.name = s.name;
    d.stream = s.stream;
    d.device = s.device;
    d.context = s.context;
    d.kind = s.kind;
    d.copy_kind = s.copy_kind;
    d.src_kind = s.src_kind;
    d.dst_kind = s.dst_kind;
    prev_corr = d.correlation;
    prev_end = d.end_ns;
    emit(d);
  }
  return in.AtPadding() ? nullptr : "bytes after the last packed device record";
}

inline const char* UnpackDevice(const uint8_t* p, size_t n, uint32_t count, DeviceRecord* out,
                                DeviceShape* shapes) {
  return UnpackDeviceEach(p, n, count, shapes, [&out](const DeviceRecord& d) { *out++ = d; });
}

// ---- kCorrelation ----
// Each record: varint (zigzag(correlation − previous − 1) << 1 | 1 when the
// external id is not the previous one + 1), then, with that bit, the
// external id's zigzag delta from the previous one. `reserved` is not
// carried (0 as read): a chunk with a nonzero one is written raw
// (Packable).
template <typename Bytes>
void PackCorrelation(Bytes* out, const CorrelationRecord* r, size_t n) {
  uint64_t prev_ext = 0;
  uint32_t prev_corr = 0;
  VarintOut v;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t dc = ZigZag(static_cast<uint64_t>(static_cast<int64_t>(r[i].correlation) - prev_corr - 1));
    const bool jump = r[i].external != prev_ext + 1;
    v.Put(dc << 1 | (jump ? 1 : 0));
    if (jump) v.Put(ZigZag(r[i].external - prev_ext));
    prev_ext = r[i].external;
    prev_corr = r[i].correlation;
    v.AppendTo(out);
  }
}

// As UnpackApiEach: each record to `emit(const CorrelationRecord&)`.
template <typename Emit>
inline const char* UnpackCorrelationEach(const uint8_t* p, size_t n, uint32_t count, Emit&& emit) {
  VarintIn in(p, n);
  uint64_t prev_ext = 0;
  uint32_t prev_corr = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t tag, ext;
    if (!in.Get(&tag)) return "correlation record past the payload";
    if (tag & 1) {
      if (!in.Get(&ext)) return "correlation external id past the payload";
      ext = prev_ext + UnZigZag(ext);
    } else {
      ext = prev_ext + 1;
    }
    CorrelationRecord r;
    r.correlation = static_cast<uint32_t>(prev_corr + 1 + UnZigZag(tag >> 1));
    r.external = ext;
    r.reserved = 0;
    prev_ext = ext;
    prev_corr = r.correlation;
    emit(r);
  }
  return in.AtPadding() ? nullptr : "bytes after the last packed correlation record";
}

inline const char* UnpackCorrelation(const uint8_t* p, size_t n, uint32_t count, CorrelationRecord* out) {
  return UnpackCorrelationEach(p, n, count, [&out](const CorrelationRecord& r) { *out++ = r; });
}

// Whether every record can be packed losslessly (CorrelationRecord's
// `reserved` is not carried: it is always 0 as written).
inline bool Packable(const CorrelationRecord* r, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (r[i].reserved != 0) return false;
  return true;
}

}  // namespace stallscope::trace
