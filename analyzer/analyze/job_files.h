// What a report over several traces says about the job's files as a whole,
// decided from each trace's identity alone, so that `stallscope report
// DIR...` and the cluster path (`stallscope fleet`, whose reduces see JSON
// documents, not traces) say the same: which traces stand for their process
// (the flight recorder's dumps: the newest of each), ranks of the job's
// world with no trace, traces that end before their process finished.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/model/report.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

struct TraceIdentity {
  std::string file;  // basename
  std::string host;  // the header's host name
  uint32_t pid = 0;
  uint64_t start_mono_ns = 0;
  uint64_t last_clock_ns = 0;  // the last clock reading (one per drain)
  bool ended_cleanly = false;
  bool rank_known = false;
  int32_t rank = -1;
  int32_t world_size = -1;
};

TraceIdentity IdentityOf(const Timeline& t);

// Several traces of one process (same host, pid and start: the flight
// recorder's dumps, or copies of a file): true for the newest of each (by
// its last clock reading; the first of equals), false for the others.
std::vector<bool> NewestOfEachProcess(const std::vector<TraceIdentity>& traces);

struct JobFiles {
  std::vector<std::string> earlier;     // dumps left out for a newer one
  std::vector<std::string> unreadable;  // the reader's messages
  std::vector<std::string> missing_ranks;
  std::vector<std::string> incomplete;
  int32_t world = -1;
};

// `kept`: the traces the report reads, in order.
JobFiles DescribeJobFiles(const std::vector<TraceIdentity>& kept, std::vector<std::string> earlier,
                          std::vector<std::string> unreadable);

// The diagnostics: earlier_dumps, unreadable_traces, missing_ranks,
// incomplete_traces.
void NoteJobFiles(const JobFiles& files, Report* report);

}  // namespace stallscope::analyzer
