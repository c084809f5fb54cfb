#!/usr/bin/env python3
"""bench/maskbench_compare.py — MaskBench, cinder's grammar engine vs llguidance, on the
same files, the same vocabulary and the same token ids, in one run.

    bench/maskbench_compare.py [-m MODEL] [--venv DIR] [--llg-results FILE]
                               [--cinder-results FILE] [--save DIR] [--limit N] PATH...

PATH: MaskBench files or folders of them (default ../shared/testdata/maskbench). cinder
runs as build/bench/maskbench --json; llguidance as ../shared/tools/maskbench_llg.py in
the virtualenv DIR (default ../venv-llg beside the checkout, made outside it with
`python3 -m venv DIR && DIR/bin/pip install llguidance numpy`), importing cinder's
Python package from python/ over build/libcinder.so for the tokenizer, so both engines
see the same ids. --llg-results reads a stored run of that script instead of running it
(llguidance does not change with our code; bench/results keeps one); --cinder-results
likewise for a stored `build/bench/maskbench --json` run.

Prints a markdown table, both columns derived from the per-file lines the same way:
files, passed (compiled, every valid instance accepted, every invalid one rejected),
compile errors, files with a wrong acceptance / a wrong rejection (MaskBench records one
validation error per file), tokens, mean µs per mask (all masks_us over all tokens),
p50 / p99 µs per mask (the tools' own summaries, same estimator; only when both ran on
exactly these files), p75 TTFM; then how many files each passes alone, the CPU family,
the load average before and after, the date and both engines' versions.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = Path.home() / ".cache/cinder/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DEFAULT_DATA = ROOT.parent / "shared/testdata/maskbench"
PEER = ROOT.parent / "shared/tools/maskbench_llg.py"


def cpu_family():
    """The best of amx_tile / avx512_vnni / avx2 this CPU has (the task's grep)."""
    try:
        flags = next(l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown"
    return next((f for f in ("amx_tile", "avx512_vnni", "avx2") if f in flags), "none of amx_tile/avx512_vnni/avx2")


def files_of(paths):
    out = []
    for p in paths:
        p = Path(p)
        out += sorted(str(p / f) for f in os.listdir(p) if f.endswith(".json")) if p.is_dir() else [str(p)]
    return out


def read_lines(text):
    """(per-file dicts by id, summary dict)"""
    per, summary = {}, {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "summary" in d:
            summary = d["summary"]
        else:
            per[d["id"]] = d
    return per, summary


def run(cmd, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"maskbench_compare: {' '.join(map(str, cmd[:3]))} ... failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return res.stdout


def quantile(a, q):  # the peer's estimator, as bench/maskbench.c uses it
    a = sorted(a)
    return a[min(len(a) - 1, int(q * len(a)))] if a else None


def column(per, ids, summary, same_set):
    lines = [per[i] for i in ids if i in per]
    compiled = [d for d in lines if "ttfm_us" in d]
    err = lambda d, s: s in d.get("validation_error", "")
    ntok = sum(d.get("num_tokens", 0) for d in compiled)
    return {
        "files": len(lines),
        "passed": sum("ttfm_us" in d and "validation_error" not in d for d in lines),
        "compile errors": sum("compile_error" in d or "load_error" in d for d in lines),
        "files with a wrong acceptance": sum(err(d, "should reject") for d in lines),
        "files with a wrong rejection": sum(err(d, "should accept") for d in lines),
        "tokens": ntok,
        "mean µs / mask": sum(d.get("masks_us", 0) for d in compiled) / ntok if ntok else None,
        "p50 µs / mask": summary.get("p50_mask_us") if same_set else None,
        "p99 µs / mask": summary.get("p99_mask_us") if same_set else None,
        "p75 TTFM µs": quantile([d["ttfm_us"] for d in compiled], 0.75),
    }


def fmt(v):
    if v is None:
        return "n/a"
    return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=[str(DEFAULT_DATA)])
    ap.add_argument("-m", "--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--venv", default=str(ROOT.parent / "venv-llg"))
    ap.add_argument("--llg-results", help="a stored maskbench_llg.py output instead of a run")
    ap.add_argument("--cinder-results", help="a stored build/bench/maskbench --json output instead of a run")
    ap.add_argument("--maskbench", default=str(ROOT / "build/bench/maskbench"))
    ap.add_argument("--save", help="folder to write cinder.jsonl and llguidance.jsonl into")
    ap.add_argument("--limit", type=int, help="the first N files only")
    a = ap.parse_args()

    files = files_of(a.paths)
    if a.limit is not None:
        files = files[:a.limit]
    if not files:
        sys.exit("maskbench_compare: no MaskBench files")
    ids = [os.path.basename(f) for f in files]
    load_before = os.getloadavg()[0]

    if a.cinder_results:
        cin_out = Path(a.cinder_results).read_text()
    else:
        cin_out = run([a.maskbench, "-m", a.model, "--json"] + files)
    if a.llg_results:
        llg_out = Path(a.llg_results).read_text()
    else:
        env = dict(os.environ, CINDER_LIB=str(ROOT / "build/libcinder.so"),
                   PYTHONPATH=str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        llg_out = run([str(Path(a.venv) / "bin/python"), str(PEER), a.model] + files, env=env)
    load_after = os.getloadavg()[0]
    if a.save:
        Path(a.save).mkdir(parents=True, exist_ok=True)
        (Path(a.save) / "cinder.jsonl").write_text(cin_out)
        (Path(a.save) / "llguidance.jsonl").write_text(llg_out)

    cin, cin_sum = read_lines(cin_out)
    llg, llg_sum = read_lines(llg_out)
    missing = [i for i in ids if i not in llg]
    if missing:
        print(f"maskbench_compare: {len(missing)} files not in llguidance's results (first: {missing[0]})",
              file=sys.stderr)
    same_set = not missing and set(llg) == set(ids)
    cc, lc = column(cin, ids, cin_sum, True), column(llg, ids, llg_sum, same_set)
    cin_name = cin_sum.get("engine", "cinder")
    llg_name = llg_sum.get("engine", "llguidance")
    print(f"| MaskBench, {len(ids)} files, {Path(a.model).name} | {cin_name} | {llg_name} |")
    print("| --- | ---: | ---: |")
    for k in cc:
        print(f"| {k} | {fmt(cc[k])} | {fmt(lc[k])} |")
    ok = lambda per, i: i in per and "ttfm_us" in per[i] and "validation_error" not in per[i]
    both = sum(ok(cin, i) and ok(llg, i) for i in ids)
    only_c = [i for i in ids if ok(cin, i) and not ok(llg, i)]
    only_l = [i for i in ids if ok(llg, i) and not ok(cin, i)]
    print(f"\nboth pass {both}; cinder alone {len(only_c)}; llguidance alone {len(only_l)}")
    print(f"cpu family: {cpu_family()} (cinder's kernels: {cin_sum.get('cpu', '?')}); "
          f"load (1 min) before {load_before:.2f}, after {load_after:.2f}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; one thread each")
    for who, f in (("cinder", a.cinder_results), ("llguidance", a.llg_results)):
        if f:
            print(f"{who} results read from {f} (not run now: the load figures are not its run's)")


if __name__ == "__main__":
    main()
