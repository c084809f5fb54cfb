"""`cinder bench` (src/cli/bench.c): the output contract, not the speed.

Independent truth: gguf-py's GGUFReader for the bytes a decoded token reads (every tensor
but the embedding table, which only the tied LM head reads whole), so decode_gb_s must be
exactly those bytes × tg tok/s. Also: one JSON object per (model, threads) with the
fields bench/compare reads, positive rates, ordered percentiles, the table form, and the
CLI's usage errors (exit 2) and bad files (exit 1). The binary is $CINDER_BIN (default
build/cinder); where $CINDER_SAN_BIN (the ASan+UBSan build) exists, every run is
repeated with it so leaks and overreads fail the test.
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFReader

ROOT = Path(__file__).resolve().parents[2]


def shared_testdata() -> Path:
    d = os.environ.get("CINDER_TESTDATA")
    return Path(d) if d else ROOT.parent / "shared" / "testdata"


STORIES = shared_testdata() / "models" / "stories260K.gguf"


def run(cinder, *args, timeout=300):
    return subprocess.run([str(cinder), "bench", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def decode_bytes(path: Path) -> int:
    r = GGUFReader(path)
    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    return sum(int(t.n_bytes) for t in r.tensors if t.name != "token_embd.weight" or tied)


def test_json_one_object_per_thread_count(cinder):
    r = run(cinder, "-m", str(STORIES), "-p", "16", "-n", "8", "-t", "1,2", "-r", "2", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [j["threads"] for j in rows] == [1, 2]
    wb = decode_bytes(STORIES)
    for j in rows:
        for key in ("pp_tok_s", "tg_tok_s", "ttft_ms", "itl_p50_ms", "itl_p90_ms", "decode_gb_s",
                    "mem_read_gb_s", "decode_bw_frac", "pp_tok_s_sd", "tg_tok_s_sd"):
            assert isinstance(j[key], float), (key, j[key])
        assert j["model"] == str(STORIES) and j["arch"] == "llama"
        assert (j["n_prompt"], j["n_gen"], j["reps"]) == (16, 8, 2)
        assert j["pp_tok_s"] > 0 and j["tg_tok_s"] > 0 and j["ttft_ms"] > 0
        assert j["pp_tok_s_sd"] >= 0 and j["tg_tok_s_sd"] >= 0
        assert 0 < j["itl_p50_ms"] <= j["itl_p90_ms"]
        assert j["weight_bytes"] == wb
        assert math.isclose(j["decode_gb_s"], wb * j["tg_tok_s"] / 1e9, rel_tol=1e-4)
        assert j["mem_read_gb_s"] > 0
        assert math.isclose(j["decode_bw_frac"], j["decode_gb_s"] / j["mem_read_gb_s"], rel_tol=1e-4)
        assert j["isa"] in ("ref", "avx2", "avx512", "amx", "neon")


def test_table(cinder):
    r = run(cinder, "-m", str(STORIES), "-p", "8", "-n", "4", "-t", "1", "-r", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("| model") and "pp tok/s" in lines[0] and "tg tok/s" in lines[0]
    assert len(lines) == 2 and "stories260K.gguf" in lines[1]
    assert "load" in r.stderr


def test_profile_batched_step(cinder):
    """--profile's third table: 8 sequences a token each per step read the same weights per
    step as one sequence does per token (each matrix once per forward pass), and 8 times
    its embedding rows and KV cache."""
    r = run(cinder, "-m", str(STORIES), "-p", "16", "-n", "8", "-t", "1", "-r", "1", "--profile", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    tg, tg8 = j["profile_tg"], j["profile_tg8"]
    assert tg["tokens"] == tg8["tokens"] == 8 and tg8["ms"] > 0
    assert [o["op"] for o in tg8["ops"]] == [o["op"] for o in tg["ops"]]
    for one, eight in zip(tg["ops"], tg8["ops"]):
        assert eight["calls"] == one["calls"], eight["op"]
        times = 8 if eight["op"].startswith(("attention", "embed")) else 1
        assert eight["bytes"] == times * one["bytes"], (eight["op"], eight["bytes"], one["bytes"])
    weights = sum(o["bytes"] for o in tg8["ops"] if not o["op"].startswith(("attention", "embed")))
    rd = GGUFReader(STORIES)
    tied = "output.weight" not in {t.name for t in rd.tensors}
    matrices = sum(int(t.n_bytes) for t in rd.tensors
                   if len(t.shape) == 2 and (t.name != "token_embd.weight" or tied))
    assert weights == matrices * 8  # 8 steps, every matrix once a step (norm vectors are not counted)
    t = run(cinder, "-m", str(STORIES), "-p", "8", "-n", "4", "-t", "1", "-r", "1", "--profile")
    assert t.returncode == 0, t.stderr
    assert "batched decode profile (8 sequences" in t.stdout and "ms/step" in t.stdout


def test_pp_only_and_tg_only(cinder):
    r = run(cinder, "-m", str(STORIES), "-p", "0", "-n", "4", "-t", "1", "-r", "1", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["pp_tok_s"] == 0 and j["tg_tok_s"] > 0


@pytest.mark.parametrize("args", [
    [],
    ["-m", "x", "-t", "0"],
    ["-m", "x", "-t", "1,,2"],
    ["-m", "x", "-t", "two"],
    ["-m", "x", "-r", "0"],
    ["-m", "x", "-p", "-5"],
    ["-m", "x", "--frobnicate", "1"],
    ["-m"],
])
def test_usage_errors(cinder, args):
    r = run(cinder, *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert r.stdout == ""


def test_missing_and_bad_files(cinder, tmp_path):
    r = run(cinder, "-m", str(tmp_path / "nope.gguf"), "-p", "4", "-n", "2", "-r", "1")
    assert r.returncode == 1 and r.stdout == "", r.stdout
    last = r.stderr.splitlines()[-1]
    assert last.startswith("cinder: ") and "nope.gguf" in last, r.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    r = run(cinder, "-m", str(bad), "-p", "4", "-n", "2", "-r", "1")
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert r.stderr.splitlines()[-1].startswith("cinder: "), r.stderr


def test_serve_script_names_a_missing_binary_or_model(tmp_path):
    """bench/serve checks its inputs before starting anything: a clear line, no traceback."""
    serve = [sys.executable, str(ROOT / "bench" / "serve")]
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = subprocess.run([*serve, str(tmp_path / "no-llama"), "-m", str(model), "-c", "1"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert "no-llama/bin/llama-server: no such file" in r.stderr and "Traceback" not in r.stderr, r.stderr
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "llama-server").write_text("")
    r = subprocess.run([*serve, str(tmp_path), "-m", str(tmp_path / "gone.gguf"), "-c", "1"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "gone.gguf: no such file" in r.stderr and "Traceback" not in r.stderr, r.stderr
