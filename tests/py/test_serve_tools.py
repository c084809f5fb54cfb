"""Tool calls through `cinder serve`: the official `openai` client against a live server on
Qwen2.5-Coder 0.5B Instruct. Truth: OpenAI's API reference for the shapes (tool_calls with
ids, type, function name and JSON-text arguments; finish_reason "tool_calls"; streamed
deltas with index, id and name first, then argument fragments), and Python's `jsonschema`
for every call's arguments against its tool's parameters (the grammar promises that, so
it is checked whenever a call is made). Refused requests are checked with raw HTTP: 400,
OpenAI's error shape, the field named in `param`, and the server keeps serving.
"""
import json
import os
from pathlib import Path

import jsonschema
import openai
import pytest
from test_serve import Server, binaries

M = "qwen"


def qwen():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not m.exists():
        pytest.skip(f"model {m} is missing: run scripts/fetch_models.sh")
    return str(m)


@pytest.fixture(scope="module", params=binaries(), ids=lambda p: p.parent.name)
def server(request):
    s = Server(request.param, qwen(), "--parallel", "2", "--ctx", "2048", "--alias", "qwen")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client(timeout=300)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "the city's name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


def check_calls(msg):
    """Each call: an id, type function, a known name, arguments that validate."""
    assert msg.tool_calls, msg
    for tc in msg.tool_calls:
        assert tc.id.startswith("call_") and len(tc.id) > 8
        assert tc.type == "function"
        assert tc.function.name in SCHEMAS
        jsonschema.Draft202012Validator(SCHEMAS[tc.function.name]).validate(json.loads(tc.function.arguments))
    return msg.tool_calls


def test_auto_calls_the_weather_tool(client):
    r = client.chat.completions.create(model=M, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120)
    ch = r.choices[0]
    calls = check_calls(ch.message)
    assert ch.finish_reason == "tool_calls"
    assert calls[0].function.name == "get_weather"
    assert "paris" in json.loads(calls[0].function.arguments)["city"].lower()
    assert not (ch.message.content or "").strip()


def test_required_and_named_choice(client):
    r = client.chat.completions.create(model=M, messages=[{"role": "user", "content": "Hello there!"}], tools=TOOLS,
                                       tool_choice="required", temperature=0, max_tokens=120)
    check_calls(r.choices[0].message)
    r = client.chat.completions.create(model=M, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120,
                                       tool_choice={"type": "function", "function": {"name": "add"}})
    calls = check_calls(r.choices[0].message)
    assert [c.function.name for c in calls] == ["add"] * len(calls)


def test_none_never_calls(client):
    r = client.chat.completions.create(model=M, messages=ASK, tools=TOOLS, tool_choice="none", temperature=0,
                                       max_tokens=40)
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason in ("stop", "length")


def test_stream_deltas_reassemble_to_the_call(client):
    plain = client.chat.completions.create(model=M, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120)
    want = [(c.function.name, c.function.arguments) for c in check_calls(plain.choices[0].message)]
    calls, finish, first = {}, None, {}
    for chunk in client.chat.completions.create(model=M, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120,
                                                stream=True):
        for ch in chunk.choices:
            if ch.finish_reason:
                finish = ch.finish_reason
            for tc in ch.delta.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": None, "args": ""})
                if tc.id:
                    assert c["id"] is None, "the id comes once, first"
                    c["id"], c["name"] = tc.id, tc.function.name
                    first[tc.index] = True
                else:
                    assert first.get(tc.index), "name and id come before any argument"
                c["args"] += tc.function.arguments or ""
    assert finish == "tool_calls"
    assert [(c["name"], c["args"]) for _, c in sorted(calls.items())] == want


def test_round_trip_with_the_tool_result(client):
    r = client.chat.completions.create(model=M, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120)
    msg = r.choices[0].message
    calls = check_calls(msg)
    history = ASK + [msg.model_dump(exclude_none=True)]
    for c in calls:
        history.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps({"temperature_c": 21, "sky": "clear"})})
    r2 = client.chat.completions.create(model=M, messages=history, tools=TOOLS, temperature=0, max_tokens=80)
    m2 = r2.choices[0].message
    # the answer is text (a model may call again, but then that call must be valid too)
    if m2.tool_calls:
        check_calls(m2)
    else:
        assert m2.content and m2.content.strip()
        assert r2.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
        ({"tools": [{"type": "code_interpreter"}]}, "tools[0]"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}]}, "tools"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_x", "content": "1"}]},
         "messages[1].tool_call_id"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]}, "messages[0].tool_calls[0]"),
    ],
)
def test_bad_tool_requests_are_400(server, extra, param):
    body = {"model": M, "messages": ASK, "max_tokens": 8}
    body.update(extra)
    status, resp, _ = server.post("/v1/chat/completions", body)
    assert status == 400, resp
    assert resp["error"]["param"] == param, resp
    assert resp["error"]["message"]
    status, _, _ = server.post("/v1/chat/completions", {"model": M, "messages": ASK, "max_tokens": 2})
    assert status == 200
