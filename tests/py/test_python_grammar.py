"""Structured output from the Python package (python/cinder over build/libcinder.so):
generate / chat / stream with json_schema=, grammar=, regex=, choices=, on Qwen2.5-Coder
0.5B Instruct. Truth: Python's `json` + `jsonschema` (Draft 2020-12) for JSON whenever
finish_reason is "stop", `re.fullmatch` for a regex and for a GBNF grammar's language
written as a regex by hand, list membership for choices; errors are CinderError naming
the argument, as the package's other errors are."""
import json
import os
import re
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("CINDER_LIB", str(ROOT / "build" / "libcinder.so"))
sys.path.insert(0, str(ROOT / "python"))
import cinder  # noqa: E402


def qwen():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not m.exists():
        pytest.skip(f"model {m} is missing: run scripts/fetch_models.sh")
    return str(m)


@pytest.fixture(scope="module")
def model():
    with cinder.Model(qwen(), n_ctx=1024, n_threads=2) as m:
        yield m


SCHEMA = {"type": "object",
          "properties": {"title": {"type": "string", "maxLength": 40},
                         "year": {"type": "integer", "minimum": 1900, "maximum": 2100}},
          "required": ["title", "year"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Give me a film as JSON with its title and year."}]


def test_chat_json_schema_validates(model):
    r = model.chat(ASK, json_schema=SCHEMA, temperature=0, max_tokens=120)
    assert r.finish_reason == "stop", r
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(r.text))


def test_generate_json_schema_text_and_one_compile(model):
    spaced = json.dumps(SCHEMA, indent=2)  # the same schema, spelled otherwise
    r = model.generate("A film, as JSON: ", json_schema=spaced, temperature=0.7, seed=3, max_tokens=120)
    if r.finish_reason == "stop":
        jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(r.text))
    model.generate("Another: ", json_schema=SCHEMA, temperature=0, max_tokens=5)
    keys = [k for k in model._grammars if k[0] == cinder.GRAMMAR_JSON_SCHEMA]
    assert len(keys) == 1, keys  # both spellings share one compiled grammar


def test_regex(model):
    pat = r"[A-Z][a-z]+ [0-9]{1,3}"
    r = model.chat([{"role": "user", "content": "A street name and a house number."}], regex=pat, temperature=0,
                   max_tokens=30)
    assert r.finish_reason == "stop", r
    assert re.fullmatch(pat, r.text), r.text


def test_choices_and_stream(model):
    choices = ["red", "green", "blue"]
    r = model.chat([{"role": "user", "content": "What colour is the sky?"}], choices=choices, temperature=0,
                   max_tokens=8)
    assert r.finish_reason == "stop" and r.text in choices, r
    text = "".join(model.stream([{"role": "user", "content": "What colour is grass?"}], choices=choices,
                                temperature=0, max_tokens=8))
    assert text in choices, text


def test_gbnf(model):
    g = 'root ::= "yes" | "no" | "maybe, " [a-z]+'
    r = model.chat([{"role": "user", "content": "Is it raining?"}], grammar=g, temperature=0, max_tokens=16)
    if r.finish_reason == "stop":
        assert re.fullmatch(r"yes|no|maybe, [a-z]+", r.text), r.text
    else:
        assert re.fullmatch(r"maybe, [a-z]*", r.text), r.text


def test_errors_name_the_argument(model):
    with pytest.raises(cinder.CinderError) as ei:
        model.generate("x", regex="a", choices=["a"], max_tokens=2)
    assert ei.value.status == "invalid_arg" and ei.value.param == "choices" and "regex" in str(ei.value)
    with pytest.raises(cinder.CinderError) as ei:
        model.generate("x", regex="(unclosed", max_tokens=2)
    assert ei.value.status == "invalid_arg" and ei.value.param == "regex" and str(ei.value).startswith("regex: ")
    with pytest.raises(cinder.CinderError) as ei:
        model.generate("x", grammar="root ::= (", max_tokens=2)
    assert ei.value.param == "grammar"
    with pytest.raises(cinder.CinderError) as ei:
        model.generate("x", json_schema="{not json", max_tokens=2)
    assert ei.value.param == "json_schema"
    with pytest.raises(cinder.CinderError) as ei:
        model.generate("x", json_schema={"type": "object", "properties": {"a": {"type": "wat"}}}, max_tokens=2)
    assert ei.value.param == "json_schema" and "/properties/a" in str(ei.value)
    with pytest.raises(cinder.CinderError):
        model.generate("x", choices=[], max_tokens=2)
    with pytest.raises(cinder.CinderError):
        model.generate("x", choices="ab", max_tokens=2)
    # and the model keeps working
    assert model.generate("Hello", max_tokens=3, temperature=0).finish_reason in ("stop", "length")


def test_the_cache_is_bounded(model):
    for i in range(cinder.GRAMMAR_CACHE + 3):
        model.generate("n: ", regex=f"{i}[0-9]", max_tokens=1, temperature=0)
    assert len(model._grammars) == cinder.GRAMMAR_CACHE
