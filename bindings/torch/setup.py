"""Builds braid_torch: libbraid.so (through Bazel, from this repository) and the c10d extension.

The extension (braid_torch._C) reaches braid only through bindings/c/braid.h and loads the
libbraid.so shipped inside the package (rpath $ORIGIN/lib), so no LD_LIBRARY_PATH is needed.
BRAID_LIBRARY=/path/to/libbraid.so skips the Bazel build and ships that file instead.
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ.get("BRAID_ROOT", HERE.parents[1]))


def build_libbraid() -> Path:
    prebuilt = os.environ.get("BRAID_LIBRARY")
    if prebuilt:
        return Path(prebuilt)
    if not (REPO / "WORKSPACE").exists():
        raise RuntimeError(f"braid's repository root not found at {REPO} (set BRAID_ROOT)")
    subprocess.run(["bazel", "build", "//bindings/c:libbraid.so"], cwd=REPO, check=True)
    bin_dir = subprocess.run(["bazel", "info", "bazel-bin"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.strip()
    return Path(bin_dir) / "bindings/c/libbraid.so"


class BuildWithLibbraid(BuildExtension):
    """Builds libbraid.so first, puts it in braid_torch/lib, then links the extension to it."""

    def run(self):
        library = build_libbraid()
        lib_dir = Path(self.build_lib) / "braid_torch" / "lib"
        _install_copy(library, lib_dir / "libbraid.so")
        for ext in self.extensions:
            ext.library_dirs.append(str(lib_dir))
        if self.inplace:  # `setup.py develop` / editable installs load from the source tree
            _install_copy(library, HERE / "braid_torch" / "lib" / "libbraid.so")
        super().run()


def _install_copy(source: Path, target: Path) -> None:
    """Copies to a new file and renames it over `target`: a process that has the old library
    mapped keeps it (overwriting in place would crash it), and Bazel's read-only output is never
    the file written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".new")
    shutil.copyfile(source, staging)
    os.replace(staging, target)


extension = CppExtension(
    name="braid_torch._C",
    sources=sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.cc")),
    include_dirs=[str(REPO), str(HERE / "csrc")],
    libraries=["braid"],
    # torch >= 2.14's headers require C++20; braid itself stays C++17 behind braid.h.
    extra_compile_args=["-std=c++20", "-O2", "-Wall"],
    extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
)

setup(ext_modules=[extension], cmdclass={"build_ext": BuildWithLibbraid})
