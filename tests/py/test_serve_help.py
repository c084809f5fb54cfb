"""`cinder serve --help` against the server itself: every endpoint the help names is
routed (a request to it gets anything but the 404 of an unknown path), and every endpoint
the server routes is in the help.

Truth used here: the routing table of src/serve/server.c, written out below (a route added
there belongs here and in the help), and the server's own answers: 404 "not_found" for a
path it does not route, 405 for a routed path asked with the other method.
"""
import re
import subprocess

import pytest
from test_serve import STORIES, Server, binaries

# server.c's routing table: path -> method
ROUTES = {
    "/v1/chat/completions": "POST", "/v1/completions": "POST", "/v1/messages": "POST",
    "/v1/messages/count_tokens": "POST", "/v1/responses": "POST", "/tokenize": "POST", "/detokenize": "POST",
    "/infill": "POST", "/v1/embeddings": "POST", "/v1/models": "GET", "/health": "GET", "/metrics": "GET", "/": "GET",
}


def help_routes(binary):
    """{path: method} as the help lists them: lines "POST /a, /b" or "GET /c" and the
    lines that continue them."""
    r = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=60)
    out, method = {}, None
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r"\s+(POST|GET)?\s+(/\S*.*)$", line)
        if not m or line.lstrip().startswith("-"):
            continue
        method = m.group(1) or method
        for path in re.findall(r"(?:^|[\s,])(/[\w/.]*)", m.group(2)):
            out[path] = method
    return out


@pytest.fixture(scope="module", params=binaries(), ids=lambda p: p.parent.name)
def server(request):
    s = Server(request.param, STORIES, "--ctx", "256")
    yield s
    s.stop()


def routed(server, method, path):
    st, raw, _ = server.request(method, path, b"{}" if method == "POST" else None)
    return not (st == 404 and b'"not_found"' in raw)


def test_help_names_every_route(cinder):
    assert help_routes(cinder) == ROUTES


def test_every_endpoint_in_the_help_is_served(server):
    assert not routed(server, "GET", "/v1/nowhere")  # what an unrouted path gets
    for path, method in help_routes(server.proc.args[0]).items():
        assert routed(server, method, path), path
        other = "GET" if method == "POST" else "POST"
        st, _, _ = server.request(other, path, b"{}" if other == "POST" else None)
        assert st == 405, (other, path, st)
