// Test-only builder of valid .sstrace files from hand-built timelines: API
// calls, device ops, correlations, NVTX, strings, stacks, modules, clock
// pairs, CPU-time samples and recorder diagnostics. Ticks are nanoseconds unless
// SetTicksAreNs(false) and Clock() pairs are given.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trace_codec.h"
#include "trace_pack.h"
#include "zstd.h"

namespace stallscope::testing {

namespace tf = stallscope::trace;

inline constexpr int64_t kUs = 1000;  // ns per microsecond

struct PyFrame {
  std::string file;
  std::string function;
  int line;
};

struct CallOptions {
  uint64_t correlation = 0;
  uint64_t stream = 0;
  uint64_t object = 0;        // event, pointer ... (the API's object argument)
  uint32_t stack = 0;         // native stack id
  uint32_t python_stack = 0;  // Python stack id
  uint64_t bytes = 0;
  uint16_t flags = 0;
  int32_t result = 0;
};

class TraceBuilder {
 public:
  TraceBuilder() {
    std::memcpy(header_.magic, tf::kMagic, sizeof(header_.magic));
    header_.version = tf::kVersion;
    header_.oldest_reader = tf::kWriterOldestReader;
    header_.header_bytes = sizeof(tf::FileHeader);
    header_.pid = 4242;
    header_.ppid = 1;
    header_.flags = tf::kFileTicksAreNs;
    std::strncpy(header_.host, "testhost", sizeof(header_.host));
  }

  TraceBuilder& SetTicksAreNs(bool yes) {
    header_.flags = yes ? (header_.flags | tf::kFileTicksAreNs)
                        : (header_.flags & ~uint32_t{tf::kFileTicksAreNs});
    return *this;
  }
  TraceBuilder& SetVersion(uint16_t version, uint16_t oldest) {
    header_.version = version;
    header_.oldest_reader = oldest;
    return *this;
  }
  TraceBuilder& SetPid(uint32_t pid) {
    header_.pid = pid;
    return *this;
  }
  // kApi, kDevice and kCorrelation chunks packed as the recorder packs them
  // (common/trace_pack.h), and with `zstd` compressed too.
  TraceBuilder& SetPacked(bool packed, bool zstd = false) {
    packed_ = packed;
    zstd_ = zstd;
    return *this;
  }
  // Records per kApi / kDevice / kNvtx chunk (to make multi-chunk files).
  TraceBuilder& SetChunkRecords(size_t n) {
    chunk_records_ = n;
    return *this;
  }
  TraceBuilder& SetEnd(bool write_end) {
    end_ = write_end;
    return *this;
  }

  uint16_t Api(const std::string& name, tf::ApiCategory category, uint16_t flags = 0) {
    apis_.push_back({name, static_cast<uint8_t>(category), flags});
    return static_cast<uint16_t>(apis_.size() - 1);
  }

  uint32_t String(const std::string& s) {
    auto it = string_ids_.find(s);
    if (it != string_ids_.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(strings_.size() + 1);
    strings_.push_back({id, s});
    string_ids_[s] = id;
    return id;
  }

  uint32_t NativeStack(const std::vector<uint64_t>& pcs) {
    uint32_t id = next_stack_++;
    stacks_.push_back({id, tf::StackKind::kNative, pcs});
    return id;
  }
  uint32_t PythonStack(const std::vector<PyFrame>& frames) {
    uint32_t id = next_stack_++;
    AddPython(id, frames);
    return id;
  }

  void Call(uint32_t tid, uint16_t api, uint64_t enter, uint64_t exit, CallOptions o = {}) {
    tf::ApiRecord r{};
    r.enter = enter;
    r.exit = exit;
    r.correlation = o.correlation;
    r.stream = o.stream;
    r.object = o.object;
    r.bytes = o.bytes;
    r.stack = o.stack;
    r.python_stack = o.python_stack;
    r.api = api;
    r.flags = o.flags;
    r.result = o.result;
    calls_[tid].push_back(r);
  }

  void Device(uint64_t start, uint64_t end, tf::DeviceOpKind kind, const std::string& name,
              uint32_t cupti_correlation, uint32_t stream = 7, uint32_t device = 0,
              uint64_t bytes = 0, uint8_t copy_kind = 0, uint8_t src_kind = 0,
              uint8_t dst_kind = 0) {
    tf::DeviceRecord r{};
    r.start_ns = start;
    r.end_ns = end;
    r.bytes = bytes;
    r.correlation = cupti_correlation;
    r.name = name.empty() ? 0 : String(name);
    r.stream = stream;
    r.device = device;
    r.kind = static_cast<uint8_t>(kind);
    r.copy_kind = copy_kind;
    r.src_kind = src_kind;
    r.dst_kind = dst_kind;
    ops_.push_back(r);
  }

  void Correlate(uint64_t external, uint32_t cupti) {
    correlations_.push_back({external, cupti, 0});
  }

  // A call on `tid` that submits one device op [start, end), joined through
  // fresh external and CUPTI correlation ids. Returns the external id.
  uint64_t Submit(uint32_t tid, uint16_t api, uint64_t enter, uint64_t exit, uint64_t start,
                  uint64_t end, tf::DeviceOpKind kind = tf::DeviceOpKind::kKernel,
                  const std::string& name = "kernel", CallOptions o = {}) {
    const uint64_t external = next_external_++;
    const uint32_t cupti = next_cupti_++;
    o.correlation = external;
    Call(tid, api, enter, exit, o);
    Device(start, end, kind, name, cupti);
    Correlate(external, cupti);
    return external;
  }

  void Nvtx(uint32_t tid, tf::NvtxType type, uint64_t ticks, const std::string& name = "",
            uint64_t range_id = 0, uint64_t domain = 0) {
    tf::NvtxRecord r{};
    r.ticks = ticks;
    r.range_id = range_id;
    r.domain = domain;
    r.name = name.empty() ? 0 : String(name);
    r.type = static_cast<uint16_t>(type);
    nvtx_[tid].push_back(r);
  }
  void Push(uint32_t tid, uint64_t ticks, const std::string& name) {
    Nvtx(tid, tf::NvtxType::kPush, ticks, name);
  }
  void Pop(uint32_t tid, uint64_t ticks) { Nvtx(tid, tf::NvtxType::kPop, ticks); }
  // A pushed range [start, end) on tid.
  void Range(uint32_t tid, uint64_t start, uint64_t end, const std::string& name) {
    Push(tid, start, name);
    Pop(tid, end);
  }

  void Clock(uint64_t ticks, uint64_t mono_ns) { clocks_.push_back({ticks, mono_ns, mono_ns}); }

  void Module(uint64_t base, uint64_t low, uint64_t high, const std::string& path) {
    if (module_maps_.empty()) module_maps_.emplace_back();
    module_maps_.back().push_back({base, low, high, path});
  }
  // Later Module() calls go to a new kModule chunk (the recorder rewrites the
  // whole map when modules change).
  void NewModuleMap() { module_maps_.emplace_back(); }

  void Diag(tf::DiagnosticId id, uint64_t count) {
    diags_.push_back({static_cast<uint32_t>(id), 0, count});
  }

  // A CPU-time sample of thread `tid` (kCpu): its CPU clock read `cpu_ns`
  // at `ticks`.
  void Cpu(uint32_t tid, uint64_t ticks, uint64_t cpu_ns) {
    cpu_[tid].push_back({ticks, cpu_ns});
  }
  // The same with the thread's run-queue delay (kCpuSched, what the recorder
  // writes): `run_delay_ns` runnable but waiting for a CPU since it started
  // (tf::kRunDelayUnknown: not read).
  void CpuSched(uint32_t tid, uint64_t ticks, uint64_t cpu_ns, uint64_t run_delay_ns) {
    cpu_sched_[tid].push_back({ticks, cpu_ns, run_delay_ns});
  }

  // The NCCL arguments of a call (kNccl): joined to the call of thread
  // `r.tid` entering at `r.enter`.
  void Nccl(const tf::NcclRecord& r) { nccl_.push_back(r); }
  // The process's rank (kRank).
  void Rank(const tf::RankRecord& r) { rank_.push_back(r); }

  // A turn of sampled device timing (kDeviceTiming): CUPTI's activity
  // kinds turned on (or off) at `ticks`, sampling one step in `every`.
  void Timing(uint64_t ticks, bool on, uint32_t every) {
    timing_.push_back({ticks, on ? 1u : 0u, every});
  }

  void Thread(uint32_t tid, const std::string& name) {
    tf::ThreadRecord r{};
    r.tid = tid;
    std::strncpy(r.name, name.c_str(), sizeof(r.name) - 1);
    threads_.push_back(r);
  }

  std::string Build() const {
    std::string out(reinterpret_cast<const char*>(&header_), sizeof(header_));
    if (!apis_.empty()) {
      std::string p;
      for (size_t i = 0; i < apis_.size(); ++i)
        tf::EncodeApi(&p, static_cast<uint16_t>(i), apis_[i].category, apis_[i].flags, apis_[i].name);
      Chunk(&out, tf::ChunkType::kApiTable, 0, apis_.size(), p);
    }
    if (!strings_.empty()) {
      std::string p;
      for (const auto& [id, s] : strings_) tf::EncodeString(&p, id, s);
      Chunk(&out, tf::ChunkType::kString, 0, strings_.size(), p);
    }
    if (!stacks_.empty()) {
      std::string p;
      for (const StackEntry& s : stacks_) tf::EncodeStack(&p, s.id, s.kind, s.words.data(), s.words.size());
      Chunk(&out, tf::ChunkType::kStack, 0, stacks_.size(), p);
    }
    for (const auto& modules : module_maps_) {
      std::string p;
      for (const ModuleEntry& m : modules) tf::EncodeModule(&p, m.base, m.low, m.high, m.path, "");
      Chunk(&out, tf::ChunkType::kModule, 0, modules.size(), p);
    }
    Fixed(&out, tf::ChunkType::kClock, 0, clocks_);
    Fixed(&out, tf::ChunkType::kThread, 0, threads_);
    for (const auto& [tid, calls] : calls_) Fixed(&out, tf::ChunkType::kApi, tid, calls);
    for (const auto& [tid, events] : nvtx_) Fixed(&out, tf::ChunkType::kNvtx, tid, events);
    for (const auto& [tid, samples] : cpu_) Fixed(&out, tf::ChunkType::kCpu, tid, samples);
    for (const auto& [tid, samples] : cpu_sched_) Fixed(&out, tf::ChunkType::kCpuSched, tid, samples);
    Fixed(&out, tf::ChunkType::kDevice, 0, ops_);
    Fixed(&out, tf::ChunkType::kCorrelation, 0, correlations_);
    Fixed(&out, tf::ChunkType::kDiagnostic, 0, diags_);
    Fixed(&out, tf::ChunkType::kNccl, 0, nccl_);
    Fixed(&out, tf::ChunkType::kRank, 0, rank_);
    Fixed(&out, tf::ChunkType::kDeviceTiming, 0, timing_);
    if (end_) Chunk(&out, tf::ChunkType::kEnd, 0, 0, "");
    return out;
  }

  void WriteTo(const std::string& path) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    const std::string bytes = Build();
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // Offsets of each chunk header in the last Build() of the same content.
  static std::vector<size_t> ChunkOffsets(const std::string& bytes) {
    std::vector<size_t> out;
    size_t off = sizeof(tf::FileHeader);
    while (off + sizeof(tf::ChunkHeader) <= bytes.size()) {
      tf::ChunkHeader h;
      std::memcpy(&h, bytes.data() + off, sizeof(h));
      out.push_back(off);
      off += sizeof(h) + h.payload_bytes;
    }
    return out;
  }

 private:
  struct ApiEntry {
    std::string name;
    uint8_t category;
    uint16_t flags;
  };
  struct StackEntry {
    uint32_t id;
    tf::StackKind kind;
    std::vector<uint64_t> words;
  };
  struct ModuleEntry {
    uint64_t base, low, high;
    std::string path;
  };

  void AddPython(uint32_t id, const std::vector<PyFrame>& frames) {
    std::vector<uint64_t> words;
    for (const PyFrame& f : frames) {
      words.push_back(String(f.file + "\t" + f.function));
      words.push_back(static_cast<uint64_t>(f.line));
    }
    stacks_.push_back({id, tf::StackKind::kPython, words});
  }

  void Chunk(std::string* out, tf::ChunkType type, uint32_t tid, size_t count,
             std::string payload) const {
    tf::EncodeChunk(out, header_.version, type, tid, static_cast<uint32_t>(count), std::move(payload));
  }

  template <typename T>
  void Fixed(std::string* out, tf::ChunkType type, uint32_t tid, const std::vector<T>& v) const {
    for (size_t i = 0; i < v.size(); i += chunk_records_) {
      size_t n = std::min(chunk_records_, v.size() - i);
      std::string packed;
      if constexpr (std::is_same_v<T, tf::ApiRecord>) {
        if (packed_) std::make_unique<tf::ApiPacker>()->Pack(&packed, v.data() + i, n);
      } else if constexpr (std::is_same_v<T, tf::DeviceRecord>) {
        if (packed_) std::make_unique<tf::DevicePacker>()->Pack(&packed, v.data() + i, n);
      } else if constexpr (std::is_same_v<T, tf::CorrelationRecord>) {
        if (packed_) tf::PackCorrelation(&packed, v.data() + i, n);
      }
      if (packed.empty()) {
        Chunk(out, type, tid, n, std::string(reinterpret_cast<const char*>(v.data() + i), n * sizeof(T)));
        continue;
      }
      tf::PadEntry(&packed);
      uint16_t encoding = tf::kEncodingPacked;
      if (zstd_) {
        std::string c(8 + ZSTD_compressBound(packed.size()), '\0');
        const size_t frame = ZSTD_compress(c.data() + 8, c.size() - 8, packed.data(), packed.size(), 3);
        const uint32_t sizes[2] = {static_cast<uint32_t>(packed.size()), static_cast<uint32_t>(frame)};
        std::memcpy(c.data(), sizes, sizeof sizes);
        c.resize(8 + frame);
        packed = std::move(c);
        encoding |= tf::kEncodingZstd;
      }
      tf::EncodeChunk(out, header_.version, type, tid, static_cast<uint32_t>(n), std::move(packed), encoding);
    }
  }

  tf::FileHeader header_{};
  bool packed_ = false, zstd_ = false;
  size_t chunk_records_ = 1 << 16;
  bool end_ = true;
  std::vector<ApiEntry> apis_;
  std::vector<std::pair<uint32_t, std::string>> strings_;
  std::map<std::string, uint32_t> string_ids_;
  std::vector<StackEntry> stacks_;
  uint32_t next_stack_ = 1;
  std::vector<std::vector<ModuleEntry>> module_maps_;
  std::map<uint32_t, std::vector<tf::ApiRecord>> calls_;
  std::map<uint32_t, std::vector<tf::NvtxRecord>> nvtx_;
  std::map<uint32_t, std::vector<tf::CpuRecord>> cpu_;
  std::map<uint32_t, std::vector<tf::CpuSchedRecord>> cpu_sched_;
  std::vector<tf::DeviceRecord> ops_;
  std::vector<tf::CorrelationRecord> correlations_;
  std::vector<tf::ClockRecord> clocks_;
  std::vector<tf::ThreadRecord> threads_;
  std::vector<tf::DiagnosticRecord> diags_;
  std::vector<tf::NcclRecord> nccl_;
  std::vector<tf::RankRecord> rank_;
  std::vector<tf::DeviceTimingRecord> timing_;
  uint64_t next_external_ = 1000;
  uint32_t next_cupti_ = 1;
};

}  // namespace stallscope::testing
