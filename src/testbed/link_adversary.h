// The on-path adversary of one directed link, free of I/O: the attacks the
// control language arms on it (tamper, replay, sniff) and what they did. The
// forwarder hands it every packet it queued on the link (the bytes still in
// their buffer, before delivery); it changes or inspects them through
// adversary.h, so the receiving kernel accepts every change.
//
//   tamper N   flip one payload byte of each of the next N TCP segments that
//              carry payload
//   replay N   the next N payload-carrying segments of a flow whose previous
//              segment was seen since arming get that previous segment's
//              payload instead of theirs (same length, same sequence number:
//              the receiver's TCP takes the old bytes as the new ones)
//   sniff HEX  count, from then on, the payload-carrying segments whose payload
//              contains the pattern
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "adversary.h"

namespace geoccl::testbed {

struct AdversaryCounters {
  std::uint64_t tampered = 0;       // segments with a flipped byte
  std::uint64_t replayed = 0;       // segments whose payload was an earlier one's
  std::uint64_t sniff_packets = 0;  // payload-carrying segments examined since `sniff`
  std::uint64_t sniff_matches = 0;  // of those, the ones containing the pattern
};

class LinkAdversary {
 public:
  // Flows remembered for replay; beyond that the oldest is forgotten.
  static constexpr std::size_t kMaxFlows = 256;

  void tamper(std::uint32_t segments);
  void replay(std::uint32_t segments);
  // An empty pattern stops sniffing. A new pattern restarts the counts.
  void sniff(std::vector<std::uint8_t> pattern);

  // Whether any attack is armed (the forwarder skips the link otherwise).
  bool armed() const { return tamper_left_ > 0 || replay_left_ > 0 || !pattern_.empty(); }
  // Whether any attack was ever armed on the link (shown in the stats).
  bool used() const { return used_; }

  // Applies the armed attacks to one packet on the link, in wire order.
  void process(std::span<std::uint8_t> packet);

  const AdversaryCounters& counters() const { return counters_; }
  std::uint32_t tamper_pending() const { return tamper_left_; }
  std::uint32_t replay_pending() const { return replay_left_; }
  const std::vector<std::uint8_t>& pattern() const { return pattern_; }

 private:
  void replay_segment(std::span<std::uint8_t> packet, const TcpSegment& s);

  std::uint32_t tamper_left_ = 0;
  std::uint32_t replay_left_ = 0;
  std::vector<std::uint8_t> pattern_;
  bool used_ = false;
  AdversaryCounters counters_;
  // The payload of the last segment of each flow seen since replay was armed, oldest first.
  std::vector<std::pair<TcpFlow, std::vector<std::uint8_t>>> last_payload_;
};

// "c0ffee..." for a pattern.
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace geoccl::testbed
