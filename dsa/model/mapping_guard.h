// MappingGuard: a read of a file mapping whose file shrank under it (another process truncated or
// rewrote a shard while dsa loaded it, issue 16) raises SIGBUS, which would kill the server. While
// any guard is alive, one process-wide SIGBUS handler is installed; a fault inside a guarded
// mapping gets a zero page mapped over the missing one and is counted, and the read continues.
// The loader then turns the count (and a changed fstat) into a Status naming the file and tensor.
//
// Why patch the page rather than sigsetjmp/siglongjmp around the memcpy: the bytes are read in
// several places (the loader's own copies, StagedUpload's slot fill, the CPU backend's copy into
// its buffer), across C++ frames a longjmp must not skip; patching keeps every copy a plain memcpy
// with no extra pass over the data, and the fault is reported after the copy returns. Why not
// pread into the staging slots instead: on the CPU backend the tensor is copied straight from the
// mapping into its final buffer (one copy); pread would keep that, but every other reader of the
// mapping (converted tensors, the tensor checks) would need a second path. A fault outside every
// guarded mapping is passed to the handler that was installed before (or the default action, which
// ends the process as it would have without the guard).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsa::model {

class MappingGuard {
 public:
  MappingGuard() = default;
  // Guards [base, base + size). When the fixed table of guarded mappings is full (thousands of
  // shards open at once), the mapping is left unguarded: active() is false.
  MappingGuard(const void* base, size_t size);
  MappingGuard(MappingGuard&& o) noexcept;
  MappingGuard& operator=(MappingGuard&& o) noexcept;
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;
  // Unguards before the owner unmaps; the last guard restores the previous SIGBUS handler.
  ~MappingGuard();

  bool active() const { return slot_ >= 0; }
  // SIGBUS faults taken (and patched) inside the mapping so far.
  uint64_t faults() const;

 private:
  void reset();
  int slot_ = -1;
};

}  // namespace dsa::model
