// What a pair's streams ask of it, answered by its device (TcpDevice keeps these private).
#include "transport/tcp/device.h"

namespace geoccl::transport::tcp {

Group& TcpPeer::group() const { return device.group_; }
const TcpOptions& TcpPeer::options() const { return device.options_; }
bool TcpPeer::can_resume(int stream) const { return device.can_resume(*this, stream); }
void TcpPeer::stream_broken(int stream) { device.stream_broken(*this, stream); }
void TcpPeer::control_resumed() { device.control_resumed(*this); }
bool TcpPeer::data_stream_open(const TcpConnection* except) const { return device.data_stream_open(*this, except); }
void TcpPeer::received(uint64_t bytes) { device.received(*this, bytes); }
void TcpPeer::acked(uint64_t upto) { device.acked(*this, upto); }
void TcpPeer::tune_wan_socket(int fd) const { device.tune_wan_socket(fd); }
void TcpPeer::queue_changed() { device.data_queue_changed(*this); }
bool TcpPeer::holding() const { return device.holding(*this); }
runtime::WorkerPool* TcpPeer::crypto_workers() const { return device.crypto_pool_.get(); }

}  // namespace geoccl::transport::tcp
