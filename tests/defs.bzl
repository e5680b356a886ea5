"""Test macros shared by every test package."""

def tl_cc_test(name, srcs, deps = [], size = "small", **kwargs):
    """A GoogleTest binary with the project's defaults."""
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + ["@gtest//:gtest_main"],
        size = size,
        **kwargs
    )

def tl_mpi_test(name, srcs, n_ranks, deps = [], size = "small", timeout_s = 120, env = {}, data = [], **kwargs):
    """A GoogleTest binary run on `n_ranks` local ranks under mpiexec.

    Every rank runs every test (see tests/mpi_main.cc); the job is killed
    after `timeout_s` seconds so that a hang fails rather than blocks;
    `env` adds environment variables (the job's ranks inherit them);
    `data`, files the test reads.
    """
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs + ["//tests:mpi_main.cc"],
        deps = deps + ["@gtest//:gtest", "@mpich//:mpi"],
        testonly = True,
    )
    native.sh_test(
        name = name,
        srcs = ["//tests:mpi_run.sh"],
        args = [str(n_ranks), "$(location :%s_bin)" % name],
        data = [":%s_bin" % name, "//tests:lsan_suppressions.txt"] + data,
        env = dict(env, TL_MPI_TIMEOUT = str(timeout_s)),
        size = size,
        **kwargs
    )
