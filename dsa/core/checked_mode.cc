#include "dsa/core/checked_mode.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace dsa {

namespace {
std::atomic<bool>& checked_flag() {
  static std::atomic<bool> flag([] {
    const char* env = std::getenv("DSA_CHECKED");
    return !(env && std::strcmp(env, "0") == 0);
  }());
  return flag;
}
}  // namespace

bool checked_mode() { return checked_flag().load(std::memory_order_relaxed); }
void set_checked_mode(bool on) { checked_flag().store(on, std::memory_order_relaxed); }

}  // namespace dsa
