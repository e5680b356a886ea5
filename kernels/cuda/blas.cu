// blas.cu — cuBLAS, loaded when a CUDA backend is first created rather than
// when trellis starts. Mapping libcublas (and the libcublasLt it pulls in)
// costs a process 0.08-0.10 s and 210 MB before main() on this machine (up
// to 0.35 s when it is busy), and every `trellis` command — plan, check,
// data, a CPU run — would pay it for nothing. The library comes from the toolkit trellis was built against
// (TL_CUDA_LIB_DIR), else from the loader's path (LD_LIBRARY_PATH: a bundle
// carried to another machine).
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "core/dynlib.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_impl.h"

#ifndef TL_CUDA_LIB_DIR
#define TL_CUDA_LIB_DIR ""
#endif
#define TL_STR2(x) #x
#define TL_STR(x) TL_STR2(x)
#define CUBLAS_SONAME "libcublas.so." TL_STR(CUBLAS_VER_MAJOR)

static struct tl_cublas_api g_api;
static char g_error[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
  void* h = tl_dynlib_open(CUBLAS_SONAME, TL_CUDA_LIB_DIR, g_error, sizeof g_error);
  if (!h) return;
  struct tl_cublas_api a;
  const char* missing = NULL;
#define TL_SYM(field, name)                                      \
  if (!missing && !(*(void**)&a.field = dlsym(h, name))) missing = name;
  TL_SYM(create, "cublasCreate_v2")
  TL_SYM(destroy, "cublasDestroy_v2")
  TL_SYM(set_stream, "cublasSetStream_v2")
  TL_SYM(set_math_mode, "cublasSetMathMode")
  TL_SYM(sgemm, "cublasSgemm_v2")
  TL_SYM(gemm_ex, "cublasGemmEx")
  TL_SYM(status_string, "cublasGetStatusString")
#undef TL_SYM
  if (missing) {
    snprintf(g_error, sizeof g_error, "%s has no %s", CUBLAS_SONAME, missing);
    dlclose(h);
    return;
  }
  g_api = a;
  g_api.loaded = true;
}

extern "C" tl_status tl__cuda_blas_load(const struct tl_cublas_api** out) {
  *out = NULL;
  pthread_once(&g_once, load);
  if (!g_api.loaded) return TL_ERRF(TL_ERR_CUBLAS, "%s", g_error);
  *out = &g_api;
  return TL_OK;
}

extern "C" tl_status tl_cuda_blas_check(void) {
  const struct tl_cublas_api* api;
  return tl__cuda_blas_load(&api);
}

extern "C" const char* tl__cuda_blas_status(cublasStatus_t s) {
  return g_api.loaded ? g_api.status_string(s) : "cuBLAS not loaded";
}
