"""Fill-in-the-middle through `cinder serve`: llama-server's POST /infill and OpenAI's
`suffix` on /v1/completions (the official `openai` client), against a live server with
Qwen2.5-Coder-0.5B.

Truth used here: the prompt layout written out by hand from llama-server's
format_prompt_infill (repo line, file separators, PRE prefix prompt SUF suffix MID, each
piece tokenized on its own) and sent as token ids to /v1/completions must give the same
greedy text as /infill; a streamed /infill joins to the whole one; a repeated request
finds its prompt in the prefix cache. Bad inputs get 400s naming the field, and a model
without FIM tokens a 400 that says so. (Greedy equality with llama-server itself on real
C files: bench/infill, figures in BENCHMARKS.md.)
"""
import json
import os
from pathlib import Path

import openai
import pytest
from test_serve import STORIES, Server, binaries

M = "qwen"
PREFIX = "#include <stdio.h>\n\nstatic int square(int x) {\n    return "
SUFFIX = ";\n}\n\nint main(void) {\n    printf(\"%d\\n\", square(3));\n    return 0;\n}\n"


def qwen():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert m.exists(), f"model {m} is missing: run scripts/fetch_models.sh"
    return str(m)


@pytest.fixture(scope="module", params=binaries(), ids=lambda p: p.parent.name)
def srv(request):
    s = Server(request.param, qwen(), "--parallel", "2", "--ctx", "4096", "--alias", M)
    yield s
    s.stop()


def toks(srv, text, special=False):
    st, body, _ = srv.post("/tokenize", {"content": text, "add_special": False, "parse_special": special})
    assert st == 200, body
    return body["tokens"]


def sse(raw):
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


def test_infill_layout_is_llama_servers(srv):
    """/infill's prompt is exactly the hand-made llama-server layout (same greedy text,
    same prompt length)."""
    extra = [{"filename": "util.h", "text": "int cube(int x);\n"}, {"text": "#define N 3\n"}]
    st, r, _ = srv.post("/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": extra,
                                    "prompt": "x", "n_predict": 12, "temperature": 0})
    assert st == 200, r
    sp = lambda s: toks(srv, s, special=True)
    ids = (sp("<|repo_name|>") + toks(srv, "myproject\n") + sp("<|file_sep|>") + toks(srv, "util.h\n")
           + toks(srv, extra[0]["text"]) + sp("<|file_sep|>") + toks(srv, "tmp\n") + toks(srv, extra[1]["text"])
           + sp("<|file_sep|>") + toks(srv, "filename\n") + sp("<|fim_prefix|>") + toks(srv, PREFIX)
           + toks(srv, "x") + sp("<|fim_suffix|>") + toks(srv, SUFFIX) + sp("<|fim_middle|>"))
    assert r["tokens_evaluated"] == len(ids)
    want = srv.client().completions.create(model=M, prompt=ids, max_tokens=12, temperature=0)
    assert r["content"] == want.choices[0].text
    assert r["stop"] is True and r["model"] == M and r["tokens_predicted"] >= 1
    assert r["stop_type"] in ("eos", "limit") and r["stopping_word"] == ""
    for k in ("cache_n", "prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
              "predicted_per_second", "ttft_ms"):
        assert k in r["timings"], k


def test_infill_stream_joins_to_the_whole(srv):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16, "temperature": 0}
    st, whole, _ = srv.post("/infill", body)
    assert st == 200, whole
    st, raw, hdr = srv.request("POST", "/infill", {**body, "stream": True})
    assert st == 200 and hdr["Content-Type"] == "text/event-stream"
    events = sse(raw)
    assert b"[DONE]" not in raw  # llama-server's non-OpenAI stream has none
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["stop_type"] == whole["stop_type"] and "timings" in events[-1]


def test_infill_stop_word(srv):
    st, r, _ = srv.post("/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 32,
                                    "temperature": 0, "stop": [";"]})
    assert st == 200, r
    if r["stop_type"] == "word":
        assert r["stopping_word"] == ";" and ";" not in r["content"]


def test_repeated_infill_hits_the_prefix_cache(srv):
    body = {"input_prefix": PREFIX * 8, "input_suffix": SUFFIX, "n_predict": 4, "temperature": 0}
    st, first, _ = srv.post("/infill", body)
    st2, second, _ = srv.post("/infill", body)
    assert st == st2 == 200
    assert second["content"] == first["content"]
    assert second["timings"]["cache_n"] > 0
    assert second["timings"]["cache_n"] + second["timings"]["prompt_n"] == second["tokens_evaluated"]


def test_completions_suffix_with_the_openai_client(srv):
    c = srv.client()
    r = c.completions.create(model=M, prompt=PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0)
    ids = toks(srv, "<|fim_prefix|>", True) + toks(srv, PREFIX) + toks(srv, "<|fim_suffix|>", True) \
        + toks(srv, SUFFIX) + toks(srv, "<|fim_middle|>", True)
    want = c.completions.create(model=M, prompt=ids, max_tokens=12, temperature=0)
    assert r.choices[0].text == want.choices[0].text
    assert r.usage.prompt_tokens == len(ids)
    # streamed, and several prompts each with the suffix
    pieces = [ch.choices[0].text for ch in c.completions.create(model=M, prompt=PREFIX, suffix=SUFFIX,
                                                                max_tokens=12, temperature=0, stream=True)]
    assert "".join(pieces) == r.choices[0].text
    two = c.completions.create(model=M, prompt=[PREFIX, PREFIX], suffix=SUFFIX, max_tokens=12, temperature=0)
    assert [ch.text for ch in two.choices] == [r.choices[0].text] * 2
    # an empty suffix is no suffix
    plain = c.completions.create(model=M, prompt=PREFIX, suffix="", max_tokens=4, temperature=0)
    assert plain.usage.prompt_tokens == len(toks(srv, PREFIX))


@pytest.mark.parametrize("body,param", [
    ({"input_suffix": "x"}, "input_prefix"),
    ({"input_prefix": "x"}, "input_suffix"),
    ({"input_prefix": 1, "input_suffix": "x"}, "input_prefix"),
    ({"input_prefix": "x", "input_suffix": ["x"]}, "input_suffix"),
    ({"input_prefix": "x", "input_suffix": "x", "prompt": 3}, "prompt"),
    ({"input_prefix": "x", "input_suffix": "x", "input_extra": {"text": "a"}}, "input_extra"),
    ({"input_prefix": "x", "input_suffix": "x", "input_extra": [{"text": 1}]}, "input_extra"),
    ({"input_prefix": "x", "input_suffix": "x", "input_extra": [{"text": "a", "filename": 2}]}, "input_extra"),
    ({"input_prefix": "x", "input_suffix": "x", "input_extra": [7]}, "input_extra"),
    ({"input_prefix": "x", "input_suffix": "x", "n_predict": "5"}, "n_predict"),
    ({"input_prefix": "x", "input_suffix": "x", "n_predict": 0}, "n_predict"),
    ({"input_prefix": "x", "input_suffix": "x", "repeat_penalty": -1}, "repeat_penalty"),
    ({"input_prefix": "x", "input_suffix": "x", "temperature": "hot"}, "temperature"),
    ({"input_prefix": "x", "input_suffix": "x", "bogus": 1}, "bogus"),
    ({"input_prefix": "x", "input_suffix": "x", "model": "other"}, "model"),
])
def test_infill_bad_inputs(srv, body, param):
    st, r, _ = srv.post("/infill", body)
    assert st in (400, 404), (st, r)
    assert r["error"]["param"] == param, r


@pytest.mark.parametrize("body,param,says", [
    ({"n_predict": 0}, "n_predict", "'n_predict' = 0 is out of range"),
    ({"max_tokens": 0}, "max_tokens", "'max_tokens' = 0 is out of range"),
    ({"max_tokens": 0, "n_predict": 5}, "max_tokens", "'max_tokens' = 0 is out of range"),
    ({"repeat_penalty": -1}, "repeat_penalty", "repeat_penalty = -1 is out of range"),
    ({"repetition_penalty": -1, "repeat_penalty": 1}, "repetition_penalty", "repetition_penalty = -1 is out of range"),
    ({"stop": 3}, "stop", "'stop' must be"),
])
def test_infill_errors_name_the_field_the_request_used(srv, body, param, says):
    """llama-server's names where the request used them (n_predict, repeat_penalty), and
    OpenAI's where it used those instead (they win when both are given)."""
    st, r, _ = srv.post("/infill", {"input_prefix": "x", "input_suffix": "y", **body})
    assert st == 400, (st, r)
    assert r["error"]["param"] == param and says in r["error"]["message"], r
    assert "/v1/completions" not in r["error"]["message"], r


def test_infill_raw_bad_bodies_and_method(srv):
    for raw in (b"", b"{", b"[]", b"null", b'{"input_prefix": "\\u0000", "input_suffix": ""}'):
        st, body, _ = srv.request("POST", "/infill", raw)
        assert st == 400, (raw, body)
    st, _, hdr = srv.request("GET", "/infill")
    assert st == 405 and "POST" in hdr["Allow"]
    # editors' llama-server tuning fields are accepted
    st, r, _ = srv.post("/infill", {"input_prefix": "int x = ", "input_suffix": ";\n", "n_predict": 2,
                                    "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 500,
                                    "n_indent": 4, "samplers": ["top_k"], "temperature": 0})
    assert st == 200, r


def test_suffix_bad_inputs(srv):
    c = srv.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=M, prompt=[1, 2, 3], suffix="x", max_tokens=2)
    assert e.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=M, prompt="a", suffix="x", echo=True, max_tokens=2)
    assert e.value.body["param"] == "suffix"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=M, prompt="a", max_tokens=2, extra_body={"suffix": 5})
    assert e.value.body["param"] == "suffix"


def test_model_without_fim_tokens_is_a_clear_400():
    s = Server(binaries()[0], STORIES, "--ctx", "256")
    try:
        st, r, _ = s.post("/infill", {"input_prefix": "a", "input_suffix": "b"})
        assert st == 400 and r["error"]["code"] == "fim_not_supported", r
        assert "fill in the middle" in r["error"]["message"]
        with pytest.raises(openai.BadRequestError) as e:
            s.client().completions.create(model="stories260K", prompt="a", suffix="b", max_tokens=2)
        assert e.value.body["param"] == "suffix" and e.value.body["code"] == "fim_not_supported"
        assert s.post("/health", {})[0] == 405  # and it still serves
    finally:
        s.stop()
