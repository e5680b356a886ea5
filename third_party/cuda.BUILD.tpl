# The CUDA toolkit at %{root} (see system.bzl): runtime, cuBLAS/cuBLASLt,
# cuDNN and NCCL, which this machine kind ships inside the toolkit folder.
package(default_visibility = ["//visibility:public"])

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
        "-lcublasLt",
        "-lcublas",
        "-lcudart",
    ],
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
