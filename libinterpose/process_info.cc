// The recorder's view of its process (see process_info.h).
#include "process_info.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "fast_unwind.h"
#include "trace_codec.h"

namespace stallscope::recorder {
namespace {

unsigned long long Generation(const dl_phdr_info* info, size_t size) {
  return size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)
             ? info->dlpi_adds * 1000003ull + info->dlpi_subs
             : 0;
}

int ModuleCallback(dl_phdr_info* info, size_t size, void* arg) {
  auto* scan = static_cast<ModuleScan*>(arg);
  if (scan->count == 0) scan->generation = Generation(info, size);
  uint64_t low = ~0ull, high = 0;
  std::string_view build_id;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      low = std::min<uint64_t>(low, info->dlpi_addr + ph.p_vaddr);
      high = std::max<uint64_t>(high, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
    } else if (ph.p_type == PT_NOTE && build_id.empty()) {
      const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
      const char* end = p + ph.p_memsz;
      while (p + sizeof(ElfW(Nhdr)) <= end) {
        const auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
        const char* name = p + sizeof(ElfW(Nhdr));
        const char* desc = name + ((nh->n_namesz + 3) & ~3u);
        if (desc + nh->n_descsz > end) break;
        if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
          build_id = std::string_view(desc, nh->n_descsz);
          break;
        }
        p = desc + ((nh->n_descsz + 3) & ~3u);
      }
    }
  }
  if (high == 0) return 0;
  std::string path = info->dlpi_name ? info->dlpi_name : "";
  if (path.empty() && scan->count == 0) {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) path.assign(buf, size_t(n));
  }
  if (path.empty()) return 0;  // vdso and anonymous objects
  trace::EncodeModule(&scan->out, info->dlpi_addr, low, high, path, build_id);
  scan->count++;
  return 0;
}

}  // namespace

bool TscIsInvariant() {
  int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[8192];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  return strstr(buf, " constant_tsc") && strstr(buf, " nonstop_tsc");
}

int EnvInt(const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  if (*end != 0 || x < 0 || x > INT32_MAX) return -1;
  return int(x);
}

trace::RankRecord ReadRankInfo() {
  struct Source {
    trace::RankSource source;
    const char *rank, *local_rank, *world_size, *local_world_size;
  };
  static constexpr Source kSources[] = {
      {trace::RankSource::kTorch, "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"},
      {trace::RankSource::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {trace::RankSource::kPmi, "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"},
      {trace::RankSource::kSlurm, "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
       "SLURM_NTASKS_PER_NODE"},
  };
  trace::RankRecord r{};
  r.rank = r.local_rank = r.world_size = r.local_world_size = -1;
  gethostname(r.host, sizeof r.host - 1);
  for (const Source& s : kSources) {
    int rank = EnvInt(s.rank);
    if (rank < 0) continue;
    r.rank = rank;
    r.local_rank = EnvInt(s.local_rank);
    r.world_size = EnvInt(s.world_size);
    r.local_world_size = EnvInt(s.local_world_size);
    r.source = uint32_t(s.source);
    break;
  }
  return r;
}

int OpenTraceFile(const trace::RankRecord& rank, uint32_t pid) {
  const char* dir = getenv("STALLSCOPE_OUT");
  if (!dir || !*dir) dir = ".";
  mkdir(dir, 0750);
  const char* host = rank.host;  // ReadRankInfo's gethostname
  std::string prefix;
  if (rank.rank >= 0) {
    char buf[48];
    snprintf(buf, sizeof buf, "rank%05d", rank.rank);
    prefix = buf;
    if (rank.local_rank >= 0) prefix += "." + std::to_string(rank.local_rank);
    prefix += "-";
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string path = std::string(dir) + "/" + prefix + host + "-" + std::to_string(pid);
    if (attempt) path += "-" + std::to_string(attempt);
    path += trace::kFileSuffix;
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

ModuleScan ScanModules() {
  ModuleScan scan;
  WalkModules(ModuleCallback, &scan);
  return scan;
}

unsigned long long ModuleGeneration() {
  unsigned long long generation = 0;
  WalkModules(
      [](dl_phdr_info* info, size_t size, void* arg) {
        *static_cast<unsigned long long*>(arg) = Generation(info, size);
        return 1;  // every entry carries the same counts
      },
      &generation);
  return generation;
}

}  // namespace stallscope::recorder
