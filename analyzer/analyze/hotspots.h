// Forced-sync hotspots: synchronizing calls that actually blocked, grouped by
// API and user-code call site (innermost Python frame, else innermost native
// frame outside stallscope, the CUDA/NCCL libraries, the C/C++ runtime and
// the simulated GPU), with count, host time blocked and GPU idle caused.
#pragma once

#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analyzer/analyze/attribution.h"
#include "analyzer/model/report.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/read/symbolizer.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// True for objects that are never a user call site: stallscope, the CUDA
// driver and libraries (cudart, CUPTI, cuBLAS, cuDNN, NVRTC, ...), NCCL, the
// frameworks' native libraries (libtorch*, libc10*, ...), anything under
// site-packages/dist-packages or a `simgpu` directory, and the C/C++ runtime.
bool IsRuntimeModule(std::string_view path);

// Whether a Python frame's file is user code: not the interpreter's standard
// library (.../lib/python3.X/, frozen modules), not site-packages or
// dist-packages (PyTorch, numba, cuda-python ...), not stallscope's own
// package; SiteRule's patterns decide first.
bool IsUserPythonFile(std::string_view file, const SiteRule& rule);
// Adds the patterns of STALLSCOPE_USER_CODE / STALLSCOPE_NOT_USER_CODE
// (':'-separated globs) after those already in `rule`: every command reads
// them.
void AddSiteRulesFromEnvironment(SiteRule* rule);
// Whether a native frame is user code: its module is not IsRuntimeModule;
// SiteRule's patterns (on the source file or the module path) decide first.
bool IsUserNativeFrame(const Frame& f, std::string_view module_path, const SiteRule& rule);

// Resolves a call's native and Python stacks to frames (innermost first:
// native, then Python) and its site: the innermost frame of user code (a
// Python frame when the call came from Python, else a native one); without
// one, the innermost Python frame, else the innermost native frame outside
// stallscope. A Python stack that says its frames could not be read (the
// recorder's one frame in trace::kLostSiteFile) counts as none, and sets
// *site_lost.
void ResolveStack(const Timeline& t, uint32_t native_id, uint32_t python_id,
                  Symbolizer* symbolizer, const SiteRule& rule, Frame* site,
                  std::vector<Frame>* frames, bool* site_lost = nullptr);

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

// The step whose host range holds `ns` (-1: none); `hint` (start at 0)
// makes a walk in time order linear.
int32_t StepOfHostTime(const StepPlan& plan, int64_t ns, size_t* hint);

// Finds the hotspots of calls given in time order, from one timeline or
// from slices of a trace one after another (stream.h), each call once.
//
// A synchronization that completes a copy joins the copy's hotspot: an
// explicit stream or context synchronize whose thread's previous
// copy-or-synchronizing call was a copy between host and device made from
// the same Python line (and stream). torch's `.item()`, `.cpu()`,
// `.tolist()`, `print` of a tensor, `if tensor:`, data-dependent sizes
// (`nonzero`) copy into pinned memory and then synchronize the stream, and
// `x.to(device)` from pageable memory uploads and synchronizes: what the
// user wrote is the copy, so such a hotspot is implicit, with the copy's
// fix; the copy and its synchronize are one hit. torch.cuda.synchronize()
// stays explicit. The pending copy of each thread is carried from one
// slice to the next.
class HotspotFinder {
 public:
  // A copy call's memcpy ops: their directions (CUPTI copy kinds 1 HtoD, 2
  // DtoH, 3 HtoA, 4 AtoH) and largest size.
  struct OpCopy {
    uint64_t max_bytes = 0;
    uint16_t direction = 0;
    bool host = false;  // a copy between host and device
  };
  // What the finder needs of a call that can count, taken from the slice
  // that holds it and its ops: a synchronizing call (its class kSync), or a
  // copy between host and device (which a later synchronize may complete).
  // No other call changes what the finder finds.
  struct Call {
    size_t index = 0;  // in its timeline (for hotspot_of_call)
    int64_t enter_ns = 0;
    int64_t exit_ns = 0;
    uint64_t stream = 0;
    uint64_t bytes = 0;
    OpCopy op;  // its memcpy ops
    uint32_t tid = 0;
    uint32_t stack = 0;
    uint32_t python_stack = 0;
    uint16_t api = 0;
    bool sync = false;       // classed kSync
    bool host_copy = false;  // a copy between host and device
    bool has_ops = false;
  };
  static_assert(sizeof(Call) <= 80);

  HotspotFinder(const StepPlan& plan, const AttributionOptions& options, Symbolizer* symbolizer);
  // Appends to `out`, in order, those of the calls [from, to) of `t` (each
  // with its ops in `t`, classed by `classes`) that can count.
  static void Take(const Timeline& t, const std::vector<CallClass>& classes, size_t from, size_t to,
                   std::vector<Call>* out);
  // Calls Take gave, in time order, each with the rule-1 idle it caused
  // (`idle_caused`, its total over the whole trace); `tables` a timeline
  // of the trace (its API and stack tables). With `hotspot_of_call`, sets
  // the entries of the calls that count (by Call::index) to their hotspot
  // (renumbered by Finish).
  void Add(const Timeline& tables, const std::vector<Call>& calls,
           const std::function<int64_t(const Call&)>& idle_caused,
           std::vector<int32_t>* hotspot_of_call = nullptr);
  // Take and Add: the calls [from, to) of `t`, `idle_caused(i)` by index.
  void Add(const Timeline& t, const std::vector<CallClass>& classes, size_t from, size_t to,
           const std::function<int64_t(size_t)>& idle_caused,
           std::vector<int32_t>* hotspot_of_call = nullptr);
  // The hotspots, sorted by idle_caused_ns, then blocked_ns; `apis` the
  // API table (for the suggestions).
  std::vector<Hotspot> Finish(const std::vector<ApiInfo>& apis,
                              std::vector<int32_t>* hotspot_of_call = nullptr);

 private:
  struct Resolved {
    Frame site;
    std::vector<Frame> frames;
    bool site_lost = false;  // its Python frames could not be read
  };
  struct Extra {
    uint16_t api_direction = 0;  // kApiHostToDev / kApiDevToHost from the API's flags
    uint16_t op_direction = 0;   // from its copies' ops, when the API names none
    uint64_t max_bytes = 0;
    bool completes_copy = false;  // holds synchronizes that completed a copy
    int32_t last_step = -1;
  };
  // A thread's last copy between host and device, not yet followed by a
  // synchronizing call.
  struct PendingCopy {
    Call copy;
    bool counted = false;  // counted as a hit itself
  };
  const StepPlan& plan_;
  const AttributionOptions& options_;
  Symbolizer* symbolizer_;
  absl::flat_hash_map<std::pair<uint32_t, uint32_t>, Resolved> stacks_;
  absl::flat_hash_map<std::tuple<uint16_t, bool, std::string, int, std::string>, size_t> index_;
  std::vector<Hotspot> out_;
  std::vector<Extra> extra_;
  absl::flat_hash_map<uint32_t, PendingCopy> pending_;
  size_t step_hint_ = 0;
  size_t sampled_hint_ = 0;
};

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
