"""Finds the CUDA Toolkit and exposes it as the @cuda repository.

Why a repository rule and not new_local_repository: a machine without the toolkit (a developer's
laptop, a CI image whose setup failed) must still run `bazel build //...`. new_local_repository
over a missing /usr/local/cuda fails every target that mentions @cuda; this rule instead writes
@cuda//:defs.bzl with CUDA_FOUND = False and the reason, and the macros of
//third_party/cuda:cuda.bzl then mark the CUDA targets `manual` (so //... skips them) while
//third_party/cuda:toolkit_test fails loudly, naming what is missing. Where the toolkit is found
the same macros build everything, on every change.

Where it looks: $BRAID_CUDA_PATH if set, else /usr/local/cuda (where this project's machines have
it), else /opt/braid-cuda/nvidia/cu13 (where .ci/setup.sh installs NVIDIA's PyPI wheels).
"""

# What the build needs from the toolkit: the compiler, the runtime headers, the static runtime.
_REQUIRED = ["bin/nvcc", "include/cuda_runtime.h", "include/cuda_fp16.h", "include/cuda_bf16.h"]
_DEFAULT_ROOTS = ["/usr/local/cuda", "/opt/braid-cuda/nvidia/cu13"]
_STATIC_CUDART = ["lib64/libcudart_static.a", "lib/libcudart_static.a"]

def _nvcc_release(ctx, nvcc):
    result = ctx.execute([nvcc, "--version"])
    if result.return_code != 0:
        return None, "`%s --version` failed: %s" % (nvcc, result.stderr.strip())
    for line in result.stdout.splitlines():
        # "Cuda compilation tools, release 13.0, V13.0.88"
        if "release " in line:
            return line.split("release ")[1].split(",")[0].strip(), None
    return None, "`%s --version` printed no release line" % nvcc

def _missing(ctx, root, reason):
    ctx.file("BUILD", """# Written by cuda_configure: no usable CUDA Toolkit at {root}.
package(default_visibility = ["//visibility:public"])

# Empty stand-ins so that BUILD files naming these labels still load; every target that would
# use them is `manual` (see //third_party/cuda:cuda.bzl) and toolkit_test fails.
cc_library(name = "cuda_headers")
cc_library(name = "cudart_static")
""".format(root = root))
    ctx.file("defs.bzl", """CUDA_FOUND = False
CUDA_PATH = {root}
CUDA_RELEASE = ""
CUDA_MISSING_REASON = {reason}
""".format(root = repr(root), reason = repr(reason)))

def _cuda_configure_impl(ctx):
    if "BRAID_CUDA_PATH" in ctx.os.environ:
        root = ctx.os.environ["BRAID_CUDA_PATH"]
    else:
        root = _DEFAULT_ROOTS[0]
        for candidate in _DEFAULT_ROOTS:
            if ctx.path(candidate + "/bin/nvcc").exists:
                root = candidate
                break
    for rel in _REQUIRED:
        if not ctx.path(root + "/" + rel).exists:
            _missing(ctx, root, "%s/%s does not exist (run .ci/setup.sh, which installs the " % (root, rel) +
                                "CUDA compiler and runtime, or set BRAID_CUDA_PATH)")
            return
    cudart = None
    for rel in _STATIC_CUDART:
        if ctx.path(root + "/" + rel).exists:
            cudart = rel
            break
    if cudart == None:
        _missing(ctx, root, "no libcudart_static.a under %s/lib64 or %s/lib" % (root, root))
        return
    release, error = _nvcc_release(ctx, root + "/bin/nvcc")
    if error != None:
        _missing(ctx, root, error)
        return

    # Resolve the path once (/usr/local/cuda is usually a link to /usr/local/cuda-X.Y), so the
    # genrules and the headers name the same toolkit.
    real = str(ctx.path(root).realpath)
    ctx.symlink(real + "/include", "include")
    ctx.symlink(real + "/" + cudart, "lib/libcudart_static.a")
    ctx.file("BUILD", """# Written by cuda_configure from the CUDA Toolkit at {real} (release {release}).
package(default_visibility = ["//visibility:public"])

# Runtime headers for host code compiled by the ordinary C++ toolchain (cuda_fp16.h and
# cuda_bf16.h need CCCL's <nv/target>, which nvcc finds in include/cccl by itself).
cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/*.h", "include/*.hpp", "include/crt/**", "include/cccl/nv/**"]),
    includes = ["include", "include/cccl"],
)

# The CUDA runtime linked statically: the binaries then need only the driver (libcuda.so, which
# the static runtime opens at run time), so a binary built here runs on the GPU machine.
cc_library(
    name = "cudart_static",
    srcs = ["lib/libcudart_static.a"],
    linkopts = ["-ldl", "-lpthread", "-lrt"],
    deps = [":cuda_headers"],
)
""".format(real = real, release = release))
    ctx.file("defs.bzl", """CUDA_FOUND = True
CUDA_PATH = {real}
CUDA_RELEASE = {release}
CUDA_MISSING_REASON = ""
""".format(real = repr(real), release = repr(release)))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["BRAID_CUDA_PATH"],
    local = True,
)
