// kiln_alloc: aligned, writable buffers; NULL for what cannot be had.
#include <gtest/gtest.h>
#include <kiln/runtime.h>

#include <cstdint>
#include <cstring>

namespace kiln::testing {
namespace {

bool aligned_to(const void* p, size_t align) { return reinterpret_cast<uintptr_t>(p) % align == 0; }

TEST(Alloc, AlignsTo64And128And4096) {
  for (size_t align : {64, 128, 4096}) {
    for (size_t bytes : {1, 63, 64, 1000, 1 << 20}) {
      SCOPED_TRACE("align " + std::to_string(align) + ", bytes " + std::to_string(bytes));
      void* p = kiln_alloc(bytes, align);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(aligned_to(p, align));
      std::memset(p, 0x11, bytes);
      kiln_free(p);
    }
  }
}

TEST(Alloc, DefaultAndSmallAlignmentsAreACacheLine) {
  for (size_t align : {0, 1, 8, 32}) {
    void* p = kiln_alloc(100, align);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(aligned_to(p, 64)) << "align " << align;
    kiln_free(p);
  }
}

TEST(Alloc, LargeAlignments) {
  void* p = kiln_alloc(3 << 20, 2 << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(aligned_to(p, 2 << 20));
  kiln_free(p);
}

TEST(Alloc, ZeroBytesIsStillAPointer) {
  void* p = kiln_alloc(0, 0);
  EXPECT_NE(p, nullptr);
  kiln_free(p);
}

TEST(Alloc, RefusesWhatCannotBeHad) {
  EXPECT_EQ(kiln_alloc(64, 96), nullptr) << "not a power of two";
  EXPECT_EQ(kiln_alloc(SIZE_MAX - 4096, 64), nullptr) << "too big";
  kiln_free(nullptr);
}

}  // namespace
}  // namespace kiln::testing
