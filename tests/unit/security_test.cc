// The security core without sockets: secret loading, the mutual-authentication exchange
// (matching keys, wrong secrets, forged and replayed proofs, cipher choice) and frame sealing
// (round trips at record boundaries; tampered, replayed, reordered frames refused).
#include <gtest/gtest.h>

#include <sodium.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <vector>

#include "geoccl/config.h"
#include "geoccl/error.h"
#include "protocol/frame.h"
#include "protocol/handshake.h"
#include "security/auth.h"
#include "security/sealed_stream.h"
#include "security/sealer.h"
#include "security/secret.h"

using namespace geoccl;
using namespace geoccl::security;

namespace {

GroupKey key_of(const std::string& secret, uint64_t session = 42, uint8_t ciphers = 0) {
  Config c;
  c.secret = secret;
  return job_key(*load_secret(c), session, ciphers ? ciphers : offered_ciphers("auto"));
}

const std::vector<uint8_t> kHello(protocol::kHelloSize, 1), kReply(protocol::kReplySize, 2);

struct Exchange {
  AuthStatus dialler = AuthStatus::kMalformed, acceptor = AuthStatus::kMalformed;
  ConnectionKeys dk, ak;
};

// One run of the exchange between keys `d` and `a`.
Exchange run(const GroupKey& d, const GroupKey& a, const std::vector<uint8_t>& acceptor_hello = kHello) {
  Exchange x;
  AuthDialler dialler(d);
  AuthAcceptor acceptor(a);
  std::array<uint8_t, kAuthRespSize> resp{};
  x.acceptor = acceptor.on_init(acceptor_hello, kReply, dialler.init(), &resp);
  if (x.acceptor != AuthStatus::kOk) return x;
  std::array<uint8_t, kAuthFinSize> fin{};
  x.dialler = dialler.on_resp(kHello, kReply, resp, &fin, &x.dk);
  if (x.dialler != AuthStatus::kOk && x.dialler != AuthStatus::kBadProof) return x;
  x.acceptor = acceptor.on_fin(fin, &x.ak);
  return x;
}

}  // namespace

TEST(Secret, LoadedFromEnvironmentOrFileAndChecked) {
  Config c;
  EXPECT_FALSE(load_secret(c).has_value());
  c.secret = "short";
  EXPECT_THROW(load_secret(c), Error);
  c.secret = "0123456789abcdef0123";
  const auto from_env = load_secret(c);
  ASSERT_TRUE(from_env.has_value());
  const std::string path = ::testing::TempDir() + "/geoccl-secret";
  std::ofstream(path) << c.secret << "\n";
  c.secret_file = path;
  EXPECT_THROW(load_secret(c), Error);  // both set
  c.secret.clear();
  EXPECT_EQ(load_secret(c), from_env);  // the trailing newline is not part of it
  c.secret_file = path + ".missing";
  EXPECT_THROW(load_secret(c), Error);
  std::remove(path.c_str());
  // Two jobs with one secret get different keys; so do two secrets.
  EXPECT_NE(key_of("0123456789abcdef0123", 1).job_key, key_of("0123456789abcdef0123", 2).job_key);
  EXPECT_NE(key_of("0123456789abcdef0123").job_key, key_of("0123456789abcdef0124").job_key);
  EXPECT_EQ(random_secret_hex().size(), 64u);
  EXPECT_NE(random_secret_hex(), random_secret_hex());
  EXPECT_THROW(offered_ciphers("rot13"), Error);
}

TEST(Auth, MatchingSecretsGiveBothSidesTheSameKeysPerDirection) {
  const auto k = key_of("the same secret for both");
  const Exchange x = run(k, k);
  ASSERT_EQ(x.dialler, AuthStatus::kOk);
  ASSERT_EQ(x.acceptor, AuthStatus::kOk);
  EXPECT_EQ(x.dk.send, x.ak.recv);
  EXPECT_EQ(x.dk.recv, x.ak.send);
  EXPECT_NE(x.dk.send, x.dk.recv);
  EXPECT_EQ(x.dk.cipher, x.ak.cipher);
  EXPECT_EQ(x.dk.cipher, crypto_aead_aes256gcm_is_available() ? kCipherAes256Gcm : kCipherXChaCha20Poly1305);
  // Every connection has its own keys (fresh ephemeral keys on both sides).
  const Exchange y = run(k, k);
  EXPECT_NE(x.dk.send, y.dk.send);
}

TEST(Auth, WrongSecretIsSeenByTheDiallerAndReportedToTheAcceptor) {
  const Exchange x = run(key_of("secret of the dialler"), key_of("secret of the acceptor"));
  EXPECT_EQ(x.dialler, AuthStatus::kBadProof);
  EXPECT_EQ(x.acceptor, AuthStatus::kPeerRejected);
  // Same secret, other session (another job): refused too.
  const Exchange y = run(key_of("one secret for two jobs", 1), key_of("one secret for two jobs", 2));
  EXPECT_EQ(y.dialler, AuthStatus::kBadProof);
}

TEST(Auth, TranscriptBindsTheHelloAndProofsCannotBeForgedOrReplayed) {
  const auto k = key_of("the same secret for both");
  // The acceptor saw another Hello than the one the dialler sent (changed on the path).
  EXPECT_EQ(run(k, k, std::vector<uint8_t>(protocol::kHelloSize, 9)).dialler, AuthStatus::kBadProof);
  // A stranger without the secret answers with a made-up proof, or replays a proof of an earlier
  // connection: the acceptor refuses both.
  AuthDialler d(k);
  AuthAcceptor a1(k), a2(k);
  std::array<uint8_t, kAuthRespSize> r1{}, r2{};
  ASSERT_EQ(a1.on_init(kHello, kReply, d.init(), &r1), AuthStatus::kOk);
  std::array<uint8_t, kAuthFinSize> fin{};
  ConnectionKeys keys;
  ASSERT_EQ(d.on_resp(kHello, kReply, r1, &fin, &keys), AuthStatus::kOk);
  ASSERT_EQ(a2.on_init(kHello, kReply, d.init(), &r2), AuthStatus::kOk);  // replayed AuthInit
  EXPECT_EQ(a2.on_fin(fin, &keys), AuthStatus::kBadProof);               // replayed AuthFin
  auto forged = fin;
  forged[20] ^= 1;
  EXPECT_EQ(a1.on_fin(forged, &keys), AuthStatus::kBadProof);
  EXPECT_EQ(a1.on_fin(fin, &keys), AuthStatus::kOk);
  EXPECT_EQ(a1.on_fin(fin, &keys), AuthStatus::kMalformed);  // once only
  // Malformed messages.
  auto bad = d.init();
  bad[0] ^= 1;
  AuthAcceptor a3(k);
  EXPECT_EQ(a3.on_init(kHello, kReply, bad, &r2), AuthStatus::kMalformed);
  // A low-order ephemeral key (all zero) is refused.
  auto zero = d.init();
  std::fill(zero.begin() + 9, zero.end(), 0);
  EXPECT_EQ(a3.on_init(kHello, kReply, zero, &r2), AuthStatus::kBadKey);
}

TEST(Auth, CipherIsTheBestBothOffer) {
  const auto x = key_of("the same secret for both", 42, kCipherXChaCha20Poly1305);
  const Exchange e = run(x, key_of("the same secret for both"));
  ASSERT_EQ(e.acceptor, AuthStatus::kOk);
  EXPECT_EQ(e.ak.cipher, kCipherXChaCha20Poly1305);
  if (crypto_aead_aes256gcm_is_available()) {
    const auto a = key_of("the same secret for both", 42, kCipherAes256Gcm);
    EXPECT_EQ(run(x, a).acceptor, AuthStatus::kNoCommonCipher);
  }
}

// AES-256-GCM runs on OpenSSL; its bytes must be the standard construction libsodium also
// implements (and the wire carried before): each seals what the other opens, tags equal, and a
// flipped bit fails both, leaving no plaintext behind.
TEST(Aead, AesGcmBytesAreLibsodiumsBothWays) {
  init_sodium();
  if (!crypto_aead_aes256gcm_is_available()) GTEST_SKIP() << "no AES-NI";
  Key k{};
  randombytes_buf(k.data(), k.size());
  const Aead aead(kCipherAes256Gcm, k);
  for (size_t len : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{1000}, size_t{256} << 10}) {
    std::vector<uint8_t> plain(len), ad(64);
    if (len > 0) randombytes_buf(plain.data(), plain.size());
    randombytes_buf(ad.data(), ad.size());
    const uint64_t counter = 0x0102030405060708ull + len;
    const uint32_t record = static_cast<uint32_t>(len % 7);
    unsigned char nonce[12];
    for (int i = 0; i < 8; ++i) nonce[i] = static_cast<unsigned char>(counter >> (8 * i));
    for (int i = 0; i < 4; ++i) nonce[8 + i] = static_cast<unsigned char>(record >> (8 * i));
    std::vector<uint8_t> ours(len + kTagBytes), theirs(len + kTagBytes);
    aead.seal(counter, record, ad, plain, ours.data());
    crypto_aead_aes256gcm_encrypt_detached(theirs.data(), theirs.data() + len, nullptr, plain.data(), len,
                                           ad.data(), ad.size(), nullptr, nonce, k.data());
    ASSERT_EQ(ours, theirs) << len << " bytes";
    std::vector<uint8_t> out(len + 1, 0xee);
    ASSERT_TRUE(aead.open(counter, record, ad, theirs, out.data()));
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), out.begin()));
    // In place, as the opener's staging buffer does.
    std::vector<uint8_t> inplace = theirs;
    ASSERT_TRUE(aead.open(counter, record, ad, inplace, inplace.data()));
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), inplace.begin()));
    // A flipped bit (ciphertext or tag) and another nonce fail; the output holds no plaintext.
    std::vector<uint8_t> bad = theirs;
    bad[len / 2] ^= 0x10;
    std::vector<uint8_t> zeroed(len, 0xee);
    EXPECT_FALSE(aead.open(counter, record, ad, bad, zeroed.data()));
    EXPECT_TRUE(std::all_of(zeroed.begin(), zeroed.end(), [&](uint8_t b) { return len == 0 || b == 0; }));
    EXPECT_FALSE(aead.open(counter + 1, record, ad, theirs, out.data()));
    EXPECT_NE(crypto_aead_aes256gcm_decrypt_detached(out.data(), nullptr, bad.data(), len, bad.data() + len,
                                                     ad.data(), ad.size(), nonce, k.data()), 0);
  }
}

class Sealing : public ::testing::TestWithParam<uint8_t> {};

TEST_P(Sealing, FramesRoundTripAndAnyChangeIsRefused) {
  const uint8_t cipher = GetParam();
  init_sodium();  // detects AES-NI
  if (cipher == kCipherAes256Gcm && !crypto_aead_aes256gcm_is_available()) GTEST_SKIP() << "no AES-NI";
  Key k{}, pk{};
  randombytes_buf(k.data(), k.size());
  randombytes_buf(pk.data(), pk.size());
  FrameSealer sealer(cipher, k, pk);
  FrameOpener opener(cipher, k, pk);
  std::vector<std::vector<uint8_t>> sent;
  std::vector<protocol::FrameHeaderBytes> headers;
  for (size_t n : {size_t{0}, size_t{1}, kRecordBytes - 1, kRecordBytes, kRecordBytes + 1, 3 * kRecordBytes + 5}) {
    protocol::FrameHeader h;
    h.payload_len = static_cast<uint32_t>(n);
    h.frame = sent.size();
    const auto hb = protocol::encode_frame_header(h);
    std::vector<uint8_t> plain(n);
    if (n) randombytes_buf(plain.data(), plain.size());
    std::vector<uint8_t> wire(sealed_payload_size(n));
    sealer.seal(hb, plain, wire.data());
    // The ciphertext is not the plaintext.
    if (n >= 32) {
      EXPECT_EQ(std::search(wire.begin(), wire.end(), plain.begin(), plain.begin() + 32), wire.end());
    }
    // Any flipped bit of the header, its tag or a record is refused.
    {
      auto bad_h = hb;
      bad_h[12] ^= 1;
      EXPECT_FALSE(opener.open_header(bad_h, std::span<const uint8_t, kTagBytes>(wire.data(), kTagBytes)));
      if (n > 0) {
        auto bad = wire;
        bad[kTagBytes + n / 2] ^= 0x80;
        std::vector<uint8_t> rec(bad.begin() + kTagBytes, bad.begin() + kTagBytes + record_plain_size(n, 0) + kTagBytes);
        const bool in_first = n / 2 < kRecordBytes;
        if (in_first) {
          EXPECT_FALSE(opener.open_record(hb, 0, rec, rec.data()));
        }
      }
    }
    ASSERT_TRUE(opener.open_header(hb, std::span<const uint8_t, kTagBytes>(wire.data(), kTagBytes)));
    std::vector<uint8_t> got;
    size_t at = kTagBytes;
    for (uint32_t i = 0; static_cast<size_t>(i) * kRecordBytes < n; ++i) {
      const size_t p = record_plain_size(n, i);
      std::vector<uint8_t> rec(wire.begin() + static_cast<std::ptrdiff_t>(at),
                               wire.begin() + static_cast<std::ptrdiff_t>(at + p + kTagBytes));
      // Records cannot be swapped: record i opened as i + 1 fails.
      std::vector<uint8_t> copy = rec;
      EXPECT_FALSE(opener.open_record(hb, i + 1, copy, copy.data()));
      ASSERT_TRUE(opener.open_record(hb, i, rec, rec.data()));
      got.insert(got.end(), rec.begin(), rec.begin() + static_cast<std::ptrdiff_t>(p));
      at += p + kTagBytes;
    }
    EXPECT_EQ(at, wire.size());
    EXPECT_EQ(got, plain);
    opener.next();
    sent.push_back(wire);
    headers.push_back(hb);
  }
  // Replayed (an earlier frame again) and reordered frames do not open: the counter moved on.
  for (size_t i = 0; i < sent.size(); ++i)
    EXPECT_FALSE(opener.open_header(headers[i], std::span<const uint8_t, kTagBytes>(sent[i].data(), kTagBytes)));
  // Another pair key does not open them (data frames are sealed with the pair key).
  Key other = pk;
  other[0] ^= 1;
  FrameOpener stranger(cipher, k, other);
  EXPECT_FALSE(stranger.open_header(headers[0], std::span<const uint8_t, kTagBytes>(sent[0].data(), kTagBytes)));
}

// Data frames are sealed with the pair's key and their pair-level number: a frame re-sent on
// another connection of the pair (a resumed stream, new handshake keys) is the same bytes and
// opens there; control frames are sealed with the connection's own key and counter, so they do
// not move between connections; a frame replayed or reordered on one connection fails.
TEST_P(Sealing, ResentDataFrameSealsIdenticallyAndNothingElseRepeats) {
  const uint8_t cipher = GetParam();
  init_sodium();
  if (cipher == kCipherAes256Gcm && !crypto_aead_aes256gcm_is_available()) GTEST_SKIP() << "no AES-NI";
  const Key job = key_of("the same secret for both").job_key;
  const Key pk = pair_frame_key(job, 0, 0, 1, cipher);
  // Per pair, direction, job, cipher and channel.
  EXPECT_NE(pk, pair_frame_key(job, 0, 1, 0, cipher));
  EXPECT_NE(pk, pair_frame_key(job, 0, 0, 2, cipher));
  EXPECT_NE(pk, pair_frame_key(job, 0, 2, 1, cipher));
  EXPECT_NE(pk, pair_frame_key(key_of("the same secret for both", 43).job_key, 0, 0, 1, cipher));
  EXPECT_NE(pair_frame_key(job, 0, 0, 1, kCipherAes256Gcm), pair_frame_key(job, 0, 0, 1, kCipherXChaCha20Poly1305));
  EXPECT_NE(pk, pair_frame_key(job, 1, 0, 1, cipher));  // the bulk class numbers its frames too
  EXPECT_EQ(pk, pair_frame_key(job, 0, 0, 1, cipher));
  Key conn1{}, conn2{};
  randombytes_buf(conn1.data(), conn1.size());
  randombytes_buf(conn2.data(), conn2.size());
  FrameSealer first(cipher, conn1, pk), resumed(cipher, conn2, pk);
  using protocol::FrameType;
  auto frame = [](FrameType type, uint64_t number, size_t n) {
    protocol::FrameHeader h;
    h.type = type;
    h.frame = number;
    h.payload_len = static_cast<uint32_t>(n);
    return protocol::encode_frame_header(h);
  };
  auto seal = [](FrameSealer& s, const protocol::FrameHeaderBytes& hb, const std::vector<uint8_t>& plain) {
    std::vector<uint8_t> wire(sealed_payload_size(plain.size()));
    s.seal(hb, plain, wire.data());
    return wire;
  };
  // Opens a frame whose header says how long its payload is.
  auto opens = [](FrameOpener& o, const protocol::FrameHeaderBytes& hb, std::vector<uint8_t> wire) {
    if (!o.open_header(hb, std::span<const uint8_t, kTagBytes>(wire.data(), kTagBytes))) return false;
    protocol::FrameHeader h;
    if (protocol::decode_frame_header(hb, &h) != protocol::DecodeStatus::kOk) return false;
    const size_t n = h.payload_len;
    size_t at = kTagBytes;
    for (uint32_t i = 0; static_cast<size_t>(i) * kRecordBytes < n; ++i) {
      const size_t p = record_plain_size(n, i);
      if (!o.open_record(hb, i, std::span<const uint8_t>(wire.data() + at, p + kTagBytes), wire.data() + at)) return false;
      at += p + kTagBytes;
    }
    o.next();
    return true;
  };
  std::vector<uint8_t> plain(kRecordBytes + 7);
  randombytes_buf(plain.data(), plain.size());
  const auto h5 = frame(FrameType::kData, 5, plain.size()), h6 = frame(FrameType::kData, 6, plain.size());
  // The first connection writes an ack, then data frame 5; the stream breaks, and the resumed one
  // writes an ack and frame 5 again: the same bytes, although the connection keys differ.
  const auto ack = frame(FrameType::kAck, 3, 0);
  const auto ack1 = seal(first, ack, {});
  const auto w5 = seal(first, h5, plain);
  const auto ack2 = seal(resumed, ack, {});
  const auto w5_again = seal(resumed, h5, plain);
  EXPECT_EQ(w5, w5_again);
  EXPECT_NE(ack1, ack2);  // control frames: the connection's own key
  // The receiving ends of the two connections.
  FrameOpener o1(cipher, conn1, pk), o2(cipher, conn2, pk);
  EXPECT_FALSE(opens(o1, ack, ack2));  // a control frame of another connection
  EXPECT_TRUE(opens(o1, ack, ack1));
  EXPECT_FALSE(opens(o1, ack, ack1));  // replayed control frame: the counter moved on
  EXPECT_TRUE(opens(o1, h5, w5));
  EXPECT_FALSE(opens(o1, h5, w5));      // replayed data frame on its connection
  EXPECT_TRUE(opens(o2, ack, ack2));
  EXPECT_TRUE(opens(o2, h5, w5_again));  // the re-sent copy on the resumed connection
  // Frame 6 then 5 on one connection: reordered, refused (the exactly-once window drops a 5 that
  // arrives on another connection after its delivery).
  FrameOpener o3(cipher, conn1, pk);
  EXPECT_TRUE(opens(o3, h6, seal(first, h6, plain)));
  EXPECT_FALSE(opens(o3, h5, w5));
  // The type byte picks the key: a data frame presented as a control frame fails.
  auto as_ack = h5;
  as_ack[kFrameTypeOffset] = static_cast<uint8_t>(FrameType::kAck);
  FrameOpener o4(cipher, conn1, pk);
  EXPECT_FALSE(o4.open_header(as_ack, std::span<const uint8_t, kTagBytes>(w5.data(), kTagBytes)));
  EXPECT_TRUE(opens(o4, h5, w5));
  // Another pair's key: nothing opens.
  FrameOpener o5(cipher, conn1, pair_frame_key(job, 0, 1, 0, cipher));
  EXPECT_FALSE(opens(o5, h5, w5));
  // The frame number the sealer reads is the header's (protocol/frame.h offsets).
  EXPECT_EQ(h5[kFrameNumberOffset], 5);
  EXPECT_EQ(h5[kFrameTypeOffset], static_cast<uint8_t>(FrameType::kData));
}

// The sealed-stream layer: frames sealed by one end, fed to the other as a byte stream in chunks
// of odd sizes (as a socket delivers them), open to their headers and payloads; a flipped bit in a
// record fails that record, and a data frame sent again on the same stream fails its header.
TEST_P(Sealing, AStreamOfFramesOpensInAnyChunkingAndRefusesChangesAndRepeats) {
  const uint8_t cipher = GetParam();
  init_sodium();
  if (cipher == kCipherAes256Gcm && !crypto_aead_aes256gcm_is_available()) GTEST_SKIP() << "no AES-NI";
  Key a{}, b{}, pa{}, pb{};
  for (Key* k : {&a, &b, &pa, &pb}) randombytes_buf(k->data(), k->size());
  SealedStream tx(cipher, a, b, pa, pb), rx(cipher, b, a, pb, pa);
  const std::vector<size_t> sizes = {0, 5, kRecordBytes, 2 * kRecordBytes + 17, 1000};
  std::vector<uint8_t> wire;
  std::vector<std::vector<uint8_t>> plains;
  auto put = [&](size_t n, uint64_t frame, std::vector<uint8_t> plain) {
    protocol::FrameHeader h;
    h.payload_len = static_cast<uint32_t>(n);
    h.frame = frame;
    const auto hb = protocol::encode_frame_header(h);
    const size_t at = wire.size();
    wire.resize(at + SealedStream::wire_size(n));
    std::copy(hb.begin(), hb.end(), wire.begin() + static_cast<std::ptrdiff_t>(at));
    tx.seal(hb, plain, wire.data() + at + protocol::kFrameHeaderSize);
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> plain(sizes[i]);
    if (!plain.empty()) randombytes_buf(plain.data(), plain.size());
    plains.push_back(plain);
    put(sizes[i], i, plain);
  }
  // Reads the frames from `bytes` in chunks of 1, 7, 4093, ... bytes; returns what failed, if anything.
  auto read_all = [&](SealedStream& s, const std::vector<uint8_t>& bytes, size_t frames,
                      std::vector<std::vector<uint8_t>>* got) -> std::string {
    const size_t chunks[] = {1, 7, 4093, 65536, 300000};
    size_t pos = 0, turn = 0;
    auto take = [&](std::span<uint8_t> dst) {
      const size_t n = std::min({dst.size(), bytes.size() - pos, chunks[turn++ % 5]});
      std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(pos), n, dst.begin());
      pos += n;
      return n;
    };
    for (size_t f = 0; f < frames; ++f) {
      std::array<uint8_t, SealedStream::kHeaderWireBytes> hw{};
      for (size_t have = 0; have < hw.size();) have += take(std::span<uint8_t>(hw).subspan(have));
      if (const char* bad = s.open_header(hw)) return bad;
      protocol::FrameHeader h;
      if (protocol::decode_frame_header(std::span<const uint8_t, protocol::kFrameHeaderSize>(hw.data(), protocol::kFrameHeaderSize), &h) != protocol::DecodeStatus::kOk) return "undecodable";
      // Opened straight into the frame's destination, as a connection does.
      std::vector<uint8_t> payload(h.payload_len, 0xee);
      for (size_t have = 0; have < h.payload_len;) {
        const size_t n = take(s.record_space(h.payload_len));
        size_t plain = 0;
        const auto r = s.record_got(n, payload.data() + have, &plain);
        if (r == SealedStream::Record::kFailed) {
          // Nothing unverified is left where the failed record was to go.
          const size_t size = std::min(kRecordBytes, h.payload_len - have);
          if (std::any_of(payload.begin() + static_cast<std::ptrdiff_t>(have),
                          payload.begin() + static_cast<std::ptrdiff_t>(have + size),
                          [](uint8_t b) { return b != 0 && b != 0xee; }))
            return "a failed record left bytes behind";
          return "payload record";
        }
        if (r == SealedStream::Record::kOpened) have += plain;
      }
      s.end_frame();
      got->push_back(payload);
    }
    return "";
  };
  std::vector<std::vector<uint8_t>> got;
  ASSERT_EQ(read_all(rx, wire, sizes.size(), &got), "");
  EXPECT_EQ(got, plains);
  // A flipped bit in the second record of frame 3 fails that record.
  {
    SealedStream rx2(cipher, b, a, pb, pa);
    std::vector<uint8_t> bad = wire;
    size_t at = 0;
    for (size_t i = 0; i < 3; ++i) at += SealedStream::wire_size(sizes[i]);
    bad[at + SealedStream::kHeaderWireBytes + kRecordBytes + kTagBytes + 3] ^= 0x10;
    std::vector<std::vector<uint8_t>> g;
    EXPECT_EQ(read_all(rx2, bad, sizes.size(), &g), "payload record");
    EXPECT_EQ(g.size(), 3u);  // the frames before it opened
  }
  // Frame 1 again after the others: its number is not above the last opened here.
  const size_t before = wire.size();
  put(sizes[1], 1, plains[1]);
  const std::vector<uint8_t> again(wire.begin() + static_cast<std::ptrdiff_t>(before), wire.end());
  std::vector<std::vector<uint8_t>> g;
  EXPECT_EQ(read_all(rx, again, 1, &g), "a data frame numbered at or below one this connection opened");
}

INSTANTIATE_TEST_SUITE_P(Ciphers, Sealing, ::testing::Values(kCipherAes256Gcm, kCipherXChaCha20Poly1305),
                         [](const auto& info) { return std::string(cipher_name(info.param)); });

// ---- The store: values sealed with the secret; a dump shows none of them; a value written
// without the secret, or moved to another key, is refused when read.

#include "geoccl/store.h"
#include "membership/sealed_store.h"
#include "security/store_seal.h"

TEST(SealedStore, ValuesAreSealedAndStrangersWritesRefused) {
  using namespace std::chrono_literals;
  StoreServer server("127.0.0.1", 0);
  Config c;
  c.secret = "a secret both ranks share";
  const Key secret = *load_secret(c);
  membership::SealedStore sealed(std::make_unique<StoreClient>("127.0.0.1", server.port(), 5s), secret);
  StoreClient raw("127.0.0.1", server.port(), 5s);  // a stranger who reads and writes the store
  const std::string addr = "tcp 10.1.2.3:45678 session 0x1234abcd";
  sealed.set("geoccl/default/g1/addr/tcp/1", std::vector<uint8_t>(addr.begin(), addr.end()));
  const auto got = sealed.get("geoccl/default/g1/addr/tcp/1", 1s);
  EXPECT_EQ(std::string(got.begin(), got.end()), addr);
  // The dump: nothing of the value, not even its first 8 bytes.
  const auto dumped = raw.get("geoccl/default/g1/addr/tcp/1", 1s);
  const std::string d(dumped.begin(), dumped.end());
  EXPECT_EQ(d.find(addr.substr(0, 8)), std::string::npos);
  EXPECT_EQ(dumped.size(), addr.size() + kStoreValueOverhead);
  // The stranger writes its own address, or moves a sealed value to another key.
  raw.set("geoccl/default/g1/addr/tcp/2", std::vector<uint8_t>(addr.begin(), addr.end()));
  try {
    sealed.get("geoccl/default/g1/addr/tcp/2", 1s);
    ADD_FAILURE() << "a value written without the secret was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    EXPECT_NE(std::string(e.what()).find("failed authentication"), std::string::npos);
  }
  raw.set("geoccl/default/g1/addr/tcp/3", dumped);
  EXPECT_THROW(sealed.get("geoccl/default/g1/addr/tcp/3", 1s), Error);
  // Another secret does not open it either.
  c.secret = "another secret, another job";
  membership::SealedStore other(std::make_unique<StoreClient>("127.0.0.1", server.port(), 5s), *load_secret(c));
  EXPECT_THROW(other.get("geoccl/default/g1/addr/tcp/1", 1s), Error);
  // Read in a batch: opened alike, a stranger's value refused alike, an absent key absent.
  const auto batch = sealed.get_present({"geoccl/default/g1/addr/tcp/1", "geoccl/default/g1/addr/tcp/9"});
  ASSERT_EQ(batch.size(), 2u);
  ASSERT_TRUE(batch[0].has_value());
  EXPECT_EQ(std::string(batch[0]->begin(), batch[0]->end()), addr);
  EXPECT_FALSE(batch[1].has_value());
  EXPECT_THROW(sealed.get_present({"geoccl/default/g1/addr/tcp/1", "geoccl/default/g1/addr/tcp/2"}), Error);
  // Counters stay counters.
  EXPECT_EQ(sealed.add("geoccl/default/gen/0", 1), 1);
  EXPECT_EQ(raw.add("geoccl/default/gen/0", 0), 1);
  // The sealing itself: tampered bytes do not open.
  auto bytes = seal_store_value(store_key(secret), "k", std::vector<uint8_t>{1, 2, 3});
  EXPECT_TRUE(open_store_value(store_key(secret), "k", bytes).has_value());
  bytes.back() ^= 1;
  EXPECT_FALSE(open_store_value(store_key(secret), "k", bytes).has_value());
  EXPECT_FALSE(open_store_value(store_key(secret), "k", std::vector<uint8_t>{1}).has_value());
}

// ---- Store requests: with the group secret, a store takes only requests that carry a MAC made
// with it and a counter its client has not used before.

#include <unistd.h>

#include "protocol/store_codec.h"
#include "protocol/wire.h"
#include "runtime/socket.h"

TEST(StoreAuth, ReplayGuardTakesEachCounterOncePerClient) {
  StoreReplayGuard g;
  const StoreClientId a{1}, b{2};
  EXPECT_FALSE(g.fresh(a, 0));  // counters start at 1
  EXPECT_TRUE(g.fresh(a, 1));
  EXPECT_FALSE(g.fresh(a, 1));  // the same request again
  EXPECT_TRUE(g.fresh(a, 5));
  EXPECT_FALSE(g.fresh(a, 3));  // an older one, late
  EXPECT_TRUE(g.fresh(b, 1));   // another client has its own counter
  EXPECT_TRUE(g.fresh(a, 6));
}

TEST(StoreAuth, MacCoversClientCounterAndEveryByteOfTheRequest) {
  Config c;
  c.secret = "a secret both ranks share";
  const Key k = store_request_key(*load_secret(c));
  c.secret = "another secret, another job";
  const Key other = store_request_key(*load_secret(c));
  EXPECT_NE(k, other);
  const StoreClientId id{7};
  const auto body = protocol::encode_store_request_body({protocol::StoreCommand::kSet, "geoccl/x", {1, 2, 3}, 0, 0});
  const StoreMac mac = store_request_mac(k, id, 1, body);
  EXPECT_TRUE(store_request_mac_ok(k, id, 1, body, mac));
  EXPECT_FALSE(store_request_mac_ok(other, id, 1, body, mac));
  EXPECT_FALSE(store_request_mac_ok(k, id, 2, body, mac));
  EXPECT_FALSE(store_request_mac_ok(k, StoreClientId{8}, 1, body, mac));
  for (size_t i = 0; i < body.size(); ++i) {
    auto bad = body;
    bad[i] ^= 1;
    EXPECT_FALSE(store_request_mac_ok(k, id, 1, bad, mac)) << "byte " << i;
  }
  // The envelope round-trips; cut or grown, it does not decode.
  protocol::AuthenticatedStoreRequest q{id, 1, body, mac};
  const auto framed = protocol::encode_authenticated_store_request(q);
  const std::span<const uint8_t> env(framed.data() + 4, framed.size() - 4);
  ASSERT_TRUE(protocol::is_authenticated_store_request(env));
  const auto back = protocol::decode_authenticated_store_request(env);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->client, id);
  EXPECT_EQ(back->counter, 1u);
  EXPECT_EQ(back->body, body);
  EXPECT_EQ(back->mac, mac);
  EXPECT_FALSE(protocol::decode_authenticated_store_request(env.first(env.size() - 1)).has_value());
  std::vector<uint8_t> longer(env.begin(), env.end());
  longer.push_back(0);
  EXPECT_FALSE(protocol::decode_authenticated_store_request(longer).has_value());
  EXPECT_FALSE(protocol::is_authenticated_store_request(body));
}

namespace {

// One request's bytes sent on a raw socket, as a stranger who captured them would: the status of
// the answer.
protocol::StoreStatus send_raw(uint16_t port, const std::vector<uint8_t>& request) {
  using namespace std::chrono_literals;
  const int fd = runtime::connect_with_timeout("127.0.0.1", port, 5s);
  EXPECT_GE(fd, 0);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  EXPECT_TRUE(runtime::write_all(fd, request, deadline));
  uint8_t lenb[4];
  EXPECT_TRUE(runtime::read_all(fd, lenb, deadline));
  protocol::Reader r(lenb);
  uint32_t len = 0;
  r.u32(&len);
  std::vector<uint8_t> body(len);
  EXPECT_TRUE(runtime::read_all(fd, body, deadline));
  ::close(fd);
  const auto resp = protocol::decode_store_response(body);
  EXPECT_TRUE(resp.has_value());
  return resp ? resp->status : protocol::StoreStatus::kBadRequest;
}

void expect_unauthenticated(const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "a request without the group secret was served";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    EXPECT_NE(std::string(e.what()).find("refused the request as unauthenticated"), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(StoreAuth, StoreWithTheSecretRefusesStrangersAndReplays) {
  using namespace std::chrono_literals;
  Config c;
  c.secret = "a secret both ranks share";
  const Key secret = *load_secret(c);
  c.secret = "another secret, another job";
  const Key other = *load_secret(c);
  StoreServer server("127.0.0.1", 0, {}, secret);
  StoreClient member("127.0.0.1", server.port(), 5s);
  member.authenticate(secret);
  const std::vector<uint8_t> v{1, 2, 3};
  member.set("geoccl/s/g1/params", v);
  EXPECT_EQ(member.get("geoccl/s/g1/params", 1s), v);
  EXPECT_EQ(member.add("geoccl/s/gen/0", 1), 1);
  EXPECT_TRUE(member.check("geoccl/s/g1/params"));
  // A batch: every request carries its own counter, all of them fresh.
  const auto batch = member.get_present({"geoccl/s/g1/params", "geoccl/s/g1/none", "geoccl/s/g1/params"});
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0], v);
  EXPECT_FALSE(batch[1].has_value());
  EXPECT_EQ(batch[2], v);
  EXPECT_EQ(server.refused_requests(), 0u);
  // A stranger (no secret) and a client with another secret: nothing is served, nothing changes.
  StoreClient stranger("127.0.0.1", server.port(), 5s);
  expect_unauthenticated([&] { stranger.set("geoccl/s/g1/params", {9}); });
  expect_unauthenticated([&] { stranger.remove("geoccl/s/g1/params"); });
  expect_unauthenticated([&] { stranger.add("geoccl/s/gen/0", 5); });
  expect_unauthenticated([&] { stranger.get("geoccl/s/g1/params", 1s); });
  // Two refused in one batch; the connection stays in step (the note below is read on it).
  expect_unauthenticated([&] { stranger.get_present({"geoccl/s/g1/params", "geoccl/s/g1/params"}); });
  StoreClient wrong("127.0.0.1", server.port(), 5s);
  wrong.authenticate(other);
  expect_unauthenticated([&] { wrong.set("geoccl/s/g1/params", {9}); });
  expect_unauthenticated([&] { wrong.remove("geoccl/s/g1/params"); });
  EXPECT_EQ(member.get("geoccl/s/g1/params", 1s), v);
  EXPECT_EQ(member.add("geoccl/s/gen/0", 0), 1);
  EXPECT_EQ(server.refused_requests(), 8u);
  // The first refusal of session s is noted where its ranks setting up look, in clear: a
  // stranger reads it without the secret; no client writes it. Session t has no note.
  const std::string noted = protocol::refused_key("s");
  EXPECT_EQ(noted, "geoccl/.refused/s");
  const auto note = stranger.get(noted, 1s);
  EXPECT_NE(std::string(note.begin(), note.end()).find("session 's'"), std::string::npos);
  EXPECT_NE(std::string(note.begin(), note.end()).find("group secret"), std::string::npos);
  EXPECT_THROW(member.set(noted, {}), Error);
  EXPECT_THROW(member.remove(noted), Error);
  EXPECT_FALSE(member.check(protocol::refused_key("t")));
  expect_unauthenticated([&] { wrong.add("geoccl/t/gen/0", 1); });
  EXPECT_TRUE(member.check(protocol::refused_key("t")));
  EXPECT_EQ(server.refused_requests(), 9u);
  // A captured request (a member's set, counter 1 of its client) replayed, on its own
  // connection and on another, is refused; its first sending is served.
  const Key rk = store_request_key(secret);
  protocol::AuthenticatedStoreRequest q;
  q.client = StoreClientId{0x42};
  q.counter = 1;
  q.body = protocol::encode_store_request_body({protocol::StoreCommand::kSet, "geoccl/s/g1/addr", {7}, 0, 0});
  q.mac = store_request_mac(rk, q.client, q.counter, q.body);
  const auto captured = protocol::encode_authenticated_store_request(q);
  EXPECT_EQ(send_raw(server.port(), captured), protocol::StoreStatus::kOk);
  member.set("geoccl/s/g1/addr", {8});  // the value moves on
  EXPECT_EQ(send_raw(server.port(), captured), protocol::StoreStatus::kUnauthenticated);
  EXPECT_EQ(member.get("geoccl/s/g1/addr", 1s), std::vector<uint8_t>{8});
  // The same request under a counter the stranger picks: the MAC no longer matches.
  q.counter = 2;
  EXPECT_EQ(send_raw(server.port(), protocol::encode_authenticated_store_request(q)),
            protocol::StoreStatus::kUnauthenticated);
  // Plain bytes of an old-style request: refused.
  EXPECT_EQ(send_raw(server.port(), protocol::encode_store_request({protocol::StoreCommand::kDelete, "geoccl/s/g1/addr", {}, 0, 0})),
            protocol::StoreStatus::kUnauthenticated);
  EXPECT_EQ(member.get("geoccl/s/g1/addr", 1s), std::vector<uint8_t>{8});
  EXPECT_EQ(server.refused_requests(), 12u);
  // A store without a secret (standalone) serves authenticated clients and plain ones, as before.
  StoreServer standalone("127.0.0.1", 0);
  StoreClient a("127.0.0.1", standalone.port(), 5s), b("127.0.0.1", standalone.port(), 5s);
  a.authenticate(secret);
  a.set("k", v);
  EXPECT_EQ(b.get("k", 1s), v);
  EXPECT_EQ(standalone.refused_requests(), 0u);
}
