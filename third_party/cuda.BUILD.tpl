# The CUDA toolkit at %{root} (see system.bzl): runtime, cuBLAS/cuBLASLt,
# cuDNN and NCCL, which this machine kind ships inside the toolkit folder.
package(default_visibility = ["//visibility:public"])

# The runtime. cuBLAS is not linked: mapping it costs a process 0.1 s and
# 210 MB before main(), so trellis loads it when it first uses a GPU
# (kernels/cuda/blas.cu).
cc_library(
    name = "cuda",
    hdrs = glob([
        "include/*.h",
        "include/*.hpp",
        "include/crt/*.h",
        "include/crt/*.hpp",
        "include/nv/**",
    ]),
    includes = ["include"],
    linkopts = [
        "-L%{root}/lib64",
        "-Wl,-rpath,%{root}/lib64",
        "-lcudart",
        "-ldl",
    ],
)

# cuBLAS and cuBLASLt linked, for a test that checks they load.
cc_library(
    name = "cublas",
    linkopts = ["-L%{root}/lib64", "-Wl,-rpath,%{root}/lib64", "-lcublasLt", "-lcublas"],
    deps = [":cuda"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L%{root}/lib64", "-Wl,-rpath,%{root}/lib64", "-lnccl"],
    deps = [":cuda"],
)

# libcudnn.so is a dispatcher that dlopen()s its parts (libcudnn_graph, ...)
# by name; linking the graph part in makes that work where the toolkit's
# folder is not on the loader's search path (a fresh machine).
cc_library(
    name = "cudnn",
    linkopts = [
        "-L%{root}/lib64",
        "-Wl,-rpath,%{root}/lib64",
        "-Wl,--no-as-needed",
        "-lcudnn_graph",
        "-Wl,--as-needed",
        "-lcudnn",
    ],
    deps = [":cuda"],
)
