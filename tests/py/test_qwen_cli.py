"""The real Qwen2.5-Coder Instruct models (0.5B and 1.5B) through the CLI: `cinder run --chat`
renders the model's own chat template, tokenizes it as llama.cpp does, greedy-decodes
llama.cpp's tokens and stops at <|im_end|>; `cinder chat` keeps a conversation.

Truth: the goldens tests/golden/qwen2.5-coder-*-instruct-q4_k_m.json, made by llama.cpp
(llama-cpp-python 0.3.36, tools/reference/make_golden.py). Their case 0 is the Qwen2.5 chat
template's rendering of the user turn "What is 2+2?" (default system prompt, generation
prompt), so `cinder run --chat -p "What is 2+2?"` must produce its tokens and greedy ids up
to <|im_end|>; case 2 is a plain code prompt whose first 32 greedy tokens cinder matches
exactly (test_golden.c checks every case's logits).
The two-turn chat checks that the second reply sees the first turn (the name given in
turn 1 comes back in turn 2, which the model cannot guess). The models come from
scripts/fetch_models.sh (make test fetches them); a missing model is a failure. These run
on $CINDER_BIN only: the ASan build would take minutes on a 1.5B model.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EOS = 151645  # <|im_end|>
QWEN = {"0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m", "1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m"}


def cinder_bin():
    p = Path(os.environ.get("CINDER_BIN", "build/cinder"))
    return p if p.is_absolute() else ROOT / p


def model(size):
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    m = Path(d) / (QWEN[size] + ".gguf")
    assert m.exists(), f"model {m} is missing: run scripts/fetch_models.sh all (make test does)"
    return str(m)


def golden_case0(size):
    g = json.loads((ROOT / "tests" / "golden" / (QWEN[size] + ".json")).read_text())
    case = g["cases"][0]
    assert case["prompt"].endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    return case


def run(*args, stdin=None):
    r = subprocess.run([str(cinder_bin()), *args], capture_output=True, text=True, cwd=ROOT,
                       input=stdin, timeout=600)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("size", list(QWEN))
def test_run_chat_matches_llama_cpp_and_stops_at_im_end(size):
    case = golden_case0(size)
    want = case["greedy"][:case["greedy"].index(EOS)]
    j = json.loads(run("run", "-m", model(size), "-t", "2", "--chat", "-p", "What is 2+2?",
                       "--temp", "0", "--json").stdout)
    assert j["n_prompt_tokens"] == len(case["tokens"])
    assert j["tokens"] == want, (j["text"], j["tokens"], want)
    assert j["finish_reason"] == "stop"
    assert "4" in j["text"] and "<|im_end|>" not in j["text"]


@pytest.mark.parametrize("size", list(QWEN))
def test_run_code_prompt_32_tokens_match_llama_cpp(size):
    g = json.loads((ROOT / "tests" / "golden" / (QWEN[size] + ".json")).read_text())
    case = g["cases"][2]
    assert case["prompt"] == "def quicksort(arr):\n" and EOS not in case["greedy"][:32]
    j = json.loads(run("run", "-m", model(size), "-t", "2", "-p", case["prompt"], "--temp", "0",
                       "-n", "32", "--json").stdout)
    assert j["n_prompt_tokens"] == len(case["tokens"])
    assert j["finish_reason"] == "length"
    assert j["tokens"] == case["greedy"][:32]


def test_chat_keeps_the_conversation():
    r = run("chat", "-m", model("0.5b"), "-t", "2", "--temp", "0", "-n", "16",
            stdin="My name is Zorblax. Reply with just OK.\nWhat is my name? Reply with just the name.\n")
    replies = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(replies) == 2, r.stdout
    assert "Zorblax" not in replies[0] and "Zorblax" in replies[1], r.stdout
    turns = [line for line in r.stderr.splitlines() if "turn" in line]
    assert len(turns) == 2 and "finish stop" in turns[0] and "finish stop" in turns[1], r.stderr
    assert "reused" in turns[1] and "(0 reused)" not in turns[1], r.stderr


def test_chat_with_tools_calls_and_reads_the_result(tmp_path):
    """`cinder chat --tools FILE`: the call goes to stderr with arguments that validate
    against the tool's schema (the grammar promises it), the next stdin line is taken as its
    result, and the chat ends cleanly at EOF. A tools file that is not an array is a clear
    error with a non-zero exit."""
    import jsonschema
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                       "additionalProperties": False}}}]
    f = tmp_path / "tools.json"
    f.write_text(json.dumps(tools))
    r = subprocess.run([str(cinder_bin()), "chat", "-m", model("0.5b"), "-t", "2", "--temp", "0", "-n", "60",
                        "--tools", str(f)], input="What is the weather in Rome?\n{\"temperature_c\": 17}\n",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    calls = [l for l in r.stderr.splitlines() if l.startswith("call ")]
    assert calls, r.stderr
    name, _, args = calls[0].split(" ", 2)[2].partition("(")
    assert name == "get_weather"
    jsonschema.validate(json.loads(args[:-1]), tools[0]["function"]["parameters"])
    # a bad tools file is a clear error
    bad = tmp_path / "bad.json"
    bad.write_text("{\"not\": \"an array\"}")
    r = subprocess.run([str(cinder_bin()), "chat", "-m", model("0.5b"), "-t", "2", "--tools", str(bad)],
                       input="hi\n", capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "not a JSON array of tools" in r.stderr
