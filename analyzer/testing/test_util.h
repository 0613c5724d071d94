// Helpers shared by the analyzer's tests: a standard API table for the trace
// builder, and trace bytes → Timeline / Report in one call.
#pragma once

#include <string>

#include "analyzer/analyze/analysis.h"
#include "analyzer/testing/trace_builder.h"
#include "analyzer/read/trace_reader.h"

namespace stallscope::testing {

struct Apis {
  uint16_t launch, sync, event_sync, memcpy, memcpy_async, memset, free, alloc, nccl, other;
};

inline Apis AddStandardApis(TraceBuilder* b) {
  using C = tf::ApiCategory;
  Apis a;
  a.launch = b->Api("cuLaunchKernel", C::kLaunch, tf::kApiSubmits);
  a.sync = b->Api("cudaStreamSynchronize", C::kSync, tf::kApiMayBlock);
  a.event_sync = b->Api("cuEventSynchronize", C::kSync, tf::kApiMayBlock);
  a.memcpy = b->Api("cudaMemcpy", C::kCopy, tf::kApiSubmits | tf::kApiMayBlock);
  a.memcpy_async = b->Api("cudaMemcpyAsync", C::kCopy, tf::kApiSubmits | tf::kApiAsync);
  a.memset = b->Api("cudaMemset", C::kSet, tf::kApiSubmits | tf::kApiMayBlock);
  a.free = b->Api("cudaFree", C::kFree, tf::kApiMayBlock);
  a.alloc = b->Api("cudaMalloc", C::kAlloc, 0);
  a.nccl = b->Api("ncclAllReduce", C::kNccl, tf::kApiSubmits);
  a.other = b->Api("cuCtxGetLimit", C::kOther, 0);
  return a;
}

inline analyzer::Timeline ReadOrDie(const TraceBuilder& b, const std::string& name = "test.sstrace") {
  auto t = analyzer::ReadTraceBytes(b.Build(), name);
  if (!t.ok()) throw std::runtime_error(std::string(t.status().message()));
  return std::move(*t);
}

inline analyzer::Report AnalyzeOrDie(const TraceBuilder& b,
                                     const analyzer::AnalysisOptions& o = {},
                                     const std::string& name = "test.sstrace") {
  auto r = analyzer::AnalyzeTimeline(ReadOrDie(b, name), o);
  if (!r.ok()) throw std::runtime_error(std::string(r.status().message()));
  return std::move(*r);
}

inline int64_t CauseOf(const analyzer::CauseNs& c, analyzer::Cause cause) {
  return c[static_cast<int>(cause)];
}

inline int64_t Sum(const analyzer::CauseNs& c) {
  int64_t s = 0;
  for (int64_t v : c) s += v;
  return s;
}

}  // namespace stallscope::testing
