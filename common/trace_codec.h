// The trace codec: how chunks and their entries are laid out in bytes, once.
// The recorder (libinterpose/recorder.cc) writes with the encoders, the test
// trace builder (analyzer/testing/trace_builder.h) too, and the reader
// (analyzer/read/trace_reader.cc) validates with the chunk table and reads the
// variable-size entries with EntryReader. Layouts: common/trace_format.h and
// docs/trace-format.md.
//
// Header-only and free of allocation of its own: the encoders append to the
// caller's buffer (std::string or std::vector<unsigned char>), so the preload
// library stays self-contained.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "trace_format.h"

namespace stallscope::trace {

// Chunk record kinds that are not one fixed struct.
struct Entries {};    // variable-size entries, each padded to 8 bytes
struct NoRecords {};  // an empty payload

// What a chunk of one type holds.
struct ChunkTypeInfo {
  ChunkType type;
  const char* name;     // as reports and messages name it
  size_t record_bytes;  // the fixed record's size; 0 for Entries and NoRecords
  ChunkClock clock;     // the clock of its records' times
  ChunkReading reading;  // whether a slice of the timeline chooses it
};

inline constexpr ChunkTypeInfo kChunkTypes[] = {
#define STALLSCOPE_CHUNK_INFO(id, wire, name, record, clock, reading)                         \
  {ChunkType::id, name, std::is_empty_v<record> ? 0 : sizeof(record), ChunkClock::clock, \
   ChunkReading::reading},
    STALLSCOPE_CHUNK_TYPES(STALLSCOPE_CHUNK_INFO)
#undef STALLSCOPE_CHUNK_INFO
};

// The table's row for a wire type; nullptr for a type this build does not
// know (a newer writer's: readers skip it).
constexpr const ChunkTypeInfo* FindChunkType(uint16_t type) {
  for (const ChunkTypeInfo& info : kChunkTypes)
    if (static_cast<uint16_t>(info.type) == type) return &info;
  return nullptr;
}

// The record type of a fixed-record chunk type, for typed writers:
// ChunkRecord<ChunkType::kApi>::type is ApiRecord.
template <ChunkType kType>
struct ChunkRecord;
#define STALLSCOPE_CHUNK_RECORD(id, wire, name, record, clock, reading) \
  template <>                                                       \
  struct ChunkRecord<ChunkType::id> {                               \
    using type = record;                                            \
  };
STALLSCOPE_CHUNK_TYPES(STALLSCOPE_CHUNK_RECORD)
#undef STALLSCOPE_CHUNK_RECORD

// The header of a chunk whose payload (`bytes`, a multiple of 8: every
// encoder pads its entries and every record is a multiple of 8) is at
// `payload`, with the checksum of format `version`.
inline ChunkHeader MakeChunkHeader(uint16_t version, ChunkType type, uint32_t tid, uint32_t count,
                                   const void* payload, size_t bytes, uint16_t encoding = 0) {
  ChunkHeader h{};
  h.magic = kChunkMagic;
  h.type = static_cast<uint16_t>(type);
  h.encoding = encoding;
  h.tid = tid;
  h.count = count;
  h.payload_bytes = static_cast<uint32_t>(bytes);
  h.checksum = ChunkChecksum(version, payload, bytes);
  return h;
}

// Encoders of the variable-size entries. Each appends one entry, padded to
// 8 bytes with zeros, to `out` (std::string or std::vector<unsigned char>).
template <typename Bytes>
void AppendBytes(Bytes* out, const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  out->insert(out->end(), c, c + n);
}
template <typename Bytes>
void PadEntry(Bytes* out) {
  out->resize(PadTo8(out->size()), 0);
}

// kString: {u32 id, u32 len, bytes}.
template <typename Bytes>
void EncodeString(Bytes* out, uint32_t id, std::string_view s) {
  const uint32_t hdr[2] = {id, static_cast<uint32_t>(s.size())};
  AppendBytes(out, hdr, sizeof hdr);
  AppendBytes(out, s.data(), s.size());
  PadEntry(out);
}

// kStack: {u32 id, u16 depth, u16 kind, u64 words}. Native stacks have one
// word per frame (a return address); Python stacks two (the string id of
// "file\tfunction", the line), so `nwords` is even for them.
template <typename Bytes>
void EncodeStack(Bytes* out, uint32_t id, StackKind kind, const uint64_t* words, size_t nwords) {
  const auto depth = static_cast<uint16_t>(kind == StackKind::kPython ? nwords / 2 : nwords);
  const auto k = static_cast<uint16_t>(kind);
  AppendBytes(out, &id, 4);
  AppendBytes(out, &depth, 2);
  AppendBytes(out, &k, 2);
  AppendBytes(out, words, nwords * 8);
}

// kModule: ModuleRecord, path, build id.
template <typename Bytes>
void EncodeModule(Bytes* out, uint64_t base, uint64_t low, uint64_t high, std::string_view path,
                  std::string_view build_id) {
  ModuleRecord m{};
  m.base = base;
  m.low = low;
  m.high = high;
  m.path_len = static_cast<uint32_t>(path.size());
  m.build_id_len = static_cast<uint32_t>(build_id.size());
  AppendBytes(out, &m, sizeof m);
  AppendBytes(out, path.data(), path.size());
  AppendBytes(out, build_id.data(), build_id.size());
  PadEntry(out);
}

// kApiTable: ApiTableEntry, name.
template <typename Bytes>
void EncodeApi(Bytes* out, uint16_t api, uint8_t category, uint16_t flags, std::string_view name) {
  ApiTableEntry e{};
  e.api = api;
  e.category = category;
  e.flags = flags;
  e.name_len = static_cast<uint16_t>(name.size());
  AppendBytes(out, &e, sizeof e);
  AppendBytes(out, name.data(), e.name_len);
  PadEntry(out);
}

// A whole chunk (header and payload) appended to `out`; the payload is
// padded to 8 bytes first.
template <typename Bytes>
void EncodeChunk(Bytes* out, uint16_t version, ChunkType type, uint32_t tid, uint32_t count,
                 Bytes payload, uint16_t encoding = 0) {
  PadEntry(&payload);
  const ChunkHeader h =
      MakeChunkHeader(version, type, tid, count, payload.data(), payload.size(), encoding);
  AppendBytes(out, &h, sizeof h);
  AppendBytes(out, payload.data(), payload.size());
}

// Reads the variable-size entries of one verified payload in turn. Each
// call returns false, with error() saying what did not fit, when the entry
// runs past the payload; views point into the payload.
class EntryReader {
 public:
  EntryReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}

  bool String(uint32_t* id, std::string_view* s) {
    uint32_t len;
    if (n_ - off_ < 8) return Fail("string entry past the payload");
    std::memcpy(id, p_ + off_, 4);
    std::memcpy(&len, p_ + off_ + 4, 4);
    if (len > n_ - off_ - 8) return Fail("string length past the payload");
    *s = View(off_ + 8, len);
    Skip(PadTo8(8 + static_cast<size_t>(len)));
    return true;
  }

  // `words` points at `*nwords` unaligned u64 (copy them out with memcpy).
  bool Stack(uint32_t* id, uint16_t* kind, uint16_t* depth, const uint8_t** words,
             size_t* nwords) {
    if (n_ - off_ < 8) return Fail("stack entry past the payload");
    std::memcpy(id, p_ + off_, 4);
    std::memcpy(depth, p_ + off_ + 4, 2);
    std::memcpy(kind, p_ + off_ + 6, 2);
    off_ += 8;
    const bool python = *kind == static_cast<uint16_t>(StackKind::kPython);
    *nwords = python ? size_t{2} * *depth : *depth;
    if (*nwords * 8 > n_ - off_) return Fail("stack depth past the payload");
    *words = p_ + off_;
    off_ += *nwords * 8;
    return true;
  }

  bool Module(ModuleRecord* m, std::string_view* path, std::string_view* build_id) {
    if (n_ - off_ < sizeof *m) return Fail("module entry past the payload");
    std::memcpy(m, p_ + off_, sizeof *m);
    off_ += sizeof *m;
    const uint64_t extra = static_cast<uint64_t>(m->path_len) + m->build_id_len;
    if (extra > n_ - off_) return Fail("module path past the payload");
    *path = View(off_, m->path_len);
    *build_id = View(off_ + m->path_len, m->build_id_len);
    Skip(PadTo8(extra));
    return true;
  }

  bool Api(ApiTableEntry* e, std::string_view* name) {
    if (n_ - off_ < sizeof *e) return Fail("api entry past the payload");
    std::memcpy(e, p_ + off_, sizeof *e);
    if (e->name_len > n_ - off_ - sizeof *e) return Fail("api name past the payload");
    *name = View(off_ + sizeof *e, e->name_len);
    Skip(PadTo8(sizeof *e + e->name_len));
    return true;
  }

  const char* error() const { return error_; }

 private:
  std::string_view View(size_t at, size_t len) const {
    return {reinterpret_cast<const char*>(p_ + at), len};
  }
  // Past the entry and its padding; the padding of the last entry may be
  // missing.
  void Skip(size_t bytes) { off_ = bytes > n_ - off_ ? n_ : off_ + bytes; }
  bool Fail(const char* why) {
    error_ = why;
    return false;
  }

  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
  const char* error_ = "";
};

}  // namespace stallscope::trace
