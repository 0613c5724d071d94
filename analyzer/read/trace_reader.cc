// The .sstrace reader: header and chunk validation, record decoding.
#include "analyzer/read/trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "trace_codec.h"
#include "trace_pack.h"
#include "zstd.h"

namespace stallscope::analyzer {
namespace {

using trace::ChunkHeader;
using trace::ChunkType;
using trace::FileHeader;

// Reads n bytes at offset into dst; returns false on a short read or error.
using ReadAt = std::function<bool(uint64_t offset, size_t n, void* dst)>;

const char* ChunkTypeName(uint16_t type) {
  const trace::ChunkTypeInfo* info = trace::FindChunkType(type);
  return info != nullptr ? info->name : "unknown";
}

// Fixed-size records: whether a chunk's count fits its payload, by the
// table's size (an error text; empty when fine, or for a type the table does
// not know).
std::string CheckRecordCount(const ChunkHeader& h, size_t n) {
  const trace::ChunkTypeInfo* info = trace::FindChunkType(h.type);
  if (info != nullptr && info->record_bytes > 0 &&
      static_cast<uint64_t>(h.count) * info->record_bytes > n) {
    return "record count exceeds payload";
  }
  return {};
}

// A call record of thread `tid` appended to the timeline, where it is call
// `index`. Inlined into the unpacker's loop and written field by field in
// place: a record built on the stack and copied whole is read back with
// wider loads than its fields were stored with, which stalls on
// store-to-load forwarding (most of this function's time when it did).
[[gnu::always_inline]] inline void AppendCall(const trace::ApiRecord& r, uint32_t tid, size_t index,
                                              Timeline* t) {
  ApiCall& c = t->calls.emplace_back();
  c.enter_ns = static_cast<int64_t>(r.enter);
  c.exit_ns = static_cast<int64_t>(r.exit);
  c.tid = tid;
  c.api = r.api;
  c.flags = r.flags;
  if (r.correlation != 0) t->by_external.Set(r.correlation, static_cast<uint32_t>(index));
  CallInfo& info = t->call_info.emplace_back();
  info.correlation = r.correlation;
  info.stream = r.stream;
  info.object = r.object;
  info.bytes = r.bytes;
  info.stack = r.stack;
  info.python_stack = r.python_stack;
  info.result = r.result;
}

// A device record appended to the timeline (in place, as AppendCall); a
// device id past kMaxDevice is clamped to it and counted in `bad_devices`.
[[gnu::always_inline]] inline void AppendOp(const trace::DeviceRecord& r, Timeline* t, uint64_t* bad_devices) {
  DeviceOp& op = t->ops.emplace_back();
  op.start_ns = static_cast<int64_t>(r.start_ns);
  op.end_ns = static_cast<int64_t>(r.end_ns);
  *bad_devices += r.device > kMaxDevice;
  op.device = static_cast<uint16_t>(std::min(r.device, kMaxDevice));
  op.kind = static_cast<trace::DeviceOpKind>(r.kind);
  op.copy_kind = r.copy_kind;
  // (Or-ed as words: a test of both bytes at once was compiled into two
  // byte stores and a 16-bit load, a forwarding stall on every op.)
  if ((uint32_t{r.src_kind} | uint32_t{r.dst_kind}) != 0) {
    // A pageable host side: DtoH/AtoH into pageable memory, or HtoH
    // with either side pageable (CUpti_ActivityMemoryKind 1; copy
    // kinds 2, 4 and 9).
    t->copy_memory_kinds = true;
    constexpr uint8_t kPageable = 1;
    const bool to_host = r.copy_kind == 2 || r.copy_kind == 4;
    const bool host_to_host = r.copy_kind == 9;
    if ((to_host && r.dst_kind == kPageable) ||
        (host_to_host && (r.src_kind == kPageable || r.dst_kind == kPageable))) {
      t->pageable_copy_ops.insert(r.correlation);
    }
  }
  OpInfo& info = t->op_info.emplace_back();
  info.bytes = r.bytes;
  info.correlation = r.correlation;
  info.name = r.name;
  info.stream = r.stream;
  info.context = r.context;
}

// Whether chunk `h`'s payload, once inflated, is packed records.
bool Packed(const ChunkHeader& h) { return (h.encoding & 0xff) == trace::kEncodingPacked; }

// Hands each record of a call, device or correlation chunk (its payload
// decompressed, when it was) to `visit`, in order: a raw payload's records
// (as many as it holds), or a packed one's straight from the unpacker
// (`api_shapes`, `device_shapes`: its scratch). An error text when packed
// records do not decode; the records before the fault were handed on.
template <typename Visitor>
std::string EachRecord(const ChunkHeader& h, const uint8_t* p, size_t n, trace::ApiShape* api_shapes,
                       trace::DeviceShape* device_shapes, Visitor& visit) {
  const auto type = static_cast<ChunkType>(h.type);
  if (Packed(h)) {
    const char* error = type == ChunkType::kApi      ? trace::UnpackApiEach(p, n, h.count, api_shapes, visit)
                        : type == ChunkType::kDevice ? trace::UnpackDeviceEach(p, n, h.count, device_shapes, visit)
                                                     : trace::UnpackCorrelationEach(p, n, h.count, visit);
    return error == nullptr ? std::string() : std::string(error);
  }
  auto raw = [&](auto record) {
    const size_t records = std::min<size_t>(h.count, n / sizeof record);
    for (size_t i = 0; i < records; ++i) {
      std::memcpy(&record, p + i * sizeof record, sizeof record);
      visit(record);
    }
  };
  if (type == ChunkType::kApi) {
    raw(trace::ApiRecord{});
  } else if (type == ChunkType::kDevice) {
    raw(trace::DeviceRecord{});
  } else {
    raw(trace::CorrelationRecord{});
  }
  return {};
}

// Appends the records EachRecord hands it to a timeline.
struct Appender {
  Timeline* t;
  uint32_t tid;  // the chunk's thread
  size_t index;  // the next call's index in t->calls
  uint64_t bad_devices = 0;
  [[gnu::always_inline]] void operator()(const trace::ApiRecord& r) { AppendCall(r, tid, index++, t); }
  [[gnu::always_inline]] void operator()(const trace::DeviceRecord& r) { AppendOp(r, t, &bad_devices); }
  [[gnu::always_inline]] void operator()(const trace::CorrelationRecord& r) {
    t->correlations.Set(r.correlation, r.external);
  }
};

// Decodes one verified chunk payload into the timeline. Returns an error text
// (empty when fine) for counts or lengths that do not fit the payload.
std::string ParseChunk(const ChunkHeader& h, const uint8_t* p, size_t n, Timeline* t) {
  const trace::ChunkTypeInfo* info = trace::FindChunkType(h.type);
  if (std::string e = CheckRecordCount(h, n); !e.empty()) return e;
  trace::EntryReader entries(p, n);
  switch (static_cast<ChunkType>(h.type)) {
    case ChunkType::kApi:
    case ChunkType::kDevice:
    case ChunkType::kCorrelation: {
      // Appended whole, each record built once (sizing the vectors first
      // would write every field twice: the default, then the record's);
      // the capacity is the slice's or the file's count already.
      // The payload is raw records here (an unpacked chunk's header still
      // names its packing).
      ChunkHeader raw = h;
      raw.encoding = trace::kEncodingRaw;
      Appender append{t, h.tid, t->calls.size()};
      EachRecord(raw, p, n, nullptr, nullptr, append);  // raw: nothing to fail
      if (append.bad_devices > 0) AddDiagnostic(&t->diagnostics, DiagId::kInvalidRecords, append.bad_devices);
      return {};
    }
    case ChunkType::kNvtx: {
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::NvtxRecord r;
        std::memcpy(&r, p + i * sizeof(r), sizeof(r));
        t->nvtx.push_back({static_cast<int64_t>(r.ticks), r.range_id, r.domain, r.name,
                           static_cast<trace::NvtxType>(r.type), h.tid});
      }
      return {};
    }
    case ChunkType::kClock: {
      size_t old = t->clocks.size();
      t->clocks.resize(old + h.count);
      if (h.count > 0) std::memcpy(t->clocks.data() + old, p, h.count * sizeof(trace::ClockRecord));
      return {};
    }
    case ChunkType::kThread: {
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::ThreadRecord r;
        std::memcpy(&r, p + i * sizeof(r), sizeof(r));
        t->thread_names[r.tid] = std::string(r.name, strnlen(r.name, sizeof(r.name)));
      }
      return {};
    }
    case ChunkType::kDiagnostic: {
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::DiagnosticRecord r;
        std::memcpy(&r, p + i * sizeof(r), sizeof(r));
        DiagId id;
        if (r.id == uint32_t(trace::DiagnosticId::kTraceWriteFailed)) {
          t->write_failed_records += r.count;
          if (r.reserved != 0) t->write_failed_errno = static_cast<int>(r.reserved);
          continue;
        }
        if (r.id == uint32_t(trace::DiagnosticId::kTraceWriteFailedCalls)) {
          t->write_failed_calls += r.count;
          continue;
        }
        switch (static_cast<trace::DiagnosticId>(r.id)) {
#define STALLSCOPE_WIRE_DIAG_CASE(diag, wire, source, name, sev, desc) \
  case trace::DiagnosticId::diag:                                     \
    id = DiagId::diag;                                                \
    break;
          STALLSCOPE_RECORDER_DIAGNOSTICS(STALLSCOPE_WIRE_DIAG_CASE)
#undef STALLSCOPE_WIRE_DIAG_CASE
          default: id = DiagId::kUnknownRecorderDiagnostic; break;
        }
        AddDiagnostic(&t->diagnostics, id, r.count);
      }
      return {};
    }
    case ChunkType::kString: {
      for (uint32_t i = 0; i < h.count; ++i) {
        uint32_t id;
        std::string_view bytes;
        if (!entries.String(&id, &bytes)) return entries.error();
        t->strings[id] = std::string(bytes);
      }
      return {};
    }
    case ChunkType::kStack: {
      for (uint32_t i = 0; i < h.count; ++i) {
        uint32_t id;
        uint16_t kind, depth;
        const uint8_t* words;
        size_t nwords;
        if (!entries.Stack(&id, &kind, &depth, &words, &nwords)) return entries.error();
        auto offset = static_cast<uint32_t>(t->stack_words.size());
        size_t old = t->stack_words.size();
        t->stack_words.resize(old + nwords);
        if (nwords > 0) std::memcpy(t->stack_words.data() + old, words, nwords * 8);
        StackRef& ref = t->stacks[id];
        if (kind == static_cast<uint16_t>(trace::StackKind::kPython)) {
          ref.python_offset = offset;
          ref.python_depth = depth;
        } else if (kind == static_cast<uint16_t>(trace::StackKind::kNative)) {
          ref.native_offset = offset;
          ref.native_depth = depth;
        }
      }
      return {};
    }
    case ChunkType::kModule: {
      const uint32_t generation = t->module_maps++;
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::ModuleRecord r;
        std::string_view path, build_id;
        if (!entries.Module(&r, &path, &build_id)) return entries.error();
        t->modules.push_back(
            Module{r.base, r.low, r.high, std::string(path), std::string(build_id), generation});
      }
      return {};
    }
    case ChunkType::kApiTable: {
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::ApiTableEntry e;
        std::string_view name;
        if (!entries.Api(&e, &name)) return entries.error();
        if (e.api >= t->apis.size()) t->apis.resize(e.api + size_t{1});
        ApiInfo& api = t->apis[e.api];
        api.name.assign(name);
        api.category = static_cast<trace::ApiCategory>(e.category);
        api.flags = e.flags;
      }
      return {};
    }
    case ChunkType::kEnd:
      t->ended_cleanly = true;
      return {};
    case ChunkType::kNccl: {
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::NcclRecord r;
        std::memcpy(&r, p + i * sizeof(r), sizeof(r));
        NcclCall c;
        c.enter_ns = static_cast<int64_t>(r.enter);
        c.correlation = r.correlation;
        c.comm = r.comm;
        c.seq = r.seq;
        c.count = r.count;
        c.tid = r.tid;
        c.rank = r.rank;
        c.nranks = r.nranks;
        c.peer = r.peer;
        c.op = r.op;
        c.kind = static_cast<trace::NcclKind>(r.kind);
        c.datatype = r.datatype;
        c.flags = r.flags;
        c.group_depth = r.group_depth;
        t->nccl.push_back(c);
      }
      return {};
    }
    case ChunkType::kRank: {
      if (h.count < 1) return "record count exceeds payload";
      trace::RankRecord r;
      std::memcpy(&r, p, sizeof(r));
      t->rank.known = true;
      t->rank.rank = r.rank;
      t->rank.local_rank = r.local_rank;
      t->rank.world_size = r.world_size;
      t->rank.local_world_size = r.local_world_size;
      t->rank.source = static_cast<trace::RankSource>(r.source);
      t->rank.host = std::string(r.host, strnlen(r.host, sizeof(r.host)));
      return {};
    }
    case ChunkType::kDeviceTiming: {
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::DeviceTimingRecord r;
        std::memcpy(&r, p + i * sizeof r, sizeof r);
        t->device_timing.push_back({static_cast<int64_t>(r.ticks), r.on != 0, r.every});
      }
      return {};
    }
    case ChunkType::kCpu:
    case ChunkType::kCpuSched: {
      // kCpu is kCpuSched without the run-queue delay (older recorders).
      const size_t size = info->record_bytes;
      std::vector<CpuSample>& samples = t->cpu[h.tid];
      for (uint32_t i = 0; i < h.count; ++i) {
        trace::CpuSchedRecord r{0, 0, trace::kRunDelayUnknown};
        std::memcpy(&r, p + i * size, size);  // CpuRecord is its prefix
        // Times past int64 become negative and are clamped (and counted)
        // by FinalizeTimeline; an unknown or impossible delay is -1.
        const int64_t delay = r.run_delay_ns > uint64_t{INT64_MAX}
                                  ? -1
                                  : static_cast<int64_t>(r.run_delay_ns);
        samples.push_back(
            {static_cast<int64_t>(r.ticks), static_cast<int64_t>(r.cpu_ns), delay});
      }
      return {};
    }
  }
  AddDiagnostic(&t->diagnostics, DiagId::kUnknownChunk, 1);
  return {};
}

// Packed and compressed chunks (format 4): the payload as fixed records.
// An allocator that leaves new elements uninitialized: a payload buffer is
// resized and then written whole (a read, a decompression, an unpacking),
// so zeroing it first would only cost a pass over its bytes.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
// 8-byte aligned payload words.
using Words = std::vector<uint64_t, UninitAllocator<uint64_t>>;

struct Unpacked {
  Words inflated;  // a compressed payload, decompressed
  Words records;   // the records unpacked
  std::vector<trace::ApiShape> api_shapes = std::vector<trace::ApiShape>(trace::kPackShapes);
  std::vector<trace::DeviceShape> device_shapes = std::vector<trace::DeviceShape>(trace::kPackShapes);
};
// At most this much (decompressed payload, unpacked records) per chunk; the
// recorder writes chunks of about 64 KiB of records.
constexpr size_t kMaxUnpackedBytes = size_t{256} << 20;

// Points *p, *n at the payload of chunk `h` before compression: itself, or
// its zstd frame decompressed (in `u`); what is left is raw or packed
// records (Packed tells). An error text when it does not decode, or its
// encoding is unknown or impossible for its type.
std::string Inflate(const ChunkHeader& h, const uint8_t** p, size_t* n, Unpacked* u) {
  if (h.encoding == trace::kEncodingRaw) return {};
  if ((h.encoding & ~uint16_t{trace::kEncodingZstd | 0xff}) != 0) return absl::StrFormat("unknown encoding %#x", h.encoding);
  if ((h.encoding & trace::kEncodingZstd) != 0) {
    uint32_t sizes[2];  // bytes before compression, the frame's bytes
    if (*n < sizeof sizes) return "compressed payload without its sizes";
    std::memcpy(sizes, *p, sizeof sizes);
    if (sizes[0] > kMaxUnpackedBytes || sizes[0] % 8 != 0) return "impossible size before compression";
    if (sizes[1] > *n - sizeof sizes) return "compressed frame past the payload";
    u->inflated.resize(sizes[0] / 8);
    const size_t got = ZSTD_decompress(u->inflated.data(), sizes[0], *p + sizeof sizes, sizes[1]);
    if (ZSTD_isError(got) || got != sizes[0]) return "compressed frame does not decompress";
    *p = reinterpret_cast<const uint8_t*>(u->inflated.data());
    *n = sizes[0];
  }
  if ((h.encoding & 0xff) == trace::kEncodingRaw) return {};
  if ((h.encoding & 0xff) != trace::kEncodingPacked) return absl::StrFormat("unknown encoding %#x", h.encoding);
  const trace::ChunkTypeInfo* info = trace::FindChunkType(h.type);
  const auto type = static_cast<ChunkType>(h.type);
  if (info == nullptr || (type != ChunkType::kApi && type != ChunkType::kDevice && type != ChunkType::kCorrelation)) {
    return "packed, but not a packed type";
  }
  // Every packed record takes at least one byte.
  if (h.count > *n || uint64_t{h.count} * info->record_bytes > kMaxUnpackedBytes) {
    return "record count exceeds payload";
  }
  return {};
}

// Points *p, *n at the raw payload of chunk `h`: itself, or what its
// encoding decodes to (in `u`). An error text when it does not decode.
std::string Unpack(const ChunkHeader& h, const uint8_t** p, size_t* n, Unpacked* u) {
  if (std::string e = Inflate(h, p, n, u); !e.empty() || !Packed(h)) return e;
  const auto type = static_cast<ChunkType>(h.type);
  const trace::ChunkTypeInfo* info = trace::FindChunkType(h.type);
  u->records.resize((uint64_t{h.count} * info->record_bytes + 7) / 8);
  const char* error = nullptr;
  switch (type) {
    case ChunkType::kApi:
      error = trace::UnpackApi(*p, *n, h.count, reinterpret_cast<trace::ApiRecord*>(u->records.data()),
                               u->api_shapes.data());
      break;
    case ChunkType::kDevice:
      error = trace::UnpackDevice(*p, *n, h.count, reinterpret_cast<trace::DeviceRecord*>(u->records.data()),
                                  u->device_shapes.data());
      break;
    default:
      error = trace::UnpackCorrelation(*p, *n, h.count,
                                       reinterpret_cast<trace::CorrelationRecord*>(u->records.data()));
      break;
  }
  if (error != nullptr) return error;
  *p = reinterpret_cast<const uint8_t*>(u->records.data());
  *n = uint64_t{h.count} * info->record_bytes;
  return {};
}

// ParseChunk for an inflated packed payload (Inflate checked its type and
// count): each record goes from the unpacker to the timeline, not through
// an array of raw records. Records before a fault are left appended, so a
// caller that goes on after an error must not use this.
std::string ParsePacked(const ChunkHeader& h, const uint8_t* p, size_t n, Unpacked* u, Timeline* t) {
  Appender append{t, h.tid, t->calls.size()};
  std::string error = EachRecord(h, p, n, u->api_shapes.data(), u->device_shapes.data(), append);
  if (error.empty() && append.bad_devices > 0) AddDiagnostic(&t->diagnostics, DiagId::kInvalidRecords, append.bad_devices);
  return error;
}

// A chunk header's own checks, before its payload is read: its magic and a
// possible size (kBad), and whether the chunk fits in the file (kShort).
enum class HeaderCheck { kOk, kBad, kShort };
HeaderCheck CheckHeader(const ChunkHeader& ch, uint64_t at, uint64_t size) {
  if (ch.magic != trace::kChunkMagic || ch.payload_bytes % 8 != 0 ||
      ch.payload_bytes > kMaxChunkPayload) {
    return HeaderCheck::kBad;
  }
  return ch.payload_bytes > size - at - sizeof(ch) ? HeaderCheck::kShort : HeaderCheck::kOk;
}

// The file header, checked: a stallscope trace of a format this reader
// reads.
absl::StatusOr<FileHeader> ReadFileHeader(const ReadAt& read, uint64_t size,
                                          const std::string& name) {
  FileHeader fh;
  if (size < sizeof(fh) || !read(0, sizeof(fh), &fh)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not a stallscope trace (%d bytes, shorter than the %d-byte header)", name,
        size, sizeof(fh)));
  }
  if (std::memcmp(fh.magic, trace::kMagic, sizeof(fh.magic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a stallscope trace (bad magic at byte offset 0)", name));
  }
  // A newer writer says which readers can still read its files: only an
  // `oldest_reader` above ours refuses the file (docs/trace-format.md).
  if (fh.oldest_reader > trace::kVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: written by a newer stallscope (format %d, readable from format %d); this reader "
        "reads up to %d",
        name, fh.version, fh.oldest_reader, trace::kVersion));
  }
  if (fh.version < trace::kOldestSupported) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: trace format %d is older than the oldest this reader supports (%d)", name,
        fh.version, trace::kOldestSupported));
  }
  if (fh.header_bytes < sizeof(fh) || fh.header_bytes > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad header size %d at byte offset 12", name, fh.header_bytes));
  }
  return fh;
}

// What a ScanMagics visitor makes of a chunk magic it was shown.
enum class AtMagic { kNext, kFound, kGiveUp };

// Shows `visit` the offset of every chunk magic in the file from `from` on,
// in order, reading it by blocks (a magic across two blocks included),
// until `visit` answers kFound (that offset is returned) or kGiveUp; `size`
// when it never did, or a read failed.
template <typename Visit>
uint64_t ScanMagics(const ReadAt& read, uint64_t size, uint64_t from, Visit&& visit) {
  constexpr size_t kBlock = 64 * 1024;
  std::vector<unsigned char> block(kBlock);
  const uint32_t magic = trace::kChunkMagic;
  for (uint64_t pos = from; pos < size && size - pos >= sizeof(magic);) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, size - pos));
    if (!read(pos, n, block.data())) return size;
    for (size_t i = 0; i + sizeof(magic) <= n; ++i) {
      if (std::memcmp(block.data() + i, &magic, sizeof(magic)) != 0) continue;
      switch (visit(pos + i)) {
        case AtMagic::kNext:
          break;
        case AtMagic::kFound:
          return pos + i;
        case AtMagic::kGiveUp:
          return size;
      }
    }
    if (n < kBlock) break;
    pos += n - (sizeof(magic) - 1);  // a magic across the block boundary
  }
  return size;
}

// A chunk at `at`: verified (its payload in `buffer`), cut short by the end
// of the file, or failing a check.
enum class Load { kOk, kShort, kBad, kBadChecksum, kReadError };
Load LoadChunk(const ReadAt& read, uint64_t size, uint16_t version, uint64_t at, ChunkHeader* ch,
               Words* buffer) {
  if (size - at < sizeof(*ch)) return Load::kShort;
  if (!read(at, sizeof(*ch), ch)) return Load::kReadError;
  switch (CheckHeader(*ch, at, size)) {
    case HeaderCheck::kBad: return Load::kBad;
    case HeaderCheck::kShort: return Load::kShort;
    case HeaderCheck::kOk: break;
  }
  buffer->resize(ch->payload_bytes / 8);
  if (ch->payload_bytes > 0 && !read(at + sizeof(*ch), ch->payload_bytes, buffer->data())) {
    return Load::kReadError;
  }
  if (trace::ChunkChecksum(version, buffer->data(), ch->payload_bytes) != ch->checksum) {
    return Load::kBadChecksum;
  }
  return Load::kOk;
}

// How many calls, ops and correlations some chunks hold.
struct RecordCounts {
  uint64_t calls = 0, ops = 0, correlations = 0;
  void Add(uint16_t type, uint64_t n) {
    switch (static_cast<ChunkType>(type)) {
      case ChunkType::kApi: calls += n; break;
      case ChunkType::kDevice: ops += n; break;
      case ChunkType::kCorrelation: correlations += n; break;
      default: break;
    }
  }
};

// Sizes `t`'s record vectors and id maps once for `n` records, so no
// vector grows by copying. Compressed chunks may claim more than the file
// could hold: what is reserved stays under 64 times the file's size
// (`file_size`), or 1 GiB.
// `populate`: map the records' pages now (a whole reading's fresh memory;
// a slice mostly reuses the memory the slice before freed, whose pages are
// mapped already and would only be walked again).
void SizeForRecords(RecordCounts n, uint64_t file_size, bool populate, Timeline* t) {
  const uint64_t budget = std::max<uint64_t>(uint64_t{1} << 30, 64 * file_size);
  n.calls = std::min<uint64_t>(n.calls, budget / (sizeof(ApiCall) + sizeof(CallInfo)));
  n.ops = std::min<uint64_t>(n.ops, budget / (sizeof(DeviceOp) + sizeof(OpInfo)));
  n.correlations = std::min<uint64_t>(n.correlations, budget / 16);
  t->calls.reserve(n.calls);
  t->call_info.reserve(n.calls);
  t->ops.reserve(n.ops);
  t->op_info.reserve(n.ops);
  // Mapped now in one call each: the first write to every page would
  // otherwise take a fault (most of the reading time on large traces).
  if (populate) {
    PopulateCapacity(&t->calls);
    PopulateCapacity(&t->call_info);
    PopulateCapacity(&t->ops);
    PopulateCapacity(&t->op_info);
  }
  // The id maps' flat vectors then reach over the records' ids.
  t->correlations.Expect(n.correlations);
  t->by_external.Expect(n.calls);
}

// A timeline holding the file header's fields, no records yet.
absl::StatusOr<Timeline> StartTimeline(const ReadAt& read, uint64_t size, const std::string& name) {
  Timeline t;
  t.path = name;
  t.file_size = size;
  auto header = ReadFileHeader(read, size, name);
  if (!header.ok()) return header.status();
  t.header = *header;
  t.host = std::string(header->host, strnlen(header->host, sizeof(header->host)));
  t.ticks_are_ns = (header->flags & trace::kFileTicksAreNs) != 0;
  return t;
}

// Damaged regions a reading skipped (the reader resumes after each).
struct Damage {
  uint64_t chunks = 0;
  uint64_t lost_bytes = 0;
  uint64_t first_offset = 0;
  std::string first_reason;
};

// What a reading adds once the last chunk is read, in its order: records
// the recorder could not write, the likely cause of CUPTI's missing
// records, damage skipped, and a truncated or unended file.
void AddEndOfReadingDiagnostics(Timeline* tl, uint64_t size, const Damage& damage, bool truncated) {
  Timeline& t = *tl;
  // Nothing read past the header (a truncation's message says how much).
  if (t.bytes_used == 0) t.bytes_used = std::min<uint64_t>(t.header.header_bytes, size);
  if (t.write_failed_records > 0) {
    AddDiagnostic(&t.diagnostics, DiagId::kTraceWriteFailed, t.write_failed_records,
                  absl::StrFormat("%d records (%d of them API calls) could not be written to the "
                                  "trace (%s); the records written before and after are kept",
                                  t.write_failed_records, t.write_failed_calls,
                                  t.write_failed_errno > 0 && t.write_failed_errno < 4096
                                      ? strerror(t.write_failed_errno)
                                      : "write error"));
  }
  // CUPTI drops records when the recorder has no buffer to give it (its
  // budget, STALLSCOPE_BUFFER_MB): then submissions without device records,
  // or without acknowledgements, need no other profiler to explain them.
  uint64_t cupti_dropped = 0;
  for (const Diagnostic& d : t.diagnostics) {
    if (d.id == DiagId::kCuptiDropped) cupti_dropped += d.count;
  }
  if (cupti_dropped > 0) {
    for (Diagnostic& d : t.diagnostics) {
      if (d.id != DiagId::kCuptiRecordsStopped && d.id != DiagId::kNoDeviceRecordsAtExit) continue;
      d.message = absl::StrFormat(
          "%d submissions %s; CUPTI dropped %d activity records, which the recorder's "
          "buffers had no room for (a larger STALLSCOPE_BUFFER_MB keeps them): the likely cause",
          d.count,
          d.id == DiagId::kCuptiRecordsStopped ? "went unacknowledged by CUPTI"
                                               : "had no device record when the process exited",
          cupti_dropped);
    }
  }
  if (damage.chunks > 0) {
    AddDiagnostic(&t.diagnostics, DiagId::kCorruptChunks, damage.chunks,
                  absl::StrFormat("%d damaged region(s) skipped, %d of %d bytes lost; the first "
                                  "at byte offset %d (%s)",
                                  damage.chunks, damage.lost_bytes, size, damage.first_offset,
                                  damage.first_reason));
  }
  if (truncated) {
    AddDiagnostic(&t.diagnostics, DiagId::kTruncatedTrace, 1,
                  absl::StrFormat("truncated trace: read %d of %d bytes", t.bytes_used, size));
  } else if (!t.ended_cleanly) {
    AddDiagnostic(&t.diagnostics, DiagId::kNoEndChunk, 1);
  }
}

// Reads the whole file, resuming after damage.
absl::StatusOr<Timeline> Read(const ReadAt& read, uint64_t size, const std::string& name,
                              const ReadProgress& progress = nullptr) {
  auto started = StartTimeline(read, size, name);
  if (!started.ok()) return started.status();
  Timeline t = *std::move(started);
  const FileHeader fh = t.header;

  // A pass over the chunk headers sizes the record vectors once (counts
  // capped by what each payload can hold), so no vector grows by copying.
  {
    RecordCounts counts;
    for (uint64_t off = fh.header_bytes; off < size && size - off >= sizeof(ChunkHeader);) {
      ChunkHeader ch;
      // Counts come only from chunks that fit in the file, so what is
      // reserved is bounded by the file's size (a header may claim 1 GiB).
      if (!read(off, sizeof(ch), &ch) || CheckHeader(ch, off, size) != HeaderCheck::kOk) break;
      const uint64_t n = ch.count;
      const trace::ChunkTypeInfo* info = trace::FindChunkType(ch.type);
      // A packed record takes a byte or more. A compressed payload says how
      // large it was before (its first u32; bounded below in all, as a
      // hostile file may claim 256 MiB a chunk).
      uint64_t bytes = ch.payload_bytes;
      const uint16_t encoding = fh.version >= 4 ? ch.encoding : uint16_t(trace::kEncodingRaw);
      if ((encoding & trace::kEncodingZstd) != 0) {
        uint32_t before = 0;
        if (ch.payload_bytes >= 8 && read(off + sizeof(ch), sizeof before, &before)) {
          bytes = std::min<uint64_t>(before, kMaxUnpackedBytes);
        }
      }
      const uint64_t room = (encoding & 0xff) == trace::kEncodingPacked          ? bytes
                            : info != nullptr && info->record_bytes > 0 ? bytes / info->record_bytes
                                                                        : 0;
      counts.Add(ch.type, info != nullptr && info->record_bytes > 0 ? std::min<uint64_t>(n, room) : 0);
      off += sizeof(ch) + ch.payload_bytes;
    }
    SizeForRecords(counts, size, /*populate=*/true, &t);
  }

  Words buffer;  // 8-byte aligned payload buffer, reused
  auto load = [&](uint64_t at, ChunkHeader* ch) {
    return LoadChunk(read, size, fh.version, at, ch, &buffer);
  };
  // The first offset at or after `from` where a chunk verifies (its magic,
  // size and checksum); `size` when none does. Verifying candidates reads
  // at most twice the file plus 64 MiB (a hostile file of magics claiming
  // large payloads costs no more).
  uint64_t verify_budget = 2 * size + (uint64_t{64} << 20);
  auto resync = [&](uint64_t from) -> uint64_t {
    return ScanMagics(read, size, from, [&](uint64_t at) {
      ChunkHeader ch;
      if (size - at < sizeof(ch) || !read(at, sizeof(ch), &ch)) return AtMagic::kGiveUp;
      if (CheckHeader(ch, at, size) != HeaderCheck::kOk) return AtMagic::kNext;  // its payload is not read
      if (ch.payload_bytes > verify_budget) return AtMagic::kGiveUp;
      verify_budget -= ch.payload_bytes;
      return load(at, &ch) == Load::kOk ? AtMagic::kFound : AtMagic::kNext;
    });
  };

  Unpacked unpacked;
  uint64_t off = fh.header_bytes;
  bool truncated = off > size;
  Damage damage;
  constexpr uint64_t kProgressBytes = uint64_t{32} << 20;
  uint64_t reported = 0;
  while (!truncated && off < size) {
    ChunkHeader ch;
    const Load l = load(off, &ch);
    if (l == Load::kReadError) {
      return absl::DataLossError(absl::StrFormat("%s: read error at byte offset %d", name, off));
    }
    std::string reason;
    if (l == Load::kOk) {
      const uint8_t* payload = reinterpret_cast<const uint8_t*>(buffer.data());
      size_t payload_bytes = ch.payload_bytes;
      if (fh.version < 4) ch.encoding = trace::kEncodingRaw;  // the field was reserved, written 0
      reason = Unpack(ch, &payload, &payload_bytes, &unpacked);
      if (reason.empty()) reason = ParseChunk(ch, payload, payload_bytes, &t);
      if (reason.empty()) {
        off += sizeof(ch) + ch.payload_bytes;
        t.bytes_used = off;
        if (progress && off - reported >= kProgressBytes) {
          progress(off, size);
          reported = off;
        }
        continue;
      }
      reason = absl::StrFormat("malformed %s chunk: %s", ChunkTypeName(ch.type), reason);
    } else if (l == Load::kBadChecksum) {
      reason = absl::StrFormat("checksum mismatch in %s chunk", ChunkTypeName(ch.type));
    } else if (l == Load::kBad) {
      reason = ch.magic != trace::kChunkMagic
                   ? std::string("bad chunk magic")
                   : absl::StrFormat("impossible chunk size %d", ch.payload_bytes);
    } else {
      reason = "chunk past the end of the file";
    }
    // Resume at the next chunk that verifies. With none after it, a chunk
    // cut short by the end of the file, or failing its checksum as the last
    // one, is a torn tail (the writer stopped mid-chunk): a truncation.
    const uint64_t next = resync(off + 1);
    if (next >= size) {
      const bool torn_tail =
          l == Load::kShort ||
          (l == Load::kBadChecksum && off + sizeof(ch) + ch.payload_bytes == size);
      if (torn_tail) {
        truncated = true;
        break;
      }
    }
    if (damage.chunks++ == 0) {
      damage.first_offset = off;
      damage.first_reason = reason;
    }
    damage.lost_bytes += next - off;
    off = next;
  }
  if (progress) progress(off, size);
  AddEndOfReadingDiagnostics(&t, size, damage, truncated);
  FinalizeTimeline(&t);
  return t;
}

// The record chunks a slice of the timeline chooses among (SliceChunks);
// the others (tables, clocks, threads, diagnostics ...) are always read.
bool IsSliced(uint16_t type) {
  const trace::ChunkTypeInfo* info = trace::FindChunkType(type);
  return info != nullptr && info->reading == trace::ChunkReading::kSliced;
}

// Whether a chunk's records carry ticks (the others: device ops' ns, ids).
bool InTicks(uint16_t type) {
  const trace::ChunkTypeInfo* info = trace::FindChunkType(type);
  return info != nullptr && info->clock == trace::ChunkClock::kTicks;
}

// The span of a verified chunk's records (ChunkSpan::lo, hi), from its raw
// payload, for the chunks of fixed records whose first field is their time
// (calls, device ops and correlations: RecordScan).
void SpanOf(ChunkType type, const uint8_t* p, size_t n, uint32_t count, ChunkSpan* c) {
  const trace::ChunkTypeInfo* info = trace::FindChunkType(static_cast<uint16_t>(type));
  if (info == nullptr || info->record_bytes == 0 || count == 0) return;
  // Records with a time; threads, diagnostics and ranks have none.
  if (info->clock == trace::ChunkClock::kNoTime) return;
  const size_t records = std::min<size_t>(count, n / info->record_bytes);
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (size_t i = 0; i < records; ++i) {
    uint64_t a;
    std::memcpy(&a, p + i * info->record_bytes, sizeof a);
    lo = std::min(lo, a);
    hi = std::max(hi, a);
  }
  if (records == 0) return;
  c->lo = lo;
  c->hi = hi;
}

// What FinalizeTimeline fixes in a whole reading (kInvalidRecords), counted
// from the raw records: a time in ns outside [0, kMaxTimeNs] (each end), and
// an end before its start once both are in range. Times in ticks are
// converted into that range, so there only a call ending before it entered
// can be fixed; the conversion rises with the ticks, so only a call whose
// exit ticks are below its enter ticks can, and those are kept to be
// converted once the clocks are all read.
struct InvalidCounter {
  bool ticks_are_ns = false;
  uint64_t count = 0;
  std::vector<std::pair<uint64_t, uint64_t>> inverted_calls;  // enter and exit ticks

  static int64_t Clamped(uint64_t raw, uint64_t* count) {
    auto v = static_cast<int64_t>(raw);
    ClampTime(&v, count);
    return v;
  }
  void Span(uint64_t start, uint64_t end) {
    const int64_t a = Clamped(start, &count);
    count += Clamped(end, &count) < a;
  }
  void Time(uint64_t ticks) {
    if (ticks_are_ns) Clamped(ticks, &count);
  }
  void Call(uint64_t enter, uint64_t exit) {
    if (ticks_are_ns) {
      Span(enter, exit);
    } else if (exit < enter) {
      inverted_calls.push_back({enter, exit});
    }
  }
  void Op(uint64_t start, uint64_t end) { Span(start, end); }
  // The records of a chunk other than calls and device ops (Call, Op).
  void Add(ChunkType type, const uint8_t* p, size_t n, uint32_t records_in) {
    const trace::ChunkTypeInfo* info = trace::FindChunkType(static_cast<uint16_t>(type));
    if (info == nullptr || info->record_bytes == 0) return;
    const size_t records = std::min<size_t>(records_in, n / info->record_bytes);
    auto u64 = [&](size_t i, size_t field) {
      uint64_t v;
      std::memcpy(&v, p + i * info->record_bytes + field, sizeof v);
      return v;
    };
    for (size_t i = 0; i < records; ++i) {
      switch (type) {
        case ChunkType::kNvtx: Time(u64(i, offsetof(trace::NvtxRecord, ticks))); break;
        case ChunkType::kNccl: Time(u64(i, offsetof(trace::NcclRecord, enter))); break;
        case ChunkType::kDeviceTiming: Time(u64(i, offsetof(trace::DeviceTimingRecord, ticks))); break;
        case ChunkType::kCpu:
        case ChunkType::kCpuSched:
          Time(u64(i, offsetof(trace::CpuRecord, ticks)));
          Clamped(u64(i, offsetof(trace::CpuRecord, cpu_ns)), &count);
          break;
        default:
          break;
      }
    }
  }
  // The inverted calls, converted.
  void Finish(const TickConverter& conv) {
    for (const auto& [enter, exit] : inverted_calls) count += conv.ToNs(exit) < conv.ToNs(enter);
  }
};

// What the index takes from the records of a call, device or correlation
// chunk, one record at a time (EachRecord, straight from the unpacker for a
// packed one): the chunk's span and ids (ChunkSpan); calls by thread and
// API, and ops by device (ids past kMaxDevice clamped to it, as the reader
// clamps them, and counted in `bad_devices`); the times a reading fixes; and
// a correlation chunk's external ids by the thread that gave them (the
// recorder's ids are the thread's index above bit 40 and its count below:
// one range per thread, so that ids of two threads far apart do not make
// one range holding every id between them), appended to `ranges`.
struct RecordScan {
  uint32_t tid = 0;
  absl::flat_hash_map<std::pair<uint32_t, uint16_t>, int64_t>* calls = nullptr;
  std::vector<DeviceOpCount>* ops = nullptr;
  InvalidCounter* invalid = nullptr;
  std::vector<std::pair<uint64_t, uint64_t>>* ranges = nullptr;
  size_t ranges_first = 0;  // this chunk's first range
  uint64_t lo = ~uint64_t{0}, hi = 0;
  uint64_t id_lo = ~uint64_t{0}, id_hi = 0;
  uint64_t records = 0;
  uint64_t bad_devices = 0;
  // The chunk's calls by API (one thread's), added to `calls` by Finish: a
  // hash lookup a chunk and API, not a call. Its entries are zero between
  // chunks.
  std::vector<int64_t>* by_api = nullptr;

  void Span(uint64_t a, uint64_t b) {
    lo = std::min(lo, a);
    hi = std::max({hi, a, b});
    ++records;
  }
  void Id(uint64_t id) {
    id_lo = std::min(id_lo, id);
    id_hi = std::max(id_hi, id);
  }
  [[gnu::always_inline]] void operator()(const trace::ApiRecord& r) {  // enter and exit; the external id
    Span(r.enter, r.exit);
    if (r.correlation != 0) Id(r.correlation);
    if (r.api >= by_api->size()) by_api->resize(r.api + size_t{1});
    ++(*by_api)[r.api];
    invalid->Call(r.enter, r.exit);
  }
  [[gnu::always_inline]] void operator()(const trace::DeviceRecord& r) {  // start and end; the CUPTI id
    Span(r.start_ns, r.end_ns);
    Id(r.correlation);
    bad_devices += r.device > kMaxDevice;
    const uint32_t device = std::min(r.device, kMaxDevice);
    auto it = std::find_if(ops->begin(), ops->end(), [&](const DeviceOpCount& d) { return d.device == device; });
    if (it == ops->end()) it = ops->insert(ops->end(), DeviceOpCount{device, 0, 0});
    ++it->ops;
    it->nccl += r.kind == static_cast<uint8_t>(trace::DeviceOpKind::kNccl);
    invalid->Op(r.start_ns, r.end_ns);
  }
  [[gnu::always_inline]] void operator()(const trace::CorrelationRecord& r) {  // the CUPTI id; the external id
    Span(r.correlation, r.correlation);
    Id(r.external);
    const uint64_t ext = r.external;
    auto it = std::find_if(ranges->begin() + static_cast<std::ptrdiff_t>(ranges_first), ranges->end(),
                           [ext](const auto& x) { return (x.first >> 40) == (ext >> 40); });
    if (it == ranges->end()) {
      ranges->push_back({ext, ext});
    } else {
      it->first = std::min(it->first, ext);
      it->second = std::max(it->second, ext);
    }
  }
  void Finish(ChunkSpan* c) {
    for (size_t api = 0; api < by_api->size(); ++api) {
      int64_t& n = (*by_api)[api];
      if (n == 0) continue;
      (*calls)[{tid, static_cast<uint16_t>(api)}] += n;
      n = 0;
    }
    if (records == 0) return;
    c->lo = lo;
    c->hi = hi;
    c->id_lo = id_lo;
    c->id_hi = id_hi;
  }
};

// A CPU-time chunk's samples without a run-queue delay (a kCpu chunk's
// all; a kCpuSched sample's when unknown), as the reader finds them.
uint64_t SamplesWithoutDelay(ChunkType type, const uint8_t* p, size_t n, uint32_t count) {
  if (type == ChunkType::kCpu) return std::min<size_t>(count, n / sizeof(trace::CpuRecord));
  if (type != ChunkType::kCpuSched) return 0;
  uint64_t without = 0;
  const size_t records = std::min<size_t>(count, n / sizeof(trace::CpuSchedRecord));
  for (size_t i = 0; i < records; ++i) {
    uint64_t delay;
    std::memcpy(&delay, p + i * sizeof(trace::CpuSchedRecord) + offsetof(trace::CpuSchedRecord, run_delay_ns),
                sizeof delay);
    without += delay > uint64_t{INT64_MAX};
  }
  return without;
}

// Whether a chunk magic appears anywhere in the file from `from` on.
bool MagicAfter(const ReadAt& read, uint64_t size, uint64_t from) {
  return ScanMagics(read, size, from, [](uint64_t) { return AtMagic::kFound; }) < size;
}

absl::StatusOr<TraceIndex> Index(const ReadAt& read, uint64_t size, const std::string& name) {
  auto header = ReadFileHeader(read, size, name);
  if (!header.ok()) return header.status();
  TraceIndex index;
  index.header = *header;
  index.file_size = size;
  Words buffer;
  Unpacked unpacked;
  std::vector<trace::ClockRecord> clocks;
  Timeline tables;  // the small chunks, parsed to check them
  tables.header = index.header;
  InvalidCounter invalid;
  invalid.ticks_are_ns = (index.header.flags & trace::kFileTicksAreNs) != 0;
  uint64_t correlations = 0;
  absl::flat_hash_map<std::pair<uint32_t, uint16_t>, int64_t> calls_by_api;
  std::vector<int64_t> by_api;  // RecordScan::by_api
  for (uint64_t off = index.header.header_bytes; off < size;) {
    ChunkHeader ch;
    const Load l = LoadChunk(read, size, index.header.version, off, &ch, &buffer);
    if (l == Load::kReadError) {
      return absl::DataLossError(absl::StrFormat("%s: read error at byte offset %d", name, off));
    }
    // A chunk cut short by the end of the file (or failing its checksum as
    // the last one) is a torn tail: what precedes it is the trace. Unless a
    // chunk's magic follows it: then its size was damaged, and the reader
    // would go on at that chunk.
    if (l == Load::kShort ||
        (l == Load::kBadChecksum && off + sizeof(ch) + ch.payload_bytes == size)) {
      if (!MagicAfter(read, size, off + 1)) {
        index.truncated = true;
        break;
      }
    }
    std::string reason = l == Load::kOk ? "" : "a chunk that does not verify";
    const uint8_t* payload = reinterpret_cast<const uint8_t*>(buffer.data());
    size_t payload_bytes = ch.payload_bytes;
    if (index.header.version < 4) ch.encoding = trace::kEncodingRaw;
    if (reason.empty()) reason = Inflate(ch, &payload, &payload_bytes, &unpacked);
    const auto type = static_cast<ChunkType>(ch.type);
    // A call, device or correlation chunk's records, scanned as they are
    // unpacked.
    const bool scanned = type == ChunkType::kApi || type == ChunkType::kDevice || type == ChunkType::kCorrelation;
    // The small chunks (tables, clocks, threads ...), which every slice
    // reads, are parsed here too: one the reader rejects is refused now,
    // not by every slice.
    if (reason.empty() && !IsSliced(ch.type)) reason = ParseChunk(ch, payload, payload_bytes, &tables);
    // A record chunk is parsed by the slices that read it; a count its
    // payload cannot hold, which the reader skips as damage, is refused now
    // (a packed one's: by Inflate, or as it is scanned).
    if (reason.empty() && IsSliced(ch.type) && !(scanned && Packed(ch))) reason = CheckRecordCount(ch, payload_bytes);
    RecordScan scan;
    if (reason.empty() && scanned) {
      scan.tid = ch.tid;
      scan.calls = &calls_by_api;
      scan.by_api = &by_api;
      scan.ops = &index.ops_per_device;
      scan.invalid = &invalid;
      scan.ranges = &index.external_ranges;
      scan.ranges_first = index.external_ranges.size();
      reason = EachRecord(ch, payload, payload_bytes, unpacked.api_shapes.data(), unpacked.device_shapes.data(), scan);
    }
    if (!reason.empty()) {
      // The reader skips damaged chunks; an index of their neighbours would
      // not say what was lost, so it is refused.
      return absl::DataLossError(absl::StrFormat(
          "%s: damaged chunk at byte offset %d (%s): index a whole trace, or read it with `report`",
          name, off, reason));
    }
    ChunkSpan c;
    c.offset = off;
    c.payload_bytes = ch.payload_bytes;
    c.count = ch.count;
    c.tid = ch.tid;
    c.type = ch.type;
    c.encoding = ch.encoding;
    if (scanned) {
      scan.Finish(&c);
      // What the reader would say of the chunk, in its place among the
      // chunks' diagnostics.
      if (scan.bad_devices > 0) AddDiagnostic(&tables.diagnostics, DiagId::kInvalidRecords, scan.bad_devices);
    } else {
      SpanOf(type, payload, payload_bytes, ch.count, &c);
      invalid.Add(type, payload, payload_bytes, ch.count);
    }
    if (type == ChunkType::kCpu || type == ChunkType::kCpuSched) {
      index.cpu_samples = true;
      index.cpu_samples_without_delay += SamplesWithoutDelay(type, payload, payload_bytes, ch.count);
    }
    correlations += type == ChunkType::kCorrelation ? ch.count : 0;
    tables.bytes_used = off + sizeof(ch) + ch.payload_bytes;
    if (type == ChunkType::kCorrelation) {
      c.ranges_at = static_cast<uint32_t>(scan.ranges_first);
      c.ranges = static_cast<uint32_t>(index.external_ranges.size() - scan.ranges_first);
    }
    index.chunks.push_back(c);
    if (ch.type == static_cast<uint16_t>(ChunkType::kClock)) {
      const size_t n = std::min<size_t>(ch.count, payload_bytes / sizeof(trace::ClockRecord));
      const size_t old = clocks.size();
      clocks.resize(old + n);
      if (n > 0) std::memcpy(clocks.data() + old, payload, n * sizeof(trace::ClockRecord));
    }
    off += sizeof(ch) + ch.payload_bytes;
  }
  // Each thread's calls and launches (the API table read by now).
  for (const auto& [key, n] : calls_by_api) {
    const auto [tid, api] = key;
    auto it = std::find_if(index.calls_per_thread.begin(), index.calls_per_thread.end(),
                           [tid](const ThreadCallCount& c) { return c.tid == tid; });
    if (it == index.calls_per_thread.end()) it = index.calls_per_thread.insert(index.calls_per_thread.end(), {tid, 0, 0});
    it->calls += n;
    if (tables.Api(api).category == trace::ApiCategory::kLaunch) it->launches += n;
  }
  std::sort(index.calls_per_thread.begin(), index.calls_per_thread.end(),
            [](const ThreadCallCount& a, const ThreadCallCount& b) { return a.tid < b.tid; });
  // The whole reading's diagnostics after its chunks', in its order.
  AddEndOfReadingDiagnostics(&tables, size, Damage{}, index.truncated);
  // Spans in ticks to ns, by the file's clock pairs as the reader converts
  // (and with its clock diagnostics). The conversion rises with the ticks,
  // so a span's ends stay its ends.
  if (!invalid.ticks_are_ns) {
    const TickConverter conv(std::move(clocks), &tables.diagnostics);
    for (ChunkSpan& c : index.chunks) {
      if (!InTicks(c.type) || c.count == 0 || c.lo > c.hi) continue;
      const int64_t a = conv.ToNs(c.lo), b = conv.ToNs(c.hi);
      c.lo = static_cast<uint64_t>(std::max<int64_t>(0, std::min(a, b)));
      c.hi = static_cast<uint64_t>(std::max<int64_t>(0, std::max(a, b)));
    }
    invalid.Finish(conv);
  }
  if (invalid.count > 0) AddDiagnostic(&tables.diagnostics, DiagId::kInvalidRecords, invalid.count);
  uint64_t ops = 0;
  for (const DeviceOpCount& d : index.ops_per_device) ops += d.ops;
  if (correlations == 0 && ops > 0) AddDiagnostic(&tables.diagnostics, DiagId::kCorrelationFallback, 1);
  index.diagnostics = std::move(tables.diagnostics);
  // Times past kMaxTimeNs are clamped to it, as the reader clamps them.
  for (ChunkSpan& c : index.chunks) {
    if (c.type == static_cast<uint16_t>(ChunkType::kCorrelation)) continue;
    c.lo = std::min<uint64_t>(c.lo, kMaxTimeNs);
    c.hi = std::min<uint64_t>(c.hi, kMaxTimeNs);
  }
  return index;
}

// `path` opened for reading, when it is a regular file; its size in *size.
absl::StatusOr<int> OpenRegular(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
  // below); reads of a regular file ignore the flag.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrFormat("%s: %s", path, strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a regular file", path));
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

ReadAt FileReader(int fd) {
  return [fd](uint64_t offset, size_t n, void* dst) {
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = pread(fd, out, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      out += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return true;
  };
}

// Calls fn(read, size) with a reader of `path` (a regular file).
template <typename T, typename Fn>
absl::StatusOr<T> WithFile(const std::string& path, Fn fn) {
  uint64_t size = 0;
  absl::StatusOr<int> fd = OpenRegular(path, &size);
  if (!fd.ok()) return fd.status();
  absl::StatusOr<T> result = fn(FileReader(*fd), size);
  close(*fd);
  return result;
}

ReadAt BytesReader(std::string_view bytes) {
  return [bytes](uint64_t offset, size_t n, void* dst) {
    if (offset > bytes.size() || n > bytes.size() - offset) return false;
    std::memcpy(dst, bytes.data() + offset, n);
    return true;
  };
}

}  // namespace

absl::StatusOr<Timeline> ReadTraceBytes(std::string_view bytes, const std::string& name) {
  return Read(BytesReader(bytes), bytes.size(), name);
}

absl::StatusOr<Timeline> ReadTraceFile(const std::string& path, const ReadProgress& progress) {
  return WithFile<Timeline>(path, [&](const ReadAt& read, uint64_t size) {
    return Read(read, size, path, progress);
  });
}

// What a SliceReader keeps: the file, the timeline of the chunks every
// slice reads (parsed once), and the record chunks the last slice decoded.
struct SliceReader::State {
  int fd = -1;  // -1 when reading bytes
  ReadAt read;
  uint64_t size = 0;
  const TraceIndex* index = nullptr;
  bool file_has_correlations = false;
  Timeline base;
  // A record chunk loaded and verified: its header and its records, raw or
  // packed (decompressed), parsed by Parse.
  struct Decoded {
    ChunkHeader ch{};
    Words words;
    size_t bytes = 0;
  };
  absl::flat_hash_map<size_t, Decoded> kept, next;  // by index into index->chunks
  Unpacked unpacked;
  uint64_t decoded = 0, reused = 0;

  ~State() {
    if (fd >= 0) close(fd);
  }

  // Loads, verifies and decodes chunk `k` into `d`; an error text, or empty.
  std::string Decode(size_t k, Decoded* d) {
    const uint64_t at = index->chunks[k].offset;
    if (at >= size || LoadChunk(read, size, base.header.version, at, &d->ch, &d->words) != Load::kOk) {
      return "a chunk that does not verify";
    }
    if (base.header.version < 4) d->ch.encoding = trace::kEncodingRaw;
    const uint8_t* payload = reinterpret_cast<const uint8_t*>(d->words.data());
    size_t n = d->ch.payload_bytes;
    if (std::string reason = Inflate(d->ch, &payload, &n, &unpacked); !reason.empty()) return reason;
    // Decompressed into `unpacked`: its buffer is taken, not copied, and
    // this chunk's payload buffer left there to be written next time.
    if (payload == reinterpret_cast<const uint8_t*>(unpacked.inflated.data())) {
      d->words.swap(unpacked.inflated);
    }
    d->bytes = n;
    return {};
  }

  // Adds the records of `d` to `t`: packed ones straight from the unpacker
  // (a slice that fails is dropped whole).
  std::string Parse(const Decoded& d, Timeline* t) {
    const auto* p = reinterpret_cast<const uint8_t*>(d.words.data());
    return Packed(d.ch) ? ParsePacked(d.ch, p, d.bytes, &unpacked, t) : ParseChunk(d.ch, p, d.bytes, t);
  }
};

absl::StatusOr<SliceReader> SliceReader::Open(std::unique_ptr<State> s, const std::string& name) {
  auto started = StartTimeline(s->read, s->size, name);
  if (!started.ok()) return started.status();
  s->base = *std::move(started);
  for (size_t k = 0; k < s->index->chunks.size(); ++k) {
    const ChunkSpan& c = s->index->chunks[k];
    if (c.type == static_cast<uint16_t>(ChunkType::kCorrelation) && c.count > 0) s->file_has_correlations = true;
    if (IsSliced(c.type)) continue;
    State::Decoded d;
    std::string reason = s->Decode(k, &d);
    if (reason.empty()) reason = s->Parse(d, &s->base);
    if (!reason.empty()) {
      return absl::DataLossError(absl::StrFormat("%s: chunk at byte offset %d: %s", name, c.offset, reason));
    }
    s->base.bytes_used = std::max(s->base.bytes_used, c.offset + sizeof(ChunkHeader) + c.payload_bytes);
  }
  return SliceReader(std::move(s));
}

absl::StatusOr<SliceReader> SliceReader::OpenFile(const std::string& path, const TraceIndex& index) {
  auto s = std::make_unique<State>();
  absl::StatusOr<int> fd = OpenRegular(path, &s->size);
  if (!fd.ok()) return fd.status();
  s->fd = *fd;
  s->read = FileReader(s->fd);
  s->index = &index;
  return Open(std::move(s), path);
}

absl::StatusOr<SliceReader> SliceReader::OpenBytes(std::string_view bytes, const std::string& name,
                                                   const TraceIndex& index) {
  auto s = std::make_unique<State>();
  s->read = BytesReader(bytes);
  s->size = bytes.size();
  s->index = &index;
  return Open(std::move(s), name);
}

SliceReader::SliceReader(std::unique_ptr<State> s) : s_(std::move(s)) {}
SliceReader::SliceReader(SliceReader&&) noexcept = default;
SliceReader& SliceReader::operator=(SliceReader&&) noexcept = default;
SliceReader::~SliceReader() = default;

uint64_t SliceReader::chunks_decoded() const { return s_->decoded; }
uint64_t SliceReader::chunks_kept() const { return s_->reused; }

absl::StatusOr<Timeline> SliceReader::Read(const std::vector<size_t>& chunks) {
  State& s = *s_;
  const TraceIndex& index = *s.index;
  std::vector<size_t> take;
  take.reserve(chunks.size());
  for (size_t k : chunks) {
    if (k >= index.chunks.size() || !IsSliced(index.chunks[k].type)) continue;
    take.push_back(k);
  }
  // In file order, as the whole read meets them.
  std::sort(take.begin(), take.end());
  take.erase(std::unique(take.begin(), take.end()), take.end());
  // Sized by the index's counts, as the whole read is by the headers'.
  RecordCounts counts;
  for (size_t k : take) counts.Add(index.chunks[k].type, index.chunks[k].count);
  Timeline t = s.base;
  SizeForRecords(counts, s.size, /*populate=*/false, &t);
  s.next.clear();
  for (size_t k : take) {
    const ChunkSpan& c = index.chunks[k];
    State::Decoded d;
    std::string reason;
    if (auto it = s.kept.find(k); it != s.kept.end()) {
      // Taken out, so that a slice that fails part-way leaves no emptied
      // chunk behind for the next.
      d = std::move(s.kept.extract(it).mapped());
      ++s.reused;
    } else {
      reason = s.Decode(k, &d);
      ++s.decoded;
    }
    if (reason.empty()) reason = s.Parse(d, &t);
    if (!reason.empty()) {
      return absl::DataLossError(absl::StrFormat("%s: chunk at byte offset %d: %s", t.path, c.offset, reason));
    }
    t.bytes_used = std::max(t.bytes_used, c.offset + sizeof(ChunkHeader) + c.payload_bytes);
    s.next.emplace(k, std::move(d));
  }
  // What this slice decoded is kept for the next (neighbouring slices share
  // their edge chunks); what it did not need again is let go.
  std::swap(s.kept, s.next);
  s.next.clear();
  // Ops whose correlations were not read are left unjoined, not joined
  // by their CUPTI ids (the fallback for files without correlations).
  t.correlations_elsewhere = s.file_has_correlations;
  FinalizeTimeline(&t);
  return t;
}

absl::StatusOr<Timeline> ReadTraceChunks(std::string_view bytes, const std::string& name,
                                         const TraceIndex& index,
                                         const std::vector<size_t>& chunks) {
  absl::StatusOr<SliceReader> reader = SliceReader::OpenBytes(bytes, name, index);
  if (!reader.ok()) return reader.status();
  return reader->Read(chunks);
}

absl::StatusOr<Timeline> ReadTraceFileChunks(const std::string& path, const TraceIndex& index,
                                             const std::vector<size_t>& chunks) {
  absl::StatusOr<SliceReader> reader = SliceReader::OpenFile(path, index);
  if (!reader.ok()) return reader.status();
  return reader->Read(chunks);
}

void IdRanges::Add(uint64_t lo, uint64_t hi) {
  if (lo <= hi) r_.push_back({lo, hi});
}

void IdRanges::Merge() {
  std::sort(r_.begin(), r_.end());
  size_t n = 0;
  for (const auto& x : r_) {
    if (n > 0 && (x.first <= r_[n - 1].second || x.first - r_[n - 1].second == 1)) {
      r_[n - 1].second = std::max(r_[n - 1].second, x.second);
    } else {
      r_[n++] = x;
    }
  }
  r_.resize(n);
}

bool IdRanges::Meets(uint64_t lo, uint64_t hi) const {
  if (lo > hi) return false;
  // The first range ending at or after lo.
  auto it = std::lower_bound(r_.begin(), r_.end(), lo,
                             [](const std::pair<uint64_t, uint64_t>& x, uint64_t v) { return x.second < v; });
  return it != r_.end() && it->first <= hi;
}

void IntervalFinder::Add(uint64_t lo, uint64_t hi, uint32_t item) {
  if (lo <= hi) e_.push_back({lo, hi, item});
}

void IntervalFinder::Build() {
  std::sort(e_.begin(), e_.end(), [](const Entry& x, const Entry& y) { return x.lo < y.lo; });
  leaves_ = 1;
  while (leaves_ < e_.size()) leaves_ *= 2;
  max_.assign(2 * leaves_, 0);
  for (size_t i = 0; i < e_.size(); ++i) max_[leaves_ + i] = e_[i].hi;
  for (size_t n = leaves_ - 1; n >= 1; --n) max_[n] = std::max(max_[2 * n], max_[2 * n + 1]);
}

void IntervalFinder::Find(uint64_t a, uint64_t b, std::vector<uint32_t>* out) const {
  if (e_.empty() || a > b) return;
  // The intervals starting by b are a prefix of the order by start; of
  // them, the tree of latest ends leads to those ending at or after a.
  const size_t p = static_cast<size_t>(
      std::upper_bound(e_.begin(), e_.end(), b, [](uint64_t v, const Entry& x) { return v < x.lo; }) -
      e_.begin());
  if (p == 0) return;
  struct Node {
    size_t n, l, r;  // node, its leaves [l, r)
  };
  Node stack[64];
  size_t top = 0;
  stack[top++] = {1, 0, leaves_};
  while (top > 0) {
    const Node x = stack[--top];
    if (x.l >= p || max_[x.n] < a) continue;
    if (x.n >= leaves_) {
      out->push_back(e_[x.l].item);
      continue;
    }
    const size_t mid = (x.l + x.r) / 2;
    stack[top++] = {2 * x.n + 1, mid, x.r};
    stack[top++] = {2 * x.n, x.l, mid};
  }
}

namespace {

bool IsType(const ChunkSpan& c, ChunkType type) { return c.type == static_cast<uint16_t>(type); }

void SortUnique(std::vector<uint32_t>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

}  // namespace

void SliceChunker::Edges::Add(const ChunkSpan& c, uint32_t k) {
  by_hi.push_back({c.hi, k});
  by_lo.push_back({c.lo, k});
}

void SliceChunker::Edges::Sort() {
  std::sort(by_hi.begin(), by_hi.end());
  std::sort(by_lo.begin(), by_lo.end());
}

std::pair<int64_t, int64_t> SliceChunker::Edges::Around(uint64_t lo, uint64_t hi) const {
  // Of the chunks wholly before [lo, hi], the one ending last (of equal
  // ends, the last in the file); of those wholly after, the one starting
  // first (of equal starts, the first in the file).
  std::pair<int64_t, int64_t> out{-1, -1};
  auto b = std::lower_bound(by_hi.begin(), by_hi.end(), std::pair<uint64_t, uint32_t>{lo, 0});
  if (b != by_hi.begin()) out.first = std::prev(b)->second;
  if (hi != ~uint64_t{0}) {
    auto a = std::lower_bound(by_lo.begin(), by_lo.end(), std::pair<uint64_t, uint32_t>{hi + 1, 0});
    if (a != by_lo.end()) out.second = a->second;
  }
  return out;
}

SliceChunker::SliceChunker(const TraceIndex& index) : index_(index) {
  using T = ChunkType;
  const std::vector<ChunkSpan>& chunks = index.chunks;
  absl::flat_hash_map<std::pair<uint32_t, uint16_t>, size_t> group;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkSpan& c = chunks[i];
    const auto k = static_cast<uint32_t>(i);
    if (!IsSliced(c.type) || c.count == 0) continue;
    if (IsType(c, T::kCorrelation)) {
      correlations_ = true;
      by_cupti_of_correlations_.Add(c.lo, c.hi, k);
      const auto* r = index.external_ranges.data() + c.ranges_at;
      for (uint32_t j = 0; j < c.ranges; ++j) by_external_of_correlations_.Add(r[j].first, r[j].second, k);
      continue;
    }
    if (IsType(c, T::kCpu) || IsType(c, T::kCpuSched)) {
      auto [it, fresh] = group.try_emplace({c.tid, c.type}, samples_.size());
      if (fresh) samples_.push_back({c.tid, {}, {}});
      samples_[it->second].by_time.Add(c.lo, c.hi, k);
      samples_[it->second].edges.Add(c, k);
      continue;
    }
    by_time_.Add(c.lo, c.hi, k);
    if (IsType(c, T::kApi)) {
      auto [it, fresh] = thread_slot_.try_emplace(c.tid, calls_.size());
      if (fresh) calls_.emplace_back();
      calls_[it->second].Add(c, k);
      calls_by_id_.Add(c.id_lo, c.id_hi, k);
      calls_by_time_.Add(c.lo, c.hi, k);
    }
    if (IsType(c, T::kDevice)) {
      ops_by_id_.Add(c.id_lo, c.id_hi, k);
      ops_by_time_.Add(c.lo, c.hi, k);
    }
    if (IsType(c, T::kNccl)) nccl_by_time_.Add(c.lo, c.hi, k);
  }
  for (IntervalFinder* f : {&by_time_, &by_cupti_of_correlations_, &by_external_of_correlations_,
                            &calls_by_id_, &ops_by_id_, &ops_by_time_, &calls_by_time_, &nccl_by_time_}) {
    f->Build();
  }
  for (Edges& e : calls_) e.Sort();
  for (Samples& g : samples_) {
    g.by_time.Build();
    g.edges.Sort();
  }
}

std::vector<size_t> SliceChunker::Chunks(uint64_t lo_ns, uint64_t hi_ns) const {
  using T = ChunkType;
  const std::vector<ChunkSpan>& chunks = index_.chunks;
  std::vector<uint32_t> take;
  // By time: the calls, ranges, CPU samples, NCCL arguments and device ops
  // of the slice; their ids (for the joins below).
  IdRanges cupti, external;
  by_time_.Find(lo_ns, hi_ns, &take);
  for (const uint32_t k : take) {
    const ChunkSpan& c = chunks[k];
    if (IsType(c, T::kDevice)) cupti.Add(c.id_lo, c.id_hi);
    if (IsType(c, T::kApi)) external.Add(c.id_lo, c.id_hi);
  }
  // On each thread, the chunk holding its last call ending before the
  // slice and the one holding its first call entering after (the host gaps
  // at its edges are bounded by them): of its chunks wholly before the
  // slice, the one ending last, and of those wholly after, the one starting
  // first, whatever order the calls were written in (the recorder writes a
  // call as it returns, so an outer call comes after the calls nested in
  // it, maybe chunks later).
  std::vector<std::pair<int64_t, int64_t>> edges(calls_.size());
  for (size_t t = 0; t < calls_.size(); ++t) {
    edges[t] = calls_[t].Around(lo_ns, hi_ns);
    for (const int64_t k : {edges[t].first, edges[t].second}) {
      if (k >= 0) take.push_back(static_cast<uint32_t>(k));
    }
  }
  // A thread's CPU samples (a gap is split on-CPU and off by the samples
  // around it), over the times of its calls read, from its edge chunk
  // before the slice to the one after, and the samples just outside them.
  for (const Samples& g : samples_) {
    uint64_t a = lo_ns;
    uint64_t b = hi_ns;
    if (auto it = thread_slot_.find(g.tid); it != thread_slot_.end()) {
      const auto [before, after] = edges[it->second];
      if (before >= 0) a = std::min(a, chunks[static_cast<size_t>(before)].lo);
      if (after >= 0) b = std::max(b, chunks[static_cast<size_t>(after)].hi);
    }
    g.Add(a, b, &take);
  }
  cupti.Merge();
  external.Merge();
  // The joins, both ways, through the correlations: the calls that
  // submitted the slice's ops (an op queued long after its launch), and the
  // ops of the slice's calls (a call's op count and last op end).
  AddCallsOfOps(cupti, &take);
  AddOpsOfCalls(external, &take);
  SortUnique(&take);
  // The NCCL arguments of every call read (joined to it by thread and enter
  // time): the argument chunks meeting the time of a call chunk read (its
  // edge calls may have entered long before the slice).
  IdRanges read_calls;  // as time ranges
  for (const uint32_t k : take) {
    if (IsType(chunks[k], T::kApi)) read_calls.Add(chunks[k].lo, chunks[k].hi);
  }
  read_calls.Merge();
  const size_t before_nccl = take.size();
  for (const auto& [a, b] : read_calls.ranges()) nccl_by_time_.Find(a, b, &take);
  if (take.size() > before_nccl) SortUnique(&take);
  return std::vector<size_t>(take.begin(), take.end());
}

void SliceChunker::AddCallsOfOps(const IdRanges& cupti, std::vector<uint32_t>* take) const {
  const std::vector<ChunkSpan>& chunks = index_.chunks;
  IdRanges external;
  if (correlations_) {
    std::vector<uint32_t> found;
    for (const auto& [a, b] : cupti.ranges()) by_cupti_of_correlations_.Find(a, b, &found);
    SortUnique(&found);
    for (const uint32_t k : found) {
      take->push_back(k);
      const auto* r = index_.external_ranges.data() + chunks[k].ranges_at;
      for (uint32_t i = 0; i < chunks[k].ranges; ++i) external.Add(r[i].first, r[i].second);
    }
  } else {
    // A file without correlations joins an op to the call whose external
    // id is its CUPTI id (the reader's fallback).
    external = cupti;
  }
  external.Merge();
  for (const auto& [a, b] : external.ranges()) calls_by_id_.Find(a, b, take);
}

void SliceChunker::AddOpsOfCalls(const IdRanges& external, std::vector<uint32_t>* take) const {
  const std::vector<ChunkSpan>& chunks = index_.chunks;
  IdRanges cupti;
  if (correlations_) {
    std::vector<uint32_t> found;
    for (const auto& [a, b] : external.ranges()) by_external_of_correlations_.Find(a, b, &found);
    for (const uint32_t k : found) {
      take->push_back(k);
      cupti.Add(chunks[k].lo, chunks[k].hi);
    }
  } else {
    cupti = external;  // the fallback, as above
  }
  cupti.Merge();
  for (const auto& [a, b] : cupti.ranges()) ops_by_id_.Find(a, b, take);
}

void SliceChunker::Samples::Add(uint64_t lo_ns, uint64_t hi_ns, std::vector<uint32_t>* take) const {
  by_time.Find(lo_ns, hi_ns, take);
  const auto [before, after] = edges.Around(lo_ns, hi_ns);
  for (const int64_t k : {before, after}) {
    if (k >= 0) take->push_back(static_cast<uint32_t>(k));
  }
}

std::vector<size_t> SliceChunker::OpsAndTheirCalls(uint64_t lo_ns, uint64_t hi_ns) const {
  std::vector<uint32_t> take;
  ops_by_time_.Find(lo_ns, hi_ns, &take);
  IdRanges cupti;
  for (const uint32_t k : take) cupti.Add(index_.chunks[k].id_lo, index_.chunks[k].id_hi);
  cupti.Merge();
  AddCallsOfOps(cupti, &take);
  SortUnique(&take);
  return std::vector<size_t>(take.begin(), take.end());
}

std::vector<size_t> SliceChunker::CallsAndTheirOps(uint64_t lo_ns, uint64_t hi_ns) const {
  std::vector<uint32_t> take;
  calls_by_time_.Find(lo_ns, hi_ns, &take);
  IdRanges external;
  for (const uint32_t k : take) external.Add(index_.chunks[k].id_lo, index_.chunks[k].id_hi);
  external.Merge();
  AddOpsOfCalls(external, &take);
  SortUnique(&take);
  return std::vector<size_t>(take.begin(), take.end());
}

std::vector<size_t> SliceChunker::CpuSamples(uint64_t lo_ns, uint64_t hi_ns) const {
  std::vector<uint32_t> take;
  for (const Samples& g : samples_) g.Add(lo_ns, hi_ns, &take);
  SortUnique(&take);
  return std::vector<size_t>(take.begin(), take.end());
}

std::vector<size_t> SliceChunks(const TraceIndex& index, uint64_t lo_ns, uint64_t hi_ns) {
  return SliceChunker(index).Chunks(lo_ns, hi_ns);
}

absl::StatusOr<TraceIndex> IndexTraceBytes(std::string_view bytes, const std::string& name) {
  return Index(BytesReader(bytes), bytes.size(), name);
}

absl::StatusOr<TraceIndex> IndexTraceFile(const std::string& path) {
  return WithFile<TraceIndex>(path, [&](const ReadAt& read, uint64_t size) {
    return Index(read, size, path);
  });
}

absl::StatusOr<HeaderCounts> CountByHeaders(const std::string& path) {
  return WithFile<HeaderCounts>(path, [&](const ReadAt& read, uint64_t size) -> absl::StatusOr<HeaderCounts> {
    auto header = ReadFileHeader(read, size, path);
    if (!header.ok()) return header.status();
    HeaderCounts n;
    for (uint64_t off = header->header_bytes; off < size && size - off >= sizeof(ChunkHeader);) {
      ChunkHeader ch;
      if (!read(off, sizeof(ch), &ch) || CheckHeader(ch, off, size) != HeaderCheck::kOk) break;
      if (ch.type == static_cast<uint16_t>(ChunkType::kApi) || ch.type == static_cast<uint16_t>(ChunkType::kDevice)) {
        n.calls_and_ops += ch.count;
      }
      off += sizeof(ch) + ch.payload_bytes;
    }
    return n;
  });
}

}  // namespace stallscope::analyzer
