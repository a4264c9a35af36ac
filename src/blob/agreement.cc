#include "blob/agreement.h"

namespace geoccl::blob {

std::vector<int64_t> encode_opening(const OpeningVote& v, int me, int n) {
  std::vector<int64_t> out(static_cast<size_t>(n) * kOpeningSlots, 0);
  int64_t* s = out.data() + static_cast<size_t>(me) * kOpeningSlots;
  // Every slot is >= 0 so that the maximum with the other participants' zeros keeps it.
  s[0] = static_cast<int64_t>(v.code);
  s[1] = v.root >= 0 && v.root < n ? v.root + 1 : 0;
  s[2] = v.size_claim >= 0 ? v.size_claim + 1 : 0;
  s[3] = v.chunk_bytes > 0 ? v.chunk_bytes : 0;
  return out;
}

Opening decide_opening(std::span<const int64_t> agreed, int n) {
  Opening o;
  if (agreed.size() != static_cast<size_t>(n) * kOpeningSlots || n < 1) {
    o.code = ErrorCode::kInternal;
    o.why = "opening vote of the wrong size";
    return o;
  }
  auto slot = [&](int p, size_t k) { return agreed[static_cast<size_t>(p) * kOpeningSlots + k]; };
  for (int p = 0; p < n; ++p)
    if (slot(p, 0) > static_cast<int64_t>(o.code)) {
      o.code = static_cast<ErrorCode>(slot(p, 0));
      o.failed = p;
    }
  if (o.code != ErrorCode::kOk) {
    o.why = "failed before the transfer began";
    return o;
  }
  const int64_t root1 = slot(0, 1);
  for (int p = 0; p < n; ++p)
    if (slot(p, 1) != root1 || root1 == 0) {
      o.code = root1 == 0 ? ErrorCode::kInvalidArgument : ErrorCode::kMismatch;
      o.why = "participants name different roots (" + std::to_string(root1 - 1) + " and " +
              std::to_string(slot(p, 1) - 1) + ")";
      return o;
    }
  o.root = static_cast<int>(root1 - 1);
  const int64_t size1 = slot(o.root, 2);
  const int64_t chunk = slot(o.root, 3);
  if (size1 == 0 || chunk <= 0 || chunk > UINT32_MAX) {
    o.code = ErrorCode::kInternal;
    o.why = "the root sent no size or chunk size";
    return o;
  }
  for (int p = 0; p < n; ++p)
    if (p != o.root && slot(p, 2) != 0 && slot(p, 2) != size1) {
      o.code = ErrorCode::kMismatch;
      o.why = "participant " + std::to_string(p) + " expects " + std::to_string(slot(p, 2) - 1) +
              " bytes, the root has " + std::to_string(size1 - 1);
      return o;
    }
  o.object_bytes = static_cast<uint64_t>(size1 - 1);
  o.chunk_bytes = static_cast<uint32_t>(chunk);
  return o;
}

void raise_if_failed(std::span<const uint8_t> status, int me, const std::string& local_why,
                     const std::function<int(int)>& rank_of) {
  int worst = -1;
  for (size_t p = 0; p < status.size(); ++p)
    if (status[p] != 0 && (worst < 0 || status[p] > status[static_cast<size_t>(worst)]))
      worst = static_cast<int>(p);
  if (worst < 0) return;
  const auto code = static_cast<ErrorCode>(status[static_cast<size_t>(worst)]);
  if (worst == me && !local_why.empty())
    throw Error(code, "blob: rank " + std::to_string(rank_of(me)) + ": " + local_why);
  throw Error(code, "blob: rank " + std::to_string(rank_of(worst)) + " failed (" +
                        std::string(error_code_name(code)) + ")" +
                        (local_why.empty() ? "" : "; here: " + local_why));
}

}  // namespace geoccl::blob
