// The single-producer single-consumer byte ring of one direction of a shared-memory link: I/O
// free (no fds, no syscalls), unit-tested with two threads (tests/unit/shm_ring_test.cc).
//
// Both processes map the ring; the writer owns `head` (bytes committed), the reader owns `tail`
// (bytes consumed); both count up forever and index the data at position % capacity. Records
// (frame header + payload) are streamed: a record larger than the ring goes in pieces as the
// reader frees room, and the reader can work on a piece as soon as it is committed. Every record
// starts at a multiple of kRecordAlign and the capacity is a multiple of kCapacityQuantum, so a
// payload that starts on a record boundary never has an element (at most 8 bytes) straddle the
// wrap: the reader can reduce straight out of the ring in element-aligned pieces.
//
// Wake-ups: a side about to sleep sets its "waiting" flag and then re-reads the other side's
// position (arm_wait); the other side publishes its position and then reads the flag (commit /
// consume). Both pairs of accesses are seq_cst, so at least one side sees the other: either the
// sleeper sees the new position and does not sleep, or the publisher sees the flag, clears it and
// tells the caller to signal the sleeper (an eventfd in the transport). In the busy case no side
// sleeps, no flag is set, and no syscall is made.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/shm_hello.h"

namespace geoccl::transport::shm {

inline constexpr size_t kRecordAlign = 8;
inline constexpr size_t kCapacityQuantum = 64;
static_assert(kCapacityQuantum == protocol::shm::kRingQuantum, "the handshake checks ring sizes");

// The shared control block of one ring, zero-initialised by the segment's creator. Each side
// writes its own cache line in the common case.
struct RingControl {
  // Writer's line: bytes committed; the writer sleeps until the reader consumes.
  alignas(64) std::atomic<uint64_t> head{0};
  std::atomic<uint32_t> writer_waiting{0};
  // Reader's line: bytes consumed; the reader sleeps until the writer commits.
  alignas(64) std::atomic<uint64_t> tail{0};
  std::atomic<uint32_t> reader_waiting{0};
};
static_assert(sizeof(RingControl) == 128);
// Lock-free atomics are address-free: they work between processes that map the same memory.
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

// `bytes` rounded up to a usable capacity (a multiple of kCapacityQuantum, at least one quantum).
size_t ring_capacity(size_t bytes);

// The ring size a rank with `local_peers` peers over shared memory gives each direction when none
// is configured: 4 MiB up to 16 peers, then a 64 MiB share per direction split among them, never
// under 256 KiB. A rank's rings then stay near 256 MiB (two directions, two priority classes)
// whatever the number of ranks on the host; a ring that carries no traffic costs no memory.
inline constexpr size_t kMaxAutoRing = size_t{4} << 20, kMinAutoRing = size_t{256} << 10;
inline constexpr size_t kRingBudget = size_t{64} << 20;
size_t auto_ring_bytes(size_t local_peers);

// The writing end. Positions read from shared memory are checked: a reader position outside
// what this writer has committed marks the ring corrupt (corrupt(); no more room).
class RingWriter {
 public:
  RingWriter() = default;
  RingWriter(RingControl* ctl, uint8_t* data, size_t capacity)
      : ctl_(ctl), data_(data), cap_(capacity) {}

  size_t capacity() const { return cap_; }
  // Bytes committed so far (the position after the last byte written).
  uint64_t position() const { return head_; }
  // Bytes that fit now; reloads the reader's position when the cached one leaves less than `want`.
  size_t room(size_t want = 1);
  // Copies as much of `src` as fits and commits it, in pieces of at most `piece` bytes so that the
  // reader can start on one while the next is copied. Returns the bytes written. Sets *wake when
  // the reader asked to be woken (the request is cleared; the caller signals the reader).
  size_t write(std::span<const uint8_t> src, size_t piece, bool* wake);
  // For bytes produced straight into the ring (a receive reduced on its way on): the free bytes
  // at the head up to the wrap (reloading as room(want) does); advance(n) then commits the first
  // n written there, setting *wake as write() does.
  std::span<uint8_t> writable(size_t want = 1);
  void advance(size_t n, bool* wake);
  // Pad bytes between the head and the next record boundary.
  size_t pad() const { return static_cast<size_t>((kRecordAlign - head_ % kRecordAlign) % kRecordAlign); }
  // Moves the head to the next record boundary; false while there is no room for the pad.
  bool align(bool* wake);
  // The reader's position (acquire): every byte below it has been consumed.
  uint64_t consumed();
  // Before sleeping until the reader consumes: asks to be woken, then returns the reader's
  // position as seen after asking.
  uint64_t arm_wait();
  bool corrupt() const { return corrupt_; }

 private:
  bool commit();
  void load_tail(std::memory_order order);

  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t cap_ = 0;
  uint64_t head_ = 0;       // our position (the shared one is only ever written by us)
  uint64_t tail_seen_ = 0;  // the reader's, as last loaded
  bool corrupt_ = false;
};

// The reading end. A writer position that runs more than the capacity ahead of what this reader
// consumed, or goes backwards, marks the ring corrupt (corrupt(); nothing more to read).
class RingReader {
 public:
  RingReader() = default;
  RingReader(RingControl* ctl, uint8_t* data, size_t capacity)
      : ctl_(ctl), data_(data), cap_(capacity) {}

  size_t capacity() const { return cap_; }
  // Bytes consumed so far.
  uint64_t position() const { return tail_; }
  // Committed bytes not yet consumed; reloads the writer's position when the cached one shows
  // fewer than `want`.
  size_t available(size_t want = 1);
  // The committed bytes at the tail up to the wrap (reloading as available(want) does).
  std::span<const uint8_t> peek(size_t want = 1);
  // Copies `n` <= available() bytes from the tail, across the wrap; consumes nothing.
  void copy(void* dst, size_t n) const;
  // Pad bytes between the tail and the next record boundary.
  size_t pad() const { return static_cast<size_t>((kRecordAlign - tail_ % kRecordAlign) % kRecordAlign); }
  // Consumes `n` <= available() bytes. Returns true when the writer asked to be woken (the
  // request is cleared; the caller signals the writer).
  bool consume(size_t n);
  // Before sleeping until the writer commits: asks to be woken, then returns the committed bytes
  // not yet consumed as seen after asking.
  size_t arm_wait();
  bool corrupt() const { return corrupt_; }

 private:
  void load_head(std::memory_order order);

  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t cap_ = 0;
  uint64_t tail_ = 0;
  uint64_t head_seen_ = 0;
  bool corrupt_ = false;
};

}  // namespace geoccl::transport::shm
