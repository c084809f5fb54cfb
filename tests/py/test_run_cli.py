"""`cinder run`, `cinder chat` and `cinder explain -m` from the outside: the --json fields
and their consistency, stop strings, logprobs, beams, bad flags (one-line error, exit 2),
and a two-turn chat on the default model.

Truth used here: stories260K's greedy continuation of "Once upon a time" is
", there was a little girl named Lily. She loved to play outside in the park." (llama.cpp
produces the same tokens: tests/golden/stories260k.json), and arithmetic on the numbers
the JSON reports (timings, probabilities). The default model (SmolLM2-135M-Instruct) is
taken from $CINDER_MODELS or ~/.cache/cinder/models, as scripts/fetch_models.sh puts it; a
missing model is a failure. The binaries are $CINDER_BIN (default build/cinder) and
$CINDER_SAN_BIN when set.
"""
import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
STORIES = str(TESTDATA / "models" / "stories260K.gguf")
GREEDY = ", there was a little girl named Lily. She loved to play outside in the park."


def default_model():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert m.exists(), f"model {m} is missing: run scripts/setup.sh (or set CINDER_MODELS)"
    return m


def run(cinder, *args, stdin=None, timeout=300):
    return subprocess.run([str(cinder), *args], capture_output=True, text=True, cwd=ROOT,
                          input=stdin, timeout=timeout)


def run_json(cinder, *args):
    r = run(cinder, "run", "-m", STORIES, "-t", "1", "--json", *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    return json.loads(r.stdout)


def test_json_fields_greedy(cinder):
    j = run_json(cinder, "-p", "Once upon a time", "-n", "20", "--temp", "0")
    for key, typ in (("text", str), ("finish_reason", str), ("n_prompt_tokens", int),
                     ("n_generated_tokens", int), ("ttft_ms", float), ("itl_mean_ms", float),
                     ("itl_p50_ms", float), ("itl_p90_ms", float), ("itl_p99_ms", float),
                     ("prefill_tok_s", float), ("decode_tok_s", float), ("queue_ms", float),
                     ("prefill_ms", float), ("decode_ms", float), ("total_ms", float),
                     ("tokens", list), ("seed", int)):
        assert isinstance(j[key], typ), (key, j[key])
    assert GREEDY.startswith(j["text"]) and len(j["text"]) > 40, j["text"]
    assert j["finish_reason"] == "length"
    assert j["n_prompt_tokens"] == 5  # BOS + 4
    assert j["n_generated_tokens"] == 20 == len(j["tokens"])
    assert "logprobs" not in j
    assert 0 < j["prefill_ms"] <= j["ttft_ms"] <= j["total_ms"]
    assert math.isclose(j["prefill_tok_s"], 5 * 1000 / j["prefill_ms"], rel_tol=1e-6)
    assert math.isclose(j["decode_tok_s"], 19 * 1000 / j["decode_ms"], rel_tol=1e-6)
    assert math.isclose(j["itl_mean_ms"], j["decode_ms"] / 19, rel_tol=1e-6)
    assert 0 < j["itl_p50_ms"] <= j["itl_p90_ms"] <= j["itl_p99_ms"]


def test_text_streams_to_stdout_timings_to_stderr(cinder):
    r = run(cinder, "run", "-m", STORIES, "-t", "1", "-p", "Once upon a time", "-n", "20", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert GREEDY.startswith(r.stdout.rstrip("\n"))
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2, r.stderr
    assert re.search(r"prompt 5 tokens .*prefill [\d.]+ tok/s .*time to first token [\d.]+ ms", lines[0])
    assert re.search(r"generated 20 tokens, decode [\d.]+ tok/s, inter-token latency mean [\d.]+ ms, "
                     r"p90 [\d.]+ ms; finish length", lines[1])


@pytest.mark.parametrize("stop,text", [("girl", ", there was a little "),
                                       ("Lily. She", ", there was a little girl named ")])
def test_stop_string(cinder, stop, text):
    j = run_json(cinder, "-p", "Once upon a time", "-n", "40", "--temp", "0", "--stop", "never here",
                 "--stop", stop)
    assert j["text"] == text
    assert j["finish_reason"] == "stop"
    assert j["stop_index"] == 1


def test_logprobs_raw_and_after_chain(cinder):
    j = run_json(cinder, "-p", "Once upon a time", "-n", "6", "--temp", "0", "--logprobs", "3")
    assert j["logprobs_distribution"] == "raw"
    lp = j["logprobs"]
    assert [e["id"] for e in lp] == j["tokens"]
    assert "".join(e["token"] for e in lp) == j["text"]
    for e in lp:
        top = e["top_logprobs"]
        assert len(top) == 3
        assert top[0]["id"] == e["id"] and top[0]["logprob"] == e["logprob"]  # greedy: the argmax
        assert top[0]["logprob"] >= top[1]["logprob"] >= top[2]["logprob"]
        assert e["logprob"] <= 0 and sum(math.exp(t["logprob"]) for t in top) <= 1 + 1e-6
        assert bytes(e["bytes"]).decode() == e["token"]
    # after the chain, greedy keeps one token: probability 1
    j2 = run_json(cinder, "-p", "Once upon a time", "-n", "6", "--temp", "0", "--logprobs", "3",
                  "--logprobs-after-chain")
    assert j2["logprobs_distribution"] == "after_chain"
    assert j2["tokens"] == j["tokens"]
    for e in j2["logprobs"]:
        assert e["logprob"] == 0.0
        assert [t["id"] for t in e["top_logprobs"]] == [e["id"]]
    # top-k 2 after temperature 2: two tokens whose probabilities sum to 1
    j3 = run_json(cinder, "-p", "Once upon a time", "-n", "6", "--temp", "2", "--top-k", "2",
                  "--top-p", "1", "--min-p", "0", "--seed", "3", "--logprobs", "5",
                  "--logprobs-after-chain")
    for e in j3["logprobs"]:
        top = e["top_logprobs"]
        assert len(top) == 2
        assert math.isclose(sum(math.exp(t["logprob"]) for t in top), 1.0, rel_tol=1e-5)
        assert e["id"] in [t["id"] for t in top]


def test_same_seed_same_tokens(cinder):
    args = ["-p", "Once upon a time", "-n", "30", "--temp", "1", "--top-k", "0", "--top-p", "1",
            "--min-p", "0", "--ignore-eos"]
    a = run_json(cinder, *args, "--seed", "42")
    b = run_json(cinder, *args, "--seed", "42")
    c = run_json(cinder, *args, "--seed", "43")
    assert a["tokens"] == b["tokens"] and a["text"] == b["text"]
    assert a["seed"] == 42
    assert c["tokens"] != a["tokens"]


def test_ignore_eos_and_logit_bias(cinder):
    j = run_json(cinder, "-p", "Once upon a time", "-n", "12", "--temp", "0", "--logit-bias", "2=30")
    assert j["finish_reason"] == "stop" and j["n_generated_tokens"] == 0 and j["text"] == ""
    j = run_json(cinder, "-p", "Once upon a time", "-n", "12", "--temp", "0", "--logit-bias", "2=30",
                 "--ignore-eos")
    assert j["finish_reason"] == "length" and j["n_generated_tokens"] == 12
    assert 2 not in j["tokens"]
    # -inf bans: greedy's first token ',' (432) never appears
    j = run_json(cinder, "-p", "Once upon a time", "-n", "12", "--temp", "0", "--logit-bias", "432=-inf")
    assert 432 not in j["tokens"] and "," not in j["text"]


def test_context_full_and_too_long(cinder):
    j = run_json(cinder, "-p", "Once upon a time", "-n", "100", "--temp", "0", "--ctx", "16",
                 "--ignore-eos")
    assert j["finish_reason"] == "length"
    assert j["n_prompt_tokens"] + j["n_generated_tokens"] == 16
    r = run(cinder, "run", "-m", STORIES, "-p", "Once upon a time, there was a girl", "--ctx", "8")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "context holds 8" in r.stderr, r.stderr


def test_beams(cinder):
    j = run_json(cinder, "-p", "Once upon a time", "-n", "12", "--beams", "3", "--length-penalty", "0",
                 "--ignore-eos", "--logprobs", "0")
    assert j["n_generated_tokens"] == 12 and j["finish_reason"] == "length"
    assert j["beam"]["n_beams"] == 3
    # length penalty 0: the score is the sum of the tokens' raw log-probabilities
    s = sum(e["logprob"] for e in j["logprobs"])
    assert math.isclose(j["beam"]["score"], s, abs_tol=1e-3)
    assert math.isclose(j["beam"]["sum_logprob"], s, abs_tol=1e-3)
    g = run_json(cinder, "-p", "Once upon a time", "-n", "12", "--temp", "0", "--ignore-eos",
                 "--logprobs", "0")
    assert s >= sum(e["logprob"] for e in g["logprobs"]) - 1e-4


@pytest.mark.parametrize("args,needle", [
    (["--top-p", "1.7"], "top_p = 1.7 is out of range"),
    (["--temp", "-1"], "temperature = -1"),
    (["--top-k", "-3"], "top_k = -3"),
    (["--min-p", "nan"], "min_p"),
    (["-n", "0"], "max_tokens = 0 is out of range"),
    (["--bogus"], "unknown option '--bogus'"),
    (["--top-p"], "--top-p needs a value"),
    (["--top-p", "high"], "--top-p wants a number"),
    (["--logit-bias", "5"], "--logit-bias wants ID=BIAS"),
    (["--logit-bias", "99999=1"], "logit_bias"),
    (["--seed", "-4"], "--seed"),
    (["--samplers", "top_k;bogus"], "--samplers"),
    (["--beams", "0"], "n_beams = 0"),
    (["--logprobs", "21"], "n_logprobs = 21"),
])
def test_bad_values(cinder, args, needle):
    r = run(cinder, "run", "-m", STORIES, "-p", "Once upon a time", *args)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], (args, r.stderr)


def test_explain_model_mode(cinder):
    r = run(cinder, "explain", "-m", STORIES, "-p", "Once upon a time", "-n", "3", "--temp", "0")
    assert r.returncode == 0, r.stderr
    steps = r.stdout.split("\nstep ")[1:]
    assert len(steps) == 3
    for s in steps:
        greedy = re.search(r"^greedy +(\S+)$", s, re.M).group(1)
        draw = re.search(r"^draw +(\S+) 1\.000", s, re.M).group(1)
        assert greedy == draw
    assert re.search(r"^text +Once upon a time, there was$", r.stdout, re.M), r.stdout
    assert "finish length" in r.stdout
    r = run(cinder, "explain", "-m", STORIES, "-p", "x", "--probs", "a=1")
    assert r.returncode == 2 and "model mode" in r.stderr


def test_run_chat_template(cinder):
    m = str(default_model())
    j = json.loads(run(cinder, "run", "-m", m, "-t", "2", "--chat", "--json", "-p", "Hi", "-n", "4",
                       "--temp", "0").stdout)
    # SmolLM2's template adds its default system turn: far more than the 1-2 tokens of "Hi"
    assert j["n_prompt_tokens"] > 20
    assert j["n_generated_tokens"] >= 1


def test_chat_two_turns(cinder):
    m = str(default_model())
    r = run(cinder, "chat", "-m", m, "-t", "2", "-n", "16", "--temp", "0",
            stdin="Hello! Who are you?\nWhat is the capital of France?\n", timeout=600)
    assert r.returncode == 0, r.stderr
    turns = re.findall(r"turn (\d+): prompt (\d+) tokens \((\d+) reused\).* generated (\d+) tokens", r.stderr)
    assert [t[0] for t in turns] == ["1", "2"], r.stderr
    (_, p1, reused1, g1), (_, p2, reused2, g2) = [tuple(map(int, t)) for t in turns]
    assert g1 > 0 and g2 > 0
    assert reused1 == 0
    # the second turn prefills only what follows the cached first exchange
    assert reused2 > p1 and p2 > reused2
    replies = [line for line in r.stdout.split("\n") if line.strip()]
    assert len(replies) >= 2, r.stdout


def test_chat_bad_template_and_flags(cinder):
    m = str(default_model())
    r = run(cinder, "chat", "-m", m, "--chat-template", "bogus", stdin="")
    assert r.returncode == 2 and "chatml" in r.stderr, r.stderr
    r = run(cinder, "chat", "-m", m, "--json", stdin="")
    assert r.returncode == 2 and "unsupported" in r.stderr
    # stories260K has no chat template: a clear error that names the way out
    r = run(cinder, "chat", "-m", STORIES, stdin="hi\n")
    assert r.returncode == 1 and "--chat-template" in r.stderr, r.stderr
    # EOF at once: no turns, exit 0
    r = run(cinder, "chat", "-m", STORIES, "--chat-template", "chatml", stdin="")
    assert r.returncode == 0 and r.stdout == "", r.stderr
