// The posted receives of one peer, by frame number: the receiving half of a PeerSession
// (peer_session.h). I/O-free; unit-tested in tests/unit/tcp_stripe_test.cc and
// peer_session_test.cc.
//
// Receives of a peer are numbered in posting order (receive k takes frame k). A frame arriving on
// any stream or ring is matched by its number to its posted receive and read straight into that
// receive's destination; a frame whose receive is not posted yet waits where it is until it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace geoccl::protocol {

// T is the receive (destination + request).
template <class T>
class RecvWindow {
 public:
  enum class Lookup {
    kPosted,     // the receive for this frame is posted and not complete
    kNotPosted,  // a later frame than any posted receive: wait for the receive
    kStale,      // an earlier frame that was already received: a protocol violation
  };

  // Posts the next receive; returns its frame number.
  uint64_t post(T op) {
    slots_.push_back(Slot{std::move(op), false});
    return base_ + slots_.size() - 1;
  }

  Lookup lookup(uint64_t frame) const {
    if (frame < base_) return Lookup::kStale;
    const uint64_t i = frame - base_;
    if (i >= slots_.size()) return Lookup::kNotPosted;
    return slots_[static_cast<size_t>(i)].done ? Lookup::kStale : Lookup::kPosted;
  }

  // The posted, incomplete receive for `frame`; lookup(frame) must be kPosted.
  T& at(uint64_t frame) { return slots_[static_cast<size_t>(frame - base_)].op; }

  // Marks `frame` received and returns its receive (moved out). lookup(frame) must be kPosted.
  T complete(uint64_t frame) {
    Slot& s = slots_[static_cast<size_t>(frame - base_)];
    s.done = true;
    T out = std::move(s.op);
    s.op = T{};
    while (!slots_.empty() && slots_.front().done) {
      slots_.pop_front();
      ++base_;
    }
    return out;
  }

  // Receives posted and not complete.
  bool pending() const {
    for (const auto& s : slots_)
      if (!s.done) return true;
    return false;
  }

  // Removes every incomplete receive, calling f(T&) on each (failure). Frame numbering goes on.
  template <class F>
  void drain(F&& f) {
    for (auto& s : slots_)
      if (!s.done) f(s.op);
    base_ += slots_.size();
    slots_.clear();
  }

  // Every frame below this one has been received in full.
  uint64_t base() const { return base_; }

  // Frame number the next post() gets.
  uint64_t next_frame() const { return base_ + slots_.size(); }

 private:
  struct Slot {
    T op;
    bool done;
  };
  uint64_t base_ = 0;  // frame number of slots_.front()
  std::deque<Slot> slots_;
};

}  // namespace geoccl::protocol
