#!/usr/bin/env python3
"""Regenerate ofindex/proto/*_pb2.py and *_pb2.pyi from protos/ofindex/*.proto.

Usage::

    python tools/gen_protos.py            # regenerate (bootstraps the pinned generator)
    python tools/gen_protos.py --check    # exit 1 if the committed files are out of date

Why a pinned generator: protobuf gencode >= 5.26 calls
``runtime_version.ValidateProtobufRuntimeVersion`` at import and refuses to load on a
runtime *older* than the protoc that generated it. ofindex supports
``protobuf>=5.26.1``, so the committed code must come from protoc 26.1 (Python gencode
5.26.1), which is what ``grpcio-tools==1.63.0`` bundles. Newer runtimes (5.x, 6.x, 7.x)
all accept that gencode.

When the running interpreter does not have exactly that grpcio-tools, this script makes a
throwaway virtualenv in a temporary directory, installs ``grpcio-tools==1.63.0`` there
with pip, and re-runs itself inside it. ``--any-protoc`` skips that and uses whatever
grpc_tools is importable (the result will then only import on runtimes at least as new
as that protoc; do not commit such output).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_SRC = ROOT / "protos" / "ofindex"
PROTO_NAMES = ["example.proto", "ofrecord.proto", "event.proto"]
OUT_DIR = ROOT / "ofindex" / "proto"
# Inside protoc the files are named ofindex/proto/<name>.proto: that name decides the
# Python module protoc records in the gencode (``ofindex.proto.example_pb2``, used as the
# messages' ``__module__``, hence by pickle) and the file name in the descriptor pool.
PROTOC_DIR = "ofindex/proto"

PINNED_GRPCIO_TOOLS = "1.63.0"
PINNED_PROTOC = "libprotoc 26.1"


def _grpc_tools_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("grpcio-tools")
    except Exception:
        return None


def stage_protos(tmp: Path) -> tuple[Path, list[str]]:
    """Copy protos/ofindex/*.proto to <tmp>/ofindex/proto/; return (proto_path, files)."""
    src_root = tmp / "src"
    (src_root / PROTOC_DIR).mkdir(parents=True)
    for name in PROTO_NAMES:
        shutil.copyfile(PROTO_SRC / name, src_root / PROTOC_DIR / name)
    return src_root, [f"{PROTOC_DIR}/{name}" for name in PROTO_NAMES]


def _generate() -> dict[str, bytes]:
    """Run protoc into a temp dir; return {file name: content} for ofindex/proto/."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        src_root, files_in = stage_protos(tmp)
        out = tmp / "out"
        out.mkdir()
        rc = protoc.main([
            "protoc",
            f"--proto_path={src_root}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            *files_in,
        ])
        if rc != 0:
            raise SystemExit(f"protoc failed with exit code {rc}")
        return {p.name: p.read_bytes() for p in sorted((out / PROTOC_DIR).iterdir())}


def _bootstrap(argv: list[str]) -> int:
    tmp = tempfile.mkdtemp(prefix="ofindex-genprotos-")
    try:
        print(f"gen_protos: creating throwaway venv in {tmp} with grpcio-tools=="
              f"{PINNED_GRPCIO_TOOLS}", file=sys.stderr)
        venv.create(tmp, with_pip=True)
        py = str(Path(tmp) / ("Scripts" if os.name == "nt" else "bin") / "python")
        subprocess.run(
            [py, "-m", "pip", "install", "-q", f"grpcio-tools=={PINNED_GRPCIO_TOOLS}"],
            check=True,
        )
        return subprocess.run([py, __file__, "--in-venv", *argv]).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if the committed files differ")
    ap.add_argument("--any-protoc", action="store_true",
                    help="use the importable grpc_tools whatever its version")
    ap.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)

    have = _grpc_tools_version()
    if have != PINNED_GRPCIO_TOOLS and not ns.any_protoc:
        if ns.in_venv:
            print(f"gen_protos: bootstrap failed, grpcio-tools is {have}", file=sys.stderr)
            return 2
        return _bootstrap([a for a in argv if a != "--in-venv"])

    files = _generate()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, content in files.items():
        target = OUT_DIR / name
        if not target.exists() or target.read_bytes() != content:
            stale.append(name)
            if not ns.check:
                target.write_bytes(content)
    if ns.check:
        if stale:
            print("gen_protos: out of date: " + ", ".join(stale), file=sys.stderr)
            return 1
        print("gen_protos: up to date")
        return 0
    print("gen_protos: wrote " + (", ".join(stale) if stale else "nothing (up to date)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
