"""Regenerate the checked-in gRPC stubs of the wsfs package from proto/.

Usage (from anywhere, with the pinned grpcio-tools installed):

    python3 -m pip install grpcio-tools==1.66.2
    python3 clients/python/generate.py          # rewrite src/wsfs/v1/*_pb2*.py(i)
    python3 clients/python/generate.py --check  # exit 1 if they are stale

The proto package is `wsfs.v1`, so the generated modules land in the
Python package `wsfs.v1` and their own imports (`from wsfs.v1 import ...`)
work as generated: nothing is rewritten.

`google.rpc` (Status, ErrorInfo) is not generated here: the package uses
the copies in googleapis-common-protos, which every grpcio-status user
already has, so the descriptors are never registered twice.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile

# The version whose output is checked in. Its generated code needs
# grpcio >= this version and protobuf >= the runtime version it names
# (see pyproject.toml's dependencies).
GRPCIO_TOOLS_VERSION = "1.66.2"

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROTO_DIR = os.path.join(REPO, "proto")
OUT_DIR = os.path.join(HERE, "src")
PROTOS = ["wsfs/v1/filesystem.proto", "wsfs/v1/sessions.proto"]
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: str) -> None:
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        raise SystemExit(
            f"grpcio-tools is missing: python3 -m pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}"
        ) from None
    from importlib.metadata import version

    found = version("grpcio-tools")
    if found != GRPCIO_TOOLS_VERSION:
        raise SystemExit(
            f"grpcio-tools {found} is installed, the stubs are pinned to {GRPCIO_TOOLS_VERSION}: "
            f"python3 -m pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}"
        )
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *PROTOS,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed to generate the stubs")


def generated_files(root: str) -> list[str]:
    package = os.path.join(root, "wsfs", "v1")
    if not os.path.isdir(package):
        return []
    return sorted(f for f in os.listdir(package) if f.endswith(GENERATED_SUFFIXES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the checked-in stubs; change nothing"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        fresh = generated_files(tmp)
        current = generated_files(OUT_DIR)
        if args.check:
            stale = sorted(set(fresh) ^ set(current))
            stale += [
                f
                for f in fresh
                if f in current
                and not filecmp.cmp(
                    os.path.join(tmp, "wsfs", "v1", f),
                    os.path.join(OUT_DIR, "wsfs", "v1", f),
                    shallow=False,
                )
            ]
            if stale:
                print(
                    "stale generated stubs in clients/python/src/wsfs/v1: "
                    + ", ".join(sorted(set(stale)))
                    + "\nrun: python3 clients/python/generate.py",
                    file=sys.stderr,
                )
                return 1
            print(f"generated stubs are fresh ({len(fresh)} files)")
            return 0
        target = os.path.join(OUT_DIR, "wsfs", "v1")
        os.makedirs(target, exist_ok=True)
        for f in current:
            if f not in fresh:
                os.remove(os.path.join(target, f))
        for f in fresh:
            shutil.copyfile(os.path.join(tmp, "wsfs", "v1", f), os.path.join(target, f))
        print(f"wrote {len(fresh)} files to clients/python/src/wsfs/v1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
