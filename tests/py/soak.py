"""A soak of `cinder serve`: many concurrent clients for a set time on loopback.

    python3 tests/py/soak.py --seconds 600 --clients 64          # the 10-minute soak
    python3 tests/py/soak.py --seconds 60 --binary build-san/cinder   # what make test runs

Each client loops until the time is up, drawing one of:
  - a valid chat or completion request with random sampling parameters (temperature,
    top-p/k, min-p, penalties, logit_bias, seed, n, stop strings, logprobs, echo,
    speculation), streamed or not; its prompt shares a long prefix with everyone else's,
    so the prefix cache is in play;
  - the same request, abandoned: the client closes the connection after a few stream
    chunks, or a moment after sending a non-streamed one (the server must cancel it);
  - an invalid request: a bad value, an unknown field, a wrong model, malformed JSON,
    a body over --max-body, a prompt past the context, a wrong method or path;
  - a side endpoint: /tokenize, /detokenize, /v1/models, /metrics, /health.
The KV budget is small enough that the running batch does not fit (preemption).

What must hold, and is reported: no 5xx and no crash; every valid request answered 200
(or 429 when the queue is full) with a well-formed body or SSE stream that ends in
[DONE]; every invalid one a 4xx with OpenAI's error JSON; after the clients stop, no
request open, running or waiting and every KV block free; the server exits 0 on SIGTERM
with no sanitizer report. The server's resident memory is sampled every 2 s: the report
has the curve and its growth from the end of warm-up (the first fifth) to the end, which
must stay under --rss-growth (default 10%) unless --no-rss-check (an ASan build's
quarantine grows by design). Prints a summary and writes the JSON report to --out.
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SYSTEM = ("You are a careful assistant for a small team that writes C. Answer briefly, prefer plain words, "
          "and when you give code keep it short and correct. ") * 3
PREFIX = ("The following is a short story about a lighthouse keeper, her cat and the sea. It was written "
          "for children and is read aloud at bedtime. Chapter one. ") * 3
TOPICS = ["the tide", "a storm", "the lamp", "a ship", "the cat", "a letter", "winter", "the stairs", "fog", "gulls"]
STOPS = [".", "\n", " the", "!", "cat", "\n\n"]


def default_model():
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    return str(Path(d) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}      # (kind, status) -> n
        self.failures = []    # what broke a rule, with the request

    def count(self, kind, status):
        with self.lock:
            k = f"{kind} {status}"
            self.counts[k] = self.counts.get(k, 0) + 1

    def fail(self, what, body=None):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append({"what": what, "body": body})


def valid_request(rng, vocab):
    """(path, body): a valid chat or completion request with random parameters."""
    chat = rng.random() < 0.5
    b = {"max_tokens": rng.randint(1, 48)}
    if chat:
        msgs = [{"role": "system", "content": SYSTEM}]
        for _ in range(rng.choice([0, 0, 1])):
            msgs += [{"role": "user", "content": "Tell me about " + rng.choice(TOPICS) + "."},
                     {"role": "assistant", "content": "It was " + rng.choice(TOPICS) + "."}]
        msgs.append({"role": "user", "content": f"Write one sentence about {rng.choice(TOPICS)} ({rng.randrange(1000)})."})
        b["messages"] = msgs
    else:
        form = rng.random()
        if form < 0.7:
            b["prompt"] = PREFIX + f"On day {rng.randrange(1000)} she saw {rng.choice(TOPICS)} and"
        elif form < 0.85:
            b["prompt"] = [PREFIX + "She saw " + rng.choice(TOPICS), PREFIX + "Then " + rng.choice(TOPICS)]
        else:
            b["prompt"] = [rng.randrange(1, vocab) for _ in range(rng.randint(1, 60))]
    if rng.random() < 0.7:
        b["temperature"] = rng.choice([0, 0.3, 0.7, 1.0, 1.5])
    if rng.random() < 0.4:
        b["top_p"] = round(rng.uniform(0.05, 1.0), 3)
    if rng.random() < 0.4:
        b["top_k"] = rng.randint(0, 100)
    if rng.random() < 0.3:
        b["min_p"] = round(rng.uniform(0, 0.3), 3)
    if rng.random() < 0.5:
        b["seed"] = rng.randrange(1 << 31)
    if rng.random() < 0.3:
        b["stop"] = rng.sample(STOPS, rng.randint(1, 3))
    if rng.random() < 0.2:
        b["n"] = rng.choice([2, 3])
    if rng.random() < 0.2:
        b["presence_penalty"] = round(rng.uniform(-1, 1), 2)
        b["frequency_penalty"] = round(rng.uniform(-1, 1), 2)
    if rng.random() < 0.15:
        b["repetition_penalty"] = round(rng.uniform(1.0, 1.3), 2)
    if rng.random() < 0.2:
        b["logit_bias"] = {str(rng.randrange(vocab)): rng.choice([-100, -5, 3]) for _ in range(rng.randint(1, 8))}
    if rng.random() < 0.2:
        if chat:
            b["logprobs"], b["top_logprobs"] = True, rng.randint(0, 5)
        else:
            b["logprobs"] = rng.randint(0, 5)
    elif not chat and rng.random() < 0.1:
        b["echo"] = True
    if rng.random() < 0.15:
        b["speculative"] = rng.choice([True, False, {"lookup": rng.randint(1, 4), "max_draft": rng.randint(1, 8)}])
    if rng.random() < 0.5:
        b["stream"] = True
        if rng.random() < 0.5:
            b["stream_options"] = {"include_usage": True}
    return ("/v1/chat/completions" if chat else "/v1/completions"), b


def invalid_request(rng, vocab, max_body):
    """(method, path, raw body bytes): a request the server must refuse with a 4xx."""
    path, b = valid_request(rng, vocab)
    chat = path == "/v1/chat/completions"
    bad = rng.randrange(18)
    if bad == 0: b["top_p"] = 7
    elif bad == 1: b["n"] = rng.choice([0, 17, -3])
    elif bad == 2: b["max_tokens"] = rng.choice([-1, 0, "many", 1.5])
    elif bad == 3: b["temperature"] = -1
    elif bad == 4: b["frobnicate"] = 1
    elif bad == 5: b["model"] = "gpt-4"
    elif bad == 6:
        if chat: b["messages"] = [{"role": "wizard", "content": "hi"}]
        else: b["prompt"] = [vocab + 5]
    elif bad == 7: b["stop"] = ["s%d" % i for i in range(17)]
    elif bad == 8: b["logit_bias"] = {"abc": 1}
    elif bad == 9:
        b.pop("stream", None)
        b["stream_options"] = {"include_usage": True}
    elif bad == 10:
        if chat: b.pop("messages")
        else: b["prompt"] = "word " * 3000  # past the context
    elif bad == 11: b["speculative"] = {"lookup": 99}
    elif bad == 12: b["seed"] = "x"
    elif bad == 13:
        return "POST", path, b'{"prompt": "x", "max_tokens": }'
    elif bad == 14:
        return "POST", path, b"[1, 2, 3]"
    elif bad == 15:
        return "POST", path, b'{"prompt": "\xff\xfe\xfd"}'
    elif bad == 16:
        return "POST", path, b'{"prompt": "' + b"a" * (max_body + 10) + b'"}'
    else:
        return rng.choice([("GET", path, None), ("POST", "/v1/nope", b"{}"), ("DELETE", "/v1/models", None)])
    return "POST", path, json.dumps(b).encode()


def check_completion(stats, body, req):
    try:
        j = json.loads(body)
    except ValueError:
        return stats.fail("a 200 body is not JSON", body[:300].decode("utf-8", "replace"))
    n = req.get("n", 1) * (len(req["prompt"]) if isinstance(req.get("prompt"), list) and
                           req["prompt"] and isinstance(req["prompt"][0], str) else 1)
    if len(j.get("choices", [])) != n:
        return stats.fail(f"{len(j.get('choices', []))} choices, want {n}", req)
    for c in j["choices"]:
        if c.get("finish_reason") not in ("stop", "length"):
            stats.fail(f"finish_reason {c.get('finish_reason')!r}", req)
    if j.get("usage", {}).get("completion_tokens", 0) > n * req["max_tokens"]:
        stats.fail("more tokens than max_tokens", req)


def check_stream(stats, body, req):
    # SSE comments (": keep-alive", sent while a stream waits) carry nothing
    events = [e for e in body.decode("utf-8", "replace").split("\n\n") if e.strip() and not e.startswith(":")]
    if not events or events[-1].strip() != "data: [DONE]":
        return stats.fail("a stream does not end in [DONE]", body[-300:].decode("utf-8", "replace"))
    finished = 0
    for e in events[:-1]:
        if not e.startswith("data: "):
            return stats.fail("an SSE event without data:", e[:200])
        try:
            chunk = json.loads(e[6:])
        except ValueError:
            return stats.fail("an SSE chunk is not JSON", e[:200])
        for c in chunk.get("choices", []):
            if c.get("finish_reason") is not None:
                finished += 1
                if c["finish_reason"] not in ("stop", "length"):
                    stats.fail(f"stream finish_reason {c['finish_reason']!r}", req)
    if finished == 0:
        stats.fail("a stream ended without a finish_reason", req)


def send(port, method, path, data, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=data, headers={"Content-Type": "application/json"})
    return c, c.getresponse()


def client(port, seed, t_end, stats, vocab, max_body):
    rng = random.Random(seed)
    while time.time() < t_end:
        roll = rng.random()
        t_start = time.time()
        b = None
        try:
            if roll < 0.55:  # valid, read to the end
                path, b = valid_request(rng, vocab)
                c, r = send(port, "POST", path, json.dumps(b).encode(), 600)
                body = r.read()
                c.close()
                stats.count("valid", r.status)
                if r.status == 200:
                    (check_stream if b.get("stream") else check_completion)(stats, body, b)
                elif r.status != 429:
                    stats.fail(f"valid request got {r.status}", {"req": b, "resp": body[:300].decode("utf-8", "replace")})
            elif roll < 0.70:  # valid, abandoned
                path, b = valid_request(rng, vocab)
                b["max_tokens"] = rng.randint(16, 64)
                if rng.random() < 0.5:
                    b["stream"] = True
                    c, r = send(port, "POST", path, json.dumps(b).encode(), 600)
                    if r.status == 200:
                        r.read(rng.randint(1, 400))
                    stats.count("abandoned-stream", r.status)
                    r.close()
                    c.close()
                else:
                    b.pop("stream", None)
                    b.pop("stream_options", None)
                    s = socket.create_connection(("127.0.0.1", port))
                    data = json.dumps(b).encode()
                    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                    time.sleep(rng.uniform(0, 0.4))
                    s.close()
                    stats.count("abandoned", "closed")
            elif roll < 0.90:  # invalid
                method, path, data = invalid_request(rng, vocab, max_body)
                c, r = send(port, method, path, data, 120)
                body = r.read()
                c.close()
                stats.count("invalid", r.status)
                if not 400 <= r.status < 500:
                    stats.fail(f"invalid request got {r.status}", {"path": path, "body": (data or b"")[:300].decode(
                        "utf-8", "replace"), "resp": body[:300].decode("utf-8", "replace")})
                elif r.getheader("Content-Type", "").startswith("application/json") and "error" not in json.loads(body):
                    stats.fail("an error body without 'error'", body[:300].decode())
            else:  # side endpoints
                which = rng.randrange(5)
                if which == 0:
                    m, p, d = "POST", "/tokenize", json.dumps({"content": PREFIX + rng.choice(TOPICS)}).encode()
                elif which == 1:
                    m, p, d = "POST", "/detokenize", json.dumps({"tokens": [rng.randrange(vocab) for _ in range(20)]}).encode()
                else:
                    m, p, d = "GET", ["/v1/models", "/metrics", "/health"][which - 2], None
                c, r = send(port, m, p, d, 120)
                body = r.read()
                c.close()
                stats.count(p, r.status)
                if r.status != 200:
                    stats.fail(f"{p} got {r.status}", body[:300].decode("utf-8", "replace"))
        except (OSError, http.client.HTTPException) as e:
            stats.count("client-error", type(e).__name__)
            stats.fail(f"connection error after {time.time() - t_start:.1f} s: {e!r}", b)


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


def total(m, prefix):
    return sum(v for k, v in m.items() if k == prefix or k.startswith(prefix + "{"))


def run(binary, model, seconds, clients, out=None, rss_check=True, rss_growth=0.10, seed=1, log=print):
    port = free_port()
    max_body = 256 * 1024
    args = [str(binary), "serve", "-m", model, "--port", str(port), "-t", "2", "--parallel", "8", "--ctx", "512",
            "--kv-mem", "8", "--max-body", str(max_body), "--max-connections", str(clients + 32)]
    errf = open(out / "server.stderr" if out else os.devnull, "w+")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=errf, cwd=ROOT)
    report = {"command": " ".join(args[1:]), "seconds": seconds, "clients": clients}
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError("the server exited while loading")
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("the server did not become ready")
            time.sleep(0.1)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/tokenize", body=json.dumps({"content": "x"}), headers={"Content-Type": "application/json"})
        c.getresponse().read()
        vocab = 49152 if "SmolLM2" in model else 512
        stats = Stats()
        t0 = time.time()
        t_end = t0 + seconds
        curve = []
        done = threading.Event()

        def sample():
            while not done.is_set():
                r = rss_mb(proc.pid)
                if r is not None:
                    curve.append((round(time.time() - t0, 1), round(r, 1)))
                done.wait(2.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        threads = [threading.Thread(target=client, args=(port, seed * 1000 + i, t_end, stats, vocab, max_body))
                   for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_clients = time.time() - t0
        # nothing may stay open once the clients are gone: wait for the engine to drain
        idle_deadline = time.time() + 60
        while True:
            m = metrics(port)
            left = {k: total(m, k) for k in ("cinder:num_requests_open", "cinder:num_requests_running",
                                             "cinder:num_requests_waiting", "cinder:kv_blocks_used")}
            if not any(left.values()) or time.time() > idle_deadline:
                break
            time.sleep(0.1)
        done.set()
        sampler.join()
        status5 = {k: v for k, v in stats.counts.items() if k.split()[-1].startswith("5")}
        warm = curve[len(curve) // 5] if curve else (0, 0)
        end = curve[-1] if curve else (0, 0)
        growth = (end[1] - warm[1]) / warm[1] if warm[1] else 0.0
        report.update({
            "client_seconds": round(t_clients, 1),
            "requests": sum(stats.counts.values()),
            "counts": dict(sorted(stats.counts.items())),
            "http_5xx": status5,
            "failures": stats.failures,
            "left_at_end": left,
            "kv_blocks_total": total(m, "cinder:kv_blocks_total"),
            "preemptions": total(m, "cinder:num_preemptions_total"),
            "prefix_cache_hits": total(m, "cinder:prefix_cache_hits_total"),
            "client_disconnects": total(m, "cinder:client_disconnects_total"),
            "generation_tokens": total(m, "cinder:generation_tokens_total"),
            "rss_mb_curve": curve,
            "rss_mb_after_warmup": warm[1],
            "rss_mb_end": end[1],
            "rss_growth": round(growth, 4),
        })
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        errf.seek(0)
        err = errf.read()
        errf.close()
    report["exit_code"] = proc.returncode
    sanitizer = [w for w in ("AddressSanitizer", "LeakSanitizer", "runtime error") if w in err]
    report["sanitizer_reports"] = sanitizer
    problems = []
    if report.get("http_5xx"): problems.append(f"5xx responses: {report['http_5xx']}")
    if report.get("failures"): problems.append(f"{len(report['failures'])} broken rules, first: {report['failures'][0]}")
    if any(report.get("left_at_end", {}).values()): problems.append(f"left at the end: {report['left_at_end']}")
    if proc.returncode != 0: problems.append(f"the server exited {proc.returncode}")
    if sanitizer: problems.append(f"sanitizer reports: {sanitizer} (see server.stderr)")
    if not report.get("preemptions"): problems.append("no preemption: the KV budget did not bind")
    if rss_check and report.get("rss_growth", 0) > rss_growth:
        problems.append(f"RSS grew {report['rss_growth']:.1%} after warm-up (limit {rss_growth:.0%})")
    report["problems"] = problems
    report["ok"] = not problems
    if out:
        (out / "soak.json").write_text(json.dumps(report, indent=1))
    log(f"soak: {report.get('requests', 0)} requests from {clients} clients in {report.get('client_seconds')} s; "
        f"{report.get('generation_tokens', 0):.0f} tokens generated; {report.get('preemptions', 0):.0f} preemptions; "
        f"{report.get('prefix_cache_hits', 0):.0f} prefix-cache hits; {report.get('client_disconnects', 0):.0f} disconnects")
    log(f"soak: RSS {report.get('rss_mb_after_warmup')} MiB after warm-up -> {report.get('rss_mb_end')} MiB at the end "
        f"({report.get('rss_growth', 0):+.1%}); exit {proc.returncode}; " + ("OK" if report["ok"] else "FAILED"))
    for p in problems:
        log("soak: " + p)
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "build" / "cinder"))
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "build" / "soak"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rss-growth", type=float, default=0.10)
    ap.add_argument("--no-rss-check", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    r = run(a.binary, a.model, a.seconds, a.clients, out, not a.no_rss_check, a.rss_growth, a.seed)
    counts = r.get("counts", {})
    for k in sorted(counts):
        print(f"  {k:32s} {counts[k]}")
    print("  rss (s, MiB): " + " ".join(f"{t:.0f}:{v:.0f}" for t, v in r.get("rss_mb_curve", [])[::5]))
    print(f"report: {out / 'soak.json'}")
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
