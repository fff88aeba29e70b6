"""Build hook of the redq package: generates the gRPC stubs into the wheel.

pip builds a local directory in place, so ../../proto (the repository's
proto/) is found from here; REDQ_PROTO_DIR overrides it (e.g. when building
from an unpacked sdist). The metadata is in pyproject.toml.
"""

import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _codegen():
    # By file path: importing the redq package would need grpcio, absent from the build environment.
    spec = importlib.util.spec_from_file_location("redq_codegen", os.path.join(HERE, "redq", "_codegen.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithStubs(build_py):
    """build_py, then redq/v1/*_pb2*.py generated from the .proto files into build_lib."""

    def run(self):
        super().run()
        proto_root = os.environ.get("REDQ_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
        _codegen().generate(os.path.normpath(proto_root), self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
