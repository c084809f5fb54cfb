"""Two `cinder serve` replicas behind Debian's nginx with deploy/nginx.conf, on loopback.

The shipped config is used as it is, with only its three ports replaced by free ones.
Checked: a conversation with X-Session-Id always reaches the same replica (nginx's
X-Cinder-Upstream header names it) and different sessions spread over both; without the
header requests spread too (least_conn); a stream arrives through nginx chunk by chunk
with the same text as a non-streamed request; when a replica dies, its sessions move to
the other and every request still succeeds (passive health check, one retry on a refused
connection). Bounded: a few dozen tiny requests on stories260K.
"""
import concurrent.futures as cf
import http.client
import json
import shutil
import subprocess
import time

import pytest

from test_serve import ROOT, STORIES, Server, binaries, free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    a = Server(binaries()[0], STORIES, "--ctx", "256", "--parallel", "4")
    b = Server(binaries()[0], STORIES, "--ctx", "256", "--parallel", "4")
    port = free_port()
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    conf = conf.replace("127.0.0.1:8081", f"127.0.0.1:{a.port}").replace("127.0.0.1:8082", f"127.0.0.1:{b.port}")
    conf = conf.replace("listen 127.0.0.1:8080", f"listen 127.0.0.1:{port}")
    prefix = tmp_path_factory.mktemp("nginx")
    (prefix / "nginx.conf").write_text(conf)
    ng = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while True:
        try:
            st, _, _ = post(port, "/v1/completions", {"prompt": "Once", "max_tokens": 1})
            if st == 200:
                break
        except OSError:
            pass
        assert ng.poll() is None, ng.communicate()[1]
        assert time.time() < deadline, "nginx did not come up"
        time.sleep(0.05)
    yield port, a, b
    ng.terminate()
    ng.wait(timeout=10)
    for s in (a, b):
        if s.proc.poll() is None:
            s.stop()


def post(port, path, body, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data and r.getheader("Content-Type", "").startswith("application/json") \
        else data, r.getheader("X-Cinder-Upstream")


BODY = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}


def test_sessions_stick_and_spread(cluster):
    port, a, b = cluster
    seen = {}
    for sid in (f"conv-{i}" for i in range(16)):
        ups = {post(port, "/v1/completions", BODY, {"X-Session-Id": sid})[2] for _ in range(3)}
        assert len(ups) == 1, (sid, ups)
        seen[sid] = ups.pop()
    assert set(seen.values()) == {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}


def hits(srv):
    return srv.metrics()["cinder:prefix_cache_hits_total"][0][1]


def test_a_session_reuses_its_replicas_prefix_cache(cluster):
    port, a, b = cluster
    turn = {"prompt": "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                      "park with her friends and her dog, Max, every sunny day.", "max_tokens": 4, "temperature": 0}
    before = {a.port: hits(a), b.port: hits(b)}
    ups = {post(port, "/v1/completions", turn, {"X-Session-Id": "story-7"})[2] for _ in range(3)}
    assert len(ups) == 1
    owner, other = (a, b) if ups.pop() == f"127.0.0.1:{a.port}" else (b, a)
    assert hits(owner) >= before[owner.port] + 2  # the 2nd and 3rd turn found the prompt's blocks
    assert hits(other) == before[other.port]


def test_without_session_least_conn_uses_both(cluster):
    port, a, b = cluster
    with cf.ThreadPoolExecutor(8) as ex:
        res = list(ex.map(lambda _: post(port, "/v1/completions", dict(BODY, max_tokens=64)), range(16)))
    assert all(st == 200 for st, _, _ in res)
    assert {u for _, _, u in res} == {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}


def test_stream_passes_through_unbuffered(cluster):
    port, _, _ = cluster
    st, full, _ = post(port, "/v1/completions", dict(BODY, max_tokens=24))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps(dict(BODY, max_tokens=24, stream=True)),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    events, text = 0, ""
    while True:
        line = r.readline()
        if not line or line.strip() == b"data: [DONE]":
            break
        if line.startswith(b"data: "):
            events += 1
            ch = json.loads(line[6:])["choices"]
            text += ch[0]["text"] if ch else ""
    c.close()
    assert events >= 24 and text == full["choices"][0]["text"]


def test_a_dead_replica_is_passed_over(cluster):
    port, a, b = cluster
    sids = [f"conv-{i}" for i in range(16)]
    owner = {sid: post(port, "/v1/completions", BODY, {"X-Session-Id": sid})[2] for sid in sids}
    a.proc.kill()
    a.proc.wait()
    for sid in sids:
        st, body, up = post(port, "/v1/completions", BODY, {"X-Session-Id": sid})
        assert st == 200, (sid, st, body)
        assert up.split(",")[-1].strip() == f"127.0.0.1:{b.port}"
    assert any(u == f"127.0.0.1:{a.port}" for u in owner.values())
