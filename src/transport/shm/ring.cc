#include "transport/shm/ring.h"

#include <algorithm>
#include <cstring>

namespace geoccl::transport::shm {

size_t ring_capacity(size_t bytes) {
  const size_t q = kCapacityQuantum;
  return std::max(q, (bytes + q - 1) / q * q);
}

size_t auto_ring_bytes(size_t local_peers) {
  const size_t share = kRingBudget / std::max<size_t>(local_peers, 1);
  return ring_capacity(std::clamp(share, kMinAutoRing, kMaxAutoRing));
}

void RingWriter::load_tail(std::memory_order order) {
  const uint64_t t = ctl_->tail.load(order);
  if (t < tail_seen_ || t > head_) {
    corrupt_ = true;
    return;
  }
  tail_seen_ = t;
}

size_t RingWriter::room(size_t want) {
  if (corrupt_) return 0;
  size_t free = cap_ - static_cast<size_t>(head_ - tail_seen_);
  if (free < want) {
    load_tail(std::memory_order_acquire);
    if (corrupt_) return 0;
    free = cap_ - static_cast<size_t>(head_ - tail_seen_);
  }
  return free;
}

bool RingWriter::commit() {
  // seq_cst store, then seq_cst load of the flag: pairs with RingReader::arm_wait.
  ctl_->head.store(head_, std::memory_order_seq_cst);
  return ctl_->reader_waiting.load(std::memory_order_seq_cst) != 0 &&
         ctl_->reader_waiting.exchange(0, std::memory_order_seq_cst) != 0;
}

size_t RingWriter::write(std::span<const uint8_t> src, size_t piece, bool* wake) {
  size_t done = 0;
  while (done < src.size()) {
    const size_t free = room(std::min(src.size() - done, piece));
    if (free == 0) break;
    const size_t at = static_cast<size_t>(head_ % cap_);
    const size_t n = std::min({free, src.size() - done, cap_ - at, piece});
    std::memcpy(data_ + at, src.data() + done, n);
    done += n;
    head_ += n;
    if (commit()) *wake = true;
  }
  return done;
}

std::span<uint8_t> RingWriter::writable(size_t want) {
  const size_t free = room(want);
  const size_t at = static_cast<size_t>(head_ % cap_);
  return {data_ + at, std::min(free, cap_ - at)};
}

void RingWriter::advance(size_t n, bool* wake) {
  head_ += n;
  if (commit()) *wake = true;
}

bool RingWriter::align(bool* wake) {
  const size_t pad = this->pad();
  if (pad == 0) return true;
  if (room(pad) < pad) return false;
  head_ += pad;  // the pad bytes are never read
  if (commit()) *wake = true;
  return true;
}

uint64_t RingWriter::consumed() {
  if (!corrupt_) load_tail(std::memory_order_acquire);
  return tail_seen_;
}

uint64_t RingWriter::arm_wait() {
  ctl_->writer_waiting.store(1, std::memory_order_seq_cst);
  if (!corrupt_) load_tail(std::memory_order_seq_cst);
  return tail_seen_;
}

void RingReader::load_head(std::memory_order order) {
  const uint64_t h = ctl_->head.load(order);
  if (h < head_seen_ || h - tail_ > cap_) {
    corrupt_ = true;
    return;
  }
  head_seen_ = h;
}

size_t RingReader::available(size_t want) {
  if (corrupt_) return 0;
  if (head_seen_ - tail_ < want) load_head(std::memory_order_acquire);
  return corrupt_ ? 0 : static_cast<size_t>(head_seen_ - tail_);
}

std::span<const uint8_t> RingReader::peek(size_t want) {
  const size_t avail = available(want);
  const size_t at = static_cast<size_t>(tail_ % cap_);
  return {data_ + at, std::min(avail, cap_ - at)};
}

void RingReader::copy(void* dst, size_t n) const {
  const size_t at = static_cast<size_t>(tail_ % cap_);
  const size_t first = std::min(n, cap_ - at);
  std::memcpy(dst, data_ + at, first);
  if (first < n) std::memcpy(static_cast<uint8_t*>(dst) + first, data_, n - first);
}

bool RingReader::consume(size_t n) {
  tail_ += n;
  // seq_cst store, then seq_cst load of the flag: pairs with RingWriter::arm_wait.
  ctl_->tail.store(tail_, std::memory_order_seq_cst);
  return ctl_->writer_waiting.load(std::memory_order_seq_cst) != 0 &&
         ctl_->writer_waiting.exchange(0, std::memory_order_seq_cst) != 0;
}

size_t RingReader::arm_wait() {
  ctl_->reader_waiting.store(1, std::memory_order_seq_cst);
  if (!corrupt_) load_head(std::memory_order_seq_cst);
  return corrupt_ ? 0 : static_cast<size_t>(head_seen_ - tail_);
}

}  // namespace geoccl::transport::shm
