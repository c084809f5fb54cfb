"""Anthropic's Messages API through `cinder serve`: the official `anthropic` client against
a live server on Qwen2.5-Coder 0.5B Instruct.

Truth used here: the client's own types (every response and stream event is parsed by
the client; a shape it cannot read fails the test), Anthropic's API reference for what
the client does not check (the order of stream events, stop_reason values, the error
shape {"type": "error", "error": {"type", "message"}} with its HTTP statuses), the same
conversation through /v1/chat/completions (the prompt's token count), the unconstrained
reply (where a stop sequence must cut it), and Python's `jsonschema` for every tool_use
input against its tool's input_schema. Refused requests are checked with raw HTTP and
the server must keep serving after each.
"""
import json
import os
from pathlib import Path

import anthropic
import jsonschema
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


def ant_client(server, key="none"):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def client(server):
    return ant_client(server)


# Anthropic's client no longer sends sampling parameters; cinder takes temperature, top_p
# and top_k as Anthropic's API did, so greedy replies are asked for in the body.
T0 = {"temperature": 0}
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "the city's name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}
ADD = {
    "name": "add",
    "description": "Add two integers",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def tool_uses(msg):
    """Each tool_use: a toolu_ id, a known name, an input that validates."""
    uses = [b for b in msg.content if b.type == "tool_use"]
    for u in uses:
        assert u.id.startswith("toolu_") and len(u.id) > 10
        assert u.name in SCHEMAS
        jsonschema.Draft202012Validator(SCHEMAS[u.name]).validate(u.input)
    return uses


def test_plain_message(client):
    m = client.messages.create(model=M, max_tokens=40, extra_body=T0, messages=HELLO)
    assert m.type == "message" and m.role == "assistant" and m.model == M
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and text_of(m).strip()
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens > 5 and 0 < m.usage.output_tokens <= 40


def test_max_tokens_stop_reason(client):
    m = client.messages.create(model=M, max_tokens=3, extra_body=T0,
                               messages=[{"role": "user", "content": "Count from one to fifty in words."}])
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3


def test_system_prompt_is_rendered(client, server):
    """The system prompt reaches the template: the same conversation through chat
    completions (with a system message) has the same prompt length, and it differs from
    the one without it."""
    sysmsg = "You are a pirate. Answer like one."
    m = client.messages.create(model=M, max_tokens=20, extra_body=T0, system=sysmsg, messages=HELLO)
    blocks = client.messages.create(model=M, max_tokens=20, extra_body=T0,
                                    system=[{"type": "text", "text": sysmsg}], messages=HELLO)
    st, chat, _ = server.post("/v1/chat/completions", {"model": M, "max_tokens": 20, "temperature": 0,
                                                       "messages": [{"role": "system", "content": sysmsg}] + HELLO})
    assert st == 200
    assert m.usage.input_tokens == blocks.usage.input_tokens == chat["usage"]["prompt_tokens"]
    assert text_of(m) == text_of(blocks) == chat["choices"][0]["message"]["content"]
    plain = client.messages.create(model=M, max_tokens=1, extra_body=T0, messages=HELLO)
    assert plain.usage.input_tokens != m.usage.input_tokens


COUNT = [{"role": "user", "content": "Count from one to ten in words, separated by commas."}]


def test_stop_sequences(client):
    full = text_of(client.messages.create(model=M, max_tokens=40, extra_body=T0, messages=COUNT))
    words = full.split()
    assert len(words) >= 4, full
    stop = words[3]
    m = client.messages.create(model=M, max_tokens=40, extra_body=T0, messages=COUNT, stop_sequences=["QQQQ", stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert text_of(m) == full[:full.index(stop)]


def test_stream_events_in_order_and_text_equals_the_whole(client):
    whole = client.messages.create(model=M, max_tokens=40, extra_body=T0, messages=HELLO)
    events = list(client.messages.create(model=M, max_tokens=40, extra_body=T0, messages=HELLO, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1] == "content_block_start"
    assert kinds[-3] == "content_block_stop"
    assert set(kinds[2:-3]) == {"content_block_delta"}
    start = events[0].message
    assert start.id.startswith("msg_") and start.content == [] and start.usage.input_tokens == whole.usage.input_tokens
    assert events[1].content_block.type == "text" and events[1].index == 0
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert all(e.delta.type == "text_delta" for e in events if e.type == "content_block_delta")
    assert text == text_of(whole)
    assert events[-2].delta.stop_reason == whole.stop_reason
    assert events[-2].usage.output_tokens == whole.usage.output_tokens


def test_stream_sends_ping_and_event_lines(server):
    """The raw stream: each event is an `event:` line naming the data's type; a ping
    follows the first content_block_start."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    c.request("POST", "/v1/messages", body=json.dumps({"model": M, "max_tokens": 8, "temperature": 0,
                                                       "messages": HELLO, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    raw = r.read().decode()
    c.close()
    names = []
    for block in raw.strip().split("\n\n"):
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name
        names.append(name)
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert "[DONE]" not in raw


def test_message_stream_helper(client):
    whole = client.messages.create(model=M, max_tokens=30, extra_body=T0, messages=HELLO)
    with client.messages.stream(model=M, max_tokens=30, extra_body=T0, messages=HELLO) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == text_of(whole) == text_of(final)
    assert final.stop_reason == whole.stop_reason


def test_tool_use(client):
    m = client.messages.create(model=M, max_tokens=120, extra_body=T0, messages=ASK, tools=TOOLS)
    uses = tool_uses(m)
    assert uses and uses[0].name == "get_weather" and "paris" in uses[0].input["city"].lower()
    assert m.stop_reason == "tool_use"
    assert not text_of(m).strip()


def test_tool_use_stream_reassembles_to_the_input(client):
    whole = client.messages.create(model=M, max_tokens=120, extra_body=T0, messages=ASK, tools=TOOLS)
    want = [(u.name, u.input, u.id[:6]) for u in tool_uses(whole)]
    events = list(client.messages.create(model=M, max_tokens=120, extra_body=T0, messages=ASK, tools=TOOLS,
                                         stream=True))
    blocks = {}
    for e in events:
        if e.type == "content_block_start" and e.content_block.type == "tool_use":
            assert e.content_block.input == {}
            blocks[e.index] = {"name": e.content_block.name, "id": e.content_block.id, "json": ""}
        elif e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            blocks[e.index]["json"] += e.delta.partial_json
    got = [(b["name"], json.loads(b["json"]), b["id"][:6]) for _, b in sorted(blocks.items())]
    assert got == want
    assert [e for e in events if e.type == "message_delta"][0].delta.stop_reason == "tool_use"
    # and the client's own accumulator agrees
    with client.messages.stream(model=M, max_tokens=120, extra_body=T0, messages=ASK, tools=TOOLS) as s:
        final = s.get_final_message()
    assert [(u.name, u.input) for u in tool_uses(final)] == [(n, i) for n, i, _ in want]


def test_tool_result_round_trip(client):
    m = client.messages.create(model=M, max_tokens=120, extra_body=T0, messages=ASK, tools=TOOLS)
    uses = tool_uses(m)
    assert uses
    history = ASK + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": u.id,
                          "content": json.dumps({"temperature_c": 21, "sky": "clear"})} for u in uses]}]
    m2 = client.messages.create(model=M, max_tokens=80, extra_body=T0, messages=history, tools=TOOLS)
    if any(b.type == "tool_use" for b in m2.content):
        tool_uses(m2)
        assert m2.stop_reason == "tool_use"
    else:
        assert text_of(m2).strip()
        assert m2.stop_reason in ("end_turn", "max_tokens")
    # a result given as text blocks, marked as an error, is read too
    history[-1]["content"] = [{"type": "tool_result", "tool_use_id": uses[0].id, "is_error": True,
                               "content": [{"type": "text", "text": "the weather service is down"}]}]
    m3 = client.messages.create(model=M, max_tokens=20, extra_body=T0, messages=history, tools=TOOLS)
    assert m3.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_tool_choice_any_and_tool(client):
    m = client.messages.create(model=M, max_tokens=120, extra_body=T0, messages=HELLO, tools=TOOLS,
                               tool_choice={"type": "any"})
    assert tool_uses(m) and m.stop_reason == "tool_use"
    m = client.messages.create(model=M, max_tokens=120, extra_body=T0, messages=ASK, tools=TOOLS,
                               tool_choice={"type": "tool", "name": "add"})
    uses = tool_uses(m)
    assert uses and {u.name for u in uses} == {"add"}
    m = client.messages.create(model=M, max_tokens=120, extra_body=T0, messages=ASK, tools=TOOLS,
                               tool_choice={"type": "tool", "name": "add", "disable_parallel_tool_use": True})
    assert len(tool_uses(m)) == 1
    m = client.messages.create(model=M, max_tokens=30, extra_body=T0, messages=ASK, tools=TOOLS,
                               tool_choice={"type": "none"})
    assert not any(b.type == "tool_use" for b in m.content) and m.stop_reason in ("end_turn", "max_tokens")


def test_count_tokens_equals_usage(client):
    for kw in ({"messages": HELLO, "system": "Be brief."}, {"messages": ASK, "tools": TOOLS}):
        n = client.messages.count_tokens(model=M, **kw).input_tokens
        m = client.messages.create(model=M, max_tokens=1, extra_body=T0, **kw)
        assert n == m.usage.input_tokens > 0


def error_of(status, body, want_status=400):
    assert status == want_status, body
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize(
    "body, mentions",
    [
        ({"messages": HELLO}, "max_tokens"),
        ({"max_tokens": 8, "messages": [{"role": "system", "content": "hi"}]}, "messages[0].role"),
        ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x",
                                                                       "content": "1"}]}]},
         "messages[0].content[0].tool_use_id"),
        ({"max_tokens": 8, "messages": ASK, "tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]},
         "tools[0].name"),
        ({"max_tokens": 8, "messages": ASK, "tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"max_tokens": 8, "messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
         "tools[0]"),
        ({"max_tokens": 8, "messages": ASK, "tools": [{"name": "f", "input_schema": {"type": "strin"}}]}, "tools"),
        ({"max_tokens": 8, "messages": ASK, "tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}},
         "tool_choice"),
        ({"max_tokens": 8, "messages": ASK, "tool_choice": {"type": "any"}}, "tool_choice"),
        ({"max_tokens": 8, "messages": ASK + [{"role": "assistant", "content": "It is"}]}, "prefill"),
        ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
        ({"max_tokens": 0, "messages": HELLO}, "max_tokens"),
        ({"max_tokens": 8, "messages": HELLO, "stop_sequences": "x"}, "stop_sequences"),
        ({"max_tokens": 8, "messages": HELLO, "frequency_penalty": 1}, "frequency_penalty"),
    ],
)
def test_bad_requests_are_400_in_anthropic_shape(server, body, mentions):
    status, resp, _ = server.post("/v1/messages", {"model": M, **body})
    err = error_of(status, resp)
    assert err["type"] == "invalid_request_error"
    assert mentions in err["message"], err
    # still serving
    status, ok, _ = server.post("/v1/messages", {"model": M, "max_tokens": 2, "messages": HELLO})
    assert status == 200 and ok["type"] == "message"


def test_client_raises_on_400_and_404(client, server):
    with pytest.raises(anthropic.BadRequestError) as ei:
        client.messages.create(model=M, max_tokens=8, messages=[{"role": "robot", "content": "hi"}])
    assert ei.value.status_code == 400 and ei.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError) as ei:
        client.messages.create(model="claude-nope", max_tokens=8, messages=HELLO)
    assert ei.value.body["error"]["type"] == "not_found_error"
    status, body, _ = server.post("/v1/messages", b"{not json")
    assert error_of(status, body)["type"] == "invalid_request_error"
    status, body, _ = server.post("/v1/messages/count_tokens", {"model": M, "messages": []})
    error_of(status, body)
    status, raw, hdr = server.get("/v1/messages")
    assert error_of(status, json.loads(raw), 405)["type"] == "invalid_request_error" and hdr["Allow"] == "POST"


def test_metrics_count_the_endpoints(client, server):
    client.messages.count_tokens(model=M, messages=HELLO)
    client.messages.create(model=M, max_tokens=2, messages=HELLO)
    got = {(s[0]["endpoint"], s[0]["status"]): s[1] for s in server.metrics()["cinder:http_requests_total"]}
    assert got.get(("/v1/messages", "200"), 0) >= 1
    assert got.get(("/v1/messages/count_tokens", "200"), 0) >= 1


def test_x_api_key_auth():
    srv = Server(binaries()[0], qwen(), "--api-key", "sekrit", "--ctx", "512", "--alias", "qwen")
    try:
        with pytest.raises(anthropic.AuthenticationError) as ei:
            ant_client(srv, "wrong").messages.create(model=M, max_tokens=2, messages=HELLO)
        assert ei.value.status_code == 401
        assert ei.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                            "message": ei.value.body["error"]["message"]}}
        st, body, _ = srv.post("/v1/messages", {"model": M, "max_tokens": 2, "messages": HELLO})
        assert error_of(st, body, 401)["type"] == "authentication_error"
        m = ant_client(srv, "sekrit").messages.create(model=M, max_tokens=2, messages=HELLO)
        assert m.type == "message"
        # the Bearer header works on these endpoints too
        st, body, _ = srv.post("/v1/messages/count_tokens", {"model": M, "messages": HELLO},
                               headers={"Authorization": "Bearer sekrit"})
        assert st == 200 and body["input_tokens"] > 0
    finally:
        srv.stop()


@pytest.mark.parametrize("body", [
    {"messages": HELLO, "max_tokens": 20},
    {"messages": ASK, "tools": TOOLS, "max_tokens": 120},
], ids=["text", "tool_use"])
def test_raw_shapes_validate_against_the_client_types(server, body):
    """Validated (not merely constructed, as the client does) against the client's
    pydantic models: every required field there, of its type."""
    import pydantic
    body = {"model": M, "temperature": 0, **body}
    st, raw, _ = server.request("POST", "/v1/messages", body)
    assert st == 200
    anthropic.types.Message.model_validate(json.loads(raw))
    st, raw, _ = server.request("POST", "/v1/messages", {**body, "stream": True})
    assert st == 200
    adapter = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
    for block in raw.decode().strip().split("\n\n"):
        data = json.loads(block.split("\n")[1][6:])
        if data["type"] != "ping":
            adapter.validate_python(data)
