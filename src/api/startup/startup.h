// Start-up as a pipeline of named steps, each with a typed result (docs/architecture.md, "Start-up
// and the plan"):
//
//   rendezvous        membership::join_store: the store, the session, rank 0's group parameters
//   connect           the router: every device, every peer connected, handshakes done
//   discover_domains  labels, or RTTs clustered, and the ring order across domains
//   choose_transports TCP or QUIC per pair of domains, from what each carried in a probe
//   carry_paths       a later epoch of an elastic group: the paths rank 0 measured before
//   measure_paths     RTT and one flow's rate of every pair of domains, both directions
//   take_detours      pairs whose direct path is much slower than a way through a third domain
//   plan              the first plan snapshot (api/plan.h)
//
// Each decision is a pure function of the measurements (topology/, collectives/detour.h,
// collectives/cost_model.h), unit-tested without sockets; the steps here only gather the
// figures through set-up collectives and hand every rank the same ones, so every rank decides
// alike. A job of one domain runs none of the measuring steps.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/plan.h"
#include "collectives/cost_model.h"
#include "collectives/op_context.h"
#include "geoccl/config.h"
#include "membership/rendezvous.h"
#include "protocol/frame.h"
#include "topology/topology.h"

namespace geoccl::transport {
class Group;
class Router;
}  // namespace geoccl::transport

namespace geoccl::api::startup {

// connect: builds the router and connects it to every peer by cfg.connect_timeout. A rank whose
// peer refused it (another secret, another version) leaves the reason in the store, and every
// rank still setting up fails with that reason instead of waiting. Throws Error.
std::unique_ptr<transport::Router> connect(const Config& cfg, transport::Group& group,
                                           membership::RendezvousInfo& rdv);

// What the steps after connect need: the configuration, the router, and a way to run a set-up
// collective (of the default class, not counted in the metrics) to its end.
struct Context {
  const Config& cfg;
  transport::Router& router;
  std::function<void(protocol::FrameHeader, std::function<void(collectives::OpContext&)>)> collective;
};

struct Domains {
  topology::Topology topo;
  std::vector<double> rtt_ms;  // rank x rank when measured, else empty
};
// discover_domains: exchanges the labels; measures RTTs without them (GEOCCL_TOPOLOGY=auto) or
// from 4 labelled domains on (the ring order across them). Tells the router which peers are
// across a WAN and the domain of every rank.
Domains discover_domains(const Context& c);

// choose_transports: the leaders of every pair of domains probe each transport the router can
// choose between (TCP, QUIC), every rank gets all the figures, and every rank applies the same
// rule (topology::choose_transport), so both ends of a pair choose alike. Returns the decision
// of every pair of domains, one line each.
std::vector<std::string> choose_transports(const Context& c, const topology::Topology& topo);

// carry_paths: in a later epoch of an elastic group (Config::epoch > 0), the figures of every
// pair of domains rank 0's process measured last (path_memory.h), when it has all of them; every
// rank gets rank 0's answer, so they plan alike (a joiner remembers nothing). nullopt: measure.
std::optional<collectives::WanPaths> carry_paths(const Context& c, const topology::Topology& topo);

// measure_paths: the leaders of every pair of domains measure its RTT and one flow's rate in each
// direction (collectives/path_probe.cc); every rank gets the same figures.
collectives::WanPaths measure_paths(const Context& c, const topology::Topology& topo);

struct Detours {
  collectives::WanPaths paths;     // the figures the plan uses: a detour's pair at its rate
  std::vector<std::string> lines;  // the detours taken, one line each
};
// take_detours: pairs of domains whose direct path is much slower than one through a third
// domain move their bulk data that way (collectives/detour.h), where the leaders' transport
// takes it; every rank agrees which did.
Detours take_detours(const Context& c, const topology::Topology& topo, const collectives::WanPaths& paths);

// The whole pipeline after connect, to the first plan snapshot. Logs each step's time.
std::shared_ptr<const PlanSnapshot> plan(const Context& c);

}  // namespace geoccl::api::startup
