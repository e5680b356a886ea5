"""cuda_library: compile .cu files with nvcc (sm_80 and sm_90) into a static
archive and wrap it as a cc_library, so C code links CUDA kernels like any
other dependency. Without a CUDA toolkit it builds `fallback_srcs` instead."""

load("@cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

_ARCHS = ["80", "90"]

def cuda_library(name, cu_srcs, hdrs = [], srcs = [], fallback_srcs = [], deps = [], copts = [], **kwargs):
    if not CUDA_AVAILABLE:
        native.cc_library(
            name = name,
            srcs = srcs + fallback_srcs,
            hdrs = hdrs,
            deps = deps,
            copts = copts,
            **kwargs
        )
        return
    gencode = " ".join(["-gencode arch=compute_%s,code=sm_%s" % (a, a) for a in _ARCHS])
    # where the toolkit's libraries are that trellis loads when it first uses
    # a GPU rather than links (cuBLAS: kernels/cuda/blas.cu)
    lib_dir = "-DTL_CUDA_LIB_DIR='\"%s/lib64\"'" % NVCC.rsplit("/bin/", 1)[0]
    objs = []
    for src in cu_srcs:
        obj = name + "_cu/" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + native.glob(["**/*.h", "**/*.cuh"]) + ["//core:headers", "//kernels:headers"],
            outs = [obj],
            # -I. reaches the workspace's headers from the execution root.
            cmd = ("%s -std=c++17 -O3 -Xcompiler -fPIC -Xcompiler -Wall " +
                   "-Werror all-warnings -I. %s %s -c $(location %s) -o $@") % (NVCC, gencode, lib_dir, src),
            tags = ["no-remote"],
        )
        objs.append(obj)
    native.genrule(
        name = name + "_archive",
        srcs = objs,
        outs = ["lib" + name + "_cu.a"],
        cmd = "ar rcs $@ $(SRCS)",
    )
    native.cc_library(
        name = name,
        srcs = srcs + ["lib" + name + "_cu.a"],
        hdrs = hdrs,
        deps = deps + ["@cuda"],
        copts = copts,
        alwayslink = 1,
        linkstatic = 1,
        **kwargs
    )
