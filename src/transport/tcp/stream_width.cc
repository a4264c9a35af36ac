#include "transport/tcp/stream_width.h"

#include <algorithm>

namespace geoccl::transport::tcp {

StreamWidth::StreamWidth(const StreamWidthOptions& o)
    : o_(o), width_(std::max(1, o.start)), hold_len_(std::max(1, o.first_hold)) {
  o_.start = width_;
  o_.max = std::max(o_.max, width_);
}

void StreamWidth::sample(Duration span, uint64_t bytes, bool busy, int open, int can_open, Duration rtt,
                         bool behind) {
  if (!busy || span <= Duration{0}) return;
  const Duration window = std::max<Duration>(o_.min_window, o_.window_rtts * rtt);
  if (trial_ && open < trial_width_) {
    // Waiting for the trial's streams: a few windows, then the trial is given up.
    waited_ += span;
    if (waited_ > 4 * window) finish_trial(0);
    return;
  }
  if (!behind && !trial_) behind_ = Duration{0};  // in a trial, a flickering wait still adds up
  const int behind_limit = trial_ ? kMaxBehindWindows : kMaxBehindWindowsSettled;
  if (behind && behind_ <= behind_limit * window) {
    // The frames ahead go out at an earlier width: what they reach says nothing of this one's
    // (a trial's, or the settled width's after a trial). A trial whose earlier frames take
    // longer than kMaxBehindWindows to drain is set aside unmeasured: no verdict, so neither a
    // longer hold nor a change of direction. Frames that stay behind kMaxBehindWindowsSettled
    // without a trial (a receiver that does not read) are counted rather than stop the
    // measurements.
    reset_window();
    behind_ += span;
    if (trial_ && behind_ > kMaxBehindWindows * window) set_aside_trial();
    return;
  }
  acc_bytes_ += bytes;
  acc_time_ += span;
  if (acc_time_ < window) return;
  const double rate = static_cast<double>(acc_bytes_) * 1e6 / static_cast<double>(acc_time_.count());
  last_rate_ = rate;
  reset_window();
  if (trial_) {
    if (warming_) {
      warming_ = false;  // the new streams left slow start: the next window counts
      return;
    }
    finish_trial(rate);
    return;
  }
  base_rate_ = rate;
  if (turn_hold_ && std::min(o_.max, can_open) > width_) {
    // Held at a top that was only the streams the peer had opened: it opened more.
    hold_ = 0;
    hold_len_ = std::max(1, o_.first_hold);
    next_up_ = true;
  }
  if (hold_ > 0) {
    --hold_;
    return;
  }
  start_trial(can_open);
}

void StreamWidth::start_trial(int can_open) {
  const int ceiling = std::min(o_.max, std::max(can_open, width_));
  const bool can_widen = width_ < ceiling, can_narrow = width_ > o_.start;
  if (!can_widen && !can_narrow) return;
  up_ = can_widen && (next_up_ || !can_narrow);
  if (stepped_ && up_ != next_up_) {
    // Back the way the step just kept came (the top or the bottom reached): that step measured
    // what this trial would, so it waits as long as after several trials that did not pay.
    stepped_ = false;
    turn_hold_ = true;
    hold_ = hold_len_ = std::min(std::max(1, o_.first_hold) * kHoldAfterStep, std::max(1, o_.max_hold));
    return;
  }
  stepped_ = turn_hold_ = false;
  trial_width_ = up_ ? std::min(2 * width_, ceiling) : std::max(width_ / 2, o_.start);
  trial_ = true;
  warming_ = up_;
  waited_ = behind_ = Duration{0};
  reset_window();
  ++trials_;
}

void StreamWidth::end_trial() {
  trial_ = warming_ = false;
  behind_ = Duration{0};
  reset_window();
}

void StreamWidth::set_aside_trial() {
  end_trial();
  measured_ = false;
  hold_ = hold_len_;
}

void StreamWidth::finish_trial(double rate) {
  end_trial();
  measured_ = rate > 0;
  const bool kept = up_ ? rate > 0 && rate >= o_.gain * base_rate_ : rate >= o_.keep * base_rate_;
  if (kept) {
    // Go on in the same direction at once: the next step may pay too.
    width_ = trial_width_;
    base_rate_ = rate;
    ++changes_;
    hold_ = 0;
    hold_len_ = std::max(1, o_.first_hold);
    next_up_ = up_;
    stepped_ = true;
    return;
  }
  hold_len_ = std::min(2 * hold_len_, std::max(o_.max_hold, 1));
  hold_ = hold_len_;
  next_up_ = !up_;
}

}  // namespace geoccl::transport::tcp
