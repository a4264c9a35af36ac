// The test bed's decoders: packets the emulator's adversary parses (testbed/adversary.h), the
// flow key its per-flow shaper reads from every packet (testbed/link_model.h), and the control language its socket and scenario events speak (testbed/control_command.h). Never a
// crash or an out-of-bounds access; a parsed segment lies inside the packet; flipping a payload
// byte twice restores the packet exactly (checksum included); overwriting a payload with itself
// changes nothing; a bad command is a std::runtime_error, nothing else.
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "testbed/adversary.h"
#include "testbed/control_command.h"
#include "testbed/link_model.h"

using namespace geoccl::testbed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> packet(data, data + size);
  if (const auto seg = parse_tcp_segment(packet)) {
    if (seg->payload_offset + seg->payload_size > size || seg->payload_offset < seg->tcp_offset + 20) std::abort();
    update_tcp_checksum(packet, *seg);  // the input's checksum need not have been right
    const auto payload = payload_of(packet, *seg);
    if (payload.size() != seg->payload_size) std::abort();
    if (seg->payload_size > 0) {
      const std::vector<uint8_t> before = packet;
      const size_t at = data[size - 1] % seg->payload_size;
      if (!flip_payload_byte(packet, at) || packet == before) std::abort();
      if (!flip_payload_byte(packet, at) || packet != before) std::abort();
      const std::vector<uint8_t> same(payload.begin(), payload.end());
      if (overwrite_payload(packet, same) != same.size()) std::abort();
      if (packet != before) std::abort();
      if (!payload_contains(packet, std::span<const uint8_t>(same.data(), std::min<size_t>(same.size(), 8))))
        std::abort();
    }
  } else if (size > 0 && (flip_payload_byte(packet, 0) || overwrite_payload(packet, packet) != 0)) {
    std::abort();  // nothing to change in what does not parse
  }
  // A TCP segment the adversary parses has the flow key of a TCP flow; a key is never 0 for a flow.
  if (parse_tcp_segment(std::vector<uint8_t>(data, data + size)) && flow_key(data, size) == 0) std::abort();
  try {
    (void)parse_control_command(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const std::runtime_error&) {
  }
  return 0;
}
