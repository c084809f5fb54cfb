"""`cinder tokenize` on the project's real models against llama.cpp.

Independent truth: llama-cpp-python 0.3.36 (llama.cpp's own tokenizer), loaded with
vocab_only=True on SmolLM2-135M-Instruct (byte-level BPE, pre "smollm", 49152 tokens),
gemma-3-270m (SentencePiece-style, 262144 tokens, add_space_prefix false) and the two
Qwen2.5-Coder Instruct models (byte-level BPE, pre "qwen2", 151936 tokens, one vocabulary
in two files: both are checked, since each file carries its own copy), tokenizing the
TEXTS below with (add_special, parse_special) = (true, true), the CLI's default, and
(false, false). The expected ids are in test_tokenize_models_golden.json; remake them with

    <python with llama-cpp-python> tests/py/test_tokenize_models.py --regen \
        > tests/py/test_tokenize_models_golden.json The models come from scripts/setup.sh --all (cached in
$CINDER_MODELS, default ~/.cache/cinder/models); a missing model is a failure.

One known difference is left out of TEXTS: llama.cpp releases after 2025-02 force the text
"</s>" to a control token for every vocabulary (added for one OCR model), which changes
Gemma's user-defined "</s>"; cinder keeps Gemma's own token type, as Hugging Face does.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf",
          "qwen0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
          "qwen1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"}
TEXTS = [
    "ied 4 \u00bd months",
    "F\u00fchrer",
    " this is \U0001f999.cpp",
    "\U0001f680 (normal) \U0001f636\u200d\U0001f32b\ufe0f (multiple emojis concatenated) \u2705 (only emoji that has its own token)",
    "    Hello\n    Hello",
    "Hello, y'all! How are you \U0001f601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
    "<start_of_turn>user\nHello, how are you?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\n  spaced   out\t\ttabs<end_of_turn>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|im_end|><|im_end|>x",
    "def f(x):\n    return x**2  # square\n\n\nprint(f(12345678))\n",
    "   leading and trailing   ",
    "\u00dcn\u00efc\u00f6d\u00e9 \u2014 \u201cquotes\u201d \u2018single\u2019 \u2026 \u00bd \u00be "
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 "
    "\ud55c\uad6d\uc5b4 \u0442\u0435\u043a\u0441\u0442 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940",
    "a\r\nb\rc\n\r\n",
    "I'm, you're, they've, it'll, we'd, He'S, SHE'LL",
    "\u00a0non-breaking\u2003em-space\u3000ideographic\u200bzwsp",
    "\U0001f600\U0001f603\U0001f604\U0001f601\U0001f606\U0001f605\U0001f602\U0001f923\U0001f972\u263a\ufe0f",
    "<unused0><mask>[multimodal]<pad><eos><s>",
    "x" * 300 + " " * 50 + "y",
    # code, Chinese, emoji and whitespace-heavy texts for the Qwen vocabulary (all models run them)
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot\r\n",
    "\u4eba\u5de5\u667a\u80fd\u662f\u8ba1\u7b97\u673a\u79d1\u5b66\u7684\u4e00\u4e2a\u5206\u652f\uff0c"
    "\u5b83\u4f01\u56fe\u4e86\u89e3\u667a\u80fd\u7684\u5b9e\u8d28\u3002\u201c\u4f60\u597d\u201d\uff01",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family, \U0001f3f3\ufe0f\u200d\U0001f308 flag, "
    "\U0001f44d\U0001f3fd thumbs \U0001f1e8\U0001f1f3",
    "\n\n\n    \t  \n  x  \n\t\t\ty\n\n      \n",
    "3.14159 1234567890 1,000,000 0x1F 1e-9",
    "<|im_start|>user\n\u4f60\u597d<|im_end|>\n<|im_start|>assistant\n",
    "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y<|fim_middle|>",
    "<|endoftext|><|im_start|><|im_end|><|file_sep|>",
]
MODES = [(True, True), (False, False)]


def model_path(name):
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    return Path(d) / MODELS[name]


def regen():
    import llama_cpp

    out = {"_provenance": f"llama-cpp-python {llama_cpp.__version__}, vocab_only, "
                          "made by tests/py/test_tokenize_models.py --regen"}
    for name in MODELS:
        llm = llama_cpp.Llama(model_path=str(model_path(name)), vocab_only=True, verbose=False)
        out[name] = [[llm.tokenize(t.encode("utf-8"), add_bos=a, special=s) for a, s in MODES]
                     for t in TEXTS]
    json.dump(out, sys.stdout, separators=(",", ":"))
    print()


def cinder_bin():
    p = Path(os.environ.get("CINDER_BIN", "build/cinder"))
    return p if p.is_absolute() else ROOT / p


def golden():
    return json.loads((Path(__file__).with_name("test_tokenize_models_golden.json")).read_text())


def test_models_match_llama_cpp():
    g = golden()
    failures = []
    for name in MODELS:
        model = model_path(name)
        assert model.exists(), f"model {model} is missing: run scripts/setup.sh --all (or set CINDER_MODELS)"
        assert len(g[name]) == len(TEXTS)
        for i, text in enumerate(TEXTS):
            for m, (add, special) in enumerate(MODES):
                args = [str(cinder_bin()), "tokenize", "-m", str(model), "--ids"]
                if not add:
                    args.append("--no-bos")
                if not special:
                    args.append("--no-special")
                r = subprocess.run(args + ["--", text], capture_output=True, timeout=60)
                assert r.returncode == 0, r.stderr.decode()
                got = [int(x) for x in r.stdout.split()]
                want = g[name][i][m]
                if got != want:
                    k = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                    failures.append(f"{name} text {i} {text[:40]!r} add={add} special={special}: "
                                    f"index {k}: got {got[k:k + 5]}, want {want[k:k + 5]}")
    assert not failures, "\n".join(failures)


if __name__ == "__main__" and "--regen" in sys.argv:
    regen()
