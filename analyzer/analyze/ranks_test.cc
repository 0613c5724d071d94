// Tests of the cross-rank analysis on hand-built rank traces: arrivals joined
// by (communicator, sequence), the last arriver and the wait it caused, the
// others' waiting turned into `comm` idle, the straggler test, clock
// offsets across hosts, and the JSON forms the Dask path exchanges.
#include "analyzer/analyze/ranks.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>

#include "analyzer/analyze/analysis.h"
#include "analyzer/analyze/predict.h"
#include "analyzer/report/json.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

constexpr uint64_t kComm = 0xc0ffee;

// One rank of a data-parallel loop: per step, a 300 us kernel, then an
// all-reduce whose kernel starts when this rank arrives (`late` us after the
// others on `slow`) and ends 200 us after the last arrival; NVTX steps.
// `grouped`: the all-reduce issued between ncclGroupStart and ncclGroupEnd
// (no kernel of its own: the end launches it), a 100 us kernel on a second
// stream while it runs, and four records a chunk, so that a pass by slices
// has many; and, before every call, the NCCL arguments of a group's start
// and collective whose calls are not in the trace (a flight recorder's
// window that begins inside a group): the first step's ncclGroupEnd
// launches that collective.
TraceBuilder BuildRank(int rank, int nranks, int steps, int slow, int64_t late,
                       const char* host = "node", bool grouped = false) {
  TraceBuilder b;
  b.SetPid(100 + rank);
  if (grouped) b.SetChunkRecords(4);
  auto api = testing::AddStandardApis(&b);
  testing::AddRank(&b, rank, nranks, host);
  const uint32_t tid = 1;
  auto nccl = [&](int64_t enter, tf::NcclKind kind, uint8_t flags, uint64_t seq, uint64_t correlation) {
    b.Nccl(testing::NcclArgs(tid, enter, correlation, kind, flags, kComm, seq, rank, nranks));
  };
  uint32_t cupti = 1'000'000;
  uint64_t external = 1'000'000;
  int64_t t = 1'000'000;
  if (grouped) {
    nccl(t - 20 * kUs, tf::NcclKind::kGroupStart, 0, 0, 0);
    nccl(t - 16 * kUs, tf::NcclKind::kAllReduce, tf::kNcclCollective | tf::kNcclInGroup,
         static_cast<uint64_t>(steps), 0);
  }
  for (int s = 0; s < steps; ++s) {
    const int64_t step0 = t;
    const int64_t delay = rank == slow ? late * kUs : 0;
    const auto seq = static_cast<uint64_t>(s);
    b.Range(tid, step0, step0 + 1000 * kUs + late * kUs, "step");
    b.Submit(tid, api.launch, step0 + delay, step0 + delay + 5 * kUs, step0 + delay + 10 * kUs,
             step0 + delay + 310 * kUs);
    int64_t enter = step0 + delay + 20 * kUs;
    if (grouped) {
      b.Call(tid, api.nccl, enter, enter + 2 * kUs);
      nccl(enter, tf::NcclKind::kGroupStart, 0, 0, 0);
      b.Call(tid, api.nccl, enter + 4 * kUs, enter + 6 * kUs);
      nccl(enter + 4 * kUs, tf::NcclKind::kAllReduce, tf::kNcclCollective | tf::kNcclInGroup, seq, 0);
      enter += 8 * kUs;
    }
    const int64_t arrival = step0 + delay + 310 * kUs;
    const int64_t last = step0 + late * kUs + 310 * kUs;
    const uint64_t ext = b.Submit(tid, api.nccl, enter, enter + 5 * kUs, arrival, last + 200 * kUs,
                                  tf::DeviceOpKind::kNccl, "ncclDevKernel_AllReduce_Sum_f32");
    if (!grouped) {
      nccl(enter, tf::NcclKind::kAllReduce, tf::kNcclCollective, seq, ext);
    } else {
      nccl(enter, tf::NcclKind::kGroupEnd, 0, 0, ext);
      // A kernel on stream 8 while the all-reduce runs (its wait included).
      testing::CallOptions o;
      o.correlation = ++external;
      b.Call(tid, api.launch, enter + 20 * kUs, enter + 25 * kUs, o);
      b.Device(arrival + 50 * kUs, arrival + 150 * kUs, tf::DeviceOpKind::kKernel, "overlap", ++cupti, 8);
      b.Correlate(external, cupti);
    }
    t += 1000 * kUs + late * kUs;
  }
  return b;
}

void WriteRank(const std::string& path, int rank, int nranks, int steps, int slow, int64_t late,
               const char* host = "node") {
  BuildRank(rank, nranks, steps, slow, late, host).WriteTo(path);
}

struct Folder {
  Folder() {
    char tmpl[] = "/tmp/stallscope-ranks-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~Folder() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string path;
};

// Guards the binomial tail the straggler test uses.
TEST_CASE("binomial tail", "[ranks]") {
  CHECK(BinomialTail(10, 0, 0.3) == 1.0);
  CHECK(BinomialTail(10, 11, 0.3) == 0.0);
  CHECK(BinomialTail(7, 4, 0.25) == Approx(0.07056).epsilon(0.001));
  CHECK(BinomialTail(20, 20, 0.25) == Approx(std::pow(0.25, 20)));
  // Large n: the normal approximation agrees with the exact sum near it.
  CHECK(BinomialTail(20'001, 5'100, 0.25) == Approx(BinomialTail(20'000, 5'100, 0.25)).epsilon(0.05));
  CHECK(BinomialTail(100'000, 25'000, 0.25) == Approx(0.5).epsilon(0.02));
}

// Guards the straggler: rank 2 arrives 500 us late at every all-reduce;
// the others' kernels wait for it, which becomes their `comm` idle; the
// wait it caused is 3 ranks x 500 us per step.
TEST_CASE("a late rank is the straggler; the others' wait is comm idle", "[ranks]") {
  Folder dir;
  constexpr int kRanks = 4, kSteps = 10;
  for (int r = 0; r < kRanks; ++r) {
    WriteRank(dir.path + "/rank" + std::to_string(r) + ".sstrace", r, kRanks, kSteps, 2, 500);
  }
  auto report = AnalyzePaths({dir.path}, AnalysisOptions{});
  REQUIRE(report.ok());
  REQUIRE(report->ranks.size() == kRanks);
  CHECK(report->collectives.count == kSteps);
  REQUIRE(report->stragglers.size() == 1);
  const Straggler& s = report->stragglers[0];
  CHECK(s.rank == 2);
  CHECK(s.times_last == kSteps);
  CHECK(s.wait_caused_ns == int64_t{kSteps} * (kRanks - 1) * 500 * kUs);
  CHECK(report->collectives.skew_max_ns == 500 * kUs);
  CHECK(report->clock.method == "monotonic");
  // Per step: three of four ranks wait 500 us for rank 2.
  REQUIRE(report->collectives.per_step.size() == kSteps);
  for (const StepCollectives& sc : report->collectives.per_step) {
    CHECK(sc.wait_max_ns == 500 * kUs);
    CHECK(sc.wait_mean_ns == 3 * 500 * kUs / 4);
    CHECK(sc.overlap == 0);
    CHECK(sc.comm_share > 0);
  }
  for (const RankRow& row : report->ranks) {
    const int64_t comm = row.idle_by_cause[static_cast<int>(Cause::kComm)];
    if (row.rank == 2) {
      CHECK(row.waited_ns == 0);
      CHECK(comm == 0);
    } else {
      CHECK(row.waited_ns == int64_t{kSteps} * 500 * kUs);
      CHECK(comm == row.waited_ns);
      CHECK(row.idle_by_cause[static_cast<int>(Cause::kSync)] == 0);
    }
  }
  // The report's own steps are rank 0's, with the wait as comm idle.
  CHECK(report->ranks[0].analyzed);
  CHECK(report->totals.idle_by_cause[static_cast<int>(Cause::kComm)] ==
        int64_t{kSteps} * 500 * kUs);
  const Question* q5 = nullptr;
  for (const Question& q : report->questions) {
    if (q.id == "q5") q5 = &q;
  }
  REQUIRE(q5 != nullptr);
  CHECK(q5->answer == "yes");
  CHECK(q5->evidence.find("rank 2 arrives last at 10") != std::string::npos);
}

// Guards --straggler-to-median's cuts: with rank 2 at the median arrival
// (the others' own), rank 0's all-reduce kernels start at its own arrival,
// 500 us earlier each; the straggler's cuts for itself are nothing to cut
// (it arrived last), and a rank that is not in the run changes nothing.
TEST_CASE("a straggler at the median takes its wait off the others' collectives", "[ranks]") {
  Folder dir;
  constexpr int kRanks = 4, kSteps = 10;
  for (int r = 0; r < kRanks; ++r) {
    WriteRank(dir.path + "/rank" + std::to_string(r) + ".sstrace", r, kRanks, kSteps, 2, 500);
  }
  ProcessAnalysis a;
  auto report = AnalyzePaths({dir.path}, AnalysisOptions{}, &a);
  REQUIRE(report.ok());
  REQUIRE(a.rank_arrivals.size() == kRanks);
  const RankArrivals& mine = a.rank_arrivals[a.rank_index];
  CHECK(mine.rank == 0);
  int64_t moved = 0;
  const std::vector<int64_t> cuts = StragglerCuts(a.timeline, mine, a.rank_arrivals, 2, a.one_host, &moved);
  REQUIRE(cuts.size() == a.timeline.ops.size());
  CHECK(moved == kSteps);
  for (size_t o = 0; o < cuts.size(); ++o) {
    const bool nccl = a.timeline.ops[o].kind == tf::DeviceOpKind::kNccl;
    CHECK(cuts[o] == (nccl ? 500 * kUs : 0));
  }
  int64_t none = -1;
  for (int64_t c : StragglerCuts(a.timeline, mine, a.rank_arrivals, 7, a.one_host, &none)) CHECK(c == 0);
  CHECK(none == 0);
}

// Guards the clean case: equal arrivals, no straggler, no comm idle.
TEST_CASE("ranks arriving together: no straggler", "[ranks]") {
  Folder dir;
  for (int r = 0; r < 3; ++r) {
    WriteRank(dir.path + "/rank" + std::to_string(r) + ".sstrace", r, 3, 8, -1, 0);
  }
  auto report = AnalyzePaths({dir.path}, AnalysisOptions{});
  REQUIRE(report.ok());
  REQUIRE(report->ranks.size() == 3);
  CHECK(report->stragglers.empty());
  CHECK(report->collectives.skew_max_ns == 0);
  // 8 all-reduces of 200 us; steps tile the device timeline from the first
  // call (step 0 ends with its all-reduce at 510 us, the others last 1000).
  CHECK(report->collectives.comm_share == Approx(1600.0 / 7510.0).epsilon(1e-9));
  for (const RankRow& row : report->ranks) {
    CHECK(row.idle_by_cause[static_cast<int>(Cause::kComm)] == 0);
  }
}

// Guards the map/reduce pieces and their JSON forms: the same result
// through JSON as in memory (what the Dask path relies on).
TEST_CASE("arrivals and summaries survive JSON", "[ranks]") {
  Folder dir;
  const std::string path = dir.path + "/rank1.sstrace";
  WriteRank(path, 1, 2, 3, 1, 200);
  auto t = ReadTraceFile(path);
  REQUIRE(t.ok());
  const RankArrivals a = CollectArrivals(*t);
  CHECK(a.rank == 1);
  REQUIRE(a.arrivals.size() == 3);
  CHECK(a.arrivals[1].seq == 1);
  auto back = ArrivalsFromJson(nlohmann::json::parse(ArrivalsToJson(a).dump()));
  REQUIRE(back.ok());
  CHECK(back->arrivals.size() == 3);
  CHECK(back->arrivals[2].arrival_ns == a.arrivals[2].arrival_ns);
  LastArrivals last = ReduceArrivals({a});
  auto last_back = LastArrivalsFromJson(nlohmann::json::parse(LastArrivalsToJson(last).dump()));
  REQUIRE(last_back.ok());
  CHECK(last_back->instances.size() == 3);
  CHECK(last_back->one_host);
  CHECK_FALSE(ArrivalsFromJson(nlohmann::json::parse(R"({"schema":"x"})")).ok());
  auto report = AnalyzeTimeline(*t, AnalysisOptions{});
  REQUIRE(report.ok());
  RankSummary s = SummarizeRank(*t, a, last, *report);
  auto s_back = RankSummaryFromJson(nlohmann::json::parse(RankSummaryToJson(s).dump()));
  REQUIRE(s_back.ok());
  CHECK(s_back->comm_ns == s.comm_ns);
  CHECK(s_back->totals.idle_by_cause == s.totals.idle_by_cause);
  CHECK(s_back->start_ns == s.start_ns);
}

// Guards clock alignment across hosts: different hosts convert through
// their realtime offsets; the report says so.
TEST_CASE("ranks on two hosts are aligned by realtime offsets", "[ranks]") {
  Folder dir;
  WriteRank(dir.path + "/rank0.sstrace", 0, 2, 4, -1, 0, "node-a");
  WriteRank(dir.path + "/rank1.sstrace", 1, 2, 4, -1, 0, "node-b");
  auto report = AnalyzePaths({dir.path}, AnalysisOptions{});
  REQUIRE(report.ok());
  REQUIRE(report->ranks.size() == 2);
  CHECK(report->clock.method == "realtime");
  CHECK(report->ranks[0].host == "node-a");
}

// Guards "never crash on hostile input" through the whole multi-rank path:
// a mutated rank trace that still reads is analyzed with an intact one
// (arrivals, reduce, apply, analysis, summaries, composition, rendering).
TEST_CASE("mutated rank traces never crash the cross-rank analysis", "[ranks]") {
  const std::string good = BuildRank(0, 2, 6, 1, 300).Build();
  const std::string seed = BuildRank(1, 2, 6, 1, 300).Build();
  auto intact = ReadTraceBytes(good, "rank0");
  REQUIRE(intact.ok());
  std::mt19937 rng(777);
  int analyzed = 0;
  for (int i = 0; i < 600; ++i) {
    // Flip payload bytes and fix the checksums, so that the mutations reach
    // the analysis instead of stopping at the reader.
    std::string bytes = seed;
    std::vector<std::pair<size_t, size_t>> payloads;  // (offset, size)
    tf::FileHeader fh;
    std::memcpy(&fh, bytes.data(), sizeof fh);
    for (size_t off = fh.header_bytes; off + sizeof(tf::ChunkHeader) <= bytes.size();) {
      tf::ChunkHeader ch;
      std::memcpy(&ch, bytes.data() + off, sizeof ch);
      payloads.emplace_back(off, ch.payload_bytes);
      off += sizeof ch + ch.payload_bytes;
    }
    const int flips = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < flips; ++k) {
      const auto& [off, n] = payloads[rng() % payloads.size()];
      if (n == 0) continue;
      bytes[off + sizeof(tf::ChunkHeader) + rng() % n] = static_cast<char>(rng());
    }
    for (const auto& [off, n] : payloads) {
      tf::ChunkHeader ch;
      std::memcpy(&ch, bytes.data() + off, sizeof ch);
      ch.checksum = tf::Checksum(bytes.data() + off + sizeof ch, n);
      std::memcpy(bytes.data() + off, &ch, sizeof ch);
    }
    auto t = ReadTraceBytes(bytes, "rank1");
    if (!t.ok()) continue;
    ++analyzed;
    std::vector<Timeline> ts = {*intact, std::move(*t)};
    std::vector<RankArrivals> arrivals = {CollectArrivals(ts[0]), CollectArrivals(ts[1])};
    const LastArrivals last = ReduceArrivals(arrivals);
    std::vector<RankSummary> summaries;
    std::vector<Report> reports;
    for (size_t r = 0; r < 2; ++r) {
      ApplyLastArrivals(&ts[r], arrivals[r], last);
      auto rep = AnalyzeTimeline(ts[r], AnalysisOptions{});
      REQUIRE(rep.ok());
      summaries.push_back(SummarizeRank(ts[r], arrivals[r], last, *rep));
      reports.push_back(std::move(*rep));
    }
    Report out = ComposeRanksReport(std::move(reports[0]), std::move(summaries), 0);
    CHECK(!RenderJson(out).empty());
  }
  CHECK(analyzed > 100);
}


// How each file of a folder was read, from AnalyzePaths' progress calls:
// a reading's last call has done == total (one per reading), and only a
// reading by slices (a report, the ranks' arrivals) calls with less on the
// small files of these tests (the whole reading calls every 64 MiB). By
// base name.
struct ReadCounter {
  struct Reads {
    int whole = 0;   // readings with no call of done < total
    int sliced = 0;  // the others
    bool open = false;  // the current reading has called with done < total
  };
  std::mutex mu;
  std::map<std::string, Reads> reads;

  std::function<void(const std::string&, uint64_t, uint64_t)> Progress() {
    return [this](const std::string& path, uint64_t done, uint64_t total) {
      std::lock_guard<std::mutex> lock(mu);
      Reads& r = reads[path.substr(path.rfind('/') + 1)];
      if (done < total) {
        r.open = true;
        return;
      }
      ++(r.open ? r.sliced : r.whole);
      r.open = false;
    };
  }
};

// Guards a folder read one trace at a time (past --stream-above together, or
// --stream): each trace read twice, the first time for its identity,
// arrivals and device ops, and let go after its analysis; or, past
// --stream-above itself and without NCCL kernels, reported from its file by
// slices, not read whole unless its timeline is asked for. The report, and
// the primary process's analysis, are those of the folder held whole. A
// distributed run (with predictions, a rank arriving late, a file that is
// no trace), and processes that are not ranks (one traced twice: the older
// file is named, not analyzed).
TEST_CASE("a folder read one trace at a time gives the held folder's report", "[ranks][analysis]") {
  Folder ranks, processes, mixed;
  for (int r = 0; r < 4; ++r) {
    WriteRank(ranks.path + "/rank" + std::to_string(r) + ".sstrace", r, 4, 6, 2, 300);
  }
  {
    std::FILE* f = std::fopen((ranks.path + "/junk.sstrace").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("not a trace\n", f);
    std::fclose(f);
  }
  // Each with a clock reading at its end (an older dump of a process has
  // an earlier last one).
  auto write = [&](int steps, uint32_t pid, const std::string& path) {
    TraceBuilder b = testing::SyntheticSteps(steps);
    b.SetPid(pid);
    const uint64_t end = 1'000'000'000 + static_cast<uint64_t>(steps) * 2'000 * kUs;
    b.Clock(end, end);
    b.WriteTo(path);
  };
  const int kSteps[] = {3, 5, 4};
  for (int p = 0; p < 3; ++p) write(kSteps[p], 700 + p, processes.path + "/p" + std::to_string(p) + ".sstrace");
  write(2, 701, processes.path + "/p1-older.sstrace");
  // A distributed run beside a process that launched no NCCL kernel (a
  // data loader's): a rank too.
  for (int r = 0; r < 2; ++r) {
    WriteRank(mixed.path + "/rank" + std::to_string(r) + ".sstrace", r, 2, 6, 1, 300);
  }
  write(3, 900, mixed.path + "/loader.sstrace");
  // The calls and ops of a folder's largest trace.
  auto largest = [](const std::string& dir) {
    uint64_t most = 0;
    const std::vector<std::string> paths = ExpandTracePaths({dir}).value();
    for (const std::string& path : paths) {
      if (auto c = CountByHeaders(path); c.ok()) most = std::max(most, c->calls_and_ops);
    }
    return most;
  };
  ReadCounter counter;
  auto& reads = counter.reads;
  enum Way { kEachBelow, kAboveZero, kFlag };  // --stream-above over each, 0; --stream
  for (const std::string& dir : {ranks.path, processes.path, mixed.path}) {
    const size_t files = dir == mixed.path ? 3 : 4;  // (the file that is no trace reports no progress)
    for (const bool predict : {false, true}) {
      CAPTURE(dir, predict);
      AnalysisOptions held;
      held.predict = predict;
      held.progress = counter.Progress();
      reads.clear();
      ProcessAnalysis held_details;
      auto want = AnalyzePaths({dir}, held, &held_details);
      REQUIRE(want.ok());
      REQUIRE(reads.size() == files);
      for (const auto& [file, r] : reads) CHECK((r.whole == 1 && r.sliced == 0));
      for (const Way way : {kEachBelow, kAboveZero, kFlag}) {
        for (const bool asked : {true, false}) {  // the primary's timeline
          CAPTURE(way, asked);
          AnalysisOptions one = held;
          if (way == kFlag) one.stream = true;
          if (way == kAboveZero) one.stream_above_events = 0;
          if (way == kEachBelow) one.stream_above_events = largest(dir);
          reads.clear();
          ProcessAnalysis details;
          auto got = AnalyzePaths({dir}, one, asked ? &details : nullptr);
          REQUIRE(got.ok());
          CHECK(RenderJson(*got) == RenderJson(*want));
          REQUIRE(reads.size() == files);
          for (const auto& [file, r] : reads) {
            CAPTURE(file);
            // Past the limit each (not kEachBelow), by slices: the ranks
            // always, their arrivals and then their report (read whole
            // instead where predictions are asked of the analyzed process,
            // these being too small to go without, or its timeline is
            // asked for); a process without NCCL kernels, too large to
            // predict (these are not), reported at the first look, and read
            // whole after only as the analyzed process whose timeline is
            // asked for. Else read whole twice, but what the first reading
            // leaves out.
            const bool left_out = file == "p1-older.sstrace";
            const bool nccl = file.starts_with("rank");
            const bool past = way != kEachBelow;
            int sliced = 0, whole = 0;
            if (nccl && past) {
              sliced = 1;
              (file == "rank0.sstrace" && (asked || predict) ? whole : sliced) += 1;
            } else if (past && !predict) {
              sliced = 1;
              whole = asked && file == "p1.sstrace" ? 1 : 0;
            } else {
              whole = left_out ? 1 : 2;
            }
            CHECK(r.sliced == sliced);
            CHECK(r.whole == whole);
          }
          if (!asked) continue;
          CHECK(details.timeline.path == held_details.timeline.path);
          CHECK(details.timeline.calls.size() == held_details.timeline.calls.size());
          CHECK(details.timeline.ops.size() == held_details.timeline.ops.size());
          bool same_starts = details.timeline.ops.size() == held_details.timeline.ops.size();
          for (size_t o = 0; same_starts && o < details.timeline.ops.size(); ++o) {
            same_starts = details.timeline.ops[o].start_ns == held_details.timeline.ops[o].start_ns;
          }
          CHECK(same_starts);  // the primary's NCCL waits applied once, as held
          CHECK(details.gaps.size() == held_details.gaps.size());
          CHECK(details.classes == held_details.classes);
          CHECK(details.hotspot_of_call == held_details.hotspot_of_call);
          CHECK(details.rank_index == held_details.rank_index);
          REQUIRE(details.rank_arrivals.size() == held_details.rank_arrivals.size());
          for (size_t r = 0; r < details.rank_arrivals.size(); ++r) {
            CHECK(details.rank_arrivals[r].rank == held_details.rank_arrivals[r].rank);
            CHECK(details.rank_arrivals[r].arrivals.size() == held_details.rank_arrivals[r].arrivals.size());
          }
        }
      }
    }
  }
  // What the folders hold, as the report says it.
  auto said = [](const Report& r, DiagId id, const std::string& what) {
    for (const Diagnostic& d : r.diagnostics) {
      if (d.id == id && d.message.find(what) != std::string::npos) return true;
    }
    return false;
  };
  auto r = AnalyzePaths({ranks.path}, AnalysisOptions{});
  REQUIRE(r.ok());
  CHECK(r->ranks.size() == 4);
  CHECK(said(*r, DiagId::kUnreadableTraces, "junk.sstrace"));
  r = AnalyzePaths({processes.path}, AnalysisOptions{});
  REQUIRE(r.ok());
  CHECK(r->ranks.empty());
  REQUIRE(r->processes.size() == 3);
  CHECK(r->processes[1].analyzed);  // the most device ops
  CHECK(said(*r, DiagId::kEarlierDumps, "p1-older.sstrace"));
  r = AnalyzePaths({mixed.path}, AnalysisOptions{});
  REQUIRE(r.ok());
  CHECK(r->ranks.size() == 3);
}


// Guards the analyzed process of a folder reported by slices with
// predictions asked: past kPredictMaxEvents calls and ops they are left
// out, as read whole, and the report says so the same way. Two processes
// of 1.0 M calls and ops each; the one with more steps is analyzed.
TEST_CASE("a folder's analyzed process too large to predict, by slices", "[ranks][analysis]") {
  Folder dir;
  const int kSteps[] = {5000, 5050};
  for (int p = 0; p < 2; ++p) {
    TraceBuilder b = testing::SyntheticSteps(kSteps[p]);
    b.SetPid(800 + p);
    b.SetPacked(true, false);
    b.WriteTo(dir.path + "/p" + std::to_string(p) + ".sstrace");
    auto counts = CountByHeaders(dir.path + "/p" + std::to_string(p) + ".sstrace");
    REQUIRE(counts.ok());
    REQUIRE(counts->calls_and_ops > static_cast<uint64_t>(kPredictMaxEvents));
  }
  ReadCounter counter;
  auto& reads = counter.reads;
  AnalysisOptions held;
  held.predict = true;
  held.progress = counter.Progress();
  auto want = AnalyzePaths({dir.path}, held);
  REQUIRE(want.ok());
  CHECK(want->processes.at(1).analyzed);
  CHECK_FALSE(want->predictions.skipped.empty());
  AnalysisOptions sliced = held;
  sliced.stream_above_events = 0;
  reads.clear();
  auto got = AnalyzePaths({dir.path}, sliced);
  REQUIRE(got.ok());
  CHECK(RenderJson(*got) == RenderJson(*want));
  REQUIRE(reads.size() == 2);
  for (const auto& [file, r] : reads) {
    CAPTURE(file);
    CHECK(r.whole == 0);  // never read whole
    CHECK(r.sliced == 1);
  }
}

// Guards the ranks of a distributed run read by slices (past --stream-above
// each): their arrivals from a pass over their calls, their reports with
// each slice's NCCL kernels moved to the last arrival, their summaries'
// compute during communication from a pass over their ops. The report is
// the held folder's, and no rank is read whole but the analyzed one where
// predictions are asked (too small to go without them). The all-reduce is
// launched by ncclGroupEnd, and the third slice of 16 call chunks (64
// calls, 12.8 steps of 5) starts at a group's end: the group's first
// collective was in the slice before. The compute during communication is
// the one built, at 40 steps and at 5,000.
TEST_CASE("a distributed run's ranks read by slices give the held report", "[ranks][analysis]") {
  constexpr int kRanks = 3;
  // 5,000 steps: more pieces of compute during communication than the
  // summary holds before merging them (4,096).
  for (const int steps : {40, 5000}) {
    Folder dir;
    for (int r = 0; r < kRanks; ++r) {
      BuildRank(r, kRanks, steps, 1, 400, "node", /*grouped=*/true)
          .WriteTo(dir.path + "/rank" + std::to_string(r) + ".sstrace");
    }
    ReadCounter counter;
    auto& reads = counter.reads;
    for (const bool predict : {false, true}) {
      CAPTURE(steps, predict);
      AnalysisOptions held;
      held.predict = predict;
      auto want = AnalyzePaths({dir.path}, held);
      REQUIRE(want.ok());
      REQUIRE(want->ranks.size() == kRanks);
      CHECK(want->collectives.count == steps);
      // The kernels on stream 8, 100 us a step on each rank, over the NCCL
      // kernels' 600 us a step (200 us on the late rank).
      CHECK(want->collectives.overlap == Approx(3 * 100.0 / (600 + 200 + 600)));
      REQUIRE(want->stragglers.size() == 1);
      CHECK(want->stragglers[0].rank == 1);
      AnalysisOptions sliced = held;
      sliced.stream_above_events = 0;
      sliced.progress = counter.Progress();
      reads.clear();
      auto got = AnalyzePaths({dir.path}, sliced);
      REQUIRE(got.ok());
      CHECK(RenderJson(*got) == RenderJson(*want));
      REQUIRE(reads.size() == kRanks);
      for (const auto& [file, r] : reads) {
        CAPTURE(file);
        const bool whole = predict && file == "rank0.sstrace";
        CHECK(r.sliced == (whole ? 1 : 2));
        CHECK(r.whole == (whole ? 1 : 0));
      }
    }
  }
  // One rank beside a process without NCCL kernels is no distributed run:
  // the rank is reported by slices at the second look, its kernels where
  // they were.
  Folder dir;
  BuildRank(0, kRanks, 40, 1, 400, "node", /*grouped=*/true).WriteTo(dir.path + "/rank0.sstrace");
  testing::SyntheticSteps(30).WriteTo(dir.path + "/loader.sstrace");
  AnalysisOptions held;
  held.predict = false;
  auto want = AnalyzePaths({dir.path}, held);
  REQUIRE(want.ok());
  CHECK(want->ranks.empty());
  AnalysisOptions sliced = held;
  sliced.stream_above_events = 0;
  ReadCounter counter;
  sliced.progress = counter.Progress();
  auto got = AnalyzePaths({dir.path}, sliced);
  REQUIRE(got.ok());
  CHECK(RenderJson(*got) == RenderJson(*want));
  CHECK(counter.reads["rank0.sstrace"].sliced == 2);
  CHECK(counter.reads["loader.sstrace"].sliced == 1);
  for (const auto& [file, r] : counter.reads) CHECK(r.whole == 0);
}

}  // namespace
}  // namespace stallscope::analyzer
