// Each schedule primitive on small programs: the loop nest it produces, exactly.
#include "test_util.h"

namespace kiln::testing {
namespace {

TEST(Primitives, Placeholder) {}

}  // namespace
}  // namespace kiln::testing
