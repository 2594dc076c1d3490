// kiln_model_open's refusals of what is not a model. Running models is
// tests/graph/model_artifact_test.cpp's, through examples/c/run_model; the SHA-256 that checks
// their weights is tests/agent/sha256_test.c's.
#include <gtest/gtest.h>
#include <kiln/runtime.h>

#include <string>

namespace kiln::testing {
namespace {

TEST(ModelOpen, SaysWhyItCannotOpen) {
  char error[512];
  EXPECT_EQ(kiln_model_open(nullptr, nullptr, error, sizeof error), nullptr);
  EXPECT_STREQ(error, "no model given");

  EXPECT_EQ(kiln_model_open("/nonexistent/model.so", nullptr, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("cannot load the model /nonexistent/model.so"),
            std::string::npos)
      << error;

  // A shared object that is not a model.
  EXPECT_EQ(kiln_model_open("libm.so.6", nullptr, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("cannot load the model"), std::string::npos) << error;

  // A small error buffer is cut, never overrun; none at all is fine.
  char tiny[8];
  EXPECT_EQ(kiln_model_open(nullptr, nullptr, tiny, sizeof tiny), nullptr);
  EXPECT_STREQ(tiny, "no mode");
  EXPECT_EQ(kiln_model_open(nullptr, nullptr, nullptr, 0), nullptr);
  kiln_model_close(nullptr);
}

}  // namespace
}  // namespace kiln::testing
