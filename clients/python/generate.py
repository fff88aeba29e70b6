#!/usr/bin/env python3
"""Generates the gRPC stubs of redq's API into redq/v1/, from ../../proto, with grpcio-tools.

The stubs are committed: the package imports them like any other module and
generates nothing at run time. Run this when a .proto file changes, and
commit what it wrote:

    pip install -e 'clients/python[dev]'      # grpcio-tools, at the version pyproject.toml pins
    python clients/python/generate.py         # rewrites clients/python/redq/v1/
    python clients/python/generate.py --check # exit 1 if redq/v1/ is not what it would write (test.sh runs it)

It writes redq/v1/{queue,admin}_pb2.py, their .pyi type stubs and
{queue,admin}_pb2_grpc.py: the proto package redq.v1 lives in the Python
package redq.v1, so the generated `from redq.v1 import ...` resolve inside
this package. google/rpc/status.proto (imported by queue.proto) is compiled
against but not generated: its module comes from googleapis-common-protos, so
that a process that also loads grpcio-status does not register the same file
twice (protobuf refuses two different copies).

Only the grpcio-tools version pinned in pyproject.toml's `dev` extra may
generate: the generated code names the protobuf and grpcio versions it needs,
and the package's dependencies follow them.
"""

import argparse
import filecmp
import os
import re
import shutil
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PACKAGE = os.path.join(HERE, "redq", "v1")
# The API, relative to the proto root.
PROTO_FILES = ("redq/v1/queue.proto", "redq/v1/admin.proto")
INIT = '"""redq\'s gRPC stubs, generated from proto/redq/v1 by clients/python/generate.py; do not edit."""\n'


def pinned_grpcio_tools():
    """The grpcio-tools version of pyproject.toml's dev extra (grpcio-tools==X)."""
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        match = re.search(r'"grpcio-tools==([^"]+)"', f.read())
    if match is None:
        sys.exit("generate.py: pyproject.toml pins no grpcio-tools==X in its dev extra")
    return match.group(1)


def generate(out_dir):
    """Writes the stubs into out_dir/redq/v1/ (created); returns that directory."""
    wanted = pinned_grpcio_tools()
    try:
        installed = version("grpcio-tools")
    except PackageNotFoundError:
        installed = None
    if installed != wanted:
        sys.exit(f"generate.py: needs grpcio-tools {wanted} (pyproject.toml), found {installed or 'none'}: "
                 f"pip install 'grpcio-tools=={wanted}'")
    import grpc_tools
    from grpc_tools import protoc

    # grpcio-tools ships google/protobuf/*.proto (Duration, Timestamp).
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main([
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(os.path.join(PROTO_ROOT, p) for p in PROTO_FILES),
    ])
    if rc != 0:
        sys.exit(f"generate.py: protoc failed (exit {rc}) on {', '.join(PROTO_FILES)} under {PROTO_ROOT}")
    package = os.path.join(out_dir, "redq", "v1")
    with open(os.path.join(package, "__init__.py"), "w", encoding="utf-8") as f:
        f.write(INIT)
    return package


def generated_files(directory):
    """The files of a redq/v1 directory, compiled caches left out."""
    return sorted(name for name in os.listdir(directory) if not name.startswith("__pycache__"))


def check():
    """Exit status 0 if redq/v1/ holds exactly what generate() writes, 1 (naming the files) if not."""
    with tempfile.TemporaryDirectory(prefix="redq-stubs-") as scratch:
        fresh = generate(scratch)
        names = generated_files(fresh)
        committed = generated_files(PACKAGE) if os.path.isdir(PACKAGE) else []
        stale = [n for n in names if n not in committed or not filecmp.cmp(os.path.join(fresh, n),
                                                                             os.path.join(PACKAGE, n), shallow=False)]
        extra = [n for n in committed if n not in names]
    if stale or extra:
        print("generate.py: redq/v1/ differs from what the .proto files generate: "
              + ", ".join(stale + [f"{n} (not generated)" for n in extra])
              + "; run python clients/python/generate.py and commit redq/v1/", file=sys.stderr)
        return 1
    print(f"generate.py: redq/v1/ is up to date ({len(names)} files)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="compare redq/v1/ with a fresh generation, write nothing")
    args = parser.parse_args()
    if args.check:
        return check()
    with tempfile.TemporaryDirectory(prefix="redq-stubs-") as scratch:
        fresh = generate(scratch)
        shutil.rmtree(PACKAGE, ignore_errors=True)
        shutil.copytree(fresh, PACKAGE)
    print(f"generate.py: wrote {', '.join(generated_files(PACKAGE))} into {os.path.relpath(PACKAGE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
