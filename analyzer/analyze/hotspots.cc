// Hotspot grouping and call-site resolution (see hotspots.h).
#include "analyzer/analyze/hotspots.h"

#include <fnmatch.h>
#include <stdlib.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace stallscope::analyzer {

namespace {

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool InPackages(std::string_view path) {
  return path.find("/site-packages/") != std::string_view::npos ||
         path.find("/dist-packages/") != std::string_view::npos;
}

bool IsStallscopeModule(std::string_view path) {
  return Basename(path).starts_with("libstallscope");
}

// The Python interpreter: libpython3.X.so or a statically linked python3.X.
bool IsInterpreterModule(std::string_view path) {
  std::string_view base = Basename(path);
  return base.starts_with("libpython") || base.starts_with("python");
}

// A file of the interpreter's standard library: under .../lib/python3.X/ or
// .../lib64/python3.X/ (outside site-packages, checked before), or frozen.
bool IsStandardLibrary(std::string_view file) {
  if (file.starts_with("<frozen ")) return true;
  for (std::string_view root : {std::string_view("/lib/python3."), std::string_view("/lib64/python3.")}) {
    for (size_t at = file.find(root); at != std::string_view::npos; at = file.find(root, at + 1)) {
      size_t i = at + root.size();
      while (i < file.size() && file[i] >= '0' && file[i] <= '9') ++i;
      if (i > at + root.size() && i < file.size() && file[i] == '/') return true;
    }
  }
  return false;
}

// stallscope's own Python package (python/stallscope/, or installed).
bool IsStallscopePackage(std::string_view file) {
  size_t slash = file.rfind('/');
  if (slash == std::string_view::npos) return false;
  return Basename(file.substr(0, slash)) == "stallscope";
}

bool MatchesAny(const std::vector<std::string>& globs, std::string_view text) {
  if (text.empty()) return false;
  const std::string s(text);
  for (const std::string& g : globs) {
    if (fnmatch(g.c_str(), s.c_str(), 0) == 0) return true;
  }
  return false;
}

// The configured patterns first (user code, then not user code), then the
// default.
bool Decide(const SiteRule& rule, std::string_view a, std::string_view b, bool by_default) {
  if (MatchesAny(rule.user_code, a) || MatchesAny(rule.user_code, b)) return true;
  if (MatchesAny(rule.not_user_code, a) || MatchesAny(rule.not_user_code, b)) return false;
  return by_default;
}

}  // namespace

bool IsRuntimeModule(std::string_view path) {
  if ((std::string_view(path).find("/simgpu/") != std::string_view::npos)) return true;
  if (InPackages(path)) return true;
  std::string_view base = Basename(path);
  static constexpr std::string_view kPrefixes[] = {
      // stallscope, the CUDA driver and its libraries, NCCL
      "libstallscope", "libcuda", "libcupti", "libnccl", "libcublas", "libcudnn", "libnvrtc",
      "libnvJitLink", "libcufft", "libcusparse", "libcusolver", "libcurand", "libcufile",
      "libnvshmem",
      // frameworks
      "libtorch", "libc10", "libcaffe2", "libshm", "libgomp", "libffi", "libpython",
      // the C and C++ runtime
      "libc.", "libc-", "libm.", "libm-", "libstdc++", "libgcc_s", "ld-linux", "libpthread"};
  for (std::string_view p : kPrefixes) {
    if (std::string_view(base).starts_with(p)) return true;
  }
  return false;
}

void AddSiteRulesFromEnvironment(SiteRule* rule) {
  for (auto [name, out] : {std::pair{"STALLSCOPE_USER_CODE", &rule->user_code},
                           std::pair{"STALLSCOPE_NOT_USER_CODE", &rule->not_user_code}}) {
    const char* v = getenv(name);
    if (v == nullptr) continue;
    for (absl::string_view g : absl::StrSplit(v, ':', absl::SkipEmpty())) out->emplace_back(g);
  }
}

bool IsUserPythonFile(std::string_view file, const SiteRule& rule) {
  const bool library = InPackages(file) || IsStandardLibrary(file) || IsStallscopePackage(file);
  return Decide(rule, file, {}, !library);
}

bool IsUserNativeFrame(const Frame& f, std::string_view module_path, const SiteRule& rule) {
  return Decide(rule, f.file, module_path, !IsRuntimeModule(module_path));
}

void ResolveStack(const Timeline& t, uint32_t native_id, uint32_t python_id,
                  Symbolizer* symbolizer, const SiteRule& rule, Frame* site,
                  std::vector<Frame>* frames, bool* site_lost) {
  *site = Frame{"<unknown>", "", 0, ""};
  if (site_lost != nullptr) *site_lost = false;
  // Either id may name a native or a Python stack (or both): take the native
  // part of the first that has one, and likewise the Python part.
  StackRef ref;
  for (uint32_t id : {native_id, python_id}) {
    auto it = id == 0 ? t.stacks.end() : t.stacks.find(id);
    if (it == t.stacks.end()) continue;
    if (ref.native_depth == 0 && it->second.native_depth > 0) {
      ref.native_offset = it->second.native_offset;
      ref.native_depth = it->second.native_depth;
    }
    if (ref.python_depth == 0 && it->second.python_depth == 1) {
      const std::string_view lost(trace::kLostSiteFile);
      const std::string_view s =
          t.String(static_cast<uint32_t>(t.stack_words[it->second.python_offset]));
      if (s.size() > lost.size() && s.substr(0, lost.size()) == lost && s[lost.size()] == '\t') {
        if (site_lost != nullptr) *site_lost = true;
        continue;
      }
    }
    if (ref.python_depth == 0 && it->second.python_depth > 0) {
      ref.python_offset = it->second.python_offset;
      ref.python_depth = it->second.python_depth;
    }
  }
  // Frames innermost first, outermost last: the native frames below the
  // interpreter (driver, libffi, extension code), then the Python frames, then
  // — only without Python frames — the rest of the native stack. stallscope's
  // own frames (the capture and the hook wrapper) are not shown. The site is
  // the innermost frame of user code (see hotspots.h); with none, the
  // innermost Python frame, else the innermost native frame outside
  // stallscope.
  bool have_site = false;
  bool in_interpreter = false;
  Frame fallback;
  bool have_fallback = false;
  for (uint32_t i = 0; i < ref.native_depth && !in_interpreter; ++i) {
    const uint64_t pc = t.stack_words[ref.native_offset + i];
    const Module* m = symbolizer->FindModule(pc);
    if (m != nullptr && IsStallscopeModule(m->path)) continue;
    if (ref.python_depth > 0 && m != nullptr && IsInterpreterModule(m->path)) {
      in_interpreter = true;
      break;
    }
    const Frame& f = symbolizer->Symbolize(pc);
    frames->push_back(f);
    if (ref.python_depth > 0 || have_site || m == nullptr) continue;
    if (IsUserNativeFrame(f, m->path, rule)) {
      *site = f;
      have_site = true;
    } else if (!have_fallback) {
      fallback = f;
      have_fallback = true;
    }
  }
  for (uint32_t i = 0; i < ref.python_depth; ++i) {
    Frame f = t.PythonFrame(ref.python_offset + 2 * size_t{i});
    if (i == 0) {
      fallback = f;
      have_fallback = true;
    }
    if (!have_site && IsUserPythonFile(f.file, rule)) {
      *site = f;
      have_site = true;
    }
    frames->push_back(std::move(f));
  }
  if (!have_site && have_fallback) *site = fallback;
}

std::string HotspotFingerprint(std::string_view api, bool explicit_sync, const Frame& site) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto add = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
  };
  add(api);
  add(std::string_view("\0", 1));
  add(explicit_sync ? "explicit" : "implicit");
  add(std::string_view("\0", 1));
  add(absl::StrCat(site.file, ":", site.line, ":", site.function));
  return absl::StrFormat("%016x", h);
}

namespace {

bool NameHas(std::string_view api, std::string_view part) {
  return api.find(part) != std::string_view::npos;
}

}  // namespace

std::string HotspotSuggestion(std::string_view api, trace::ApiCategory category, uint16_t flags,
                              uint16_t direction, uint64_t max_bytes) {
  using C = trace::ApiCategory;
  switch (category) {
    case C::kSync:
      if (NameHas(api, "Event")) {
        return "event sync: let the consuming stream wait with cudaStreamWaitEvent (or poll "
               "cudaEventQuery) instead of blocking the host";
      }
      return "explicit sync: wait on an event with cudaStreamWaitEvent instead of blocking the "
             "host, or drop it: the next blocking read synchronizes anyway";
    case C::kFree:
      return "free that synchronizes: use cudaMallocAsync/cudaFreeAsync or a caching allocator "
             "(keep buffers alive across steps)";
    case C::kSet:
      return "synchronous memset (blocks the host, e.g. on pinned or managed memory): use "
             "cudaMemsetAsync on the work stream";
    case C::kCopy: {
      const bool d2h = (direction & trace::kApiDevToHost) != 0 || NameHas(api, "DtoH") ||
                       NameHas(api, "D2H");
      const bool h2d = (direction & trace::kApiHostToDev) != 0 || NameHas(api, "HtoD") ||
                       NameHas(api, "H2D");
      if (d2h && max_bytes > 0 && max_bytes <= kScalarReadBytes) {
        return "scalar read-back (.item()-style): copy into pinned memory with "
               "non_blocking=True and read it a step later";
      }
      if (d2h) {
        return (flags & trace::kApiAsync) != 0
                   ? "device-to-host copy into pageable memory runs synchronously: copy into "
                     "pinned memory with non_blocking=True and read it a step later"
                   : "synchronous device-to-host copy: cudaMemcpyAsync into pinned memory, and "
                     "wait on an event only where the data is used (a step later)";
      }
      if (h2d) {
        return "synchronous host-to-device copy: copy from pinned memory (pin_memory=True) with "
               "non_blocking=True / cudaMemcpyAsync";
      }
      return "synchronous copy: use cudaMemcpyAsync on the work stream and wait on an event only "
             "where the result is needed";
    }
    case C::kNccl:
      return "blocking collective: overlap it with compute (bucketed, asynchronous collectives)";
    default:
      return "blocked the host until device work finished: move it out of the step or use an "
             "asynchronous form";
  }
}

int32_t StepOfHostTime(const StepPlan& plan, int64_t ns, size_t* hint) {
  const std::vector<StepSpan>& steps = plan.steps;
  if (steps.empty()) return -1;
  size_t i = *hint < steps.size() ? *hint : 0;
  if (ns < steps[i].host_start_ns) i = 0;
  while (i < steps.size() && ns >= steps[i].host_end_ns) ++i;
  if (i == steps.size() || ns < steps[i].host_start_ns) return -1;
  *hint = i;
  return static_cast<int32_t>(i);
}

HotspotFinder::HotspotFinder(const StepPlan& plan, const AttributionOptions& options,
                             Symbolizer* symbolizer)
    : plan_(plan), options_(options), symbolizer_(symbolizer) {}

void HotspotFinder::Take(const Timeline& t, const std::vector<CallClass>& classes, size_t from, size_t to,
                         std::vector<Call>* out) {
  // The memcpy ops of the calls, for copy calls whose API names no
  // direction (cuMemcpy, cuMemcpyAsync).
  absl::flat_hash_map<int32_t, OpCopy> op_copy;
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const DeviceOp& op = t.ops[i];
    if (op.call < 0 || op.kind != trace::DeviceOpKind::kMemcpy) continue;
    if (op.call < static_cast<int32_t>(from) || op.call >= static_cast<int32_t>(to)) continue;
    OpCopy& x = op_copy[op.call];
    if (op.copy_kind == 1 || op.copy_kind == 3) x.direction |= trace::kApiHostToDev;
    if (op.copy_kind == 2 || op.copy_kind == 4) x.direction |= trace::kApiDevToHost;
    x.host = x.host || (op.copy_kind >= 1 && op.copy_kind <= 4);
    x.max_bytes = std::max(x.max_bytes, t.op_info[i].bytes);
  }
  for (size_t i = from; i < to; ++i) {
    const ApiCall& c = t.calls[i];
    const ApiInfo& api = t.Api(c.api);
    const CallInfo& info = t.call_info[i];
    auto it = op_copy.find(static_cast<int32_t>(i));
    const OpCopy op = it == op_copy.end() ? OpCopy{} : it->second;
    const bool host_copy = api.category == trace::ApiCategory::kCopy &&
                           ((api.flags & (trace::kApiDevToHost | trace::kApiHostToDev)) != 0 ||
                            (info.op_count > 0 && op.host));
    const bool sync = classes[i] == CallClass::kSync;
    if (!sync && !host_copy) continue;
    Call x;
    x.index = i;
    x.enter_ns = c.enter_ns;
    x.exit_ns = c.exit_ns;
    x.tid = c.tid;
    x.api = c.api;
    x.sync = sync;
    x.host_copy = host_copy;
    x.has_ops = info.op_count > 0;
    x.stack = info.stack;
    x.python_stack = info.python_stack;
    x.stream = info.stream;
    x.bytes = info.bytes;
    x.op = op;
    out->push_back(x);
  }
}

void HotspotFinder::Add(const Timeline& t, const std::vector<CallClass>& classes, size_t from, size_t to,
                        const std::function<int64_t(size_t)>& idle_caused,
                        std::vector<int32_t>* hotspot_of_call) {
  std::vector<Call> calls;
  Take(t, classes, from, to, &calls);
  Add(t, calls, [&](const Call& c) { return idle_caused(c.index); }, hotspot_of_call);
}

void HotspotFinder::Add(const Timeline& t, const std::vector<Call>& calls,
                        const std::function<int64_t(const Call&)>& idle_caused,
                        std::vector<int32_t>* hotspot_of_call) {
  // A copy's op information counts toward its hotspot when its API names
  // no direction.
  auto add_op_copy = [&](Extra& x, bool has_ops, const OpCopy& o) {
    if (x.api_direction != 0 || !has_ops) return;
    x.op_direction |= o.direction;
    x.max_bytes = std::max(x.max_bytes, o.max_bytes);
  };
  const bool markers = plan_.source != "none";
  for (const Call& c : calls) {
    const ApiInfo& api = t.Api(c.api);
    // A synchronization completing a copy: an explicit stream or context
    // synchronize whose thread's previous copy-or-synchronizing call was a
    // copy between host and device made from the same Python line (and
    // stream). Any synchronizing call takes the pending copy.
    std::optional<PendingCopy> completes;  // its copy, when it completes one
    if (!c.host_copy && c.sync) {
      auto it = pending_.find(c.tid);
      if (it != pending_.end()) {
        const PendingCopy pending = it->second;
        pending_.erase(it);
        const Call& copy = pending.copy;
        const bool whole_context = NameHas(api.name, "Ctx") || NameHas(api.name, "DeviceSynchronize");
        if (api.category == trace::ApiCategory::kSync && c.python_stack != 0 &&
            c.python_stack == copy.python_stack && (whole_context || c.stream == copy.stream)) {
          completes = pending;
        }
      }
    }
    bool counted = false;
    const int64_t caused = c.sync ? idle_caused(c) : 0;
    const int64_t blocked = c.exit_ns - c.enter_ns;
    bool hit = c.sync && (blocked > options_.hotspot_min_blocked_ns || caused != 0);
    // With markers: calls between the first step's host start and the last
    // step's host end, or that caused idle inside a step (start-up and
    // teardown synchronizations are left out).
    if (hit && markers && caused == 0 &&
        (c.enter_ns < plan_.steps.front().host_start_ns || c.enter_ns >= plan_.steps.back().host_end_ns)) {
      hit = false;
    }
    // Device timing sampled: only calls inside the timed steps (the others'
    // device work, and so the idle they caused, is unknown).
    if (hit && plan_.sampled_every != 0 && caused == 0 && StepOfHostTime(plan_, c.enter_ns, &sampled_hint_) < 0) {
      hit = false;
    }
    if (hit) {
      auto [sit, inserted] = stacks_.try_emplace(std::make_pair(c.stack, c.python_stack));
      if (inserted) {
        ResolveStack(t, c.stack, c.python_stack, symbolizer_, options_.site, &sit->second.site,
                     &sit->second.frames, &sit->second.site_lost);
      }
      const Resolved& r = sit->second;
      // A synchronize completing a read-back joins its copy's hotspot: what
      // the user wrote is the read-back (the copy blocks when it goes to
      // pageable memory, the synchronize when it goes to pinned memory).
      const uint16_t api_id = completes ? completes->copy.api : c.api;
      const ApiInfo& hot_api = t.Api(api_id);
      const bool explicit_sync = hot_api.category == trace::ApiCategory::kSync;
      auto key = std::make_tuple(api_id, explicit_sync, r.site.file, r.site.line, r.site.function);
      auto [hit_it, fresh] = index_.try_emplace(key, out_.size());
      const size_t h_at = hit_it->second;
      if (fresh) {
        Hotspot h;
        h.api = hot_api.name;
        h.explicit_sync = explicit_sync;
        h.site = r.site;
        h.stack = r.frames;
        out_.push_back(std::move(h));
        Extra x;
        x.api_direction = static_cast<uint16_t>(hot_api.flags & (trace::kApiHostToDev | trace::kApiDevToHost));
        extra_.push_back(x);
      }
      Extra& x = extra_[h_at];
      if (completes) {
        x.completes_copy = true;
        x.max_bytes = std::max(x.max_bytes, completes->copy.bytes);
        add_op_copy(x, completes->copy.has_ops, completes->copy.op);
      }
      // The steps it hit: calls come in time order, so a step is new when
      // it differs from the last one counted.
      const int32_t step = StepOfHostTime(plan_, c.enter_ns, &step_hint_);
      Hotspot& h = out_[h_at];
      if (step >= 0 && step != x.last_step) {
        x.last_step = step;
        ++h.steps;
      }
      if (hotspot_of_call != nullptr) (*hotspot_of_call)[c.index] = static_cast<int32_t>(h_at);
      // A read-back is its copy and the synchronize completing it: one hit,
      // whichever of them (or both) blocked.
      const bool same_copy = completes && completes->counted;
      counted = api.category == trace::ApiCategory::kCopy;
      x.max_bytes = std::max(x.max_bytes, c.bytes);
      if (api.category == trace::ApiCategory::kCopy) add_op_copy(x, c.has_ops, c.op);
      if (!same_copy) ++h.count;
      if (r.site_lost) ++h.sites_lost;
      // Calls of several threads may overlap: saturate rather than overflow
      // on absurd (hostile) durations.
      h.blocked_ns = AddCapped(h.blocked_ns, blocked);
      h.idle_caused_ns += caused;
    }
    if (c.host_copy) pending_[c.tid] = {c, counted};
  }
}

std::vector<Hotspot> HotspotFinder::Finish(const std::vector<ApiInfo>& apis,
                                           std::vector<int32_t>* hotspot_of_call) {
  std::vector<Hotspot>& out = out_;
  for (size_t k = 0; k < out.size(); ++k) {
    Hotspot& h = out[k];
    const Extra& x = extra_[k];
    const uint16_t direction = x.api_direction | x.op_direction;
    h.fingerprint = HotspotFingerprint(h.api, h.explicit_sync, h.site);
    const ApiInfo* info = nullptr;
    for (const ApiInfo& a : apis) {
      if (a.name == h.api) {
        info = &a;
        break;
      }
    }
    if (x.completes_copy && (direction & trace::kApiDevToHost) != 0 && x.max_bytes > kScalarReadBytes) {
      h.suggestion =
          "device-to-host read-back waits for the device: keep the result on the GPU, or copy it "
          "with non_blocking=True into pinned memory and read it a step later (after an event)";
      continue;
    }
    h.suggestion = HotspotSuggestion(h.api, info ? info->category : trace::ApiCategory::kOther,
                                     info ? info->flags : 0, direction, x.max_bytes);
  }
  std::vector<int32_t> order(out.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int32_t>(k);
  std::stable_sort(order.begin(), order.end(), [&out](int32_t x, int32_t y) {
    const Hotspot& a = out[x];
    const Hotspot& b = out[y];
    return std::tie(b.idle_caused_ns, b.blocked_ns, b.count) <
           std::tie(a.idle_caused_ns, a.blocked_ns, a.count);
  });
  std::vector<Hotspot> sorted;
  sorted.reserve(out.size());
  std::vector<int32_t> rank(out.size());
  for (size_t k = 0; k < order.size(); ++k) {
    rank[order[k]] = static_cast<int32_t>(k);
    sorted.push_back(std::move(out[order[k]]));
  }
  if (hotspot_of_call != nullptr) {
    for (int32_t& h : *hotspot_of_call) {
      if (h >= 0) h = rank[h];
    }
  }
  out.clear();
  extra_.clear();
  index_.clear();
  return sorted;
}

std::vector<Hotspot> FindHotspots(const Timeline& t, const StepPlan& plan,
                                  const std::vector<CallClass>& classes,
                                  const IdleCaused& idle_caused,
                                  const AttributionOptions& options,
                                  Symbolizer* symbolizer,
                                  std::vector<int32_t>* hotspot_of_call) {
  if (hotspot_of_call != nullptr) hotspot_of_call->assign(t.calls.size(), -1);
  HotspotFinder finder(plan, options, symbolizer);
  finder.Add(t, classes, 0, t.calls.size(), [&](size_t i) { return idle_caused.Get(i); },
             hotspot_of_call);
  return finder.Finish(t.apis, hotspot_of_call);
}

}  // namespace stallscope::analyzer
