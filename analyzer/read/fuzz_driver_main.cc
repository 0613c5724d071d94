// A driver for the fuzz target (trace_reader_fuzz.cc) that needs no libFuzzer,
// so any compiler builds it and the suite runs it for a bounded number of
// inputs: every seed as it is, then MUTATIONS mutants of each from a seeded
// generator (bit flips, overwritten bytes, truncations, chunk headers that
// claim huge payloads or counts, spliced copies of chunks), each through the
// whole pipeline (reader, analysis, JSON). A crash or a sanitizer report is
// the failure; it prints the seed and mutant to replay.
//
//   trace_fuzz_driver [--mutations N] [--seed S] FILE_OR_DIR...
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer/analyze/analysis.h"
#include "common/trace_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace tf = stallscope::trace;

// A file, or a folder's *.sstrace files (the analyzer's own expansion).
std::vector<std::string> Expand(const std::string& path) {
  auto paths = stallscope::analyzer::ExpandTracePaths({path});
  return paths.ok() ? *paths : std::vector<std::string>{};
}

std::vector<size_t> ChunkOffsets(const std::string& b) {
  std::vector<size_t> out;
  if (b.size() < sizeof(tf::FileHeader)) return out;
  uint32_t off32;
  std::memcpy(&off32, b.data() + offsetof(tf::FileHeader, header_bytes), 4);
  size_t off = off32;
  while (off + sizeof(tf::ChunkHeader) <= b.size()) {
    tf::ChunkHeader h;
    std::memcpy(&h, b.data() + off, sizeof(h));
    if (h.magic != tf::kChunkMagic) break;
    out.push_back(off);
    off += sizeof(h) + h.payload_bytes;
  }
  return out;
}

std::string Mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string b = seed;
  if (b.empty()) return b;
  const auto chunks = ChunkOffsets(b);
  switch (rng() % 6) {
    case 0: {  // flip 1 to 8 bits
      for (int k = 1 + int(rng() % 8); k > 0; --k) b[rng() % b.size()] ^= char(1 << (rng() % 8));
      break;
    }
    case 1: {  // overwrite a few bytes
      for (int k = 1 + int(rng() % 8); k > 0; --k) b[rng() % b.size()] = char(rng());
      break;
    }
    case 2:  // truncate
      b.resize(rng() % b.size());
      break;
    case 3: {  // a chunk header claiming a huge payload or count
      if (chunks.empty()) break;
      const size_t off = chunks[rng() % chunks.size()];
      const uint32_t v = (rng() & 1) ? (1u << 30) : uint32_t(rng());
      std::memcpy(b.data() + off + ((rng() & 1) ? offsetof(tf::ChunkHeader, payload_bytes)
                                                 : offsetof(tf::ChunkHeader, count)),
                  &v, 4);
      break;
    }
    case 4: {  // a chunk repeated elsewhere (duplicate records, ids, tables)
      if (chunks.size() < 2) break;
      const size_t i = rng() % (chunks.size() - 1);
      const std::string piece = b.substr(chunks[i], chunks[i + 1] - chunks[i]);
      b.insert(chunks[rng() % chunks.size()], piece);
      break;
    }
    default: {  // a chunk's type changed (its records read as another kind)
      if (chunks.empty()) break;
      const uint16_t type = uint16_t(1 + rng() % 16);
      std::memcpy(b.data() + chunks[rng() % chunks.size()] + offsetof(tf::ChunkHeader, type), &type, 2);
      break;
    }
  }
  // The fuzz target repairs checksums for inputs whose last byte is odd:
  // flip a coin so half the mutants reach the record parsers.
  if (!b.empty() && (rng() & 1)) b.back() = char(b.back() ^ 1);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 200;
  uint64_t seed = 1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc) {
      mutations = strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = strtoull(argv[++i], nullptr, 10);
    } else {
      for (std::string& f : Expand(a)) files.push_back(std::move(f));
    }
  }
  if (files.empty()) {
    fprintf(stderr, "trace_fuzz_driver: no .sstrace seeds given\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  long inputs = 0;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++inputs;
    std::mt19937_64 rng(seed ^ std::hash<std::string>()(path));
    for (long m = 0; m < mutations; ++m) {
      const std::string mutant = Mutate(bytes, rng);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(mutant.data()), mutant.size());
      ++inputs;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("trace_fuzz_driver: %ld inputs from %zu seeds (seed %llu) in %.2f s, no crash\n", inputs,
         files.size(), static_cast<unsigned long long>(seed), s);
  return 0;
}
