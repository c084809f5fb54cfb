"""scripts/test.sh runs the unit suites once more per kernel family (CINDER_ISA=avx2, ref,
...), leaving out ISA_FREE: suites whose code cannot reach the kernels, so the family
cannot change their result. That list is a claim about the code; this test holds it to
the code as built.

CINDER_ISA is read in one place, src/core/cpu.c (the kernel table is chosen from it, and
the half-precision conversions ask it about F16C), so a suite is ISA-free when nothing it
links can call into cpu.o. From the optimized build's objects (build/obj, made before
the tests run), `nm` gives each object's defined and undefined symbols; starting from
the objects of every file that defines a test of the suite, the symbols they need are
followed to the objects that define them, all the way down. An object is linked whole
when one of its symbols is needed, so this over-approximates what runs: a suite it
calls free is free.
"""
import collections
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OBJ = ROOT / "build" / "obj"
PROBE = OBJ / "src" / "core" / "cpu.o"
SUITE = re.compile(r"^\s*(?:Test|ParameterizedTest)\s*\(\s*(?:[^,()]+\*\s*\w+\s*,\s*)?(\w+)\s*,", re.M)


def isa_free_list() -> list[str]:
    m = re.search(r"^ISA_FREE='([^']*)'", (ROOT / "scripts" / "test.sh").read_text(), re.M)
    assert m, "scripts/test.sh has no ISA_FREE='...' line"
    return m.group(1).split("|")


def nm(args, obj: Path) -> list[str]:
    return subprocess.run(["nm", *args, str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()


@pytest.fixture(scope="module")
def graph():
    """(definer, needs): the object that defines each global symbol; the symbols each
    object needs."""
    objs = sorted(OBJ.glob("src/**/*.o")) + sorted(OBJ.glob("tests/unit/*.o"))
    if not PROBE.exists() or not any(OBJ.glob("tests/unit/*.o")):
        pytest.fail(f"{OBJ} has no objects: build first (make all), as scripts/test.sh does")
    definer, needs = {}, collections.defaultdict(set)
    for o in objs:
        for line in nm(["--defined-only"], o):
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDRBVW":
                definer.setdefault(parts[2], o)
        needs[o] = {line.split()[-1] for line in nm(["-u"], o) if line.strip()}
    return definer, needs


def reaches_probe(start: Path, graph) -> list[Path]:
    """The chain of objects from start to cpu.o, or [] when there is none."""
    definer, needs = graph
    came = {start: None}
    todo = collections.deque([start])
    while todo:
        o = todo.popleft()
        if o == PROBE:
            chain = []
            while o is not None:
                chain.append(o)
                o = came[o]
            return chain[::-1]
        for sym in needs[o]:
            d = definer.get(sym)
            if d is not None and d not in came:
                came[d] = o
                todo.append(d)
    return []


def test_isa_free_suites_reach_no_kernel(graph):
    files = collections.defaultdict(set)
    for f in sorted((ROOT / "tests" / "unit").glob("*.c")):
        for suite in SUITE.findall(f.read_text(errors="replace")):
            files[suite].add(f)
    names = isa_free_list()
    assert names and len(names) == len(set(names))
    for suite in names:
        assert suite in files, f"ISA_FREE names {suite}, which no tests/unit file defines"
        for f in files[suite]:
            chain = reaches_probe(OBJ / "tests" / "unit" / (f.stem + ".o"), graph)
            assert not chain, f"ISA_FREE suite {suite} reaches the CPU probe: " + \
                " -> ".join(p.relative_to(OBJ).as_posix() for p in chain)


def test_the_walk_finds_a_kernel_user(graph):
    # the check itself: the golden tests run the model, so they must be found reaching it
    chain = reaches_probe(OBJ / "tests" / "unit" / "test_golden.o", graph)
    assert chain and chain[-1] == PROBE
    assert "golden" not in isa_free_list()
