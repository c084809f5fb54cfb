"""Cinder's GGUF reader and writer (src/gguf) against the `gguf` PyPI package.

Independent truth: gguf-py's GGUFWriter and GGUFReader, a separate implementation of the
format that llama.cpp's converters use. The C side is reached through the helper
$BUILD/tools/gguf_tool (tests/tools/gguf_tool.c), BUILD taken from $CINDER_BUILD, else
the folder of $CINDER_BIN, else `build`.

1. cinder writes a sample with every value type, nested arrays (array of arrays of mixed
   element types, three levels of strings) and six tensors of different types; gguf-py
   must read back exactly the values, names, types, shapes, offsets and bytes.
2. gguf-py's writer, given the same content, must produce the identical bytes (llama.cpp
   layout: v3, alignment 32, zero padding, padded tensor offsets).
3. the reverse: files written by gguf-py (default and custom alignment) and the real
   vocabulary/model files in the shared testdata are dumped by cinder's reader; every
   key, value (flattened like gguf-py's ReaderField.parts), tensor and tensor byte must
   match what gguf-py reads.
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import gguf
from gguf import GGUFReader, GGUFValueType as V, GGMLQuantizationType as T

ROOT = Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    if os.environ.get("CINDER_BUILD"):
        b = Path(os.environ["CINDER_BUILD"])
    elif os.environ.get("CINDER_BIN"):
        b = Path(os.environ["CINDER_BIN"]).parent
    else:
        b = Path("build")
    return b if b.is_absolute() else ROOT / b


TOOL = build_dir() / "tools" / "gguf_tool"


def shared_testdata() -> Path:
    d = os.environ.get("CINDER_TESTDATA")
    return Path(d) if d else ROOT.parent / "shared" / "testdata"


def tool(*args) -> subprocess.CompletedProcess:
    assert TOOL.exists(), f"{TOOL} is not built (make BUILD=...)"
    return subprocess.run([str(TOOL), *map(str, args)], capture_output=True, check=True)


def pattern(n: int, salt: int) -> bytes:
    """The tensor bytes gguf_tool writes: (i*37 + salt*11 + 5) mod 256."""
    return bytes((i * 37 + salt * 11 + 5) & 0xFF for i in range(n))


# The sample of tests/tools/gguf_tool.c (write_all), as gguf-py spells it.
SCALARS = [
    ("t.u8", V.UINT8, 250), ("t.i8", V.INT8, -120), ("t.u16", V.UINT16, 65000),
    ("t.i16", V.INT16, -32000), ("t.u32", V.UINT32, 4000000000), ("t.i32", V.INT32, -2000000000),
    ("t.f32", V.FLOAT32, float(np.float32(0.1))), ("t.bool", V.BOOL, True),
    ("t.str", V.STRING, 'h\u00e9llo "w"\n'), ("t.u64", V.UINT64, 18000000000000000000),
    ("t.i64", V.INT64, -9000000000000000000), ("t.f64", V.FLOAT64, 3.141592653589793),
]
ARRAYS = [
    ("a.u8", V.UINT8, [0, 1, 255]), ("a.i8", V.INT8, [-128, 0, 127]),
    ("a.u16", V.UINT16, [0, 65535]), ("a.i16", V.INT16, [-32768, 32767]),
    ("a.u32", V.UINT32, [0, 4294967295, 7]), ("a.i32", V.INT32, [-2147483648, 2147483647]),
    ("a.f32", V.FLOAT32, [1.5, -0.25, float(np.float32(1e-30))]),
    ("a.bool", V.BOOL, [True, False, True]), ("a.u64", V.UINT64, [0, 2**64 - 1]),
    ("a.i64", V.INT64, [-2**63, 2**63 - 1]), ("a.f64", V.FLOAT64, [-1e300, 2.5e-300]),
    ("a.str", V.STRING, ["<s>", "\u2581the", "", "\U0001F525"]),
]
NESTED = [
    ("n.mixed", [["a", "bc"], [1, 2, 3]]),
    ("n.deep", [[["x"], ["y", "z"]], [["w"]]]),
    ("n.floats", [[1.5, -2.0], [0.25]]),
]
# name, type, ne (innermost first), salt
TENSORS = [
    ("t.f32", T.F32, [3, 2], 1), ("t.f16", T.F16, [4], 2), ("blk.0.q8_0", T.Q8_0, [64, 2], 3),
    ("blk.0.q4_k", T.Q4_K, [256, 1, 2], 4), ("t.bf16", T.BF16, [2, 2, 2, 2], 5),
    ("t.i32", T.I32, [5], 6),
]


def n_bytes(ttype, ne) -> int:
    bs, ts = gguf.GGML_QUANT_SIZES[ttype]
    rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
    return ne[0] // bs * ts * rows


def write_sample_with_gguf_py(path: Path, alignment: int | None = None) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, vt, val in SCALARS:
        w.add_key_value(key, val, vt)
    for key, vt, val in ARRAYS:
        w.add_key_value(key, val, V.ARRAY, sub_type=vt)
    for key, val in NESTED:
        w.add_array(key, val)
    for name, tt, ne, salt in TENSORS:
        raw = np.frombuffer(pattern(n_bytes(tt, ne), salt), dtype=np.uint8)
        if tt == T.F32:
            w.add_tensor(name, raw.view(np.float32).reshape(ne[::-1]))
        elif tt == T.F16:
            w.add_tensor(name, raw.view(np.float16).reshape(ne[::-1]))
        elif tt == T.I32:
            w.add_tensor(name, raw.view(np.int32).reshape(ne[::-1]))
        else:  # raw block bytes: gguf-py derives the element shape from the byte shape
            bs, ts = gguf.GGML_QUANT_SIZES[tt]
            byte_shape = ne[::-1][:-1] + [ne[0] // bs * ts]
            w.add_tensor(name, raw.reshape(byte_shape), raw_dtype=tt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def flat(parts) -> list:
    out = []
    for p in parts:
        out.extend(np.asarray(p).reshape(-1).tolist())
    return out


def nested_leaves(val) -> list:
    """gguf-py's flattening of a nested list as written by add_array."""
    def typ(x):
        return V.get_type(x)
    out = []
    if isinstance(val, list):
        out += [int(typ(val[0])), len(val)]
        for x in val:
            out += nested_leaves(x)
    elif isinstance(val, str):
        b = val.encode()
        out += [len(b), *b]
    elif isinstance(val, float):
        out.append(float(np.float32(val)))
    else:
        out.append(val)
    return out


def check_same_as_gguf_py(path: Path):
    """cinder's dump of path must equal gguf-py's reading, field by field and byte by byte."""
    d = json.loads(tool("dump", path).stdout)
    r = GGUFReader(str(path))
    fields = [(k, f) for k, f in r.fields.items() if not k.startswith("GGUF.")]
    assert d["n_kv"] == len(fields)
    assert d["n_tensors"] == len(r.tensors)
    assert d["version"] == int(r.fields["GGUF.version"].parts[-1][0])
    assert d["alignment"] == r.alignment
    assert d["data_offset"] == r.data_offset
    for kv, (key, f) in zip(d["kv"], fields):
        assert bytes.fromhex(kv["key"]).decode() == key
        assert kv["type"] == int(f.types[0]), key
        want = flat(f.parts)
        assert kv["leaves"] == want, f"{key}: first difference at leaf " + str(
            next((i for i, (a, b) in enumerate(zip(kv["leaves"], want)) if a != b), len(want)))
    for t, rt in zip(d["tensors"], r.tensors):
        name = bytes.fromhex(t["name"]).decode()
        assert name == rt.name
        assert t["type"] == int(rt.tensor_type), name
        assert t["ne"] == [int(x) for x in rt.shape], name
        assert t["n_bytes"] == int(rt.n_bytes), name
        assert d["data_offset"] + t["offset"] == rt.data_offset, name
        assert t["data"] == rt.data.tobytes().hex(), name
    return d, r


def test_cinder_sample_read_by_gguf_py(tmp_path):
    path = tmp_path / "cinder.gguf"
    tool("write-all", path)
    r = GGUFReader(str(path))
    assert int(r.fields["GGUF.version"].parts[-1][0]) == 3
    assert r.alignment == 32
    assert r.fields["general.architecture"].contents() == "llama"
    for key, vt, val in SCALARS:
        f = r.fields[key]
        assert f.types == [vt], key
        assert f.contents() == val, key
    for key, vt, val in ARRAYS:
        f = r.fields[key]
        assert f.types == [V.ARRAY, vt], key
        assert f.contents() == val, key
    for key, val in NESTED:
        # gguf-py's contents() cannot decode mixed nested arrays; its raw parts can
        assert flat(r.fields[key].parts[3:]) == nested_leaves(val), key
    assert [t.name for t in r.tensors] == [t[0] for t in TENSORS]
    offset = 0
    for rt, (name, tt, ne, salt) in zip(r.tensors, TENSORS):
        assert rt.tensor_type == tt, name
        assert rt.shape.tolist() == ne, name
        nb = n_bytes(tt, ne)
        assert rt.n_bytes == nb, name
        assert rt.data_offset == r.data_offset + offset, name
        assert rt.data.tobytes() == pattern(nb, salt), name
        offset += (nb + 31) // 32 * 32
    assert r.data_offset % 32 == 0
    assert path.stat().st_size == r.data_offset + offset


def test_cinder_writer_bytes_identical_to_gguf_py(tmp_path):
    ours, theirs = tmp_path / "cinder.gguf", tmp_path / "gguf_py.gguf"
    tool("write-all", ours)
    write_sample_with_gguf_py(theirs)
    a, b = ours.read_bytes(), theirs.read_bytes()
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert a == b, f"sizes {len(a)} vs {len(b)}, first differing byte at {first}"


@pytest.mark.parametrize("alignment", [None, 64, 8])
def test_gguf_py_file_read_by_cinder(tmp_path, alignment):
    path = tmp_path / "gguf_py.gguf"
    write_sample_with_gguf_py(path, alignment)
    d, _ = check_same_as_gguf_py(path)
    assert d["alignment"] == (alignment or 32)
    by_key = {bytes.fromhex(kv["key"]).decode(): kv for kv in d["kv"]}
    # values straight from what we asked gguf-py to write, not only from its reader
    for key, vt, val in SCALARS:
        kv = by_key[key]
        assert kv["type"] == int(vt)
        if vt == V.STRING:
            b = val.encode()
            assert kv["leaves"][-len(b) - 1:] == [len(b), *b]
        else:
            assert kv["leaves"][-1] == val, key
    for key, vt, val in ARRAYS:
        leaves = by_key[key]["leaves"]
        klen = len(key)
        assert leaves[klen + 2: klen + 4] == [int(vt), len(val)], key
        if vt != V.STRING:
            assert leaves[klen + 4:] == val, key
    for key, val in NESTED:
        assert by_key[key]["leaves"][len(key) + 2:] == nested_leaves(val), key
    names = [bytes.fromhex(t["name"]).decode() for t in d["tensors"]]
    assert names == [t[0] for t in TENSORS]
    for t, (name, tt, ne, salt) in zip(d["tensors"], TENSORS):
        assert t["type"] == int(tt) and t["ne"] == ne, name
        assert bytes.fromhex(t["data"]) == pattern(n_bytes(tt, ne), salt), name
        assert t["offset"] % (alignment or 32) == 0


def real_files():
    td = shared_testdata()
    files = sorted((td / "tokenizer").glob("*.gguf")) + [td / "models" / "stories260K.gguf"]
    return [pytest.param(p, id=p.name) for p in files]


@pytest.mark.parametrize("path", real_files())
def test_real_file_same_as_gguf_py(path):
    assert path.exists(), f"{path} missing (set CINDER_TESTDATA)"
    d, r = check_same_as_gguf_py(path)
    by_key = {bytes.fromhex(kv["key"]).decode(): kv for kv in d["kv"]}
    assert "tokenizer.ggml.tokens" in by_key
    toks = r.fields["tokenizer.ggml.tokens"]
    assert len(toks.data) > 200  # vocabularies, not toy arrays


def test_real_model_values():
    """A few values of stories260K spelled out: the architecture, the layer count, a tensor."""
    path = shared_testdata() / "models" / "stories260K.gguf"
    d, r = check_same_as_gguf_py(path)
    by_key = {bytes.fromhex(kv["key"]).decode(): kv for kv in d["kv"]}
    arch = r.fields["general.architecture"].contents()
    assert arch == "llama"
    assert by_key[f"{arch}.block_count"]["leaves"][-1] == r.fields[f"{arch}.block_count"].contents()
    emb = next(t for t in d["tensors"] if bytes.fromhex(t["name"]).decode() == "token_embd.weight")
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    assert emb["ne"][1] == n_vocab
    assert emb["ne"][0] == r.fields[f"{arch}.embedding_length"].contents()


def test_type_sizes_match_gguf_py(tmp_path):
    """cinder's ggml block table (used to size tensors) agrees with gguf-py for every type
    both know, except Q8_1, where gguf-py keeps an old 40-byte layout (ggml's is 36)."""
    # one tensor of two blocks per type, written by gguf-py, sized by cinder's reader
    w = gguf.GGUFWriter(str(tmp_path / "types.gguf"), "llama")
    tested = []
    for tt, (bs, ts) in gguf.GGML_QUANT_SIZES.items():
        if tt == T.Q8_1 or int(tt) >= 40:
            continue
        w.add_tensor(f"t{int(tt)}", np.zeros((2, ts), dtype=np.uint8), raw_dtype=tt)
        tested.append((int(tt), bs, ts))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    d, _ = check_same_as_gguf_py(tmp_path / "types.gguf")
    assert len(tested) >= 30
    for t, (tt, bs, ts) in zip(d["tensors"], tested):
        assert t["type"] == tt
        assert t["ne"] == [bs, 2]
        assert t["n_bytes"] == 2 * ts, f"type {tt}"
