"""setup.py: all metadata lives in pyproject.toml; this adds the C++ sources to the package.

The C++ ops are compiled on first use by ``ratelnn.tf_init()`` / ``ratelnn.mx_init()`` (and
cached), because they must be built against the TensorFlow / MXNet that is installed.  So a
built wheel or a ``pip install .`` carries the sources of ``ops/`` as package data under
``ratelnn/_ops_src`` (``ratelnn/_build.py`` looks there when no ``ops/`` sits beside the
package); an editable install reads ``ops/`` in place.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

OPS = Path(__file__).resolve().parent / "ops"
SOURCE_SUFFIXES = {".cc", ".h", ".inc"}


class BuildPyWithOps(build_py):
    """build_py that also copies ops/**/{*.cc,*.h,*.inc} to ratelnn/_ops_src."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "ratelnn" / "_ops_src"
        if target.exists():
            shutil.rmtree(target)
        for source in sorted(OPS.rglob("*")):
            if source.is_file() and source.suffix in SOURCE_SUFFIXES:
                dest = target / source.relative_to(OPS)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)


setup(cmdclass={"build_py": BuildPyWithOps})
