#include "link_adversary.h"

#include <algorithm>

namespace geoccl::testbed {

void LinkAdversary::tamper(std::uint32_t segments) {
  tamper_left_ = segments;
  used_ = true;
}

void LinkAdversary::replay(std::uint32_t segments) {
  replay_left_ = segments;
  last_payload_.clear();  // "previous" means seen since this command
  used_ = true;
}

void LinkAdversary::sniff(std::vector<std::uint8_t> pattern) {
  pattern_ = std::move(pattern);
  counters_.sniff_packets = counters_.sniff_matches = 0;
  used_ = true;
}

void LinkAdversary::process(std::span<std::uint8_t> packet) {
  const auto s = parse_tcp_segment(packet);
  if (!s || s->payload_size == 0) return;
  // The sniffer sees the segment as its sender sent it.
  if (!pattern_.empty()) {
    ++counters_.sniff_packets;
    if (payload_contains(packet, pattern_)) ++counters_.sniff_matches;
  }
  if (replay_left_ > 0) replay_segment(packet, *s);
  if (tamper_left_ > 0 && flip_payload_byte(packet, s->payload_size / 2)) {
    --tamper_left_;
    ++counters_.tampered;
  }
}

void LinkAdversary::replay_segment(std::span<std::uint8_t> packet, const TcpSegment& s) {
  const auto payload = payload_of(packet, s);
  std::vector<std::uint8_t> original(payload.begin(), payload.end());
  auto it = std::find_if(last_payload_.begin(), last_payload_.end(),
                         [&](const auto& e) { return e.first == s.flow; });
  if (it == last_payload_.end()) {
    if (last_payload_.size() >= kMaxFlows) last_payload_.erase(last_payload_.begin());
    last_payload_.emplace_back(s.flow, std::move(original));
    return;  // nothing earlier of this flow to replay yet
  }
  if (overwrite_payload(packet, it->second) > 0) {
    --replay_left_;
    ++counters_.replayed;
  }
  it->second = std::move(original);  // the next one gets the bytes really sent here
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const std::uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 0x0F];
  }
  return out;
}

}  // namespace geoccl::testbed
