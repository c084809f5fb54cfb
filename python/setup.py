"""Builds or finds libcinder.so and puts it inside the package.

In order: $CINDER_LIB (a libcinder.so to bundle); else, inside the cinder source tree
(this folder's parent has the Makefile), `make shared` there and bundle
build/libcinder.so.MAJOR; else nothing is bundled and the package finds an installed
libcinder.so at import (ctypes.util.find_library, e.g. after `make install`)."""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def find_or_build():
    env = os.environ.get("CINDER_LIB")
    if env:
        return Path(env)
    if (ROOT / "Makefile").exists() and (ROOT / "include" / "cinder.h").exists():
        subprocess.run(["make", "-C", str(ROOT), f"-j{os.cpu_count() or 2}", "shared"], check=True)
        libs = sorted((ROOT / "build").glob("libcinder.so.*"), key=lambda p: len(p.name))
        if libs:
            return libs[0]  # libcinder.so.MAJOR, the soname
    return None


class BuildWithLib(build_py):
    def run(self):
        super().run()
        lib = find_or_build()
        if lib is not None:
            dest = Path(self.build_lib) / "cinder" / "libcinder.so"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(lib.resolve(), dest)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel carries a native library: not "pure"
        return True


setup(cmdclass={"build_py": BuildWithLib}, distclass=BinaryDistribution)
