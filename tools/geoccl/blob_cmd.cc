#include "blob_cmd.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_cmd.h"
#include "blob/codec.h"
#include "blob/mapped_file.h"
#include "geoccl/geoccl.h"

namespace geoccl::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;

// A progress bar on stderr: redrawn in place on a terminal, else one line every two seconds.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2) != 0) {}
  void update(const BlobProgress& p) {
    const auto now = Clock::now();
    const bool last = p.bytes_done >= p.bytes_total;
    if (!tty_ && !last && now - printed_ < std::chrono::seconds(2)) return;
    printed_ = now;
    const double frac =
        p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1;
    const int width = 30, fill = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(width, '-');
    std::fprintf(
        stderr, "%s%s [%s] %5.1f%% %.1f/%.1f MiB  %.1f MB/s  ETA %.0f s  wire %.1f MiB%s%s",
        tty_ ? "\r" : "", label_.c_str(), bar.c_str(), frac * 100,
        static_cast<double>(p.bytes_done) / kMiB, static_cast<double>(p.bytes_total) / kMiB,
        p.rate_bytes_per_s / 1e6, p.eta_s, static_cast<double>(p.wire_bytes) / kMiB,
        p.chunks_refetched ? ("  refetched " + std::to_string(p.chunks_refetched)).c_str() : "",
        tty_ ? "" : "\n");
    if (tty_ && last) std::fprintf(stderr, "\n");
  }

 private:
  std::string label_;
  bool tty_;
  Clock::time_point printed_{};
};

BlobOptions options_of(const BlobSpec& s) {
  BlobOptions o;
  o.chunk_bytes = parse_sizes(s.chunk).at(0);
  o.window_chunks = static_cast<size_t>(s.window);
  o.codec = s.codec;
  o.zstd_level = s.zstd_level;
  o.resume = !s.no_resume;
  return o;
}

void summary(int rank, const char* what, const BlobResult& r) {
  std::fprintf(
      stderr,
      "geoccl blob: rank %d %s %.1f MiB in %.2f s: %u chunks sent (%u resumed, %u refetched here), "
      "%.1f MiB on the wire (none/lz4/zstd chunks %u/%u/%u), xxh3 %016llx\n",
      rank, what, static_cast<double>(r.object_bytes) / kMiB, r.seconds, r.chunks_sent,
      r.chunks_resumed, r.chunks_refetched, static_cast<double>(r.wire_bytes) / kMiB,
      r.chunks_by_codec[0], r.chunks_by_codec[1], r.chunks_by_codec[2],
      static_cast<unsigned long long>(r.object_hash));
}

// Ratio and speed of each codec over the whole file, chunk by chunk as a transfer would go.
int run_codecs(const BlobSpec& s) {
  auto file = blob::MappedFile::open_read(s.path);
  const auto data = file.bytes();
  const size_t chunk = parse_sizes(s.chunk).at(0);
  const blob::CodecChoice choices[] = {
      {blob::Codec::kLz4, 0}, {blob::Codec::kZstd, 1}, {blob::Codec::kZstd, 3}};
  std::printf("%s: %.1f MiB in chunks of %zu KiB (one core)\n", s.path.c_str(),
              static_cast<double>(data.size()) / kMiB, chunk >> 10);
  std::printf("%-8s %8s %14s %16s\n", "codec", "ratio", "compress MB/s", "decompress MB/s");
  std::vector<uint8_t> wire, back(chunk);
  for (const auto& c : choices) {
    double ct = 0, dt = 0;
    uint64_t out = 0;
    for (size_t off = 0; off < data.size(); off += chunk) {
      const auto raw = data.subspan(off, std::min(chunk, data.size() - off));
      wire.resize(blob::compress_bound(c.codec, raw.size()));
      const auto t0 = Clock::now();
      const size_t n = blob::compress(c, raw, wire);
      const auto t1 = Clock::now();
      if (n == 0 ||
          !blob::decompress(c.codec, std::span(wire).first(n), std::span(back).first(raw.size())))
        throw Error(ErrorCode::kInternal,
                    std::string(blob::codec_name(c.codec)) + " failed to round-trip a chunk");
      dt += std::chrono::duration<double>(Clock::now() - t1).count();
      ct += std::chrono::duration<double>(t1 - t0).count();
      out += n;
    }
    const std::string name =
        c.codec == blob::Codec::kZstd ? "zstd-" + std::to_string(c.level) : "lz4";
    const double mb = static_cast<double>(data.size()) / 1e6;
    std::printf("%-8s %8.3f %14.0f %16.0f\n", name.c_str(),
                out ? static_cast<double>(data.size()) / static_cast<double>(out) : 0,
                ct > 0 ? mb / ct : 0, dt > 0 ? mb / dt : 0);
  }
  return 0;
}

}  // namespace

CLI::App* add_blob_command(CLI::App& app, BlobSpec& spec) {
  auto* b = app.add_subcommand(
      "blob", "move a file between ranks (chunked, hashed, compressed when it pays, resumable)");
  b->require_subcommand(1);
  auto common = [&](CLI::App* c) {
    c->add_option("--chunk", spec.chunk, "chunk size (64K .. 64M)");
    c->add_option("--window", spec.window, "chunks per descriptor")->check(CLI::Range(1, 64));
    c->add_option("--codec", spec.codec, "auto|none|lz4|zstd");
    c->add_option("--zstd-level", spec.zstd_level)->check(CLI::Range(1, 19));
    c->add_flag("--no-resume", spec.no_resume, "ignore and keep no resume state");
    c->add_flag("--quiet,-q", spec.quiet, "no progress bar");
  };
  auto* send = b->add_subcommand("send", "this rank sends FILE: to every other rank, or --to one");
  send->add_option("file", spec.path)->required();
  send->add_option("--to", spec.peer, "the one receiving rank (point to point)");
  auto* recv = b->add_subcommand(
      "recv", "receive into DEST: from the broadcasting --root, or --from one sender");
  recv->add_option("dest", spec.dst_path)->required();
  recv->add_option("--from", spec.peer, "the sending rank (point to point)");
  recv->add_option("--root", spec.root, "the broadcasting rank");
  auto* bcast =
      b->add_subcommand("bcast", "every rank runs this: --root sends SRC, the others write DEST");
  bcast->add_option("src", spec.path)->required();
  bcast->add_option("dest", spec.dst_path)->required();
  bcast->add_option("--root", spec.root, "the sending rank");
  auto* codecs = b->add_subcommand(
      "codecs", "lossless ratio and speed of lz4, zstd-1, zstd-3 on FILE (no group)");
  codecs->add_option("file", spec.path)->required();
  codecs->add_option("--chunk", spec.chunk, "chunk size");
  for (auto* c : {send, recv, bcast}) common(c);
  b->callback([&spec, send, recv, bcast] {
    spec.action = *send ? "send" : *recv ? "recv" : *bcast ? "bcast" : "codecs";
  });
  return b;
}

int run_blob(const BlobSpec& s) {
  try {
    if (s.action == "codecs") return run_codecs(s);
    const BlobOptions base = options_of(s);
    auto comm = Communicator::from_env();
    const int me = comm->rank();
    ProgressBar bar("rank " + std::to_string(me) + " " + s.action);
    BlobOptions o = base;
    if (!s.quiet) o.progress = [&bar](const BlobProgress& p) { bar.update(p); };
    BlobResult r;
    if (s.action == "send" && s.peer >= 0)
      r = send_file(*comm, s.peer, s.path, o);
    else if (s.action == "send")
      r = broadcast_blob_file(*comm, me, s.path, "", o);
    else if (s.action == "recv" && s.peer >= 0)
      r = recv_file(*comm, s.peer, s.dst_path, o);
    else if (s.action == "recv")
      r = broadcast_blob_file(*comm, s.root, "", s.dst_path, o);
    else
      r = broadcast_blob_file(*comm, s.root, s.path, s.dst_path, o);
    summary(me, s.action.c_str(), r);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ngeoccl blob: %s\n", e.what());
    return 1;
  }
}

}  // namespace geoccl::tools
