#!/usr/bin/env python3
"""make_golden.py — writes tests/golden/<name>.json from llama.cpp (via llama-cpp-python).

Developer-only: it needs llama-cpp-python (see tools/reference/README.md) and is never run
by `make test`. For each model and a few prompts it tokenizes with llama.cpp (BOS added
when the model's metadata says so, special tokens parsed), evaluates the whole prompt in one
batch with logits for every position, records the top-20 (id, logit) at each prompt
position, then greedy-decodes 64 tokens one token at a time (EOS ignored), recording the
top-20 of the logits each token was chosen from. Settings are fixed for reproducibility:
1 thread, default F16 KV cache, flash attention off, n_batch = n_ubatch = n_ctx, and no
extra CPU buffer types (no AMX, no weight repacking: the generic ggml CPU kernels).

The JSON layout (one file per model):
  provenance: tool, llama_cpp_python version, date, command, n_threads, notes, system_info
  model, model_sha256, n_ctx, add_bos, top_k, n_greedy
  cases[]: prompt, tokens, prompt_top[pos][k] = [id, logit], greedy[i],
           greedy_top[i][k] = [id, logit]   (argmax of greedy_top[i] is greedy[i];
           greedy_top[0] is prompt_top[-1]; greedy_top[i>0] come from the one-token decode
           of greedy[i-1] at position len(tokens)+i-1)
Ties in the top-k order and in greedy are broken by the lower token id.
"""

import argparse
import datetime
import hashlib
import json
import os
import shlex
import subprocess
import sys

import numpy as np

TOP_K = 20
N_GREEDY = 64
N_THREADS = 1
SEED = 1234

SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user):
    """SmolLM2-Instruct's chat template rendered for one user turn (default system prompt,
    add_generation_prompt=True)."""
    return ("<|im_start|>system\n" + SMOL_SYSTEM + "<|im_end|>\n"
            "<|im_start|>user\n" + user + "<|im_end|>\n"
            "<|im_start|>assistant\n")


QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def qwen_chat(user):
    """Qwen2.5-Instruct's chat template rendered for one user turn (its default system
    prompt, add_generation_prompt=True; checked against jinja2 in tests/unit/test_chat.c)."""
    return ("<|im_start|>system\n" + QWEN_SYSTEM + "<|im_end|>\n"
            "<|im_start|>user\n" + user + "<|im_end|>\n"
            "<|im_start|>assistant\n")


QWEN_PROMPTS = [
    qwen_chat("What is 2+2?"),
    qwen_chat("Write a C function that returns the larger of two ints."),
    "def quicksort(arr):\n",
    "The capital of France is",
    "\u4e2d\u56fd\u7684\u9996\u90fd\u662f",
    "import numpy as np\n\n# Compute the mean of each column\n",
    "Water boils at a temperature of",
    qwen_chat("What is 7 times 8?"),
    qwen_chat("What is the boiling point of water in Celsius?"),
]
QWEN_NOTES = ("qwen2 arch, byte-level BPE (pre=qwen2, 151936 tokens), no BOS; cases 0, 1, 7 and 8 are "
              "the Qwen2.5 chat template's rendering of one user turn (default system prompt, "
              "add_generation_prompt), special tokens parsed; decoding goes on past <|im_end|>.")

# name -> (where the file lives, file name, prompts, notes)
MODELS = {
    "stories260k": ("testdata", "stories260K.gguf", [
        "Once upon a time",
        "Once upon a time, there was a little girl named Lily. She loved to play outside",
        "The cat sat on the mat and",
        "Tom and his dog went to the park. They",
    ], "llama arch, SentencePiece vocab, all F32; BOS added (no add_bos_token key: the SPM default)."),
    "smollm2-135m-instruct-q4_1": ("models", "SmolLM2-135M-Instruct.Q4_1.gguf", [
        chatml("What is 2+2?"),
        "The capital of France is",
        "def fibonacci(n):\n",
        "Once upon a time, in a small village,",
    ], "llama arch, byte-level BPE (pre=smollm), Q4_1 weights, Q8_0 token_embd, tied output; "
       "add_bos_token=false so no BOS; case 0 is the ChatML chat prompt of the model's template "
       "(default system prompt, add_generation_prompt), special tokens parsed; its answer "
       "ends with <|im_end|> (id 2, EOS) and decoding goes on past it."),
    "gemma3-270m-q4_k_m": ("models", "gemma-3-270m-q4_k_m.gguf", [
        "The quick brown fox",
        "Water boils at a temperature of",
        "def fibonacci(n):\n",
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    ], "gemma3 arch, SentencePiece vocab (262144), Q5_0/Q4_K/Q6_K/Q8_0 weights, tied output; "
       "BOS added; case 3 uses Gemma's turn markers (special tokens parsed; the file has no "
       "chat template); every prompt + 64 tokens stays far below the 512-token sliding "
       "window, so local and global layers differ only in rope base (10000 vs 1e6) here."),
    "qwen2.5-coder-0.5b-instruct-q4_k_m": ("models", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                                           QWEN_PROMPTS, QWEN_NOTES + " Mostly Q5_0 weights, Q8_0 "
                                           "output, Q4_K/Q6_K in a few tensors."),
    "qwen2.5-coder-1.5b-instruct-q4_k_m": ("models", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                                           QWEN_PROMPTS, QWEN_NOTES + " Q4_K/Q6_K weights."),
    "tiny-qwen2": ("tiny", "tiny-qwen2.gguf", [
        "Once upon a time",
        "Hello world",
        "The quick brown fox jumps over the lazy dog",
    ], "random weights from tests/tools/make_tiny_model (qwen2), stories260K tokenizer; BOS added."),
    "tiny-qwen3": ("tiny", "tiny-qwen3.gguf", [
        "Once upon a time",
        "Hello world",
        "The quick brown fox jumps over the lazy dog",
    ], "random weights from tests/tools/make_tiny_model (qwen3), stories260K tokenizer; BOS added."),
    "tiny-llama": ("tiny", "tiny-llama.gguf", [
        "Once upon a time",
        "Hello world",
        "The quick brown fox jumps over the lazy dog",
    ], "random weights from tests/tools/make_tiny_model (llama), stories260K tokenizer; BOS added."),
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fmt(x):
    """A logit with 7 significant digits, as a JSON number."""
    return float("%.7g" % float(x))


def top_k(logits, k=TOP_K):
    """Top-k (id, logit) of one row, by logit descending then id ascending."""
    order = np.lexsort((np.arange(logits.shape[0]), -logits.astype(np.float64)))[:k]
    return [[int(i), fmt(logits[i])] for i in order]


def argmax(logits):
    return int(np.argmax(logits))  # first maximum, i.e. the lowest id on a tie


def dumps(doc):
    """JSON with one line per top-level key, per case key and per top-k row, so that a
    remade golden diffs readably."""
    c = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    lines = []
    for k, v in doc.items():
        if k != "cases":
            lines.append(" %s: %s" % (c(k), c(v)))
    cases = []
    for case in doc["cases"]:
        fields = []
        for k, v in case.items():
            if k in ("prompt_top", "greedy_top"):
                fields.append("   %s: [\n    %s\n   ]" % (c(k), ",\n    ".join(c(r) for r in v)))
            else:
                fields.append("   %s: %s" % (c(k), c(v)))
        cases.append("  {\n" + ",\n".join(fields) + "\n  }")
    lines.append(' "cases": [\n' + ",\n".join(cases) + "\n ]")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def no_extra_buffer_types(llama_cpp):
    """Loads weights without llama.cpp's extra CPU buffer types (AMX tiles, repacked
    interleaved blocks): the generic ggml CPU path, the same on any x86/arm machine. The
    AMX path also crashes (ldtilecfg) where the kernel does not grant AMX to the process.
    Llama() builds its model params from llama_model_default_params(), so wrap that."""
    import llama_cpp.llama as llama_mod
    default = llama_mod.llama_cpp.llama_model_default_params
    if getattr(default, "_cinder_wrapped", False):
        return

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    params._cinder_wrapped = True
    llama_mod.llama_cpp.llama_model_default_params = params


def run_model(llama_cpp, path, prompts, n_ctx):
    no_extra_buffer_types(llama_cpp)
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
        n_threads=N_THREADS, n_threads_batch=N_THREADS, logits_all=True,
        flash_attn=False, seed=SEED, verbose=False)
    assert not llm.model_params.use_extra_bufts
    add_bos = bool(llm._model.add_bos_token())
    cases = []
    for prompt in prompts:
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        if len(tokens) + N_GREEDY > n_ctx:
            sys.exit("prompt too long for n_ctx: %r" % prompt)
        llm.reset()
        llm.eval(tokens)
        scores = np.array(llm.scores[:len(tokens)], dtype=np.float32)
        prompt_top = [top_k(row) for row in scores]
        greedy, greedy_top = [], []
        logits = scores[-1]
        for step in range(N_GREEDY):
            greedy_top.append(top_k(logits))
            tok = argmax(logits)
            greedy.append(tok)
            if step + 1 == N_GREEDY:
                break
            llm.eval([tok])
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        cases.append({"prompt": prompt, "tokens": [int(t) for t in tokens],
                      "prompt_top": prompt_top, "greedy": greedy, "greedy_top": greedy_top})
    del llm
    return add_bos, cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="goldens to make (default: all): " + ", ".join(MODELS))
    ap.add_argument("--testdata", default=os.environ.get("CINDER_TESTDATA", "../shared/testdata"),
                    help="folder holding models/stories260K.gguf")
    ap.add_argument("--models", default=os.environ.get(
        "CINDER_MODELS", os.path.expanduser("~/.cache/cinder/models")),
                    help="folder holding the downloaded real models")
    ap.add_argument("--tiny", default="build/tiny",
                    help="folder the tiny-*.gguf models are (re)made in")
    ap.add_argument("--tool", default="build/tools/make_tiny_model",
                    help="cinder's tiny-model generator (tests/tools/make_tiny_model.c)")
    ap.add_argument("--out", default="tests/golden")
    ap.add_argument("--n-ctx", type=int, default=256)
    args = ap.parse_args()

    import llama_cpp  # only here, so --help works without it

    names = args.names or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit("unknown golden %r (known: %s)" % (name, ", ".join(MODELS)))
    dirs = {"testdata": os.path.join(args.testdata, "models"), "models": args.models,
            "tiny": args.tiny}
    # The command as given, with any absolute path (a folder of this machine) elided.
    command = " ".join(["python", "tools/reference/make_golden.py"] + [
        "<path>" if os.path.isabs(os.path.expanduser(a)) else shlex.quote(a)
        for a in sys.argv[1:]])
    sysinfo = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        where, fname, prompts, notes = MODELS[name]
        path = os.path.join(dirs[where], fname)
        if where == "tiny":  # always remade, so the golden pins the generator's bytes
            os.makedirs(args.tiny, exist_ok=True)
            arch = name[len("tiny-"):]
            subprocess.run([args.tool, arch, path], check=True,
                           env=dict(os.environ, CINDER_TESTDATA=args.testdata))
        if not os.path.exists(path):
            sys.exit("missing model %s" % path)
        add_bos, cases = run_model(llama_cpp, path, prompts, args.n_ctx)
        doc = {
            "provenance": {
                "tool": "tools/reference/make_golden.py",
                "llama_cpp_python": llama_cpp.__version__,
                "date": datetime.date.today().isoformat(),
                "command": command,
                "n_threads": N_THREADS,
                "notes": notes + " Prompt evaluated in one batch with logits for every "
                         "position; then one token per decode call. F16 KV cache, flash "
                         "attention off, no extra CPU buffer types (use_extra_bufts=false: no "
                         "AMX, no weight repacking), seed %d (unused: greedy)." % SEED,
                "system_info": sysinfo,
            },
            "model": fname,
            "model_sha256": sha256_file(path),
            "n_ctx": args.n_ctx,
            "add_bos": add_bos,
            "top_k": TOP_K,
            "n_greedy": N_GREEDY,
            "cases": cases,
        }
        out = os.path.join(args.out, name + ".json")
        with open(out, "w") as f:
            f.write(dumps(doc))
        print("%s: %d cases, %d bytes" % (out, len(cases), os.path.getsize(out)), file=sys.stderr)


if __name__ == "__main__":
    main()
