// SealedStore: a Store whose values are sealed with the group secret's store key
// (security/store_seal.h) on their way in and opened on their way out, over any backend (the TCP
// store, etcd). A value that does not open (written without the secret, or moved to another key)
// is Error(kProtocol) naming the key. Counters (add) stay in clear: the backend adds them.
#pragma once

#include <memory>

#include "geoccl/store.h"
#include "security/secret.h"

namespace geoccl::membership {

class SealedStore final : public Store {
 public:
  SealedStore(std::unique_ptr<Store> inner, const security::Key& secret);
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner_->wait(keys, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  bool remove(const std::string& key) override { return inner_->remove(key); }
  bool check(const std::string& key) override { return inner_->check(key); }
  std::vector<std::optional<std::vector<uint8_t>>> get_present(const std::vector<std::string>& keys) override;

 private:
  // The value as written, or Error(kProtocol) naming the key.
  std::vector<uint8_t> open(const std::string& key, std::vector<uint8_t> sealed) const;
  std::unique_ptr<Store> inner_;
  security::Key key_;
};

}  // namespace geoccl::membership
