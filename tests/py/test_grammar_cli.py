"""`cinder run` with structured output (--json-schema, --json-object, --grammar, --regex,
--choice, --flexible-ws) and `cinder grammar check`, from the outside.

Truth used here, independent of cinder's grammar engine: Python's `jsonschema` for every
document a schema-constrained run finished ("stop"), `json` for --json-object, `re` for
regexes and for the GBNF grammar's language written as a regex, the list itself for
choices; for `grammar check`, `jsonschema` and `re` again on texts written by hand. The
real model is Qwen2.5-Coder 0.5B (from $CINDER_MODELS or ~/.cache/cinder/models, as
scripts/setup.sh puts it; missing is a failure), sampled at several seeds; stories260K
(tiny, and no JSON in its training) for the cheap cases and `grammar check`'s tokenizer.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
STORIES = str(TESTDATA / "models" / "stories260K.gguf")


def qwen():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert m.exists(), f"model {m} is missing: run scripts/setup.sh (or set CINDER_MODELS)"
    return str(m)


def run(cinder, *args, stdin=None, timeout=600):
    return subprocess.run([str(cinder), *args], capture_output=True, text=True, cwd=ROOT,
                          input=stdin, timeout=timeout)


def run_json(cinder, *args):
    r = run(cinder, "run", "--json", "-t", "2", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def check_person(text):
    doc = json.loads(text)
    jsonschema.validate(doc, PERSON, format_checker=jsonschema.FormatChecker())


def test_json_schema_inline_and_file_validate(cinder, tmp_path):
    schema_file = tmp_path / "person.json"
    schema_file.write_text(json.dumps(PERSON, indent=2))
    finished = 0
    for seed, where in ((1, json.dumps(PERSON)), (2, str(schema_file)), (3, str(schema_file))):
        out = run_json(cinder, "-m", qwen(), "--chat", "-p", "Describe a user of a website as JSON.",
                       "--json-schema", where, "--temp", "0.8", "--seed", str(seed), "-n", "128")
        if out["finish_reason"] == "stop":
            check_person(out["text"])
            finished += 1
    assert finished >= 2, "most documents should finish within 128 tokens"


def test_json_schema_flexible_ws_validates(cinder):
    out = run_json(cinder, "-m", qwen(), "--chat", "-p", "A user as pretty-printed JSON.", "--json-schema",
                   json.dumps(PERSON), "--flexible-ws", "--temp", "0.7", "--seed", "5", "-n", "160")
    assert out["finish_reason"] == "stop", out
    check_person(out["text"])


def test_json_object(cinder):
    for seed in (1, 2):
        out = run_json(cinder, "-m", qwen(), "--chat", "-p", "Any JSON object, please.", "--json-object",
                       "--temp", "1.0", "--seed", str(seed), "-n", "128")
        if out["finish_reason"] == "stop":
            assert isinstance(json.loads(out["text"]), dict), out["text"]


def test_regex_on_garbage_and_on_qwen(cinder):
    pattern = r"[0-9]{3}-[0-9]{3}-[0-9]{4}"
    for model in (STORIES, qwen()):
        out = run_json(cinder, "-m", model, "-p", "Call me at", "--regex", pattern, "--temp", "1.0", "--seed", "4")
        assert out["finish_reason"] == "stop", out
        assert re.fullmatch(pattern, out["text"]), out["text"]


def test_gbnf_file(cinder, tmp_path):
    g = tmp_path / "answer.gbnf"
    g.write_text('# yes, no, or a number\nroot ::= ("yes" | "no" | num) "."\nnum ::= [1-9] [0-9]{0,3}\n')
    for seed in (1, 2, 3):
        out = run_json(cinder, "-m", STORIES, "-p", "The answer is", "--grammar", str(g), "--temp", "1.2",
                       "--seed", str(seed))
        assert out["finish_reason"] == "stop", out
        assert re.fullmatch(r"(yes|no|[1-9][0-9]{0,3})\.", out["text"]), out["text"]


def test_choice_with_escapes(cinder):
    seen = set()
    for seed in range(1, 13):
        out = run_json(cinder, "-m", STORIES, "-p", "She said", "--choice", r"yes\, please,no,back\\slash",
                       "--temp", "2", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", str(seed))
        assert out["finish_reason"] == "stop", out
        assert out["text"] in ("yes, please", "no", "back\\slash"), out["text"]
        seen.add(out["text"])
    assert len(seen) >= 2


def test_choice_streams_to_stdout(cinder):
    r = run(cinder, "run", "-m", STORIES, "-p", "x", "--choice", "alpha,beta", "--seed", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip("\n") in ("alpha", "beta")
    assert "finish stop" in r.stderr


@pytest.mark.parametrize("args, code, msg", [
    (["--json-schema", "{\"type\": "], 2, "--json-schema"),
    (["--json-schema", "{\"type\":\"string\",\"not\":{}}"], 2, "not"),
    (["--regex", "a(b"], 2, "--regex"),
    (["--regex", ""], 2, "empty"),
    (["--choice", "a,,b"], 2, "empty"),
    (["--choice", r"a\b"], 2, "backslash"),
    (["--regex", "a", "--choice", "b"], 2, "give one"),
    (["--flexible-ws", "--regex", "a"], 2, "JSON"),
    (["--choice", "a", "--beams", "2"], 2, "beams"),
    (["--grammar", "/nonexistent/g.gbnf"], 1, "cannot open"),
    (["--grammar", "__GBNF_BAD__"], 2, "--grammar"),
])
def test_bad_grammars_are_clear_errors(cinder, tmp_path, args, code, msg):
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "a" | \n')
    args = [str(bad) if a == "__GBNF_BAD__" else a for a in args]
    r = run(cinder, "run", "-m", STORIES, "-p", "x", *args)
    assert r.returncode == code, (r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cinder: ") and msg in lines[0], r.stderr


# ---- cinder grammar check ----

def check(cinder, *args, stdin=None):
    return run(cinder, "grammar", "check", "-m", STORIES, *args, stdin=stdin)


def compact(doc):
    return json.dumps(doc, separators=(",", ":"))


def test_check_agrees_with_jsonschema(cinder, tmp_path):
    schema = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
                                               "tag": {"enum": ["a", "b"]}},
              "required": ["id"], "additionalProperties": False}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(schema))
    # in the schema's property order, compact: where cinder's compact grammar and
    # jsonschema must agree
    texts = [compact({"id": 3}), compact({"id": 3, "tag": "b"}), compact({"id": 0}), compact({"id": 3, "tag": "c"}),
             compact({"tag": "a"}), compact({"id": 3, "x": 1}), compact({"id": 1.5}), "{\"id\":12", "[]"]
    for t in texts:
        try:
            jsonschema.validate(json.loads(t), schema)
            want = 0
        except (jsonschema.ValidationError, json.JSONDecodeError):
            want = 1
        r = check(cinder, "--json-schema", str(f), "--text", t)
        assert r.returncode == want, (t, r.stdout, r.stderr)
        assert r.stdout.startswith("match" if want == 0 else "no match"), r.stdout


def test_check_regex_file_stdin_and_errors(cinder, tmp_path):
    pattern = r"(ab|cd)+[0-9]?"
    for t in ["ab", "abcd7", "abc", "", "ab77", "x", "cdab"]:
        want = 0 if re.fullmatch(pattern, t) else 1
        assert check(cinder, "--regex", pattern, "--text", t).returncode == want, t
        assert check(cinder, "--regex", pattern, stdin=t).returncode == want, t
        f = tmp_path / "t.txt"
        f.write_text(t)
        assert check(cinder, "--regex", pattern, "--file", str(f)).returncode == want, t
    r = check(cinder, "--choice", "yes,no", "--text", "yex")
    assert r.returncode == 1 and "byte 2" in r.stdout, r.stdout
    r = check(cinder, "--choice", "yes,no", "--text", "ye")
    assert r.returncode == 1 and "before it is complete" in r.stdout, r.stdout
    assert check(cinder, "--text", "x").returncode == 2
    assert check(cinder, "--regex", "a(", "--text", "a").returncode == 2
    assert check(cinder, "--regex", "a", "--text", "a", "--file", "f").returncode == 2
    assert check(cinder, "--regex", "a", "--file", "/nonexistent").returncode == 2
    assert run(cinder, "grammar", "frobnicate").returncode == 2
    r = run(cinder, "grammar", "check", "--help")
    assert r.returncode == 0 and "--json-schema" in r.stdout
