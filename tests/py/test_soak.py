"""The one-minute soak (tests/py/soak.py, whose docstring says what it checks): 64
clients with random valid and invalid requests, cancels and disconnects, against the
ASan + UBSan build when make test provides one (a memory error, a leak at exit or UB
fails it), else the optimized build. The resident-memory check is left to the 10-minute
soak on the optimized build (docs/testing.md): an ASan build's quarantine grows by design,
and one minute is mostly warm-up."""
import soak
from conftest import cinder_binaries


def test_one_minute_soak(tmp_path):
    binary = cinder_binaries()[-1]
    r = soak.run(binary, soak.default_model(), 60, 64, out=tmp_path, rss_check=False)
    assert r["ok"], r["problems"]
    assert r["counts"].get("valid 200", 0) > 0 and r["counts"].get("invalid 400", 0) > 0, r["counts"]
    assert r["client_disconnects"] > 0 and r["prefix_cache_hits"] > 0, r
