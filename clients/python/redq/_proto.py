"""Finds the generated stubs (redq.v1.*_pb2) and exposes them as one namespace.

An installed package has them: setup.py generated them into the wheel. Running
from the source tree (client.py, or tests with the folder on sys.path) it does
not, so the first import generates them with grpcio-tools into a cache
directory keyed by a hash of the .proto files, and adds that directory to the
`redq` package's search path.
"""

import importlib
import os
import sys
import tempfile

import redq


def _cache_dir():
    base = os.environ.get("REDQ_STUBS_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "redq-python")
    return base


def _generate_into_cache():
    from redq import _codegen

    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        raise ImportError(
            "redq: the gRPC stubs are not installed and grpcio-tools is missing to generate them: "
            "pip install ./clients/python (or pip install -r clients/python/requirements.txt)"
        ) from None
    root = _codegen.proto_root_of_source_tree()
    key = _codegen.fingerprint(root)
    for base in (_cache_dir(), os.path.join(tempfile.gettempdir(), f"redq-python-{os.getuid()}")):
        target = os.path.join(base, key)
        if os.path.isfile(os.path.join(target, "redq", "v1", "admin_pb2_grpc.py")):
            return target
        try:
            os.makedirs(base, exist_ok=True)
            # Generate beside the target and rename, so that a concurrent process
            # (the benchmark spawns one) sees either nothing or the whole set.
            scratch = tempfile.mkdtemp(prefix=f"{key}.", dir=base)
            _codegen.generate(root, scratch)
            try:
                os.rename(scratch, target)
            except OSError:  # another process won the race: use its copy
                pass
            return target
        except OSError:
            continue  # not writable: try the next place
    raise ImportError("redq: found no writable directory for the generated stubs (set REDQ_STUBS_CACHE)")


def _load():
    try:
        return importlib.import_module("redq.v1.queue_pb2")
    except ModuleNotFoundError as err:
        if err.name not in ("redq.v1", "redq.v1.queue_pb2"):
            raise
    redq.__path__.append(os.path.join(_generate_into_cache(), "redq"))
    sys.modules.pop("redq.v1", None)
    return importlib.import_module("redq.v1.queue_pb2")


queue_pb2 = _load()
from redq.v1 import admin_pb2, admin_pb2_grpc, queue_pb2_grpc  # noqa: E402

__all__ = ["queue_pb2", "queue_pb2_grpc", "admin_pb2", "admin_pb2_grpc"]
