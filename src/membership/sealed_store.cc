#include "membership/sealed_store.h"

#include "core/logging.h"
#include "geoccl/error.h"
#include "protocol/store_codec.h"
#include "security/store_seal.h"

namespace geoccl::membership {

SealedStore::SealedStore(std::unique_ptr<Store> inner, const security::Key& secret)
    : inner_(std::move(inner)), key_(security::store_key(secret)) {}

void SealedStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  inner_->set(key, security::seal_store_value(key_, key, value));
}

std::vector<uint8_t> SealedStore::open(const std::string& key, std::vector<uint8_t> sealed) const {
  // The server's own records (owner, refusals) are in clear, and no client can write them.
  if (key.starts_with(protocol::kServerKeyPrefix)) return sealed;
  auto v = security::open_store_value(key_, key, sealed);
  if (!v) {
    GEOCCL_LOG(kError, "store value '" << key << "' failed authentication");
    throw Error(ErrorCode::kProtocol, "the store value '" + key +
                                          "' failed authentication: written by someone without the group "
                                          "secret, or with another one (GEOCCL_SECRET)");
  }
  return std::move(*v);
}

std::vector<uint8_t> SealedStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return open(key, inner_->get(key, timeout));
}

std::vector<std::optional<std::vector<uint8_t>>> SealedStore::get_present(const std::vector<std::string>& keys) {
  auto values = inner_->get_present(keys);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i]) values[i] = open(keys[i], std::move(*values[i]));
  return values;
}

}  // namespace geoccl::membership
