// The public entry points (geoccl/blob.h): local checks, the source or destination, then the
// transfer over the group or a pair.
#include <optional>

#include "blob/channel.h"
#include "blob/file_destination.h"
#include "blob/mapped_file.h"
#include "blob/transfer.h"
#include "geoccl/blob.h"

namespace geoccl {
namespace {

// kInvalidArgument unless `root` is a participant index; else the option check's verdict.
blob::LocalFailure check_call(const BlobOptions& o, int root, int participants) {
  if (root < 0 || root >= participants)
    return {ErrorCode::kInvalidArgument, "root " + std::to_string(root) +
                                             " is not a rank of this group of " +
                                             std::to_string(participants)};
  return blob::check_options(o);
}

// The root's side over `ch`: the file mapped, or the failure to map it carried into the vote.
BlobResult send_file_over(blob::BlobChannel& ch, int root, const std::string& path,
                          blob::LocalFailure pre, const BlobOptions& o) {
  blob::MappedFile src;
  if (pre.code == ErrorCode::kOk) {
    try {
      src = blob::MappedFile::open_read(path);
    } catch (const Error& e) {
      pre = blob::failure_of(e);
    }
  }
  return blob::send_blob(ch, root, src.bytes(), pre, o);
}

BlobResult recv_file_over(blob::BlobChannel& ch, int root, const std::string& path,
                          blob::LocalFailure pre, const BlobOptions& o) {
  if (pre.code == ErrorCode::kOk && path.empty())
    pre = {ErrorCode::kInvalidArgument, "empty destination path"};
  blob::FileDestination dest(path, o.resume);
  return blob::receive_blob(ch, root, dest, pre, o);
}

}  // namespace

BlobResult broadcast_blob(Communicator& comm, int root, std::span<const uint8_t> data,
                          std::vector<uint8_t>* out, const BlobOptions& o) {
  auto ch = blob::group_channel(comm, o);
  auto pre = check_call(o, root, comm.size());
  if (comm.rank() == root) return blob::send_blob(*ch, root, data, pre, o);
  std::vector<uint8_t> scratch;
  if (pre.code == ErrorCode::kOk && !out)
    pre = {ErrorCode::kInvalidArgument, "a receiver needs an output vector"};
  blob::MemoryDestination dest(out ? out : &scratch);
  try {
    return blob::receive_blob(*ch, root, dest, pre, o);
  } catch (...) {
    if (out) out->clear();  // nothing unverified is handed over
    throw;
  }
}

BlobResult broadcast_blob_file(Communicator& comm, int root, const std::string& src_path,
                               const std::string& dst_path, const BlobOptions& o) {
  auto ch = blob::group_channel(comm, o);
  auto pre = check_call(o, root, comm.size());
  if (comm.rank() == root) return send_file_over(*ch, root, src_path, pre, o);
  return recv_file_over(*ch, root, dst_path, pre, o);
}

BlobResult send_file(Communicator& comm, int peer, const std::string& path, const BlobOptions& o) {
  auto ch = blob::pair_channel(comm, peer, o);
  return send_file_over(*ch, ch->me(), path, blob::check_options(o), o);
}

BlobResult recv_file(Communicator& comm, int peer, const std::string& path, const BlobOptions& o) {
  auto ch = blob::pair_channel(comm, peer, o);
  return recv_file_over(*ch, 1 - ch->me(), path, blob::check_options(o), o);
}

}  // namespace geoccl
