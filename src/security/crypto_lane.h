// One connection's sealing and opening of large data frames on worker threads
// (runtime::WorkerPool), so that its loop thread goes on writing and reading sockets while the
// records are sealed and opened elsewhere. The bytes are FrameSealer's and FrameOpener's: a data
// frame's key is the pair's (pair_frame_key) and its nonce the frame number and record index, so
// any thread can seal or open any record of it (the lane keys a context pair per worker).
//
// Sealing: seal() starts a frame's wire bytes in a buffer of their own; the loop writes the
// prefix that is ready and asks to be woken when there is more.
// Opening: the loop reads each record's ciphertext straight into the frame's destination and its
// tag beside it (Opening::tag), and hands the record over; a worker opens it in place, where a
// wrong tag leaves zeros. When every record of a frame has been opened (a failed one makes the
// frame's ok() false), the frame shows up in take_opened() and the loop completes it.
//
// Lifetime: a job reads a caller's payload, or writes a caller's destination, only while it holds
// its frame's lock and the frame is not cancelled. cancel_seals() and cancel_opens() take every
// such lock: once they return, no worker touches that memory again, and the requests may
// complete with an error. settle_opens() (a stream that broke or ended) waits instead for the
// records handed over, so that frames read in full complete. The lane itself waits, when it
// goes, for every job it queued to have run.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "protocol/frame.h"
#include "runtime/worker_pool.h"
#include "security/sealer.h"

namespace geoccl::security {

class CryptoLane {
 public:
  // Data frames of at least this many payload bytes go to the workers; smaller ones are sealed
  // and opened on the loop thread (a hand-over costs a wake-up of the loop, more than the
  // cipher's work on a few KiB).
  static constexpr size_t kMinPayload = kRecordBytes;

  // `pair_send` / `pair_recv`: the pair's data-frame keys of each direction. `wake`: called on a
  // worker, at most once until the owner calls woken(): the loop thread should call the owner
  // back (sealed bytes it waits for are ready, or frames have opened).
  CryptoLane(runtime::WorkerPool& pool, uint8_t cipher, const Key& pair_send, const Key& pair_recv,
             std::function<void()> wake);
  // Cancels every job (as cancel_seals and cancel_opens).
  ~CryptoLane();
  CryptoLane(const CryptoLane&) = delete;
  CryptoLane& operator=(const CryptoLane&) = delete;

  // The loop thread is handling a wake-up: later progress wakes it again.
  void woken() { wake_posted_.store(false); }

  // ---- Sealing (loop thread).
  class Sealing {
   public:
    // Bytes of wire() sealed so far, a prefix (release-published by the worker).
    size_t ready() const { return ready_.load(std::memory_order_acquire); }
    size_t size() const { return size_; }
    const std::shared_ptr<uint8_t[]>& wire() const { return wire_; }
    // The cipher refused to seal it (a broken library): it never gets ready.
    bool failed() const { return failed_.load(); }

   private:
    friend class CryptoLane;
    protocol::FrameHeaderBytes header_{};
    std::span<const uint8_t> payload_;
    std::shared_ptr<uint8_t[]> wire_;
    size_t size_ = 0;
    std::atomic<size_t> ready_{0};
    std::atomic<bool> failed_{false};
    std::mutex mu_;  // held by the worker while it reads payload_
    bool cancelled_ = false;
  };
  // Starts sealing data frame `header` + `payload` (at least kMinPayload bytes) into
  // sealed_payload_size(payload.size()) new bytes. The payload must stay valid until the frame
  // is wholly sealed or cancel_seals() returned.
  std::shared_ptr<Sealing> seal(const protocol::FrameHeaderBytes& header, std::span<const uint8_t> payload);
  // The loop has written `have` bytes of `s` and waits for more: true when more are ready
  // already; else wake() is called once they are.
  bool more_sealed(const Sealing& s, size_t have);
  // No worker reads the payload of a frame sealing now or later: unfinished frames stay so.
  void cancel_seals();

  // ---- Opening (loop thread), data frames whose header opened on the loop thread.
  class Opening {
   public:
    uint64_t frame() const { return frame_; }
    std::span<uint8_t> dst() const { return dst_; }
    // Whether every record opened (meaningful once take_opened() gave the frame).
    bool ok() const { return !bad_.load(); }
    // Where record `index`'s tag is to be read (its ciphertext goes to dst() in place).
    std::span<uint8_t, kTagBytes> tag(uint32_t index) { return tags_[index]; }

   private:
    friend class CryptoLane;
    protocol::FrameHeaderBytes header_{};
    uint64_t frame_ = 0;
    std::span<uint8_t> dst_;
    std::vector<std::array<uint8_t, kTagBytes>> tags_;
    std::atomic<size_t> left_{0};  // records not opened yet
    size_t handed_ = 0;            // loop thread: records handed over
    std::atomic<size_t> done_{0};  // records opened (or found bad) by the workers
    std::atomic<bool> bad_{false};
    std::mutex mu_;  // held by the worker while it writes dst_
    bool cancelled_ = false;
  };
  // A data frame whose header (`header`, authenticated) announced dst.size() payload bytes, at
  // least kMinPayload.
  std::shared_ptr<Opening> begin_open(std::span<const uint8_t, protocol::kFrameHeaderSize> header,
                                      std::span<uint8_t> dst);
  // Record `index` of `o` is in (ciphertext in place, tag at o->tag(index)): open it.
  void open_record(const std::shared_ptr<Opening>& o, uint32_t index);
  // Frames whose records have all been opened since the last call (and, after settle_opens, a
  // frame cut short with a changed record).
  std::vector<std::shared_ptr<Opening>> take_opened();
  // Cancels every open not run yet and waits for those running. Frames not wholly opened are
  // zeroed in their destinations (no ciphertext or unverified byte stays there) and forgotten;
  // those that did open stay for take_opened().
  void cancel_opens();
  // The stream broke or ended: waits for every record handed over to be opened (the
  // destinations stay valid: their receives are pending). Frames opened in full stay for
  // take_opened(); a frame cut short is zeroed and forgotten, unless one of its records was
  // changed: then take_opened() gives it, not ok().
  void settle_opens();
  // Frames begun and not yet taken.
  size_t opening() const { return openings_.size(); }

 private:
  void request_wake();
  void run_seal(const std::shared_ptr<Sealing>& s);
  void run_open(const std::shared_ptr<Opening>& o, uint32_t index);

  runtime::WorkerPool& pool_;
  // By worker (WorkerPool::index): the pair's keys of each direction, keyed (Aead zeroes its key
  // when it goes).
  std::vector<std::unique_ptr<Aead>> sealers_, openers_;
  std::function<void()> wake_;
  std::atomic<bool> wake_posted_{false};
  std::atomic<bool> seal_waited_{false};  // the loop waits for sealed bytes
  std::atomic<int> jobs_{0};              // queued or running
  // Loop thread: frames being sealed or opened (cancel finds them here).
  std::vector<std::weak_ptr<Sealing>> sealings_;
  std::vector<std::shared_ptr<Opening>> openings_;
  std::mutex opened_mu_;
  std::vector<std::shared_ptr<Opening>> opened_;  // under opened_mu_
};

}  // namespace geoccl::security
