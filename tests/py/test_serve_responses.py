"""OpenAI's Responses API (stateless) through `cinder serve`: the official `openai`
client's `responses.create` against a live server on Qwen2.5-Coder 0.5B Instruct.

Truth used here: the client's own types (each response and each stream event is parsed
into its model class: an event the client does not know, or a field of the wrong type,
fails the test), OpenAI's API reference for what the types leave open (the order of the
stream events, sequence numbers counting from 0, status "incomplete" with reason
max_output_tokens), the same conversation through /v1/chat/completions (the reply text
and the prompt's token count at temperature 0), and Python's `jsonschema` for every
function call's arguments. Refused requests are checked with raw HTTP: 400, OpenAI's
error shape naming the field, and the server keeps serving.
"""
import json
import os
from pathlib import Path

import jsonschema
import openai
import pytest
from openai.types.responses import (ResponseCompletedEvent, ResponseCreatedEvent, ResponseFunctionToolCall,
                                    ResponseOutputMessage, ResponseTextDeltaEvent)
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
    "strict": True,
}
ADD = {
    "type": "function",
    "name": "add",
    "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]},
}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}
HELLO = "Say hello in one short sentence."
ASK = "What is the weather like in Paris right now?"


def calls_of(r):
    """Each function_call item: ids, a known name, arguments that validate."""
    calls = [o for o in r.output if o.type == "function_call"]
    for c in calls:
        assert isinstance(c, ResponseFunctionToolCall)
        assert c.call_id.startswith("call_") and c.id.startswith("fc_") and c.status == "completed"
        assert c.name in SCHEMAS
        jsonschema.Draft202012Validator(SCHEMAS[c.name]).validate(json.loads(c.arguments))
    return calls


def chat(server, messages, **kw):
    st, body, _ = server.post("/v1/chat/completions", {"model": M, "messages": messages, "temperature": 0, **kw})
    assert st == 200, body
    return body


def test_text_input(client, server):
    r = client.responses.create(model=M, input=HELLO, temperature=0, max_output_tokens=40)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == M
    assert r.status == "completed" and r.incomplete_details is None and r.error is None
    assert len(r.output) == 1 and isinstance(r.output[0], ResponseOutputMessage)
    msg = r.output[0]
    assert msg.role == "assistant" and msg.status == "completed"
    assert [p.type for p in msg.content] == ["output_text"] and msg.content[0].annotations == []
    want = chat(server, [{"role": "user", "content": HELLO}], max_tokens=40)
    assert r.output_text == msg.content[0].text == want["choices"][0]["message"]["content"]
    assert r.usage.input_tokens == want["usage"]["prompt_tokens"]
    assert r.usage.output_tokens == want["usage"]["completion_tokens"]
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.max_output_tokens == 40 and r.temperature == 0 and r.tools == [] and r.tool_choice == "auto"


def test_item_input_with_instructions(client, server):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "My name is Ada."}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello Ada!"}]},
             {"role": "user", "content": "What is my name?"}]
    r = client.responses.create(model=M, input=items, instructions="Answer in one short sentence.", temperature=0,
                                max_output_tokens=40, metadata={"run": "test"})
    want = chat(server, [{"role": "system", "content": "Answer in one short sentence."},
                         {"role": "user", "content": "My name is Ada."},
                         {"role": "assistant", "content": "Hello Ada!"},
                         {"role": "user", "content": "What is my name?"}], max_tokens=40)
    assert r.output_text == want["choices"][0]["message"]["content"]
    assert r.usage.input_tokens == want["usage"]["prompt_tokens"]
    assert r.instructions == "Answer in one short sentence." and r.metadata == {"run": "test"}
    assert "Ada" in r.output_text


def test_max_output_tokens_is_incomplete(client):
    r = client.responses.create(model=M, input="Count from one to fifty in words.", temperature=0,
                                max_output_tokens=4)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 4 and r.output[0].status == "incomplete"


def test_stream_events_parse_and_text_equals_the_whole(client):
    whole = client.responses.create(model=M, input=HELLO, temperature=0, max_output_tokens=40)
    events = list(client.responses.create(model=M, input=HELLO, temperature=0, max_output_tokens=40, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert isinstance(events[0], ResponseCreatedEvent) and events[0].response.status == "in_progress"
    deltas = [e for e in events if isinstance(e, ResponseTextDeltaEvent)]
    item_id = events[2].item.id
    assert all(d.item_id == item_id and d.output_index == 0 and d.content_index == 0 for d in deltas)
    text = "".join(d.delta for d in deltas)
    assert text == whole.output_text == events[-4].text
    done = events[-1]
    assert isinstance(done, ResponseCompletedEvent)
    assert done.response.output_text == text and done.response.usage.output_tokens == whole.usage.output_tokens
    assert done.response.output[0].id == item_id


def test_function_tools_round_trip(client):
    r = client.responses.create(model=M, input=ASK, tools=TOOLS, temperature=0, max_output_tokens=120)
    calls = calls_of(r)
    assert calls and calls[0].name == "get_weather" and "paris" in json.loads(calls[0].arguments)["city"].lower()
    assert r.status == "completed" and not r.output_text.strip()
    assert [t.name for t in r.tools] == ["get_weather", "add"]
    # the calls and their outputs go back as items (stateless: the whole conversation)
    items = [{"role": "user", "content": ASK}]
    items += [{"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls]
    items += [{"type": "function_call_output", "call_id": c.call_id,
               "output": json.dumps({"temperature_c": 21, "sky": "clear"})} for c in calls]
    r2 = client.responses.create(model=M, input=items, tools=TOOLS, temperature=0, max_output_tokens=80)
    if any(o.type == "function_call" for o in r2.output):
        calls_of(r2)
    else:
        assert r2.output_text.strip() and r2.output[-1].type == "message"
    # the output items of a response may be sent back as they are
    items2 = [{"role": "user", "content": ASK}] + [o.model_dump(exclude_none=True) for o in r.output]
    items2 += [{"type": "function_call_output", "call_id": c.call_id, "output": "21 C, clear"} for c in calls]
    r3 = client.responses.create(model=M, input=items2, tools=TOOLS, temperature=0, max_output_tokens=20)
    assert r3.status in ("completed", "incomplete")


def test_function_call_stream_reassembles(client):
    whole = client.responses.create(model=M, input=ASK, tools=TOOLS, temperature=0, max_output_tokens=120)
    want = [(c.name, c.arguments) for c in calls_of(whole)]
    events = list(client.responses.create(model=M, input=ASK, tools=TOOLS, temperature=0, max_output_tokens=120,
                                          stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    got, done = {}, {}
    for e in events:
        if e.type == "response.output_item.added" and e.item.type == "function_call":
            assert e.item.arguments == "" and e.item.status == "in_progress"
            got[e.output_index] = [e.item.name, "", e.item.id]
        elif e.type == "response.function_call_arguments.delta":
            assert got[e.output_index][2] == e.item_id
            got[e.output_index][1] += e.delta
        elif e.type == "response.function_call_arguments.done":
            done[e.output_index] = e.arguments
    assert [(n, a) for _, (n, a, _) in sorted(got.items())] == want
    assert [a for _, a in sorted(done.items())] == [a for _, a in want]
    assert events[-1].type == "response.completed"
    assert [(c.name, c.arguments) for c in calls_of(events[-1].response)] == want


def test_tool_choice(client):
    r = client.responses.create(model=M, input=HELLO, tools=TOOLS, tool_choice="required", temperature=0,
                                max_output_tokens=120)
    assert calls_of(r)
    r = client.responses.create(model=M, input=ASK, tools=TOOLS, tool_choice={"type": "function", "name": "add"},
                                temperature=0, max_output_tokens=120, parallel_tool_calls=False)
    calls = calls_of(r)
    assert [c.name for c in calls] == ["add"] and r.parallel_tool_calls is False
    r = client.responses.create(model=M, input=ASK, tools=TOOLS, tool_choice="none", temperature=0,
                                max_output_tokens=20)
    assert not calls_of(r)


def test_structured_output(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"],
              "additionalProperties": False}
    r = client.responses.create(model=M, input="Name a city in France as JSON.", temperature=0, max_output_tokens=40,
                                text={"format": {"type": "json_schema", "name": "city", "schema": schema}})
    jsonschema.validate(json.loads(r.output_text), schema)


def test_store_is_accepted_and_nothing_is_kept(client, server):
    r = client.responses.create(model=M, input=HELLO, temperature=0, max_output_tokens=4, store=True)
    assert r.status in ("completed", "incomplete")
    st, body, _ = server.post("/v1/responses", {"model": M, "input": "hi", "previous_response_id": r.id})
    assert st == 400 and body["error"]["param"] == "previous_response_id"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": "hi", "previous_response_id": "resp_123"}, "previous_response_id"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"input": "hi", "tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
        ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "strin"}}]}, "tools"),
        ({"input": "hi", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]}, "input[0].call_id"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0]"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({}, "input"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation"),
        ({"input": "hi", "reasoning": {"effort": "high"}}, "reasoning"),
        ({"input": "hi", "frequency_penalty": 1}, "frequency_penalty"),
    ],
)
def test_bad_requests_are_400(server, body, param):
    status, resp, _ = server.post("/v1/responses", {"model": M, **body})
    assert status == 400, resp
    assert resp["error"]["type"] == "invalid_request_error" and resp["error"]["param"] == param, resp
    assert resp["error"]["message"]
    status, ok, _ = server.post("/v1/responses", {"model": M, "input": "hi", "max_output_tokens": 2})
    assert status == 200 and ok["object"] == "response"


def test_client_raises_on_400(client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=M, input="hi", previous_response_id="resp_abc")
    assert "stateless" in ei.value.message


def test_metrics_count_the_endpoint(client, server):
    client.responses.create(model=M, input="hi", max_output_tokens=2)
    got = {(s[0]["endpoint"], s[0]["status"]): s[1] for s in server.metrics()["cinder:http_requests_total"]}
    assert got.get(("/v1/responses", "200"), 0) >= 1


def sse_data(raw):
    return [json.loads(line[6:]) for block in raw.strip().split("\n\n") for line in block.split("\n")
            if line.startswith("data: ")]


@pytest.mark.parametrize("body", [
    {"input": HELLO, "max_output_tokens": 20},
    {"input": ASK, "tools": TOOLS, "max_output_tokens": 120},
    {"input": "Count from one to fifty in words.", "max_output_tokens": 3},
], ids=["text", "call", "incomplete"])
def test_raw_shapes_validate_against_the_client_types(server, body):
    """Validated (not merely constructed, as the client does) against the client's
    pydantic models: every required field there, of its type."""
    import pydantic
    from openai.types.responses import Response, ResponseStreamEvent
    body = {"model": M, "temperature": 0, **body}
    st, raw, _ = server.request("POST", "/v1/responses", body)
    assert st == 200
    Response.model_validate(json.loads(raw))
    st, raw, hdr = server.request("POST", "/v1/responses", {**body, "stream": True})
    assert st == 200 and hdr["Content-Type"].startswith("text/event-stream")
    events = sse_data(raw.decode())
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    for ev in events:
        adapter.validate_python(ev)
    assert "[DONE]" not in raw.decode()
