// Budget parsing, the checks and the three renderings of an audit (see
// audit.h). TOML goes through toml++ and JSON through nlohmann; both are
// turned into one JSON tree with the line of each key, so the checks on keys,
// types and ranges are written once.
#include "analyzer/compare/audit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analyzer/analyze/questions.h"
#include "analyzer/model/causes_json.h"
#include "analyzer/model/format.h"
#include "analyzer/model/output_file.h"
#include "nlohmann/json.hpp"
#include "toml++/toml.h"

namespace stallscope::analyzer {
namespace {

using Json = nlohmann::json;

// A parsed budget document: the tree and the line of each key ("key" or
// "table.key"; absent when unknown).
struct Doc {
  Json root;
  absl::flat_hash_map<std::string, int> lines;
};

std::string Where(const std::string& path, int line) {
  return line > 0 ? absl::StrFormat("%s:%d", path, line) : path;
}

absl::Status Invalid(const std::string& path, int line, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(Where(path, line), ": ", std::string(message)));
}

// ---- TOML ----

absl::StatusOr<Json> TomlToJson(const toml::node& n, const std::string& path,
                                const std::string& key) {
  const int line = static_cast<int>(n.source().begin.line);
  if (n.is_integer()) return Json(n.as_integer()->get());
  if (n.is_floating_point()) return Json(n.as_floating_point()->get());
  if (n.is_boolean()) return Json(n.as_boolean()->get());
  if (n.is_string()) return Json(n.as_string()->get());
  if (n.is_array()) {
    Json out = Json::array();
    for (const toml::node& e : *n.as_array()) {
      auto v = TomlToJson(e, path, key);
      if (!v.ok()) return v.status();
      out.push_back(std::move(*v));
    }
    return out;
  }
  if (n.is_table()) {
    Json out = Json::object();
    for (auto&& [k, v] : *n.as_table()) {
      auto j = TomlToJson(v, path, absl::StrCat(key, ".", std::string(k.str())));
      if (!j.ok()) return j.status();
      out[std::string(k.str())] = std::move(*j);
    }
    return out;
  }
  return Invalid(path, line, absl::StrCat(key, ": dates and times are not budget values"));
}

absl::StatusOr<Doc> ParseToml(std::string_view text, const std::string& path) {
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: %s", path, e.source().begin.line,
                                                      e.source().begin.column, e.description()));
  }
  Doc doc;
  doc.root = Json::object();
  for (auto&& [k, v] : table) {
    const std::string key(k.str());
    doc.lines[key] = static_cast<int>(k.source().begin.line);
    if (const toml::table* sub = v.as_table()) {
      for (auto&& [k2, v2] : *sub) {
        doc.lines[absl::StrCat(key, ".", std::string(k2.str()))] =
            static_cast<int>(k2.source().begin.line);
      }
    }
    auto j = TomlToJson(v, path, key);
    if (!j.ok()) return j.status();
    doc.root[key] = std::move(*j);
  }
  return doc;
}

// ---- JSON ----

int LineAt(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<int>(std::count(text.begin(),
                                         text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

// The line of the first `"key"` at or after `from` (nlohmann keeps no
// positions); 0 when not found.
int JsonKeyLine(std::string_view text, std::string_view key, size_t from, size_t* at) {
  const std::string quoted = absl::StrCat("\"", std::string(key), "\"");
  const size_t p = text.find(quoted, from);
  if (p == std::string_view::npos) return 0;
  if (at != nullptr) *at = p;
  return LineAt(text, p);
}

absl::StatusOr<Doc> ParseJsonDoc(std::string_view text, const std::string& path) {
  Doc doc;
  try {
    doc.root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based: the byte at which the parser stopped.
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..."
    if (const size_t colon = what.find(": "); colon != std::string::npos)
      what = what.substr(colon + 2);
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s", path, LineAt(text, at), what));
  }
  if (!doc.root.is_object()) return Invalid(path, 1, "a budget is a JSON object of limits");
  for (auto& [key, value] : doc.root.items()) {
    size_t at = 0;
    doc.lines[key] = JsonKeyLine(text, key, 0, &at);
    if (value.is_object()) {
      for (auto& [k2, v2] : value.items()) {
        doc.lines[absl::StrCat(key, ".", k2)] = JsonKeyLine(text, k2, at, nullptr);
      }
    }
  }
  return doc;
}

// ---- the budget's keys ----

constexpr const char* kKeys[] = {
    "schema",
    "min_steps",
    "max_syncs_per_step",
    "max_gpu_idle_share",
    "max_idle_share_by_cause",
    "max_step_time_p95_ms",
    "max_hotspot_idle_caused_ms",
    "forbidden_fingerprints",
    "allowed_fingerprints",
    "no_new_hotspots",
    "max_rank_wait_share",
    "max_stragglers",
};

bool IsFingerprint(std::string_view s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

class BudgetReader {
 public:
  BudgetReader(const Doc& doc, const std::string& path) : doc_(doc), path_(path) {}

  absl::StatusOr<Budget> Read() {
    Budget b;
    b.path = path_;
    // Unknown keys first: a misspelt limit must never pass silently.
    for (auto& [key, value] : doc_.root.items()) {
      if (std::find_if(std::begin(kKeys), std::end(kKeys),
                       [&](const char* k) { return key == k; }) == std::end(kKeys)) {
        return Error(
            key, absl::StrFormat("unknown key '%s' (known: %s)", key, absl::StrJoin(kKeys, ", ")));
      }
    }
    const Json& r = doc_.root;
    if (r.contains("schema")) {
      if (!r["schema"].is_string() || r["schema"] != kBudgetSchema) {
        return Error("schema", absl::StrFormat("schema: expected \"%s\"", kBudgetSchema));
      }
    }
    if (r.contains("min_steps")) {
      const Json& v = r["min_steps"];
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return Error("min_steps", "min_steps: expected a whole number >= 0");
      }
      b.min_steps = v.get<int64_t>();
    }
    if (auto st = Number("max_syncs_per_step", 0, HUGE_VAL, &b.max_syncs_per_step); !st.ok())
      return st;
    if (auto st = Number("max_gpu_idle_share", 0, 1, &b.max_gpu_idle_share); !st.ok()) return st;
    if (auto st = Number("max_step_time_p95_ms", 0, HUGE_VAL, &b.max_step_time_p95_ms); !st.ok()) {
      return st;
    }
    if (auto st = Number("max_hotspot_idle_caused_ms", 0, HUGE_VAL, &b.max_hotspot_idle_caused_ms);
        !st.ok()) {
      return st;
    }
    if (r.contains("max_idle_share_by_cause")) {
      const Json& t = r["max_idle_share_by_cause"];
      if (!t.is_object()) {
        return Error("max_idle_share_by_cause",
                     "max_idle_share_by_cause: expected a table of cause = share");
      }
      for (auto& [cause, value] : t.items()) {
        int index = -1;
        for (int c = 0; c < kNumCauses; ++c) {
          if (cause == CauseName(CauseAt(c))) index = c;
        }
        const std::string key = absl::StrCat("max_idle_share_by_cause.", cause);
        if (index < 0) {
          std::vector<std::string> causes;
          for (int c = 0; c < kNumCauses; ++c) causes.push_back(CauseName(CauseAt(c)));
          return Error(key, absl::StrFormat("unknown key '%s' (causes: %s)", key,
                                            absl::StrJoin(causes, ", ")));
        }
        if (!value.is_number() || value.get<double>() < 0 || value.get<double>() > 1) {
          return Error(key, absl::StrFormat("%s: expected a number from 0 to 1", key));
        }
        b.max_idle_share_by_cause[index] = value.get<double>();
      }
    }
    if (auto st = Fingerprints("forbidden_fingerprints", &b.forbidden_fingerprints); !st.ok()) {
      return st;
    }
    if (auto st = Fingerprints("allowed_fingerprints", &b.allowed_fingerprints); !st.ok())
      return st;
    if (auto st = Number("max_rank_wait_share", 0, 1, &b.max_rank_wait_share); !st.ok()) {
      return st;
    }
    if (r.contains("max_stragglers")) {
      const Json& v = r["max_stragglers"];
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return Error("max_stragglers", "max_stragglers: expected a whole number >= 0");
      }
      b.max_stragglers = v.get<int64_t>();
    }
    if (r.contains("no_new_hotspots")) {
      if (!r["no_new_hotspots"].is_boolean()) {
        return Error("no_new_hotspots", "no_new_hotspots: expected true or false");
      }
      b.no_new_hotspots = r["no_new_hotspots"].get<bool>();
    }
    return b;
  }

 private:
  absl::Status Error(const std::string& key, std::string_view message) const {
    auto it = doc_.lines.find(key);
    return Invalid(path_, it == doc_.lines.end() ? 0 : it->second, message);
  }

  absl::Status Number(const char* key, double lo, double hi, std::optional<double>* out) const {
    if (!doc_.root.contains(key)) return absl::OkStatus();
    const Json& v = doc_.root[key];
    if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi)) {
      return Error(key, std::isinf(hi)
                            ? absl::StrFormat("%s: expected a number >= %g", key, lo)
                            : absl::StrFormat("%s: expected a number from %g to %g", key, lo, hi));
    }
    *out = v.get<double>();
    return absl::OkStatus();
  }

  absl::Status Fingerprints(const char* key, std::optional<std::vector<std::string>>* out) const {
    if (!doc_.root.contains(key)) return absl::OkStatus();
    const Json& v = doc_.root[key];
    if (!v.is_array()) {
      return Error(key, absl::StrFormat("%s: expected a list of hotspot fingerprints", key));
    }
    std::vector<std::string> list;
    for (const Json& e : v) {
      if (!e.is_string() || !IsFingerprint(e.get<std::string>())) {
        return Error(key, absl::StrFormat("%s: %s is not a hotspot fingerprint (16 lowercase hex "
                                          "digits, as in the report)",
                                          key, e.dump()));
      }
      list.push_back(e.get<std::string>());
    }
    *out = std::move(list);
    return absl::OkStatus();
  }

  const Doc& doc_;
  const std::string& path_;
};

std::string Pct(double share) { return absl::StrFormat("%.1f%%", 100 * share); }

std::string Ms(double ms) { return absl::StrFormat("%.3g ms", ms); }

double ToMs(int64_t ns) { return static_cast<double>(ns) / 1e6; }

double Share(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

std::string Describe(const Hotspot& h) {
  return absl::StrFormat("%s at %s [fingerprint %s]: %d calls, %s blocked, %s GPU idle caused",
                         h.api, SiteName(h.site), h.fingerprint, h.count,
                         FormatDuration(h.blocked_ns), FormatDuration(h.idle_caused_ns));
}

}  // namespace

absl::StatusOr<Budget> ParseBudget(std::string_view text, const std::string& path,
                                   BudgetFormat format) {
  auto doc = format == BudgetFormat::kToml ? ParseToml(text, path) : ParseJsonDoc(text, path);
  if (!doc.ok()) return doc.status();
  return BudgetReader(*doc, path).Read();
}

absl::StatusOr<Budget> LoadBudget(const std::string& path) {
  BudgetFormat format;
  if (std::string_view(path).ends_with(".toml")) {
    format = BudgetFormat::kToml;
  } else if (std::string_view(path).ends_with(".json")) {
    format = BudgetFormat::kJson;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: a budget file ends in .toml or .json", path));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrFormat("%s: %s", path, strerror(errno)));
  }
  std::stringstream s;
  s << f.rdbuf();
  return ParseBudget(s.str(), path, format);
}

std::string SiteName(const Frame& f) {
  if (f.file.empty()) return f.function.empty() ? "<unknown>" : f.function;
  return absl::StrFormat("%s:%d (%s)", f.file, f.line, f.function);
}

RunMetrics ComputeMetrics(const Report& r) {
  RunMetrics m;
  m.steps = static_cast<int64_t>(r.steps.size());
  std::vector<int64_t> spans;
  for (const StepStats& s : r.steps) spans.push_back(s.end_ns - s.start_ns);
  m.gpu_busy_ns = r.totals.gpu_busy_ns;
  m.gpu_idle_ns = r.totals.gpu_idle_ns;
  m.step_time_ns = m.gpu_busy_ns + m.gpu_idle_ns;
  m.gpu_idle_ratio = Share(m.gpu_idle_ns, m.step_time_ns);
  m.idle_by_cause = r.totals.idle_by_cause;
  if (m.steps > 0) {
    m.syncs_per_step = static_cast<double>(r.totals.syncs) / static_cast<double>(m.steps);
    m.launches_per_step = static_cast<double>(r.totals.launches) / static_cast<double>(m.steps);
    std::sort(spans.begin(), spans.end());
    // Nearest rank: the smallest step time that at least 95% of steps do
    // not exceed.
    const auto rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(spans.size())));
    m.step_time_p95_ns = spans[std::max<size_t>(rank, 1) - 1];
  }
  return m;
}

int64_t AuditResult::violations() const {
  int64_t n = 0;
  for (const AuditCheck& c : checks) n += static_cast<int64_t>(c.violations.size());
  return n;
}

AuditResult RunAudit(const Budget& b, const Report& run, const std::string& run_path,
                     const Report* baseline) {
  AuditResult out;
  out.run_path = run_path;
  out.budget_path = b.path;
  out.hotspots = run.hotspots;
  out.ranks = run.ranks;
  out.collectives = run.collectives;
  out.stragglers = run.stragglers;
  const RunMetrics m = ComputeMetrics(run);
  out.metrics = m;
  auto add = [&out](std::string name, std::string summary) -> AuditCheck& {
    out.checks.push_back({std::move(name), std::move(summary), {}});
    return out.checks.back();
  };
  if (b.min_steps) {
    // Sampled device timing: the run's steps are the ones found, of which
    // the report's are the timed.
    const int64_t steps = run.sampled_every != 0 ? run.steps_found : m.steps;
    const std::string sampled =
        run.sampled_every != 0
            ? absl::StrFormat(", %d of them timed (device timing one step in %d)", m.steps, run.sampled_every)
            : "";
    AuditCheck& c =
        add("min_steps", absl::StrFormat("%d steps%s (at least %d)", steps, sampled, *b.min_steps));
    if (steps < *b.min_steps) {
      c.violations.push_back(absl::StrFormat("the run has %d steps%s, fewer than the budget's %d",
                                             steps, sampled, *b.min_steps));
    }
  }
  if (b.max_syncs_per_step) {
    AuditCheck& c =
        add("max_syncs_per_step", absl::StrFormat("%.2f synchronizing calls per step (at most %g)",
                                                  m.syncs_per_step, *b.max_syncs_per_step));
    if (m.syncs_per_step > *b.max_syncs_per_step) {
      c.violations.push_back(absl::StrFormat(
          "%.2f synchronizing calls per step (%d in %d steps) exceed the budget's %g",
          m.syncs_per_step, run.totals.syncs, m.steps, *b.max_syncs_per_step));
    }
  }
  if (b.max_gpu_idle_share) {
    AuditCheck& c = add("max_gpu_idle_share",
                        absl::StrFormat("GPU idle %s of step time (at most %s)",
                                        Pct(m.gpu_idle_ratio), Pct(*b.max_gpu_idle_share)));
    if (m.gpu_idle_ratio > *b.max_gpu_idle_share) {
      c.violations.push_back(
          absl::StrFormat("GPU idle %s of step time (%s of %s) exceeds the budget's %s",
                          Pct(m.gpu_idle_ratio), FormatDuration(m.gpu_idle_ns),
                          FormatDuration(m.step_time_ns), Pct(*b.max_gpu_idle_share)));
    }
  }
  for (int i = 0; i < kNumCauses; ++i) {
    const auto& limit = b.max_idle_share_by_cause[i];
    if (!limit) continue;
    const char* cause = CauseName(CauseAt(i));
    const double share = Share(m.idle_by_cause[i], m.step_time_ns);
    AuditCheck& c = add(absl::StrCat("max_idle_share_by_cause.", cause),
                        absl::StrFormat("GPU idle charged to %s: %s of step time (at most %s)",
                                        cause, Pct(share), Pct(*limit)));
    if (share > *limit) {
      c.violations.push_back(absl::StrFormat(
          "GPU idle charged to %s is %s of step time (%s of %s), over the budget's %s", cause,
          Pct(share), FormatDuration(m.idle_by_cause[i]), FormatDuration(m.step_time_ns),
          Pct(*limit)));
    }
  }
  if (b.max_step_time_p95_ms) {
    AuditCheck& c = add("max_step_time_p95_ms",
                        absl::StrFormat("step time p95 %s (at most %s)",
                                        Ms(ToMs(m.step_time_p95_ns)), Ms(*b.max_step_time_p95_ms)));
    if (ToMs(m.step_time_p95_ns) > *b.max_step_time_p95_ms) {
      c.violations.push_back(
          absl::StrFormat("step time p95 %s over %d steps exceeds the budget's %s",
                          Ms(ToMs(m.step_time_p95_ns)), m.steps, Ms(*b.max_step_time_p95_ms)));
    }
  }
  if (b.max_hotspot_idle_caused_ms) {
    int64_t worst = 0;
    for (const Hotspot& h : run.hotspots) worst = std::max(worst, h.idle_caused_ns);
    AuditCheck& c = add("max_hotspot_idle_caused_ms",
                        absl::StrFormat("largest GPU idle caused by one hotspot %s (at most %s)",
                                        Ms(ToMs(worst)), Ms(*b.max_hotspot_idle_caused_ms)));
    for (const Hotspot& h : run.hotspots) {
      if (ToMs(h.idle_caused_ns) > *b.max_hotspot_idle_caused_ms) {
        c.violations.push_back(absl::StrFormat("hotspot %s: over the budget's %s of idle caused",
                                               Describe(h), Ms(*b.max_hotspot_idle_caused_ms)));
      }
    }
  }
  if (b.forbidden_fingerprints) {
    const absl::flat_hash_set<std::string> forbidden(b.forbidden_fingerprints->begin(),
                                                     b.forbidden_fingerprints->end());
    AuditCheck& c = add("forbidden_fingerprints",
                        absl::StrFormat("no forbidden hotspot (%d listed)", forbidden.size()));
    for (const Hotspot& h : run.hotspots) {
      if (forbidden.contains(h.fingerprint)) {
        c.violations.push_back(absl::StrCat("forbidden hotspot ", Describe(h)));
      }
    }
  }
  if (b.allowed_fingerprints) {
    const absl::flat_hash_set<std::string> allowed(b.allowed_fingerprints->begin(),
                                                   b.allowed_fingerprints->end());
    AuditCheck& c = add("allowed_fingerprints",
                        absl::StrFormat("only allowed hotspots (%d listed)", allowed.size()));
    for (const Hotspot& h : run.hotspots) {
      if (!allowed.contains(h.fingerprint)) {
        c.violations.push_back(absl::StrCat("hotspot not in the allowed list: ", Describe(h)));
      }
    }
  }
  if (b.max_rank_wait_share) {
    const double share = run.collectives.wait_share;
    AuditCheck& c = add("max_rank_wait_share",
                        absl::StrFormat("ranks waiting for the last one %s of step time (at most %s)",
                                        Pct(share), Pct(*b.max_rank_wait_share)));
    if (run.ranks.empty()) {
      c.violations.push_back("not a distributed run: the report has no ranks");
    } else if (share > *b.max_rank_wait_share) {
      c.violations.push_back(absl::StrFormat(
          "over %d ranks, %s of step time waiting for the last rank at collectives exceeds the "
          "budget's %s",
          run.ranks.size(), Pct(share), Pct(*b.max_rank_wait_share)));
    }
  }
  if (b.max_stragglers) {
    AuditCheck& c = add("max_stragglers", absl::StrFormat("%d straggler ranks (at most %d)",
                                                          run.stragglers.size(), *b.max_stragglers));
    if (run.ranks.empty()) {
      c.violations.push_back("not a distributed run: the report has no ranks");
    } else if (static_cast<int64_t>(run.stragglers.size()) > *b.max_stragglers) {
      for (const Straggler& st : run.stragglers) {
        c.violations.push_back(absl::StrFormat(
            "straggler rank %d: last at %d collectives, %s of waiting caused (own idle mostly %s)",
            st.rank, st.times_last, FormatDuration(st.wait_caused_ns), st.before_cause));
      }
    }
  }
  if (b.no_new_hotspots) {
    AuditCheck& c = add("no_new_hotspots", "no hotspot that the baseline run does not have");
    if (baseline == nullptr) {
      c.violations.push_back("no baseline run given (--baseline DIR)");
    } else {
      // Matched by fingerprint, as `compare` does.
      absl::flat_hash_set<std::string> known;
      for (const Hotspot& h : baseline->hotspots) known.insert(h.fingerprint);
      for (const Hotspot& h : run.hotspots) {
        if (!known.contains(h.fingerprint)) {
          c.violations.push_back(absl::StrCat("new hotspot (not in the baseline) ", Describe(h)));
        }
      }
    }
  }
  return out;
}

std::string RenderAuditText(const AuditResult& r) {
  std::string s = absl::StrFormat("stallscope audit of %s (%d steps) against %s\n", r.run_path,
                                  r.metrics.steps, r.budget_path);
  int failed = 0;
  for (const AuditCheck& c : r.checks) {
    const bool ok = c.violations.empty();
    failed += !ok;
    absl::StrAppendFormat(&s, "  %s  %-38s %s\n", ok ? "ok  " : "FAIL", c.name, c.summary);
    for (const std::string& v : c.violations) absl::StrAppendFormat(&s, "        - %s\n", v);
  }
  if (r.checks.empty()) s += "  (the budget sets no limit)\n";
  absl::StrAppendFormat(&s, "%s: %d of %d checks failed, %d violation%s\n",
                        failed == 0 ? "within budget" : "budget exceeded", failed, r.checks.size(),
                        r.violations(), r.violations() == 1 ? "" : "s");
  return s;
}

std::string RenderAuditJson(const AuditResult& r) {
  nlohmann::ordered_json j;
  j["schema"] = "stallscope.audit/1";
  j["run"] = r.run_path;
  j["budget"] = r.budget_path;
  j["within_budget"] = r.violations() == 0;
  j["violations"] = r.violations();
  const RunMetrics& m = r.metrics;
  j["metrics"] = {{"steps", m.steps},
                  {"step_time_ns", m.step_time_ns},
                  {"step_time_p95_ns", m.step_time_p95_ns},
                  {"gpu_busy_ns", m.gpu_busy_ns},
                  {"gpu_idle_ns", m.gpu_idle_ns},
                  {"gpu_idle_ratio", m.gpu_idle_ratio},
                  {"idle_by_cause", CausesJson(m.idle_by_cause)},
                  {"syncs_per_step", m.syncs_per_step},
                  {"launches_per_step", m.launches_per_step}};
  j["checks"] = nlohmann::ordered_json::array();
  for (const AuditCheck& c : r.checks) {
    j["checks"].push_back({{"name", c.name},
                           {"summary", c.summary},
                           {"ok", c.violations.empty()},
                           {"violations", c.violations}});
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string XmlEscape(std::string_view in) {
  std::string s;
  s.reserve(in.size());
  for (const char ch : in) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': s += "&amp;"; break;
      case '<': s += "&lt;"; break;
      case '>': s += "&gt;"; break;
      case '"': s += "&quot;"; break;
      case '\'': s += "&apos;"; break;
      case '\n': s += "&#10;"; break;
      case '\t': s += "&#9;"; break;
      case '\r': s += "&#13;"; break;
      default:
        // Other control characters are not allowed in XML 1.0, escaped or not.
        s += c < 0x20 ? '?' : ch;
    }
  }
  return s;
}

std::string RenderJunit(const AuditResult& r) {
  int failures = 0;
  for (const AuditCheck& c : r.checks) failures += !c.violations.empty();
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppendFormat(&s,
                        "<testsuite name=\"stallscope audit\" tests=\"%d\" failures=\"%d\" "
                        "errors=\"0\" skipped=\"0\">\n",
                        r.checks.size(), failures);
  absl::StrAppendFormat(&s,
                        "  <properties>\n"
                        "    <property name=\"run\" value=\"%s\"/>\n"
                        "    <property name=\"budget\" value=\"%s\"/>\n"
                        "    <property name=\"steps\" value=\"%d\"/>\n"
                        "  </properties>\n",
                        XmlEscape(r.run_path), XmlEscape(r.budget_path), r.metrics.steps);
  for (const AuditCheck& c : r.checks) {
    absl::StrAppendFormat(&s, "  <testcase classname=\"stallscope.audit\" name=\"%s\"",
                          XmlEscape(c.name));
    if (c.violations.empty()) {
      absl::StrAppendFormat(&s, ">\n    <system-out>%s</system-out>\n  </testcase>\n",
                            XmlEscape(c.summary));
      continue;
    }
    absl::StrAppendFormat(
        &s,
        ">\n    <failure type=\"budget\" message=\"%s\">%s</failure>\n"
        "  </testcase>\n",
        XmlEscape(absl::StrJoin(c.violations, "; ")),
        XmlEscape(absl::StrCat(c.summary, "\n", absl::StrJoin(c.violations, "\n"))));
  }
  s += "</testsuite>\n";
  return s;
}

std::string PrometheusLabelEscape(std::string_view in) {
  std::string s;
  for (const char c : in) {
    if (c == '\\') {
      s += "\\\\";
    } else if (c == '"') {
      s += "\\\"";
    } else if (c == '\n') {
      s += "\\n";
    } else {
      s += c;
    }
  }
  return s;
}

namespace {

void Family(std::string* s, const char* name, const char* help) {
  absl::StrAppendFormat(s, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

std::string Num(double v) { return absl::StrFormat("%.12g", v); }

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace

std::string RenderPrometheus(const AuditResult& r) {
  const RunMetrics& m = r.metrics;
  std::string s;
  Family(&s, "stallscope_budget_violations", "Budget violations found by stallscope audit.");
  absl::StrAppendFormat(&s, "stallscope_budget_violations %d\n", r.violations());
  Family(&s, "stallscope_budget_check_violations", "Violations of one budget check.");
  for (const AuditCheck& c : r.checks) {
    absl::StrAppendFormat(&s, "stallscope_budget_check_violations{check=\"%s\"} %d\n",
                          PrometheusLabelEscape(c.name), c.violations.size());
  }
  Family(&s, "stallscope_steps", "Training steps in the audited run.");
  absl::StrAppendFormat(&s, "stallscope_steps %d\n", m.steps);
  Family(&s, "stallscope_step_time_seconds", "Time of the steps on the device timeline, summed.");
  absl::StrAppendFormat(&s, "stallscope_step_time_seconds %s\n", Num(Seconds(m.step_time_ns)));
  Family(&s, "stallscope_step_time_p95_seconds",
         "95th percentile of the step time (nearest rank).");
  absl::StrAppendFormat(&s, "stallscope_step_time_p95_seconds %s\n",
                        Num(Seconds(m.step_time_p95_ns)));
  Family(&s, "stallscope_gpu_busy_seconds", "GPU busy time in the steps.");
  absl::StrAppendFormat(&s, "stallscope_gpu_busy_seconds %s\n", Num(Seconds(m.gpu_busy_ns)));
  Family(&s, "stallscope_gpu_idle_seconds", "GPU idle time in the steps.");
  absl::StrAppendFormat(&s, "stallscope_gpu_idle_seconds %s\n", Num(Seconds(m.gpu_idle_ns)));
  Family(&s, "stallscope_gpu_idle_ratio", "GPU idle time over step time.");
  absl::StrAppendFormat(&s, "stallscope_gpu_idle_ratio %s\n", Num(m.gpu_idle_ratio));
  Family(&s, "stallscope_idle_seconds", "GPU idle time in the steps by cause.");
  for (int c = 0; c < kNumCauses; ++c) {
    absl::StrAppendFormat(&s, "stallscope_idle_seconds{cause=\"%s\"} %s\n", CauseName(CauseAt(c)),
                          Num(Seconds(m.idle_by_cause[c])));
  }
  Family(&s, "stallscope_syncs_per_step", "Synchronizing calls per step (mean).");
  absl::StrAppendFormat(&s, "stallscope_syncs_per_step %s\n", Num(m.syncs_per_step));
  Family(&s, "stallscope_launches_per_step", "Kernel launches per step (mean).");
  absl::StrAppendFormat(&s, "stallscope_launches_per_step %s\n", Num(m.launches_per_step));
  Family(&s, "stallscope_hotspot_idle_caused_seconds",
         "GPU idle caused by one forced-sync hotspot (call site).");
  for (const Hotspot& h : r.hotspots) {
    absl::StrAppendFormat(&s,
                          "stallscope_hotspot_idle_caused_seconds{fingerprint=\"%s\",site=\"%s\","
                          "api=\"%s\"} %s\n",
                          PrometheusLabelEscape(h.fingerprint),
                          PrometheusLabelEscape(SiteName(h.site)), PrometheusLabelEscape(h.api),
                          Num(Seconds(h.idle_caused_ns)));
  }
  Family(&s, "stallscope_hotspot_calls", "Calls of one forced-sync hotspot (call site).");
  for (const Hotspot& h : r.hotspots) {
    absl::StrAppendFormat(
        &s, "stallscope_hotspot_calls{fingerprint=\"%s\",site=\"%s\",api=\"%s\"} %d\n",
        PrometheusLabelEscape(h.fingerprint), PrometheusLabelEscape(SiteName(h.site)),
        PrometheusLabelEscape(h.api), h.count);
  }
  if (!r.ranks.empty()) {
    const CollectivesSummary& c = r.collectives;
    Family(&s, "stallscope_ranks", "Ranks in the report.");
    absl::StrAppendFormat(&s, "stallscope_ranks %d\n", r.ranks.size());
    Family(&s, "stallscope_comm_share", "NCCL kernel time over step time (mean over ranks).");
    absl::StrAppendFormat(&s, "stallscope_comm_share %s\n", Num(c.comm_share));
    Family(&s, "stallscope_comm_overlap", "Compute during communication over communication.");
    absl::StrAppendFormat(&s, "stallscope_comm_overlap %s\n", Num(c.overlap));
    Family(&s, "stallscope_rank_wait_share",
           "Time ranks wait for the last rank at collectives over step time.");
    absl::StrAppendFormat(&s, "stallscope_rank_wait_share %s\n", Num(c.wait_share));
    Family(&s, "stallscope_stragglers", "Straggler ranks.");
    absl::StrAppendFormat(&s, "stallscope_stragglers %d\n", r.stragglers.size());
    Family(&s, "stallscope_rank_wait_caused_seconds",
           "Waiting a rank caused the others by arriving last at collectives.");
    for (const RankRow& k : r.ranks) {
      absl::StrAppendFormat(&s, "stallscope_rank_wait_caused_seconds{rank=\"%d\",host=\"%s\"} %s\n",
                            k.rank, PrometheusLabelEscape(k.host), Num(Seconds(k.wait_caused_ns)));
    }
  }
  return s;
}

absl::Status WriteMetricsFile(const std::string& path, std::string_view text) {
  constexpr std::string_view kOurs = "# HELP stallscope_";
  struct stat st;
  const bool replace = lstat(path.c_str(), &st) == 0;
  if (replace) {
    if (!S_ISREG(st.st_mode)) {
      return absl::AlreadyExistsError(
          absl::StrFormat("%s: exists and is not a regular file; not replaced", path));
    }
    char head[32] = {};
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, head, kOurs.size()) : -1;
    if (fd >= 0) close(fd);
    if (n != static_cast<ssize_t>(kOurs.size()) || std::string_view(head, kOurs.size()) != kOurs) {
      return absl::AlreadyExistsError(
          absl::StrFormat("%s: exists and is not a stallscope metrics file; not replaced", path));
    }
  } else if (errno != ENOENT) {
    return absl::PermissionDeniedError(absl::StrFormat("%s: %s", path, strerror(errno)));
  }
  // Never named *.prom while it is written (the textfile collector must not
  // read it half-written).
  return WriteThroughTemporary(path, text, replace);
}

}  // namespace stallscope::analyzer
