"""`cinder tokenize` against llama.cpp's tokenizer test vectors.

Independent truth: the shared testdata/tokenizer files (vocab-only GGUFs from
llama.cpp's models/ folder, with .inp texts and .out ids produced by the Hugging Face
tokenizers; see that folder's README). The CLI (path in $CINDER_BIN, default
build/cinder; also $CINDER_SAN_BIN when set) runs with --ids --no-bos --no-special,
the setting the .out files were made with, and must print exactly those ids. Also the
default per-token output, the BOS/special switches, and the error exits (2 usage,
1 runtime, one `cinder: ...` line on stderr).
"""
import os
import subprocess
from pathlib import Path

import gguf
import pytest

from conftest import cinder_binaries

ROOT = Path(__file__).resolve().parents[2]
SEP = "\n__ggml_vocab_test__\n"


def shared_testdata() -> Path:
    d = os.environ.get("CINDER_TESTDATA")
    return Path(d) if d else ROOT.parent / "shared" / "testdata"


BINS = cinder_binaries()
VOCAB = shared_testdata() / "tokenizer"


def cases(name):
    """(text, ids) pairs, read as the data README says."""
    inp = (VOCAB / f"ggml-vocab-{name}.gguf.inp").read_bytes().decode("utf-8")
    texts = inp.split(SEP)
    assert texts[-1] == ""
    texts = texts[:-1]
    lines = (VOCAB / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")
    ids = [[int(x) for x in line.split()] for line in lines[: len(texts)]]
    assert len(texts) == len(ids) == 46
    return list(zip(texts, ids))


def run(binary, *args):
    assert binary.exists(), f"{binary} is not built"
    return subprocess.run([str(binary), "tokenize", *args], capture_output=True, timeout=60)


# A few cases per vocabulary: plain words, umlauts, empty text, whitespace runs, emoji
# sequences, mixed scripts and digits, and the long mixed case.
PICK = [0, 1, 2, 5, 9, 13, 18, 22, 28, 32, 42, 45]


@pytest.mark.parametrize("binary", BINS, ids=lambda b: b.name)
@pytest.mark.parametrize("vocab", ["gpt-2", "llama-spm", "phi-3", "deepseek-llm", "mpt", "starcoder"])
def test_ids_match_vectors(binary, vocab):
    model = VOCAB / f"ggml-vocab-{vocab}.gguf"
    all_cases = cases(vocab)
    for i in PICK:
        text, want = all_cases[i]
        r = run(binary, "-m", str(model), "--ids", "--no-bos", "--no-special", "--", text)
        assert r.returncode == 0, r.stderr.decode()
        out = r.stdout.decode()
        assert out.endswith("\n") and out.count("\n") == 1, f"case {i}: not one line: {out!r}"
        got = [int(x) for x in out.split()]
        assert got == want, f"{vocab} case {i} {text!r}: got {got}, want {want}"


@pytest.mark.parametrize("binary", BINS, ids=lambda b: b.name)
def test_default_output_bos_and_special(binary):
    model = str(VOCAB / "ggml-vocab-llama-spm.gguf")
    # default: BOS added, special text parsed, one `id<TAB>'piece'` line per token
    r = run(binary, "-m", model, "Hello world</s>")
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert lines == ["1\t'<s>'", "15043\t' Hello'", "3186\t' world'", "2\t'</s>'"]
    # --no-special: "</s>" is plain text, so no id 2
    r = run(binary, "-m", model, "--ids", "--no-bos", "--no-special", "Hello world</s>")
    ids = [int(x) for x in r.stdout.split()]
    assert ids[:2] == [15043, 3186] and 2 not in ids and 1 not in ids
    # escaping: quote, backslash, newline, a lone byte of a split character
    r = run(binary, "-m", model, "--no-bos", "a'\\\n\U0001F999")
    assert r.returncode == 0
    out = r.stdout.decode()
    assert "\\'" in out and "\\\\" in out and "'\\n'" in out and "'\\xf0'" in out
    assert "\n" not in out.replace("'\n", "")  # no raw newline inside a piece


@pytest.mark.parametrize("binary", BINS, ids=lambda b: b.name)
def test_errors(binary, tmp_path):
    model = str(VOCAB / "ggml-vocab-gpt-2.gguf")

    def one_line_error(r, code):
        assert r.returncode == code, (r.returncode, r.stderr)
        assert r.stdout == b""
        err = r.stderr.decode()
        assert err.startswith("cinder: ") and err.count("\n") == 1, err

    one_line_error(run(binary, "hello"), 2)                          # no -m
    one_line_error(run(binary, "-m", model), 2)                      # no text
    one_line_error(run(binary, "-m", model, "--frobnicate", "x"), 2)  # unknown option
    one_line_error(run(binary, "-m"), 2)                             # -m without a file
    one_line_error(run(binary, "-m", model, "a", "b"), 2)            # two texts
    one_line_error(run(binary, "-m", str(tmp_path / "missing.gguf"), "x"), 1)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    one_line_error(run(binary, "-m", str(junk), "x"), 1)
    # a valid GGUF without tokenizer metadata
    bare = tmp_path / "bare.gguf"
    w = gguf.GGUFWriter(str(bare), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run(binary, "-m", str(bare), "x")
    one_line_error(r, 1)
    assert b"tokenizer" in r.stderr
