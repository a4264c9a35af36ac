// cma_bench: would a single-copy pull between ranks on one host beat the shared-memory rings?
//
// A child process holds a buffer; the parent reads it in pieces with process_vm_readv (cross
// memory attach: the kernel copies from the other process's pages, one copy) and, for the
// baseline, with memcpy from the same pages mapped shared (what each of the ring's two copies
// costs). Prints GB/s of each, per round. The shared-memory transport moves a byte between two
// ranks with two memcpys (into the ring, out of it), so CMA pays only where it runs faster than
// half of memcpy; and for a reduction it saves nothing: the pulled bytes still have to be read
// again to be reduced, as the ring's bytes are reduced straight out of the ring.
//
//   cma_bench [--bytes 96M] [--piece 1M] [--rounds 3]
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

size_t parse_size(std::string s) {
  size_t mult = 1;
  const char c = s.empty() ? 0 : s.back();
  if (c == 'K' || c == 'k') mult = size_t{1} << 10;
  if (c == 'M' || c == 'm') mult = size_t{1} << 20;
  if (c == 'G' || c == 'g') mult = size_t{1} << 30;
  if (mult != 1) s.pop_back();
  return std::strtoull(s.c_str(), nullptr, 10) * mult;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{96} << 20, piece = size_t{1} << 20;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--bytes") bytes = parse_size(argv[i + 1]);
    else if (k == "--piece") piece = parse_size(argv[i + 1]);
    else if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: cma_bench [--bytes 96M] [--piece 1M] [--rounds 3]\n");
      return 2;
    }
  }
  if (piece == 0 || bytes % piece != 0) {
    std::fprintf(stderr, "cma_bench: --bytes must be a whole number of pieces\n");
    return 2;
  }
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* src = static_cast<uint8_t*>(m);
  std::memset(src, 7, bytes);
  int gate[2];
  if (pipe(gate) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {  // holds the pages until the parent is done
    char c;
    [[maybe_unused]] ssize_t n = read(gate[0], &c, 1);
    _exit(0);
  }
  std::vector<uint8_t> dst(bytes, 1);
  int status = 0;
  std::printf("%8s %22s %12s\n", "round", "process_vm_readv GB/s", "memcpy GB/s");
  for (int r = 1; r <= rounds && status == 0; ++r) {
    auto t = std::chrono::steady_clock::now();
    for (size_t off = 0; off < bytes; off += piece) {
      iovec local{dst.data() + off, piece}, remote{src + off, piece};
      if (process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(piece)) {
        std::perror("process_vm_readv");
        status = 1;
        break;
      }
    }
    const double cma = seconds_since(t);
    t = std::chrono::steady_clock::now();
    for (size_t off = 0; off < bytes; off += piece) std::memcpy(dst.data() + off, src + off, piece);
    const double copy = seconds_since(t);
    if (status == 0)
      std::printf("%8d %22.2f %12.2f\n", r, static_cast<double>(bytes) / cma / 1e9, static_cast<double>(bytes) / copy / 1e9);
  }
  [[maybe_unused]] ssize_t n = write(gate[1], "x", 1);
  waitpid(child, nullptr, 0);
  return status;
}
