"""Generates the gRPC stubs of redq's API from its .proto files with grpcio-tools.

Used twice: by setup.py when the package is built (the stubs go into the wheel),
and by redq._proto at import time when the package runs straight from the source
tree and has no stubs yet (they go into a cache directory). So this module
imports nothing but the standard library at module level: setup.py loads it by
file path, before the package's own dependencies exist.
"""

import hashlib
import os

# The API, relative to the proto root (../../proto seen from clients/python).
PROTO_FILES = ("redq/v1/queue.proto", "redq/v1/admin.proto")
# google/rpc/status.proto (imported by queue.proto) is compiled against but not
# generated: its Python module comes from googleapis-common-protos, so that a
# process that also loads grpcio-status does not register the file twice.


def proto_root_of_source_tree():
    """The repository's proto/ directory, seen from this file (clients/python/redq)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "proto"))


def fingerprint(proto_root):
    """A short hash of the .proto files and the grpcio-tools version, naming a cache entry."""
    from importlib.metadata import version

    digest = hashlib.sha256(version("grpcio-tools").encode())
    for name in PROTO_FILES + ("google/rpc/status.proto",):
        with open(os.path.join(proto_root, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def generate(proto_root, out_dir):
    """Writes redq/v1/{queue,admin}_pb2{,_grpc}.py (and .pyi) under out_dir.

    The modules land in the package redq.v1, the proto package's own name, so the
    generated `from redq.v1 import queue_pb2` imports resolve inside this package.
    """
    import grpc_tools
    from grpc_tools import protoc

    missing = [p for p in PROTO_FILES if not os.path.isfile(os.path.join(proto_root, p))]
    if missing:
        raise RuntimeError(f"redq: cannot generate the gRPC stubs: {', '.join(missing)} not found under {proto_root}")
    # grpcio-tools ships google/protobuf/*.proto (Duration, Timestamp, Any).
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    os.makedirs(out_dir, exist_ok=True)
    rc = protoc.main([
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(os.path.join(proto_root, p) for p in PROTO_FILES),
    ])
    if rc != 0:
        raise RuntimeError(f"redq: protoc failed (exit {rc}) on {', '.join(PROTO_FILES)} under {proto_root}")
    package = os.path.join(out_dir, "redq", "v1")
    with open(os.path.join(package, "__init__.py"), "w") as f:
        f.write('"""Generated from proto/redq/v1 by grpcio-tools; do not edit."""\n')
    return package
