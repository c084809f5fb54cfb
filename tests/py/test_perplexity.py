"""`cinder perplexity` against an independent numpy forward pass.

Truth: tools/reference/numpy_llama.py (a plain float32 numpy implementation of the llama
architecture over the GGUF weights, dequantized by the `gguf` package) computes the
perplexity of stories260K over the same chunks; cinder's figure with an F32 KV cache must
agree to 0.2 % (cinder mirrors llama.cpp's f16 roundings inside attention, the numpy
reference does not). The KL divergence between the F16 and F32 caches must be small and
non-negative, and bad arguments must give a one-line error and exit 2.
"""
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
STORIES = str(TESTDATA / "models" / "stories260K.gguf")
BIN = ROOT / os.environ.get("CINDER_BIN", "build/cinder")
sys.path.insert(0, str(ROOT / "tools" / "reference"))

TEXT = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. "
    "Her friend Tom came to play with her. They threw the ball high into the sky and laughed. "
    "Then it started to rain, so they went home. Lily's mom gave them warm milk and cookies. "
    "They were happy and tired. The next day, the sun was shining again and the birds sang. "
    "Lily and Tom went back to the park to play with the ball. They had a lot of fun together."
)
CTX = 48
CHUNKS = 2


def run(*args, check=True):
    p = subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def figure(out, label):
    m = re.search(re.escape(label) + r"\s*([0-9.eE+-]+)", out)
    assert m, "no '%s' in output:\n%s" % (label, out)
    return float(m.group(1))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("ppl") / "text.txt"
    p.write_text(TEXT)
    return p


def numpy_perplexity(text_file):
    import numpy_llama

    ids = [int(t) for t in run("tokenize", "-m", STORIES, "--ids", "--no-bos", TEXT).stdout.split()]
    m = numpy_llama.Model(STORIES)
    bos = int(m.kv["tokenizer.ggml.bos_token_id"])
    body = CTX - 1
    nll, n = 0.0, 0
    for c in range(CHUNKS):
        chunk = [bos] + ids[c * body:(c + 1) * body]
        assert len(chunk) == CTX
        logits = numpy_llama.forward(m, chunk, "f32").astype(np.float64)
        for i in range(CTX // 2, CTX - 1):
            row = logits[i]
            lse = row.max() + math.log(np.exp(row - row.max()).sum())
            nll -= row[chunk[i + 1]] - lse
            n += 1
    return math.exp(nll / n), n


def test_perplexity_matches_numpy_reference(text_file):
    out = run("perplexity", "-m", STORIES, "-f", str(text_file), "-c", str(CTX), "--chunks",
              str(CHUNKS), "--kv-type", "f32", "-t", "2").stdout
    ppl_f32 = figure(out, "perplexity (f32 KV):")
    ppl_f16 = figure(out, "perplexity (f16 KV):")
    ref, n = numpy_perplexity(text_file)
    assert figure(out, "scored positions:") == n
    assert abs(ppl_f32 - ref) / ref < 2e-3, "cinder %.5f vs numpy %.5f" % (ppl_f32, ref)
    assert abs(ppl_f16 - ref) / ref < 5e-3, "cinder f16 KV %.5f vs numpy %.5f" % (ppl_f16, ref)
    kl = re.search(r"KL\(f16 KV \|\| f32 KV\): mean ([0-9.eE+-]+), max ([0-9.eE+-]+)", out)
    assert kl, out
    assert 0.0 <= float(kl.group(1)) <= float(kl.group(2)) < 1e-3


def test_q8_kv_on_the_default_model(text_file):
    """An 8-bit cache changes the distribution a little: KL > 0, top-1 mostly kept."""
    model = Path(os.environ.get("CINDER_MODELS", Path.home() / ".cache" / "cinder" / "models"))
    model = model / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model.exists(), "run scripts/setup.sh to fetch the default model"
    out = run("perplexity", "-m", str(model), "-f", str(text_file), "-c", "64", "--chunks", "1",
              "--kv-type", "q8_0", "-t", "2").stdout
    kl = float(re.search(r"KL\(f16 KV \|\| q8_0 KV\): mean ([0-9.eE+-]+)", out).group(1))
    agree = float(re.search(r"top-1 agreement: ([0-9.]+)%", out).group(1))
    assert 0.0 < kl < 0.1 and agree >= 80.0, out


def test_q8_kv_refused_when_heads_do_not_fit_its_blocks(text_file):
    p = run("perplexity", "-m", STORIES, "-f", str(text_file), "-c", str(CTX), "--kv-type", "q8_0",
            check=False)
    assert p.returncode == 1 and "head dimension 8" in p.stderr


@pytest.mark.parametrize("args,msg", [
    ([], "-f TEXT_FILE is required"),
    (["-f", "/nonexistent/text.txt", "-m", STORIES], "cannot open"),
    (["-f", "x", "--kv-type", "q4"], "--kv-type must be"),
    (["-f", "x", "-c", "3"], "-c = 3 is out of range: must be in [8, 65536]"),
    (["--bogus"], "unknown option '--bogus'"),
])
def test_bad_arguments(args, msg):
    p = run("perplexity", *args, check=False)
    assert p.returncode in (1, 2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], p.stderr


def test_text_shorter_than_a_chunk(tmp_path):
    f = tmp_path / "short.txt"
    f.write_text("Once upon a time")
    p = run("perplexity", "-m", STORIES, "-f", str(f), "-c", "64", check=False)
    assert p.returncode == 1 and "fewer than one chunk" in p.stderr
