// Hosts: which ranks share a machine (and a network namespace), from the identity each rank
// reports. Ranks on one host are in one domain whatever their RTTs, so measuring needs only one
// rank per host: RTTs between hosts' leaders stand for every pair of their ranks. Pure functions;
// no I/O (the identity itself: transport/shm/address.h, HostId).
#pragma once

#include <string>
#include <vector>

namespace geoccl::topology {

// keys[r]: rank r's host identity ("" when unknown). Returns host_of[r], hosts numbered 0..h-1 in
// order of their first rank; each rank with an unknown identity is a host of its own.
std::vector<int> group_hosts(const std::vector<std::string>& keys);

// The lowest rank of each host (host index -> rank).
std::vector<int> host_leaders(const std::vector<int>& host_of);

// An n*n RTT matrix (ms, row-major) in which only the leaders' pairs were measured: every pair of
// ranks on two hosts gets their leaders' RTT, every pair on one host 0.
std::vector<double> rank_rtts_from_leaders(const std::vector<double>& measured, const std::vector<int>& host_of);

}  // namespace geoccl::topology
