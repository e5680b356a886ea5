# MPICH, located by `mpicc -show` (see system.bzl).
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "mpi",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
    linkopts = %{linkopts},
)
