// RTT matrix measurement for domain discovery: k-1 rounds of a round-robin tournament among k
// players (every round pairs each player with one other), the lower rank of a pair times `pings`
// ping-pongs and keeps the fastest; then the rows are allgathered by every rank. Costs about
// (k-1) * pings * RTT.
#include <algorithm>
#include <chrono>

#include "collectives/collectives.h"

namespace geoccl::collectives {

std::vector<double> measure_rtt_matrix(OpContext& c, int pings, const std::vector<int>& players) {
  const int n = c.size();
  const auto un = static_cast<size_t>(n);
  std::vector<double> row(un, 0.0), matrix(un * un, 0.0);
  // A round-robin tournament among the players: each round pairs them up, every pair meets once.
  std::vector<int> who = players;
  if (who.empty())
    for (int r = 0; r < n; ++r) who.push_back(r);
  const int k = static_cast<int>(who.size());
  const int me = static_cast<int>(std::find(who.begin(), who.end(), c.rank()) - who.begin());  // k: not playing
  const int seats = k % 2 == 0 ? k : k + 1;  // odd k: one player sits out each round
  uint8_t out[8] = {1}, in[8] = {};
  for (int round = 0; me < k && round < seats - 1; ++round) {
    int seat = -1;
    if (me == seats - 1) seat = round;
    else if (me == round) seat = seats - 1;
    else {
      const int m = seats - 1;
      const int i = ((me - round) % m + m) % m;  // position on the circle relative to `round`
      seat = ((round - i) % m + m) % m;
    }
    if (seat < 0 || seat >= k || seat == me) continue;
    const int peer = who[static_cast<size_t>(seat)];
    double best = 1e300;
    for (int p = 0; p < pings; ++p) {
      if (c.rank() < peer) {
        const auto t0 = std::chrono::steady_clock::now();
        c.wait(c.send(peer, out, static_cast<uint64_t>(round)));
        c.wait(c.recv(peer, in, static_cast<uint64_t>(round)));
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      } else {
        c.wait(c.recv(peer, in, static_cast<uint64_t>(round)));
        c.wait(c.send(peer, out, static_cast<uint64_t>(round)));
      }
    }
    if (c.rank() < peer) row[static_cast<size_t>(peer)] = best;
  }
  ring_allgather(c, row.data(), matrix.data(), un * sizeof(double));
  // Only the lower rank of each pair measured: mirror its value.
  for (size_t i = 0; i < un; ++i)
    for (size_t j = 0; j < un; ++j)
      matrix[i * un + j] = std::max(matrix[i * un + j], matrix[j * un + i]);
  return matrix;
}

}  // namespace geoccl::collectives
