"""`cinder inspect` (src/cli/inspect.c) against the gguf PyPI package.

Independent truth: gguf-py's GGUFReader for the header numbers, keys, types, tensor names,
types, shapes, sizes and offsets of the shared model and vocabulary files and of files
written here by gguf-py's GGUFWriter. Also the CLI contract: bad files, missing files,
unknown flags give one `cinder: ...` line on stderr and exit 1 (bad file) or 2 (usage).
The binary is $CINDER_BIN (default build/cinder); where $CINDER_SAN_BIN (the ASan+UBSan
build) exists, every run is repeated with it so leaks and overreads fail the test.
"""
import os
import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import gguf
from gguf import GGUFReader

from conftest import cinder_binaries

ROOT = Path(__file__).resolve().parents[2]


def shared_testdata() -> Path:
    d = os.environ.get("CINDER_TESTDATA")
    return Path(d) if d else ROOT.parent / "shared" / "testdata"


def inspect(*args) -> subprocess.CompletedProcess:
    """Runs every available build; they must agree. Returns the first's result."""
    results = []
    for b in cinder_binaries():
        assert b.exists(), f"{b} is not built"
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1")
        results.append(subprocess.run([str(b), "inspect", *map(str, args)], capture_output=True,
                                      text=True, errors="replace", env=env))
    for r in results[1:]:
        assert (r.returncode, r.stdout, r.stderr) == (results[0].returncode, results[0].stdout,
                                                        results[0].stderr)
    return results[0]


def section(out: str, name: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(name + ":") + 1
    end = next((i for i in range(start, len(lines)) if lines[i] == ""), len(lines))
    return lines[start:end]


def check_against_gguf_py(path: Path) -> str:
    r = inspect(path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    out = r.stdout
    g = GGUFReader(str(path))
    head = dict(re.findall(r"^  (\w[\w ]*?)\s{2,}(\d+)", out, re.M))
    assert int(head["version"]) == int(g.fields["GGUF.version"].parts[-1][0])
    assert int(head["alignment"]) == g.alignment
    assert int(head["tensors"]) == len(g.tensors)
    assert int(head["data offset"]) == g.data_offset
    assert int(head["file size"]) == path.stat().st_size
    fields = [(k, f) for k, f in g.fields.items() if not k.startswith("GGUF.")]
    assert int(head["kvs"]) == len(fields)
    meta = section(out, "metadata")
    assert len(meta) == len(fields)
    for line, (key, f) in zip(meta, fields):
        parts = line.split()
        assert parts[0] == key
        assert parts[1] == {"uint8": "u8", "int8": "i8", "uint16": "u16", "int16": "i16",
                            "uint32": "u32", "int32": "i32", "float32": "f32", "uint64": "u64",
                            "int64": "i64", "float64": "f64"}.get(f.types[0].name.lower(),
                                                                  f.types[0].name.lower())
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            n = len(f.data)
            assert f"[{n} × " in line, line
            if n > 8:
                assert line.endswith(", ..."), line
        elif f.types[0] in (gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32,
                            gguf.GGUFValueType.UINT64, gguf.GGUFValueType.INT64):
            assert int(parts[2]) == f.contents(), line
        elif f.types[0] == gguf.GGUFValueType.FLOAT32:
            assert float(parts[2]) == pytest.approx(f.contents(), rel=1e-6), line
    if not g.tensors:
        assert "tensors: none" in out
        return out
    rows = section(out, "tensors")[1:]
    assert len(rows) == len(g.tensors)
    for i, (row, t) in enumerate(zip(rows, g.tensors)):
        m = re.match(r"\s*(\d+)\s+(\S+)\s+(\S+)\s+\[([\d, ]+)\]\s+(\d+)\s+(\d+)$", row)
        assert m, row
        assert int(m[1]) == i
        assert m[2] == t.name
        assert m[3].lower() == t.tensor_type.name.lower()
        assert [int(x) for x in m[4].split(",")] == [int(x) for x in t.shape]
        assert int(m[5]) == t.n_bytes
        assert int(m[6]) + g.data_offset == t.data_offset
    total = section(out, "totals")
    n_params = sum(int(t.n_elements) for t in g.tensors)
    assert re.search(rf"parameters .*\({n_params}\)", total[0]), total[0]
    all_line = next(l for l in total if l.split()[0] == "all")
    assert f"{len(g.tensors)} tensors, {sum(int(t.n_bytes) for t in g.tensors)} bytes" in all_line
    return out


def test_model_file():
    out = check_against_gguf_py(shared_testdata() / "models" / "stories260K.gguf")
    assert re.search(r"^  f32 +48 tensors", out, re.M)


@pytest.mark.parametrize("name", ["ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf",
                                  "ggml-vocab-bert-bge.gguf"])
def test_vocab_only_files(name):
    path = shared_testdata() / "tokenizer" / name
    out = check_against_gguf_py(path)
    g = GGUFReader(str(path))
    toks = g.fields["tokenizer.ggml.tokens"]
    line = next(l for l in out.splitlines() if l.split()[:1] == ["tokenizer.ggml.tokens"])
    first = toks.contents(0)
    shown = first.replace("\\", "\\\\").replace('"', '\\"')
    assert f'[{len(toks.data)} × string] "{shown}", ' in line, line


def test_gpt2_tokens_escaped():
    """The spec's own example: '!', '"', '#' with the quote escaped."""
    out = inspect(shared_testdata() / "tokenizer" / "ggml-vocab-gpt-2.gguf").stdout
    assert '[50257 × string] "!", "\\"", "#", ' in out


def test_gguf_py_file_with_long_strings_and_odd_types(tmp_path):
    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    template = "{% for message in messages %}" + "x" * 3000 + "{% endfor %}"
    w.add_string("tokenizer.chat_template", template)
    w.add_string("t.ctrl", "a\tb\x01\u00e9")
    w.add_array("t.nested", [["a", "b"], ["c"]])
    w.add_array("t.many", list(range(1000)))
    w.add_uint64("t.big", 2**64 - 1)
    w.add_tensor("q", np.zeros((3, 34), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("iq", np.zeros((1, 66), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = inspect(path).stdout
    line = next(l for l in out.splitlines() if "tokenizer.chat_template" in l)
    assert f"... ({len(template)} bytes)" in line and len(line) < 160, line
    assert '"{% for message in messages %}xxx' in line
    assert '"a\\tb\\x01\u00e9"' in out
    assert '[2 × array] ([2 × string] "a", "b"), ([1 × string] "c")' in out
    assert "[1000 × i32] 0, 1, 2, 3, 4, 5, 6, 7, ..." in out
    assert "18446744073709551615" in out
    # IQ2_XXS is a ggml type cinder does not compute with: shown, sized, and flagged
    assert re.search(r"^\s+1\s+iq\s+\S+\?\s+\[256, 1\]\s+66\s+", out, re.M), out
    assert "cannot compute with" in out


def test_unknown_tensor_type(tmp_path):
    """A type number no ggml knows: accepted, bytes shown as '?'."""
    path = tmp_path / "unknown.gguf"
    blob = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    name = b"mystery"
    blob += struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 7, 200, 0)
    blob += b"\0" * (-len(blob) % 32) + b"\0" * 32
    path.write_bytes(blob)
    r = inspect(path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^\s+0\s+mystery\s+type200\?\s+\[7\]\s+\?\s+0$", r.stdout, re.M), r.stdout


def one_error_line(r, code):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cinder: "), r.stderr
    assert r.stdout == ""
    return lines[0]


def test_errors(tmp_path):
    msg = one_error_line(inspect(tmp_path / "missing.gguf"), 1)
    assert "missing.gguf" in msg
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2**60))
    assert "kvs exceed" in one_error_line(inspect(bad), 1)
    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(b"GGUF" + struct.pack("<III", 1, 0, 0))
    assert "version 1" in one_error_line(inspect(v1), 1)
    # a real file cut in the middle of its vocabulary
    src = (shared_testdata() / "tokenizer" / "ggml-vocab-gpt-2.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(src[: len(src) // 2])
    assert "tokenizer.ggml" in one_error_line(inspect(cut), 1)
    one_error_line(inspect("--frobnicate", bad), 2)
    one_error_line(inspect(), 2)
    one_error_line(inspect(bad, bad), 2)
    r = inspect("--help")
    assert r.returncode == 0 and "usage: cinder inspect" in r.stdout
