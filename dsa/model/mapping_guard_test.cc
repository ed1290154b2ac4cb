// MappingGuard (issue 16): a read of a mapping whose file was truncated under it is counted and
// reads zeros instead of killing the process, and the previous SIGBUS handler is back once the
// last guard is gone.
#include "dsa/model/mapping_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace dsa::model {
namespace {

namespace fs = std::filesystem;

TEST(MappingGuard, ReadPastATruncationIsCountedNotFatal) {
  const fs::path file = fs::temp_directory_path() / ("dsa_guard_" + std::to_string(::getpid()));
  const size_t page = size_t(::sysconf(_SC_PAGESIZE)), size = 4 * page;
  {
    const std::vector<unsigned char> bytes(size, 0xAB);
    FILE* f = std::fopen(file.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, size, f), size);
    std::fclose(f);
  }
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(map, MAP_FAILED);
  const auto* p = static_cast<const unsigned char*>(map);

  struct sigaction before {};
  ::sigaction(SIGBUS, nullptr, &before);
  {
    MappingGuard guard(map, size);
    ASSERT_TRUE(guard.active());
    EXPECT_EQ(p[0], 0xAB);
    ASSERT_EQ(::truncate(file.c_str(), off_t(page)), 0);  // pages 1..3 now lie past the end
    std::vector<unsigned char> out(size);
    std::memcpy(out.data(), p, size);  // faults on page 1: the guard maps zeros and counts it
    EXPECT_GE(guard.faults(), 1u);
    EXPECT_EQ(out[0], 0xAB);
    EXPECT_EQ(out[page + 1], 0);
    MappingGuard moved = std::move(guard);
    EXPECT_FALSE(guard.active());  // NOLINT(bugprone-use-after-move): moved-from is inactive
    EXPECT_GE(moved.faults(), 1u);
  }
  struct sigaction after {};
  ::sigaction(SIGBUS, nullptr, &after);
  EXPECT_EQ(after.sa_flags & SA_SIGINFO, before.sa_flags & SA_SIGINFO);
  if ((before.sa_flags & SA_SIGINFO) != 0) {
    EXPECT_EQ(after.sa_sigaction, before.sa_sigaction);
  } else {
    EXPECT_EQ(after.sa_handler, before.sa_handler);
  }
  ::munmap(map, size);
  fs::remove(file);
}

TEST(MappingGuard, EmptyRangeIsInactive) {
  MappingGuard none(nullptr, 0);
  EXPECT_FALSE(none.active());
  EXPECT_EQ(none.faults(), 0u);
}

}  // namespace
}  // namespace dsa::model
