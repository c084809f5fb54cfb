"""Cinder's scalar element formats (src/tensor) against gguf-py's numpy implementation.

Independent truth: the `gguf` PyPI package (gguf.quants), whose dequantizers are a
separate numpy implementation of ggml's block layouts and whose quantizers for
Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/BF16 (and numpy's own astype(float16)) reproduce ggml's
reference quantizers byte for byte. The C side is reached through the helper
$BUILD/tools/quant_tool (tests/tools/quant_tool.c), BUILD taken from $CINDER_BUILD, else
the folder of $CINDER_BIN, else `build`.

1. dequantize: random blocks (random payload bytes; f16 scale fields replaced by finite
   values spanning subnormal to ~16, both signs) must decode to bit-identical float32.
   Q8_1 and Q8_K are not in gguf.quants (they are activation formats, never in files):
   they are checked against the two-line numpy decoding written here.
2. quantize: where gguf.quants quantizes, our reference quantizer must produce the same
   bytes on Gaussian data with varied block scales plus edge blocks (zeros, constants,
   small integers that create rounding ties, +/- extremes of equal magnitude).
3. K-quants (our own quantizers): bytes made by cinder, decoded by gguf-py, must land
   within the per-element bound documented in src/tensor/quants_k.c — this catches a
   packing mistake that a C-only round trip would hide.
"""
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType as T

ROOT = Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    if os.environ.get("CINDER_BUILD"):
        b = Path(os.environ["CINDER_BUILD"])
    elif os.environ.get("CINDER_BIN"):
        b = Path(os.environ["CINDER_BIN"]).parent
    else:
        b = Path("build")
    return b if b.is_absolute() else ROOT / b


TOOL = build_dir() / "tools" / "quant_tool"

# name: (ggml type, block elements, block bytes, offsets of f16 scale fields)
FORMATS = {
    "f32": (T.F32, 1, 4, ()),
    "f16": (T.F16, 1, 2, ()),
    "bf16": (T.BF16, 1, 2, ()),
    "q4_0": (T.Q4_0, 32, 18, (0,)),
    "q4_1": (T.Q4_1, 32, 20, (0, 2)),
    "q5_0": (T.Q5_0, 32, 22, (0,)),
    "q5_1": (T.Q5_1, 32, 24, (0, 2)),
    "q8_0": (T.Q8_0, 32, 34, (0,)),
    "q8_1": (T.Q8_1, 32, 36, (0, 2)),   # gguf-py's size table still says 40 (old float layout)
    "q2_K": (T.Q2_K, 256, 84, (80, 82)),
    "q3_K": (T.Q3_K, 256, 110, (108,)),
    "q4_K": (T.Q4_K, 256, 144, (0, 2)),
    "q5_K": (T.Q5_K, 256, 176, (0, 2)),
    "q6_K": (T.Q6_K, 256, 210, (208,)),
    "q8_K": (T.Q8_K, 256, 292, ()),      # d is a float32 at offset 0
}


def run_tool(mode: str, name: str, data: bytes) -> bytes:
    assert TOOL.exists(), f"{TOOL} not built (make BUILD=... all builds tests/tools/*.c)"
    with tempfile.TemporaryDirectory() as td:
        src, dst = Path(td) / "in", Path(td) / "out"
        src.write_bytes(data)
        r = subprocess.run([str(TOOL), mode, name, str(src), str(dst)], capture_output=True, text=True)
        assert r.returncode == 0, f"quant_tool {mode} {name}: rc={r.returncode} {r.stderr}"
        return dst.read_bytes()


def random_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite f16 values: magnitudes 2^-20 (f16 subnormal) .. 2^4, random sign."""
    mag = np.exp2(rng.uniform(-20.0, 4.0, n)).astype(np.float16)
    sign = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float16)
    return mag * sign


def random_blocks(name: str, n_blocks: int, seed: int) -> np.ndarray:
    _, _, type_size, f16_offsets = FORMATS[name]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in f16_offsets:
        blocks[:, off:off + 2] = random_scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if name == "q8_K":
        d = (rng.standard_normal(n_blocks) * 0.01).astype(np.float32)
        blocks[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
    if name == "f32":  # finite floats only: random bit patterns would include NaNs
        blocks = rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8).reshape(n_blocks, 4)
    return blocks


def reference_dequant(name: str, blocks: np.ndarray) -> np.ndarray:
    qtype, block_size, type_size, _ = FORMATS[name]
    if name == "q8_1":
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (blocks[:, 4:].view(np.int8).astype(np.float32) * d).reshape(-1)
    if name == "q8_K":
        d = blocks[:, 0:4].copy().view(np.float32)
        return (d * blocks[:, 4:260].view(np.int8).astype(np.float32)).reshape(-1)
    return np.asarray(gq.dequantize(blocks.reshape(-1), qtype), dtype=np.float32).reshape(-1)


def first_difference(ours: np.ndarray, ref: np.ndarray, block_size: int, nan_equal: bool) -> str | None:
    """None if bit-identical (NaN == NaN when nan_equal), else a message with both values."""
    assert ours.shape == ref.shape, f"length {ours.shape} vs reference {ref.shape}"
    same = ours.view(np.uint32) == ref.view(np.uint32)
    if nan_equal:
        same |= np.isnan(ours) & np.isnan(ref)
    if same.all():
        return None
    i = int(np.argmin(same))
    return (f"first difference at element {i} (block {i // block_size}): ours {ours[i]!r} "
            f"(0x{int(ours.view(np.uint32)[i]):08x}) vs gguf {ref[i]!r} "
            f"(0x{int(ref.view(np.uint32)[i]):08x}); {int((~same).sum())} of {same.size} differ")


@pytest.mark.parametrize("name", list(FORMATS))
def test_dequantize_bit_exact(name):
    _, block_size, _, _ = FORMATS[name]
    n_blocks = 4096 if block_size == 1 else (64 if block_size == 256 else 512)
    blocks = random_blocks(name, n_blocks, seed=1234 + len(name) * 7 + block_size)
    ours = np.frombuffer(run_tool("dequant", name, blocks.tobytes()), dtype=np.float32)
    ref = reference_dequant(name, blocks)
    if block_size > 1:
        assert np.isfinite(ref).all(), "test data should decode to finite values"
    # Raw f16/bf16 bit patterns include NaNs; their payload need not survive numpy's path.
    msg = first_difference(ours, ref, block_size, nan_equal=name in ("f16", "bf16"))
    assert msg is None, f"{name} dequantize: {msg}"


def f16_specials() -> np.ndarray:
    """float32 inputs that probe f32->f16 rounding: ties at every exponent, subnormal
    halves and their ties, the overflow threshold, infinities, signed zeros."""
    h = np.arange(0, 0x7c00, 97, dtype=np.uint16).view(np.float16).astype(np.float32)
    nxt = (np.arange(0, 0x7c00, 97, dtype=np.uint16) + 1).view(np.float16).astype(np.float32)
    mid = ((h.astype(np.float64) + nxt.astype(np.float64)) / 2).astype(np.float32)  # exact ties
    extra = np.array([65504.0, 65519.99, 65520.0, 65536.0, 1e30, np.inf, 2.0 ** -24, 2.0 ** -25,
                      2.0 ** -25 * 1.0000001, 3 * 2.0 ** -26, 2.0 ** -26, 1e-30, 0.0, -0.0,
                      2.0 ** -14 - 2.0 ** -25, 2.0 ** -14 - 2.0 ** -26], dtype=np.float32)
    x = np.concatenate([h, mid, np.nextafter(mid, np.float32(np.inf)),
                        np.nextafter(mid, np.float32(0)), extra])
    return np.concatenate([x, -x]).astype(np.float32)


def tie_blocks() -> np.ndarray:
    """32-element blocks whose scale comes out as exactly 1, so that every other element
    sits on a rounding tie of Q4_0, Q5_0, Q4_1, Q5_1 or Q8_0 respectively."""
    halves = np.arange(32) * 0.5
    a = halves - 8.0; a[0] = -8.0                   # q4_0: d = -8 / -8
    b = halves * 2 - 16.0 + 0.5; b[0] = -16.0       # q5_0: d = -16 / -16
    c = halves.copy(); c[1] = 15.0                  # q4_1: min 0, max 15
    e = halves * 2 + 0.5; e[0] = 0.0; e[1] = 31.0   # q5_1: min 0, max 31
    f = halves * 7 + 0.5; f[0] = 127.0              # q8_0: d = 127 / 127
    blocks = np.stack([a, b, c, e, f])
    return np.concatenate([blocks, -blocks]).astype(np.float32)


def quant_inputs(block_size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bs = max(block_size, 32)
    n_blocks = 2048
    scale = np.exp2(rng.uniform(-8, 8, (n_blocks, 1)))
    x = (rng.standard_normal((n_blocks, bs)) * scale).astype(np.float32)
    x[0] = 0.0                                                  # all zeros: d = 0
    x[1] = 3.25                                                 # constant block
    x[2] = rng.integers(-20, 21, bs).astype(np.float32)         # integers: exact ties
    x[3] = rng.integers(-16, 17, bs).astype(np.float32) * 0.5
    x[4, :] = rng.uniform(-1, 1, bs); x[4, 5] = -7.0; x[4, 9] = 7.0   # equal |extremes|
    x[5, :] = rng.uniform(-1, 1, bs); x[5, 5] = 7.0; x[5, 9] = -7.0
    x[6] = -np.abs(x[6])                                        # one-signed blocks
    x[7] = np.abs(x[7])
    ties = tie_blocks()
    x[8:8 + ties.size // bs] = ties.reshape(-1, bs)
    return x.reshape(-1)


QUANTIZERS = ["f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]


@pytest.mark.parametrize("name", QUANTIZERS)
def test_quantize_bytes_match_gguf(name):
    qtype, block_size, _, _ = FORMATS[name]
    x = quant_inputs(block_size, seed=99 + len(name))
    if name == "f16":
        x = np.concatenate([x, f16_specials()])
    if name == "bf16":  # ggml's bf16 rule keeps NaNs (quieted) and rounds ties to even
        nan_bits = np.array([0x7f800001, 0xffc00000, 0x7fbfffff, 0x7f8f0000], dtype=np.uint32)
        ties = np.array([0x3f808000, 0x3f818000, 0x7f7f8000, 0x7f7fffff, 0x00008000], dtype=np.uint32)
        x = np.concatenate([x, nan_bits.view(np.float32), ties.view(np.float32),
                            np.array([np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)])
    ours = np.frombuffer(run_tool("quant", name, x.tobytes()), dtype=np.uint8)
    with np.errstate(over="ignore"):  # f16 overflow to inf is one of the cases checked
        ref = np.asarray(gq.quantize(x, qtype)).view(np.uint8).reshape(-1)
    assert ours.shape == ref.shape, f"{name}: {ours.size} bytes vs gguf {ref.size}"
    diff = np.nonzero(ours != ref)[0]
    if diff.size:
        _, _, type_size, _ = FORMATS[name]
        i = int(diff[0])
        b = i // type_size
        raise AssertionError(
            f"{name} quantize: first differing byte {i} (block {b}, offset {i % type_size}): "
            f"ours 0x{ours[i]:02x} vs gguf 0x{ref[i]:02x}; {diff.size} bytes differ; block input "
            f"{x[b * block_size:(b + 1) * block_size][:8]}...")


def k_bound(name: str, x: np.ndarray) -> np.ndarray:
    """Per-element error bound of our K-quant quantizers (see src/tensor/quants_k.c),
    computed from the input only. x: (n_blocks, 256)."""
    def f16_up(v):  # rounding a scale up to f16 adds at most one ulp (subnormals: 2^-24)
        return v + np.maximum(v * 2.0 ** -10, 2.0 ** -24)

    nb = x.shape[0]
    amax_sb = np.abs(x).max(axis=1, keepdims=True)
    if name in ("q3_K", "q6_K"):
        qmax, smax = (3, 31) if name == "q3_K" else (31, 127)
        sub = np.abs(x.reshape(nb, 16, 16)).max(axis=2)
        d = f16_up(sub.max(axis=1, keepdims=True) / (qmax + 1) / smax)
        bound = sub / (qmax + 1) + d                                    # one full step
        bound = np.repeat(bound, 16, axis=1)
    else:
        n_sub, qmax, smax = {"q2_K": (16, 3, 15), "q4_K": (8, 15, 63), "q5_K": (8, 31, 63)}[name]
        xs = x.reshape(nb, n_sub, -1)
        lo = np.minimum(xs.min(axis=2), 0)
        rng_ = xs.max(axis=2) - lo
        dmin = f16_up((-lo).max(axis=1, keepdims=True) / smax)
        d = f16_up((rng_.max(axis=1, keepdims=True) + dmin) / qmax / smax)
        bound = ((rng_ + dmin) / qmax + d) / 2                          # half a step
        bound = np.repeat(bound, 256 // n_sub, axis=1)
    return bound * (1 + 1e-5) + 1e-6 * amax_sb


@pytest.mark.parametrize("name", ["q2_K", "q3_K", "q4_K", "q5_K", "q6_K"])
def test_k_quant_ours_decoded_by_gguf_within_bound(name):
    qtype = FORMATS[name][0]
    rng = np.random.default_rng(7 + len(name))
    x = (rng.standard_normal((64, 256)) * np.exp2(rng.uniform(-4, 4, (64, 1)))).astype(np.float32)
    x[1] = np.abs(x[1]) + 1      # all positive: min clamps to 0
    x[2] = -np.abs(x[2]) - 1     # all negative
    x[3, :128] *= 1e-3           # sub-blocks far smaller than the super-block maximum
    blocks = np.frombuffer(run_tool("quant", name, x.tobytes()), dtype=np.uint8)
    y = np.asarray(gq.dequantize(blocks, qtype), dtype=np.float32).reshape(x.shape)
    err = np.abs(y.astype(np.float64) - x)
    bound = k_bound(name, x.astype(np.float64))
    bad = np.argwhere(err > bound)
    assert bad.size == 0, (f"{name}: {len(bad)} elements over the bound; first at block "
                           f"{bad[0][0]} element {bad[0][1]}: x={x[tuple(bad[0])]!r} "
                           f"decoded={y[tuple(bad[0])]!r} err={err[tuple(bad[0])]:.3g} "
                           f"bound={bound[tuple(bad[0])]:.3g}")


def test_tool_rejects_partial_block_and_unknown_type():
    with tempfile.TemporaryDirectory() as td:
        src = Path(td) / "in"
        src.write_bytes(b"\0" * 35)  # not a whole q8_0 block (34 bytes)
        r = subprocess.run([str(TOOL), "dequant", "q8_0", str(src), str(Path(td) / "o")],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "whole number of blocks" in r.stderr
        r = subprocess.run([str(TOOL), "dequant", "q9_9", str(src), str(Path(td) / "o")],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "unknown type" in r.stderr
