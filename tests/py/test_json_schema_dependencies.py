"""JSON Schema's dependency keywords in cinder's grammar: draft 7's `dependencies` (a list
of names, or a schema, per name) and 2019-09's `dependentRequired` / `dependentSchemas`.

Truth: Python's `jsonschema` (Draft7Validator for `dependencies`, Draft202012Validator
for the two later keywords, which draft 2020-12 reads and draft 7 does not) on every
object the test makes from a schema's property names: each subset of them, each name with
each of a few values, serialized compactly in the schema's property order, the one
spelling cinder's compact grammar writes. On those texts cinder's verdict
(cn_grammar_check_text, through libcinder.so with ctypes, against stories260K's
tokenizer) must equal jsonschema's, acceptance and refusal alike. The real MaskBench
schemas that use `dependencies` are checked to compile (../shared/testdata/maskbench)."""
import ctypes
import itertools
import json
import os
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
os.environ.setdefault("CINDER_LIB", str(ROOT / "build" / "libcinder.so"))
sys.path.insert(0, str(ROOT / "python"))
import cinder  # noqa: E402

_lib = cinder._lib
_lib.cn_tokenizer_load_file.restype = ctypes.c_int
_lib.cn_tokenizer_load_file.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(cinder._Error)]
_lib.cn_tokenizer_free.argtypes = [ctypes.c_void_p]
_lib.cn_grammar_check_text.restype = ctypes.c_bool
_lib.cn_grammar_check_text.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]


@pytest.fixture(scope="module")
def tok():
    t, err = ctypes.c_void_p(), cinder._Error()
    path = TESTDATA / "models" / "stories260K.gguf"
    cinder._check(_lib.cn_tokenizer_load_file(str(path).encode(), ctypes.byref(t), ctypes.byref(err)), err)
    yield t
    _lib.cn_tokenizer_free(t)


def compile_schema(tok, schema):
    """The compiled grammar (a handle to free), or CinderError with cinder's message."""
    src = json.dumps(schema).encode()
    p = cinder._grammar_default()
    p.kind, p.source, p.source_len = 0, src, len(src)  # CN_GRAMMAR_JSON_SCHEMA, compact
    g, err = ctypes.c_void_p(), cinder._Error()
    cinder._check(cinder._grammar_compile(tok, ctypes.byref(p), ctypes.byref(g), ctypes.byref(err)), err)
    return g


def objects(names, values):
    """Every object over names (a subset, in the given order), each name with each value."""
    for k in range(len(names) + 1):
        for subset in itertools.combinations(names, k):
            for vals in itertools.product(values, repeat=k):
                yield dict(zip(subset, vals))


# (schema, the validator that reads its keywords, the values each name takes)
S = {"type": "string"}
CASES = [
    # the list form: a needs b and c; d needs a
    ({"type": "object", "properties": {"a": {}, "b": {}, "c": {}, "d": {}},
      "dependencies": {"a": ["b", "c"], "d": ["a"]}}, jsonschema.Draft7Validator, [1]),
    # the schema form: with a, b must be a string; with c, an object also needs d
    ({"type": "object", "properties": {"a": {}, "b": {}, "c": {}, "d": {}},
      "dependencies": {"a": {"properties": {"b": S}}, "c": {"required": ["d"]}}},
     jsonschema.Draft7Validator, [1, "s"]),
    # both forms in one object, additionalProperties false, a required name (its
    # dependency always holds) and a forbidden one (its dependency never applies)
    ({"type": "object", "properties": {"a": {}, "b": {}, "c": {"type": "integer"}, "d": {}, "e": False},
      "required": ["a"], "additionalProperties": False,
      "dependencies": {"a": {"properties": {"c": {"minimum": 1}}}, "b": ["d"], "e": ["a"], "d": {"required": ["c"]}}},
     jsonschema.Draft7Validator, [0, 2]),
    # a dependency that no object can meet: a is then never allowed
    ({"type": "object", "properties": {"a": {}, "b": False, "c": {}},
      "dependencies": {"a": ["b"], "c": False}}, jsonschema.Draft7Validator, [1]),
    # untyped: non-objects are not touched by dependencies
    ({"properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}}, jsonschema.Draft7Validator, [1]),
    # the later keywords, together, and merged through allOf with another part's
    ({"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
      "dependentRequired": {"a": ["b"]}, "dependentSchemas": {"b": {"properties": {"c": S}}},
      "allOf": [{"dependentRequired": {"c": ["a"]}}]}, jsonschema.Draft202012Validator, [1, "s"]),
    # a chain through a $ref'd definition, nested in a property
    ({"type": "object", "properties": {"o": {"$ref": "#/$defs/o"}},
      "$defs": {"o": {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
                      "dependentRequired": {"a": ["b"], "b": ["c"]}}}}, jsonschema.Draft202012Validator, [1]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_dependencies_agree_with_jsonschema(tok, case):
    schema, validator, values = CASES[case]
    v = validator(schema)
    g = compile_schema(tok, schema)
    try:
        if "o" in schema["properties"]:  # the nested case: the objects go one level down
            inner = schema["$defs"]["o"]["properties"]
            docs = [{"o": o} for o in objects(list(inner), values)] + [{}, {"o": 1}]
        else:
            docs = list(objects(list(schema["properties"]), values))
            if "type" not in schema:
                docs += [1, "x", [1], None]
        n_valid = 0
        for doc in docs:
            text = json.dumps(doc, separators=(",", ":"))
            want = v.is_valid(doc)
            n_valid += want
            got = _lib.cn_grammar_check_text(g, text.encode(), len(text.encode()))
            assert got == want, f"{text}: cinder says {got}, jsonschema {want} ({json.dumps(schema)})"
        assert 0 < n_valid < len(docs), "a case should have documents of both kinds"
    finally:
        cinder._grammar_free(g)


def test_bad_dependency_values_name_their_pointer(tok):
    for schema, msg in (({"dependencies": {"a": 1}}, "at /dependencies/a"),
                        ({"dependencies": {"a": ["b", 2]}}, "at /dependencies/a"),
                        ({"properties": {"p": {"dependentRequired": {"a": {}}}}},
                         "at /properties/p/dependentRequired/a"),
                        ({"dependentSchemas": {"a": ["b"]}}, "at /dependentSchemas/a"),
                        ({"dependencies": []}, "at /dependencies")):
        with pytest.raises(cinder.CinderError) as e:
            compile_schema(tok, schema)
        assert msg in str(e.value), (schema, str(e.value))


def uses_dependencies(x, parent=None):
    """Whether schema x uses the keyword (not a property or definition of that name)."""
    if isinstance(x, list):
        return any(uses_dependencies(e) for e in x)
    if not isinstance(x, dict):
        return False
    names = parent in ("properties", "patternProperties", "definitions", "$defs")
    return any((k == "dependencies" and not names and isinstance(v, dict) and v) or uses_dependencies(v, k)
               for k, v in x.items())


def test_maskbench_schemas_with_dependencies_compile(tok):
    """The sample's schemas that use `dependencies` (refused for it before): none is
    refused for it now, and most compile (the rest stop at another keyword)."""
    files = sorted((TESTDATA / "maskbench").glob("*.json"))
    if not files:
        pytest.skip("no MaskBench sample")
    schemas = [json.loads(f.read_text(encoding="utf-8"))["schema"] for f in files]
    uses = [s for s in schemas if uses_dependencies(s)]
    n_ok = 0
    for schema in uses:
        try:
            cinder._grammar_free(compile_schema(tok, schema))
            n_ok += 1
        except cinder.CinderError as e:
            assert "'dependencies'" not in str(e), str(e)
    assert len(uses) >= 20 and n_ok >= 7, (len(uses), n_ok)
