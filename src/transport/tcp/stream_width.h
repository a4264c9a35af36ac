// StreamWidth: how many data streams a WAN peer's frames are spread over, found by measuring the
// rate they reach. I/O-free: the device feeds it, each tick, the bytes the peer acknowledged on
// its data streams (what the path delivered; bytes written would count a socket buffer filling)
// and whether frames were waiting the whole time (only such spans measure the path: a sender with
// nothing to send measures nothing); it answers the width to use.
//
// One TCP connection rarely fills a long path: a provider may cap each flow (a 5-tuple), a lossy
// path holds each connection's window down, a socket buffer bounds what one connection keeps in
// flight. More connections help until the path itself is full, and then only add queueing.
// PCCL reports 64 and more connections per peer to reach 45 Gbit/s across Europe. So the width
// climbs while it pays: the rate is measured at the current width over a window of busy time,
// then at twice the width; the wider one is kept only if it was clearly faster (`gain`). A trial
// that does not pay goes back, and the next trial waits longer (the hold doubles, up to a
// bound). Above the starting width, trials downwards remove streams that no longer pay: a
// narrower width is kept when it loses less than `keep`. The width never goes below the start.
// A trial that would turn back right after a kept step (at the top, or at the start) waits 16
// holds: the step just measured both widths. A top that was only the streams the peer had
// opened ends that hold once the peer opens more.
//
// A frame takes its stream when it is posted, so frames posted before a width change still go
// out at the old width (a collective may post a whole buffer at once): nothing is counted while
// the device says such frames are `behind`, neither for a trial nor for the width settled after
// one. A trial's new streams start from TCP's slow start: the first window at a wider width warms
// them up and is not counted. Streams a trial needs that are not open yet are waited for; a
// trial whose streams do not open within a few windows is given up.
#pragma once

#include <chrono>
#include <cstdint>

namespace geoccl::transport::tcp {

struct StreamWidthOptions {
  int start = 4;  // the width before any measurement, and the least
  int max = 16;   // the most streams a peer gets
  double gain = 1.2;  // a wider trial is kept when at least this much faster
  double keep = 0.9;  // a narrower trial is kept when at least this fraction of the rate
  // A measurement window: this many RTTs of busy time, at least `min_window`.
  int window_rtts = 4;
  std::chrono::milliseconds min_window{100};
  int first_hold = 4, max_hold = 256;  // windows between trials after one that did not pay
};

class StreamWidth {
 public:
  using Duration = std::chrono::microseconds;

  explicit StreamWidth(const StreamWidthOptions& o = {});

  // The width frames use now (a trial's while one runs): the streams wanted open. A wider
  // trial counts nothing until they are.
  int width() const { return trial_ ? trial_width_ : width_; }
  // The width measurements settled on (not counting a trial).
  int settled() const { return width_; }

  // One span of `span` in which the peer acknowledged `bytes` on its data streams; `busy`: frames
  // were waiting to be written through all of it. `open`: data streams open now, in order from
  // the first; `can_open`: the most that can be (the dialling end opens more on demand, the
  // other end only has what its peer opened). `rtt`: the path's smoothed RTT. `behind`: frames
  // spread before the current width took effect are still waiting.
  void sample(Duration span, uint64_t bytes, bool busy, int open, int can_open, Duration rtt,
              bool behind = false);

  // The latest rate measured over a whole window (bytes per second; 0 before the first).
  double last_rate() const { return last_rate_; }
  // Trials run, and those that were kept (for stats and tests).
  uint64_t trials() const { return trials_; }
  // Whether the last trial that ended was measured (false: its streams did not open, or the
  // frames ahead of it did not drain in time).
  bool last_trial_measured() const { return measured_; }
  uint64_t changes() const { return changes_; }

 private:
  void start_trial(int can_open);
  void finish_trial(double rate);  // with its verdict
  void set_aside_trial();           // without one: the same hold, the same direction next
  void end_trial();
  void reset_window() { acc_bytes_ = 0, acc_time_ = Duration{0}; }

  StreamWidthOptions o_;
  int width_;
  bool trial_ = false, warming_ = false, up_ = true, measured_ = false;
  int trial_width_ = 0;
  Duration waited_{0};  // busy time a trial spent waiting for its streams
  Duration behind_{0};  // busy time spent waiting for frames spread at an earlier width
  static constexpr int kMaxBehindWindows = 64, kMaxBehindWindowsSettled = 16 * kMaxBehindWindows;
  uint64_t acc_bytes_ = 0;
  Duration acc_time_{0};
  double base_rate_ = 0, last_rate_ = 0;
  int hold_ = 0, hold_len_;
  bool next_up_ = true;
  bool stepped_ = false;    // the last trial was kept and none has started since
  bool turn_hold_ = false;  // holding after a step instead of turning back (stepped_)
  static constexpr int kHoldAfterStep = 16;
  uint64_t trials_ = 0, changes_ = 0;
};

}  // namespace geoccl::transport::tcp
