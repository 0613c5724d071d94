// Tests of the .sstrace reader: round trip, version checks, truncation,
// corruption, hostile input and tick conversion.
#include "analyzer/read/trace_reader.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "analyzer/testing/test_util.h"
#include "trace_pack.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

bool HasDiag(const Timeline& t, DiagId id) {
  for (const Diagnostic& d : t.diagnostics) {
    if (d.id == id) return true;
  }
  return false;
}

const Diagnostic* FindDiag(const Timeline& t, DiagId id) {
  for (const Diagnostic& d : t.diagnostics) {
    if (d.id == id) return &d;
  }
  return nullptr;
}

// A trace touching every chunk type.
TraceBuilder FullTrace() {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.Thread(11, "main");
  b.Submit(11, apis.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs, tf::DeviceOpKind::kKernel, "gemm");
  uint32_t py = b.PythonStack({{"train.py", "step", 42}, {"train.py", "<module>", 7}});
  b.Call(11, apis.sync, 6 * kUs, 21 * kUs, {.python_stack = py});
  b.Range(11, 0, 30 * kUs, "step 0");
  b.Module(0x1000, 0x1000, 0x2000, "/usr/lib/libfoo.so");
  uint32_t native = b.NativeStack({0x1234, 0x1800});
  b.Call(12, apis.free, 40 * kUs, 41 * kUs, {.stack = native});
  b.Diag(tf::DiagnosticId::kDroppedRecords, 3);
  return b;
}

// Guards the writer/reader round trip: every record type comes back with its
// fields, device ops join to their submitting call, ranges are built.
TEST_CASE("round trip of every chunk type", "[reader]") {
  Timeline t = testing::ReadOrDie(FullTrace());
  REQUIRE(t.calls.size() == 3);
  REQUIRE(t.ops.size() == 1);
  CHECK(t.host == "testhost");
  CHECK(t.header.pid == 4242);
  CHECK(t.ended_cleanly);
  CHECK(t.Api(t.calls[0].api).name == "cuLaunchKernel");
  CHECK(t.Api(t.calls[1].api).category == tf::ApiCategory::kSync);
  CHECK(t.ops[0].call == 0);
  CHECK(t.call_info[0].op_count == 1);
  CHECK(t.call_info[0].last_op_end_ns == 20 * kUs);
  CHECK(t.String(t.op_info[0].name) == "gemm");
  CHECK(t.calls[1].tid == 11);
  CHECK(t.calls[2].tid == 12);
  CHECK(t.thread_names.at(11) == "main");
  REQUIRE(t.ranges.size() == 1);
  CHECK(t.String(t.ranges[0].name) == "step 0");
  CHECK(t.ranges[0].end_ns == 30 * kUs);
  CHECK(t.call_info[1].stack == 0);
  const StackRef& py = t.stacks.at(t.call_info[1].python_stack);
  REQUIRE(py.python_depth == 2);
  CHECK(t.String(static_cast<uint32_t>(t.stack_words[py.python_offset])) == "train.py\tstep");
  CHECK(t.stack_words[py.python_offset + 1] == 42);
  const StackRef& native = t.stacks.at(t.call_info[2].stack);
  REQUIRE(native.native_depth == 2);
  CHECK(t.stack_words[native.native_offset] == 0x1234);
  REQUIRE(t.modules.size() == 1);
  CHECK(t.modules[0].path == "/usr/lib/libfoo.so");
  const Diagnostic* dropped = FindDiag(t, DiagId::kDroppedRecords);
  REQUIRE(dropped != nullptr);
  CHECK(dropped->count == 3);
  CHECK_FALSE(HasDiag(t, DiagId::kTruncatedTrace));
}

// Guards the accounting of a recorder over its budget: dropped calls are
// their own diagnostic, and records that CUPTI dropped (no buffer to give
// it) are named as the cause of missing device records, not another
// profiler.
TEST_CASE("dropped calls, and CUPTI's drops explain missing device records", "[reader]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.Submit(11, apis.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs, tf::DeviceOpKind::kKernel, "k");
  b.Diag(tf::DiagnosticId::kDroppedRecords, 9);
  b.Diag(tf::DiagnosticId::kDroppedCalls, 4);
  b.Diag(tf::DiagnosticId::kNoDeviceRecordsAtExit, 300);
  b.Diag(tf::DiagnosticId::kPythonSitesLost, 2);
  Timeline plain = testing::ReadOrDie(b);
  const Diagnostic* calls = FindDiag(plain, DiagId::kDroppedCalls);
  REQUIRE(calls != nullptr);
  CHECK(calls->count == 4);
  const Diagnostic* sites = FindDiag(plain, DiagId::kPythonSitesLost);
  REQUIRE(sites != nullptr);
  CHECK(sites->count == 2);
  const Diagnostic* missing = FindDiag(plain, DiagId::kNoDeviceRecordsAtExit);
  REQUIRE(missing != nullptr);
  CHECK(missing->message.find("CUPTI dropped") == std::string::npos);
  b.Diag(tf::DiagnosticId::kCuptiDropped, 77);
  Timeline t = testing::ReadOrDie(b);
  missing = FindDiag(t, DiagId::kNoDeviceRecordsAtExit);
  REQUIRE(missing != nullptr);
  CHECK(missing->count == 300);
  CHECK(missing->message.find("CUPTI dropped 77 activity records") != std::string::npos);
  CHECK(missing->message.find("STALLSCOPE_BUFFER_MB") != std::string::npos);
}

// Guards multi-chunk files: records split over many chunks all come back.
TEST_CASE("records split across chunks", "[reader]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetChunkRecords(3);
  for (int i = 0; i < 20; ++i) {
    b.Submit(1, apis.launch, i * 100 * kUs, i * 100 * kUs + 5 * kUs, i * 100 * kUs + 10 * kUs,
             i * 100 * kUs + 50 * kUs);
  }
  Timeline t = testing::ReadOrDie(b);
  CHECK(t.calls.size() == 20);
  CHECK(t.ops.size() == 20);
  for (const DeviceOp& op : t.ops) CHECK(op.call >= 0);
}

// Guards the ordering of the timeline: calls of several threads (one chunk
// each) and device ops written out of order come back sorted, stably, each
// call's CallInfo moved along with it.
TEST_CASE("calls and ops are sorted across chunks", "[reader]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetChunkRecords(2);
  for (int i = 0; i < 9; ++i) {
    const uint32_t tid = 1 + i % 3;
    testing::CallOptions o;
    o.bytes = 100 - i;  // the enter time in µs
    o.stream = tid;
    o.stack = 1000 + i;
    b.Submit(tid, apis.launch, (100 - i) * kUs, (100 - i) * kUs + 1, (200 - i) * kUs,
             (200 - i) * kUs + 5, tf::DeviceOpKind::kKernel, "kernel" + std::to_string(i), o);
  }
  Timeline t = testing::ReadOrDie(b);
  REQUIRE(t.calls.size() == 9);
  REQUIRE(t.call_info.size() == 9);
  for (size_t i = 1; i < t.calls.size(); ++i) CHECK(t.calls[i - 1].enter_ns <= t.calls[i].enter_ns);
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const CallInfo& info = t.call_info[i];
    CHECK(static_cast<int64_t>(info.bytes) * kUs == t.calls[i].enter_ns);
    CHECK(info.stream == t.calls[i].tid);
    CHECK(info.stack == 1100 - info.bytes);
    CHECK(info.op_count == 1);
  }
  REQUIRE(t.op_info.size() == 9);
  for (size_t i = 1; i < t.ops.size(); ++i) CHECK(t.ops[i - 1].start_ns <= t.ops[i].start_ns);
  for (size_t k = 0; k < t.ops.size(); ++k) {
    const DeviceOp& op = t.ops[k];
    REQUIRE(op.call >= 0);
    CHECK(op.start_ns - t.calls[op.call].enter_ns == 100 * kUs);
    // Each op keeps its info: op i started at (200 - i) µs.
    CHECK(t.String(t.op_info[k].name) == "kernel" + std::to_string(200 - op.start_ns / kUs));
  }
  // Starts moved later (as the rank merge does) and sorted again: the
  // infos move with their ops.
  for (DeviceOp& op : t.ops) op.start_ns = 1000 * kUs - op.start_ns;
  SortOpsByStart(&t);
  for (size_t k = 0; k < t.ops.size(); ++k) {
    if (k > 0) CHECK(t.ops[k - 1].start_ns <= t.ops[k].start_ns);
    CHECK(t.String(t.op_info[k].name) ==
          "kernel" + std::to_string(200 - (1000 * kUs - t.ops[k].start_ns) / kUs));
  }
}

// Guards the device field's range: an id past kMaxDevice is clamped to it
// and counted as an invalid record; others are kept.
TEST_CASE("device ids past the range are clamped and counted", "[reader]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.Call(1, apis.launch, 1 * kUs, 2 * kUs);
  b.Device(3 * kUs, 4 * kUs, tf::DeviceOpKind::kKernel, "k", 1, 7, 70000);
  b.Device(5 * kUs, 6 * kUs, tf::DeviceOpKind::kKernel, "k", 2, 7, 65534);
  Timeline t = testing::ReadOrDie(b);
  REQUIRE(t.ops.size() == 2);
  CHECK(t.ops[0].device == kMaxDevice);
  CHECK(t.ops[1].device == 65534);
  uint64_t invalid = 0;
  for (const Diagnostic& d : t.diagnostics) {
    if (d.id == DiagId::kInvalidRecords) invalid += d.count;
  }
  CHECK(invalid == 1);
}

// Guards the join's id index: external ids in the recorder's form (thread
// index << 40 | sequence) from many threads, ids far past the flat range,
// and calls reordered by the sort all join to the right call.
TEST_CASE("device ops join to their calls whatever the external ids", "[reader]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetChunkRecords(3);
  uint32_t cupti = 1;
  std::map<uint32_t, uint64_t> external_of;  // CUPTI id → external id
  for (uint64_t thread = 0; thread < 20; ++thread) {  // more than the flat vectors take
    for (uint64_t seq = 1; seq <= 4; ++seq) {
      // The last call of each thread has a sequence far past the flat range.
      const uint64_t external = (thread << 40) | (seq == 4 ? (uint64_t{1} << 39) : seq);
      // Later threads enter earlier: the sort reorders every call.
      const uint64_t enter = (1000 - thread * 40 + seq) * kUs;
      testing::CallOptions o;
      o.correlation = external;
      b.Call(static_cast<uint32_t>(100 + thread), apis.launch, enter, enter + 1 * kUs, o);
      b.Device(enter + 5 * kUs, enter + 6 * kUs, tf::DeviceOpKind::kKernel, "k", cupti);
      b.Correlate(external, cupti);
      external_of[cupti++] = external;
    }
  }
  // A device op whose external id no call carries stays unjoined.
  b.Device(2000 * kUs, 2001 * kUs, tf::DeviceOpKind::kKernel, "k", cupti);
  b.Correlate((uint64_t{3} << 40) | 99, cupti);
  Timeline t = testing::ReadOrDie(b);
  REQUIRE(t.ops.size() == 81);
  int joined = 0;
  for (size_t k = 0; k < t.ops.size(); ++k) {
    const DeviceOp& op = t.ops[k];
    const uint32_t correlation = t.op_info[k].correlation;
    if (op.call < 0) {
      CHECK(correlation == cupti);
      continue;
    }
    ++joined;
    CHECK(t.call_info[op.call].correlation == external_of.at(correlation));
    CHECK(op.start_ns - t.calls[op.call].enter_ns == 5 * kUs);
  }
  CHECK(joined == 80);
  for (const CallInfo& info : t.call_info) CHECK(info.op_count == 1);
}

// Guards the version contract: a file a newer writer marks as unreadable by
// this reader (oldest_reader above ours) is refused with a clear line; a newer
// file that old readers can still read is accepted.
TEST_CASE("newer format versions are refused only when marked so", "[reader]") {
  TraceBuilder b = FullTrace();
  b.SetVersion(tf::kVersion + 1, tf::kVersion + 1);
  auto t = ReadTraceBytes(b.Build(), "new.sstrace");
  REQUIRE_FALSE(t.ok());
  CHECK(std::string(t.status().message()) ==
        "new.sstrace: written by a newer stallscope (format 5, readable from format 5); this "
        "reader reads up to 4");
  b.SetVersion(tf::kVersion + 1, 1);  // newer, but readable by version-1 readers
  auto t2 = ReadTraceBytes(b.Build(), "x.sstrace");
  REQUIRE(t2.ok());
}

// Guards the checksum per format version: version-1 (one FNV lane) and
// version-2 (four lanes) files still read; each version's checksum catches
// a flipped bit and two swapped words; the three checksums differ, so a
// file is checked with its own.
TEST_CASE("each format version is checked with its own checksum", "[reader]") {
  for (uint16_t version : {uint16_t{1}, uint16_t{2}, uint16_t{3}, tf::kVersion}) {
    CAPTURE(version);
    TraceBuilder b = FullTrace();
    b.SetVersion(version, 1);
    const std::string full = b.Build();
    auto t = ReadTraceBytes(full, "v.sstrace");
    REQUIRE(t.ok());
    CHECK(t->calls.size() == ReadTraceBytes(FullTrace().Build(), "x")->calls.size());
    const auto offsets = TraceBuilder::ChunkOffsets(full);
    tf::ChunkHeader h;
    size_t chunk = 0;  // the first chunk with at least two words of payload
    for (size_t off : offsets) {
      std::memcpy(&h, full.data() + off, sizeof h);
      if (h.payload_bytes >= 16) {
        chunk = off;
        break;
      }
    }
    REQUIRE(chunk != 0);
    const size_t payload = chunk + sizeof(tf::ChunkHeader);
    // A damaged chunk is skipped (corrupt_chunks), the rest read.
    auto damaged = [](const std::string& bytes) {
      auto r = ReadTraceBytes(bytes, "d");
      return r.ok() && HasDiag(*r, DiagId::kCorruptChunks);
    };
    std::string flipped = full;
    flipped[payload + 9] ^= 0x40;
    CHECK(damaged(flipped));
    std::string swapped = full;
    std::swap_ranges(swapped.begin() + static_cast<std::ptrdiff_t>(payload),
                     swapped.begin() + static_cast<std::ptrdiff_t>(payload + 8),
                     swapped.begin() + static_cast<std::ptrdiff_t>(payload + 8));
    if (swapped != full) CHECK(damaged(swapped));
    std::memcpy(&h, full.data() + chunk, sizeof h);
    const uint32_t v1 = tf::ChecksumV1(full.data() + payload, h.payload_bytes);
    const uint32_t v2 = tf::ChecksumV2(full.data() + payload, h.payload_bytes);
    const uint32_t v3 = tf::Checksum(full.data() + payload, h.payload_bytes);
    CHECK(v1 != v2);
    CHECK(v2 != v3);
    CHECK(v1 != v3);
    CHECK(h.checksum == (version == 1 ? v1 : version == 2 ? v2 : v3));
  }
}

// Guards the lanes of version 2 and the hash of version 3: payloads of
// every length up to a few lane rounds give distinct sums for one changed
// word in any position.
TEST_CASE("the checksums see every word", "[reader]") {
  for (auto sum : {&tf::ChecksumV2, &tf::Checksum}) {
    for (size_t words = 1; words <= 13; ++words) {
      std::vector<uint64_t> v(words);
      for (size_t k = 0; k < words; ++k) v[k] = 0x9e3779b97f4a7c15ull * (k + 1);
      const uint32_t base = sum(v.data(), words * 8);
      for (size_t k = 0; k < words; ++k) {
        std::vector<uint64_t> w = v;
        w[k] ^= 1;
        CHECK(sum(w.data(), words * 8) != base);
      }
    }
  }
}

// Guards the not-a-trace cases: short file, bad magic.
TEST_CASE("non-traces are refused", "[reader]") {
  auto shortfile = ReadTraceBytes("STLSCOPE", "short");
  REQUIRE_FALSE(shortfile.ok());
  std::string bytes = FullTrace().Build();
  bytes[0] = 'X';
  auto bad = ReadTraceBytes(bytes, "bad");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()) ==
        "bad: not a stallscope trace (bad magic at byte offset 0)");
}

// Guards the truncated-tail contract: everything up to the last complete
// chunk is kept, with a "truncated trace: read N of M bytes" warning.
TEST_CASE("a truncated file is read up to the last complete chunk", "[reader]") {
  const std::string full = FullTrace().Build();
  const auto offsets = TraceBuilder::ChunkOffsets(full);
  REQUIRE(offsets.size() > 4);
  // Cut inside the device chunk (after the api chunks).
  size_t device_chunk = 0;
  for (size_t off : offsets) {
    tf::ChunkHeader h;
    std::memcpy(&h, full.data() + off, sizeof(h));
    if (h.type == static_cast<uint16_t>(tf::ChunkType::kDevice)) device_chunk = off;
  }
  REQUIRE(device_chunk > 0);
  SECTION("ends mid-chunk") {
    const std::string cut = full.substr(0, device_chunk + 30);
    auto t = ReadTraceBytes(cut, "cut");
    REQUIRE(t.ok());
    CHECK(t->calls.size() == 3);
    CHECK(t->ops.empty());
    const Diagnostic* d = FindDiag(*t, DiagId::kTruncatedTrace);
    REQUIRE(d != nullptr);
    CHECK(d->message == "truncated trace: read " + std::to_string(device_chunk) + " of " +
                            std::to_string(cut.size()) + " bytes");
  }
  SECTION("ends mid-chunk-header") {
    auto t = ReadTraceBytes(full.substr(0, device_chunk + 10), "cut");
    REQUIRE(t.ok());
    CHECK(HasDiag(*t, DiagId::kTruncatedTrace));
  }
  SECTION("last chunk fails its checksum") {
    TraceBuilder b = FullTrace();
    b.SetEnd(false);
    std::string torn = b.Build();
    torn[torn.size() - 3] ^= 0x5a;  // inside the last chunk's payload
    auto t = ReadTraceBytes(torn, "torn");
    REQUIRE(t.ok());
    CHECK(HasDiag(*t, DiagId::kTruncatedTrace));
  }
  SECTION("header only") {
    auto t = ReadTraceBytes(full.substr(0, sizeof(tf::FileHeader)), "empty");
    REQUIRE(t.ok());
    CHECK(HasDiag(*t, DiagId::kNoEndChunk));
  }
}

// Guards corruption in the middle: the damaged chunk is skipped, reading
// resumes at the next chunk that verifies, and a corrupt_chunks warning
// names the bytes lost and the first offset; every other record is kept.
TEST_CASE("corruption in the middle loses only the damaged chunk", "[reader]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetChunkRecords(2);  // several api chunks
  for (int k = 0; k < 8; ++k) b.Call(11, apis.sync, k * 10 * kUs, k * 10 * kUs + kUs);
  const std::string full = b.Build();
  const auto offsets = TraceBuilder::ChunkOffsets(full);
  // The second api chunk.
  size_t victim = 0, victim_end = 0, seen = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    tf::ChunkHeader h;
    std::memcpy(&h, full.data() + offsets[i], sizeof(h));
    if (h.type == static_cast<uint16_t>(tf::ChunkType::kApi) && seen++ == 1) {
      victim = offsets[i];
      victim_end = victim + sizeof(h) + h.payload_bytes;
    }
  }
  REQUIRE(victim > 0);
  auto check_lost_one = [&](const std::string& bytes) {
    auto t = ReadTraceBytes(bytes, "f.sstrace");
    REQUIRE(t.ok());
    CHECK(t->calls.size() == 6);
    CHECK(t->ended_cleanly);
    const Diagnostic* d = FindDiag(*t, DiagId::kCorruptChunks);
    REQUIRE(d != nullptr);
    CHECK(d->count == 1);
    CHECK(d->message.find(std::to_string(victim_end - victim) + " of " +
                          std::to_string(bytes.size()) + " bytes lost") != std::string::npos);
    CHECK(d->message.find("byte offset " + std::to_string(victim)) != std::string::npos);
    CHECK_FALSE(HasDiag(*t, DiagId::kTruncatedTrace));
    return d->message;
  };
  SECTION("checksum") {
    std::string bytes = full;
    bytes[victim + sizeof(tf::ChunkHeader) + 1] ^= 0x01;
    CHECK(check_lost_one(bytes).find("checksum mismatch in api chunk") != std::string::npos);
  }
  SECTION("chunk magic") {
    std::string bytes = full;
    bytes[victim] = 'Z';
    CHECK(check_lost_one(bytes).find("bad chunk magic") != std::string::npos);
  }
  SECTION("absurd size") {
    std::string bytes = full;
    uint32_t huge = 0xfffffff8u;
    std::memcpy(bytes.data() + victim + 16, &huge, 4);
    CHECK(check_lost_one(bytes).find("impossible chunk size") != std::string::npos);
  }
  SECTION("a size past the end of the file") {
    std::string bytes = full;
    uint32_t past = static_cast<uint32_t>(bytes.size());
    std::memcpy(bytes.data() + victim + 16, &past, 4);
    check_lost_one(bytes);
  }
  SECTION("count larger than the payload") {
    std::string bytes = full;
    uint32_t count = 1000000;
    std::memcpy(bytes.data() + victim + 12, &count, 4);
    CHECK(check_lost_one(bytes).find("malformed api chunk") != std::string::npos);
  }
  SECTION("a half-written chunk followed by whole ones (a disk-full spell)") {
    // The writer stopped in the middle of the victim, then went on writing
    // chunks after it.
    std::string bytes = full.substr(0, victim + 40) + full.substr(victim_end);
    auto t = ReadTraceBytes(bytes, "f.sstrace");
    REQUIRE(t.ok());
    CHECK(t->calls.size() == 6);
    const Diagnostic* d = FindDiag(*t, DiagId::kCorruptChunks);
    REQUIRE(d != nullptr);
    CHECK(d->message.find("40 of ") != std::string::npos);
  }
}

// Guards "one flipped bit loses at most one chunk": every bit past the
// file header, flipped alone, leaves every record outside its chunk (a
// flip in a chunk's header may also change how that chunk's own records
// read, never another chunk's).
TEST_CASE("a single bit flip loses at most one chunk", "[reader]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetChunkRecords(4);
  for (int k = 0; k < 16; ++k) {
    b.Submit(11, apis.launch, k * 100 * kUs, k * 100 * kUs + 5 * kUs, k * 100 * kUs + 10 * kUs,
             k * 100 * kUs + 50 * kUs, tf::DeviceOpKind::kKernel, "k");
  }
  const std::string full = b.Build();
  const auto clean = ReadTraceBytes(full, "f");
  REQUIRE(clean.ok());
  const size_t calls = clean->calls.size(), ops = clean->ops.size();
  for (size_t bit = sizeof(tf::FileHeader) * 8; bit < full.size() * 8; bit += 7) {
    std::string bytes = full;
    bytes[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    auto t = ReadTraceBytes(bytes, "f");
    INFO("bit " << bit);
    REQUIRE(t.ok());
    CHECK(t->calls.size() + 4 >= calls);
    CHECK(t->ops.size() + 4 >= ops);
  }
}

// Guards "allocations bounded by the file's size": a 64 KiB file whose chunk
// headers claim 1 GiB payloads reserves nothing for them.
TEST_CASE("a hostile chunk size reserves nothing", "[reader]") {
  std::string bytes = FullTrace().Build();
  const auto offsets = TraceBuilder::ChunkOffsets(bytes);
  bytes.resize(64 * 1024, '\0');
  for (size_t off = offsets.back() + 64; off + sizeof(tf::ChunkHeader) <= bytes.size(); off += 64) {
    tf::ChunkHeader h{};
    h.magic = tf::kChunkMagic;
    h.type = static_cast<uint16_t>(tf::ChunkType::kApi);
    h.count = 1u << 24;
    h.payload_bytes = kMaxChunkPayload;
    std::memcpy(bytes.data() + off, &h, sizeof(h));
  }
  auto t = ReadTraceBytes(bytes, "hostile");
  REQUIRE(t.ok());
  CHECK(t->calls.capacity() < 1024);
  CHECK(t->ops.capacity() < 1024);
  CHECK(HasDiag(*t, DiagId::kCorruptChunks));
}

// Guards "never crash or hang on hostile input": random mutations of a valid
// trace either read or fail with a Status.
TEST_CASE("random corruption never crashes", "[reader]") {
  const std::string full = FullTrace().Build();
  std::mt19937 rng(12345);
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % bytes.size();
      bytes[at] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    auto t = ReadTraceBytes(bytes, "fuzz");
    if (t.ok()) CHECK(t->bytes_used <= bytes.size());
  }
}

// Guards the hinted conversion used for whole arrays: the same answer as the
// searched one for rising, falling and random ticks, in and outside every
// segment.
TEST_CASE("hinted tick conversion equals the searched one", "[reader][clock]") {
  std::vector<Diagnostic> diags;
  std::vector<tf::ClockRecord> pairs;
  for (uint64_t k = 0; k < 40; ++k) pairs.push_back({1000 + k * 997, 5'000'000 + k * 3001, 0});
  TickConverter conv(pairs, &diags);
  std::mt19937_64 rng(7);
  size_t hint = 0;
  for (uint64_t x = 0; x < 50'000; x += 37) CHECK(conv.ToNsNear(x, &hint) == conv.ToNs(x));
  for (uint64_t x = 50'020; x >= 41; x -= 41) CHECK(conv.ToNsNear(x, &hint) == conv.ToNs(x));
  for (int i = 0; i < 5000; ++i) {
    const uint64_t x = rng() % 60'000;
    CHECK(conv.ToNsNear(x, &hint) == conv.ToNs(x));
  }
  hint = 12345;  // out of range: a fresh search
  CHECK(conv.ToNsNear(3000, &hint) == conv.ToNs(3000));
}

// Guards tick → ns conversion: interpolation between pairs and
// extrapolation with the nearest segment's slope.
TEST_CASE("tick conversion", "[reader][clock]") {
  std::vector<Diagnostic> diags;
  TickConverter conv({{3000, 2'000'000, 0}, {1000, 1'000'000, 0}, {5000, 5'000'000, 0}}, &diags);
  CHECK(conv.ToNs(1000) == 1'000'000);
  CHECK(conv.ToNs(2000) == 1'500'000);   // slope 500 ns/tick
  CHECK(conv.ToNs(4000) == 3'500'000);   // slope 1500 ns/tick
  CHECK(conv.ToNs(0) == 500'000);        // extrapolated with the first slope
  CHECK(conv.ToNs(6000) == 6'500'000);   // extrapolated with the last slope
  CHECK(diags.empty());

  TickConverter single({{100, 1'000'100, 0}}, &diags);
  CHECK(single.ToNs(200) == 1'000'200);
  REQUIRE(diags.size() == 1);
  CHECK(diags[0].id == DiagId::kClockSinglePair);
}

// Guards that files whose ticks are not ns convert API and NVTX times.
TEST_CASE("api ticks are converted through clock records", "[reader][clock]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetTicksAreNs(false);
  b.Clock(0, 1'000'000'000);
  b.Clock(1'000'000, 1'000'500'000);  // 2 ticks per ns... 0.5 ns per tick
  b.Call(1, apis.sync, 200'000, 400'000);
  b.Range(1, 100'000, 600'000, "step");
  Timeline t = testing::ReadOrDie(b);
  REQUIRE(t.calls.size() == 1);
  CHECK(t.calls[0].enter_ns == 1'000'100'000);
  CHECK(t.calls[0].exit_ns == 1'000'200'000);
  REQUIRE(t.ranges.size() == 1);
  CHECK(t.ranges[0].start_ns == 1'000'050'000);
}

// Guards the kCpu chunk: per-thread samples read, their ticks converted
// like API ticks, sorted by time; CPU time itself is not converted.
TEST_CASE("cpu samples are read per thread and converted", "[reader][clock]") {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetTicksAreNs(false);
  b.Clock(0, 1'000'000'000);
  b.Clock(1'000'000, 1'000'500'000);  // 0.5 ns per tick
  b.Call(1, apis.sync, 200'000, 400'000);
  b.Cpu(1, 400'000, 7'000);
  b.Cpu(1, 200'000, 5'000);  // out of order: sorted by the reader
  b.Cpu(2, 100'000, 9'000);
  Timeline t = testing::ReadOrDie(b);
  REQUIRE(t.cpu.size() == 2);
  REQUIRE(t.cpu[1].size() == 2);
  CHECK(t.cpu[1][0].ns == 1'000'100'000);
  CHECK(t.cpu[1][0].cpu_ns == 5'000);
  CHECK(t.cpu[1][1].ns == 1'000'200'000);
  CHECK(t.cpu[1][1].ns == t.calls[0].exit_ns);
  REQUIRE(t.cpu[2].size() == 1);
  CHECK(t.cpu[2][0].cpu_ns == 9'000);
  CHECK_FALSE(HasDiag(t, DiagId::kUnknownChunk));
}

// Guards the module map rule: the last map wins; older modules survive only
// where nothing newer overlaps them.
TEST_CASE("later module maps replace earlier ones", "[reader]") {
  TraceBuilder b;
  b.Module(0x1000, 0x1000, 0x2000, "/lib/a.so");
  b.Module(0x3000, 0x3000, 0x4000, "/lib/unloaded.so");
  b.NewModuleMap();
  b.Module(0x1000, 0x1000, 0x2000, "/lib/a.so");
  b.Module(0x3800, 0x3800, 0x5000, "/lib/reused.so");
  b.Module(0x6000, 0x6000, 0x7000, "/lib/new.so");
  b.NewModuleMap();
  b.Module(0x1000, 0x1000, 0x2000, "/lib/a.so");
  b.Module(0x6000, 0x6000, 0x7000, "/lib/new.so");
  Timeline t = testing::ReadOrDie(b);
  std::vector<std::string> paths;
  for (const Module& m : t.modules) paths.push_back(m.path);
  CHECK(paths == std::vector<std::string>{"/lib/a.so", "/lib/reused.so", "/lib/new.so"});
}

// Guards reading from disk and the missing-file error.
TEST_CASE("reads files and reports missing ones", "[reader]") {
  char dir[] = "/tmp/stallscope-reader-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/a.sstrace";
  FullTrace().WriteTo(path);
  auto t = ReadTraceFile(path);
  REQUIRE(t.ok());
  CHECK(t->calls.size() == 3);
  unlink(path.c_str());
  auto missing = ReadTraceFile(path);
  REQUIRE_FALSE(missing.ok());
  CHECK(std::string(missing.status().message()).find(path) == 0);
  rmdir(dir);
}


// kNccl records join their calls by (thread, enter); kRank fills the rank.
TEST_CASE("NCCL records and the rank chunk", "[reader]") {
  TraceBuilder b;
  uint16_t launch = b.Api("cuLaunchKernel", tf::ApiCategory::kLaunch, tf::kApiSubmits);
  uint16_t all_reduce = b.Api("ncclAllReduce", tf::ApiCategory::kNccl);
  uint16_t send = b.Api("ncclSend", tf::ApiCategory::kNccl);
  b.Clock(0, 1000);
  b.Clock(1'000'000, 1'001'000);
  b.Call(7, launch, 100, 200);
  b.Call(7, all_reduce, 300, 400, {.correlation = 55, .stream = 0x10, .bytes = 4096});
  b.Call(8, send, 300, 420, {.bytes = 40});
  tf::NcclRecord r{};
  r.enter = 300;
  r.tid = 8;  // the send (same enter time as the all-reduce, other thread)
  r.comm = 0xabc;
  r.seq = 3;
  r.count = 10;
  r.rank = 1;
  r.nranks = 4;
  r.peer = 2;
  r.kind = static_cast<uint8_t>(tf::NcclKind::kSend);
  r.datatype = 7;
  r.flags = tf::kNcclP2p | tf::kNcclInGroup;
  r.group_depth = 1;
  r.op = -1;
  b.Nccl(r);
  r.tid = 7;
  r.correlation = 55;
  r.seq = 9;
  r.count = 1024;
  r.peer = -1;
  r.kind = static_cast<uint8_t>(tf::NcclKind::kAllReduce);
  r.flags = tf::kNcclCollective;
  r.group_depth = 0;
  r.op = 0;
  b.Nccl(r);
  r.tid = 9;  // no such call
  b.Nccl(r);
  tf::RankRecord rank{};
  rank.rank = 3;
  rank.local_rank = 1;
  rank.world_size = 8;
  rank.local_world_size = 2;
  rank.source = static_cast<uint32_t>(tf::RankSource::kSlurm);
  std::strncpy(rank.host, "node-17", sizeof(rank.host) - 1);
  b.Rank(rank);
  auto t = ReadTraceBytes(b.Build(), "nccl.sstrace");
  REQUIRE(t.ok());
  REQUIRE(t->nccl.size() == 3);
  int joined = 0;
  for (const NcclCall& n : t->nccl) {
    CHECK(n.enter_ns == 300);
    if (n.tid == 9) {
      CHECK(n.call == -1);
      continue;
    }
    REQUIRE(n.call >= 0);
    const ApiCall& c = t->calls[static_cast<size_t>(n.call)];
    CHECK(c.tid == n.tid);
    if (n.kind == tf::NcclKind::kSend) {
      CHECK(t->Api(c.api).name == "ncclSend");
      CHECK(n.peer == 2);
      CHECK(n.seq == 3);
      CHECK(n.group_depth == 1);
    } else {
      CHECK(t->Api(c.api).name == "ncclAllReduce");
      CHECK(t->call_info[static_cast<size_t>(n.call)].bytes == 4096);
      CHECK(n.correlation == 55);
      CHECK(n.seq == 9);
      CHECK(n.comm == 0xabc);
      CHECK(n.rank == 1);
      CHECK(n.nranks == 4);
    }
    ++joined;
  }
  CHECK(joined == 2);
  CHECK(t->rank.known);
  CHECK(t->rank.rank == 3);
  CHECK(t->rank.local_rank == 1);
  CHECK(t->rank.world_size == 8);
  CHECK(t->rank.local_world_size == 2);
  CHECK(t->rank.source == tf::RankSource::kSlurm);
  CHECK(t->rank.host == "node-17");
  CHECK_FALSE(HasDiag(*t, DiagId::kUnknownChunk));
}

}  // namespace
}  // namespace stallscope::analyzer

namespace stallscope::analyzer {
namespace {

// Random records whose fields take every kind of value the packers special-
// case: correlations 0, next and jumping; enters going back (nested calls
// exit first) and wrapping; a negative result; and more distinct shapes
// than a chunk's dictionary holds.
std::vector<tf::ApiRecord> RandomCalls(std::mt19937_64& rng, size_t n) {
  std::vector<tf::ApiRecord> v(n);
  uint64_t enter = 1'000'000, corr = 0;
  for (size_t i = 0; i < n; ++i) {
    tf::ApiRecord& r = v[i];
    const uint64_t pick = rng() % 8;
    enter += pick == 0 ? uint64_t(0) - rng() % 5000 : pick == 1 ? rng() : rng() % 20000;
    r.enter = enter;
    r.exit = rng() % 16 == 0 ? enter - rng() % 100 : enter + rng() % 50000;
    corr = rng() % 4 == 0 ? 0 : rng() % 4 == 1 ? rng() : corr + 1;
    r.correlation = corr;
    const uint64_t shape = i < n / 2 ? rng() % 8 : rng() % 3000;  // a few, then many
    r.stream = shape * 0x7f0000001000ull;
    r.object = shape % 5 == 0 ? ~uint64_t{0} : shape * 977;
    r.bytes = shape % 3 == 0 ? 0 : rng();
    r.stack = static_cast<uint32_t>(shape % 7);
    r.python_stack = static_cast<uint32_t>(shape % 11 == 0 ? 0xffffffffu : shape % 2);
    r.api = static_cast<uint16_t>(shape % 40);
    r.flags = static_cast<uint16_t>(shape % 2);
    r.result = shape % 13 == 0 ? -2 : static_cast<int32_t>(shape % 3);
  }
  return v;
}

std::vector<tf::DeviceRecord> RandomOps(std::mt19937_64& rng, size_t n) {
  std::vector<tf::DeviceRecord> v(n);
  uint64_t t = 5'000'000;
  uint32_t corr = 0;
  for (size_t i = 0; i < n; ++i) {
    tf::DeviceRecord& d = v[i];
    const uint64_t shape = i < n / 2 ? rng() % 6 : rng() % 2500;
    t += rng() % 8 == 0 ? uint64_t(0) - rng() % 10000 : rng() % 30000;
    d.start_ns = t;
    d.end_ns = rng() % 20 == 0 ? t - 3 : t + rng() % 2'000'000;
    corr = rng() % 3 == 0 ? static_cast<uint32_t>(rng()) : corr + 1;
    d.correlation = corr;
    d.bytes = shape % 2 == 0 ? 0 : shape << 20;
    d.name = static_cast<uint32_t>(shape);
    d.stream = static_cast<uint32_t>(shape % 9);
    d.device = static_cast<uint32_t>(shape % 3 == 0 ? 0xffffffffu : shape % 2);
    d.context = 1;
    d.kind = static_cast<uint8_t>(1 + shape % 4);
    d.copy_kind = static_cast<uint8_t>(shape % 10);
    d.src_kind = static_cast<uint8_t>(shape % 4);
    d.dst_kind = static_cast<uint8_t>(shape % 255);
  }
  return v;
}

// Guards the packed encoding's round trip: every field of every record
// comes back, whatever the deltas and however many shapes (past the
// dictionary's capacity the shapes are written in full each time).
TEST_CASE("varints read back what was written, and refuse what is cut or too long", "[reader][pack]") {
  // Each value alone, and then followed by others (read without a bound
  // check per byte when ten or more bytes are left, with one otherwise).
  std::mt19937_64 rng(7);
  std::vector<uint64_t> values = {0, 1, 0x7f, 0x80, 0x3fff, 0x4000, ~uint64_t{0}, uint64_t{1} << 63};
  for (int i = 0; i < 2000; ++i) values.push_back(rng() >> (rng() % 64));
  std::string bytes;
  for (const uint64_t v : values) {
    tf::VarintOut out;
    out.Put(v);
    std::string one;
    out.AppendTo(&one);
    tf::VarintIn alone(reinterpret_cast<const uint8_t*>(one.data()), one.size());
    uint64_t got = 0;
    REQUIRE(alone.Get(&got));
    CHECK(got == v);
    // Cut short by a byte: refused.
    tf::VarintIn cut(reinterpret_cast<const uint8_t*>(one.data()), one.size() - 1);
    CHECK_FALSE(cut.Get(&got));
    bytes += one;
  }
  tf::VarintIn in(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  for (const uint64_t v : values) {
    uint64_t got = 0;
    REQUIRE(in.Get(&got));
    CHECK(got == v);
  }
  CHECK(in.AtPadding());
  // Eleven bytes with the continuation bit, with and without room after:
  // more than a 64-bit value takes.
  for (const size_t room : {size_t{0}, size_t{20}}) {
    std::string long_one(11, '\x80');
    long_one += std::string(room, '\0');
    tf::VarintIn bad(reinterpret_cast<const uint8_t*>(long_one.data()), long_one.size());
    uint64_t got = 0;
    CHECK_FALSE(bad.Get(&got));
  }
}

TEST_CASE("packed records unpack to what was packed", "[reader][pack]") {
  std::mt19937_64 rng(20261203);
  const auto calls = RandomCalls(rng, 6000);
  std::string bytes;
  auto packer = std::make_unique<tf::ApiPacker>();
  packer->Pack(&bytes, calls.data(), calls.size());
  std::vector<tf::ApiRecord> api(calls.size());
  std::vector<tf::ApiShape> api_shapes(tf::kPackShapes);
  REQUIRE(tf::UnpackApi(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                        static_cast<uint32_t>(calls.size()), api.data(), api_shapes.data()) == nullptr);
  CHECK(std::memcmp(api.data(), calls.data(), calls.size() * sizeof(tf::ApiRecord)) == 0);
  // Cut short: an error, never a read past the end.
  CHECK(tf::UnpackApi(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() / 2,
                      static_cast<uint32_t>(calls.size()), api.data(), api_shapes.data()) != nullptr);

  const auto ops = RandomOps(rng, 5000);
  bytes.clear();
  std::make_unique<tf::DevicePacker>()->Pack(&bytes, ops.data(), ops.size());
  std::vector<tf::DeviceRecord> dev(ops.size());
  std::vector<tf::DeviceShape> dev_shapes(tf::kPackShapes);
  REQUIRE(tf::UnpackDevice(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                           static_cast<uint32_t>(ops.size()), dev.data(), dev_shapes.data()) == nullptr);
  CHECK(std::memcmp(dev.data(), ops.data(), ops.size() * sizeof(tf::DeviceRecord)) == 0);

  std::vector<tf::CorrelationRecord> corr(4000);
  for (size_t i = 0; i < corr.size(); ++i) {
    corr[i] = {rng() % 3 == 0 ? rng() : (i > 0 ? corr[i - 1].external + 1 : 1),
               static_cast<uint32_t>(rng() % 2 == 0 ? rng() : i), 0};
  }
  bytes.clear();
  tf::PackCorrelation(&bytes, corr.data(), corr.size());
  std::vector<tf::CorrelationRecord> back(corr.size());
  REQUIRE(tf::UnpackCorrelation(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                static_cast<uint32_t>(corr.size()), back.data()) == nullptr);
  CHECK(std::memcmp(back.data(), corr.data(), corr.size() * sizeof(tf::CorrelationRecord)) == 0);

  // Random bytes: each unpacker stops with an error or fills the records,
  // never reading past the payload (the sanitizer builds check that).
  for (int k = 0; k < 2000; ++k) {
    std::string junk(rng() % 200, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    const auto* p = reinterpret_cast<const uint8_t*>(junk.data());
    const uint32_t n = static_cast<uint32_t>(rng() % 64);
    (void)tf::UnpackApi(p, junk.size(), n, api.data(), api_shapes.data());
    (void)tf::UnpackDevice(p, junk.size(), n, dev.data(), dev_shapes.data());
    (void)tf::UnpackCorrelation(p, junk.size(), n, back.data());
  }
}

// A trace with many calls, ops and correlations, for the encodings below.
TraceBuilder LoopTrace() {
  TraceBuilder b;
  auto apis = testing::AddStandardApis(&b);
  b.SetChunkRecords(700);  // several chunks of each
  for (int k = 0; k < 2000; ++k) {
    const int64_t t = 1'000'000 + k * 50 * kUs;
    b.Submit(11, apis.launch, t, t + 3 * kUs, t + 5 * kUs, t + (20 + k % 7) * kUs, tf::DeviceOpKind::kKernel,
             k % 3 == 0 ? "gemm" : "relu");
    if (k % 10 == 9) b.Call(11, apis.sync, t + 4 * kUs, t + 30 * kUs);
  }
  return b;
}

// Guards format 4's chunk encodings: a trace whose call, op and correlation
// chunks are packed, or packed and compressed, reads to the same timeline
// as the same trace written raw (every call's and op's fields, the joins).
TEST_CASE("packed and compressed chunks read as the raw ones", "[reader][pack]") {
  const Timeline raw = testing::ReadOrDie(LoopTrace());
  for (bool zstd : {false, true}) {
    CAPTURE(zstd);
    TraceBuilder b = LoopTrace();
    b.SetPacked(true, zstd);
    const std::string bytes = b.Build();
    CHECK(bytes.size() * 4 < LoopTrace().Build().size());
    const Timeline t = testing::ReadOrDie(b);
    REQUIRE(t.calls.size() == raw.calls.size());
    REQUIRE(t.ops.size() == raw.ops.size());
    for (size_t i = 0; i < t.calls.size(); ++i) {
      CHECK(std::memcmp(&t.calls[i], &raw.calls[i], sizeof(ApiCall)) == 0);
      CHECK(t.call_info[i].correlation == raw.call_info[i].correlation);
      CHECK(t.call_info[i].op_count == raw.call_info[i].op_count);
    }
    for (size_t i = 0; i < t.ops.size(); ++i) {
      CHECK(std::memcmp(&t.ops[i], &raw.ops[i], sizeof(DeviceOp)) == 0);
      CHECK(t.op_info[i].correlation == raw.op_info[i].correlation);
      CHECK(t.op_info[i].name == raw.op_info[i].name);
    }
  }
}

// Guards a damaged packed chunk: one whose records do not decode (a shape
// reference past its dictionary) is skipped as malformed, the rest read.
TEST_CASE("a packed chunk that does not decode is skipped", "[reader][pack]") {
  TraceBuilder b = LoopTrace();
  b.SetPacked(true);
  std::string bytes = b.Build();
  for (size_t off : TraceBuilder::ChunkOffsets(bytes)) {
    tf::ChunkHeader h;
    std::memcpy(&h, bytes.data() + off, sizeof h);
    if (h.type != static_cast<uint16_t>(tf::ChunkType::kApi)) continue;
    // The first record's tag: a reference to shape 20 of an empty
    // dictionary, with the checksum made right.
    char* payload = bytes.data() + off + sizeof h;
    payload[0] = 0x50;  // 80: shape 20, correlation mode 0
    h.checksum = tf::ChunkChecksum(tf::kVersion, payload, h.payload_bytes);
    std::memcpy(bytes.data() + off, &h, sizeof h);
    break;
  }
  auto t = ReadTraceBytes(bytes, "bad.sstrace");
  REQUIRE(t.ok());
  CHECK(HasDiag(*t, DiagId::kCorruptChunks));
  CHECK(t->calls.size() == 2200 - 700);  // the first chunk's 700 calls lost
}

}  // namespace
}  // namespace stallscope::analyzer
