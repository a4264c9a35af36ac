// The configuration resolved into what the transport layer takes: each device's options and the
// router's. The transports never read Config.
#pragma once

#include "geoccl/config.h"
#include "transport/device_factory.h"
#include "transport/router.h"

namespace geoccl::api::startup {

// `data_streams`: rank 0's choice of TCP data streams per peer (0: measured, from
// kInitialStreams up to kMostStreams). Domain labels say up front that this is a multi-region
// job: the sockets get the WAN options from the start; otherwise peers found in other domains get
// them after discovery. Throws Error(kInvalidArgument) on a bad GEOCCL_TRANSPORT.
transport::tcp::TcpOptions tcp_options(const Config& cfg, int data_streams);
transport::quic::QuicOptions quic_options(const Config& cfg);
transport::DeviceOptions device_options(const Config& cfg, int data_streams);
transport::RouterOptions router_options(const Config& cfg);

}  // namespace geoccl::api::startup
