// The liveness monitor's part in device tests: a device's tick every 250 ms on its loop thread,
// for as long as the ticker lives. `Owner` has `loop` (runtime::EventLoop) and `dev`.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace geoccl::test_support {

template <class Owner>
class DeviceTicker {
 public:
  explicit DeviceTicker(Owner& o)
      : thread_([this, &o] {
          while (!stop_.load()) {
            o.loop.run_owned([&] { o.dev->tick(std::chrono::steady_clock::now()); });
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
          }
        }) {}
  ~DeviceTicker() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace geoccl::test_support
