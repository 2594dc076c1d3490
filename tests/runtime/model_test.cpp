// The model loader without a compiled model: kiln_model_open's refusals of what is not a model,
// and kiln_model_from_image on plans written here (one that runs, weights that are not the
// plan's, plans that are malformed, each refused naming its line). Running compiled models is
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

// A plan in memory (kiln_model_from_image): a model of no kernels and one input copied to its
// output, its weights four zero bytes.
std::string tiny_plan(const std::string& weights_line) {
  return "kiln-model 1\nname tiny\n" + weights_line +
         "\narena 0\nkernels 0\n"
         "tensor input 0 0 8 f32 1 2 x\ntensor output 0 0 8 f32 1 2 y\ncopy 1 0\nend\n";
}

const char* kZeros4 = "df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119";

TEST(ModelFromImage, OpensAPlanInMemoryAndRunsIt) {
  kiln_entry_fn none[1] = {nullptr};
  unsigned char weights[4] = {0, 0, 0, 0};
  char error[512];
  std::string plan = tiny_plan(std::string("weights 4 ") + kZeros4);
  kiln_model* m = kiln_model_from_image(plan.c_str(), none, weights, 4, error, sizeof error);
  ASSERT_NE(m, nullptr) << error;
  EXPECT_STREQ(kiln_model_name(m), "tiny");
  ASSERT_EQ(kiln_model_num_inputs(m), 1);
  EXPECT_STREQ(kiln_model_input(m, 0)->name, "x");
  EXPECT_EQ(kiln_model_input(m, 0)->shape[0], 2);
  EXPECT_EQ(kiln_model_output(m, 1), nullptr);
  float x[2] = {1.5f, -2.0f}, y[2] = {0, 0};
  const void* in[] = {x};
  void* out[] = {y};
  EXPECT_EQ(kiln_model_run(m, in, out), KILN_OK) << kiln_model_error(m);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -2.0f);
  void* missing[] = {nullptr};
  EXPECT_EQ(kiln_model_run(m, in, missing), KILN_ERR_ARGS);
  EXPECT_NE(std::string(kiln_model_error(m)).find("output 0 (y) is NULL"), std::string::npos);
  kiln_model_close(m);
}

// A model with a run-time batch: one sample copied to the output, run on three; a model of
// static shapes refuses a batch other than 1.
TEST(ModelFromImage, RunsABatchOneSampleAtATime) {
  kiln_entry_fn none[1] = {nullptr};
  unsigned char weights[4] = {0, 0, 0, 0};
  char error[512];
  std::string plan =
      std::string("kiln-model 1\nname tiny\nweights 4 ") + kZeros4 +
      "\narena 0\nkernels 0\nbatch n 1 0\n"
      "tensor input 0 0 8 f32 2 1 2 x\ntensor output 0 0 8 f32 2 1 2 y\ncopy 1 0\nend\n";
  kiln_model* m = kiln_model_from_image(plan.c_str(), none, weights, 4, error, sizeof error);
  ASSERT_NE(m, nullptr) << error;
  EXPECT_STREQ(kiln_model_batch(m), "n");
  EXPECT_EQ(kiln_model_input(m, 0)->batched, 1);
  EXPECT_EQ(kiln_model_output(m, 0)->batched, 1);
  EXPECT_EQ(kiln_model_input(m, 0)->bytes, 8u);  // one sample's
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {};
  const void* in[] = {x};
  void* out[] = {y};
  ASSERT_EQ(kiln_model_run_batch(m, 3, in, out), KILN_OK) << kiln_model_error(m);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(y[k], x[k]) << k;
  EXPECT_EQ(kiln_model_run_batch(m, 0, in, out), KILN_OK);
  EXPECT_EQ(kiln_model_run_batch(m, -1, in, out), KILN_ERR_ARGS);
  kiln_model_close(m);

  plan = tiny_plan(std::string("weights 4 ") + kZeros4);
  m = kiln_model_from_image(plan.c_str(), none, weights, 4, error, sizeof error);
  ASSERT_NE(m, nullptr) << error;
  EXPECT_EQ(kiln_model_batch(m), nullptr);
  EXPECT_EQ(kiln_model_input(m, 0)->batched, 0);
  EXPECT_EQ(kiln_model_run_batch(m, 2, in, out), KILN_ERR_ARGS);
  EXPECT_NE(std::string(kiln_model_error(m)).find("the model's shapes are static"),
            std::string::npos)
      << kiln_model_error(m);
  EXPECT_EQ(kiln_model_run_batch(m, 1, in, out), KILN_OK);
  kiln_model_close(m);
}

TEST(ModelFromImage, RefusesWeightsThatAreNotTheModelsAndBadPlans) {
  kiln_entry_fn none[1] = {nullptr};
  unsigned char weights[5] = {0, 0, 0, 1, 0};
  char error[512];
  std::string plan = tiny_plan(std::string("weights 4 ") + kZeros4);
  EXPECT_EQ(kiln_model_from_image(plan.c_str(), none, weights, 5, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("it needs 4 bytes, 5 were given"), std::string::npos) << error;
  EXPECT_EQ(kiln_model_from_image(plan.c_str(), none, weights, 4, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("their SHA-256 is"), std::string::npos) << error;

  struct Bad {
    std::string plan, expect;
  } bad[] = {
      {"kiln-model 2\nend\n", "line 1: a plan of another version of kiln"},
      {"kiln-model 1\nkernels 0\ncall 3 0\nend\n", "line 3: call: expected KERNEL NARGS"},
      {"kiln-model 1\ntensor arena 0 64 8 f32 1 2 t\nend\n",
       "line 2: tensor: past the end of the weights or the arena"},
      {"kiln-model 1\nbogus\nend\n", "line 2: an unknown line"},
      {"kiln-model 1\nname cut\n", "cut short (no 'end' line)"},
      {"kiln-model 1\nbatch n\nend\n", "line 2: batch: expected NAME COUNT INPUT..."},
      {"kiln-model 1\nbatch n 1 4\nend\n", "batch: input 4 is not an input of the plan"},
  };
  for (const Bad& b : bad) {
    EXPECT_EQ(kiln_model_from_image(b.plan.c_str(), none, nullptr, 0, error, sizeof error), nullptr)
        << b.plan;
    EXPECT_NE(std::string(error).find(b.expect), std::string::npos) << b.plan << ": " << error;
  }
}

}  // namespace
}  // namespace kiln::testing
