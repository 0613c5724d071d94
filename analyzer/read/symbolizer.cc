// libdw-backed symbolizer (see symbolizer.h). Modules are reported to libdw
// lazily, the first time one of their addresses is looked up.
#include "analyzer/read/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_format.h"
#include "analyzer/model/format.h"

namespace stallscope::analyzer {
namespace {

char* g_debuginfo_path = nullptr;
const Dwfl_Callbacks kOfflineCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &g_debuginfo_path,
};

std::string Demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string s(out);
  std::free(out);
  return s;
}

}  // namespace

struct Symbolizer::State {
  Dwfl* dwfl = nullptr;
  // Per module: tried to report yet, and the libdw handle (null on failure).
  std::vector<bool> tried;
  std::vector<Dwfl_Module*> handles;
};

Symbolizer::Symbolizer(std::vector<Module> modules)
    : modules_(std::move(modules)), state_(std::make_unique<State>()) {
  std::sort(modules_.begin(), modules_.end(),
            [](const Module& a, const Module& b) { return a.low < b.low; });
  state_->dwfl = dwfl_begin(&kOfflineCallbacks);
  state_->tried.assign(modules_.size(), false);
  state_->handles.assign(modules_.size(), nullptr);
}

Symbolizer::~Symbolizer() {
  if (state_->dwfl != nullptr) dwfl_end(state_->dwfl);
}

const Module* Symbolizer::FindModule(uint64_t pc) const {
  auto it = std::upper_bound(modules_.begin(), modules_.end(), pc,
                             [](uint64_t p, const Module& m) { return p < m.low; });
  if (it == modules_.begin()) return nullptr;
  --it;
  return pc < it->high ? &*it : nullptr;
}

const Frame& Symbolizer::Symbolize(uint64_t pc) {
  auto cached = cache_.find(pc);
  if (cached != cache_.end()) return cached->second;
  Frame f;
  const Module* m = FindModule(pc);
  if (m == nullptr) {
    f.function = absl::StrFormat("0x%x", pc);
    return cache_.emplace(pc, std::move(f)).first->second;
  }
  size_t index = static_cast<size_t>(m - modules_.data());
  f.module = m->path.empty() ? "<main>" : BaseName(m->path);
  f.function = absl::StrFormat("%s+0x%x", f.module, pc - m->base);
  if (state_->dwfl != nullptr && !m->path.empty() && m->path[0] == '/') {
    if (!state_->tried[index]) {
      state_->tried[index] = true;
      dwfl_report_begin_add(state_->dwfl);
      state_->handles[index] = dwfl_report_elf(state_->dwfl, f.module.c_str(),
                                               m->path.c_str(), -1, m->base, true);
      dwfl_report_end(state_->dwfl, nullptr, nullptr);
      // A file rebuilt since the trace was recorded would give wrong lines:
      // compare build ids when the trace has one.
      if (state_->handles[index] != nullptr && !m->build_id.empty()) {
        const unsigned char* bits = nullptr;
        GElf_Addr vaddr = 0;
        const int n = dwfl_module_build_id(state_->handles[index], &bits, &vaddr);
        if (n > 0 && std::string_view(reinterpret_cast<const char*>(bits),
                                      static_cast<size_t>(n)) != m->build_id) {
          state_->handles[index] = nullptr;
          changed_.push_back(m->path);
        }
      }
    }
    Dwfl_Module* mod = state_->handles[index];
    if (mod != nullptr) {
      const uint64_t lookup = pc > 0 ? pc - 1 : pc;  // a return address
      GElf_Off offset = 0;
      GElf_Sym sym;
      const char* name = dwfl_module_addrinfo(mod, lookup, &offset, &sym, nullptr,
                                              nullptr, nullptr);
      if (name != nullptr) f.function = Demangle(name);
      if (Dwfl_Line* line = dwfl_module_getsrc(mod, lookup); line != nullptr) {
        int lineno = 0;
        const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
        if (file != nullptr) {
          f.file = file;
          f.line = lineno;
        }
      }
    }
  }
  return cache_.emplace(pc, std::move(f)).first->second;
}

}  // namespace stallscope::analyzer
