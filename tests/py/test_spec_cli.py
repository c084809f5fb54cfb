"""Speculative decoding through the CLI (`cinder run --draft MODEL`, `--lookup N`,
`cinder chat --lookup N`): the text is the one plain decoding makes (truth: the same
command without the flag, greedy and seeded), a speculation summary goes to stderr, and
bad uses are one-line errors with the usage exit code: a draft with another vocabulary
(stories260K's 512 SentencePiece pieces cannot draft for SmolLM2's 49152 BPE tokens), two
drafters at once, speculation with beams, a draft length out of range, a missing draft
file (exit 1). Runs on every cinder binary (the ASan build included)."""
import os
import re
import resource
import signal
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
STORIES = str(TESTDATA / "models" / "stories260K.gguf")


def default_model():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert m.exists(), f"model {m} is missing: run scripts/setup.sh (or set CINDER_MODELS)"
    return str(m)


def run(cinder, *args, stdin=None):
    return subprocess.run([str(cinder), *args], capture_output=True, text=True, cwd=ROOT, input=stdin,
                          timeout=600)


PROMPT = "The cat sat on the mat. The dog sat on the log. The cat sat on the"


@pytest.mark.parametrize("sampling", [["--temp", "0"], ["--temp", "0.9", "--seed", "7"]])
@pytest.mark.parametrize("flag", [["--lookup", "3"], ["--draft", STORIES, "--draft-max", "5"]])
def test_same_text_as_plain(cinder, flag, sampling):
    base = ["run", "-m", STORIES, "-p", PROMPT, "-n", "60", "-t", "1", *sampling]
    plain = run(cinder, *base)
    spec = run(cinder, *base, *flag)
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    m = re.search(r"speculation: (\d+) target passes for (\d+) tokens .* drafted (\d+), accepted (\d+)", spec.stderr)
    assert m, spec.stderr
    passes, made, drafted, accepted = map(int, m.groups())
    assert 0 < passes <= made and accepted <= drafted
    assert "speculation" not in plain.stderr


def test_json_reports_speculation(cinder):
    import json
    r = run(cinder, "run", "-m", STORIES, "-p", PROMPT, "-n", "30", "-t", "1", "--temp", "0", "--json",
            "--lookup", "2", "--draft-max", "4")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    s = j["speculation"]
    assert s["drafter"] == "lookup" and 0 <= s["accepted"] <= s["drafted"]
    assert s["target_passes"] + s["accepted"] >= j["n_generated_tokens"] - 1


def test_default_model_lookup_same_text(cinder):
    base = ["run", "-m", default_model(), "-p", PROMPT, "-n", "40", "-t", "2", "--temp", "0"]
    plain, spec = run(cinder, *base), run(cinder, *base, "--lookup", "2")
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout


def test_chat_lookup_same_replies(cinder):
    turns = "My name is Ada. Please repeat: the cat sat on the mat.\nWhat is my name?\n"
    base = ["chat", "-m", default_model(), "-n", "32", "-t", "1", "--temp", "0"]
    plain, spec = run(cinder, *base, stdin=turns), run(cinder, *base, "--lookup", "3", stdin=turns)
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout


@pytest.mark.parametrize("args,code,needle", [
    (["--draft", STORIES], 2, "vocabulary"),
    (["--draft", STORIES, "--lookup", "2"], 2, "give one"),
    (["--lookup", "2", "--beams", "2"], 2, "does not combine with --beams"),
    (["--lookup", "9"], 2, "lookup n-gram length 9 is out of range"),
    (["--lookup", "2", "--draft-max", "0"], 2, "draft length 0 is out of range"),
    (["--draft", "/nonexistent/draft.gguf"], 1, "/nonexistent/draft.gguf"),
])
def test_bad_uses(cinder, args, code, needle):
    r = run(cinder, "run", "-m", default_model(), "-p", "Hi", "-n", "4", *args)
    assert r.returncode == code, (args, r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], (args, r.stderr)


def test_draft_from(cinder, tmp_path):
    """`cinder draft-from` cuts the first K layers: the file loads as a K-layer model with
    the target's vocabulary, drafts for it, and the text stays the target's."""
    out = tmp_path / "draft.gguf"
    r = run(cinder, "draft-from", default_model(), str(out), "--layers", "20")
    assert r.returncode == 0, r.stderr
    assert "20 of 30 layers" in r.stderr
    info = run(cinder, "inspect", str(out))
    assert info.returncode == 0, info.stderr
    assert re.search(r"llama\.block_count\s+\S+\s+20\b", info.stdout), info.stdout[:2000]
    assert "blk.19.ffn_down.weight" in info.stdout and "blk.20." not in info.stdout
    base = ["run", "-m", default_model(), "-p", PROMPT, "-n", "32", "-t", "1", "--temp", "0"]
    plain, spec = run(cinder, *base), run(cinder, *base, "--draft", str(out))
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    assert "draft-model passes" in spec.stderr


@pytest.mark.parametrize("args,needle", [
    ([], "give MODEL OUT --layers K"),
    (["--layers", "0"], "--layers wants a layer count"),
    (["--layers", "30"], "keeps the whole model"),
    (["--layers", "x"], "--layers wants a layer count"),
])
def test_draft_from_bad_uses(cinder, tmp_path, args, needle):
    r = run(cinder, "draft-from", default_model(), str(tmp_path / "d.gguf"), *args)
    assert r.returncode == 2, (args, r.stderr)
    assert needle in r.stderr.strip().splitlines()[0]
    assert not (tmp_path / "d.gguf").exists()


def test_draft_from_not_a_model(cinder, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    r = run(cinder, "draft-from", str(bad), str(tmp_path / "d.gguf"), "--layers", "2")
    assert r.returncode == 1 and r.stderr.startswith("cinder: draft-from:"), r.stderr


def test_draft_from_replaces_its_output_only_on_success(cinder, tmp_path):
    """The draft is written through a temporary file: a write that fails (a file size
    limit standing in for a full disk) leaves an existing OUT byte for byte and nothing
    beside it; a good one replaces it, with the mode the umask gives."""
    out = tmp_path / "d.gguf"
    out.write_bytes(b"keep me")

    def full_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    args = [str(cinder), "draft-from", STORIES, str(out), "--layers", "2"]
    r = subprocess.run(args, capture_output=True, text=True, preexec_fn=full_disk)
    assert r.returncode == 1 and "cannot write" in r.stderr, r.stderr
    assert out.read_bytes() == b"keep me" and os.listdir(tmp_path) == ["d.gguf"]
    r = subprocess.run(args, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o027))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == b"GGUF" and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["d.gguf"]


def test_bench_spec(cinder):
    """`cinder bench --spec` runs plain and speculative decoding interleaved (it fails if
    their tokens differ) and prints one table row."""
    r = run(cinder, "bench", "--spec", "-m", default_model(), "--lookup", "3", "-n", "24", "-t", "1", "-r", "1")
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if l.startswith("| lookup |")]
    assert len(rows) == 1, r.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    plain, spec, speedup = float(cells[2]), float(cells[3]), float(cells[4].rstrip("x"))
    assert plain > 0 and spec > 0 and abs(speedup - spec / plain) < 0.02
    assert 0 <= float(cells[5].rstrip("%")) <= 100 and float(cells[6]) >= 1.0
    r = run(cinder, "bench", "--spec", "-m", default_model(), "-n", "8")
    assert r.returncode == 2 and "give a drafter" in r.stderr
