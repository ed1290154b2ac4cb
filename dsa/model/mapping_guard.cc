#include "dsa/model/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <utility>

namespace dsa::model {

namespace {

// The handler reads this table without a lock (only atomics are async-signal-safe); a slot is in
// use while `begin` is non-zero. A real checkpoint has a few hundred shards.
constexpr int kSlots = 4096;
struct Slot {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<uint64_t> faults{0};
};
Slot g_slots[kSlots];

std::mutex g_mu;  // guards the fields below (registration, not the handler)
int g_active = 0;
struct sigaction g_previous;
uintptr_t g_page = 0;

void pass_on(int sig, siginfo_t* info, void* context) {
  const struct sigaction& p = g_previous;
  if ((p.sa_flags & SA_SIGINFO) != 0 && p.sa_sigaction != nullptr) {
    p.sa_sigaction(sig, info, context);
  } else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN && p.sa_handler != nullptr) {
    p.sa_handler(sig);
  } else {
    // Returning re-executes the faulting read, which now gets the default action (the process
    // ends with SIGBUS, as it would have without the guard).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGBUS, &dfl, nullptr);
  }
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire);
    if (b == 0 || addr < b || addr >= s.end.load(std::memory_order_acquire)) continue;
    // A zero page over the one the file no longer backs; mmap is a plain system call on Linux,
    // safe here although POSIX does not list it.
    void* page = reinterpret_cast<void*>(addr & ~(g_page - 1));
    void* m = ::mmap(page, g_page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m == MAP_FAILED) break;
    s.faults.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  pass_on(sig, info, context);
}

}  // namespace

MappingGuard::MappingGuard(const void* base, size_t size) {
  if (base == nullptr || size == 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  int slot = -1;
  for (int i = 0; i < kSlots && slot < 0; ++i) {
    if (g_slots[i].begin.load(std::memory_order_relaxed) == 0) slot = i;
  }
  if (slot < 0) return;
  if (g_active == 0) {
    g_page = uintptr_t(::sysconf(_SC_PAGESIZE));
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGBUS, &sa, &g_previous) != 0) return;
  }
  ++g_active;
  const auto b = reinterpret_cast<uintptr_t>(base);
  g_slots[slot].faults.store(0, std::memory_order_relaxed);
  g_slots[slot].end.store(b + size, std::memory_order_release);
  g_slots[slot].begin.store(b, std::memory_order_release);
  slot_ = slot;
}

MappingGuard::MappingGuard(MappingGuard&& o) noexcept : slot_(std::exchange(o.slot_, -1)) {}

MappingGuard& MappingGuard::operator=(MappingGuard&& o) noexcept {
  if (this != &o) {
    reset();
    slot_ = std::exchange(o.slot_, -1);
  }
  return *this;
}

MappingGuard::~MappingGuard() { reset(); }

void MappingGuard::reset() {
  if (slot_ < 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  g_slots[slot_].begin.store(0, std::memory_order_release);
  g_slots[slot_].end.store(0, std::memory_order_release);
  slot_ = -1;
  if (--g_active > 0) return;
  // Put back what was there before, unless someone installed their own handler since.
  struct sigaction current {};
  ::sigaction(SIGBUS, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_sigbus) {
    ::sigaction(SIGBUS, &g_previous, nullptr);
  }
}

uint64_t MappingGuard::faults() const {
  return slot_ < 0 ? 0 : g_slots[slot_].faults.load(std::memory_order_relaxed);
}

}  // namespace dsa::model
