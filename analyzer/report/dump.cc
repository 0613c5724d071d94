// `stallscope dump` (see dump.h).
#include "analyzer/report/dump.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {

std::string Printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", ch);
    } else if (ch == '\\' || ch == '"') {
      out.push_back('\\');
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back(static_cast<char>(ch));
    }
  }
  return out;
}

std::string RenderDumpText(const Timeline& t) {
  struct Line {
    int64_t t;
    std::string text;
  };
  std::vector<Line> lines;
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const ApiCall& c = t.calls[i];
    const CallInfo& info = t.call_info[i];
    lines.push_back({c.enter_ns, absl::StrFormat("call %d tid %d %s [%d, %d) %d ns corr %d stream 0x%x "
                                                 "stack %d python_stack %d result %d ops %d",
                                                 i, c.tid, Printable(t.Api(c.api).name), c.enter_ns, c.exit_ns,
                                                 c.exit_ns - c.enter_ns, info.correlation, info.stream,
                                                 info.stack, info.python_stack, info.result,
                                                 info.op_count)});
  }
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const DeviceOp& op = t.ops[i];
    const OpInfo& info = t.op_info[i];
    lines.push_back({op.start_ns,
                     absl::StrFormat("op %d kind %d %s [%d, %d) %d ns device %d stream %d call %d",
                                     i, static_cast<int>(op.kind), Printable(t.String(info.name)),
                                     op.start_ns, op.end_ns, op.end_ns - op.start_ns, op.device,
                                     info.stream, op.call)});
  }
  for (const NcclCall& n : t.nccl) {
    const ApiCall* c = n.call >= 0 ? &t.calls[static_cast<size_t>(n.call)] : nullptr;
    const CallInfo* info = n.call >= 0 ? &t.call_info[static_cast<size_t>(n.call)] : nullptr;
    lines.push_back(
        {n.enter_ns,
         absl::StrFormat("nccl %s call %d api %s tid %d comm 0x%016x rank %d nranks %d seq %d "
                         "count %d bytes %d datatype %d op %d peer %d stream 0x%x corr %d "
                         "group_depth %d flags 0x%x",
                         NcclKindName(n.kind), n.call, c ? Printable(t.Api(c->api).name) : "?", n.tid,
                         n.comm, n.rank, n.nranks, n.seq, n.count, info ? info->bytes : 0, n.datatype,
                         n.op, n.peer, info ? info->stream : 0, n.correlation, n.group_depth,
                         n.flags)});
  }
  for (const NvtxRange& r : t.ranges) {
    lines.push_back({r.start_ns, absl::StrFormat("range tid %d \"%s\" [%d, %d) depth %d%s", r.tid,
                                                 Printable(t.String(r.name)), r.start_ns,
                                                 r.end_ns, r.depth,
                                                 r.explicit_step ? " explicit-step" : "")});
  }
  std::stable_sort(lines.begin(), lines.end(),
                   [](const Line& a, const Line& b) { return a.t < b.t; });
  std::string out;
  if (t.rank.known) {
    absl::StrAppendFormat(&out, "rank %d local_rank %d world_size %d local_world_size %d host %s source %u\n",
                          t.rank.rank, t.rank.local_rank, t.rank.world_size, t.rank.local_world_size,
                          Printable(t.rank.host), static_cast<unsigned>(t.rank.source));
  }
  for (const Line& l : lines) absl::StrAppend(&out, l.text, "\n");
  for (const Diagnostic& d : t.diagnostics) {
    absl::StrAppendFormat(&out, "diagnostic %s count %d %s\n", DiagName(d.id), d.count, Printable(d.message));
  }
  return out;
}

namespace {

using Json = nlohmann::ordered_json;

// A Python stack's frames, innermost first: [file, function, line].
Json PythonFrames(const Timeline& t, uint32_t id) {
  Json frames = Json::array();
  auto it = t.stacks.find(id);
  if (it == t.stacks.end()) return frames;
  const StackRef& s = it->second;
  for (uint32_t k = 0; k < s.python_depth; ++k) {
    const Frame f = t.PythonFrame(size_t{s.python_offset} + 2 * size_t{k});
    frames.push_back(Json::array({f.file, f.function, f.line}));
  }
  return frames;
}

}  // namespace

std::string RenderDumpJson(const Timeline& t) {
  Json j;
  j["schema"] = "stallscope.dump/1";
  j["path"] = t.path;
  j["pid"] = t.header.pid;
  j["ppid"] = t.header.ppid;
  j["host"] = t.host;
  if (t.rank.known) {
    j["rank"] = {{"rank", t.rank.rank},
                 {"local_rank", t.rank.local_rank},
                 {"world_size", t.rank.world_size},
                 {"local_world_size", t.rank.local_world_size},
                 {"host", t.rank.host},
                 {"source", static_cast<unsigned>(t.rank.source)}};
  } else {
    j["rank"] = nullptr;
  }
  std::vector<std::pair<uint32_t, std::string>> threads(t.thread_names.begin(), t.thread_names.end());
  std::sort(threads.begin(), threads.end());
  Json& th = j["threads"] = Json::array();
  for (const auto& [tid, name] : threads) th.push_back({{"tid", tid}, {"name", name}});
  Json& calls = j["calls"] = Json::array();
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const ApiCall& c = t.calls[i];
    const CallInfo& info = t.call_info[i];
    Json call = {{"tid", c.tid},
                 {"api", t.Api(c.api).name},
                 {"enter_ns", c.enter_ns},
                 {"exit_ns", c.exit_ns},
                 {"flags", c.flags},
                 {"result", info.result},
                 {"correlation", info.correlation},
                 {"stream", info.stream},
                 {"bytes", info.bytes},
                 {"ops", info.op_count},
                 {"stack", info.stack},
                 {"python_stack", info.python_stack}};
    if (info.python_stack != 0) call["python_frames"] = PythonFrames(t, info.python_stack);
    calls.push_back(std::move(call));
  }
  Json& ops = j["ops"] = Json::array();
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const DeviceOp& op = t.ops[i];
    const OpInfo& info = t.op_info[i];
    ops.push_back({{"kind", static_cast<int>(op.kind)},
                   {"name", t.String(info.name)},
                   {"start_ns", op.start_ns},
                   {"end_ns", op.end_ns},
                   {"device", op.device},
                   {"stream", info.stream},
                   {"call", op.call}});
  }
  Json& nccl = j["nccl"] = Json::array();
  for (const NcclCall& n : t.nccl) {
    nccl.push_back({{"kind", NcclKindName(n.kind)}, {"enter_ns", n.enter_ns}, {"tid", n.tid},
                    {"comm", n.comm}, {"rank", n.rank}, {"nranks", n.nranks}, {"seq", n.seq},
                    {"count", n.count}, {"datatype", n.datatype}, {"op", n.op}, {"peer", n.peer},
                    {"correlation", n.correlation}, {"group_depth", n.group_depth}, {"flags", n.flags},
                    {"call", n.call}});
  }
  Json& nvtx = j["nvtx"] = Json::array();
  for (const NvtxEvent& e : t.nvtx) {
    nvtx.push_back({{"type", static_cast<int>(e.type)}, {"ns", e.ns}, {"tid", e.tid},
                    {"range_id", e.range_id}, {"domain", e.domain}, {"name", t.String(e.name)}});
  }
  Json& ranges = j["ranges"] = Json::array();
  for (const NvtxRange& r : t.ranges) {
    ranges.push_back({{"tid", r.tid}, {"name", t.String(r.name)}, {"start_ns", r.start_ns},
                      {"end_ns", r.end_ns}, {"depth", r.depth}, {"explicit_step", r.explicit_step}});
  }
  Json& timing = j["device_timing"] = Json::array();
  for (const DeviceTimingTurn& d : t.device_timing)
    timing.push_back({{"ns", d.ns}, {"on", d.on}, {"every", d.every}});
  Json& diags = j["diagnostics"] = Json::array();
  for (const Diagnostic& d : t.diagnostics) {
    diags.push_back({{"name", DiagName(d.id)}, {"count", d.count}, {"message", d.message}});
  }
  // Names from a trace are bytes: invalid UTF-8 becomes U+FFFD.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace stallscope::analyzer
