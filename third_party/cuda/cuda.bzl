"""Building CUDA code with nvcc inside Bazel 4 (which has no CUDA rules of its own).

cuda_library: .cu files compile with nvcc into position-independent objects that an ordinary
cc_library links, together with the static CUDA runtime. Every .cu is built for sm_90 (the
H100's machine code) plus compute_90 PTX (so a later GPU can JIT it); the objects carry no
relocatable device code, so no device link step is needed.
cuda_cc_binary / cuda_cc_test: C++ targets that use CUDA, linked statically (static cudart,
linkstatic) so the binary runs on the GPU machine, which has a driver but none of braid's
libraries.

Without a toolkit (see cuda_configure.bzl) all three mark their targets `manual`, so
`bazel build //...` passes and //tests/gpu:cuda_build_test is the one loud failure.
"""

load("@cuda//:defs.bzl", "CUDA_FOUND", "CUDA_MISSING_REASON", "CUDA_PATH")

# Code for the H100 (sm_90) and PTX for anything newer.
CUDA_GENCODE = [
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

_NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    # Same warnings as the host code; nvcc passes them to g++ for the host side.
    "-Xcompiler=-Wall",
    # nvcc's front end flags `status_ = Status::...` in core/base/status.h as discarding a
    # [[nodiscard]] type (the assignment's own Status& result); g++ rightly does not.
    "--diag-suppress=2810",
] + CUDA_GENCODE

def _nvcc_objects_impl(ctx):
    if not CUDA_FOUND:
        fail("CUDA targets cannot build: " + CUDA_MISSING_REASON)
    cc_contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps if CcInfo in dep]
    headers = depset(ctx.files.hdrs, transitive = [c.headers for c in cc_contexts])
    include_flags = ["-I."]
    for c in cc_contexts:
        include_flags += ["-I" + d for d in c.includes.to_list() + c.quote_includes.to_list()]
        for d in c.system_includes.to_list():
            include_flags += ["-isystem", d]
        include_flags += ["-D" + d for d in c.defines.to_list()]
    include_flags.append("-I" + ctx.bin_dir.path)
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_nvcc/%s/%s.pic.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        ctx.actions.run(
            executable = CUDA_PATH + "/bin/nvcc",
            arguments = _NVCC_FLAGS + ctx.attr.copts + include_flags + ["-c", src.path, "-o", obj.path],
            inputs = depset([src], transitive = [headers]),
            outputs = [obj],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s (sm_90 + PTX)" % src.short_path,
            # nvcc runs the host compiler (g++) found on PATH.
            use_default_shell_env = True,
        )
        objects.append(obj)
    # Runfiles too, so a test can inspect the objects (//tests/gpu:cuda_build_test).
    return [DefaultInfo(files = depset(objects), runfiles = ctx.runfiles(files = objects))]

_nvcc_objects = rule(
    implementation = _nvcc_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(),
        "copts": attr.string_list(),
    },
)

def _cuda_tags(tags):
    return (tags or []) + ([] if CUDA_FOUND else ["manual"])

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], nvcc_copts = [], tags = [], **kwargs):
    """A cc_library whose .cu sources go through nvcc; .cc sources through the C++ toolchain."""
    cu = [s for s in srcs if s.endswith(".cu")]
    cc = [s for s in srcs if not s.endswith(".cu")]
    all_deps = deps + ["@cuda//:cudart_static"]
    objects = []
    if cu:
        _nvcc_objects(
            name = name + "_nvcc",
            srcs = cu,
            # The .cc and header sources the .cu files may include.
            hdrs = hdrs + [s for s in cc if s.endswith(".h") or s.endswith(".cuh")],
            deps = all_deps,
            copts = nvcc_copts,
            tags = _cuda_tags(tags),
        )
        objects = [":" + name + "_nvcc"]
    native.cc_library(
        name = name,
        srcs = cc + objects,
        hdrs = hdrs,
        deps = all_deps,
        copts = copts,
        tags = _cuda_tags(tags),
        **kwargs
    )

def cuda_cc_binary(name, deps = [], tags = [], **kwargs):
    native.cc_binary(
        name = name,
        deps = deps + ["@cuda//:cudart_static"],
        linkstatic = True,
        tags = _cuda_tags(tags),
        **kwargs
    )

def cuda_cc_test(name, deps = [], tags = [], **kwargs):
    native.cc_test(
        name = name,
        deps = deps + ["@cuda//:cudart_static"],
        linkstatic = True,
        tags = _cuda_tags(tags),
        **kwargs
    )

def cuda_tags(tags = []):
    """Tags for a plain C++ target that needs the CUDA headers (e.g. a CPU test of device code)."""
    return _cuda_tags(tags)
