// Offline symbolization of native return addresses through the trace's module
// map, with elfutils' libdw: function (demangled), source file and line. A
// missing or stripped module still yields `module+0xoffset`. Cached by pc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analyzer/model/report.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

class Symbolizer {
 public:
  explicit Symbolizer(std::vector<Module> modules);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // `pc` is a return address: line info is looked up at pc-1.
  const Frame& Symbolize(uint64_t pc);
  // The module containing pc, or nullptr.
  const Module* FindModule(uint64_t pc) const;
  // Paths of modules whose file on disk has another build id than the one
  // recorded in the trace (rebuilt since): not used for symbols.
  const std::vector<std::string>& ChangedModules() const { return changed_; }

 private:
  struct State;
  std::vector<Module> modules_;  // sorted by low
  std::unique_ptr<State> state_;
  absl::flat_hash_map<uint64_t, Frame> cache_;
  std::vector<std::string> changed_;
};

}  // namespace stallscope::analyzer
