// One rank of the blob multi-process tests (blob_mp_test.cc starts N of them). Each mode runs
// real transfers between real processes on loopback sockets, checks the object against a
// reference this rank generates itself, and exits 0 only when everything matched.
// GEOCCL_TEST_DOMAINS="a,a,b,b" gives rank r the r-th domain label (2 domains: the hierarchical
// broadcast); GEOCCL_BLOB_DIR is the test's scratch folder (each rank uses <dir>/rank<r>).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "blob/codec.h"
#include "blob/file_destination.h"
#include "check.h"
#include "geoccl/geoccl.h"

using namespace geoccl;
namespace fs = std::filesystem;

namespace {

// A checkpoint-like object: runs of repeated structure between random stretches, so that the
// codecs find something but not everything.
std::vector<uint8_t> object(size_t bytes, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t x = (i / 4096) % 3 == 0 ? g() : 0x3f80000000000000ull + (i % 512);
    for (size_t k = 0; k < 8 && i + k < bytes; ++k) v[i + k] = static_cast<uint8_t>(x >> (8 * k));
  }
  return v;
}

void write_file(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string my_dir(int rank) {
  const char* base = std::getenv("GEOCCL_BLOB_DIR");
  const std::string d = std::string(base ? base : "/tmp") + "/rank" + std::to_string(rank);
  fs::create_directories(d);
  return d;
}

BlobOptions opts(size_t chunk, size_t window, const std::string& codec) {
  BlobOptions o;
  o.chunk_bytes = chunk;
  o.window_chunks = window;
  o.codec = codec;
  o.timeout = std::chrono::seconds(30);
  return o;
}

void print(const char* what, int rank, const BlobResult& r) {
  std::printf(
      "rank %d %s: %llu bytes, %u chunks sent (%u resumed, %u refetched here, %u rounds), raw %llu "
      "wire %llu, "
      "codecs none/lz4/zstd %u/%u/%u, %.3f s\n",
      rank, what, static_cast<unsigned long long>(r.object_bytes), r.chunks_sent, r.chunks_resumed,
      r.chunks_refetched, r.rounds, static_cast<unsigned long long>(r.bytes_sent),
      static_cast<unsigned long long>(r.wire_bytes), r.chunks_by_codec[0], r.chunks_by_codec[1],
      r.chunks_by_codec[2], r.seconds);
  std::fflush(stdout);
}

// Bytes from root 1 with every codec mode; progress reported; the result identical everywhere.
int mode_bytes(Communicator& c) {
  const int me = c.rank(), root = 1 % c.size();
  for (const char* codec : {"auto", "none", "lz4", "zstd"}) {
    const auto want = object((9u << 20) + 12345, 42);
    std::vector<uint8_t> got;
    BlobOptions o = opts(1u << 20, 4, codec);
    BlobProgress last;
    int reports = 0;
    o.progress = [&](const BlobProgress& p) {
      CHECK(p.bytes_done >= last.bytes_done, "progress went back");
      last = p;
      ++reports;
    };
    const auto r =
        broadcast_blob(c, root, me == root ? std::span(want) : std::span<const uint8_t>{}, &got, o);
    print(codec, me, r);
    if (me != root) CHECK(got == want, "codec %s: object differs", codec);
    CHECK(r.object_bytes == want.size() && r.chunks == 10 && r.chunks_sent == 10 && r.rounds == 1,
          "codec %s: counters", codec);
    CHECK(r.object_hash == blob::xxh3(want), "codec %s: object hash", codec);
    CHECK(reports == 3 && last.bytes_done == want.size() && last.bytes_total == want.size(),
          "codec %s: %d progress reports, last %llu", codec, reports,
          static_cast<unsigned long long>(last.bytes_done));
    if (std::string(codec) == "zstd" || std::string(codec) == "lz4")
      CHECK(r.wire_bytes < r.bytes_sent * 3 / 4 && r.chunks_by_codec[0] == 0,
            "codec %s: not compressed", codec);
    if (std::string(codec) == "none") CHECK(r.wire_bytes == r.bytes_sent, "none: wire bytes");
  }
  // An empty object and one smaller than a chunk.
  for (size_t n : {size_t{0}, size_t{1000}}) {
    const auto want = object(n, 7);
    std::vector<uint8_t> got(5, 1);
    const auto r = broadcast_blob(c, 0, me == 0 ? std::span(want) : std::span<const uint8_t>{},
                                  &got, opts(1u << 20, 4, "auto"));
    if (me != 0) CHECK(got == want, "object of %zu bytes differs", n);
    CHECK(r.chunks == (n ? 1u : 0u), "chunks of a %zu-byte object", n);
  }
  return g_failures ? 1 : 0;
}

// A file from rank 0 to every rank's destination, sent from the mapped file.
int mode_file(Communicator& c) {
  const int me = c.rank();
  const auto want = object((6u << 20) + 77, 3);
  const std::string src = my_dir(me) + "/src.bin", dst = my_dir(me) + "/dst.bin";
  if (me == 0) write_file(src, want);
  const auto r = broadcast_blob_file(c, 0, src, dst, opts(1u << 20, 2, "auto"));
  print("file", me, r);
  if (me != 0) {
    CHECK(read_file(dst) == want, "destination file differs");
    CHECK(!fs::exists(blob::FileDestination::part_path(dst)) &&
              !fs::exists(blob::FileDestination::state_path(dst)),
          "part or state file left behind");
  }
  CHECK(r.object_hash == blob::xxh3(want) && r.chunks_sent == 7, "counters");
  return g_failures ? 1 : 0;
}

// The last rank sends a file to rank 0; the ranks between take no part.
int mode_p2p(Communicator& c) {
  const int me = c.rank(), last = c.size() - 1;
  const auto want = object((3u << 20) + 5, 11);
  const std::string path = my_dir(me) + "/p2p.bin";
  if (me == last) {
    write_file(path, want);
    const auto r = send_file(c, 0, path, opts(256u << 10, 3, "zstd"));
    print("send_file", me, r);
    CHECK(r.chunks_sent == 13 && r.wire_bytes < r.bytes_sent, "send counters");
  } else if (me == 0) {
    const auto r = recv_file(c, last, path, opts(256u << 10, 3, "zstd"));
    print("recv_file", me, r);
    CHECK(read_file(path) == want, "received file differs");
  }
  c.barrier().wait();
  return g_failures ? 1 : 0;
}

// GEOCCL_BLOB_TEST_CORRUPT flips a byte of one received chunk on one rank: that rank must notice,
// get the chunk again and still end with the right object; the others see a second round.
int mode_corrupt(Communicator& c) {
  const int me = c.rank();
  const char* spec = std::getenv("GEOCCL_BLOB_TEST_CORRUPT");
  const int victim = spec ? std::atoi(spec) : -1;
  const auto want = object((5u << 20) + 3, 5);
  const std::string src = my_dir(me) + "/src.bin", dst = my_dir(me) + "/dst.bin";
  if (me == 0) write_file(src, want);
  const auto r = broadcast_blob_file(c, 0, src, dst, opts(1u << 20, 2, "none"));
  print("corrupt file", me, r);
  if (me != 0) CHECK(read_file(dst) == want, "file differs after the refetch");
  CHECK(r.rounds == 2 && r.chunks_sent == 7, "expected one chunk resent in a second round");
  CHECK(r.chunks_refetched == (me == victim ? 1u : 0u), "refetch counter %u", r.chunks_refetched);
  std::vector<uint8_t> got;
  const auto z = broadcast_blob(c, 0, me == 0 ? std::span(want) : std::span<const uint8_t>{}, &got,
                                opts(1u << 20, 2, "zstd"));
  print("corrupt zstd", me, z);
  if (me != 0) CHECK(got == want, "bytes differ after the refetch");
  CHECK(z.rounds == 2 && z.chunks_refetched == (me == victim ? 1u : 0u), "zstd: refetch counter %u",
        z.chunks_refetched);
  return g_failures ? 1 : 0;
}

// Run 1 of the resume test: a receiver exits mid-transfer (GEOCCL_BLOB_TEST_EXIT_AFTER); every
// other rank must get a typed Error in time. Run 2 (mode resume-finish, a fresh group) completes,
// sending fewer bytes than the object.
const size_t kResumeBytes = (16u << 20) + 999;
int mode_resume(Communicator& c, bool finish) {
  const int me = c.rank();
  const auto want = object(kResumeBytes, 9);
  const std::string src = my_dir(me) + "/src.bin", dst = my_dir(me) + "/dst.bin";
  if (me == 0 && !finish) write_file(src, want);
  try {
    const auto r = broadcast_blob_file(c, 0, src, dst, opts(256u << 10, 2, "none"));
    print(finish ? "resume-finish" : "resume-break", me, r);
    CHECK(finish, "run 1 completed although a receiver exited");
    if (me != 0) CHECK(read_file(dst) == want, "resumed file differs");
    CHECK(r.chunks_resumed > 0 && r.bytes_sent < want.size() &&
              r.chunks_sent + r.chunks_resumed == r.chunks,
          "resume sent %llu of %zu bytes", static_cast<unsigned long long>(r.bytes_sent),
          want.size());
  } catch (const Error& e) {
    std::printf("rank %d: %s\n", me, e.what());
    CHECK(!finish, "run 2 failed: %s", e.what());
    CHECK(e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kAborted ||
              e.code() == ErrorCode::kTimeout,
          "unexpected code %s", std::string(error_code_name(e.code())).c_str());
  }
  return g_failures ? 1 : 0;
}

// Bad input: each call fails on every rank with the same typed code, and the group stays usable.
int mode_bad_input(Communicator& c) {
  const int me = c.rank(), n = c.size();
  auto expect = [&](const char* what, ErrorCode code, auto&& call) {
    try {
      call();
      CHECK(false, "%s: no error", what);
    } catch (const Error& e) {
      CHECK(e.code() == code, "%s: got %s", what, e.what());
    }
  };
  const auto data = object(300000, 1);
  std::vector<uint8_t> got;
  const std::string dir = my_dir(me);
  expect("root out of range", ErrorCode::kInvalidArgument,
         [&] { broadcast_blob(c, n, data, &got, opts(1u << 20, 4, "auto")); });
  expect("root out of range on one rank", ErrorCode::kInvalidArgument,
         [&] { broadcast_blob(c, me == 1 ? -1 : 0, data, &got, opts(1u << 20, 4, "auto")); });
  expect("roots differ", ErrorCode::kMismatch,
         [&] { broadcast_blob(c, me == 2 ? 1 : 0, data, &got, opts(1u << 20, 4, "auto")); });
  expect("missing file", ErrorCode::kInvalidArgument, [&] {
    broadcast_blob_file(c, 0, dir + "/no-such-file", dir + "/out.bin", opts(1u << 20, 4, "auto"));
  });
  CHECK(!fs::exists(dir + "/out.bin"), "destination created for a failed transfer");
  expect("different sizes claimed", ErrorCode::kMismatch, [&] {
    BlobOptions o = opts(1u << 20, 4, "auto");
    if (me == n - 1) o.expected_size = data.size() + 1;
    broadcast_blob(c, 0, me == 0 ? std::span(data) : std::span<const uint8_t>{}, &got, o);
  });
  CHECK(got.empty(), "output left after a failed transfer");
  expect("bad option on one rank", ErrorCode::kInvalidArgument,
         [&] { broadcast_blob(c, 0, data, &got, opts(me == 1 ? 1000 : 1u << 20, 4, "auto")); });
  expect("unwritable destination", ErrorCode::kIo, [&] {
    write_file(dir + "/src.bin", data);
    broadcast_blob_file(c, 0, dir + "/src.bin",
                        me == 2 ? dir + "/no/such/dir/out.bin" : dir + "/out.bin",
                        opts(1u << 20, 4, "auto"));
  });
  if (me == 0 || me == 1) {
    const int peer = 1 - me;
    expect("p2p: missing file", ErrorCode::kInvalidArgument, [&] {
      if (me == 0)
        send_file(c, peer, dir + "/no-such-file", opts(1u << 20, 4, "auto"));
      else
        recv_file(c, peer, dir + "/p2p.bin", opts(1u << 20, 4, "auto"));
    });
  }
  expect("p2p: peer is self", ErrorCode::kInvalidArgument,
         [&] { send_file(c, me, dir + "/src.bin"); });
  // Still a working group.
  const auto r = broadcast_blob(c, 0, me == 0 ? std::span(data) : std::span<const uint8_t>{}, &got,
                                opts(1u << 20, 4, "auto"));
  if (me != 0) CHECK(got == data, "the group is broken after the failures");
  CHECK(r.chunks_sent == 1, "counters after the failures");
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "bytes";
  try {
    apply_test_domains();
    Communicator c(Config::from_env());
    if (mode == "bytes") return mode_bytes(c);
    if (mode == "file") return mode_file(c);
    if (mode == "p2p") return mode_p2p(c);
    if (mode == "corrupt") return mode_corrupt(c);
    if (mode == "resume-break") return mode_resume(c, false);
    if (mode == "resume-finish") return mode_resume(c, true);
    if (mode == "bad-input") return mode_bad_input(c);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "blob_check %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
}
