# The CUDA toolkit at %{root} (see system.bzl): runtime, cuBLAS/cuBLASLt,
# cuDNN and NCCL, which this machine kind ships inside the toolkit folder.
package(default_visibility = ["//visibility:public"])

# The runtime, linked statically: `trellis` needs no CUDA library to start
# (plan, check, data and CPU runs work where none is installed), and the
# runtime finds the driver (libcuda) when a GPU is first used. cuBLAS and
# NCCL are not linked either: trellis loads them when it first uses a GPU
# (kernels/cuda/blas.cu, core/group_nccl.c); mapping libcublas alone costs a
# process 0.1 s and 210 MB before main().
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
        "%{root}/lib64/libcudart_static.a",
        "-ldl",
        "-lpthread",
        "-lrt",
    ],
)

# cuBLAS, cuBLASLt and NCCL linked, for a test that checks they load.
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
