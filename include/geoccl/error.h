// Typed errors. Every failed operation ends with exactly one of these codes on every rank.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace geoccl {

enum class ErrorCode : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,  // bad input detected locally before any I/O
  kTimeout = 2,          // the operation's deadline passed
  kPeerLost = 3,         // a peer closed its connection or stopped answering
  kMismatch = 4,         // ranks called different collectives, dtypes, sizes or roots
  kProtocol = 5,         // a peer sent bytes that do not decode (stranger, version skew)
  kAborted = 6,          // another rank failed the operation and told us
  kIo = 7,               // local socket / system error
  kInternal = 8,
  // A peer's process stopped answering while its host still does (TCP up, its kernel
  // acknowledges, but no heartbeat for the liveness window): a hung or stopped process.
  kPeerUnresponsive = 9,
  // A peer is alive (others hear it) or may be, but this rank cannot reach it: the link between
  // them stayed down longer than the recovery bound (GEOCCL_TCP_RESUME_TIMEOUT_MS).
  kPeerUnreachable = 10,
};
inline constexpr uint8_t kLastErrorCode = 10;

std::string_view error_code_name(ErrorCode c);

// The exception thrown by Work::wait() and by synchronous setup calls.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : Error(code, what, {}) {}
  // `ranks`: the ranks of the communicator the failure is about (see ranks()).
  Error(ErrorCode code, const std::string& what, std::vector<int> ranks)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + what),
        code_(code),
        ranks_(std::move(ranks)) {}
  ErrorCode code() const noexcept { return code_; }
  // The ranks the failure is about: with kPeerLost, kPeerUnresponsive and kPeerUnreachable the
  // peer that was lost, stopped answering or could not be reached, on every rank of the group
  // (a rank that heard of the failure from another one names the same peer). Empty when the
  // failure is not about a peer (a mismatch, a timeout, an abort(), a local error).
  const std::vector<int>& ranks() const noexcept { return ranks_; }

 private:
  ErrorCode code_;
  std::vector<int> ranks_;
};

}  // namespace geoccl
