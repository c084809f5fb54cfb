"""The Python package against independent truth: llama.cpp's greedy tokens for stories260K
(tests/golden/stories260k.json), the sampler chain's worked example, and the package's own
contracts (stream = generate, seeds reproduce, a broken-off stream or a Ctrl-C cancels
cleanly and the model keeps working, the GIL is free while C generates, errors carry
cinder's message)."""
import _thread
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import cinder

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
STORIES = str(TESTDATA / "models" / "stories260K.gguf")
GOLDEN = json.loads((ROOT / "tests" / "golden" / "stories260k.json").read_text())["cases"][0]


@pytest.fixture(scope="module")
def stories():
    with cinder.Model(STORIES, n_ctx=256, n_threads=1) as m:
        yield m


@pytest.fixture(scope="module")
def smol():
    with cinder.Model(n_ctx=2048) as m:  # the default model
        yield m


def test_worked_example():
    out = str(cinder.explain({"blue": 0.5, "gray": 0.25, "clear": 0.15, "dark": 0.10}, top_p=0.7))
    assert out.startswith("Greedy: blue\nTop-p: [('blue', 0.667), ('gray', 0.333)]\n"), out
    e = cinder.explain([("a", 2.0), ("b", 1.0), ("c", 0.0)], logits=True, top_k=2, seed=3)
    assert e.greedy == "a" and [t for t, _ in e.stages[0][1]] == ["a", "b"]
    assert abs(sum(p for _, p in e.stages[0][1]) - 1) < 1e-5 and e.drawn in ("a", "b") and e.seed == 3


def test_tokens_match_llama_cpp(stories):
    assert stories.tokenize(GOLDEN["prompt"]) == GOLDEN["tokens"]
    assert stories.detokenize(GOLDEN["tokens"][1:]) == GOLDEN["prompt"]
    assert stories.info["arch"] == "llama" and stories.info["n_vocab"] == 512


def test_greedy_matches_llama_cpp(stories):
    r = stories.generate(GOLDEN["prompt"], max_tokens=64, temperature=0, logprobs=3)
    assert r.tokens == GOLDEN["greedy"][:64]
    assert r.finish_reason == "length" and r.n_prompt_tokens == 5
    assert r.text == stories.detokenize(r.tokens) or r.text.startswith(",")
    assert len(r.logprobs) == 64 and r.logprobs[0].top[0][0] == r.tokens[0] and len(r.logprobs[0].top) == 3
    assert r.timings["n_generated_tokens"] == 64 and r.timings["ttft_ms"] > 0 and r.timings["decode_tok_s"] > 0


def test_stream_equals_generate_and_seeds_reproduce(stories):
    kw = dict(max_tokens=40, temperature=0.9, top_p=0.9, seed=7)
    a = stories.generate("Once upon a time", **kw)
    pieces = list(stories.stream("Once upon a time", **kw))
    assert len(pieces) > 1 and "".join(pieces) == a.text
    assert stories.generate("Once upon a time", **kw).tokens == a.tokens
    assert stories.last_completion.finish_reason == "length"


def test_stop_strings_and_options(stories):
    full = stories.generate("Once upon a time", max_tokens=64, temperature=0).text
    r = stories.generate("Once upon a time", max_tokens=64, temperature=0, stop=["Lily"])
    assert r.finish_reason == "stop" and r.stop_index == 0 and full.startswith(r.text) and "Lily" not in r.text
    banned = stories.generate("Once upon a time", max_tokens=8, temperature=0,
                              logit_bias={GOLDEN["greedy"][0]: -100})
    assert banned.tokens[0] != GOLDEN["greedy"][0]
    beam = stories.generate("Once upon a time", max_tokens=12, n_beams=3)
    assert beam.tokens and beam.finish_reason in ("stop", "length")


def test_stream_broken_off_half_way_cancels(smol):
    got = []
    for piece in smol.stream("Once upon a time", max_tokens=400, temperature=0, ignore_eos=True):
        got.append(piece)
        if len(got) == 5:
            break
    c = smol.last_completion
    assert c.finish_reason == "cancelled" and 5 <= len(c.tokens) < 400, (c.finish_reason, len(c.tokens))
    # the model keeps working, and gives what a fresh request gives
    a = smol.generate("Once upon a time", max_tokens=8, temperature=0)
    assert a.finish_reason == "length" and a.text.startswith("".join(got)[:5])


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler for the test's duration. A suite started in the
    background (`nohup make test &`, a script) inherits SIGINT ignored, and then
    _thread.interrupt_main() does nothing: this test needs Ctrl-C to raise."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_keyboard_interrupt_cancels_cleanly(smol, sigint_raises):
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    t0 = time.time()
    try:
        with pytest.raises(KeyboardInterrupt):
            smol.generate("Once upon a time", max_tokens=4000, temperature=0, ignore_eos=True)
    finally:
        timer.cancel()
    assert time.time() - t0 < 30
    assert smol.generate("Hello", max_tokens=4, temperature=0).finish_reason == "length"


def test_gil_is_released_while_generating(smol):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", smol.generate("Once upon a time", max_tokens=300,
                                                                             temperature=0, ignore_eos=True)))
    t.start()
    while not smol._lock.locked():  # until the request is inside C
        time.sleep(0.001)
    n = 0
    while t.is_alive() and n < 200000:
        n += 1  # pure Python: runs only if the generating thread does not hold the GIL
    alive = t.is_alive()
    t.join()
    assert n == 200000 or not alive
    assert n > 1000, "this thread barely ran while C was generating"
    assert box["r"].finish_reason == "length"


def test_chat_and_explain_on_a_real_model(smol):
    assert smol.chat_template == "jinja"  # SmolLM2's own template, run by the interpreter
    r = smol.chat([{"role": "user", "content": "Name three prime numbers."}], max_tokens=64, temperature=0)
    assert r.text and r.finish_reason in ("stop", "length")
    e = smol.explain("The sky is", top_k=5, seed=1)
    assert e.stages[0][0] == "top_k" and len(e.stages[0][1]) == 5
    assert e.greedy == e.input[0][0] == e.stages[0][1][0][0]
    assert abs(sum(p for _, p in e.stages[0][1]) - 1) < 1e-4
    lg = smol.logits("The sky is")
    assert smol._piece(max(range(len(lg)), key=lg.__getitem__)) == e.greedy


def test_errors_carry_cinders_message(stories, tmp_path):
    with pytest.raises(cinder.CinderError) as e:
        cinder.Model(str(tmp_path / "missing.gguf"))
    assert e.value.status == "io"
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(Path(STORIES).read_bytes()[:3000])  # cut inside its metadata
    with pytest.raises(cinder.CinderError) as e:
        cinder.Model(str(bad))
    assert e.value.status == "corrupt" and str(e.value)
    with pytest.raises(cinder.CinderError) as e:
        stories.generate("x", max_tokens=0)
    assert e.value.status == "invalid_arg" and "max_tokens" in str(e.value)
    with pytest.raises(cinder.CinderError) as e:
        stories.generate("x", top_p=7)
    assert "top_p" in str(e.value)
    with pytest.raises(cinder.CinderError) as e:
        stories.generate([1] * 300)
    assert e.value.status == "limit"
    with pytest.raises(cinder.CinderError) as e:
        stories.chat([{"role": "user", "content": "hi"}])
    assert "chat template" in str(e.value)
    with pytest.raises(cinder.CinderError):
        stories.detokenize([100000])
    assert stories.generate("Once", max_tokens=2, temperature=0).finish_reason == "length"
