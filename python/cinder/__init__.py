"""cinder: a fast LLM inference engine in C, from Python.

    import cinder
    m = cinder.Model()                      # the default model (SmolLM2-135M-Instruct)
    print(m.generate("Once upon a time", max_tokens=32, temperature=0).text)
    for piece in m.stream("Tell me a story.", max_tokens=64):
        print(piece, end="", flush=True)
    print(m.chat([{"role": "user", "content": "Name three prime numbers."}]).text)
    print(cinder.explain({"blue": 0.5, "gray": 0.25, "clear": 0.15, "dark": 0.10}, top_p=0.7))
    m.generate("A user as JSON: ", json_schema={"type": "object", "properties": {"name": {"type": "string"}},
                                                  "required": ["name"]}).text

The bindings are ctypes over libcinder.so (include/cinder.h): no compiler is needed at
install time beyond the one that builds the library. Generation runs in a worker thread
with the GIL released (ctypes drops it for the C call), so other Python threads keep
running; Ctrl-C (KeyboardInterrupt) cancels the request cleanly and re-raises. A Model
runs one request at a time (a lock serializes calls from several threads). Errors raise
CinderError with cinder's message and status.

Structured output: generate/chat/stream take one of json_schema= (a dict or its JSON
text), grammar= (llama.cpp's GBNF), regex= (matched in full) or choices= (a list of
strings); the output is constrained token by token. Each distinct constraint is compiled
once per Model and kept (the last GRAMMAR_CACHE of them).
"""
import collections
import ctypes
import ctypes.util
import json
import math
import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

__all__ = ["Model", "Completion", "TokenLogprob", "Explanation", "CinderError", "explain", "default_model_path",
           "version"]

# ---- the library ----


def _load_library():
    here = Path(__file__).resolve().parent
    for cand in (os.environ.get("CINDER_LIB"), here / "libcinder.so", ctypes.util.find_library("cinder")):
        if cand and (not isinstance(cand, Path) or cand.exists()):
            try:
                return ctypes.CDLL(str(cand))
            except OSError as e:
                last = e
                continue
    raise ImportError("cinder: libcinder.so not found: install this package from a cinder checkout "
                      "(pip install ./python), run `make install`, or set CINDER_LIB" +
                      (f" ({last})" if "last" in locals() else ""))


_lib = _load_library()

c_int32, c_int64, c_uint64, c_float, c_double, c_bool, c_char_p, c_void_p, c_size_t = (
    ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float, ctypes.c_double, ctypes.c_bool,
    ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)

STATUS = ["ok", "invalid_arg", "io", "corrupt", "unsupported", "no_memory", "not_found", "limit", "busy", "cancelled"]
FINISH = ["none", "stop", "length", "cancelled"]
STAGES = ["logit_bias", "penalties", "temperature", "top_k", "top_p", "min_p", "typical"]
STAGE_TITLES = {"logit_bias": "Logit bias", "penalties": "Penalties", "temperature": "Temperature",
                "top_k": "Top-k", "top_p": "Top-p", "min_p": "Min-p", "typical": "Typical"}
MAX_LOGPROBS = 20
SEED_RANDOM = 2 ** 64 - 1
TYPE_F32, TYPE_F16, TYPE_Q8_0 = 0, 1, 8


class _Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * 256), ("param", ctypes.c_char * 64)]


class _LogitBias(ctypes.Structure):
    _fields_ = [("token", c_int32), ("bias", c_float)]


class _Sampling(ctypes.Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float), ("min_p", c_float),
                ("typical_p", c_float), ("repetition_penalty", c_float), ("presence_penalty", c_float),
                ("frequency_penalty", c_float), ("penalty_last_n", c_int32),
                ("logit_bias", ctypes.POINTER(_LogitBias)), ("n_logit_bias", c_int32), ("seed", c_uint64),
                ("n_logprobs", c_int32), ("ignore_eos", c_bool), ("n_chain", c_int32),
                ("chain", ctypes.c_int * len(STAGES))]


class _Beam(ctypes.Structure):
    _fields_ = [("n_beams", c_int32), ("length_penalty", c_float), ("early_stopping", c_bool)]


class _GenLogprob(ctypes.Structure):
    _fields_ = [("id", c_int32), ("logprob", c_float)]


class _GenToken(ctypes.Structure):
    _fields_ = [("id", c_int32), ("index", c_int32), ("has_logprob", c_bool), ("logprob", c_float),
                ("n_top", c_int32), ("top", _GenLogprob * MAX_LOGPROBS)]


_TEXT_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(ctypes.c_char), c_size_t)
_TOKEN_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(_GenToken))
_CANCEL_FN = ctypes.CFUNCTYPE(c_bool, c_void_p)


class _Gen(ctypes.Structure):
    _fields_ = [("sampling", _Sampling), ("max_tokens", c_int32), ("stop", ctypes.POINTER(c_char_p)),
                ("n_stop", c_int32), ("logprobs_after_chain", c_bool), ("beam", _Beam), ("lookup_n", c_int32),
                ("max_draft", c_int32), ("draft", c_bool), ("grammar", c_void_p), ("on_text", _TEXT_FN),
                ("on_token", _TOKEN_FN), ("should_cancel", _CANCEL_FN), ("user", c_void_p)]


GRAMMAR_JSON_SCHEMA, GRAMMAR_JSON_OBJECT, GRAMMAR_GBNF, GRAMMAR_REGEX, GRAMMAR_CHOICE, GRAMMAR_TOOLS = range(6)
TOOL_CHOICE_AUTO, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NAMED = range(3)
TOOL_EV_CONTENT, TOOL_EV_REASONING, TOOL_EV_CALL, TOOL_EV_ARGS, TOOL_EV_BROKEN = range(5)
GRAMMAR_CACHE = 16  # compiled grammars a Model keeps


class _GrammarParams(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("source", c_char_p), ("source_len", c_size_t),
                ("choices", ctypes.POINTER(c_char_p)), ("n_choices", c_size_t), ("flexible_whitespace", c_bool),
                ("max_states", c_size_t), ("max_compile_ms", c_double), ("tool_format", ctypes.c_int),
                ("tool_choice", ctypes.c_int), ("tool_name", c_char_p), ("parallel_tool_calls", c_bool)]


class _ChatTurn(ctypes.Structure):
    _fields_ = [("messages_json", c_char_p), ("tools_json", c_char_p), ("vars_json", c_char_p)]


class _ChatTurnInfo(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("think", c_bool), ("in_think", c_bool)]


class _ToolEvent(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index", c_int32), ("name", c_char_p), ("text", c_void_p), ("len", c_size_t)]


class _Timings(ctypes.Structure):
    _fields_ = [("n_prompt_tokens", c_int32), ("n_cached_tokens", c_int32), ("n_generated_tokens", c_int32)] + [
        (n, c_double) for n in ("queue_ms", "prefill_ms", "ttft_ms", "decode_ms", "total_ms", "itl_mean_ms",
                                "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "prefill_tok_s", "decode_tok_s")]


class _ModelParams(ctypes.Structure):
    _fields_ = [("prefault", c_bool)]


class _ModelInfo(ctypes.Structure):
    _fields_ = [("arch", ctypes.c_char * 32), ("name", ctypes.c_char * 128)] + [
        (n, c_int32) for n in ("n_vocab", "n_ctx_train", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff")] + [
        ("n_params", c_int64), ("file_bytes", c_uint64)]


class _ChatMsg(ctypes.Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class _ContextParams(ctypes.Structure):
    _fields_ = [("n_threads", c_int32), ("n_ctx", c_int32), ("n_batch", c_int32), ("kv_type", ctypes.c_int),
                ("n_seq_max", c_int32), ("chat_template", c_char_p), ("draft", c_void_p)]


class _Prompt(ctypes.Structure):
    _fields_ = [("text", c_char_p), ("tokens", ctypes.POINTER(c_int32)), ("n_tokens", c_int32),
                ("messages", ctypes.POINTER(_ChatMsg)), ("n_messages", c_size_t)]


class _Result(ctypes.Structure):
    _fields_ = [("text", ctypes.POINTER(ctypes.c_char)), ("n_text", c_size_t), ("tokens", ctypes.POINTER(_GenToken)),
                ("n_tokens", c_int32), ("n_prompt_tokens", c_int32), ("finish_reason", ctypes.c_int),
                ("stop_index", c_int32), ("seed", c_uint64), ("timings", _Timings), ("beam_score", c_double),
                ("beam_sum_logprob", c_double), ("beam_n_finished", c_int32)] + [
        (n, c_int64) for n in ("spec_target_passes", "spec_drafted", "spec_accepted", "spec_plain_passes",
                               "spec_draft_passes")]


class _Candidate(ctypes.Structure):
    _fields_ = [("id", c_int32), ("logit", c_float), ("p", c_float)]


class _ExplainResult(ctypes.Structure):
    _fields_ = [("greedy", c_int32), ("token", c_int32), ("p", c_float), ("n_kept", c_int32), ("u", c_double),
                ("seed", c_uint64)]


class _FimChunk(ctypes.Structure):
    _fields_ = [("filename", c_char_p), ("text", c_char_p)]


class _FimParams(ctypes.Structure):
    _fields_ = [("prefix", c_char_p), ("suffix", c_char_p), ("prompt", c_char_p), ("extra", ctypes.POINTER(_FimChunk)),
                ("n_extra", c_size_t), ("n_batch", c_int32), ("n_extra_max", c_int32), ("spm", c_bool)]


class _EmbedderParams(ctypes.Structure):
    _fields_ = [("n_threads", c_int32), ("n_batch", c_int32), ("max_seqs", c_int32), ("pooling", ctypes.c_int),
                ("normalize", c_bool)]


POOLING = {"mean": 1, "cls": 2, "last": 3}

_STAGE_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.c_int, ctypes.POINTER(_Candidate), c_size_t)


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


P = ctypes.POINTER
_version = _fn("cn_version", c_char_p)
_abi_size = _fn("cn_abi_size", c_size_t, c_char_p)
_sampling_default = _fn("cn_sampling_default_params", _Sampling)
_gen_default = _fn("cn_gen_default_params", _Gen)
_model_default = _fn("cn_model_default_params", _ModelParams)
_model_load = _fn("cn_model_load", ctypes.c_int, c_char_p, P(_ModelParams), P(c_void_p), P(_Error))
_model_free = _fn("cn_model_free", None, c_void_p)
_model_info = _fn("cn_model_get_info", None, c_void_p, P(_ModelInfo))
_ctx_default = _fn("cn_context_default_params", _ContextParams)
_ctx_create = _fn("cn_context_create", ctypes.c_int, c_void_p, P(_ContextParams), P(c_void_p), P(_Error))
_ctx_free = _fn("cn_context_free", None, c_void_p)
_ctx_tokenizer = _fn("cn_context_tokenizer", c_void_p, c_void_p)
_ctx_chat = _fn("cn_context_chat_template", c_void_p, c_void_p)
_ctx_n_ctx = _fn("cn_context_n_ctx", c_int32, c_void_p)
_ctx_generate = _fn("cn_context_generate", ctypes.c_int, c_void_p, P(_Prompt), P(_Gen), P(_Result), P(_Error))
_ctx_logits = _fn("cn_context_logits", ctypes.c_int, c_void_p, P(_Prompt), P(c_float), P(_Error))
_result_free = _fn("cn_result_free", None, P(_Result))
_tokenize = _fn("cn_tokenize", ctypes.c_int, c_void_p, ctypes.c_char_p, c_size_t, c_bool, c_bool, P(c_int32),
                c_size_t, P(c_size_t), P(_Error))
_detokenize = _fn("cn_detokenize", ctypes.c_int, c_void_p, P(c_int32), c_size_t, c_bool, P(P(ctypes.c_char)),
                  P(c_size_t), P(_Error))
_token_to_piece = _fn("cn_token_to_piece", c_size_t, c_void_p, c_int32, c_bool, ctypes.c_char_p, c_size_t)
_n_vocab = _fn("cn_tokenizer_n_vocab", c_int32, c_void_p)
_bos = _fn("cn_tokenizer_bos", c_int32, c_void_p)
_eos = _fn("cn_tokenizer_eos", c_int32, c_void_p)
_chat_name = _fn("cn_chat_template_name", c_char_p, c_void_p)
_explain = _fn("cn_explain", ctypes.c_int, P(c_float), c_int32, P(_Sampling), P(c_int32), c_size_t, _STAGE_FN,
               c_void_p, P(_ExplainResult), P(_Error))
_grammar_default = _fn("cn_grammar_default_params", _GrammarParams)
_grammar_compile = _fn("cn_grammar_compile", ctypes.c_int, c_void_p, P(_GrammarParams), P(c_void_p), P(_Error))
_grammar_free = _fn("cn_grammar_free", None, c_void_p)
_turn_prepare = _fn("cn_chat_turn_prepare", ctypes.c_int, c_void_p, P(_ChatTurn), P(c_void_p), P(c_size_t),
                    P(_ChatTurnInfo), P(_Error))
_reader_new = _fn("cn_tool_reader_new", ctypes.c_int, ctypes.c_int, c_bool, c_bool, P(c_void_p), P(_Error))
_reader_free = _fn("cn_tool_reader_free", None, c_void_p)
_reader_feed = _fn("cn_tool_reader_feed", ctypes.c_int, c_void_p, ctypes.c_char_p, c_size_t, c_bool,
                   P(P(_ToolEvent)), P(c_size_t), P(_Error))
_fim_default = _fn("cn_fim_default_params", _FimParams)
_fim_prompt = _fn("cn_fim_prompt", ctypes.c_int, c_void_p, P(_FimParams), P(P(c_int32)), P(c_size_t), P(_Error))
_emb_default = _fn("cn_embedder_default_params", _EmbedderParams)
_emb_create = _fn("cn_embedder_create", ctypes.c_int, c_void_p, P(_EmbedderParams), P(c_void_p), P(_Error))
_emb_free = _fn("cn_embedder_free", None, c_void_p)
_emb_n_embd = _fn("cn_embedder_n_embd", c_int32, c_void_p)
_emb_pooling = _fn("cn_embedder_pooling", ctypes.c_int, c_void_p)
_emb_texts = _fn("cn_embedder_embed_texts", ctypes.c_int, c_void_p, P(c_char_p), c_size_t, P(c_float), P(_Error))
_emb_tokens = _fn("cn_embedder_embed", ctypes.c_int, c_void_p, P(P(c_int32)), P(c_int32), c_size_t, P(c_float),
                  P(_Error))
_ctx_n_threads = _fn("cn_context_n_threads", c_int32, c_void_p)
_libc_free = ctypes.CDLL(None).free
_libc_free.argtypes = [c_void_p]

for _name, _cls in (("cn_error", _Error), ("cn_sampling_params", _Sampling), ("cn_gen_params", _Gen),
                    ("cn_gen_token", _GenToken), ("cn_gen_timings", _Timings), ("cn_model_params", _ModelParams),
                    ("cn_model_info", _ModelInfo), ("cn_chat_msg", _ChatMsg), ("cn_context_params", _ContextParams),
                    ("cn_prompt", _Prompt), ("cn_result", _Result), ("cn_candidate", _Candidate),
                    ("cn_explain_result", _ExplainResult), ("cn_logit_bias", _LogitBias), ("cn_beam_params", _Beam),
                    ("cn_grammar_params", _GrammarParams), ("cn_chat_turn", _ChatTurn),
                    ("cn_chat_turn_info", _ChatTurnInfo), ("cn_tool_event", _ToolEvent), ("cn_fim_chunk", _FimChunk),
                    ("cn_fim_params", _FimParams), ("cn_embedder_params", _EmbedderParams)):
    if _name == "cn_grammar_params" and _abi_size(_name.encode()) == 0:
        continue  # a library whose size table does not list it yet
    if _abi_size(_name.encode()) != ctypes.sizeof(_cls):
        raise ImportError(f"cinder: {_name} is {_abi_size(_name.encode())} bytes in libcinder "
                          f"{_version().decode()} but {ctypes.sizeof(_cls)} here: the bindings do not match the library")


def version() -> str:
    """The library's version."""
    return _version().decode()


class CinderError(Exception):
    """A cinder call failed: .status names the kind ("invalid_arg", "limit", ...), .param
    the parameter at fault ("top_p"; "" when none is), the message is cinder's."""

    def __init__(self, status: str, message: str, param: str = ""):
        super().__init__(message)
        self.status = status
        self.param = param


def _check(st, err):
    if st != 0:
        raise CinderError(STATUS[st] if 0 <= st < len(STATUS) else str(st), err.msg.decode("utf-8", "replace"),
                          err.param.decode("utf-8", "replace"))


def default_model_path() -> str:
    """$CINDER_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf, else under ~/.cache/cinder/models (where
    scripts/setup.sh puts it)."""
    d = os.environ.get("CINDER_MODELS") or os.path.expanduser("~/.cache/cinder/models")
    return str(Path(d) / "SmolLM2-135M-Instruct.Q4_1.gguf")


# ---- results ----


@dataclass
class TokenLogprob:
    token: int
    text: str
    logprob: float
    top: List[Tuple[int, str, float]] = field(default_factory=list)  # (id, text, logprob), most likely first


@dataclass
class Completion:
    text: str
    tokens: List[int]
    finish_reason: str          # "stop", "length" or "cancelled"
    timings: Dict[str, float]   # time to first token, prefill/decode tok/s, inter-token latency, ...
    seed: int
    n_prompt_tokens: int
    logprobs: Optional[List[TokenLogprob]] = None
    stop_index: int = -1        # which stop string ended it, -1 if none
    # chat(tools=...): the reply taken apart (text is the whole reply as the model wrote it)
    content: Optional[str] = None           # the text for the user, calls and thoughts taken out
    reasoning: Optional[str] = None         # between <think> and </think>, for templates that think
    tool_calls: Optional[List[Dict[str, Any]]] = None  # [{"id", "type": "function", "function": {"name", "arguments"}}]


@dataclass
class Explanation:
    """One sampling step, stage by stage: .input and each stage's kept set are lists of
    (name, probability), most probable first."""
    input: List[Tuple[str, float]]
    greedy: str
    stages: List[Tuple[str, List[Tuple[str, float]]]]
    drawn: str
    drawn_p: float
    seed: int
    show: int = 10

    def __str__(self):
        lines = [f"Greedy: {self.greedy}"]
        for name, kept in self.stages:
            lines.append(f"{STAGE_TITLES.get(name, name)}: {[(t, round(p, 3)) for t, p in kept[:self.show]]}")
        lines.append(f"Drawn: {self.drawn} ({self.drawn_p:.3f}, seed {self.seed})")
        return "\n".join(lines)


# ---- sampling parameters ----


def _sampling(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, typical_p=1.0, repetition_penalty=1.0,
              presence_penalty=0.0, frequency_penalty=0.0, seed=None, logit_bias=None, logprobs=None,
              ignore_eos=False, keep=None):
    s = _sampling_default()
    s.temperature, s.top_p, s.top_k, s.min_p, s.typical_p = temperature, top_p, top_k, min_p, typical_p
    s.repetition_penalty, s.presence_penalty, s.frequency_penalty = (repetition_penalty, presence_penalty,
                                                                     frequency_penalty)
    s.seed = SEED_RANDOM if seed is None else int(seed)
    s.n_logprobs = -1 if logprobs is None else int(logprobs)
    s.ignore_eos = bool(ignore_eos)
    if logit_bias:
        arr = (_LogitBias * len(logit_bias))(*[_LogitBias(int(k), float(v)) for k, v in logit_bias.items()])
        keep.append(arr)
        s.logit_bias, s.n_logit_bias = arr, len(logit_bias)
    return s


def explain(probs: Union[Dict[str, float], Sequence[Tuple[str, float]]], *, logits: bool = False, **sampling) -> \
        Explanation:
    """What the sampler chain does to one next-token distribution: probs maps names to
    probabilities (or logits, with logits=True). Keyword arguments are the sampling
    parameters (temperature, top_k, top_p, min_p, typical_p, seed, ...).

    >>> print(explain({"blue": 0.5, "gray": 0.25, "clear": 0.15, "dark": 0.10}, top_p=0.7))
    Greedy: blue
    Top-p: [('blue', 0.667), ('gray', 0.333)]
    ..."""
    items = list(probs.items()) if isinstance(probs, dict) else list(probs)
    names = [n for n, _ in items]
    vals = [float(v) if logits else (math.log(v) if v > 0 else -math.inf) for _, v in items]
    return _explain_logits(vals, lambda i: names[i], [], sampling)


def _explain_logits(vals, name, history, sampling, show=10):
    keep = []
    s = _sampling(keep=keep, **sampling)
    arr = (c_float * len(vals))(*vals)
    hist = (c_int32 * max(len(history), 1))(*history)
    stages = []

    def on_stage(_user, stage, cand, n):
        stages.append((STAGES[stage], [(name(cand[i].id), cand[i].p) for i in range(min(n, show))]))

    cb = _STAGE_FN(on_stage)
    res, err = _ExplainResult(), _Error()
    _check(_explain(arr, len(vals), ctypes.byref(s), hist, len(history), cb, None, ctypes.byref(res),
                    ctypes.byref(err)), err)
    m = max(vals)
    z = sum(math.exp(v - m) for v in vals if v != -math.inf)
    order = sorted(range(len(vals)), key=lambda i: (-vals[i], i))[:show]
    inp = [(name(i), math.exp(vals[i] - m) / z) for i in order if vals[i] != -math.inf]
    return Explanation(inp, name(res.greedy), stages, name(res.token), res.p, res.seed, show)


# ---- structured output ----

_CONSTRAINTS = ("json_schema", "grammar", "regex", "choices")


def _constraint(kw) -> Optional[Tuple[str, int, Union[str, Tuple[str, ...]]]]:
    """Pops json_schema / grammar / regex / choices from kw: None, or (argument, kind,
    canonical source): a schema as compact JSON text in its own key order (key order orders
    the output), choices as a tuple. Raises CinderError("invalid_arg") naming the argument."""
    tools = kw.pop("_tools", None)
    given = [(n, kw.pop(n)) for n in _CONSTRAINTS if n in kw]
    given = [(n, v) for n, v in given if v is not None]
    if tools is not None:
        return "tools", GRAMMAR_TOOLS, tools
    if not given:
        return None
    if len(given) > 1:
        raise CinderError("invalid_arg", f"{given[0][0]} and {given[1][0]} both constrain the output: give at most one",
                          given[1][0])
    name, v = given[0]
    if name == "json_schema":
        if isinstance(v, (str, bytes)):
            try:
                v = json.loads(v)
            except ValueError as e:
                raise CinderError("invalid_arg", f"json_schema is not valid JSON: {e}", name) from None
        if not isinstance(v, (dict, bool)):
            raise CinderError("invalid_arg", "json_schema must be a JSON Schema: a dict, or its JSON text", name)
        try:
            src = json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise CinderError("invalid_arg", f"json_schema cannot be written as JSON: {e}", name) from None
        return name, GRAMMAR_JSON_SCHEMA, src
    if name in ("grammar", "regex"):
        if not isinstance(v, str):
            raise CinderError("invalid_arg", f"{name} must be a string", name)
        return name, GRAMMAR_GBNF if name == "grammar" else GRAMMAR_REGEX, v
    if not isinstance(v, (list, tuple)) or not v or not all(isinstance(c, str) for c in v):
        raise CinderError("invalid_arg", "choices must be a non-empty list of strings", name)
    if any("\0" in c for c in v):
        raise CinderError("invalid_arg", "choices must not contain NUL", name)
    return name, GRAMMAR_CHOICE, tuple(v)


# ---- the model ----


class Model:
    """A GGUF model with a context for one request at a time.

    path: the .gguf file (None: the default model). n_ctx: positions per request, prompt
    and reply (0: the model's, at most 4096). n_threads: 0 = every CPU. prefault: read
    every weight page at load (steadier first-token time). kv_type: "f16" or "q8_0"."""

    def __init__(self, path: Optional[str] = None, *, n_ctx: int = 0, n_threads: int = 0, prefault: bool = False,
                 kv_type: str = "f16"):
        self.path = path or default_model_path()
        if path is None and not Path(self.path).exists():
            raise CinderError("io", f"the default model {self.path} is missing: run scripts/fetch_models.sh "
                                    "(or give Model(path=...))")
        self._m = c_void_p()
        self._c = c_void_p()
        self._lock = threading.Lock()
        self._grammars: "collections.OrderedDict" = collections.OrderedDict()  # (kind, source) -> cn_grammar*
        self._embedders: Dict[Tuple[int, bool, int], c_void_p] = {}  # (pooling, normalize, n_batch) -> cn_embedder*
        err = _Error()
        mp = _model_default()
        mp.prefault = prefault
        _check(_model_load(self.path.encode(), ctypes.byref(mp), ctypes.byref(self._m), ctypes.byref(err)), err)
        cp = _ctx_default()
        cp.n_ctx, cp.n_threads = n_ctx, n_threads
        kinds = {"f16": TYPE_F16, "q8_0": TYPE_Q8_0, "f32": TYPE_F32}
        if kv_type not in kinds:
            self.close()
            raise CinderError("invalid_arg", f"kv_type {kv_type!r}: must be one of {sorted(kinds)}")
        cp.kv_type = kinds[kv_type]
        st = _ctx_create(self._m, ctypes.byref(cp), ctypes.byref(self._c), ctypes.byref(err))
        if st != 0:
            self.close()
            _check(st, err)
        self._tok = _ctx_tokenizer(self._c)
        self.n_vocab = _n_vocab(self._tok)
        self.n_ctx = _ctx_n_ctx(self._c)
        info = _ModelInfo()
        _model_info(self._m, ctypes.byref(info))
        self.info = {f: (getattr(info, f).decode() if isinstance(getattr(info, f), bytes) else getattr(info, f))
                     for f, _ in _ModelInfo._fields_}
        chat = _ctx_chat(self._c)
        self.chat_template = _chat_name(chat).decode() if chat else None

    def close(self):
        """Frees the model (also done when it is garbage-collected)."""
        for g in getattr(self, "_grammars", {}).values():  # before the tokenizer they were compiled for
            _grammar_free(g)
        if getattr(self, "_grammars", None):
            self._grammars.clear()
        for e in getattr(self, "_embedders", {}).values():
            _emb_free(e)
        if getattr(self, "_embedders", None):
            self._embedders.clear()
        if getattr(self, "_c", None):
            _ctx_free(self._c)
            self._c = c_void_p()
        if getattr(self, "_m", None):
            _model_free(self._m)
            self._m = c_void_p()

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- tokens --

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> List[int]:
        """Token ids of text; add_special adds BOS as the model says, parse_special reads
        special-token texts such as <|im_start|> as those tokens."""
        b = text.encode()
        n, err = c_size_t(), _Error()
        _check(_tokenize(self._tok, b, len(b), add_special, parse_special, None, 0, ctypes.byref(n),
                         ctypes.byref(err)), err)
        ids = (c_int32 * max(n.value, 1))()
        _check(_tokenize(self._tok, b, len(b), add_special, parse_special, ids, n.value, ctypes.byref(n),
                         ctypes.byref(err)), err)
        return list(ids[:n.value])

    def detokenize(self, tokens: Sequence[int], render_special: bool = False) -> str:
        """The text of token ids (valid UTF-8; the leading space SentencePiece adds is dropped)."""
        arr = (c_int32 * max(len(tokens), 1))(*tokens)
        out, n, err = ctypes.POINTER(ctypes.c_char)(), c_size_t(), _Error()
        _check(_detokenize(self._tok, arr, len(tokens), render_special, ctypes.byref(out), ctypes.byref(n),
                           ctypes.byref(err)), err)
        try:
            return ctypes.string_at(out, n.value).decode("utf-8")
        finally:
            _libc_free(ctypes.cast(out, c_void_p))

    def token_to_piece(self, token: int, render_special: bool = True) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character)."""
        buf = ctypes.create_string_buffer(256)
        n = _token_to_piece(self._tok, token, render_special, buf, 256)
        return buf.raw[:n] if n <= 256 else b""

    def _piece(self, token):
        return self.token_to_piece(token).decode("utf-8", "replace")

    # -- generation --

    def _prompt(self, prompt, keep):
        pr = _Prompt()
        if isinstance(prompt, str):
            pr.text = prompt.encode()
        elif prompt and isinstance(prompt, (list, tuple)) and isinstance(prompt[0], dict):
            msgs = (_ChatMsg * len(prompt))(*[_ChatMsg(str(m["role"]).encode(), str(m["content"]).encode())
                                               for m in prompt])
            keep.append(msgs)
            pr.messages, pr.n_messages = msgs, len(prompt)
        elif isinstance(prompt, (list, tuple)):
            arr = (c_int32 * max(len(prompt), 1))(*[int(t) for t in prompt])
            keep.append(arr)
            pr.tokens, pr.n_tokens = arr, len(prompt)
        else:
            raise TypeError("prompt: a string, a list of token ids, or a list of {'role', 'content'} messages")
        return pr

    def _run(self, prompt, on_piece, **kw) -> Completion:
        """_run_cancellable on a worker thread; this thread waits, so a KeyboardInterrupt
        here cancels the request, waits for it to end and re-raises."""
        cancel = threading.Event()
        box = {}

        def work():
            try:
                box["result"] = self._run_cancellable(prompt, on_piece, cancel, **kw)
            except BaseException as e:
                box["error"] = e

        t = threading.Thread(target=work, daemon=True)
        t.start()
        try:
            while t.is_alive():
                t.join(0.05)
        except BaseException:
            cancel.set()
            t.join()
            raise
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _completion(self, res, logprobs) -> Completion:
        toks = [res.tokens[i] for i in range(res.n_tokens)]
        lps = None
        if logprobs is not None:
            lps = [TokenLogprob(t.id, self._piece(t.id), t.logprob,
                                [(t.top[k].id, self._piece(t.top[k].id), t.top[k].logprob) for k in range(t.n_top)])
                   for t in toks]
        tm = res.timings
        return Completion(text=ctypes.string_at(res.text, res.n_text).decode("utf-8", "replace"),
                          tokens=[t.id for t in toks], finish_reason=FINISH[res.finish_reason],
                          timings={f: getattr(tm, f) for f, _ in _Timings._fields_}, seed=res.seed,
                          n_prompt_tokens=res.n_prompt_tokens, logprobs=lps, stop_index=res.stop_index)

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 256, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0, seed: Optional[int] = None,
                 stop: Union[None, str, Sequence[str]] = None, logprobs: Optional[int] = None, **kw) -> Completion:
        """Continues prompt (text or token ids). Sampling as the OpenAI API and vLLM do it:
        temperature 0 is greedy; seed makes a sampled reply reproducible; stop strings are
        matched across tokens and cut; logprobs=k reports each token's log-probability and
        the k most likely. Also: typical_p, repetition_penalty, presence_penalty,
        frequency_penalty, logit_bias ({token id: bias}), ignore_eos, n_beams (beam search).
        Structured output, at most one of: json_schema (a dict or its JSON text), grammar
        (GBNF, start rule "root"), regex (the whole output matches it), choices (the output
        is exactly one of the strings)."""
        return self._run(prompt, None, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                         min_p=min_p, seed=seed, stop=stop, logprobs=logprobs, **kw)

    def fim_tokens(self, prefix: str, suffix: str, prompt: Optional[str] = None,
                   extra: Optional[Sequence[Dict[str, str]]] = None) -> List[int]:
        """The token ids of a fill-in-the-middle prompt: the model's FIM tokens around prefix
        and suffix, laid out as `cinder serve`'s /infill (and llama-server's) lays them out;
        prompt continues the prefix (the middle's start), extra is repository context
        ([{"filename", "text"}]). CinderError("unsupported") for a model without FIM tokens."""
        fp = _fim_default()
        keep = [s.encode() for s in (prefix, suffix, prompt or "")]
        fp.prefix, fp.suffix = keep[0], keep[1]
        fp.prompt = keep[2] if prompt is not None else None
        if extra:
            chunks = (_FimChunk * len(extra))(*[_FimChunk(c["filename"].encode() if c.get("filename") else None,
                                                          str(c["text"]).encode()) for c in extra])
            fp.extra, fp.n_extra = chunks, len(extra)
        fp.n_extra_max = max(0, self.n_ctx - fp.n_batch + 2)  # /infill's budget
        ids, n, err = P(c_int32)(), c_size_t(), _Error()
        _check(_fim_prompt(self._tok, ctypes.byref(fp), ctypes.byref(ids), ctypes.byref(n), ctypes.byref(err)), err)
        try:
            return list(ids[:n.value])
        finally:
            _libc_free(ctypes.cast(ids, c_void_p))

    def infill(self, prefix: str, suffix: str, prompt: Optional[str] = None,
               extra: Optional[Sequence[Dict[str, str]]] = None, **kw) -> Completion:
        """Fills the middle between prefix and suffix (a code model with FIM tokens): the
        prompt of fim_tokens, generated as generate() does (same keyword arguments), so
        infill(p, s, max_tokens=n, temperature=0) gives the text `cinder serve`'s /infill
        gives for input_prefix p, input_suffix s."""
        return self.generate(self.fim_tokens(prefix, suffix, prompt, extra), **kw)

    def embed(self, inputs: Union[str, Sequence[int], Sequence[Union[str, Sequence[int]]]],
              pooling: Optional[str] = None, normalize: bool = True, n_batch: int = 512) -> List[List[float]]:
        """Embeddings: one vector per input (a text, or a list of token ids; a single input
        gives a list of one vector), the model's final hidden states pooled ("mean", "cls",
        "last"; None: the model's <arch>.pooling_type, else "last") and L2-normalized
        unless normalize=False; as `cinder serve`'s /v1/embeddings and `cinder embed`. Texts
        are tokenized with BOS as the model says and special tokens parsed; an input may
        have at most n_batch tokens."""
        if pooling is not None and pooling not in POOLING:
            raise CinderError("invalid_arg", f"pooling {pooling!r}: must be one of {sorted(POOLING)}", "pooling")
        single = isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and inputs
                                             and isinstance(inputs[0], int))
        items = [inputs] if single else list(inputs)
        key = (POOLING.get(pooling, -1), bool(normalize), int(n_batch))
        with self._lock:
            e = self._embedders.get(key)
            if e is None:
                ep = _emb_default()
                ep.n_threads, ep.n_batch, ep.pooling, ep.normalize = _ctx_n_threads(self._c), n_batch, key[0], key[1]
                e, err = c_void_p(), _Error()
                _check(_emb_create(self._m, ctypes.byref(ep), ctypes.byref(e), ctypes.byref(err)), err)
                self._embedders[key] = e
        dim = _emb_n_embd(e)
        out = (c_float * max(1, len(items) * dim))()
        err = _Error()
        if all(isinstance(x, str) for x in items):
            arr = (c_char_p * max(1, len(items)))(*[x.encode() for x in items])
            st = _emb_texts(e, arr, len(items), out, ctypes.byref(err))
        elif all(isinstance(x, (list, tuple)) for x in items):
            bufs = [(c_int32 * max(1, len(x)))(*[int(t) for t in x]) for x in items]
            ptrs = (P(c_int32) * max(1, len(items)))(*[ctypes.cast(b, P(c_int32)) for b in bufs])
            lens = (c_int32 * max(1, len(items)))(*[len(x) for x in items])
            st = _emb_tokens(e, ptrs, lens, len(items), out, ctypes.byref(err))
        else:
            raise TypeError("inputs: a string, a list of token ids, or a list of either (not mixed)")
        _check(st, err)
        return [list(out[i * dim:(i + 1) * dim]) for i in range(len(items))]

    def chat(self, messages: Sequence[Dict[str, Any]], tools: Optional[Sequence[Dict[str, Any]]] = None,
             tool_choice: Union[str, Dict[str, Any]] = "auto", parallel_tool_calls: bool = True, **kw) -> Completion:
        """A reply to a conversation ([{"role": "user", "content": "..."}, ...]), rendered with
        the model's chat template; generation stops at the end of the assistant's turn.
        Keyword arguments as generate().

        Tools as OpenAI's chat API takes them: tools=[{"type": "function", "function":
        {"name", "description", "parameters"}}], tool_choice "auto" / "none" / "required" /
        {"type": "function", "function": {"name": ...}}. A call's arguments follow its
        parameters schema (constrained as they are written). The Completion then also has
        .content, .reasoning and .tool_calls ([{"id", "type", "function": {"name",
        "arguments"}}], arguments as JSON text). Messages may hold assistant tool_calls and
        {"role": "tool", "tool_call_id", "content"} results."""
        if not messages:
            raise CinderError("invalid_arg", "chat: no messages")
        toolish = any(m.get("tool_calls") or m.get("role") == "tool" or m.get("reasoning_content")
                      for m in messages if isinstance(m, dict))
        if tools is None and not toolish:
            return self.generate(list(messages), **kw)
        if tool_choice not in ("auto", "none", "required") and not isinstance(tool_choice, dict):
            raise CinderError("invalid_arg", 'tool_choice must be "auto", "none", "required" or a function',
                              "tool_choice")
        prompt, info = self._prepare_turn(messages, tools)
        if tools and tool_choice != "none":
            if any(n in kw and kw[n] is not None for n in _CONSTRAINTS):
                raise CinderError("invalid_arg", "tools with another constraint on the output is not supported", "tools")
            choice, name = TOOL_CHOICE_AUTO, None
            if tool_choice == "required":
                choice = TOOL_CHOICE_REQUIRED
            elif isinstance(tool_choice, dict):
                choice, name = TOOL_CHOICE_NAMED, (tool_choice.get("function") or {}).get("name")
                if name not in [(t.get("function") or {}).get("name") for t in tools]:
                    raise CinderError("invalid_arg", f"tool_choice names {name!r}, which is not among the tools",
                                      "tool_choice")
            elif tool_choice != "auto":
                raise CinderError("invalid_arg", 'tool_choice must be "auto", "none", "required" or a function',
                                  "tool_choice")
            kw["_tools"] = (json.dumps(list(tools), separators=(",", ":"), ensure_ascii=False), info.format, choice, name,
                            bool(parallel_tool_calls))
        c = self.generate(prompt, **kw)
        c.content, c.reasoning, c.tool_calls = self._read_reply(c.text, info if tools and tool_choice != "none"
                                                                else _ChatTurnInfo(0, info.think, info.in_think))
        return c

    def _prepare_turn(self, messages, tools):
        """cn_chat_turn_prepare: the rendered prompt and how to read the reply."""
        try:
            ms = json.dumps(list(messages), ensure_ascii=False)
            ts = json.dumps(list(tools), ensure_ascii=False) if tools is not None else None
        except (TypeError, ValueError) as e:
            raise CinderError("invalid_arg", f"messages and tools must be JSON: {e}", "messages") from None
        turn = _ChatTurn(ms.encode(), ts.encode() if ts is not None else None, None)
        info, err, out, n = _ChatTurnInfo(), _Error(), c_void_p(), c_size_t()
        with self._lock:
            chat = _ctx_chat(self._c) if self._c else None
            if not chat:
                raise CinderError("invalid_arg", "this model has no chat template", "messages")
            st = _turn_prepare(chat, ctypes.byref(turn), ctypes.byref(out), ctypes.byref(n), ctypes.byref(info),
                               ctypes.byref(err))
        _check(st, err)
        try:
            return ctypes.string_at(out, n.value).decode("utf-8"), info
        finally:
            _libc_free(out)

    @staticmethod
    def _read_reply(text, info):
        """The reply through cn_tool_reader: (content, reasoning or None, tool_calls or None)."""
        rd, err = c_void_p(), _Error()
        _check(_reader_new(info.format, info.think, info.in_think, ctypes.byref(rd), ctypes.byref(err)), err)
        try:
            ev, n = P(_ToolEvent)(), c_size_t()
            b = text.encode()
            _check(_reader_feed(rd, b, len(b), True, ctypes.byref(ev), ctypes.byref(n), ctypes.byref(err)), err)
            content, reasoning, calls = [], [], []
            for i in range(n.value):
                e = ev[i]
                t = ctypes.string_at(e.text, e.len).decode("utf-8", "replace") if e.text else ""
                if e.kind in (TOOL_EV_CONTENT, TOOL_EV_BROKEN):
                    content.append(t)
                    if e.kind == TOOL_EV_BROKEN and e.index < len(calls):
                        calls[e.index]["broken"] = True
                elif e.kind == TOOL_EV_REASONING:
                    reasoning.append(t)
                elif e.kind == TOOL_EV_CALL:
                    calls.append({"id": "call_" + os.urandom(12).hex(), "type": "function",
                                  "function": {"name": e.name.decode(), "arguments": ""}})
                elif e.kind == TOOL_EV_ARGS and e.index < len(calls):
                    calls[e.index]["function"]["arguments"] += t
        finally:
            _reader_free(rd)
        calls = [c for c in calls if not c.get("broken")]
        body = "".join(content)
        return (None if calls and not body.strip() else body), ("".join(reasoning) or None), (calls or None)

    def stream(self, prompt, **kw) -> Iterator[str]:
        """generate() as an iterator of text pieces as they are final. Leaving the loop early
        (break, an exception, KeyboardInterrupt) cancels the request. Afterwards
        model.last_completion is the Completion (finish_reason "cancelled" if cut short)."""
        q: "queue.Queue" = queue.Queue()
        done = object()
        stop_flag = threading.Event()
        box = {}

        def on_piece(s):
            q.put(s)

        def work():
            try:
                box["result"] = self._run_cancellable(prompt, on_piece, stop_flag, **kw)
            except BaseException as e:  # handed to the consumer
                box["error"] = e
            finally:
                q.put(done)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        try:
            while True:
                item = q.get()
                if item is done:
                    break
                yield item
        finally:
            stop_flag.set()
            t.join()
            self.last_completion = box.get("result")  # "cancelled" when the loop left early
        if "error" in box:
            raise box["error"]

    def _grammar(self, constraint):
        """The compiled grammar of a _constraint() result, from this model's cache or
        compiled now (lock held)."""
        name, kind, src = constraint
        key = (kind, src)
        g = self._grammars.get(key)
        if g is not None:
            self._grammars.move_to_end(key)
            return g
        p, keep = _grammar_default(), []
        p.kind = kind
        if kind == GRAMMAR_TOOLS:
            tools, fmt, choice, tool_name, parallel = src
            b = tools.encode()
            keep.append(b)
            p.source, p.source_len = b, len(b)
            p.tool_format, p.tool_choice, p.parallel_tool_calls = fmt, choice, parallel
            if tool_name:
                nb = tool_name.encode()
                keep.append(nb)
                p.tool_name = nb
        elif kind == GRAMMAR_CHOICE:
            arr = (c_char_p * len(src))(*[c.encode() for c in src])
            keep.append(arr)
            p.choices, p.n_choices = arr, len(src)
        else:
            b = src.encode()
            keep.append(b)
            p.source, p.source_len = b, len(b)
        # JSON as llama.cpp's and vLLM's grammars allow it: whitespace between tokens
        p.flexible_whitespace = kind == GRAMMAR_JSON_SCHEMA
        g, err = c_void_p(), _Error()
        st = _grammar_compile(self._tok, ctypes.byref(p), ctypes.byref(g), ctypes.byref(err))
        if st != 0:
            msg = err.msg.decode("utf-8", "replace")
            raise CinderError(STATUS[st] if 0 <= st < len(STATUS) else str(st),
                              msg if msg.startswith(f"{name}:") else f"{name}: {msg}", name)
        self._grammars[key] = g.value
        while len(self._grammars) > GRAMMAR_CACHE:
            _grammar_free(self._grammars.popitem(last=False)[1])
        return g.value

    def _run_cancellable(self, prompt, on_piece, stop_flag, **kw):
        """_run on this (worker) thread, cancelled when stop_flag is set."""
        keep = []
        kw = dict(kw)
        constraint = _constraint(kw)
        max_tokens, stop, n_beams = kw.pop("max_tokens", 256), kw.pop("stop", None), kw.pop("n_beams", 1)
        gp = _gen_default()
        gp.sampling = _sampling(keep=keep, **kw)
        gp.max_tokens = max_tokens
        if stop:
            stops = [stop] if isinstance(stop, str) else list(stop)
            arr = (c_char_p * len(stops))(*[s.encode() for s in stops])
            keep.append(arr)
            gp.stop, gp.n_stop = arr, len(stops)
        gp.beam.n_beams = n_beams
        if on_piece:
            gp.on_text = _TEXT_FN(lambda _u, text, n: on_piece(ctypes.string_at(text, n).decode("utf-8", "replace")))
        gp.should_cancel = _CANCEL_FN(lambda _u: stop_flag.is_set())
        pr = self._prompt(prompt, keep)
        res, err = _Result(), _Error()
        with self._lock:
            if not self._c:
                raise CinderError("invalid_arg", "the model is closed")
            gp.grammar = self._grammar(constraint) if constraint else None
            st = _ctx_generate(self._c, ctypes.byref(pr), ctypes.byref(gp), ctypes.byref(res), ctypes.byref(err))
            _check(st, err)
            try:
                return self._completion(res, kw.get("logprobs"))
            finally:
                _result_free(ctypes.byref(res))

    # -- explain --

    def logits(self, prompt) -> List[float]:
        """The model's next-token logits after prompt (text or token ids)."""
        keep = []
        pr = self._prompt(prompt, keep)
        out, err = (c_float * self.n_vocab)(), _Error()
        with self._lock:
            _check(_ctx_logits(self._c, ctypes.byref(pr), out, ctypes.byref(err)), err)
        return list(out)

    def explain(self, prompt, show: int = 10, **sampling) -> Explanation:
        """The sampler chain on the model's next-token distribution after prompt, stage by
        stage (sampling keyword arguments as generate())."""
        vals = self.logits(prompt)
        history = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        return _explain_logits(vals, self._piece, history, sampling, show)
