// The Bazel glue for system libraries links and loads: each library answers
// a call that needs no GPU. The modules that use them test them properly;
// this catches a broken repository rule or BUILD file on its own.
#include <cblas.h>
#include <gtest/gtest.h>
#include <jansson.h>

#include <string>

#ifdef TL_TEST_CUDA_LIBRARIES
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>
#endif

TEST(SystemLibraries, JanssonParsesAndReportsErrorsWithPositions) {
  json_error_t err;
  json_t* j = json_loads("{\"mesh\": {\"dp\": 2}}", 0, &err);
  ASSERT_NE(j, nullptr) << err.text;
  EXPECT_EQ(json_integer_value(json_object_get(json_object_get(j, "mesh"), "dp")), 2);
  json_decref(j);
  EXPECT_EQ(json_loads("{\"mesh\": ", 0, &err), nullptr);
  EXPECT_EQ(err.line, 1);
}

TEST(SystemLibraries, OpenBlasMultiplies) {
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  EXPECT_EQ(c[0], 19.0f);
  EXPECT_EQ(c[3], 50.0f);
  EXPECT_NE(std::string(openblas_get_config()), "");
}

#ifdef TL_TEST_CUDA_LIBRARIES
TEST(SystemLibraries, CudaLibrariesLoadWithoutAGpu) {
  int runtime = 0;
  EXPECT_EQ(cudaRuntimeGetVersion(&runtime), cudaSuccess);
  EXPECT_GE(runtime, 11000);
  EXPECT_GT(cublasLtGetVersion(), 0u);
  EXPECT_GE(cudnnGetVersion(), 8000u);
  int nccl = 0;
  EXPECT_EQ(ncclGetVersion(&nccl), ncclSuccess);
  EXPECT_GE(nccl, 21000);
}
#endif
