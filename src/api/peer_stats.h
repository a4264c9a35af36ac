// The transport's record of each peer's link, as the public API and the metrics show it.
#pragma once

#include "geoccl/communicator.h"
#include "metrics/comm_metrics.h"
#include "transport/link_stats.h"

namespace geoccl::api {

PeerStats to_peer_stats(const transport::LinkStats& l);

// What a metrics scrape reads of the link: both classes' bytes, the least min RTT the transport
// reports, reconnects of every stream.
metrics::PeerFigures to_peer_figures(const transport::LinkStats& l);

}  // namespace geoccl::api
