// RTT matrix measurement for domain discovery: n-1 rounds of a round-robin tournament (every
// round pairs each rank with one other), the lower rank of a pair times `pings` ping-pongs and
// keeps the fastest; then the rows are allgathered. Costs about (n-1) * pings * RTT.
#include <chrono>

#include "collectives/collectives.h"

namespace geoccl::collectives {

std::vector<double> measure_rtt_matrix(OpContext& c, int pings) {
  const int n = c.size(), me = c.rank();
  const auto un = static_cast<size_t>(n);
  std::vector<double> row(un, 0.0), matrix(un * un, 0.0);
  const int players = n % 2 == 0 ? n : n + 1;  // odd n: one rank sits out each round
  uint8_t out[8] = {1}, in[8] = {};
  for (int round = 0; round < players - 1; ++round) {
    int peer = -1;
    if (me == players - 1) peer = round;
    else if (me == round) peer = players - 1;
    else {
      const int m = players - 1;
      const int i = ((me - round) % m + m) % m;  // position on the circle relative to `round`
      peer = ((round - i) % m + m) % m;
    }
    if (peer < 0 || peer >= n || peer == me) continue;
    double best = 1e300;
    for (int p = 0; p < pings; ++p) {
      if (me < peer) {
        const auto t0 = std::chrono::steady_clock::now();
        c.wait(c.send(peer, out, static_cast<uint64_t>(round)));
        c.wait(c.recv(peer, in, static_cast<uint64_t>(round)));
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      } else {
        c.wait(c.recv(peer, in, static_cast<uint64_t>(round)));
        c.wait(c.send(peer, out, static_cast<uint64_t>(round)));
      }
    }
    if (me < peer) row[static_cast<size_t>(peer)] = best;
  }
  ring_allgather(c, row.data(), matrix.data(), un * sizeof(double));
  // Only the lower rank of each pair measured: mirror its value.
  for (size_t i = 0; i < un; ++i)
    for (size_t j = 0; j < un; ++j)
      matrix[i * un + j] = std::max(matrix[i * un + j], matrix[j * un + i]);
  return matrix;
}

}  // namespace geoccl::collectives
