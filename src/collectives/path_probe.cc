// The protocol decider's probe between two ranks (the leaders of two domains): for every
// candidate transport both ends have connected, the fastest of `pings` ping-pongs and a burst of
// `bytes` one way in frames of the chunk size, timed by the lower rank up to the higher rank's
// answer, and the CPU time both processes spent meanwhile. Both ranks run it in lockstep; `use`
// switches the pair to a candidate on this rank. Ends on candidate 0.
#include <time.h>

#include <chrono>
#include <cstring>

#include "collectives/collectives.h"

namespace geoccl::collectives {

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<topology::PathFigures> probe_path(OpContext& c, int peer, const std::vector<std::string>& names,
                                              const std::vector<char>& available,
                                              const std::function<void(size_t)>& use, size_t bytes, int pings) {
  const bool lower = c.rank() < peer;
  std::vector<topology::PathFigures> out(names.size());
  // Which candidates both ends have connected (on the current one, candidate 0).
  uint8_t mine = 0, theirs = 0;
  for (size_t i = 0; i < names.size() && i < 8; ++i)
    if (available[i]) mine = static_cast<uint8_t>(mine | (1u << i));
  auto sent = c.send(peer, std::span<const uint8_t>(&mine, 1));
  c.wait(c.recv(peer, std::span<uint8_t>(&theirs, 1)));
  c.wait(sent);
  const size_t chunk = std::max<size_t>(4096, std::min(c.chunk_bytes(), bytes));
  std::vector<uint8_t> burst(bytes, 0x5a);
  for (size_t i = 0; i < names.size(); ++i) {
    out[i].transport = names[i];
    if (!((mine & theirs) & (1u << i))) continue;
    use(i);
    uint8_t ping[8] = {1}, pong[8] = {};
    double best = 1e300;
    for (int p = 0; p < pings; ++p) {
      if (lower) {
        const auto t0 = std::chrono::steady_clock::now();
        c.wait(c.send(peer, ping));
        c.wait(c.recv(peer, pong));
        best = std::min(best, ms_since(t0));
      } else {
        c.wait(c.recv(peer, pong));
        c.wait(c.send(peer, ping));
      }
    }
    double peer_cpu = 0;
    if (lower) {
      const double cpu0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<RequestPtr> sends;
      for (size_t off = 0; off < bytes; off += chunk)
        sends.push_back(c.send(peer, std::span<const uint8_t>(burst.data() + off, std::min(chunk, bytes - off)), off));
      c.wait(c.recv(peer, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&peer_cpu), sizeof peer_cpu)));
      const double burst_ms = ms_since(t0);
      for (auto& s : sends) c.wait(s);
      const double cpu = cpu_seconds() - cpu0 + peer_cpu;
      auto& f = out[i];
      f.ok = true;
      f.rtt_ms = best;
      f.burst_ms = burst_ms;
      f.mbps = static_cast<double>(bytes) * 8 / (std::max(burst_ms - best, 1e-3) * 1e3);
      f.cpu_s_per_gbit = cpu / (static_cast<double>(bytes) * 8 / 1e9);
    } else {
      const double cpu0 = cpu_seconds();
      std::vector<RequestPtr> recvs;
      for (size_t off = 0; off < bytes; off += chunk)
        recvs.push_back(c.recv(peer, std::span<uint8_t>(burst.data() + off, std::min(chunk, bytes - off)), off));
      for (auto& r : recvs) c.wait(r);
      peer_cpu = cpu_seconds() - cpu0;
      c.wait(c.send(peer, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&peer_cpu), sizeof peer_cpu)));
    }
  }
  use(0);
  return out;
}

RatePair probe_rates(OpContext& c, int peer, size_t bytes, double rtt_ms) {
  // Both ends send a burst at once (the two directions of a path are separate links). Each
  // receiver times the arrivals from the first frame to the last, on its own clock (the first
  // frame's one-way delay left out), and answers with that figure; each sender bounds it by its
  // own time from the first send to the answer, less one round trip.
  const size_t frame = std::max<size_t>(4096, bytes / 16);
  std::vector<uint8_t> out_burst(bytes, 0x5a), in_burst(bytes);
  const auto start = std::chrono::steady_clock::now();
  std::vector<RequestPtr> recvs, sends;
  for (size_t off = 0; off < bytes; off += frame)
    recvs.push_back(c.recv(peer, std::span<uint8_t>(in_burst.data() + off, std::min(frame, bytes - off)), off));
  for (size_t off = 0; off < bytes; off += frame)
    sends.push_back(c.send(peer, std::span<const uint8_t>(out_burst.data() + off, std::min(frame, bytes - off)), off));
  c.wait(recvs[0]);
  const auto first = std::chrono::steady_clock::now();
  for (size_t i = 1; i < recvs.size(); ++i) c.wait(recvs[i]);
  const double in_ms = std::max(ms_since(first), 1e-3);
  RatePair r;
  r.in_mbps = static_cast<double>(bytes - std::min(frame, bytes)) * 8 / (in_ms * 1e3);
  // The answer goes on a frame of its own offset: after the burst's frames in the pair's order.
  auto answered = c.send(peer, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&r.in_mbps), sizeof r.in_mbps), bytes);
  c.wait(c.recv(peer, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&r.out_mbps), sizeof r.out_mbps), bytes));
  const double out_ms = std::max(ms_since(start) - rtt_ms, 1e-3);
  r.out_mbps = std::min(r.out_mbps, static_cast<double>(bytes) * 8 / (out_ms * 1e3));
  c.wait_all(sends);
  c.wait(answered);
  // Both ends keep the same figures: each learns what the other bounded.
  double theirs[2] = {0, 0};
  const double mine[2] = {r.out_mbps, r.in_mbps};
  auto agreed = c.send(peer, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine), sizeof mine), bytes + 1);
  c.wait(c.recv(peer, std::span<uint8_t>(reinterpret_cast<uint8_t*>(theirs), sizeof theirs), bytes + 1));
  c.wait(agreed);
  r.in_mbps = std::min(r.in_mbps, theirs[0]);
  return r;
}

}  // namespace geoccl::collectives
