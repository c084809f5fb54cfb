"""POST /v1/embeddings through `cinder serve` with the official `openai` client
(`client.embeddings.create`), on Qwen2.5-Coder-0.5B.

Truth used here: OpenAI's response shape; the same vectors from `cinder embed` (another
door onto the same library: identical to 1e-6) and from the Python package; base64 is the
little-endian float32 bytes of the float form; usage counts the tokens /tokenize gives.
Cosine against llama-server --embeddings on the same model and pooling: bench/embed
(BENCHMARKS.md). Bad inputs are 400s naming the field, never a crash.
"""
import base64
import json
import math
import struct
import subprocess

import openai
import pytest
from test_serve import Server, binaries
from test_serve_fim import qwen

M = "qwen"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "int main(void) { return 0; }", "héllo wörld ✓"]


@pytest.fixture(scope="module", params=binaries(), ids=lambda p: p.parent.name)
def srv(request):
    s = Server(request.param, qwen(), "--parallel", "2", "--ctx", "1024", "--alias", M, "--embd-batch", "64")
    s.binary = request.param
    yield s
    s.stop()


def test_openai_client_shapes_and_usage(srv):
    c = srv.client()
    r = c.embeddings.create(model=M, input=TEXTS, encoding_format="float")
    assert r.object == "list" and r.model == M and len(r.data) == 3
    for i, d in enumerate(r.data):
        assert d.object == "embedding" and d.index == i and len(d.embedding) == 896
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-4
    n_tok = sum(len(json.loads(srv.request("POST", "/tokenize", {"content": t})[1])["tokens"]) for t in TEXTS)
    assert r.usage.prompt_tokens == r.usage.total_tokens == n_tok
    # the client's default asks for base64 and decodes it: the same numbers
    b = c.embeddings.create(model=M, input=TEXTS)
    for x, y in zip(r.data, b.data):
        assert max(abs(p - q) for p, q in zip(x.embedding, y.embedding)) < 1e-6
    one = c.embeddings.create(model=M, input=TEXTS[1], encoding_format="float")
    assert len(one.data) == 1 and max(abs(p - q) for p, q in zip(one.data[0].embedding, r.data[1].embedding)) < 1e-6


def test_base64_is_little_endian_float32(srv):
    st, body, _ = srv.post("/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"})
    st2, flt, _ = srv.post("/v1/embeddings", {"input": TEXTS[0]})
    assert st == st2 == 200
    raw = base64.b64decode(body["data"][0]["embedding"])
    vec = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert len(vec) == 896 and max(abs(p - q) for p, q in zip(vec, flt["data"][0]["embedding"])) < 1e-6


def test_token_inputs_and_dimensions(srv):
    c = srv.client()
    ids = json.loads(srv.request("POST", "/tokenize", {"content": TEXTS[0]})[1])["tokens"]
    t = c.embeddings.create(model=M, input=ids, encoding_format="float")
    s = c.embeddings.create(model=M, input=TEXTS[0], encoding_format="float")
    assert max(abs(p - q) for p, q in zip(t.data[0].embedding, s.data[0].embedding)) < 1e-6
    two = c.embeddings.create(model=M, input=[ids, ids[:3]], encoding_format="float")
    assert len(two.data) == 2 and two.usage.prompt_tokens == len(ids) + 3
    ok = c.embeddings.create(model=M, input="x", dimensions=896, encoding_format="float")
    assert len(ok.data[0].embedding) == 896
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model=M, input="x", dimensions=256)
    assert e.value.body["param"] == "dimensions" and "does not support" in e.value.body["message"]


def test_same_vectors_as_cinder_embed(srv):
    out = subprocess.run([str(srv.binary), "embed", "-m", qwen(), "-t", "2", *TEXTS], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    cli = [json.loads(line) for line in out.stdout.splitlines()]
    r = srv.client().embeddings.create(model=M, input=TEXTS, encoding_format="float")
    assert len(cli) == 3
    for a, d in zip(cli, r.data):
        assert max(abs(p - q) for p, q in zip(a, d.embedding)) < 1e-6


@pytest.mark.parametrize("body,param,status", [
    ({}, "input", 400),
    ({"input": None}, "input", 400),
    ({"input": ""}, "input", 400),
    ({"input": []}, "input", 400),
    ({"input": [""]}, "input", 400),
    ({"input": [[]]}, "input", 400),
    ({"input": 5}, "input", 400),
    ({"input": [1, "a"]}, "input", 400),
    ({"input": ["a", 3]}, "input", 400),
    ({"input": [-1]}, "input", 400),
    ({"input": [10 ** 9]}, "input", 400),
    ({"input": [[1, 2], [1.5]]}, "input", 400),
    ({"input": "word " * 200}, "input", 400),  # past --embd-batch 64
    ({"input": ["a"] * 2049}, "input", 400),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", 400),
    ({"input": "a", "dimensions": 0}, "dimensions", 400),
    ({"input": "a", "dimensions": "896"}, "dimensions", 400),
    ({"input": "a", "model": "other"}, "model", 404),
    ({"input": "a", "pooling": "mean"}, "pooling", 400),
    ({"input": "a", "user": 3}, "user", 400),
])
def test_bad_inputs(srv, body, param, status):
    st, r, _ = srv.post("/v1/embeddings", body)
    assert st == status, (st, r)
    assert r["error"]["param"] == param, r


def test_raw_bodies_and_method(srv):
    for raw in (b"", b"{", b"[]", b"null", b'"x"'):
        st, body, _ = srv.request("POST", "/v1/embeddings", raw)
        assert st == 400, (raw, body)
    st, _, hdr = srv.request("GET", "/v1/embeddings")
    assert st == 405
    assert srv.post("/v1/embeddings", {"input": "still serving"})[0] == 200


def test_pooling_flag():
    s = Server(binaries()[0], qwen(), "--ctx", "512", "--alias", M, "--pooling", "mean")
    try:
        mean = s.client().embeddings.create(model=M, input=TEXTS[0], encoding_format="float").data[0].embedding
    finally:
        s.stop()
    out = subprocess.run([str(binaries()[0]), "embed", "-m", qwen(), "-t", "2", "--pooling", "mean", TEXTS[0]],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "pooling mean" in out.stderr
    assert max(abs(p - q) for p, q in zip(json.loads(out.stdout), mean)) < 1e-6
    bad = subprocess.run([str(binaries()[0]), "serve", "-m", qwen(), "--pooling", "max"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "pooling" in bad.stderr
