// Random loss applied to packets that made it through the bottleneck:
// independent (Bernoulli) loss plus an optional Gilbert–Elliott two-state
// burst model. Deterministic for a given seed so that a failing run can be
// replayed: the generator is std::mt19937_64 (whose output sequence the C++
// standard fixes) and uniform doubles are derived from its bits by hand,
// because std::uniform_real_distribution differs between standard libraries.
#pragma once

#include <cstdint>
#include <random>

namespace geoccl::testbed {

// Classic Gilbert–Elliott parameters, evaluated once per packet:
// in Good, move to Bad with probability p; in Bad, move to Good with
// probability r; then lose the packet with the current state's loss ratio.
// Mean burst length is 1/r packets; the stationary share of Bad is p/(p+r).
struct GilbertElliott {
  double p = 0;          // P(Good -> Bad)
  double r = 1;          // P(Bad -> Good)
  double loss_good = 0;  // loss ratio while Good (1 - k)
  double loss_bad = 1;   // loss ratio while Bad (1 - h)
  bool enabled = false;

  // Long-run loss ratio of the model alone.
  double mean_loss() const {
    if (!enabled || p + r <= 0) return 0;
    const double bad = p / (p + r);
    return bad * loss_bad + (1 - bad) * loss_good;
  }
};

class LossModel {
 public:
  LossModel(double bernoulli, const GilbertElliott& ge, std::uint64_t seed)
      : bernoulli_(bernoulli), ge_(ge), rng_(seed) {}

  // Draws the fate of one packet. The Bernoulli draw always happens, so the
  // random sequence does not depend on whether the Gilbert–Elliott model is on.
  bool lose() {
    bool lost = uniform() < bernoulli_;
    if (ge_.enabled) {
      bad_ = bad_ ? !(uniform() < ge_.r) : (uniform() < ge_.p);
      if (uniform() < (bad_ ? ge_.loss_bad : ge_.loss_good)) lost = true;
    }
    return lost;
  }

  void set_bernoulli(double loss) { bernoulli_ = loss; }
  void set_gilbert_elliott(const GilbertElliott& ge) {
    ge_ = ge;
    if (!ge_.enabled) bad_ = false;
  }
  double bernoulli() const { return bernoulli_; }
  const GilbertElliott& gilbert_elliott() const { return ge_; }
  bool in_bad_state() const { return bad_; }

  // Uniform in [0, 1) from the top 53 bits.
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

 private:
  double bernoulli_;
  GilbertElliott ge_;
  std::mt19937_64 rng_;
  bool bad_ = false;
};

}  // namespace geoccl::testbed
