// open_store(): the store a URL names (include/geoccl/store.h).
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "membership/etcd_store.h"
#include "membership/store_url.h"

namespace geoccl {

std::unique_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout) {
  const membership::StoreUrl u = membership::parse_store_url(url);
  switch (u.scheme) {
    case membership::StoreUrl::Scheme::kTcp:
      return std::make_unique<StoreClient>(u.host, u.port, timeout);
    case membership::StoreUrl::Scheme::kEtcd:
      return std::make_unique<membership::EtcdStore>(u.host, u.port, u.prefix, timeout);
  }
  throw Error(ErrorCode::kInternal, "store URL '" + url + "': scheme without a backend");
}

}  // namespace geoccl
