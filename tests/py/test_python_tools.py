"""Tool calls from the Python package (python/cinder over build/libcinder.so): chat(messages,
tools=[...]) on Qwen2.5-Coder 0.5B Instruct. Truth: OpenAI's chat shapes for tools and
calls (the package takes and returns them), Python's `jsonschema` for every call's
arguments against its tool's parameters (the grammar promises it), and the same
conversation through `cinder serve` giving the same reply (one library renders and
constrains for both)."""
import json
import os
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("CINDER_LIB", str(ROOT / "build" / "libcinder.so"))
sys.path.insert(0, str(ROOT / "python"))
import cinder  # noqa: E402
from test_serve import Server  # noqa: E402


def qwen():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not m.exists():
        pytest.skip(f"model {m} is missing: run scripts/fetch_models.sh")
    return str(m)


@pytest.fixture(scope="module")
def model():
    with cinder.Model(qwen(), n_ctx=2048, n_threads=2) as m:
        yield m


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                   "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "What is the weather like in Rome?"}]


def valid_calls(calls):
    assert calls
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_")
        assert c["function"]["name"] == "get_weather"
        jsonschema.validate(json.loads(c["function"]["arguments"]), TOOLS[0]["function"]["parameters"])
    return calls


def test_chat_with_tools_calls_and_round_trips(model):
    r = model.chat(ASK, tools=TOOLS, temperature=0, max_tokens=80)
    calls = valid_calls(r.tool_calls)
    assert r.content is None and r.finish_reason == "stop"
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": calls},
                     {"role": "tool", "tool_call_id": calls[0]["id"], "content": "18C and sunny"}]
    r2 = model.chat(history, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=40)
    assert r2.tool_calls is None and r2.content.strip()


def test_required_and_none(model):
    r = model.chat([{"role": "user", "content": "Hi!"}], tools=TOOLS, tool_choice="required", temperature=0,
                   max_tokens=60)
    valid_calls(r.tool_calls)
    r = model.chat(ASK, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=20)
    assert r.tool_calls is None


def test_same_reply_as_the_server(model):
    r = model.chat(ASK, tools=TOOLS, temperature=0, max_tokens=80)
    s = Server(ROOT / "build" / "cinder", qwen(), "--parallel", "1", "--ctx", "2048", "--alias", "qwen")
    try:
        st, body, _ = s.post("/v1/chat/completions", {"model": "qwen", "messages": ASK, "tools": TOOLS,
                                                       "temperature": 0, "max_tokens": 80})
    finally:
        s.stop()
    assert st == 200, body
    got = [(c["function"]["name"], c["function"]["arguments"]) for c in body["choices"][0]["message"]["tool_calls"]]
    assert got == [(c["function"]["name"], c["function"]["arguments"]) for c in r.tool_calls]


def test_errors_name_the_argument(model):
    with pytest.raises(cinder.CinderError) as e:
        model.chat(ASK, tools=[{"type": "function", "function": {"name": "a b"}}], max_tokens=4)
    assert e.value.param and "tools" in e.value.param
    with pytest.raises(cinder.CinderError) as e:
        model.chat(ASK + [{"role": "tool", "tool_call_id": "nope", "content": "x"}], tools=TOOLS, max_tokens=4)
    assert e.value.param == "messages[1].tool_call_id"
    with pytest.raises(cinder.CinderError) as e:
        model.chat(ASK, tools=TOOLS, tool_choice="sometimes", max_tokens=4)
    assert e.value.param == "tool_choice"
