"""`cinder quantize` against llama-quantize.

Truth, in three layers:
  - tests/golden/quant_rows_ggml.json: the bytes ggml's quantize_row_<type>_ref (the row
    quantizers llama-quantize runs without an importance matrix) gives for the 8 rows of
    tests/golden/quant_rows_input.f32; cinder's file quantizers (quant_tool file) must give
    the same bytes. Remade by calling libggml-base.so's functions through ctypes on the
    input file (the provenance string in the JSON names the build).
  - GOLDEN_SHA256: the sha256 of the whole file llama-quantize (llama.cpp 0.5.0-dev, commit
    0c1e570, vendored by llama-cpp-python 0.3.36) writes from stories260K (F32) for each
    type; cinder's output must be byte for byte the same file (remade with
    `llama-quantize stories260K.gguf out.gguf TYPE`).
  - With a llama.cpp build at hand (CINDER_LLAMA_BIN, or a peers/*/vendor/llama.cpp/build*/bin
    beside the checkout), llama-quantize is run on the spot and llama.cpp's loader must
    accept cinder's files. Without one those two tests skip and say why.
Then quality: the quantized model must load in cinder and its perplexity stay within a
bound per type of the F32 model's; and bad input (unknown type, a type a tensor cannot
take, a truncated file, a full disk, a quantized input without --allow-requantize) must
give a clear error, a non-zero exit, and leave no file behind.
"""
import glob
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata")
STORIES = TESTDATA / "models" / "stories260K.gguf"
STORIES_SHA256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"
BIN = ROOT / os.environ.get("CINDER_BIN", "build/cinder")
GOLDEN = ROOT / "tests" / "golden"

GOLDEN_SHA256 = {
    "Q4_0": "fd93abd9957992763c863e7e3f30934baf1e7a2e31b6c911a720cd109daed40d",
    "Q4_1": "2ddb634a1e71dffd234b5fa3ecb0608b43e9a913b19012e4fbc616c29d9a3c66",
    "Q5_0": "749e10e0a33dbef8df92045c6add0d807dc5d1105667c96ad3f81ae3deb64ac7",
    "Q5_1": "c36497248a0a883836c36c96bf707bd176b94911d34af9bf7681df98cd22025d",
    "Q8_0": "ff8701a45da28293b7af11a695ab33575b692e9b109a2eae6238c906c31415da",
    "Q6_K": "137d1fbe834a43bc20cc1e04a9459af61953a7579baeedba17590faacfb13104",
    "Q4_K_S": "ec7a769903d8b4cb18e5ed29b288c60f9d8a15437321c67ac319ddb6191125b6",
    "Q4_K_M": "7f61512f1889080c73b2afd3ac7fdfe55a368e83570b20e5019829adfa734a2a",
    "Q5_K_S": "66ed769a4df768d67b88ea4395e9dab273b717de9f64980b9cd5cfe832108b6f",
    "Q5_K_M": "017253a152346d29609472739647c6c1136557abaad67c24e6966fccd07eafda",
}

TEXT = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. "
    "Her friend Tom came to play with her. They threw the ball high into the sky and laughed. "
    "Then it started to rain, so they went home. Lily's mom gave them warm milk and cookies. "
    "They were happy and tired. The next day, the sun was shining again and the birds sang. "
    "Lily and Tom went back to the park to play with the ball. They had a lot of fun together."
)


def llama_bin():
    """A llama.cpp bin folder: $CINDER_LLAMA_BIN, else one beside the checkout."""
    env = os.environ.get("CINDER_LLAMA_BIN")
    if env:
        return Path(env) if (Path(env) / "llama-quantize").exists() else None
    for p in sorted(glob.glob(str(ROOT.parent / "peers" / "*" / "vendor" / "llama.cpp" / "build*" / "bin"))):
        if (Path(p) / "llama-quantize").exists():
            return Path(p)
    return None


def build_dir():
    b = Path(os.environ.get("CINDER_BUILD", "build"))
    return b if b.is_absolute() else ROOT / b


def cinder(*args, check=True, **kw):
    p = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=300, **kw)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def leftovers(folder):
    return sorted(os.listdir(folder))


@pytest.fixture(scope="module")
def stories():
    if not STORIES.exists():
        pytest.skip("stories260K.gguf not in %s (set CINDER_TESTDATA)" % STORIES.parent)
    assert sha256(STORIES) == STORIES_SHA256, "stories260K.gguf is not the file the goldens were made from"
    return STORIES


@pytest.mark.parametrize("name", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K"])
def test_rows_match_ggml_reference_bytes(name, tmp_path):
    golden = json.loads((GOLDEN / "quant_rows_ggml.json").read_text())
    out = tmp_path / "out.bin"
    subprocess.run([str(build_dir() / "tools" / "quant_tool"), "file", name,
                    str(GOLDEN / "quant_rows_input.f32"), str(out)], check=True)
    got, want = out.read_bytes(), bytes.fromhex(golden[name])
    assert len(got) == len(want)
    if got != want:
        i = next(k for k in range(len(got)) if got[k] != want[k])
        pytest.fail("%s: first differing byte %d: cinder %#04x, ggml %#04x" % (name, i, got[i], want[i]))


@pytest.mark.parametrize("qtype", sorted(GOLDEN_SHA256))
def test_file_byte_identical_to_llama_quantize(stories, qtype, tmp_path):
    out = tmp_path / "out.gguf"
    p = cinder("quantize", stories, out, qtype, "-t", "2")
    assert "wrote" in p.stderr
    assert sha256(out) == GOLDEN_SHA256[qtype], "%s: not the file llama-quantize writes" % qtype
    assert leftovers(tmp_path) == ["out.gguf"]


# Perplexity over the test text must stay within this factor of the F32 model's, either way
# (stories260K is a 260K-parameter model with 64-wide rows: every K type falls back to a
# 32-block, and 4-bit formats cost it several percent).
PPL_BOUND = {"Q8_0": 1.01, "Q6_K": 1.03, "Q5_0": 1.08, "Q5_1": 1.08, "Q5_K_M": 1.08,
             "Q4_0": 1.25, "Q4_1": 1.25, "Q4_K_M": 1.20}


def perplexity(model, text_file):
    out = cinder("perplexity", "-m", model, "-f", text_file, "-c", "48", "--chunks", "2",
                 "--kv-type", "f32", "-t", "2").stdout
    return float(re.search(r"perplexity \(\w+ KV\):\s*([0-9.]+)", out).group(1))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("qtext") / "text.txt"
    p.write_text(TEXT)
    return p


@pytest.mark.parametrize("qtype", sorted(PPL_BOUND))
def test_quantized_model_loads_and_stays_close(stories, text_file, qtype, tmp_path):
    out = tmp_path / "q.gguf"
    cinder("quantize", stories, out, qtype)
    base = perplexity(stories, text_file)
    got = perplexity(out, text_file)
    # on 46 scored tokens noise can lower it too: the bound is on |log(ppl / ppl_f32)|
    assert abs(np.log(got / base)) <= np.log(PPL_BOUND[qtype]), (qtype, base, got)


def test_llama_quantize_on_the_spot_and_llama_cpp_loads_ours(stories, tmp_path):
    lb = llama_bin()
    if lb is None:
        pytest.skip("no llama.cpp build: set CINDER_LLAMA_BIN to a folder with llama-quantize")
    for qtype in ("Q4_K_M", "Q8_0"):
        ours, theirs = tmp_path / ("c-%s.gguf" % qtype), tmp_path / ("l-%s.gguf" % qtype)
        cinder("quantize", stories, ours, qtype)
        subprocess.run([str(lb / "llama-quantize"), str(stories), str(theirs), qtype, "1"],
                       check=True, capture_output=True)
        assert ours.read_bytes() == theirs.read_bytes(), qtype
        # llama.cpp's loader on our file: a short greedy run must load it and produce text
        tok = lb / "llama-simple"
        if tok.exists():
            r = subprocess.run([str(tok), "-m", str(ours), "-n", "4", "Once upon a time"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-2000:]


# ---- bad input: a clear message, a non-zero exit, nothing left behind ----

def test_unknown_type(stories, tmp_path):
    p = cinder("quantize", stories, tmp_path / "o.gguf", "Q3_XL", check=False)
    assert p.returncode == 2 and "unknown type 'Q3_XL'" in p.stderr
    assert leftovers(tmp_path) == []


def test_type_a_tensor_cannot_take(stories, tmp_path):
    # stories260K's rows are 64 wide: an explicit output type of 256-blocks cannot fit
    p = cinder("quantize", stories, tmp_path / "o.gguf", "Q8_0", "--output-type", "q6_K", check=False)
    assert p.returncode == 2 and "output.weight" in p.stderr and "64 columns" in p.stderr
    assert leftovers(tmp_path) == []
    p = cinder("quantize", stories, tmp_path / "o.gguf", "Q8_0", "--output-type", "iq2_xs", check=False)
    assert p.returncode == 2 and "not a type cinder writes" in p.stderr
    assert leftovers(tmp_path) == []


def test_truncated_input(stories, tmp_path):
    data = stories.read_bytes()
    bad = tmp_path / "in" / "cut.gguf"
    bad.parent.mkdir()
    bad.write_bytes(data[: len(data) - 1000])
    out = tmp_path / "out"
    out.mkdir()
    p = cinder("quantize", bad, out / "o.gguf", "Q4_0", check=False)
    assert p.returncode == 1 and p.stderr.startswith("cinder: quantize: ") and len(p.stderr.splitlines()) == 1
    assert leftovers(out) == []


def test_requantize_needs_the_flag(stories, tmp_path):
    q = tmp_path / "q8.gguf"
    cinder("quantize", stories, q, "Q8_0")
    p = cinder("quantize", q, tmp_path / "q4.gguf", "Q4_0", check=False)
    assert p.returncode == 2 and "--allow-requantize" in p.stderr
    assert leftovers(tmp_path) == ["q8.gguf"]
    p = cinder("quantize", q, tmp_path / "q4.gguf", "Q4_0", "--allow-requantize")
    assert "compound" in p.stderr
    assert leftovers(tmp_path) == ["q4.gguf", "q8.gguf"]


def test_full_disk_leaves_nothing(stories, tmp_path):
    # RLIMIT_FSIZE stands in for a full disk: writes past 100 KB fail with EFBIG (SIGXFSZ
    # ignored so the write returns the error rather than killing the process).
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    p = cinder("quantize", stories, tmp_path / "o.gguf", "Q8_0", check=False, preexec_fn=limit)
    assert p.returncode == 1 and "cannot write" in p.stderr, p.stderr
    assert leftovers(tmp_path) == []


def test_existing_output_survives_a_failure(stories, tmp_path):
    out = tmp_path / "o.gguf"
    out.write_bytes(b"keep me")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    p = cinder("quantize", stories, out, "Q8_0", check=False, preexec_fn=limit)
    assert p.returncode == 1
    assert out.read_bytes() == b"keep me" and leftovers(tmp_path) == ["o.gguf"]


def test_output_mode_follows_the_umask(stories, tmp_path):
    # the output is any file the user writes: 0666 less the umask (not a temporary file's 0600)
    out = tmp_path / "o.gguf"
    cinder("quantize", stories, out, "Q8_0", preexec_fn=lambda: os.umask(0o027))
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and leftovers(tmp_path) == ["o.gguf"]


# ---- the K types on rows they can take: a random llama model 256 wide ----

def make_k_model(path):
    """A llama-architecture F16 model (8 layers, 256-wide rows, 512-token vocabulary from
    tiny-llama) with seeded random weights: every K type and mix applies without
    fallback, and 8 layers give use_more_bits its first/last eighth and every third."""
    import gguf
    tiny = gguf.GGUFReader(str(build_dir() / "tiny" / "tiny-llama.gguf"))
    w = gguf.GGUFWriter(str(path), "llama")
    n_embd, n_ff, n_layer, n_head, n_kv = 256, 512, 8, 4, 2
    w.add_name("k-test")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    f = tiny.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    rng = np.random.default_rng(256)

    def mat(rows, cols, scale=0.05):
        x = rng.standard_normal((rows, cols)) * scale
        x[:, rng.integers(0, cols, 3)] *= 8  # a few outlier columns, as real weights have
        return x.astype(np.float16)

    w.add_tensor("token_embd.weight", mat(len(tokens), n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", mat(len(tokens), n_embd))
    hd = n_embd // n_head
    for i in range(n_layer):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_kv * hd, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_kv * hd, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def k_model(tmp_path_factory):
    p = tmp_path_factory.mktemp("kmodel") / "k-f16.gguf"
    make_k_model(p)
    return p


@pytest.mark.parametrize("qtype", ["Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K", "Q8_0"])
def test_k_types_byte_identical_to_llama_quantize(k_model, qtype, tmp_path):
    lb = llama_bin()
    if lb is None:
        pytest.skip("no llama.cpp build: set CINDER_LLAMA_BIN to a folder with llama-quantize")
    ours, theirs = tmp_path / "c.gguf", tmp_path / "l.gguf"
    cinder("quantize", k_model, ours, qtype, "-t", "2")
    subprocess.run([str(lb / "llama-quantize"), str(k_model), str(theirs), qtype, "2"], check=True,
                   capture_output=True)
    a, b = ours.read_bytes(), theirs.read_bytes()
    if a != b:
        i = next(k for k in range(min(len(a), len(b))) if a[k] != b[k])
        pytest.fail("%s: files differ first at byte %d of %d / %d" % (qtype, i, len(a), len(b)))


def test_k_mix_types_and_model_runs(k_model, tmp_path):
    import gguf
    out = tmp_path / "q.gguf"
    cinder("quantize", k_model, out, "Q4_K_M")
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
    # use_more_bits(i, 8): the first and last eighth and every third between -> 0, 3, 6, 7
    for i in range(8):
        want = "Q6_K" if i in (0, 3, 6, 7) else "Q4_K"
        assert types["blk.%d.attn_v.weight" % i] == want, i
        assert types["blk.%d.ffn_down.weight" % i] == want, i
        assert types["blk.%d.attn_q.weight" % i] == "Q4_K"
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    assert types["output_norm.weight"] == "F32"
    r = cinder("run", "-m", out, "-p", "hello", "-n", "4", "--temp", "0")
    assert r.returncode == 0


@pytest.mark.parametrize("flags", [("--pure",), ("--output-type", "q8_0", "--token-embedding-type", "q5_0"),
                                   ("--pure", "--output-type", "f16")])
def test_flags_byte_identical_to_llama_quantize(k_model, flags, tmp_path):
    lb = llama_bin()
    if lb is None:
        pytest.skip("no llama.cpp build: set CINDER_LLAMA_BIN to a folder with llama-quantize")
    theirs_flags = [{"--output-type": "--output-tensor-type"}.get(f, f) for f in flags]
    ours, theirs = tmp_path / "c.gguf", tmp_path / "l.gguf"
    cinder("quantize", k_model, ours, "Q4_K_M", *flags)
    subprocess.run([str(lb / "llama-quantize"), *theirs_flags, str(k_model), str(theirs), "Q4_K_M", "2"],
                   check=True, capture_output=True)
    assert ours.read_bytes() == theirs.read_bytes(), flags


def test_q4_k_is_q4_k_m(k_model, tmp_path):
    cinder("quantize", k_model, tmp_path / "a.gguf", "Q4_K")
    cinder("quantize", k_model, tmp_path / "b.gguf", "q4_k_m")
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


# ---- --imatrix: llama-imatrix's files, llama-quantize --imatrix's bytes ----
#
# tests/golden/stories260k.imatrix.gguf was made by llama-imatrix (llama.cpp 0c1e570, as
# above) from stories260K.gguf over Debian's /usr/share/common-licenses/GPL-3, run in that
# folder: `llama-imatrix -m stories260K.gguf -f GPL-3 -o stories260k.imatrix.gguf --chunks 2
# -c 128 -t 1 --process-output`. IMATRIX_SHA256 is the sha256 of the file
# `llama-quantize --imatrix stories260k.imatrix.gguf stories260K.gguf out.gguf TYPE 1` writes,
# run in the imatrix's folder: the path as given is recorded in the file
# (quantize.imatrix.file), so the tests pass the same relative name.

IMATRIX = GOLDEN / "stories260k.imatrix.gguf"
IMATRIX_SHA256 = {
    "Q4_0": "082e2dbd18a1f8e6ef1c7328a73a5cdf2e204cadb848c617cd0f88da7a7ddc5f",
    "Q4_1": "e3ce2aca6150469c78abe7dc2db8ed9f1b676b521e94876f3b4eaf494352fbbd",
    "Q5_0": "75b2bfae2b3cad6737e740409f73fa46b1359d8e626eeab1321a4d1aaea4bf93",
    "Q5_1": "a895d7162514930a72ae58bf26f94cc701e857b8ed72583e866a4b774562e662",
    "Q8_0": "05ac31540b7c9ae07ba7f52c7b40aa05cf47edef06ce53ea1cd3a13bc20ccdf3",
    "Q6_K": "b263f37ae191ef619b109d0d632cfaad366606e0553f80e805506aad7eec5fb2",
    "Q4_K_S": "123956c90b82f32c74ee905c3bb0d64b7d4ea39bfc3e55049644eb9aad04afe8",
    "Q4_K_M": "7ba85387bbb5c68da2856d035e5682ac03388a31a66593007bb01b5e1b0cde2e",
    "Q5_K_S": "540786d644e3622bfc2cfb4e3df70845ce19c22338f062032b42f2ddc98dfd4d",
    "Q5_K_M": "feb1fc56e8edcd5a49036e38b1fba026b9cbeffac4a3b200078937d67c326293",
}


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return "files differ first at byte %d of %d / %d" % (i, len(a), len(b))


def tensors_of(path):
    import gguf
    return {t.name: bytes(t.data.tobytes()) for t in gguf.GGUFReader(str(path)).tensors}


def read_imatrix(path):
    """{name: column weights} as llama-quantize computes them from a GGUF imatrix."""
    import gguf
    r = gguf.GGUFReader(str(path))
    t = {x.name: np.array(x.data, dtype=np.float32).ravel() for x in r.tensors}
    return {k[: -len(".in_sum2")]: (v, t[k[: -len(".in_sum2")] + ".counts"])
            for k, v in t.items() if k.endswith(".in_sum2")}


def write_imatrix(path, entries, meta=True, extra=None):
    """An imatrix GGUF as llama-imatrix writes it: entries {name: (sums, counts)}."""
    import gguf
    w = gguf.GGUFWriter(str(path), "imatrix")
    if meta:
        w.add_array("imatrix.datasets", ["synthetic"])
        w.add_uint32("imatrix.chunk_count", 4)
        w.add_uint32("imatrix.chunk_size", 512)
    for name, (sums, counts) in entries.items():
        if sums is not None:
            w.add_tensor(name + ".in_sum2", np.asarray(sums, np.float32))
        if counts is not None:
            w.add_tensor(name + ".counts", np.asarray(counts, np.float32))
    for name, arr in (extra or {}).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_legacy(path, entries, chunks=2, dataset=b"synthetic"):
    """llama-imatrix's legacy .dat: values stored as mean * ncall."""
    import struct
    out = [struct.pack("<i", len(entries))]
    for name, (vals, ncall) in entries.items():
        nb = name.encode()
        v = np.asarray(vals, np.float32)
        out += [struct.pack("<i", len(nb)), nb, struct.pack("<ii", ncall, len(v)), v.tobytes()]
    out += [struct.pack("<ii", chunks, len(dataset)), dataset]
    Path(path).write_bytes(b"".join(out))


@pytest.fixture()
def im_here(tmp_path):
    shutil.copy(IMATRIX, tmp_path / IMATRIX.name)
    return tmp_path


@pytest.mark.parametrize("qtype", sorted(IMATRIX_SHA256))
def test_imatrix_file_byte_identical_to_llama_quantize(stories, im_here, qtype):
    p = cinder("quantize", "--imatrix", IMATRIX.name, stories, "out.gguf", qtype, "-t", "2", cwd=im_here)
    # stories260K's 64-wide rows: Q6_K falls back to Q8_0 everywhere, which takes no weights
    assert ("(0 with importance weights)" in p.stderr) == (qtype in ("Q8_0", "Q6_K")), p.stderr
    assert sha256(im_here / "out.gguf") == IMATRIX_SHA256[qtype], "%s: not llama-quantize --imatrix's file" % qtype
    assert sha256(im_here / "out.gguf") != GOLDEN_SHA256[qtype]
    assert leftovers(im_here) == sorted([IMATRIX.name, "out.gguf"])


def test_imatrix_legacy_dat_gives_the_same_tensors(stories, im_here):
    # the GGUF's column weights written as llama-imatrix's legacy .dat (ncall 3: stored x3)
    ent = read_imatrix(IMATRIX)
    write_legacy(im_here / "im.dat", {k: (s / c[0] * 3, 3) for k, (s, c) in ent.items()})
    cinder("quantize", "--imatrix", IMATRIX.name, stories, "a.gguf", "Q4_1", cwd=im_here)
    cinder("quantize", "--imatrix", "im.dat", stories, "b.gguf", "Q4_1", cwd=im_here)
    a, b = tensors_of(im_here / "a.gguf"), tensors_of(im_here / "b.gguf")
    assert a.keys() == b.keys()
    # x / 3 * 3 need not give x back in float32: most tensors match, every one is weighted
    same = sum(a[k] == b[k] for k in a)
    assert same >= len(a) - 6, same


def test_imatrix_missing_entries_fall_back_to_unweighted(stories, tmp_path):
    ent = read_imatrix(IMATRIX)
    keep = {k: v for k, v in ent.items() if k.startswith("blk.1.")}
    write_imatrix(tmp_path / "part.gguf", keep)
    cinder("quantize", "--imatrix", tmp_path / "part.gguf", stories, tmp_path / "w.gguf", "Q4_0")
    cinder("quantize", stories, tmp_path / "u.gguf", "Q4_0")
    w, u = tensors_of(tmp_path / "w.gguf"), tensors_of(tmp_path / "u.gguf")
    for name in w:
        if name.startswith("blk.1.") and "norm" not in name and "ffn_down" not in name:
            assert w[name] != u[name], name  # weighted
        else:
            assert w[name] == u[name], name  # no entry (or not quantized): ggml's plain bytes


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_K_M", "Q5_1"])
def test_imatrix_quantized_model_stays_close(stories, text_file, im_here, qtype):
    cinder("quantize", "--imatrix", IMATRIX.name, stories, "q.gguf", qtype, cwd=im_here)
    base = perplexity(stories, text_file)
    got = perplexity(im_here / "q.gguf", text_file)
    assert abs(np.log(got / base)) <= np.log(PPL_BOUND[qtype]), (qtype, base, got)


# The imatrix must pay: KL divergence from the F32 model's distributions lower than without
# it. Measured on Debian's GPL-2 (not the GPL-3 the imatrix was taken over), 6 chunks of 128:
# Q4_0 0.184 -> 0.163, Q4_1 0.140 -> 0.124, Q5_1 0.035 -> 0.031, Q4_K_M 0.038 -> 0.035.
KL_TEXT = Path("/usr/share/common-licenses/GPL-2")


def mean_kld(model, base):
    out = cinder("perplexity", "-m", model, "--kl-base", base, "--kv-type", "f32", "-t", "2").stdout
    return float(re.search(r"Mean +KLD: +([0-9.]+)", out).group(1))


def test_imatrix_lowers_kl_divergence(stories, im_here):
    if not KL_TEXT.exists():
        pytest.skip("%s is not here (Debian's base-files has it)" % KL_TEXT)
    base = im_here / "base.kl"
    cinder("perplexity", "-m", stories, "-f", KL_TEXT, "-c", "128", "--chunks", "6", "--kv-type", "f32", "-t", "2",
           "--save-logits", base)
    for qtype in ("Q4_0", "Q4_1", "Q5_1", "Q4_K_M"):
        cinder("quantize", stories, "u.gguf", qtype, cwd=im_here)
        cinder("quantize", "--imatrix", IMATRIX.name, stories, "w.gguf", qtype, cwd=im_here)
        plain, weighted = mean_kld(im_here / "u.gguf", base), mean_kld(im_here / "w.gguf", base)
        assert weighted < plain, (qtype, plain, weighted)


# ---- `cinder imatrix`: the statistics llama-imatrix takes, in its file ----
#
# The golden file above is llama-imatrix's own over GPL-3 (2 chunks of 128, --process-output):
# cinder's run with the same arguments must hold the same entries, counts and metadata, and
# sums within 1% per column (both run the model in F32 weights with an F16 KV cache; what
# is left is float rounding in a different order: measured 0.28% at worst, in ffn_down).
GPL3 = Path("/usr/share/common-licenses/GPL-3")


def test_imatrix_matches_llama_imatrix(stories, tmp_path):
    if not GPL3.exists():
        pytest.skip("%s is not here (Debian's base-files has it)" % GPL3)
    import gguf
    shutil.copy(GPL3, tmp_path / "GPL-3")
    cinder("imatrix", "-m", stories, "-f", "GPL-3", "-o", "ours.gguf", "--chunks", "2", "-c", "128", "-t", "1",
           "--process-output", cwd=tmp_path)
    ours, theirs = gguf.GGUFReader(str(tmp_path / "ours.gguf")), gguf.GGUFReader(str(IMATRIX))

    def meta(r):
        return {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("GGUF.")}

    assert meta(ours) == meta(theirs)
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]  # name order too
    for a, b in zip(ours.tensors, theirs.tensors):
        x, y = np.array(a.data, dtype=np.float64).ravel(), np.array(b.data, dtype=np.float64).ravel()
        assert x.shape == y.shape, a.name
        if a.name.endswith(".counts"):
            assert (x == y).all(), (a.name, x, y)
        else:
            assert np.max(np.abs(x - y) / np.abs(y)) < 0.01, a.name


def test_imatrix_without_process_output_has_only_blocks(stories, tmp_path):
    cinder("imatrix", "-m", stories, "-f", KL_TEXT if KL_TEXT.exists() else GPL3, "-o", tmp_path / "im.gguf",
           "--chunks", "1", "-c", "64")
    ent = read_imatrix(tmp_path / "im.gguf")
    assert len(ent) == 35 and all(k.startswith("blk.") for k in ent), sorted(ent)
    assert all(c[0] == 64 for _, c in ent.values())
    # and `cinder quantize --imatrix` takes it
    cinder("quantize", "--imatrix", tmp_path / "im.gguf", stories, tmp_path / "q.gguf", "Q4_K_M")


def test_llama_quantize_takes_cinders_imatrix(stories, tmp_path):
    lb = llama_bin()
    if lb is None:
        pytest.skip("no llama.cpp build: set CINDER_LLAMA_BIN to a folder with llama-quantize")
    cinder("imatrix", "-m", stories, "-f", GPL3, "-o", "im.gguf", "--chunks", "3", "-c", "128", cwd=tmp_path)
    p = subprocess.run([str(lb / "llama-quantize"), "--imatrix", "im.gguf", str(stories), "l.gguf", "Q4_K_M", "1"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0 and "loaded 35 importance matrix entries" in p.stderr + p.stdout, p.stderr
    cinder("quantize", "--imatrix", "im.gguf", stories, "c.gguf", "Q4_K_M", cwd=tmp_path)
    assert sha256(tmp_path / "c.gguf") == sha256(tmp_path / "l.gguf")


@pytest.mark.parametrize("flags", [["--include-weights", "attn_v", "--include-weights", "ffn_down"],
                                   ["--exclude-weights", "blk.0.", "--exclude-weights", "attn"],
                                   ["--include-weights", "no-such-tensor"]])
def test_include_exclude_weights_as_llama_quantize(stories, im_here, flags):
    lb = llama_bin()
    if lb is None:
        pytest.skip("no llama.cpp build: set CINDER_LLAMA_BIN to a folder with llama-quantize")
    p = cinder("quantize", *flags, "--imatrix", IMATRIX.name, stories, "c.gguf", "Q4_0", cwd=im_here)
    n = int(re.search(r"\((\d+) with importance weights\)", p.stderr).group(1))
    full = cinder("quantize", "--imatrix", IMATRIX.name, stories, "f.gguf", "Q4_0", cwd=im_here).stderr
    n_full = int(re.search(r"\((\d+) with importance weights\)", full).group(1))
    assert (n == 0) if flags[1] == "no-such-tensor" else (0 < n < n_full), (n, n_full)
    subprocess.run([str(lb / "llama-quantize"), *flags, "--imatrix", IMATRIX.name, str(stories), "l.gguf", "Q4_0",
                    "1"], cwd=im_here, check=True, capture_output=True)
    assert sha256(im_here / "c.gguf") == sha256(im_here / "l.gguf"), flags


def test_include_and_exclude_weights_together_is_an_error(stories, im_here):
    p = cinder("quantize", "--include-weights", "a", "--exclude-weights", "b", "--imatrix", IMATRIX.name, stories,
               "c.gguf", "Q4_0", cwd=im_here, check=False)
    assert p.returncode == 2 and "not both" in p.stderr and not (im_here / "c.gguf").exists()
    p = cinder("quantize", "--include-weights", "a", stories, "c.gguf", "Q4_0", cwd=im_here, check=False)
    assert p.returncode == 2 and "need --imatrix" in p.stderr


def test_imatrix_bad_input(stories, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("too short")
    p = cinder("imatrix", "-m", stories, "-f", short, "-o", tmp_path / "x.gguf", check=False)
    assert p.returncode == 1 and "fewer than one chunk" in p.stderr, p.stderr
    p = cinder("imatrix", "-m", stories, "-f", tmp_path / "absent.txt", "-o", tmp_path / "x.gguf", check=False)
    assert p.returncode == 1 and "absent.txt" in p.stderr, p.stderr
    p = cinder("imatrix", "-m", stories, "-f", GPL3, "-o", tmp_path / "no" / "dir" / "x.gguf", "--chunks", "1",
               "-c", "64", check=False)
    assert p.returncode == 1 and "cannot create" in p.stderr, p.stderr
    assert not (tmp_path / "x.gguf").exists() and list(tmp_path.iterdir()) == [short]


def file_size_limit(n_bytes):
    """A preexec_fn under which writing a file past n_bytes fails with EFBIG: a full disk."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, n_bytes))
    return limit


def test_imatrix_output_replaced_only_on_success(stories, tmp_path):
    # written through a temporary file: a failed write leaves an existing file as it was
    # and nothing beside it; a good one gets the umask's mode
    if not GPL3.exists():
        pytest.skip("%s not found" % GPL3)
    out = tmp_path / "im.gguf"
    out.write_bytes(b"keep me")
    args = ("imatrix", "-m", stories, "-f", GPL3, "-o", out, "--chunks", "1", "-c", "64")
    p = cinder(*args, check=False, preexec_fn=file_size_limit(1000))
    assert p.returncode == 1 and "cannot write" in p.stderr, p.stderr
    assert out.read_bytes() == b"keep me" and leftovers(tmp_path) == ["im.gguf"]
    cinder(*args, preexec_fn=lambda: os.umask(0o027))
    assert read_imatrix(out) and stat.S_IMODE(out.stat().st_mode) == 0o640 and leftovers(tmp_path) == ["im.gguf"]


# bad imatrix files: a clear message naming the file, a non-zero exit, no output
def bad_imatrix_cases(tmp_path):
    good = IMATRIX.read_bytes()
    ent = read_imatrix(IMATRIX)
    cases = {}
    (tmp_path / "cut.gguf").write_bytes(good[: len(good) - 700])
    cases["cut.gguf"] = "imatrix"
    (tmp_path / "text.txt").write_text("this is not an importance matrix\n")
    cases["text.txt"] = "not an imatrix file"
    write_legacy(tmp_path / "good.dat", {k: (s / c[0], 1) for k, (s, c) in ent.items()})
    (tmp_path / "cut.dat").write_bytes((tmp_path / "good.dat").read_bytes()[:1000])
    cases["cut.dat"] = "past the end of the file"
    bad = dict(ent)
    bad["blk.0.attn_q.weight"] = (ent["blk.0.attn_q.weight"][0][:32], ent["blk.0.attn_q.weight"][1])
    write_imatrix(tmp_path / "size.gguf", bad)
    cases["size.gguf"] = "'blk.0.attn_q.weight' has 32 values, the tensor 64 columns"
    write_imatrix(tmp_path / "nocounts.gguf", {"blk.0.attn_q.weight": (ent["blk.0.attn_q.weight"][0], None)})
    cases["nocounts.gguf"] = "in_sum2 without counts"
    write_imatrix(tmp_path / "nosums.gguf", {"blk.0.attn_q.weight": (None, [1.0])})
    cases["nosums.gguf"] = "counts without in_sum2"
    write_imatrix(tmp_path / "nometa.gguf", ent, meta=False)
    cases["nometa.gguf"] = "without the imatrix metadata"
    nan = dict(ent)
    s = ent["blk.2.ffn_up.weight"][0].copy()
    s[5] = np.nan
    nan["blk.2.ffn_up.weight"] = (s, ent["blk.2.ffn_up.weight"][1])
    write_imatrix(tmp_path / "nan.gguf", nan)
    cases["nan.gguf"] = "non-finite"
    write_imatrix(tmp_path / "f16.gguf", {"blk.0.attn_q.weight": (None, [1.0])},
                  extra={"blk.0.attn_q.weight.in_sum2": np.ones(64, np.float16)})
    cases["f16.gguf"] = "must be F32"
    cases["absent.gguf"] = "cannot open the imatrix"
    return cases


def test_bad_imatrix_files(stories, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    for name, want in bad_imatrix_cases(src).items():
        p = cinder("quantize", "--imatrix", src / name, stories, out / "o.gguf", "Q4_K_M", check=False)
        assert p.returncode in (1, 2) and want in p.stderr, (name, p.stderr)
        # the fallback warnings may come first (a size is checked while the plan is made)
        assert p.stderr.strip().splitlines()[-1].startswith("cinder: quantize: "), p.stderr
        assert leftovers(out) == [], name


# ---- the K types, the Q4_0 ffn_down rule and 3-D weights need 256-wide rows: k_model
# with a synthetic imatrix (seeded, heavy-tailed column weights), against llama-quantize ----

def k_imatrix(k_model, path):
    import gguf
    rng = np.random.default_rng(29)
    ent = {}
    for t in gguf.GGUFReader(str(k_model)).tensors:
        if len(t.shape) == 2 and t.name != "token_embd.weight":
            n = int(t.shape[0])
            mean = rng.lognormal(0.0, 1.5, n).astype(np.float32)
            ent[t.name] = (mean * 384, [384.0])
    write_imatrix(path, ent)


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q6_K", "Q4_K_S", "Q4_K_M", "Q5_K_S",
                                   "Q5_K_M"])
def test_imatrix_k_types_byte_identical_to_llama_quantize(k_model, qtype, tmp_path):
    lb = llama_bin()
    if lb is None:
        pytest.skip("no llama.cpp build: set CINDER_LLAMA_BIN to a folder with llama-quantize")
    k_imatrix(k_model, tmp_path / "k.imatrix")
    cinder("quantize", "--imatrix", "k.imatrix", k_model, "c.gguf", qtype, "-t", "2", cwd=tmp_path)
    subprocess.run([str(lb / "llama-quantize"), "--imatrix", "k.imatrix", str(k_model), "l.gguf", qtype, "2"],
                   check=True, capture_output=True, cwd=tmp_path)
    a, b = (tmp_path / "c.gguf").read_bytes(), (tmp_path / "l.gguf").read_bytes()
    if a != b:
        pytest.fail("%s: %s" % (qtype, first_difference(a, b)))


def test_llama_imatrix_on_the_spot_both_formats(stories, tmp_path):
    """llama-imatrix run here (GGUF and legacy .dat), then llama-quantize and cinder on each."""
    lb = llama_bin()
    if lb is None or not (lb / "llama-imatrix").exists():
        pytest.skip("no llama-imatrix build: set CINDER_LLAMA_BIN to a folder with llama-imatrix and llama-quantize")
    text = tmp_path / "calib.txt"
    text.write_text(TEXT * 8)
    for fmt in ("gguf", "dat"):
        subprocess.run([str(lb / "llama-imatrix"), "-m", str(stories), "-f", str(text), "-o", "im." + fmt,
                        "--output-format", fmt, "--chunks", "2", "-c", "128", "-t", "2"],
                       check=True, capture_output=True, cwd=tmp_path)
        for qtype in ("Q4_K_M", "Q5_1"):
            cinder("quantize", "--imatrix", "im." + fmt, stories, "c.gguf", qtype, cwd=tmp_path)
            subprocess.run([str(lb / "llama-quantize"), "--imatrix", "im." + fmt, str(stories), "l.gguf", qtype, "2"],
                           check=True, capture_output=True, cwd=tmp_path)
            a, b = (tmp_path / "c.gguf").read_bytes(), (tmp_path / "l.gguf").read_bytes()
            if a != b:
                pytest.fail("%s, %s imatrix: %s" % (qtype, fmt, first_difference(a, b)))


def test_imatrix_q4_0_gives_q4_1_to_the_first_ffn_down(k_model, tmp_path):
    import gguf
    k_imatrix(k_model, tmp_path / "k.imatrix")
    cinder("quantize", "--imatrix", tmp_path / "k.imatrix", k_model, tmp_path / "w.gguf", "Q4_0")
    cinder("quantize", k_model, tmp_path / "u.gguf", "Q4_0")
    tw = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "w.gguf")).tensors}
    tu = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "u.gguf")).tensors}
    # 8 layers: the first eighth is layer 0
    assert tw["blk.0.ffn_down.weight"] == "Q4_1" and tu["blk.0.ffn_down.weight"] == "Q4_0"
    assert tw["blk.1.ffn_down.weight"] == "Q4_0"
