// A run of 32-bit words at the same offset in a copy's source and destination: what a staged
// block laid out at capacity moves when a step uses a few hundred bytes of it
// (MemoryOps::copy_runs, cuda::copy_word_runs_async).
#pragma once

#include <cstdint>

namespace dsa {

struct WordRun {
  uint32_t offset = 0;  // in words, into the source and the destination alike
  uint32_t words = 0;
};

}  // namespace dsa
