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
