"""Fill in the middle and embeddings from the Python package (python/cinder over
build/libcinder.so) and the CLI, on Qwen2.5-Coder 0.5B. Truth: the same request through
the other door (`cinder run --fim-prefix/--fim-suffix --json`; the FIM layout written out
by hand), and the errors the library gives for a model without FIM tokens."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("CINDER_LIB", str(ROOT / "build" / "libcinder.so"))
sys.path.insert(0, str(ROOT / "python"))
import cinder  # noqa: E402
from conftest import cinder_binaries  # noqa: E402

TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
STORIES = str(TESTDATA / "models" / "stories260K.gguf")
PREFIX = "def area(w, h):\n    return "
SUFFIX = "\n\nprint(area(2, 3))\n"


def qwen():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not m.exists():
        pytest.skip(f"model {m} is missing: run scripts/fetch_models.sh")
    return str(m)


@pytest.fixture(scope="module")
def model():
    with cinder.Model(qwen(), n_ctx=4096, n_threads=2) as m:
        yield m


def test_fim_tokens_layout(model):
    t = lambda s: model.tokenize(s, add_special=False, parse_special=False)
    sp = lambda s: model.tokenize(s, add_special=False, parse_special=True)
    want = (sp("<|repo_name|>") + t("myproject\n") + sp("<|file_sep|>") + t("a.py\n") + t("X = 1\n")
            + sp("<|file_sep|>") + t("filename\n") + sp("<|fim_prefix|>") + t(PREFIX) + t("w")
            + sp("<|fim_suffix|>") + t(SUFFIX) + sp("<|fim_middle|>"))
    assert model.fim_tokens(PREFIX, SUFFIX, prompt="w", extra=[{"filename": "a.py", "text": "X = 1\n"}]) == want


@pytest.mark.parametrize("binary", cinder_binaries(), ids=lambda p: p.parent.name)
def test_infill_equals_cinder_run(model, binary):
    r = model.infill(PREFIX, SUFFIX, max_tokens=12, temperature=0)
    out = subprocess.run([str(binary), "run", "-m", qwen(), "-t", "2", "-c", "4096", "--temp", "0", "-n", "12",
                          "--fim-prefix", PREFIX, "--fim-suffix", SUFFIX, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert j["tokens"] == r.tokens and j["text"] == r.text
    assert j["n_prompt_tokens"] == r.n_prompt_tokens == len(model.fim_tokens(PREFIX, SUFFIX))


def test_no_fim_tokens_is_an_error(binary=cinder_binaries()[0]):
    with cinder.Model(STORIES, n_ctx=256, n_threads=1) as m:
        with pytest.raises(cinder.CinderError) as e:
            m.infill("a", "b", max_tokens=2)
        assert e.value.status == "unsupported" and "fill-in-the-middle" in str(e.value)
    out = subprocess.run([str(binary), "run", "-m", STORIES, "--fim-prefix", "a", "--fim-suffix", "b", "-n", "2"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "fill-in-the-middle" in out.stderr
    out = subprocess.run([str(binary), "run", "-m", STORIES, "--fim-prefix", "a", "--chat"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--chat" in out.stderr


@pytest.mark.parametrize("binary", cinder_binaries()[:1], ids=lambda p: p.parent.name)
def test_embed_equals_cinder_embed(model, binary):
    texts = ["def f(x):\n    return x", "hello"]
    v = model.embed(texts)
    assert len(v) == 2 and len(v[0]) == model.info["n_embd"]
    assert abs(sum(x * x for x in v[0]) - 1) < 1e-4
    assert model.embed(texts[1]) == [v[1]]
    assert model.embed(model.tokenize(texts[1])) == [v[1]]
    out = subprocess.run([str(binary), "embed", "-m", qwen(), "-t", "2", *texts], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    cli = [json.loads(line) for line in out.stdout.splitlines()]
    assert all(max(abs(a - b) for a, b in zip(x, y)) < 1e-6 for x, y in zip(cli, v))
    raw = model.embed(texts[1], pooling="mean", normalize=False)[0]
    assert abs(sum(x * x for x in raw) - 1) > 1e-3
    with pytest.raises(cinder.CinderError) as e:
        model.embed("x", pooling="max")
    assert e.value.param == "pooling"
    with pytest.raises(cinder.CinderError) as e:
        model.embed(["x" * 3000], n_batch=16)
    assert e.value.status == "limit"
