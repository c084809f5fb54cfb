"""Chat templates: `cinder template render` against Python's jinja2 on real models' templates.

Independent truth: jinja2 rendering each template of the shared testdata/chat-templates
folder (50 tokenizer.chat_templates of public models, see its README) exactly as Hugging
Face's apply_chat_template does: an ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with the loopcontrols extension and HF's {% generation %} tag, HF's
tojson (json.dumps with ensure_ascii=False, indent, separators, sort_keys),
raise_exception and strftime_now (here on a fixed clock, the same one cinder gets with
--now), called with messages, tools (None without tools), documents=None,
add_generation_prompt, bos_token, eos_token and extra keyword arguments.

Every template meets every conversation below (system prompts, several turns, tools,
assistant tool calls and tool results, reasoning content, multi-part content, Unicode),
with and without the generation prompt, bare and with extra variables. Where jinja2
renders, cinder must print the same bytes; where jinja2 raises (the template's own
raise_exception, a type error, a sandbox refusal), cinder must exit non-zero. Tool-call
arguments reach jinja2 as objects (as HF passes them) and reach cinder as the JSON
strings of the OpenAI format in some conversations, as objects in others: cinder turns
the strings into objects first. Templates are read from ../shared/testdata (or
$CINDER_TESTDATA), never copied here.
"""
import datetime
import json
import os
import subprocess
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import cinder_binaries

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = Path(os.environ.get("CINDER_TESTDATA") or ROOT.parent / "shared" / "testdata") / "chat-templates"
NOW = 1700000000  # 2023-11-14 22:13:20 UTC: strftime_now's clock on both sides
BOS, EOS = "<s>", "</s>"

# ---- jinja2 as Hugging Face's apply_chat_template sets it up ----


class GenerationTag(jinja2.ext.Extension):
    """HF's AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        return caller()


def hf_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    fixed = datetime.datetime.fromtimestamp(NOW, tz=datetime.timezone.utc).replace(tzinfo=None)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: fixed.strftime(fmt)
    return env


# ---- the conversations ----

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            "days": {"type": "integer", "description": "Forecast days"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search_web", "description": "Search the web and return the top results.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What to search for"},
            "max_results": {"type": "number", "default": 5},
            "sites": {"type": "array", "items": {"type": "string"}, "description": "Only these sites"},
            "safe": {"type": "boolean"}},
            "required": ["query"]}}},
]
# nine alphanumeric characters: what Mistral's templates demand of a tool-call id
IDS = {1: "a1b2c3d4e", 2: "f5g6h7i8j", 3: "k9l0m1n2o"}


def call(i, name, args):
    return {"id": IDS[i], "type": "function", "function": {"name": name, "arguments": args}}


def tool_result(i, name, content):
    return {"role": "tool", "tool_call_id": IDS[i], "name": name, "content": content}


CONVERSATIONS = {
    "user": ([{"role": "user", "content": "Hello!"}], None),
    "system_multi": ([
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"}], None),
    "tools": ([
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"}], TOOLS),
    "tool_call": ([
        {"role": "user", "content": "What's the weather in Paris, in celsius?"},
        {"role": "assistant", "content": "", "tool_calls": [call(1, "get_weather", {"city": "Paris", "unit": "celsius"})]},
        tool_result(1, "get_weather", "{\"temperature\": 21.5, \"condition\": \"sunny\"}"),
        {"role": "assistant", "content": "It is 21.5 °C and sunny in Paris."},
        {"role": "user", "content": "Thanks!"}], TOOLS),
    "parallel_calls": ([
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather in Paris and Tokyo, and search for umbrellas."},
        {"role": "assistant", "content": None, "tool_calls": [
            call(1, "get_weather", {"city": "Paris"}),
            call(2, "get_weather", {"city": "Tokyo", "days": 3}),
            call(3, "search_web", {"query": "best umbrellas", "max_results": 2.5, "sites": ["a.com", "b.org"],
                                   "safe": True})]},
        tool_result(1, "get_weather", "18 C, cloudy"),
        tool_result(2, "get_weather", "25 C, rain"),
        tool_result(3, "search_web", "[\"umbrella A\", \"umbrella B\"]"),
        {"role": "assistant", "content": "Paris: 18 C and cloudy; Tokyo: rain, take an umbrella."}], TOOLS),
    "reasoning": ([
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "Yes, 17 is prime.",
         "reasoning_content": "17 is not divisible by 2, 3 or 5, and 5*5 > 17."},
        {"role": "user", "content": "And 21?"}], None),
    "reasoning_tool": ([
        {"role": "system", "content": "Think, then use tools."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "I should call get_weather.",
         "tool_calls": [call(1, "get_weather", {"city": "Oslo", "unit": "celsius"})]},
        tool_result(1, "get_weather", "-3 C, snow"),
        {"role": "assistant", "content": "It is -3 C with snow in Oslo.", "reasoning_content": "The tool says -3 C."},
        {"role": "user", "content": "Should I wear a coat?"}], TOOLS),
    "multipart": ([
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "text", "text": "a red apple"}]}],
        None),
    "unicode": ([
        {"role": "user", "content": "Ünïcödé — “quotes” <tag> & 'apostrophe' \"dq\" 日本語 🙂\n\tindented\\back"},
        {"role": "assistant", "content": "  Sure: ok  \n"},
        {"role": "user", "content": " next "}], None),
}
# conversations whose tool-call arguments cinder gets as JSON strings (the OpenAI format)
STRING_ARGUMENTS = {"parallel_calls", "reasoning_tool"}
EXTRA = {
    "bare": {},
    "no_thinking": {"enable_thinking": False},
    "kwargs": {"enable_thinking": True, "date_string": "26 Jul 2024", "tools_in_user_message": False,
               "reasoning_effort": "high"},
}


def var_arg(name, value):
    """--var NAME=VALUE: strings as they are, anything else as JSON."""
    return "%s=%s" % (name, value if isinstance(value, str) else json.dumps(value))


def openai_messages(messages, string_args):
    out = json.loads(json.dumps(messages))
    for m in out:
        for c in m.get("tool_calls") or []:
            if string_args:
                c["function"]["arguments"] = json.dumps(c["function"]["arguments"], ensure_ascii=False)
    return out


def first_difference(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


TEMPLATE_FILES = sorted(TEMPLATES.glob("*.jinja"))


def test_the_templates_are_there():
    assert len(TEMPLATE_FILES) >= 50, "no chat templates in %s (read its README)" % TEMPLATES


@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: p.stem)
def test_template_matches_jinja2(path, tmp_path):
    env = hf_environment()
    template = env.from_string(path.read_text())
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS, ensure_ascii=False))
    failures, checked = [], 0
    for cname, (messages, tools) in CONVERSATIONS.items():
        msg_file = tmp_path / ("messages-%s.json" % cname)
        msg_file.write_text(json.dumps(openai_messages(messages, cname in STRING_ARGUMENTS), ensure_ascii=False))
        for gen in (True, False):
            for ename, extra in EXTRA.items():
                variables = dict(bos_token=BOS, eos_token=EOS, **extra)
                try:
                    want = template.render(messages=messages, tools=tools, documents=None,
                                           add_generation_prompt=gen, **variables)
                except Exception as e:  # the template refuses the conversation
                    want, why = None, "%s: %s" % (type(e).__name__, e)
                for binary in cinder_binaries():
                    cmd = [str(binary), "template", "render", "--template", str(path), "--messages", str(msg_file),
                           "--now", str(NOW)]
                    if tools:
                        cmd += ["--tools", str(tools_file)]
                    if not gen:
                        cmd.append("--no-generation-prompt")
                    for k, v in variables.items():
                        cmd += ["--var", var_arg(k, v)]
                    r = subprocess.run(cmd, capture_output=True, timeout=60)
                    checked += 1
                    where = "%s / %s / gen=%s / %s / %s" % (path.stem, cname, gen, ename, binary.parent.name)
                    err = r.stderr.decode("utf-8", "replace")
                    assert r.returncode in (0, 1), "%s: exit %d\n%s" % (where, r.returncode, err[-3000:])
                    if want is None:
                        if r.returncode == 0:
                            failures.append("%s: jinja2 raised (%s) but cinder rendered" % (where, why))
                        elif not err.startswith("cinder: template: template line "):
                            failures.append("%s: jinja2 raised (%s); cinder's error names no line: %s" % (where, why, err))
                        continue
                    if r.returncode != 0:
                        failures.append("%s: jinja2 rendered, cinder failed: %s" % (where, err.strip()))
                        continue
                    got = r.stdout.decode("utf-8", "surrogateescape")
                    if got != want:
                        i = first_difference(got, want)
                        failures.append("%s: first difference at character %d (%d bytes in)\n  jinja2: %r\n  cinder: %r"
                                        % (where, i, len(want[:i].encode()), want[max(0, i - 60):i + 60],
                                           got[max(0, i - 60):i + 60]))
    assert checked and not failures, "%d of %d renders differ:\n%s" % (len(failures), checked, "\n".join(failures[:10]))


def test_cli_errors_and_flags(tmp_path):
    """Usage errors exit 2, runtime errors 1, each with one `cinder: ...` line; the output is the prompt alone."""
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}"
                    "{{ x }}|{{ y }}|{{ add_generation_prompt }}|{{ strftime_now('%Y') }}\n")
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    for binary in cinder_binaries():
        run = lambda *a, **kw: subprocess.run([str(binary), "template", *a], capture_output=True, text=True, **kw)
        r = run("render", "--template", str(tmpl), "--messages", str(msgs), "--var", "x=[1, 2]", "--var", "y=two words",
                "--no-generation-prompt", "--now", "0")
        assert r.returncode == 0, r.stderr
        assert r.stdout == "user=hi;[1, 2]|two words|False|%s" % datetime.datetime.now().strftime("%Y")
        r = run("render", "--template", str(tmpl), "--messages", "-", "--now", str(NOW),
                input=json.dumps([{"role": "user", "content": "x"}]))
        assert r.returncode == 0 and r.stdout == "user=x;||True|2023", r.stderr
        for args in (["render", "--messages", str(msgs)], ["render", "--template", str(tmpl)], ["draw"],
                     ["render", "--template", str(tmpl), "--messages", str(msgs), "--var", "novalue"]):
            r = run(*args)
            assert r.returncode == 2 and r.stderr.startswith("cinder: ") and r.stdout == "", (args, r.stderr)
        bad = tmp_path / "bad.jinja"
        bad.write_text("line one\n{% for x in %}")
        r = run("render", "--template", str(bad), "--messages", str(msgs))
        assert r.returncode == 1 and "line 2" in r.stderr and r.stdout == "", r.stderr
        msgs.write_text('[{"role": "user", "content": 5}]')
        r = run("render", "--template", str(tmpl), "--messages", str(msgs))
        assert r.returncode == 1 and "messages[0].content" in r.stderr, r.stderr
        raising = tmp_path / "raise.jinja"
        raising.write_text("\n\n{{ raise_exception('Roles must alternate!') }}")
        msgs.write_text(json.dumps([{"role": "user", "content": "hi"}]))
        r = run("render", "--template", str(raising), "--messages", str(msgs))
        assert r.returncode == 1 and "line 3" in r.stderr and "Roles must alternate!" in r.stderr, r.stderr
