#!/usr/bin/env python3
"""check_layers.py — the real #include graph against the layer rules (`make check-layers`).

Reads the rules (tools/layers.txt: which folder may include which; its header says the
format), then every `#include` in src/**/*.c|h and include/**/*.h, resolves it the way
the compiler does for this tree (a quoted name relative to the including file's folder
first, then -Iinclude, then -Isrc; an angle-bracket name in include/ and src/ only), and
prints each arrow the rules do not allow as

    src/cli/run.c:12: src/cli -> src/model (model/model.h)

then a count; exit 1 if there was any, 0 when the graph is clean. A quoted include that
resolves to no file is an error too (a typo, or a header that moved); an angle-bracket
one that resolves nowhere is a system header and not ours to check. Python 3 standard
library only; it reads files and changes nothing.
"""
import argparse
import os
import re
import sys
from pathlib import Path

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SCAN = (("src", ("*.c", "*.h")), ("include", ("*.h",)))
SEARCH = ("include", "src")  # the Makefile's -Iinclude -Isrc, in that order


class RulesError(Exception):
    pass


def parse_rules(path: Path):
    """Returns (deps, public, private): deps maps each layer folder to the folders its
    line names; public and private are sets of folders."""
    deps, public, private = {}, set(), set()
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word, _, rest = line.partition(" ")
        if word == "layer":
            name, colon, targets = rest.partition(":")
            name = name.strip()
            if not colon or not name:
                raise RulesError(f"{path}:{n}: expected 'layer FOLDER: FOLDERS...'")
            if name in deps:
                raise RulesError(f"{path}:{n}: {name} has two rules")
            deps[name] = targets.split()
        elif word in ("public", "private"):
            (public if word == "public" else private).update(rest.split())
        else:
            raise RulesError(f"{path}:{n}: unknown rule '{word}'")
    for name, targets in deps.items():
        for t in targets:
            if t not in deps:
                raise RulesError(f"{path}: {name} may include {t}, which has no layer line")
    return deps, public, private


def closure(deps):
    """Each layer's allowed set: what it names, and what those may include, all the
    way down. A layer that reaches itself is a circle in the rules: an error."""
    allowed = {}
    for layer in deps:
        seen, todo = set(), list(deps[layer])
        while todo:
            t = todo.pop()
            if t not in seen:
                seen.add(t)
                todo.extend(deps[t])
        if layer in seen:
            raise RulesError(f"the rules have a circle through {layer}")
        allowed[layer] = seen
    return allowed


def owner(rel: str, folders) -> str | None:
    """The nearest listed folder that contains the repository path rel."""
    best = None
    for f in folders:
        if (rel == f or rel.startswith(f + "/")) and (best is None or len(f) > len(best)):
            best = f
    return best


def resolve(root: Path, src_file: Path, quote: str, name: str) -> Path | None:
    dirs = ([src_file.parent] if quote == '"' else []) + [root / d for d in SEARCH]
    for d in dirs:
        p = d / name
        if p.is_file():
            return p.resolve()
    return None


def check(root: Path, rules: Path):
    """Returns (problems, n_includes, n_files): problems are printable lines."""
    deps, public, private = parse_rules(rules)
    allowed = closure(deps)
    layers = list(deps)
    root_abs = root.resolve()
    problems, n_inc, n_files = [], 0, 0
    files = sorted({p for top, pats in SCAN for pat in pats for p in (root / top).rglob(pat)})
    for f in files:
        n_files += 1
        rel = f.resolve().relative_to(root_abs).as_posix()
        me = owner(rel, layers)
        if me is None:
            problems.append(f"{rel}: no layer rule covers this file's folder")
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            quote, name = m.groups()
            target = resolve(root, f, quote, name)
            if target is None:
                if quote == '"':
                    problems.append(f"{rel}:{n}: \"{name}\" resolves to no file")
                continue
            n_inc += 1
            try:
                trel = target.relative_to(root_abs).as_posix()
            except ValueError:
                continue  # outside the tree: not a layer's header
            them = owner(trel, layers)
            if them is None or them == me:
                continue
            if owner(trel, public) is None and them not in allowed[me]:
                problems.append(f"{rel}:{n}: {me} -> {them} ({name})")
            elif owner(trel, private) is not None:
                problems.append(f"{rel}:{n}: {me} -> {owner(trel, private)}, "
                                f"internal to {them} ({name})")
    return problems, n_inc, n_files


def main() -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=here.parent,
                    help="the tree to check (default: this repository)")
    ap.add_argument("--rules", type=Path, default=None,
                    help="the rules file (default: ROOT/tools/layers.txt)")
    a = ap.parse_args()
    rules = a.rules or a.root / "tools" / "layers.txt"
    try:
        problems, n_inc, n_files = check(a.root, rules)
    except (RulesError, OSError) as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    shown = os.path.relpath(rules)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check-layers: {len(problems)} forbidden include(s) in {n_files} files "
              f"(rules: {shown})", file=sys.stderr)
        return 1
    print(f"check-layers: {n_inc} includes in {n_files} files, all allowed by {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
