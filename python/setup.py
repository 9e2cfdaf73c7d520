"""Build hook of the ragged Python package (pyproject.toml holds the metadata): bundles
libragged.so into the package when one is built, so the wheel needs no library installed beside it.

Which library: $RAGGED_BUNDLE_LIB (a path; empty: bundle nothing), else ../build/libragged.so
next to this directory (a repository checkout after `make`). pip >= 21.3 builds a local directory
in place, so `pip install ./python` from the repository root finds it. A bundled wheel is marked
platform-specific; without a library the package is pure Python and looks for one at run time."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def bundled_lib():
    env = os.environ.get("RAGGED_BUNDLE_LIB")
    if env is not None:
        if env and not os.path.isfile(env):
            raise SystemExit(f"RAGGED_BUNDLE_LIB={env}: no such file")
        return env or None
    p = os.path.join(HERE, "..", "build", "libragged.so")
    return os.path.normpath(p) if os.path.isfile(p) else None


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = bundled_lib()
        if lib:
            self.copy_file(lib, os.path.join(self.build_lib, "ragged", "libragged.so"),
                           preserve_mode=True)


class MaybeBinaryDistribution(Distribution):
    def has_ext_modules(self):  # a bundled .so makes the wheel platform-specific
        return bundled_lib() is not None


setup(cmdclass={"build_py": BuildPy}, distclass=MaybeBinaryDistribution)
