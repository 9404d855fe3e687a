"""Regenerate src/tether/_proto from proto/ (run after editing a .proto file)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "tether" / "_proto"


def generate(out: Path) -> None:
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    out.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(
        ["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out}", f"--pyi_out={out}", *protos]
    )
    if rc != 0:
        sys.exit(f"protoc failed with exit code {rc}")
    for d in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()
    # protoc writes absolute imports (`from tether.v1 import ...`); make them package-relative.
    for py in out.rglob("*_pb2.py"):
        text = py.read_text()
        py.write_text(text.replace("from tether.v1 import", "from tether._proto.tether.v1 import"))


def check() -> int:
    """Exit non-zero when the committed generated code differs from a fresh generation."""
    import filecmp
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        stale = [
            str(p.relative_to(fresh))
            for p in fresh.rglob("*")
            if p.is_file() and not filecmp.cmp(p, OUT / p.relative_to(fresh), shallow=False)
            if (OUT / p.relative_to(fresh)).exists()
        ]
        missing = [
            str(p.relative_to(fresh))
            for p in fresh.rglob("*")
            if p.is_file() and not (OUT / p.relative_to(fresh)).exists()
        ]
    if stale or missing:
        print(
            f"generated protobuf code is stale: {stale + missing}; run python scripts/gen_proto.py"
        )
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
