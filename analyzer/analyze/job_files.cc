#include "analyzer/analyze/job_files.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analyzer/model/diagnostics.h"
#include "analyzer/model/format.h"

namespace stallscope::analyzer {

TraceIdentity IdentityOf(const Timeline& t) {
  TraceIdentity id;
  id.file = BaseName(t.path);
  id.host = t.host;
  id.pid = t.header.pid;
  id.start_mono_ns = t.header.start_mono_ns;
  for (const trace::ClockRecord& c : t.clocks) id.last_clock_ns = std::max(id.last_clock_ns, c.mono_ns);
  id.ended_cleanly = t.ended_cleanly;
  id.rank_known = t.rank.known;
  id.rank = t.rank.rank;
  id.world_size = t.rank.world_size;
  return id;
}

std::vector<bool> NewestOfEachProcess(const std::vector<TraceIdentity>& traces) {
  using Key = std::tuple<std::string, uint32_t, uint64_t>;  // host, pid, start
  absl::flat_hash_map<Key, size_t> newest;                   // the index kept for each process
  for (size_t i = 0; i < traces.size(); ++i) {
    const TraceIdentity& t = traces[i];
    auto [it, added] = newest.try_emplace(Key{t.host, t.pid, t.start_mono_ns}, i);
    if (!added && t.last_clock_ns > traces[it->second].last_clock_ns) it->second = i;
  }
  std::vector<bool> keep(traces.size(), false);
  for (const auto& [key, i] : newest) keep[i] = true;
  return keep;
}

JobFiles DescribeJobFiles(const std::vector<TraceIdentity>& kept, std::vector<std::string> earlier,
                          std::vector<std::string> unreadable) {
  JobFiles f;
  f.earlier = std::move(earlier);
  f.unreadable = std::move(unreadable);
  for (const TraceIdentity& t : kept) {
    if (t.rank_known && t.world_size > 0 && t.world_size <= 65536) f.world = std::max(f.world, t.world_size);
  }
  if (f.world > 0) {
    std::vector<bool> present(static_cast<size_t>(f.world), false);
    for (const TraceIdentity& t : kept) {
      if (t.rank_known && t.rank >= 0 && t.rank < f.world) present[static_cast<size_t>(t.rank)] = true;
    }
    for (int32_t r = 0; r < f.world; ++r) {
      if (!present[static_cast<size_t>(r)]) f.missing_ranks.push_back(absl::StrCat(r));
    }
  }
  if (kept.size() > 1) {
    for (const TraceIdentity& t : kept) {
      if (t.ended_cleanly) continue;
      f.incomplete.push_back(t.rank_known ? absl::StrFormat("%s (rank %d)", t.file, t.rank) : t.file);
    }
  }
  return f;
}

void NoteJobFiles(const JobFiles& f, Report* r) {
  if (!f.earlier.empty()) {
    AddDiagnostic(&r->diagnostics, DiagId::kEarlierDumps, f.earlier.size(),
                  absl::StrFormat("%d earlier trace(s) of a process also traced by a newer one are left "
                                  "out (flight-recorder dumps hold the window before their trigger; "
                                  "`stallscope report FILE` reads one): %s",
                                  f.earlier.size(), absl::StrJoin(f.earlier, ", ")));
  }
  if (!f.unreadable.empty()) {
    AddDiagnostic(&r->diagnostics, DiagId::kUnreadableTraces, f.unreadable.size(),
                  absl::StrFormat("%d trace file(s) could not be read and are left out: %s",
                                  f.unreadable.size(), absl::StrJoin(f.unreadable, "; ")));
  }
  if (!f.missing_ranks.empty()) {
    AddDiagnostic(&r->diagnostics, DiagId::kMissingRanks, f.missing_ranks.size(),
                  absl::StrFormat("no trace for rank(s) %s of the job's %d: the report covers "
                                  "the others",
                                  absl::StrJoin(f.missing_ranks, ", "), f.world));
  }
  if (!f.incomplete.empty()) {
    AddDiagnostic(&r->diagnostics, DiagId::kIncompleteTraces, f.incomplete.size(),
                  absl::StrFormat("%d trace(s) end before their process finished (killed or "
                                  "crashed; records up to its last write are used): %s",
                                  f.incomplete.size(), absl::StrJoin(f.incomplete, ", ")));
  }
}

}  // namespace stallscope::analyzer
