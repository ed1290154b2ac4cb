// Checked mode (SPEC.md §1.3): when on, ops additionally validate data (lengths, slots, page ids)
// and references poison unspecified regions. On by default; DSA_CHECKED=0 turns it off, and tests
// flip it with ScopedCheckedMode to exercise the unchecked (neutralising) behaviour. The CLI sets
// it from --checked-mode (cli/engine_args.h: off by default in release builds).
#pragma once

namespace dsa {

bool checked_mode();
void set_checked_mode(bool on);

class ScopedCheckedMode {
 public:
  explicit ScopedCheckedMode(bool on) : previous_(checked_mode()) { set_checked_mode(on); }
  ~ScopedCheckedMode() { set_checked_mode(previous_); }
  ScopedCheckedMode(const ScopedCheckedMode&) = delete;
  ScopedCheckedMode& operator=(const ScopedCheckedMode&) = delete;

 private:
  bool previous_;
};

}  // namespace dsa
