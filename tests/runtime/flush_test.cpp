// kiln_cache_flush: any range, aligned or not, empty or not, leaves memory as it was and touches
// nothing outside the range's cache lines.
#include <gtest/gtest.h>
#include <kiln/runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::testing {
namespace {

TEST(CacheFlush, EmptyRangesAreFences) {
  char byte = 1;
  kiln_cache_flush(&byte, 0);
  kiln_cache_flush(nullptr, 0);
  kiln_cache_flush(nullptr, 100);
  EXPECT_EQ(byte, 1);
}

TEST(CacheFlush, UnalignedRangesKeepTheirContents) {
  std::vector<unsigned char> buffer(1 << 16);
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<unsigned char>(i * 7);
  const std::vector<unsigned char> before = buffer;
  for (size_t offset : {0, 1, 3, 63, 64, 65, 4095}) {
    for (size_t bytes : {1, 2, 63, 64, 65, 127, 4096, 10000}) {
      kiln_cache_flush(buffer.data() + offset, bytes);
    }
  }
  EXPECT_TRUE(buffer == before);
}

TEST(CacheFlush, LargeBuffer) {
  const size_t bytes = size_t{32} << 20;
  auto* p = static_cast<unsigned char*>(kiln_alloc(bytes, 4096));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0xab, bytes);
  kiln_cache_flush(p, bytes);
  EXPECT_EQ(p[0], 0xab);
  EXPECT_EQ(p[bytes - 1], 0xab);
  kiln_free(p);
}

TEST(CacheFlush, ReadOnlyMemory) {
  static const char kText[] = "read-only data in .rodata";
  kiln_cache_flush(kText, sizeof kText);
  EXPECT_STREQ(kText, "read-only data in .rodata");
}

// The last byte of a page followed by an inaccessible page: a flush that strayed past the range's
// last cache line would fault.
TEST(CacheFlush, StopsAtTheRangesLastLine) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* map = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* first = static_cast<unsigned char*>(map);
  ASSERT_EQ(mprotect(first + page, page, PROT_NONE), 0);
  first[page - 1] = 42;
  kiln_cache_flush(first + page - 1, 1);
  kiln_cache_flush(first + page - 100, 100);
  kiln_cache_flush(first, page);
  EXPECT_EQ(first[page - 1], 42);
  munmap(map, 2 * page);
}

}  // namespace
}  // namespace kiln::testing
