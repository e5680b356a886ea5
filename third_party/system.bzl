"""Repository rules that find system libraries whose location varies.

mpich_configure asks `mpicc -show` where MPICH's headers and libraries are.
cuda_configure finds the CUDA toolkit from $CUDA_PATH, then nvcc on $PATH,
then /usr/local/cuda. When no toolkit is found the repository still exists,
with `CUDA_AVAILABLE = False` in its defs.bzl, so that trellis builds its CPU
half and reports "built without CUDA" at run time instead of failing to build.
"""

def _mpich_configure_impl(ctx):
    res = ctx.execute(["mpicc", "-show"])
    if res.return_code != 0:
        fail("mpicc -show failed (is libmpich-dev installed? run tools/setup.sh): " + res.stderr)
    incdir = None
    libdirs = []
    libs = []
    for word in res.stdout.strip().split(" "):
        if word.startswith("-I") and incdir == None:
            incdir = word[2:]
        elif word.startswith("-L"):
            libdirs.append(word[2:])
        elif word.startswith("-l"):
            libs.append(word)
    if incdir == None:
        fail("mpicc -show printed no -I directory: " + res.stdout)
    ctx.symlink(incdir, "include")
    linkopts = ["-L" + d for d in libdirs] + libs
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.template("BUILD", ctx.attr.build_file, {
        "%{linkopts}": repr(linkopts),
    })

mpich_configure = repository_rule(
    implementation = _mpich_configure_impl,
    attrs = {"build_file": attr.label(default = "//third_party:mpich.BUILD.tpl")},
    environ = ["PATH"],
    local = True,
)

def _find_cuda(ctx):
    env = ctx.os.environ
    candidates = []
    if env.get("CUDA_PATH"):
        candidates.append(env["CUDA_PATH"])
    nvcc = ctx.which("nvcc")
    if nvcc:
        candidates.append(str(nvcc.realpath.dirname.dirname))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        p = ctx.path(c)
        if p.get_child("bin").get_child("nvcc").exists:
            return str(p.realpath)
    return None

def _cuda_configure_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    root = _find_cuda(ctx)
    if root == None:
        ctx.file("defs.bzl", "CUDA_AVAILABLE = False\nCUDA_ROOT = \"\"\nNVCC = \"\"\n")
        ctx.file("BUILD", "# No CUDA toolkit found: trellis builds without its CUDA backend.\n" +
                          "package(default_visibility = [\"//visibility:public\"])\n" +
                          "cc_library(name = \"cuda\")\n")
        return
    ctx.symlink(root + "/include", "include")
    ctx.file("defs.bzl", "CUDA_AVAILABLE = True\nCUDA_ROOT = \"%s\"\nNVCC = \"%s/bin/nvcc\"\n" % (root, root))
    ctx.template("BUILD", ctx.attr.build_file, {"%{root}": root})

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    attrs = {"build_file": attr.label(default = "//third_party:cuda.BUILD.tpl")},
    environ = ["CUDA_PATH", "PATH"],
    local = True,
)
