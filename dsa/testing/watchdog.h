// Runs fn on this thread; a watchdog ends the process (test failure) if it takes longer than
// `seconds` — a hung kernel cannot be recovered, so it must not hang the suite silently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dsa::testing {

template <class F>
void within_seconds(double seconds, F&& fn) {
  std::atomic<bool> done{false};
  std::thread dog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "FAILED: watchdog: did not finish within %.0f s\n", seconds);
        std::fflush(stderr);
        std::_Exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  fn();
  done.store(true);
  dog.join();
}

}  // namespace dsa::testing
