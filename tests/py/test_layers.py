"""`make check-layers` (tools/check_layers.py) catches a forbidden include.

The checker runs on a temporary copy of the real src/, include/ and tools/layers.txt,
once as it is and once with one planted arrow that DESIGN.md forbids (a reference kernel
including the model: kernels sit below model). The plant must be named, exactly, and
fail the run; the unplanted copy must not name it, so the test holds whether or not the
rest of the tree is clean today. A small synthetic tree checks the clean exit and the
quoted-include typo.
"""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_layers.py"
PLANT = "src/kernels/ref/matmul.c"
ARROW = "src/kernels -> src/model (model/model.h)"


def run_checker(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), "--root", str(root)],
                          capture_output=True, text=True, timeout=60)


def copy_tree(dst: Path) -> Path:
    for d in ("src", "include"):
        shutil.copytree(ROOT / d, dst / d)
    (dst / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "layers.txt", dst / "tools" / "layers.txt")
    return dst


def test_planted_bad_include_is_named(tmp_path):
    tree = copy_tree(tmp_path)
    before = run_checker(tree)
    assert before.returncode in (0, 1), before.stderr
    assert ARROW not in before.stdout + before.stderr

    f = tree / PLANT
    text = f.read_text()
    if not text.endswith("\n"):
        text += "\n"
    line = text.count("\n") + 1
    f.write_text(text + '#include "model/model.h"\n')

    after = run_checker(tree)
    assert after.returncode == 1
    assert f"{PLANT}:{line}: {ARROW}" in after.stderr.splitlines()
    # the plant adds exactly one line to what was reported before
    assert (set(after.stderr.splitlines()[:-1]) - set(before.stderr.splitlines()[:-1])
            == {f"{PLANT}:{line}: {ARROW}"})


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_synthetic_tree_clean_then_typo(tmp_path):
    write(tmp_path, "tools/layers.txt",
          "public include\nlayer include:\nlayer src/core:\nlayer src/model: src/core\n")
    write(tmp_path, "include/cinder.h", "")
    write(tmp_path, "src/core/core.h", '#include "cinder.h"\n')
    write(tmp_path, "src/model/model.c",
          '#include <stdio.h>\n#include "core/core.h"\n#include "model.h"\n')
    write(tmp_path, "src/model/model.h", "")
    ok = run_checker(tmp_path)
    assert ok.returncode == 0, ok.stderr

    write(tmp_path, "src/core/core.c", '#include "model/model.h"\n#include "core/cor.h"\n')
    bad = run_checker(tmp_path)
    assert bad.returncode == 1
    lines = bad.stderr.splitlines()
    assert "src/core/core.c:1: src/core -> src/model (model/model.h)" in lines
    assert 'src/core/core.c:2: "core/cor.h" resolves to no file' in lines
