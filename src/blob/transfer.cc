#include "blob/transfer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>

#include "blob/agreement.h"
#include "blob/chooser.h"
#include "blob/codec_sampler.h"
#include "blob/link_meter.h"
#include "blob/test_hooks.h"

namespace geoccl::blob {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSampleBytes = 256u << 10;

// What both sides share: the channel, the votes, the counters and the progress report.
class Session {
 public:
  Session(BlobChannel& ch, int root, const BlobOptions& o) : ch_(ch), o_(o), root_(root) {}

  BlobChannel& ch() { return ch_; }
  const BlobOptions& opts() const { return o_; }
  int root() const { return root_; }
  BlobResult& result() { return result_; }

  // Step 1. Throws the agreed Error.
  Opening open(const LocalFailure& pre, int64_t size_claim, int64_t chunk_bytes) {
    OpeningVote v{pre.code, root_, size_claim, chunk_bytes};
    auto all = encode_opening(v, ch_.me(), ch_.participants());
    ch_.agree(all);
    Opening o = decide_opening(all, ch_.participants());
    if (o.code != ErrorCode::kOk) {
      if (o.failed == ch_.me())
        throw Error(o.code, "blob: rank " + std::to_string(ch_.rank_of(o.failed)) + ": " + pre.why);
      if (o.failed >= 0)
        throw Error(o.code, "blob: rank " + std::to_string(ch_.rank_of(o.failed)) + " " + o.why +
                                " (" + std::string(error_code_name(o.code)) + ")");
      throw Error(o.code, "blob: " + o.why);
    }
    return o;
  }

  // A status vote with one byte per chunk after it (steps 3 and 4); returns the agreed chunk
  // bytes. Throws the agreed Error when any participant reported one.
  std::vector<uint8_t> vote(const LocalFailure& mine, const std::vector<uint8_t>& chunk_bytes) {
    const size_t n = static_cast<size_t>(ch_.participants());
    std::vector<uint8_t> v(n + chunk_bytes.size(), 0);
    v[static_cast<size_t>(ch_.me())] = static_cast<uint8_t>(mine.code);
    std::copy(chunk_bytes.begin(), chunk_bytes.end(), v.begin() + static_cast<ptrdiff_t>(n));
    ch_.agree(v);
    raise_if_failed(std::span(v).first(n), ch_.me(), mine.why,
                    [this](int p) { return ch_.rank_of(p); });
    return {v.begin() + static_cast<ptrdiff_t>(n), v.end()};
  }

  void count(const ChunkEntry& e) {
    ++result_.chunks_sent;
    result_.bytes_sent += e.raw_bytes;
    result_.wire_bytes += e.wire_bytes;
    ++result_.chunks_by_codec[static_cast<size_t>(e.codec.codec)];
  }

  void report(uint64_t done, uint64_t resumed) {
    if (!o_.progress) return;
    BlobProgress p;
    p.bytes_total = result_.object_bytes;
    p.bytes_done = std::min(done, p.bytes_total);
    p.wire_bytes = result_.wire_bytes;
    const double s = std::chrono::duration<double>(Clock::now() - t0_).count();
    p.rate_bytes_per_s =
        s > 0 ? static_cast<double>(p.bytes_done - std::min(resumed, p.bytes_done)) / s : 0;
    p.eta_s = p.rate_bytes_per_s > 0
                  ? static_cast<double>(p.bytes_total - p.bytes_done) / p.rate_bytes_per_s
                  : 0;
    p.chunks_refetched = result_.chunks_refetched;
    o_.progress(p);
  }

  void finish() { result_.seconds = std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  BlobChannel& ch_;
  const BlobOptions& o_;
  int root_;
  BlobResult result_;
  Clock::time_point t0_ = Clock::now();
};

std::vector<uint32_t> needed(const std::vector<uint8_t>& flags) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) out.push_back(static_cast<uint32_t>(i));
  return out;
}

std::vector<std::vector<uint32_t>> windows_of(const std::vector<uint32_t>& chunks,
                                              uint32_t per_window) {
  std::vector<std::vector<uint32_t>> out;
  for (size_t i = 0; i < chunks.size(); i += per_window)
    out.emplace_back(
        chunks.begin() + static_cast<ptrdiff_t>(i),
        chunks.begin() + static_cast<ptrdiff_t>(std::min(chunks.size(), i + per_window)));
  return out;
}

uint64_t offset_of(const ObjectHeader& h, uint32_t chunk) {
  return uint64_t{chunk} * h.chunk_bytes;
}

// ---- the root ----

class RootSide {
 public:
  RootSide(Session& s, const ObjectHeader& h, std::span<const uint8_t> src)
      : s_(s), h_(h), src_(src), forced_(forced_choice(s.opts())) {}

  // Sends the chunks `need` lists, two windows in flight.
  void round(const std::vector<uint32_t>& need, uint32_t round) {
    const auto windows = windows_of(need, h_.window_chunks);
    for (size_t w = 0; w < windows.size(); ++w) {
      Slot& cur = slot_[w % 2];
      if (w == 0) {
        prepare(cur, nullptr, windows[0], round, 0);
        issue(cur);
      }
      if (w + 1 < windows.size()) {
        Slot& next = slot_[(w + 1) % 2];
        prepare(next, &cur, windows[w + 1], round, static_cast<uint32_t>(w + 1));
        issue(next);
      }
      drain(cur, true);
      s_.report(done_, resumed_);
    }
  }
  void set_resumed(uint64_t bytes) { done_ = resumed_ = bytes; }

 private:
  struct Slot {
    WindowDescriptor d;
    std::vector<uint8_t> desc;
    std::vector<std::vector<uint8_t>> wire;
    std::vector<Work> works;
    std::vector<Clock::time_point> issued;
    std::vector<std::shared_ptr<std::atomic<Clock::rep>>> completed;
    size_t drained = 0;
  };

  static std::optional<CodecChoice> forced_choice(const BlobOptions& o) {
    if (o.codec == "auto") return std::nullopt;
    return parse_codec(o.codec, o.zstd_level);
  }

  // Describes and compresses the window's chunks while `in_flight` (the previous window, or null)
  // moves; each chunk's codec is chosen with the link rate measured up to that moment.
  void prepare(Slot& s, Slot* in_flight, const std::vector<uint32_t>& chunks, uint32_t round,
               uint32_t window) {
    s.d = WindowDescriptor{round, window, {}};
    s.wire.resize(chunks.size());
    std::vector<CodecSample> samples;
    if (!forced_ && link_.bytes_per_s() > 0) {
      const auto first = src_.subspan(offset_of(h_, chunks[0]),
                                      chunk_raw_bytes(h_.object_bytes, h_.chunk_bytes, chunks[0]));
      samples = sample_codecs(first.first(std::min(first.size(), kSampleBytes)), auto_candidates());
    }
    for (size_t k = 0; k < chunks.size(); ++k) {
      if (in_flight) drain(*in_flight, false);
      ChunkEntry e;
      e.chunk = chunks[k];
      e.raw_bytes = chunk_raw_bytes(h_.object_bytes, h_.chunk_bytes, e.chunk);
      const auto raw = src_.subspan(offset_of(h_, e.chunk), e.raw_bytes);
      e.raw_hash = xxh3(raw);
      e.codec = forced_ ? *forced_ : choose_codec(link_.bytes_per_s(), samples);
      e.wire_bytes = e.raw_bytes;
      if (e.codec.codec != Codec::kNone) {
        auto& buf = s.wire[k];
        buf.resize(compress_bound(e.codec.codec, raw.size()));
        const size_t n = compress(e.codec, raw, buf);
        if (n == 0 || n >= raw.size()) {
          e.codec = {Codec::kNone, 0};
        } else {
          buf.resize(n);
          e.wire_bytes = static_cast<uint32_t>(n);
        }
      }
      s.d.entries.push_back(e);
    }
  }

  // Posts the descriptor, then every chunk at its wire size (uncompressed ones from the source).
  void issue(Slot& s) {
    auto& ch = s_.ch();
    s.desc = encode_window(s.d, h_.window_chunks);
    s.works.clear();
    s.issued.clear();
    s.completed.clear();
    s.drained = 0;
    s.works.push_back(ch.move(s.desc.data(), s.desc.size(), s_.root()));
    s.issued.push_back(Clock::now());
    s.completed.push_back(nullptr);
    for (size_t k = 0; k < s.d.entries.size(); ++k) {
      const auto& e = s.d.entries[k];
      void* data =
          e.codec.codec == Codec::kNone
              ? const_cast<uint8_t*>(src_.data() + offset_of(h_, e.chunk))  // only read at the root
              : s.wire[k].data();
      auto at = std::make_shared<std::atomic<Clock::rep>>(0);
      s.issued.push_back(Clock::now());
      s.works.push_back(ch.move(data, e.wire_bytes, s_.root()));
      s.works.back().on_complete(
          [at](std::exception_ptr) { at->store(Clock::now().time_since_epoch().count()); });
      s.completed.push_back(at);
      s_.count(e);
    }
  }

  // Retires the slot's completed operations in order (all of them when `block`), feeding the link
  // meter. Throws the communicator's Error.
  void drain(Slot& s, bool block) {
    while (s.drained < s.works.size() && (block || s.works[s.drained].test())) {
      s.works[s.drained].wait();
      const size_t k = s.drained++;
      if (k == 0) continue;  // the descriptor
      const auto& e = s.d.entries[k - 1];
      const Clock::time_point done{Clock::duration{s.completed[k]->load()}};
      link_.record(s.issued[k], done, e.wire_bytes);
      done_ += e.raw_bytes;
    }
  }

  Session& s_;
  const ObjectHeader& h_;
  std::span<const uint8_t> src_;
  std::optional<CodecChoice> forced_;
  LinkMeter link_;
  Slot slot_[2];
  uint64_t done_ = 0, resumed_ = 0;
};

// ---- a receiver ----

class ReceiverSide {
 public:
  ReceiverSide(Session& s, const ObjectHeader& h, Destination& d, std::vector<uint8_t> verified,
               TestHooks hooks)
      : s_(s),
        h_(h),
        dest_(d),
        verified_(std::move(verified)),
        hash_(h.chunk_count, 0),
        hooks_(hooks) {
    for (uint32_t i = 0; i < h.chunk_count; ++i)
      if (verified_[i]) done_ += chunk_raw_bytes(h.object_bytes, h.chunk_bytes, i);
    resumed_ = done_;
  }

  const std::vector<uint8_t>& verified() const { return verified_; }

  // Receives the chunks `need` lists; returns one byte per chunk, 1 where verification failed
  // here. A local failure to record progress is kept in *mid for the next vote.
  std::vector<uint8_t> round(const std::vector<uint32_t>& need, uint32_t round, LocalFailure* mid) {
    failed_.assign(h_.chunk_count, 0);
    const auto windows = windows_of(need, h_.window_chunks);
    if (windows.empty()) return failed_;
    issue_desc(0);
    open_chunks(windows, 0, round);
    if (windows.size() > 1) issue_desc(1);
    for (size_t w = 0; w < windows.size(); ++w) {
      if (w + 1 < windows.size()) {
        try {
          open_chunks(windows, w + 1, round);
        } catch (const Error&) {
          // The transfer broke (a peer lost, a deadline): keep what already arrived for a rerun.
          salvage(slot_[w % 2], round);
          throw;
        }
        if (w + 2 < windows.size()) issue_desc(w + 2);
      }
      try {
        for (size_t k = 0; k < slot_[w % 2].works.size(); ++k) {
          slot_[w % 2].works[k].wait();
          verify(slot_[w % 2], k, round);
        }
      } catch (const Error&) {
        salvage(slot_[w % 2], round);
        throw;
      }
      persist(mid);
      s_.report(done_, resumed_);
      if (hooks_.exit_after >= 0 && verified_now_ >= static_cast<uint64_t>(hooks_.exit_after)) {
        std::fprintf(stderr, "blob: test hook: exiting after %llu verified chunks\n",
                     static_cast<unsigned long long>(verified_now_));
        std::fflush(stderr);
        ::_exit(75);
      }
    }
    return failed_;
  }

 private:
  struct Slot {
    WindowDescriptor d;
    std::vector<Work> works;
    std::vector<std::vector<uint8_t>> staging;
    std::vector<uint8_t*> target;
    size_t checked = 0;  // chunks verify() has seen
  };

  void issue_desc(size_t w) {
    auto& b = desc_[w % 3];
    b.assign(window_descriptor_bytes(h_.window_chunks), 0);
    desc_work_[w % 3] = s_.ch().move(b.data(), b.size(), s_.root());
  }

  // Waits for window w's descriptor, checks it is the window expected, and posts its chunks:
  // an uncompressed chunk this rank needs straight into the destination, the others into staging.
  void open_chunks(const std::vector<std::vector<uint32_t>>& windows, size_t w, uint32_t round) {
    desc_work_[w % 3].wait();
    Slot& s = slot_[w % 2];
    if (!decode_window(desc_[w % 3], h_, &s.d) || s.d.round != round || s.d.window != w ||
        s.d.entries.size() != windows[w].size())
      throw Error(ErrorCode::kProtocol,
                  "blob: window descriptor " + std::to_string(w) + " does not decode");
    for (size_t k = 0; k < windows[w].size(); ++k)
      if (s.d.entries[k].chunk != windows[w][k])
        throw Error(ErrorCode::kProtocol,
                    "blob: window " + std::to_string(w) + " lists unexpected chunks");
    s.works.clear();
    s.target.clear();
    s.checked = 0;
    s.staging.resize(s.d.entries.size());
    for (size_t k = 0; k < s.d.entries.size(); ++k) {
      const auto& e = s.d.entries[k];
      uint8_t* t;
      if (e.codec.codec == Codec::kNone && !verified_[e.chunk]) {
        t = dest_.bytes().data() + offset_of(h_, e.chunk);
      } else {
        s.staging[k].resize(e.wire_bytes);
        t = s.staging[k].data();
      }
      s.target.push_back(t);
      s.works.push_back(s_.ch().move(t, e.wire_bytes, s_.root()));
      s_.count(e);
    }
  }

  // Checks chunk k of the slot (received): decompressed into place and hashed, it counts as
  // verified; otherwise it is marked for the next round.
  void verify(Slot& s, size_t k, uint32_t round) {
    const auto& e = s.d.entries[k];
    s.checked = k + 1;
    if (round == 0 && hooks_.corrupt_chunk == static_cast<int64_t>(e.chunk))
      s.target[k][e.wire_bytes / 2] ^= 0x5a;
    if (verified_[e.chunk]) return;  // another rank's refetch or resume gap
    const auto raw = dest_.bytes().subspan(offset_of(h_, e.chunk), e.raw_bytes);
    const bool ok = (e.codec.codec == Codec::kNone ||
                     decompress(e.codec.codec, std::span(s.target[k], e.wire_bytes), raw)) &&
                    xxh3(raw) == e.raw_hash;
    if (!ok) {
      failed_[e.chunk] = 1;
      ++s_.result().chunks_refetched;
      return;
    }
    verified_[e.chunk] = 1;
    hash_[e.chunk] = e.raw_hash;
    done_ += e.raw_bytes;
    ++verified_now_;
  }

  // After a failure: verifies the slot's chunks that arrived intact (in order, up to the first
  // that did not) and records them, best effort.
  void salvage(Slot& s, uint32_t round) {
    for (size_t k = s.checked; k < s.works.size() && s.works[k].ok(); ++k) verify(s, k, round);
    LocalFailure ignored;
    persist(&ignored);
  }

  void persist(LocalFailure* mid) {
    if (mid->code != ErrorCode::kOk) return;
    try {
      dest_.persist(verified_, hash_);
    } catch (const Error& e) {
      *mid = failure_of(e);
    }
  }

  Session& s_;
  const ObjectHeader& h_;
  Destination& dest_;
  std::vector<uint8_t> verified_, failed_;
  std::vector<uint64_t> hash_;
  TestHooks hooks_;
  Slot slot_[2];
  std::vector<uint8_t> desc_[3];
  Work desc_work_[3];
  uint64_t done_ = 0, resumed_ = 0, verified_now_ = 0;
};

// Steps 3-5 after the header, for either side; `round_fn` runs one round and returns the local
// failures, `finish_fn` delivers (receivers) and returns the local status.
template <class RoundFn, class FinishFn>
void run_rounds(Session& s, const ObjectHeader& h, const std::vector<uint8_t>& need0,
                RoundFn&& round_fn, FinishFn&& finish_fn) {
  auto need = needed(need0);
  s.result().chunks_resumed = h.chunk_count - static_cast<uint32_t>(need.size());
  for (uint32_t round = 0; !need.empty(); ++round) {
    if (round > static_cast<uint32_t>(s.opts().max_refetch_rounds))
      throw Error(ErrorCode::kProtocol, "blob: " + std::to_string(need.size()) +
                                            " chunk(s) still failed verification after " +
                                            std::to_string(round) + " rounds");
    s.result().rounds = round + 1;
    LocalFailure mid;
    auto failed = round_fn(need, round, &mid);
    need = needed(s.vote(mid, failed));
  }
  s.vote(finish_fn(), {});
  s.finish();
}

ObjectHeader exchange_header(Session& s, const Opening& op, const ObjectHeader* mine,
                             LocalFailure* local) {
  std::vector<uint8_t> buf =
      mine ? encode_header(*mine) : std::vector<uint8_t>(kObjectHeaderBytes, 0);
  s.ch().move(buf.data(), buf.size(), s.root()).wait();
  ObjectHeader h;
  if (mine) return *mine;
  if (!decode_header(buf, &h) || h.object_bytes != op.object_bytes ||
      h.chunk_bytes != op.chunk_bytes)
    *local = {ErrorCode::kProtocol, "the object header does not decode"};
  return h;
}

}  // namespace

LocalFailure failure_of(const Error& e) {
  std::string why = e.what();
  const std::string prefix = std::string(error_code_name(e.code())) + ": ";
  if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
  return {e.code(), why};
}

LocalFailure check_options(const BlobOptions& o) {
  if (o.chunk_bytes < kMinChunkBytes || o.chunk_bytes > kMaxChunkBytes)
    return {ErrorCode::kInvalidArgument,
            "chunk_bytes must be 64 KiB .. 64 MiB, got " + std::to_string(o.chunk_bytes)};
  if (o.window_chunks < 1 || o.window_chunks > kMaxWindowChunks)
    return {ErrorCode::kInvalidArgument,
            "window_chunks must be 1 .. 64, got " + std::to_string(o.window_chunks)};
  if (o.codec != "auto" && !parse_codec(o.codec, o.zstd_level))
    return {ErrorCode::kInvalidArgument,
            "codec must be auto, none, lz4 or zstd (level 1..19), got " + o.codec + " level " +
                std::to_string(o.zstd_level)};
  if (o.max_refetch_rounds < 0 || o.max_refetch_rounds > 100)
    return {ErrorCode::kInvalidArgument, "max_refetch_rounds must be 0 .. 100"};
  return {};
}

BlobResult send_blob(BlobChannel& ch, int root, std::span<const uint8_t> source, LocalFailure pre,
                     const BlobOptions& o) {
  Session s(ch, root, o);
  if (pre.code == ErrorCode::kOk && chunk_count(source.size(), o.chunk_bytes) > kMaxChunks)
    pre = {ErrorCode::kInvalidArgument,
           "object too large for chunks of " + std::to_string(o.chunk_bytes) + " bytes"};
  const Opening op =
      s.open(pre, static_cast<int64_t>(source.size()), static_cast<int64_t>(o.chunk_bytes));
  ObjectHeader h;
  h.object_bytes = op.object_bytes;
  h.chunk_bytes = op.chunk_bytes;
  h.window_chunks = static_cast<uint32_t>(o.window_chunks);
  h.chunk_count = static_cast<uint32_t>(chunk_count(h.object_bytes, h.chunk_bytes));
  LocalFailure local;
  h.object_hash = xxh3(source);
  exchange_header(s, op, &h, &local);
  s.result().object_bytes = h.object_bytes;
  s.result().object_hash = h.object_hash;
  s.result().chunks = h.chunk_count;
  const auto need0 = s.vote(local, std::vector<uint8_t>(h.chunk_count, 0));
  RootSide side(s, h, source);
  uint64_t resumed = 0;
  for (uint32_t i = 0; i < h.chunk_count; ++i)
    if (!need0[i]) resumed += chunk_raw_bytes(h.object_bytes, h.chunk_bytes, i);
  side.set_resumed(resumed);
  run_rounds(
      s, h, need0,
      [&](const std::vector<uint32_t>& need, uint32_t round, LocalFailure*) {
        side.round(need, round);
        return std::vector<uint8_t>(h.chunk_count, 0);
      },
      [] { return LocalFailure{}; });
  return s.result();
}

BlobResult receive_blob(BlobChannel& ch, int root, Destination& dest, LocalFailure pre,
                        const BlobOptions& o) {
  Session s(ch, root, o);
  const Opening op = s.open(pre, o.expected_size ? static_cast<int64_t>(*o.expected_size) : -1, 0);
  LocalFailure local;
  const ObjectHeader h = exchange_header(s, op, nullptr, &local);
  const uint32_t chunks =
      static_cast<uint32_t>(std::min(chunk_count(op.object_bytes, op.chunk_bytes), kMaxChunks));
  std::vector<uint8_t> verified(chunks, 0);
  if (local.code == ErrorCode::kOk) {
    try {
      verified = dest.open(h);
    } catch (const Error& e) {
      local = failure_of(e);
    }
  }
  std::vector<uint8_t> lacking(chunks, 0);
  for (uint32_t i = 0; i < chunks; ++i) lacking[i] = verified[i] ? 0 : 1;
  const auto need0 = s.vote(local, lacking);
  s.result().object_bytes = h.object_bytes;
  s.result().object_hash = h.object_hash;
  s.result().chunks = h.chunk_count;
  ReceiverSide side(s, h, dest, verified, test_hooks_from_env(ch.rank_of(ch.me())));
  run_rounds(
      s, h, need0,
      [&](const std::vector<uint32_t>& need, uint32_t round, LocalFailure* mid) {
        return side.round(need, round, mid);
      },
      [&]() -> LocalFailure {
        if (xxh3(dest.bytes()) != h.object_hash)
          return {ErrorCode::kProtocol, "the object's hash does not match"};
        try {
          dest.commit();
        } catch (const Error& e) {
          return failure_of(e);
        }
        return {};
      });
  return s.result();
}

}  // namespace geoccl::blob
