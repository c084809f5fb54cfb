"""`cinder perplexity --save-logits / --kl-base`: llama-perplexity's log-probability file.

Truth: the format as tools/perplexity/perplexity.cpp writes and reads it (header
"_logits_", n_ctx, n_vocab, n_chunk, the tokens, then per scored position a row of
uint16 log-probabilities with a float scale and minimum in front), checked here by
decoding cinder's file with numpy; a model compared with its own saved file must show no
divergence; a quantized model must show divergence within a bound per type; and, when a
llama.cpp build is at hand (CINDER_LLAMA_BIN or a peers/*/vendor/llama.cpp/build*/bin
beside the checkout), llama-perplexity must read cinder's file, cinder must read
llama-perplexity's, both must hold the very same tokens, and cinder's distribution on
stories260K (F32) must be within KL 1e-4 of llama.cpp's.
"""
import os
import re
import resource
import signal
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

from test_quantize import BIN, STORIES, cinder, llama_bin

# the first 6000 bytes of a GPL-3 text, as the perplexity benchmarks use; inline so the
# test does not depend on the Debian file being installed
TEXT = (Path("/usr/share/common-licenses/GPL-3").read_text()[:6000]
        if Path("/usr/share/common-licenses/GPL-3").exists() else
        " ".join("Once upon a time there was a little girl who liked to play with a red ball."
                 for _ in range(60)))
CTX, CHUNKS = 64, 4  # 124 positions: llama-perplexity reports no statistics under 100


def figure(out, label):
    m = re.search(re.escape(label) + r"\s*:?\s*([-0-9.eE+]+)", out)
    assert m, "no '%s' in:\n%s" % (label, out)
    return float(m.group(1))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    if not STORIES.exists():
        pytest.skip("stories260K.gguf not found (set CINDER_TESTDATA)")
    d = tmp_path_factory.mktemp("kl")
    (d / "text.txt").write_text(TEXT)
    out = cinder("perplexity", "-m", STORIES, "-f", d / "text.txt", "-c", CTX, "--chunks", CHUNKS, "-t", "2",
                 "--save-logits", d / "base.kl").stdout
    return d, figure(out, "Final estimate: PPL =")


def read_file(path):
    b = Path(path).read_bytes()
    assert b[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = np.frombuffer(b[8:20], np.int32)
    tokens = np.frombuffer(b[20:20 + 4 * n_ctx * n_chunk], np.int32)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = np.frombuffer(b[20 + 4 * n_ctx * n_chunk:], np.uint16).reshape(-1, nv)
    return int(n_ctx), int(n_vocab), int(n_chunk), tokens, rows


def test_file_layout_and_rows_are_distributions(base):
    d, ppl = base
    n_ctx, n_vocab, n_chunk, tokens, rows = read_file(d / "base.kl")
    assert (n_ctx, n_chunk) == (CTX, CHUNKS)
    assert rows.shape[0] == n_chunk * (n_ctx - 1 - n_ctx // 2)
    ids = [int(t) for t in cinder("tokenize", "-m", STORIES, "--ids", TEXT).stdout.split()]
    assert list(tokens) == ids[:n_ctx * n_chunk]
    scale = rows[:, 0:2].copy().view(np.float32)[:, 0]
    mn = rows[:, 2:4].copy().view(np.float32)[:, 0]
    logp = scale[:, None] * rows[:, 4:4 + n_vocab] + mn[:, None]
    p = np.exp(logp.astype(np.float64))
    p[rows[:, 4:4 + n_vocab] == 0] = 0  # below the 16-nat floor: not stored
    assert np.all(np.abs(p.sum(1) - 1) < 2e-3)
    tgt = []
    # the PPL printed is the one the rows give, up to the floor's clipping (a token more
    # than 16 nats below the top is stored at the floor, so the rows' PPL is lower)
    for c in range(n_chunk):
        tgt += list(tokens[c * n_ctx + n_ctx // 2 + 1:(c + 1) * n_ctx])
    nll = -logp[np.arange(len(tgt)), tgt]
    assert ppl * 0.9 < np.exp(nll.mean()) <= ppl * 1.001


def test_model_against_its_own_file(base):
    d, _ = base
    out = cinder("perplexity", "-m", STORIES, "--kl-base", d / "base.kl", "-t", "2").stdout
    assert figure(out, "Mean    KLD") < 1e-5
    assert figure(out, "Same top p") == 100.0
    for label in ("Mean PPL(Q)", "Mean PPL(base)", "Median  KLD", "99.0%   KLD", "Mean    Δp", "RMS Δp"):
        figure(out, label)


# Mean KLD of quantized stories260K against its F32 self, at most (measured 0.0015 for
# Q8_0, 0.03-0.05 for the 5-bit and K mixes, 0.15-0.19 for Q4_0/Q4_1 on this text).
KLD_BOUND = {"Q8_0": 0.005, "Q5_1": 0.1, "Q4_K_M": 0.12, "Q4_0": 0.4}


@pytest.mark.parametrize("qtype", sorted(KLD_BOUND))
def test_quantized_model_diverges_within_bound(base, qtype):
    d, _ = base
    q = d / ("%s.gguf" % qtype)
    if not q.exists():
        cinder("quantize", STORIES, q, qtype)
    out = cinder("perplexity", "-m", q, "--kl-base", d / "base.kl", "-t", "2").stdout
    kld = figure(out, "Mean    KLD")
    assert 0 < kld <= KLD_BOUND[qtype], (qtype, kld)


def test_bad_base_files(base, tmp_path):
    d, _ = base
    junk = tmp_path / "junk.kl"
    junk.write_bytes(b"not a logits file at all")
    p = cinder("perplexity", "-m", STORIES, "--kl-base", junk, check=False)
    assert p.returncode == 1 and "not a log-probability file" in p.stderr
    cut = tmp_path / "cut.kl"
    cut.write_bytes((d / "base.kl").read_bytes()[:-100])
    p = cinder("perplexity", "-m", STORIES, "--kl-base", cut, check=False)
    assert p.returncode == 1 and "truncated" in p.stderr
    wrong = bytearray((d / "base.kl").read_bytes())
    wrong[12:16] = np.int32(1000).tobytes()  # n_vocab
    (tmp_path / "wrong.kl").write_bytes(bytes(wrong))
    p = cinder("perplexity", "-m", STORIES, "--kl-base", tmp_path / "wrong.kl", check=False)
    assert p.returncode == 1 and "vocabulary" in p.stderr
    p = cinder("perplexity", "-m", STORIES, "--kl-base", cut, "--save-logits", tmp_path / "x", check=False)
    assert p.returncode == 2
    p = cinder("perplexity", "-m", STORIES, "--save-logits", tmp_path / "x.kl", check=False)
    assert p.returncode == 2 and "-f" in p.stderr
    assert not (tmp_path / "x.kl").exists() and not (tmp_path / "x").exists()


def test_save_logits_replaces_the_file_only_on_success(base, tmp_path):
    # written through a temporary file: a run whose writes fail (a file size limit standing
    # in for a full disk) leaves an existing file byte for byte and nothing beside it; a
    # good run replaces it, with the mode the umask gives
    d, _ = base
    out = tmp_path / "x.kl"
    out.write_bytes(b"keep me")

    def full_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    args = ("perplexity", "-m", STORIES, "-f", d / "text.txt", "-c", CTX, "--chunks", CHUNKS, "-t", "2",
            "--save-logits", out)
    p = cinder(*args, check=False, preexec_fn=full_disk)
    assert p.returncode == 1 and "cannot write" in p.stderr, p.stderr
    assert out.read_bytes() == b"keep me" and os.listdir(tmp_path) == ["x.kl"]
    cinder(*args, preexec_fn=lambda: os.umask(0o027))
    assert out.read_bytes() == (d / "base.kl").read_bytes()
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and os.listdir(tmp_path) == ["x.kl"]


def test_llama_perplexity_reads_ours_and_we_read_theirs(base, tmp_path):
    lb = llama_bin()
    if lb is None or not (lb / "llama-perplexity").exists():
        pytest.skip("no llama.cpp build with llama-perplexity: set CINDER_LLAMA_BIN")
    d, _ = base
    theirs = tmp_path / "llama.kl"
    subprocess.run([str(lb / "llama-perplexity"), "-m", str(STORIES), "-f", str(d / "text.txt"), "-c", str(CTX),
                    "--chunks", str(CHUNKS), "-t", "2", "--kl-divergence-base", str(theirs)],
                   check=True, capture_output=True)
    ours = (d / "base.kl").read_bytes()
    head = 20 + 4 * CTX * CHUNKS
    assert theirs.read_bytes()[:head] == ours[:head], "header or tokens differ from llama-perplexity's"
    out = cinder("perplexity", "-m", STORIES, "--kl-base", theirs, "-t", "2").stdout
    assert figure(out, "Mean    KLD") < 1e-4 and figure(out, "Same top p") == 100.0
    r = subprocess.run([str(lb / "llama-perplexity"), "-m", str(STORIES), "--kl-divergence-base", str(d / "base.kl"),
                        "--kl-divergence", "-t", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert figure(r.stdout + r.stderr, "Mean    KLD") < 1e-4
