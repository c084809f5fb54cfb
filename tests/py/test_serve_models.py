"""`cinder serve --models-dir DIR`: several models behind one server, each loaded by the
first request that names it, the least recently used idle one unloaded past
--models-max.

A temporary folder holds links to two small models (SmolLM2-135M-Instruct, Qwen2.5-Coder-
0.5B-Instruct), a truncated copy of one (a corrupt file) and, where a test needs a load
that lasts as long as it wants, a FIFO: loading it blocks in open() until the test writes,
so "a model is loading" is a state the test holds, not a timing.

Truth used here: the official `openai` client (models.list, chat to two models), each
model's greedy reply alone against the same request interleaved with the other model's
(identical: the engines are batch-invariant and separate), the server's own /metrics
parsed by prometheus_client, and the process's resident memory from /proc/PID/status
(compared with its peak, never with a time).
"""
import concurrent.futures as cf
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import openai
import pytest

from conftest import sanitized
from test_serve import ROOT, Server, binaries

MODELS = Path(os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models"))
SMOL, QWEN = "SmolLM2-135M-Instruct.Q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m"
HI = [{"role": "user", "content": "Say hello."}]


def models_dir(tmp: Path) -> Path:
    for m in (SMOL, QWEN):
        src = MODELS / f"{m}.gguf"
        assert src.exists(), f"model {src} is missing: run scripts/fetch_models.sh"
        (tmp / f"{m}.gguf").symlink_to(src)
    with open(MODELS / f"{SMOL}.gguf", "rb") as f:  # the header and half the vocabulary: corrupt
        (tmp / "broken.gguf").write_bytes(f.read(100_000))
    (tmp / "notes.txt").write_text("not a model")
    return tmp


class MultiServer(Server):
    def __init__(self, binary, folder, *args):  # Server's, with --models-dir instead of -m
        self.start([str(binary), "serve", "--models-dir", str(folder), "-t", "2", "--parallel", "2", "--ctx", "512",
                    *args])

    def maps_file(self, path: Path) -> bool:
        """Whether the process maps the file at path (its resolved name in /proc/PID/maps)."""
        target = str(path.resolve())
        return any(line.split(maxsplit=5)[5:] == [target]
                   for line in Path(f"/proc/{self.proc.pid}/maps").read_text().splitlines())

    def rss_kib(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def by_model(self, name):
        """{model_name: value} of one metric family."""
        return {lab.get("model_name"): v for lab, v in self.metrics().get(name, [])}


@pytest.fixture(scope="module", params=binaries(), ids=lambda p: p.parent.name)
def binary(request):
    return request.param


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return models_dir(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def multi(binary, folder):
    s = MultiServer(binary, folder, "--model-alias", f"coder={QWEN}", "--alias", "smol=" + SMOL + ".gguf")
    yield s
    s.stop()


def chat(server, model, **kw):
    r = server.client().chat.completions.create(model=model, messages=HI, max_tokens=8, temperature=0, **kw)
    return r


# ---- listing and routing ----

def test_models_list_every_gguf_with_aliases(multi):
    data = multi.client().models.list().data
    ids = sorted(m.id for m in data)
    assert ids == sorted([SMOL, QWEN, "broken", "coder", "smol"])  # notes.txt is not a model
    by_id = {m.id: m.model_dump() for m in data}
    assert by_id[QWEN]["aliases"] == ["coder"] and by_id["coder"]["alias_of"] == QWEN
    assert by_id["smol"]["alias_of"] == SMOL
    # the corrupt file is listed (the folder is not parsed to list it); asking for it fails
    assert by_id["broken"]["status"] in ("unloaded", "failed")


def test_chat_to_two_models_interleaved(multi):
    # each alone first (this loads both), then eight requests at once, alternating
    alone = {m: chat(multi, m).choices[0].message.content for m in (SMOL, QWEN)}
    assert alone[SMOL] and alone[QWEN] and alone[SMOL] != alone[QWEN]
    names = [SMOL, QWEN] * 4
    with cf.ThreadPoolExecutor(8) as ex:
        rs = list(ex.map(lambda m: chat(multi, m), names))
    for m, r in zip(names, rs):
        assert r.model == m and r.choices[0].message.content == alone[m]
    # an alias routes to its model, and answers in its canonical name
    r = chat(multi, "coder")
    assert r.model == QWEN and r.choices[0].message.content == alone[QWEN]
    per = multi.by_model("cinder:request_success_total")
    assert multi.by_model("cinder:model_loaded") == {SMOL: 1.0, QWEN: 1.0, "broken": 0.0}
    assert multi.by_model("cinder:models_loaded") == {None: 2.0}
    reqs = {}
    for lab, v in multi.metrics()["cinder:http_requests_total"]:
        if lab["endpoint"] == "/v1/chat/completions" and lab["status"] == "200":
            reqs[lab["model_name"]] = v
    assert reqs[SMOL] >= 5 and reqs[QWEN] >= 6
    assert per  # one series per model


def test_every_api_routes_by_model(multi):
    for m in (SMOL, QWEN):
        st, body, _ = multi.post("/v1/completions", {"model": m, "prompt": "def add(a, b):", "max_tokens": 4,
                                                     "temperature": 0})
        assert st == 200 and body["model"] == m
        st, body, _ = multi.post("/v1/messages", {"model": m, "max_tokens": 4, "messages": HI})
        assert st == 200 and body["model"] == m and body["type"] == "message"
        st, body, _ = multi.post("/v1/responses", {"model": m, "input": "hi", "max_output_tokens": 4})
        assert st == 200 and body["model"] == m
        st, body, _ = multi.post("/v1/messages/count_tokens", {"model": m, "messages": HI})
        assert st == 200 and body["input_tokens"] > 0
    # the same text through each model's own tokenizer
    st, a, _ = multi.post("/tokenize", {"model": SMOL, "content": "Grüße, 世界"})
    st2, b, _ = multi.post("/tokenize", {"model": QWEN, "content": "Grüße, 世界"})
    assert st == st2 == 200 and a["tokens"] != b["tokens"]
    st, d, _ = multi.post("/detokenize", {"model": QWEN, "tokens": b["tokens"]})
    assert st == 200 and d["content"] == "Grüße, 世界"


def test_embeddings_and_infill_route_by_model(multi, binary):
    """Each loaded model has its own embedder: /v1/embeddings answers in that model's
    width, with the vector `cinder embed` gives for the same file and text (same pooling,
    the model's default); /infill and `suffix` run on the model named."""
    texts = ["The lighthouse keeper climbed the stairs.", "int main(void) { return 0; }"]
    for m in (SMOL, QWEN):
        r = multi.client().embeddings.create(model=m, input=texts)
        assert r.model == m and len(r.data) == 2
        cli = subprocess.run([str(binary), "embed", "-m", str(MODELS / f"{m}.gguf"), "-t", "2", *texts],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert cli.returncode == 0, cli.stderr
        want = [json.loads(line) for line in cli.stdout.splitlines()]
        for got, ref in zip(r.data, want):
            assert len(got.embedding) == len(ref)
            assert max(abs(a - b) for a, b in zip(got.embedding, ref)) < 1e-5
    widths = {m: len(multi.client().embeddings.create(model=m, input="x").data[0].embedding) for m in (SMOL, QWEN)}
    assert widths[SMOL] != widths[QWEN]
    st, body, _ = multi.post("/infill", {"model": QWEN, "input_prefix": "def add(a, b):\n    return ",
                                         "input_suffix": "\n\nprint(add(1, 2))\n", "n_predict": 8, "temperature": 0})
    assert st == 200 and isinstance(body["content"], str) and body["content"]
    r = multi.client().completions.create(model="coder", prompt="def add(a, b):\n    return ", max_tokens=8,
                                          suffix="\n\nprint(add(1, 2))\n", temperature=0)
    assert r.model == QWEN and r.choices[0].text == body["content"]


def test_unknown_missing_and_bad_model(multi):
    c = multi.client()
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-4", messages=HI, max_tokens=2)
    assert e.value.code == "model_not_found" and e.value.body["param"] == "model"
    st, body, _ = multi.post("/v1/chat/completions", {"messages": HI, "max_tokens": 2})
    assert st == 400 and body["error"]["param"] == "model"
    st, body, _ = multi.post("/v1/chat/completions", {"model": 7, "messages": HI, "max_tokens": 2})
    assert st == 400 and body["error"]["param"] == "model"
    st, body, _ = multi.post("/v1/messages", {"model": "claude-x", "max_tokens": 2, "messages": HI})
    assert st == 404 and body["type"] == "error" and body["error"]["type"] == "not_found_error"


def test_corrupt_file_is_a_clear_error_and_the_others_keep_serving(multi, folder):
    c = multi.client()
    for _ in range(2):  # the second time from the remembered failure, the file unchanged
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(model="broken", messages=HI, max_tokens=2)
        assert e.value.status_code == 500 and e.value.code == "model_load_failed"
        assert "broken.gguf" in e.value.message and "could not be loaded" in e.value.message
        assert str(folder) not in e.value.message  # the server's paths are its own
    by_id = {m.id: m.model_dump() for m in c.models.list().data}
    assert by_id["broken"]["status"] == "failed" and by_id["broken"]["error"]
    assert multi.by_model("cinder:model_load_failures_total")["broken"] >= 1
    assert chat(multi, SMOL).choices[0].message.content


def test_a_load_does_not_block_other_models(binary, tmp_path):
    folder = models_dir(tmp_path)
    fifo = folder / "slow.gguf"
    os.mkfifo(fifo)
    s = MultiServer(binary, folder)
    try:
        chat(s, SMOL)
        with cf.ThreadPoolExecutor(1) as ex:
            slow = ex.submit(s.post, "/v1/chat/completions", {"model": "slow", "messages": HI, "max_tokens": 2})
            wait_for = time.time() + 30
            while s_status(s, "slow") != "loading":
                assert time.time() < wait_for, "the slow model never started loading"
                time.sleep(0.02)
            # "slow" is loading (blocked in open()): the server answers, other models serve
            assert s.get("/health")[0] == 200
            r = chat(s, SMOL)
            assert r.choices[0].message.content
            r = chat(s, QWEN)  # a model loaded while the other one loads
            assert r.choices[0].message.content
            assert s_status(s, "slow") == "loading"
            try:
                with open(fifo, "wb") as f:
                    f.write(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
            except BrokenPipeError:
                pass
            st, body, _ = slow.result(timeout=60)
        assert st == 500 and body["error"]["code"] == "model_load_failed"
        assert chat(s, SMOL).choices[0].message.content
    finally:
        s.stop()


def s_status(server, model):
    st, raw, _ = server.get("/v1/models")
    return {m["id"]: m["status"] for m in json.loads(raw)["data"]}.get(model)


# ---- --models-max: least recently used idle model unloaded, memory given back ----

def test_models_max_unloads_lru_and_rss_comes_back_down(binary, tmp_path):
    # What the server controls is checked on every build: the unloaded model's file is
    # no longer mapped. Resident memory is the allocator's business as much as the
    # server's (ASan's allocator keeps freed blocks in quarantine, and a loaded machine
    # moves the margins), so it is compared on the optimized build only.
    folder = models_dir(tmp_path)
    s = MultiServer(binary, folder, "--models-max", "1")
    optimized = not sanitized(binary)
    qwen_file = MODELS / f"{QWEN}.gguf"
    try:
        base = s.rss_kib()
        assert not s.maps_file(qwen_file)
        chat(s, QWEN)
        peak = s.rss_kib()
        assert s.maps_file(qwen_file)
        qwen_kib = qwen_file.stat().st_size // 1024
        if optimized:
            assert peak - base > qwen_kib // 2, (base, peak)  # its weights are resident
        chat(s, SMOL)  # loads SMOL: QWEN, idle and least recently used, is unloaded first
        after = s.rss_kib()
        assert not s.maps_file(qwen_file)  # the mapping is released
        assert s.maps_file(MODELS / f"{SMOL}.gguf")
        if optimized:
            assert after < peak - qwen_kib // 2, (base, peak, after)
        assert s.by_model("cinder:model_loaded") == {SMOL: 1.0, QWEN: 0.0, "broken": 0.0}
        assert s.by_model("cinder:model_unloads_total")[QWEN] == 1
        assert s.by_model("cinder:models_loaded") == {None: 1.0}
        # back to QWEN: SMOL goes, QWEN is loaded a second time
        chat(s, QWEN)
        loads = s.by_model("cinder:model_loads_total")
        assert loads[QWEN] == 2 and loads[SMOL] == 1
        assert s.by_model("cinder:model_unloads_total")[SMOL] == 1
        # a corrupt file does not cost the loaded model its place (checked before unloading)
        st, body, _ = s.post("/v1/chat/completions", {"model": "broken", "messages": HI, "max_tokens": 2})
        assert st == 500 and body["error"]["code"] == "model_load_failed"
        assert s.by_model("cinder:model_loaded")[QWEN] == 1.0
        assert chat(s, QWEN).choices[0].message.content
    finally:
        s.stop()


def test_models_max_never_unloads_a_busy_model(binary, tmp_path):
    # a stream to SMOL is open while QWEN is asked for: QWEN waits until SMOL is idle.
    # Checked on /metrics snapshots: whenever SMOL has a request open, SMOL is loaded and
    # QWEN is not.
    # The stream must outlast the snapshots. The server writes it whether or not the
    # client reads, so on a loaded machine 400 tokens of the sanitizer build could end
    # before the first snapshot (seen once in the full suite); 4,000 cannot, and the
    # client's close below cancels them long before the end.
    folder = models_dir(tmp_path)
    s = MultiServer(binary, folder, "--models-max", "1", "--ctx", "4096")
    try:
        stream = s.client().chat.completions.create(model=SMOL, messages=HI, max_tokens=4000, temperature=0,
                                                    stream=True, extra_body={"ignore_eos": True})
        it = iter(stream)
        assert next(it).model == SMOL  # SMOL is running this request
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", chat(s, QWEN)))
        t.start()
        busy = 0
        for _ in range(5):
            m = s.metrics()
            open_ = {lab["model_name"]: v for lab, v in m.get("cinder:num_requests_open", [])}
            loaded = {lab["model_name"]: v for lab, v in m["cinder:model_loaded"]}
            if open_.get(SMOL, 0) >= 1:
                busy += 1
                assert loaded[SMOL] == 1.0 and loaded[QWEN] == 0.0
        assert busy >= 1, "the SMOL stream ended before any snapshot"
        stream.close()  # the client goes: its request is cancelled, SMOL becomes idle
        t.join(timeout=120)
        assert out["r"].model == QWEN and out["r"].choices[0].message.content
        assert s.by_model("cinder:model_unloads_total")[SMOL] == 1
        assert s.by_model("cinder:model_loaded") == {SMOL: 0.0, QWEN: 1.0, "broken": 0.0}
    finally:
        s.stop()


def test_flags_are_checked(binary, tmp_path):
    folder = models_dir(tmp_path)
    for args, msg in ((["--models-dir", str(folder), "-m", str(folder / f"{SMOL}.gguf")], "-m"),
                      (["--models-dir", str(folder), "--model-alias", "x=nothere"], "nothere"),
                      (["--models-dir", str(folder), "--model-alias", "noequals"], "NAME=FILE"),
                      (["--models-dir", str(folder), "--model-alias", f"{SMOL}={QWEN}"], "already served"),
                      (["--models-dir", str(tmp_path / "missing")], "cannot read")):
        p = subprocess.run([str(binary), "serve", "--port", "0", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and msg in p.stderr, (args, p.stderr)
