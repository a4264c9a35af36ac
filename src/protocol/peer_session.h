// PeerSession: the protocol state of one peer pair, as one I/O-free unit that every transport's
// connection drives (tests/unit/peer_session_test.cc drives it without sockets):
//
//  - frame numbering: data frame k to the peer carries k (frame header bytes 40..47);
//  - the receive window: receive k takes frame k (recv_window.h), from any stream or ring;
//  - acknowledgements: the receiver says, now and then, "every frame below n is in"; the sender
//    then marks those sends delivered (Request's second completion) and forgets them;
//  - kept copies (stream resume): with copies on, the sender keeps each written frame (header and
//    a copy of its payload) until it is acknowledged, so that a broken stream's frames can be
//    re-sent on its next socket, each exactly once (the receiver drops numbers it already has).
//
// `RecvOp` is the transport's posted receive; `Token` what it keeps per unacknowledged send (its
// request), handed back when the peer acknowledges the frame.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "protocol/frame.h"
#include "protocol/recv_window.h"

namespace geoccl::protocol {

template <class RecvOp, class Token>
class PeerSession {
 public:
  // A written data frame the peer has not acknowledged yet.
  struct Kept {
    uint64_t frame = 0;
    int stream = 0;
    FrameHeaderBytes header{};
    Token token{};
    std::shared_ptr<std::vector<uint8_t>> copy;  // its payload, with copies on
  };

  // Receivers acknowledge at least every this many payload bytes, and whenever no receive is
  // pending (the end of an operation): often enough to bound what a sender keeps, rarely enough
  // to cost nothing.
  static constexpr uint64_t kAckEveryBytes = 4u << 20;
  // Storage of acknowledged copies kept for reuse (no page faults per frame).
  static constexpr size_t kSpareCopies = 16;

  // ---- Sending.

  // The number the next data frame to the peer carries.
  uint64_t number_frame() { return next_send_++; }
  uint64_t frames_numbered() const { return next_send_; }

  // Whether written frames are kept (copied) until acknowledged. Turning it off drops the copies.
  void set_keep_copies(bool on) {
    keep_copies_ = on;
    if (!on)
      for (auto& [f, k] : unacked_) k.copy.reset();
  }

  // Data frame `frame` has been written in full on `stream`. Keeps `token` until the peer
  // acknowledges it and, with copies on, a copy of `payload` (`copy`: the frame is a re-sent
  // copy already; it is kept as it is). A frame already acknowledged is delivered at once: the
  // call returns true and keeps nothing.
  bool written(uint64_t frame, int stream, const FrameHeaderBytes& header,
               std::span<const uint8_t> payload, Token token,
               std::shared_ptr<std::vector<uint8_t>> copy = nullptr) {
    if (frame < acked_) return true;
    Kept k;
    k.frame = frame;
    k.stream = stream;
    k.header = header;
    k.token = std::move(token);
    if (keep_copies_) {
      if (!copy) {
        copy = take_spare();
        copy->assign(payload.begin(), payload.end());
      }
      kept_bytes_ += copy->size();
      k.copy = std::move(copy);
    }
    unacked_.emplace(frame, std::move(k));
    return false;
  }

  // The peer has every data frame below `upto`: calls on_delivered(Token&) for each written
  // frame this covers, in frame order, and forgets them. Acks never go backwards.
  template <class F>
  void acked(uint64_t upto, F&& on_delivered) {
    if (upto <= acked_) return;
    acked_ = upto;
    while (!unacked_.empty() && unacked_.begin()->first < upto) {
      Kept& k = unacked_.begin()->second;
      on_delivered(k.token);
      release(k);
      unacked_.erase(unacked_.begin());
    }
  }
  uint64_t acked_upto() const { return acked_; }
  // Frame `frame` alone was acknowledged (a transport whose acknowledgements come per frame and
  // in any order: QUIC, one stream per frame): forgets it and its copy. False when it was not
  // kept.
  bool delivered(uint64_t frame) {
    auto it = unacked_.find(frame);
    if (it == unacked_.end()) return false;
    release(it->second);
    unacked_.erase(it);
    return true;
  }
  // The frames written and not acknowledged, in frame order (a new connection sends them again).
  const std::map<uint64_t, Kept>& unacked() const { return unacked_; }

  // Stream `stream` broke: its written, unacknowledged frames, in frame order, removed from
  // here, to be written again (they come back through written() with their copy).
  std::vector<Kept> take_kept(int stream) {
    std::vector<Kept> out;
    for (auto it = unacked_.begin(); it != unacked_.end();) {
      if (it->second.stream != stream) {
        ++it;
        continue;
      }
      if (it->second.copy) kept_bytes_ -= it->second.copy->size();
      out.push_back(std::move(it->second));
      it = unacked_.erase(it);
    }
    return out;
  }
  // Frames written and not acknowledged; bytes of payload copies kept for them.
  size_t unacked_frames() const { return unacked_.size(); }
  uint64_t kept_bytes() const { return kept_bytes_; }

  // Calls f(Token&) on every unacknowledged frame and forgets them all (the group failed).
  template <class F>
  void drop_unacked(F&& f) {
    for (auto& [frame, k] : unacked_) f(k.token);
    unacked_.clear();
    kept_bytes_ = 0;
  }

  // ---- Receiving.

  RecvWindow<RecvOp>& window() { return window_; }
  const RecvWindow<RecvOp>& window() const { return window_; }

  // A data frame with `bytes` of payload has been received in full (window().complete()
  // called). Returns the acknowledgement to send now, if one is due: the number of frames
  // received in full.
  std::optional<uint64_t> received(uint64_t bytes) {
    bytes_since_ack_ += bytes;
    const uint64_t upto = window_.base();
    if (upto <= ack_sent_ || (bytes_since_ack_ < kAckEveryBytes && window_.pending()))
      return std::nullopt;
    ack_sent_ = upto;
    bytes_since_ack_ = 0;
    return upto;
  }

 private:
  std::shared_ptr<std::vector<uint8_t>> take_spare() {
    if (spare_.empty()) return std::make_shared<std::vector<uint8_t>>();
    auto c = std::move(spare_.back());
    spare_.pop_back();
    return c;
  }
  void release(Kept& k) {
    if (!k.copy) return;
    kept_bytes_ -= k.copy->size();
    // A copy still referenced elsewhere (queued for a re-send) is not reused.
    if (spare_.size() < kSpareCopies && k.copy.use_count() == 1) spare_.push_back(std::move(k.copy));
    k.copy.reset();
  }

  uint64_t next_send_ = 0;
  bool keep_copies_ = false;
  uint64_t acked_ = 0;
  std::map<uint64_t, Kept> unacked_;  // by frame number
  uint64_t kept_bytes_ = 0;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> spare_;

  RecvWindow<RecvOp> window_;
  uint64_t ack_sent_ = 0;
  uint64_t bytes_since_ack_ = 0;
};

}  // namespace geoccl::protocol
