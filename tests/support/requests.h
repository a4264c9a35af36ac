// Test helpers for code that drives transport devices directly (no Router): waiting for their
// requests, and a job key from a secret.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "geoccl/config.h"
#include "security/secret.h"
#include "transport/transport.h"

namespace geoccl::test_support {

// Waits until every request is done (`delivered`: acknowledged by its peer, sends only), at most
// `limit` in all. False on timeout.
inline bool wait_for(const std::vector<transport::RequestPtr>& reqs, std::chrono::seconds limit,
                     bool delivered = false) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (const auto& r : reqs)
    while (!(delivered ? r->delivered.load(std::memory_order_acquire) : r->done.load(std::memory_order_acquire))) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  return true;
}

// The job key a rank of session 42 derives from `secret` (every cipher this CPU offers).
inline security::GroupKey job_key_of(const std::string& secret) {
  Config c;
  c.secret = secret;
  return security::job_key(*security::load_secret(c), 42, security::offered_ciphers("auto"));
}

}  // namespace geoccl::test_support
