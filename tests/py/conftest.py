"""Shared by the python checks: which cinder binaries to run.

$CINDER_BIN (default build/cinder) and, when set, $CINDER_SAN_BIN (the ASan+UBSan build
that `make test` passes), relative paths taken from the repository root. The `cinder`
fixture runs a test once per binary."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cinder_binaries() -> list[Path]:
    out = []
    for var, default in (("CINDER_BIN", "build/cinder"), ("CINDER_SAN_BIN", None)):
        v = os.environ.get(var, default)
        if v:
            p = Path(v)
            out.append(p if p.is_absolute() else ROOT / p)
    return out


def sanitized(binary: Path) -> bool:
    """Whether binary is the ASan+UBSan build ($CINDER_SAN_BIN): its allocator keeps
    freed memory in quarantine, so resident-memory figures are not the program's own."""
    return len(cinder_binaries()) > 1 and binary == cinder_binaries()[1]


@pytest.fixture(params=cinder_binaries(), ids=lambda p: p.parent.name)
def cinder(request):
    return request.param
