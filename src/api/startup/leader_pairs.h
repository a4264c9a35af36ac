// What the measuring steps of start-up share: the header of a set-up collective of float64
// figures, and the walk over pairs of domains that their leaders take.
#pragma once

#include <cstdint>

#include "geoccl/types.h"
#include "protocol/frame.h"
#include "topology/topology.h"

namespace geoccl::api::startup {

inline protocol::FrameHeader figures_header(uint32_t tag) {
  protocol::FrameHeader h;
  h.kind = protocol::OpKind::kBarrier;
  h.dtype = static_cast<uint8_t>(DataType::kFloat64);
  h.tag = tag;
  return h;
}

// Pairs of domains in a fixed order, for their leaders (la, lb): every leader takes its pairs
// one after another, so both ends of a pair reach it in the same order.
template <class F>
void for_leader_pairs(const topology::Topology& t, int me, F&& f) {
  for (int da = 0; da < t.domains(); ++da)
    for (int db = da + 1; db < t.domains(); ++db) {
      const int la = t.members[static_cast<size_t>(da)][0], lb = t.members[static_cast<size_t>(db)][0];
      if (me == la || me == lb) f(da, db, la, lb);
    }
}

}  // namespace geoccl::api::startup
