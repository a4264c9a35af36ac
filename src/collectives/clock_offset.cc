// Clock offsets for traces (GEOCCL_TRACE): rank 0 times `pings` round trips with each peer in
// turn, the peer answering with its own clock's reading; of each peer's samples, the one with
// the shortest round trip gives offset = t_peer - (t_send + t_back) / 2 (NTP's estimate, off by
// at most half that round trip's asymmetry). Rank 0 then tells each peer its offset. Costs
// about pings * the sum of rank 0's RTTs.
#include <cstring>

#include "collectives/collectives.h"

namespace geoccl::collectives {

namespace {

void put_i64(uint8_t* p, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(u >> (8 * i));
}
int64_t get_i64(const uint8_t* p) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<int64_t>(u);
}

}  // namespace

ClockOffset measure_clock_offset(OpContext& c, int pings, int64_t (*now_us)()) {
  const int n = c.size(), me = c.rank();
  uint8_t out[16] = {}, in[16] = {};
  ClockOffset mine;
  if (me == 0) {
    for (int p = 1; p < n; ++p) {
      int64_t best_rtt = INT64_MAX, best_offset = 0;
      for (int i = 0; i < pings; ++i) {
        const int64_t t0 = now_us();
        put_i64(out, t0);
        c.wait(c.send(p, {out, 8}));
        c.wait(c.recv(p, {in, 8}));
        const int64_t t2 = now_us();
        if (t2 - t0 < best_rtt) {
          best_rtt = t2 - t0;
          best_offset = get_i64(in) - (t0 + (t2 - t0) / 2);
        }
      }
      put_i64(out, best_offset);
      put_i64(out + 8, best_rtt);
      c.wait(c.send(p, {out, 16}));
    }
    return mine;
  }
  for (int i = 0; i < pings; ++i) {
    c.wait(c.recv(0, {in, 8}));
    put_i64(out, now_us());
    c.wait(c.send(0, {out, 8}));
  }
  c.wait(c.recv(0, {in, 16}));
  mine.offset_us = static_cast<double>(get_i64(in));
  mine.rtt_us = static_cast<double>(get_i64(in + 8));
  return mine;
}

}  // namespace geoccl::collectives
