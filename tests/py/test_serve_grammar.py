"""Structured output through `cinder serve`: the official `openai` client against a live
server on Qwen2.5-Coder 0.5B Instruct (the fields as OpenAI, llama-server and vLLM spell
them), checked by independent truth: Python's `json` and `jsonschema` (Draft 2020-12)
for JSON output, `re.fullmatch` for regexes and for a GBNF grammar's language written as
a regex by hand, list membership for choices, and /metrics parsed by prometheus_client.

Whether the model *finishes* inside the grammar is the model's business; what the
grammar guarantees is checked whenever finish_reason is "stop" (a "length" reply is a
prefix and is only checked to be one where that is easy). Requests that are refused (a
bad schema, two constraints, a schema too big to compile) are checked with raw HTTP too,
and the server must keep serving after each.
"""
import json
import os
import re
import socket
import threading
import time
from pathlib import Path

import jsonschema
import openai
import pytest
from test_serve import Server, binaries

ROOT = Path(__file__).resolve().parents[2]
M = "qwen"  # the served name (--alias)


def qwen():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not m.exists():
        pytest.skip(f"model {m} is missing: run scripts/fetch_models.sh")
    return str(m)


@pytest.fixture(scope="module", params=binaries(), ids=lambda p: p.parent.name)
def server(request):
    s = Server(request.param, qwen(), "--parallel", "4", "--ctx", "1024", "--alias", "qwen")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client(timeout=300)


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Describe a fictional programmer as JSON with a name, an age and languages."}]


def check_json(text, finish, schema=None):
    if finish != "stop":
        return None
    v = json.loads(text)
    if schema is not None:
        jsonschema.Draft202012Validator(schema).validate(v)
    return v


def metric(server, name):
    return sum(v for _, v in server.metrics().get(name, []))


def test_response_format_json_schema(client):
    r = client.chat.completions.create(
        model=M, messages=ASK, temperature=0, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    c = r.choices[0]
    assert c.finish_reason == "stop", c
    v = check_json(c.message.content, c.finish_reason, PERSON)
    assert isinstance(v["name"], str) and isinstance(v["age"], int)


def test_json_object(client):
    r = client.chat.completions.create(model=M, messages=ASK, temperature=0, max_tokens=200,
                                       response_format={"type": "json_object"})
    c = r.choices[0]
    v = check_json(c.message.content, c.finish_reason)
    if v is not None:
        assert isinstance(v, dict)
    else:  # a prefix of an object: it starts as one
        assert c.message.content.lstrip().startswith("{")


def test_streaming_json_schema(client):
    parts, finish = [], None
    for chunk in client.chat.completions.create(
            model=M, messages=ASK, temperature=0, max_tokens=200, stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}):
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    check_json("".join(parts), finish, PERSON)
    assert finish in ("stop", "length")
    # the same request not streamed: the same text (greedy)
    r = client.chat.completions.create(
        model=M, messages=ASK, temperature=0, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    assert r.choices[0].message.content == "".join(parts)


def test_n_2_each_choice_follows_the_schema(client):
    r = client.chat.completions.create(
        model=M, messages=ASK, temperature=0.9, seed=5, n=2, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    assert len(r.choices) == 2
    for c in r.choices:
        check_json(c.message.content, c.finish_reason, PERSON)


def test_completions_guided_json(client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    r = client.completions.create(model=M, prompt="Q: What is 2 + 3? Answer in JSON.\nA: ", temperature=0,
                                  max_tokens=40, extra_body={"guided_json": schema})
    check_json(r.choices[0].text, r.choices[0].finish_reason, schema)


def test_llama_server_json_schema_field(client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = client.chat.completions.create(model=M, messages=[{"role": "user", "content": "Is water wet? JSON."}],
                                       temperature=0, max_tokens=60, extra_body={"json_schema": schema})
    check_json(r.choices[0].message.content, r.choices[0].finish_reason, schema)


def test_gbnf_grammar(client):
    g = 'root ::= "The answer is " digit+ "."\ndigit ::= [0-9]'
    r = client.chat.completions.create(model=M, messages=[{"role": "user", "content": "What is 6 times 7?"}],
                                       temperature=0, max_tokens=20, extra_body={"grammar": g})
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert re.fullmatch(r"The answer is [0-9]+\.", c.message.content), c.message.content
    else:
        assert re.fullmatch(r"The answer is [0-9]*", c.message.content) or "The answer is ".startswith(
            c.message.content), c.message.content


def test_guided_choice(client):
    choices = ["positive", "negative", "neutral"]
    for text in ("I love this library, it is great!", "This is the worst day ever."):
        r = client.chat.completions.create(
            model=M, temperature=0, max_tokens=10, extra_body={"guided_choice": choices},
            messages=[{"role": "user", "content": f"Classify the sentiment: {text}"}])
        c = r.choices[0]
        assert c.finish_reason == "stop" and c.message.content in choices, c


def test_guided_regex(client):
    pat = r"\(\d{3}\) \d{3}-\d{4}"
    r = client.chat.completions.create(
        model=M, temperature=0, max_tokens=30, extra_body={"guided_regex": pat},
        messages=[{"role": "user", "content": "Make up a US phone number."}])
    c = r.choices[0]
    assert c.finish_reason == "stop", c
    assert re.fullmatch(pat, c.message.content), c.message.content


def test_bad_schema_is_400_with_param_and_message(server, client):
    bad = {"type": "object", "properties": {"a": {"type": "no-such-type"}}}
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(
            model=M, messages=ASK, max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": bad}})
    err = ei.value.body if isinstance(ei.value.body, dict) and "param" in ei.value.body else \
        ei.value.response.json()["error"]
    assert ei.value.status_code == 400
    assert err["param"] == "response_format" and err["type"] == "invalid_request_error"
    assert err["message"].startswith("invalid 'response_format': ") and "/properties/a" in err["message"], err
    # raw HTTP: the OpenAI error shape, on both endpoints and every field
    for path, body, param in (
            ("/v1/completions", {"prompt": "x", "guided_regex": "(unclosed"}, "guided_regex"),
            ("/v1/chat/completions", {"messages": ASK, "grammar": "root ::= ("}, "grammar"),
            ("/v1/chat/completions", {"messages": ASK, "guided_choice": []}, "guided_choice"),
            ("/v1/chat/completions", {"messages": ASK, "guided_json": "{oops"}, "guided_json")):
        st, j, _ = server.post(path, body)
        assert st == 400, (body, j)
        assert set(j["error"]) == {"message", "type", "param", "code"} and j["error"]["param"] == param, j
    assert server.get("/health")[0] == 200


def test_two_constraints_are_400_naming_both(server):
    st, j, _ = server.post("/v1/chat/completions", {"messages": ASK, "response_format": {"type": "json_object"},
                                                    "guided_regex": "a+"})
    assert st == 400 and j["error"]["param"] == "guided_regex"
    assert "response_format" in j["error"]["message"] and "guided_regex" in j["error"]["message"]


def test_the_cache_hit_counter_moves(server, client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"],
              "additionalProperties": False}
    h0, m0 = metric(server, "cinder:grammar_cache_hits_total"), metric(server, "cinder:grammar_cache_misses_total")
    for _ in range(3):
        client.chat.completions.create(
            model=M, messages=[{"role": "user", "content": "Name a city, as JSON."}], max_tokens=30, temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
    assert metric(server, "cinder:grammar_cache_misses_total") == m0 + 1
    assert metric(server, "cinder:grammar_cache_hits_total") == h0 + 2
    assert metric(server, "cinder:grammar_cache_entries") >= 1
    assert metric(server, "cinder:grammar_compile_seconds_count") >= 1


def test_costly_schemas_are_refused_and_the_server_keeps_serving(server, client):
    # a regex whose automaton has 2^25 states: over the compile budget
    blowup = "(a|b)*a(a|b){25}"
    # a schema nested past what any compiler should recurse into without a limit
    # (written out by hand: Python's own json recurses no deeper than about 1000)
    deep = ('{"messages": %s, "max_tokens": 5, "guided_json": ' % json.dumps(ASK) + '{"type": "array", "items": ' * 1500 +
            '{"type": "string"}' + "}" * 1500 + "}").encode()
    # a 10 MB schema: over the request size limit (8 MiB), 413 before anything is compiled
    huge = json.dumps({"messages": ASK, "max_tokens": 5, "guided_json": {
        "type": "object", "properties": {f"p{i:07d}": {"type": "string", "maxLength": 8} for i in range(250000)}}})
    assert len(huge) > 10_000_000
    results = {}

    def send(name, body):
        t0 = time.time()
        st, j, _ = server.post("/v1/chat/completions", body, timeout=120)
        results[name] = (st, j, time.time() - t0)

    def send_huge():
        # refused on its Content-Length, before the body is read (as a client sees it)
        c = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(huge))
        results["huge"] = (int(c.recv(4096).split()[1]), None, 0)
        c.close()

    threads = [
        threading.Thread(target=send_huge),
        threading.Thread(target=send, args=("blowup", {"messages": ASK, "max_tokens": 5, "guided_regex": blowup})),
        threading.Thread(target=send, args=("deep", deep)),
    ]
    for t in threads:
        t.start()
    # while those compile, the server answers others at once: /health takes a small part
    # of the time the blowup's compile takes (both timed in this run, so a slow or loaded
    # machine slows both alike), where waiting behind the compile would take most of it
    t0 = time.time()
    assert server.get("/health")[0] == 200
    health_s = time.time() - t0
    r = client.chat.completions.create(model=M, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4,
                                       temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    for t in threads:
        t.join(150)
    st, j, dt = results["blowup"]
    assert st == 400 and j["error"]["param"] == "guided_regex" and "budget" in j["error"]["message"], j
    assert health_s < dt / 2, (health_s, dt)
    st, j, _ = results["deep"]
    assert st in (200, 400), (st, j)  # compiled, or refused with a message
    if st == 400:
        assert j["error"]["param"] == "guided_json", j
    assert results["huge"][0] == 413
    assert server.get("/health")[0] == 200
    r = client.chat.completions.create(model=M, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4,
                                       temperature=0, extra_body={"guided_choice": ["hi", "hello"]})
    assert r.choices[0].message.content in ("hi", "hello")
