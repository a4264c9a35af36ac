// seal_bench: GB/s of one core sealing and opening frames with each cipher (security/sealer.h),
// as the TCP transport does: 4 MiB frames in 256 KiB records, the header as associated data.
//   build/bench/seal_bench [frame_bytes] [seconds]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <sodium.h>

#include "protocol/frame.h"
#include "security/sealer.h"

using namespace geoccl;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{4} << 20;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 1.0;
  security::init_sodium();
  std::printf("%-18s %10s %10s %10s\n", "cipher", "frame_B", "seal_GB/s", "open_GB/s");
  for (uint8_t cipher : {security::kCipherAes256Gcm, security::kCipherXChaCha20Poly1305}) {
    if (cipher == security::kCipherAes256Gcm && !crypto_aead_aes256gcm_is_available()) continue;
    security::Key key{};
    randombytes_buf(key.data(), key.size());
    std::vector<uint8_t> plain(bytes, 7), wire(security::sealed_payload_size(bytes));
    protocol::FrameHeader h;
    h.payload_len = static_cast<uint32_t>(bytes);
    const auto hb = protocol::encode_frame_header(h);
    security::FrameSealer sealer(cipher, key, key);
    security::FrameOpener opener(cipher, key, key);
    std::vector<std::vector<uint8_t>> frames;
    size_t n = 0;
    auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
      sealer.seal(hb, plain, wire.data());
      ++n;
    }
    const double seal_s = std::chrono::duration<double>(Clock::now() - t0).count();
    // Open the same number of frames (sealed afresh, numbered as a connection numbers them).
    security::FrameSealer s2(cipher, key, key);
    double open_s = 0;
    for (size_t i = 0; i < n; ++i) {
      // Data frames are sealed with their number: each one a new number, as on a connection.
      h.frame = i;
      const auto hi = protocol::encode_frame_header(h);
      s2.seal(hi, plain, wire.data());
      const auto t = Clock::now();
      if (!opener.open_header(hi, std::span<const uint8_t, security::kTagBytes>(wire.data(), security::kTagBytes)))
        return 1;
      size_t at = security::kTagBytes;
      for (uint32_t r = 0; static_cast<size_t>(r) * security::kRecordBytes < bytes; ++r) {
        const size_t p = security::record_plain_size(bytes, r);
        if (!opener.open_record(hi, r, std::span<const uint8_t>(wire.data() + at, p + security::kTagBytes), wire.data() + at))
          return 1;
        at += p + security::kTagBytes;
      }
      opener.next();
      open_s += std::chrono::duration<double>(Clock::now() - t).count();
    }
    const double gb = static_cast<double>(n) * static_cast<double>(bytes) / 1e9;
    std::printf("%-18s %10zu %10.2f %10.2f\n", security::cipher_name(cipher), bytes, gb / seal_s, gb / open_s);
  }
  return 0;
}
