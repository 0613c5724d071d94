// Forced-sync hotspots: synchronizing calls that actually blocked, grouped by
// API and user-code call site (innermost Python frame, else innermost native
// frame outside stallscope, the CUDA/NCCL libraries, the C/C++ runtime and
// the simulated GPU), with count, host time blocked and GPU idle caused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "analyzer/attribution.h"
#include "analyzer/report.h"
#include "analyzer/steps.h"
#include "analyzer/symbolizer.h"
#include "analyzer/timeline.h"

namespace stallscope::analyzer {

// True for objects that are never a user call site (libstallscope, libcuda*,
// libcupti, libnccl, libc, libm, libstdc++, libgcc_s, ld-linux, libpthread,
// anything under a `simgpu` directory).
bool IsRuntimeModule(std::string_view path);

// Resolves a call's native and Python stacks to frames (innermost first:
// native, then Python) and its user-code site.
void ResolveStack(const Timeline& t, uint32_t native_id, uint32_t python_id,
                  Symbolizer* symbolizer, Frame* site, std::vector<Frame>* frames);

// A device-to-host copy of at most this many bytes is a scalar read-back.
inline constexpr uint64_t kScalarReadBytes = 64;

// The fingerprint of a hotspot: 16 hex digits of FNV-1a 64 over
// "api\0kind\0file:line:function".
std::string HotspotFingerprint(std::string_view api, bool explicit_sync, const Frame& site);

// What a synchronizing call of this API does, from its category, flags,
// name, the direction of its copy (trace::ApiFlags bits kApiHostToDev /
// kApiDevToHost, 0 unknown) and its largest transfer: the one-line fix.
std::string HotspotSuggestion(std::string_view api, trace::ApiCategory category, uint16_t flags,
                              uint16_t direction, uint64_t max_bytes);

// With step markers, calls count when they entered between the first step's
// host start and the last step's host end, or caused idle inside a step;
// without markers, all calls. Sorted by idle_caused_ns, then blocked_ns.
// With `hotspot_of_call`, it is set (indexed like t.calls) to the index of
// each call's hotspot in the result, -1 for calls in none.
std::vector<Hotspot> FindHotspots(const Timeline& t, const StepPlan& plan,
                                  const std::vector<CallClass>& classes,
                                  const IdleCaused& idle_caused,
                                  const AttributionOptions& options,
                                  Symbolizer* symbolizer,
                                  std::vector<int32_t>* hotspot_of_call = nullptr);

}  // namespace stallscope::analyzer
