"""bench/bfcl: BFCL's tool conversion and AST-match scorer, on hand-made replies.

Independent truth: BFCL's documented rules (bfcl_eval 2026.3.23, `model_handler/utils.py`
convert_to_tool and `eval_checker/ast_eval/ast_checker.py`), reasoned out case by case
below, not computed by running BFCL. No inference server: the client path runs against a
stub OpenAI endpoint in this process that answers with canned messages.
"""
import http.server
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
import threading

import pytest

from conftest import ROOT

_loader = importlib.machinery.SourceFileLoader("bench_bfcl", str(ROOT / "bench" / "bfcl"))
_spec = importlib.util.spec_from_loader("bench_bfcl", _loader)
bfcl = importlib.util.module_from_spec(_spec)
_loader.exec_module(bfcl)

TRIANGLE = {"name": "geometry.triangle_area", "description": "Area of a triangle.",
            "parameters": {"type": "dict", "required": ["base", "height"], "properties": {
                "base": {"type": "integer", "description": "Base."},
                "height": {"type": "float", "description": "Height."},
                "unit": {"type": "string", "description": "Unit."},
                "round": {"type": "boolean", "description": "Round?", "default": False}}}}
CIRCLE = {"name": "geometry.circle_area", "description": "Area of a circle.",
          "parameters": {"type": "dict", "required": ["radius"],
                         "properties": {"radius": {"type": "float", "description": "Radius."}}}}
SIMPLE = {"id": "simple_python_x", "function": [TRIANGLE], "question": [[{"role": "user", "content": "?"}]]}
MULTIPLE = {"id": "multiple_x", "function": [CIRCLE, TRIANGLE], "question": [[{"role": "user", "content": "?"}]]}
IRRELEVANT = {"id": "irrelevance_x", "function": [CIRCLE], "question": [[{"role": "user", "content": "?"}]]}
# base must be 10; height 5 (an int is fine for a float); unit "units" or omitted; round may
# be omitted or False; "" marks "may be omitted".
ANSWER = [{"geometry.triangle_area": {"base": [10], "height": [5.0], "unit": ["units", ""], "round": ["", False]}}]


def call(name, args):
    return {"id": "c", "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def reply(tool_calls=None, content=None, finish="stop"):
    return {"choices": [{"message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
                         "finish_reason": finish}], "usage": {"completion_tokens": 9}}


def verdict(case, answer, rep, cat=None):
    cat = cat or case["id"].rsplit("_", 1)[0]
    _, names = bfcl.to_tools(case["function"])
    return bfcl.judge({"id": case["id"], "category": cat}, cat, case, answer, rep, names)


# ---------------------------------------------------------------- conversion

def test_tools_as_bfcls_openai_handler_makes_them():
    fn = {"name": "a.b.c", "description": "D.", "parameters": {"type": "dict", "required": ["x"], "properties": {
        "x": {"type": "float", "description": "X."},
        "d": {"type": "dict", "description": "D.", "properties": {"lo": {"type": "float", "description": "L."},
                                                                  "s": {"type": "string", "description": "S."}}},
        "t": {"type": "tuple", "description": "T.", "items": {"type": "float"}},
        "any": {"type": "any", "description": "A."},
        "notype": {"description": "N."},
        "odd": {"type": "Set", "description": "O."},
        "rows": {"type": "array", "description": "R.", "items": {"type": "dict", "properties": {
            "k": {"type": "integer", "description": "K."}}}},
        "grid": {"type": "array", "description": "G.", "items": {"type": "array", "items": {"type": "float"}}},
        "e": {"type": "string", "description": "E.", "enum": ["a", "b"], "default": "a"}}}}
    tools, names = bfcl.to_tools([fn])
    assert names == {"a_b_c": "a.b.c"}
    assert tools == [{"type": "function", "function": {
        "name": "a_b_c", "description": "D. Note that the provided function is in Python 3 syntax.",
        "parameters": {"type": "object", "required": ["x"], "properties": {
            # float: number, BFCL also tags the format and says so in the description
            "x": {"type": "number", "format": "float", "description": "X. This is a float type value."},
            # dict: object, its properties converted the same way
            "d": {"type": "object", "description": "D.", "properties": {
                "lo": {"type": "number", "format": "float", "description": "L. This is a float type value."},
                "s": {"type": "string", "description": "S."}}},
            # tuple: array; items mapped by type only (no format on items)
            "t": {"type": "array", "description": "T.", "items": {"type": "number"}},
            # any, a missing type and an unknown one: string
            "any": {"type": "string", "description": "A."},
            "notype": {"type": "string", "description": "N."},
            "odd": {"type": "string", "description": "O."},
            "rows": {"type": "array", "description": "R.", "items": {"type": "object", "properties": {
                "k": {"type": "integer", "description": "K."}}}},
            "grid": {"type": "array", "description": "G.", "items": {"type": "array", "items": {"type": "number"}}},
            "e": {"type": "string", "description": "E.", "enum": ["a", "b"], "default": "a"}}}}}]
    assert fn["name"] == "a.b.c" and fn["parameters"]["type"] == "dict", "the case itself is left as it was"


def test_every_sample_case_converts_to_plain_json_schema_types():
    cases = bfcl.load_cases(bfcl.CATEGORIES)
    assert [sum(c == k for c, _, _ in cases) for k in bfcl.CATEGORIES] == [250, 120, 120]
    assert all(a is not None for c, _, a in cases if c != "irrelevance")
    allowed = {"string", "integer", "number", "boolean", "array", "object"}

    def types(schema):
        if isinstance(schema, dict):
            if isinstance(schema.get("type"), str):
                yield schema["type"]
            for k, v in schema.items():
                if k in ("properties",):
                    for p in v.values():
                        yield from types(p)
                elif k == "items":
                    yield from types(v)
    for _, case, _ in cases:
        tools, names = bfcl.to_tools(case["function"])
        for t in tools:
            assert "." not in t["function"]["name"]
            assert set(types(t["function"]["parameters"])) <= allowed, case["id"]
        assert set(names.values()) == {f["name"] for f in case["function"]}


# ---------------------------------------------------------------- simple / multiple

def test_correct_call_with_optional_args_omitted():
    r = verdict(SIMPLE, ANSWER, reply([call("geometry_triangle_area", {"base": 10, "height": 5})]))
    assert r["valid"], r["why"]
    assert r["calls"] == [{"name": "geometry_triangle_area", "function": "geometry.triangle_area",
                           "arguments": {"base": 10, "height": 5}, "json_ok": True}]
    assert not r["malformed"] and not r["bad_json"] and r["shape"] is None


def test_optional_args_given_and_strings_normalized():
    # "Units." -> "units": BFCL drops spaces and ,./-_*^ and lowercases before comparing
    r = verdict(SIMPLE, ANSWER, reply([call("geometry_triangle_area",
                                            {"base": 10, "height": 5.0, "unit": "Units.", "round": False})]))
    assert r["valid"], r["why"]


@pytest.mark.parametrize("args, why", [
    ({"base": 10, "height": 6}, "wrong value for 'height'"),
    ({"base": 10}, "missing required parameter 'height'"),
    ({"base": 10, "height": 5, "color": "red"}, "unexpected parameter 'color'"),
    ({"base": 10, "height": 5, "unit": "meters"}, "wrong value for 'unit'"),
    ({"base": 10, "height": 5, "round": True}, "wrong value for 'round'"),
    # a float where the function says integer is a type error (only int -> float is allowed)
    ({"base": 10.0, "height": 5}, "wrong type for 'base'"),
    # a bool is not an int for BFCL's type(value) == int
    ({"base": True, "height": 5}, "wrong type for 'base'"),
    ({"base": "10", "height": 5}, "wrong type for 'base'"),
])
def test_wrong_arguments(args, why):
    r = verdict(SIMPLE, ANSWER, reply([call("geometry_triangle_area", args)]))
    assert not r["valid"] and r["why"].startswith(why), r["why"]


def test_answer_param_omitted_without_empty_string_is_wrong():
    answer = [{"geometry.triangle_area": {"base": [10], "height": [5.0], "unit": ["units"]}}]
    r = verdict(SIMPLE, answer, reply([call("geometry_triangle_area", {"base": 10, "height": 5})]))
    assert not r["valid"] and "'unit' omitted" in r["why"]


def test_extra_call_is_wrong():
    c = call("geometry_triangle_area", {"base": 10, "height": 5})
    r = verdict(SIMPLE, ANSWER, reply([c, c]))
    assert not r["valid"] and r["why"].startswith("wrong number of calls: 2")


def test_name_must_be_the_sent_one():
    # the dotted original was not offered (OpenAI names have no dots), so BFCL rejects it
    r = verdict(SIMPLE, ANSWER, reply([call("geometry.triangle_area", {"base": 10, "height": 5})]))
    assert not r["valid"] and r["calls"][0]["function"] is None


def test_multiple_picks_the_expected_function():
    ok = verdict(MULTIPLE, ANSWER, reply([call("geometry_triangle_area", {"base": 10, "height": 5})]))
    wrong = verdict(MULTIPLE, ANSWER, reply([call("geometry_circle_area", {"radius": 5})]))
    assert ok["valid"] and not wrong["valid"] and "expected 'geometry_triangle_area'" in wrong["why"]


def test_lists_dicts_and_the_variable_rule():
    fn = {"name": "f", "description": "", "parameters": {"type": "dict", "required": [], "properties": {
        "xs": {"type": "array", "items": {"type": "string"}, "description": ""},
        "fs": {"type": "array", "items": {"type": "float"}, "description": ""},
        "d": {"type": "dict", "description": "", "properties": {}},
        "n": {"type": "integer", "description": ""}}}}
    case = {"id": "simple_python_y", "function": [fn]}
    answer = [{"f": {"xs": [["New York", "LA"], ""], "fs": [[1.5, 2.0], ""], "d": [{"lo": [1], "hi": [2, ""]}, ""],
                     "n": ["n_max", ""]}}]

    def ok(args):
        return verdict(case, answer, reply([call("f", args)]))["valid"]
    assert ok({"xs": ["new york", "L.A."]})          # list elements normalized like strings
    assert not ok({"xs": ["LA", "New York"]})       # order matters
    assert ok({"xs": []})                           # BFCL reads "" as the empty list
    assert ok({"fs": [1.5, 2.0]})
    # BFCL's element type check falls back to the answer's own type (a list), and then
    # compares with Python's ==, where 2 == 2.0: an int inside a float list passes
    assert ok({"fs": [1.5, 2]})
    assert not ok({"fs": ["1.5", 2.0]})
    assert ok({"d": {"lo": 1}})                     # hi may be omitted ("" among its values)
    assert not ok({"d": {"hi": 2}})                 # lo may not
    assert not ok({"d": {"lo": 1, "mid": 0}})       # nor may a key the answer lacks
    # the answer holds a string for an integer: BFCL takes it as a variable name, so the
    # string passes the type check and is compared as is
    assert ok({"n": "n_max"}) and not ok({"n": "N_MAX"}) and not ok({"n": 3})


# ---------------------------------------------------------------- calls left in text, bad JSON

FENCED = '```json\n{\n  "name": "geometry_triangle_area",\n  "arguments": {"base": 10, "height": 5}\n}\n```'


@pytest.mark.parametrize("text, shape", [
    (FENCED, "fenced_json"),
    ('<tool_call>\n{"name": "geometry_triangle_area", "arguments": {"base": 10}}\n</tool_call>', "tool_call_tag"),
    ('[TOOL_CALLS][{"name": "geometry_triangle_area", "arguments": {}}]', "mistral_tag"),
    ('Sure: {"name": "geometry_triangle_area", "parameters": {"base": 10}} done', "bare_json"),
    ('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]', "bare_json"),
    ("{'name': 'geometry_triangle_area', 'arguments': {'base': 10}}", "loose_json"),
    ("geometry_triangle_area(base=10, height=5)", "python_call"),
    ("The area is 25 square units.", None),
    ('```json\n{"area": 25}\n```', None),
])
def test_text_shapes(text, shape):
    assert bfcl.text_calls(text, ["geometry_triangle_area"])[0] == shape


def test_calls_found_in_text():
    two = ('<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
           '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>')
    assert bfcl.text_calls(two) == ("tool_call_tag", [{"name": "a", "arguments": {"x": 1}},
                                                      {"name": "b", "arguments": {}}])
    # an unclosed tag (cut at max_tokens, or the model stopped early) still holds its call
    assert bfcl.text_calls('<tool_call>\n{"name": "a", "arguments": {}}')[1] == [{"name": "a", "arguments": {}}]
    fenced_list = 'Here:\n```json\n[{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"y": 2}}]\n```\nDone.'
    assert bfcl.text_calls(fenced_list) == ("fenced_json", [{"name": "a", "arguments": {}},
                                                            {"name": "b", "parameters": {"y": 2}}])
    assert bfcl.text_calls("{'name': 'a', 'arguments': {}}") == ("loose_json", [])


def test_call_left_in_text_is_malformed_and_wrong():
    r = verdict(SIMPLE, ANSWER, reply(None, FENCED))
    assert not r["valid"] and r["malformed"] and r["shape"] == "fenced_json" and r["calls"] == []
    assert r["why"].startswith("wrong number of calls: 0")
    # ... though a parser that took the fenced call would have scored it right
    assert r["valid_text_parsed"]
    wrong = verdict(SIMPLE, ANSWER, reply(None, FENCED.replace('"height": 5', '"height": 6')))
    assert not wrong["valid"] and not wrong["valid_text_parsed"]


def test_arguments_not_json():
    r = verdict(SIMPLE, ANSWER, reply([call("geometry_triangle_area", '{"base": 10, "height": 5')]))
    assert not r["valid"] and r["bad_json"] and not r["malformed"] and "not valid JSON" in r["why"]


# ---------------------------------------------------------------- irrelevance

def test_irrelevance():
    assert verdict(IRRELEVANT, None, reply(None, "I cannot compute that with the tools I have."))["valid"]
    assert verdict(IRRELEVANT, None, reply([], ""))["valid"]
    made = verdict(IRRELEVANT, None, reply([call("geometry_circle_area", {"radius": 1})]))
    assert not made["valid"] and made["why"] == "made a call where none fits"
    # even a call with no arguments, or to a name not offered, is a call
    assert not verdict(IRRELEVANT, None, reply([call("x", {})]))["valid"]
    # a call left in the text: the client got none, so BFCL scores it right; it is still malformed
    r = verdict(IRRELEVANT, None, reply(None, FENCED))
    assert r["valid"] and r["malformed"] and not r["valid_text_parsed"]
    # BFCL's decoder fails on arguments that are not JSON, which it reads as "no call"
    r = verdict(IRRELEVANT, None, reply([call("geometry_circle_area", "{radius: 1")]))
    assert r["valid"] and r["bad_json"]


def test_summary_counts():
    recs = [verdict(SIMPLE, ANSWER, reply([call("geometry_triangle_area", {"base": 10, "height": 5})])),
            verdict(SIMPLE, ANSWER, reply(None, FENCED, "stop")),
            verdict(IRRELEVANT, None, reply(None, "no", "length")),
            {"id": "irrelevance_z", "category": "irrelevance", "valid": False, "error": "HTTP 400: tools"}]
    rows = {r["category"]: r for r in bfcl.summarize(recs, ["simple_python", "irrelevance"])}
    assert rows["simple_python"] == {"category": "simple_python", "cases": 2, "correct": 1, "accuracy": 0.5,
                                     "accuracy_text_parsed": 1.0, "tool_calls": 1, "malformed": 1,
                                     "malformed_rate": 0.5, "bad_json": 0, "cut": 0, "errors": 0}
    assert (rows["irrelevance"]["correct"], rows["irrelevance"]["cut"], rows["irrelevance"]["errors"]) == (1, 1, 1)
    assert (rows["overall"]["cases"], rows["overall"]["correct"], rows["overall"]["malformed"]) == (4, 2, 1)


# ---------------------------------------------------------------- the client, against a stub

class Stub(http.server.BaseHTTPRequestHandler):
    """Answers a chat completion by the first tool's name: a right call for the first simple
    case, a fenced call in text for the first multiple case, prose for irrelevance."""
    bodies = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.bodies.append((self.path, body))
        name = body["tools"][0]["function"]["name"]
        if name == "calculate_triangle_area":
            rep = reply([call(name, {"base": 10, "height": 5})])
        elif body["messages"][0]["content"].startswith("Can I find the dimensions"):
            rep = reply(None, '```json\n{"name": "triangle_properties_get", "arguments": {"side1": 5}}\n```')
        else:
            rep = reply(None, "That is not something these tools do.")
        data = json.dumps(rep).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def test_client_against_a_stub(tmp_path):
    Stub.bodies.clear()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "cases.jsonl"
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl"), "--url",
                            f"http://127.0.0.1:{srv.server_port}/v1", "--model", "m", "--limit", "1", "--json",
                            "--out", str(out)], capture_output=True, text=True, timeout=60)
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    rows = {r["category"]: r for r in s["rows"]}
    assert [rows[c]["correct"] for c in ("simple_python", "multiple", "irrelevance", "overall")] == [1, 0, 1, 2]
    assert rows["multiple"]["malformed"] == 1 and rows["overall"]["malformed_rate"] == pytest.approx(1 / 3)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["simple_python_0", "multiple_0", "irrelevance_0"]
    assert recs[1]["shape"] == "fenced_json" and recs[1]["reply"]["content"].startswith("```json")
    assert rows["multiple"]["accuracy_text_parsed"] == 0  # the stub's fenced call has the wrong arguments
    # the kept replies score the same again, without a server
    p2 = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl"), "--rescore", str(out), "--json"],
                        capture_output=True, text=True, timeout=60)
    assert p2.returncode == 0, p2.stderr
    assert json.loads(p2.stdout)["rows"] == s["rows"]
    path, body = next(b for b in Stub.bodies if b[1]["tools"][0]["function"]["name"] == "calculate_triangle_area")
    assert path == "/v1/chat/completions"
    assert (body["model"], body["temperature"], body["tool_choice"]) == ("m", 0, "auto")
    assert body["messages"] == [{"role": "user", "content": "Find the area of a triangle with a base of 10 units "
                                                            "and height of 5 units."}]


def test_usage_errors():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl")], capture_output=True, text=True)
    assert p.returncode == 2 and "--url" in p.stderr
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl"), "--url", "http://x/v1", "--categories", "java"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "unknown category" in p.stderr


FAKE_SERVER = '''#!/usr/bin/env python3
import http.server, json, sys
argv = sys.argv[1:]
if argv == ["--version"]:
    print("fake 1.0 (commit abc)")
    sys.exit(0)
assert argv[:3] == ["serve", "-m", "x.gguf"], argv
port = int(argv[argv.index("--port") + 1])
print("fake server on", port, file=sys.stderr, flush=True)

class H(http.server.BaseHTTPRequestHandler):
    def reply(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply({"status": "ok"})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        sys.stderr.write("request\\n" * 2500)  # 20 KB: four fill a pipe
        self.reply({"choices": [{"message": {"role": "assistant", "content": "No tool fits."},
                                 "finish_reason": "stop"}]})

http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_starts_and_stops_the_server(tmp_path):
    fake = tmp_path / "cinder"
    fake.write_text(FAKE_SERVER)
    fake.chmod(0o755)
    log = tmp_path / "server.log"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bfcl"), "--cinder", str(fake), "-m", "x.gguf",
                        "--categories", "irrelevance", "--limit", "4", "--json", "--server-log", str(log)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["command"].startswith(f"{fake} serve -m x.gguf --port ") and "-t 2" in s["command"]
    assert s["build"] == "fake 1.0 (commit abc)"
    assert s["model"] == "x" and s["threads"] == 2 and s["server_log"] == str(log)
    assert isinstance(s["load1_before"], float) and isinstance(s["load1_after"], float)
    assert s["rows"][0]["correct"] == 4
    assert log.read_text().count("request") == 10000
    assert subprocess.run(["pgrep", "-f", str(fake)], capture_output=True).returncode == 1, "server left running"
