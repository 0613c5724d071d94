// Tests of the libdw symbolizer against this test binary's own module map:
// function, file and line of a return address; `module+0xoffset` fallbacks.
#include "analyzer/read/symbolizer.h"

#include <link.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>

namespace stallscope::analyzer {
namespace {

// The module map of this process, as the recorder would write it.
std::vector<Module> OwnModules() {
  std::vector<Module> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        Module m;
        m.base = info->dlpi_addr;
        m.low = UINT64_MAX;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          m.low = std::min<uint64_t>(m.low, info->dlpi_addr + ph.p_vaddr);
          m.high = std::max<uint64_t>(m.high, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        m.path = info->dlpi_name;
        if (m.path.empty()) {
          char buf[PATH_MAX];
          ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf));
          if (n > 0) m.path.assign(buf, static_cast<size_t>(n));
        }
        static_cast<std::vector<Module>*>(data)->push_back(m);
        return 0;
      },
      &out);
  return out;
}

__attribute__((noinline)) uint64_t ReturnAddress() {
  return reinterpret_cast<uint64_t>(__builtin_return_address(0));
}

constexpr int kCallLine = __LINE__ + 3;
__attribute__((noinline)) uint64_t KnownCaller() {
  volatile uint64_t pc = 0;
  pc = ReturnAddress();
  return pc;
}

// Guards native symbolization: demangled function, source file and the
// line of the call (looked up at pc-1).
TEST_CASE("symbolizes a return address in this binary", "[symbolizer]") {
  Symbolizer s(OwnModules());
  const uint64_t pc = KnownCaller();
  REQUIRE(s.FindModule(pc) != nullptr);
  const Frame& f = s.Symbolize(pc);
  CHECK(f.function.find("KnownCaller") != std::string::npos);
  CHECK(f.file.find("symbolizer_test.cc") != std::string::npos);
  CHECK(f.line == kCallLine);
  CHECK(f.module == "analyzer_tests");
  // Cached: the same object comes back.
  CHECK(&s.Symbolize(pc) == &f);
}

// Guards the fallbacks: unreadable module → module+0xoffset; no module → hex.
TEST_CASE("symbolization fallbacks", "[symbolizer]") {
  Symbolizer s({{0x400000, 0x400000, 0x500000, "/nonexistent/libgone.so", ""}});
  CHECK(s.Symbolize(0x400123).function == "libgone.so+0x123");
  CHECK(s.Symbolize(0x400123).module == "libgone.so");
  CHECK(s.Symbolize(0x900000).function == "0x900000");
}

// Guards the build-id check: a module whose file has another build id than
// the recorded one (rebuilt since) is not used for lines, and is reported;
// the right build id still symbolizes.
TEST_CASE("a rebuilt module is not used for symbols", "[symbolizer]") {
  const uint64_t pc = KnownCaller();
  std::vector<Module> modules = OwnModules();
  Module* own = nullptr;
  for (Module& m : modules) {
    if (pc >= m.low && pc < m.high) own = &m;
  }
  REQUIRE(own != nullptr);
  own->build_id = std::string(20, '\x5a');  // not this binary's
  Symbolizer changed(modules);
  const Frame& f = changed.Symbolize(pc);
  CHECK(f.file.empty());
  CHECK(f.function.rfind("analyzer_tests+0x", 0) == 0);
  REQUIRE(changed.ChangedModules().size() == 1);
  CHECK(changed.ChangedModules()[0] == own->path);
  own->build_id.clear();  // unknown: trusted, as before build ids
  Symbolizer unknown(modules);
  CHECK(unknown.Symbolize(pc).line == kCallLine);
  CHECK(unknown.ChangedModules().empty());
}

}  // namespace
}  // namespace stallscope::analyzer
