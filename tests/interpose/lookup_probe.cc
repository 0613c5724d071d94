// Asks the driver for every entry point NVIDIA's cudart 13.0 asks for, the
// way cudart does (dlopen, dlsym cuGetProcAddress_v2, self-lookup of
// cuGetProcAddress, then each (name, version, flags)), and prints for each the
// result, the status and the symbol and module the returned pointer lies in.
// lookup_test.py runs it bare and under libstallscope.so and compares.
//   lookup_probe REQUESTS_FILE
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

const char* Base(const char* path) {
  const char* slash = path ? std::strrchr(path, '/') : nullptr;
  return slash ? slash + 1 : (path ? path : "?");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: lookup_probe REQUESTS_FILE\n");
    return 2;
  }
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return 3;
  auto first = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  if (!first) return 4;
  void* self = nullptr;
  CUdriverProcAddressQueryResult st;
  if (first("cuGetProcAddress", &self, 12000, 0, &st) != CUDA_SUCCESS || !self) return 5;
  auto resolve = reinterpret_cast<GetProc>(self);
  std::ifstream in(argv[1]);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    int version = 0;
    unsigned long long flags = 0;
    if (line.rfind(' ', 0) == 0 || line.rfind("0 0", 0) == 0) {
      name.clear();  // the empty probe
      fields.str(line.substr(line.rfind("0 0", 0) == 0 ? 0 : 1));
      fields >> version >> flags;
    } else {
      fields >> name >> version >> flags;
    }
    void* p = nullptr;
    st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = resolve(name.c_str(), &p, version, flags, &st);
    Dl_info info{};
    const char* sym = "-";
    const char* mod = "-";
    if (p && dladdr(p, &info)) {
      sym = info.dli_sname ? info.dli_sname : "?";
      mod = Base(info.dli_fname);
    }
    std::printf("%s %d %llu -> %d %d %s %s\n", name.empty() ? "<empty>" : name.c_str(), version,
                flags, int(r), int(st), sym, mod);
  }
  return 0;
}
