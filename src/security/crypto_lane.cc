#include "security/crypto_lane.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace geoccl::security {

CryptoLane::CryptoLane(runtime::WorkerPool& pool, uint8_t cipher, const Key& pair_send, const Key& pair_recv,
                       std::function<void()> wake)
    : pool_(pool), wake_(std::move(wake)) {
  // Keyed here, one pair per worker (an Aead is used by one thread at a time), and gone with the
  // lane: no key outlives the connection in a worker.
  for (int i = 0; i < pool.threads(); ++i) {
    sealers_.push_back(std::make_unique<Aead>(cipher, pair_send));
    openers_.push_back(std::make_unique<Aead>(cipher, pair_recv));
  }
}

CryptoLane::~CryptoLane() {
  cancel_seals();
  cancel_opens();
  // Jobs still queued run (and return at once) or are running their last steps: the lane's
  // members are theirs until each has counted itself out.
  while (jobs_.load() != 0) std::this_thread::yield();
}

void CryptoLane::request_wake() {
  if (!wake_posted_.exchange(true)) wake_();
}

std::shared_ptr<CryptoLane::Sealing> CryptoLane::seal(const protocol::FrameHeaderBytes& header,
                                                      std::span<const uint8_t> payload) {
  auto s = std::make_shared<Sealing>();
  s->header_ = header;
  s->payload_ = payload;
  s->size_ = sealed_payload_size(payload.size());
  // Not zero-filled: the sealer writes every byte.
  s->wire_ = std::shared_ptr<uint8_t[]>(new uint8_t[s->size_]);
  std::erase_if(sealings_, [](const std::weak_ptr<Sealing>& w) {
    const auto p = w.lock();
    return !p || p->ready() == p->size();
  });
  sealings_.push_back(s);
  jobs_.fetch_add(1);
  pool_.submit([this, s] {
    run_seal(s);
    jobs_.fetch_sub(1);  // the job's last touch of the lane
  });
  return s;
}

void CryptoLane::run_seal(const std::shared_ptr<Sealing>& s) {
  const auto header = std::span<const uint8_t, protocol::kFrameHeaderSize>(s->header_);
  const uint64_t counter = frame_number(header);
  const size_t records = record_count(s->payload_.size());
  const Aead& aead = *sealers_[static_cast<size_t>(runtime::WorkerPool::index())];
  // The header tag, then each record: the wire bytes in order, each published as it is sealed.
  for (size_t i = 0; i <= records; ++i) {
    std::lock_guard<std::mutex> lock(s->mu_);
    if (s->cancelled_) return;
    const uint32_t index = i == 0 ? kHeaderRecord : static_cast<uint32_t>(i - 1);
    try {
      seal_record(aead, counter, header, s->payload_, index, s->wire_.get());
    } catch (...) {  // the cipher refused (it does not, short of a broken library): the loop fails the group
      s->failed_.store(true);
      request_wake();
      return;
    }
    const size_t end = i == records ? s->size_ : record_wire_offset(i);
    // Sequentially consistent, as more_sealed's flag and load: of the store here and the flag's
    // store there, one is seen by the other side's load (no wake-up is lost).
    s->ready_.store(end);
    if (seal_waited_.load() && seal_waited_.exchange(false)) request_wake();
  }
}

bool CryptoLane::more_sealed(const Sealing& s, size_t have) {
  if (s.ready() > have) return true;
  seal_waited_.store(true);
  // A record published between the check and the flag: seen here (the worker may have missed
  // the flag).
  return s.ready_.load() > have;
}

void CryptoLane::cancel_seals() {
  for (const auto& w : sealings_)
    if (const auto s = w.lock()) {
      std::lock_guard<std::mutex> lock(s->mu_);
      s->cancelled_ = true;
    }
  sealings_.clear();
}

std::shared_ptr<CryptoLane::Opening> CryptoLane::begin_open(
    std::span<const uint8_t, protocol::kFrameHeaderSize> header, std::span<uint8_t> dst) {
  auto o = std::make_shared<Opening>();
  std::copy(header.begin(), header.end(), o->header_.begin());
  o->frame_ = frame_number(header);
  o->dst_ = dst;
  o->tags_.resize(record_count(dst.size()));
  o->left_.store(o->tags_.size());
  openings_.push_back(o);
  return o;
}

void CryptoLane::open_record(const std::shared_ptr<Opening>& o, uint32_t index) {
  ++o->handed_;
  jobs_.fetch_add(1);
  pool_.submit([this, o, index] {
    run_open(o, index);
    jobs_.fetch_sub(1);  // the job's last touch of the lane
  });
}

void CryptoLane::run_open(const std::shared_ptr<Opening>& o, uint32_t index) {
  std::lock_guard<std::mutex> lock(o->mu_);
  if (o->cancelled_) return;
  const size_t plain = record_plain_size(o->dst_.size(), index);
  uint8_t* at = o->dst_.data() + static_cast<size_t>(index) * kRecordBytes;
  // In place: the ciphertext is where the plaintext goes, its tag beside it.
  const Aead& aead = *openers_[static_cast<size_t>(runtime::WorkerPool::index())];
  const auto header = std::span<const uint8_t, protocol::kFrameHeaderSize>(o->header_);
  if (!aead.open_detached(o->frame_, index, header, std::span<uint8_t>(at, plain), o->tags_[index]))
    o->bad_.store(true);
  if (o->left_.fetch_sub(1) == 1) {
    {
      std::lock_guard<std::mutex> l(opened_mu_);
      opened_.push_back(o);
    }
    request_wake();
  }
  o->done_.fetch_add(1);  // last: settle_opens reads left_ once this counts every record handed
}

std::vector<std::shared_ptr<CryptoLane::Opening>> CryptoLane::take_opened() {
  std::vector<std::shared_ptr<Opening>> out;
  {
    std::lock_guard<std::mutex> lock(opened_mu_);
    out.swap(opened_);
  }
  std::erase_if(openings_, [&](const std::shared_ptr<Opening>& o) {
    return std::find(out.begin(), out.end(), o) != out.end();
  });
  return out;
}

void CryptoLane::settle_opens() {
  for (const auto& o : openings_) {
    // Bounded by the records handed over (a few MiB of the cipher's work at most).
    while (o->done_.load() < o->handed_) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(o->mu_);
    if (o->left_.load() == 0) continue;  // opened in full: take_opened() gives it
    o->cancelled_ = true;
    sodium_memzero(o->dst_.data(), o->dst_.size());
    // A changed record is reported even so: a break right behind it does not hide it.
    if (o->bad_.load()) {
      std::lock_guard<std::mutex> l(opened_mu_);
      opened_.push_back(o);
    }
  }
  std::erase_if(openings_, [](const std::shared_ptr<Opening>& o) { return o->left_.load() != 0 && !o->bad_.load(); });
}

void CryptoLane::cancel_opens() {
  for (const auto& o : openings_) {
    {
      std::lock_guard<std::mutex> lock(o->mu_);
      o->cancelled_ = true;
    }
    // Opened in full: take_opened() gives it. Else what is in its destination is partly
    // ciphertext: zeroed.
    if (o->left_.load() != 0) sodium_memzero(o->dst_.data(), o->dst_.size());
  }
  std::erase_if(openings_, [](const std::shared_ptr<Opening>& o) { return o->left_.load() != 0; });
}

}  // namespace geoccl::security
