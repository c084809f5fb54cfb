/* test_toolcall.c — the tool-call reader (src/text/toolcall.c). Truth: replies written
 * here in each format, with the content, reasoning and calls each must come apart into
 * reasoned from the format's documentation (Hermes' <tool_call> tags as Qwen2.5's
 * template asks for them, Llama 3's bare JSON with "parameters", Mistral's [TOOL_CALLS]
 * array). Every reply is also fed cut at every byte and byte by byte: the events must
 * add up to the same result as one feed (streaming and non-streaming agree). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"

typedef struct {
    char content[1024], reasoning[256], broken[512];
    char name[4][32], args[4][256];
    int n_calls;
    int order_ok; /* every ARGS came after its CALL */
} parsed;

static void cat(char *dst, size_t cap, const char *s, size_t n) {
    size_t l = strlen(dst);
    cr_assert_lt(l + n, cap, "test buffer too small");
    memcpy(dst + l, s, n);
    dst[l + n] = 0;
}

static void take(parsed *p, const cn_tool_event *ev, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const cn_tool_event *e = &ev[i];
        switch (e->kind) {
        case CN_TOOL_EV_CONTENT: cat(p->content, sizeof p->content, e->text, e->len); break;
        case CN_TOOL_EV_REASONING: cat(p->reasoning, sizeof p->reasoning, e->text, e->len); break;
        case CN_TOOL_EV_CALL:
            cr_assert_eq(e->index, p->n_calls, "calls numbered in order");
            cr_assert_lt(p->n_calls, 4);
            snprintf(p->name[p->n_calls], sizeof p->name[0], "%s", e->name);
            p->n_calls++;
            break;
        case CN_TOOL_EV_ARGS:
            if (e->index >= p->n_calls) p->order_ok = 0;
            else cat(p->args[e->index], sizeof p->args[0], e->text, e->len);
            break;
        case CN_TOOL_EV_BROKEN: cat(p->broken, sizeof p->broken, e->text, e->len); break;
        }
    }
}

/* Feeds text in pieces cut at the given positions (cuts[0..n_cuts), increasing). */
static parsed run(cn_tool_format f, bool think, bool in_think, const char *text, const size_t *cuts, size_t n_cuts) {
    parsed p = {.order_ok = 1};
    cn_tool_reader *r;
    cr_assert_eq(cn_tool_reader_new(f, think, in_think, &r, NULL), CN_STATUS_OK);
    size_t len = strlen(text), at = 0;
    for (size_t k = 0; k <= n_cuts; k++) {
        size_t end = k < n_cuts ? cuts[k] : len;
        const cn_tool_event *ev;
        size_t n;
        cr_assert_eq(cn_tool_reader_feed(r, text + at, end - at, k == n_cuts, &ev, &n, NULL), CN_STATUS_OK);
        take(&p, ev, n);
        at = end;
    }
    cn_tool_reader_free(r);
    return p;
}

static void same(const parsed *a, const parsed *b, const char *how) {
    cr_assert_str_eq(a->content, b->content, "%s: content", how);
    cr_assert_str_eq(a->reasoning, b->reasoning, "%s: reasoning", how);
    cr_assert_str_eq(a->broken, b->broken, "%s: broken", how);
    cr_assert_eq(a->n_calls, b->n_calls, "%s: calls", how);
    for (int i = 0; i < a->n_calls; i++) {
        cr_assert_str_eq(a->name[i], b->name[i], "%s: name %d", how, i);
        cr_assert_str_eq(a->args[i], b->args[i], "%s: args %d", how, i);
    }
    cr_assert(b->order_ok, "%s: ARGS before CALL", how);
}

/* The reply read whole, then checked against every split and byte by byte. */
static parsed read_all(cn_tool_format f, bool think, bool in_think, const char *text) {
    parsed whole = run(f, think, in_think, text, NULL, 0);
    size_t len = strlen(text);
    for (size_t c = 1; c < len; c++) {
        parsed p = run(f, think, in_think, text, &c, 1);
        char how[64];
        snprintf(how, sizeof how, "cut at %zu", c);
        same(&whole, &p, how);
    }
    size_t *cuts = malloc(len * sizeof *cuts);
    for (size_t c = 0; c + 1 < len; c++) cuts[c] = c + 1;
    parsed p = run(f, think, in_think, text, cuts, len ? len - 1 : 0);
    free(cuts);
    same(&whole, &p, "byte by byte");
    return whole;
}

Test(toolcall, hermes_calls_between_text) {
    parsed p = read_all(
        CN_TOOL_FORMAT_HERMES, false, false,
        "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, {\"a\": \"}\"}]}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
    cr_assert_str_eq(p.content, "I'll check.\n\n");
    cr_assert_eq(p.n_calls, 2);
    cr_assert_str_eq(p.name[0], "get_weather");
    cr_assert_str_eq(p.args[0], "{\"city\": \"Paris\", \"n\": [1, {\"a\": \"}\"}]}");
    cr_assert_str_eq(p.name[1], "get_time");
    cr_assert_str_eq(p.args[1], "{}");
    cr_assert_str_eq(p.broken, "");
}

Test(toolcall, hermes_text_only_and_near_misses) {
    parsed p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "a <tool and <tool_cal> b <tool_ca");
    cr_assert_str_eq(p.content, "a <tool and <tool_cal> b <tool_ca");
    cr_assert_eq(p.n_calls, 0);
    /* a trigger followed by no call object: all text */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "x <tool_call>hello</tool_call>");
    cr_assert_str_eq(p.content, "x <tool_call>hello</tool_call>");
    cr_assert_eq(p.n_calls, 0);
    /* an object without a name is no call */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "<tool_call>{\"x\": 1}</tool_call> ok");
    cr_assert_str_eq(p.content, "<tool_call>{\"x\": 1}</tool_call> ok");
    cr_assert_eq(p.n_calls, 0);
}

Test(toolcall, hermes_tolerates_order_string_args_and_missing_close) {
    /* arguments before the name (an unconstrained model may): held until the object closes */
    parsed p = read_all(CN_TOOL_FORMAT_HERMES, false, false,
                        "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.name[0], "f");
    cr_assert_str_eq(p.args[0], "{\"x\": 1}");
    /* arguments as a JSON string holding JSON: the decoded text */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false,
                 "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": \\\"\\u00e9\\\"}\"}</tool_call>");
    cr_assert_str_eq(p.args[0], "{\"x\": \"\xc3\xa9\"}");
    /* no arguments at all: {} */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "<tool_call>{\"name\": \"f\"}</tool_call>");
    cr_assert_str_eq(p.args[0], "{}");
    /* the reply ends after the object without </tool_call>: the call stands */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": true}}\n");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.args[0], "{\"a\": true}");
    cr_assert_str_eq(p.content, "");
    /* scalar arguments end at the object's close */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "<tool_call>{\"name\":\"f\",\"arguments\":12}</tool_call>");
    cr_assert_str_eq(p.args[0], "12");
}

/* What small models write for Hermes instead of the tags, at the reply's start: the bare
 * call object, or the object in a fenced JSON block. */
Test(toolcall, hermes_bare_and_fenced_calls_at_the_start) {
    parsed p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "{\"name\": \"f\", \"arguments\": {\"a\": 1}}");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.args[0], "{\"a\": 1}");
    cr_assert_str_eq(p.content, "");
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "\n```json\n{\"name\": \"f\", \"arguments\": {}}\n```\n");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.name[0], "f");
    cr_assert_str_eq(p.content, "\n");
    /* calls may follow calls, as the grammar lets them */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false,
                 "{\"name\": \"f\", \"arguments\": {}}\n{\"name\": \"g\", \"arguments\": {}}\n");
    cr_assert_eq(p.n_calls, 2);
    cr_assert_str_eq(p.name[1], "g");
    cr_assert_str_eq(p.content, "\n");
    /* later in the reply they are text */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "Here: ```json\n{\"name\": \"f\", \"arguments\": {}}\n```");
    cr_assert_eq(p.n_calls, 0);
    cr_assert_str_eq(p.content, "Here: ```json\n{\"name\": \"f\", \"arguments\": {}}\n```");
    /* a fenced block of other JSON is text */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "```json\n[1, 2]\n```");
    cr_assert_eq(p.n_calls, 0);
    cr_assert_str_eq(p.content, "```json\n[1, 2]\n```");
}

Test(toolcall, a_reply_cut_inside_a_call_is_broken) {
    const char *t = "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, 2";
    parsed p = read_all(CN_TOOL_FORMAT_HERMES, false, false, t);
    cr_assert_str_eq(p.content, "Sure. ");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.name[0], "f");
    cr_assert_str_eq(p.args[0], "{\"x\": [1, 2", "what streamed of the arguments");
    cr_assert_str_eq(p.broken, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, 2");
    /* cut before the name is read: it is all text */
    p = read_all(CN_TOOL_FORMAT_HERMES, false, false, "Sure. <tool_call>\n{\"na");
    cr_assert_str_eq(p.content, "Sure. <tool_call>\n{\"na");
    cr_assert_eq(p.n_calls, 0);
}

Test(toolcall, llama3_json_reply_and_python_tag) {
    parsed p = read_all(CN_TOOL_FORMAT_LLAMA3, false, false,
                        "\n {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.name[0], "get_weather");
    cr_assert_str_eq(p.args[0], "{\"city\": \"Oslo\"}");
    cr_assert_str_eq(p.content, "");
    p = read_all(CN_TOOL_FORMAT_LLAMA3, false, false, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.args[0], "{}");
    /* a brace later in the reply is text: the call must start the reply */
    p = read_all(CN_TOOL_FORMAT_LLAMA3, false, false, "Use {\"name\": \"f\"} like this.");
    cr_assert_str_eq(p.content, "Use {\"name\": \"f\"} like this.");
    cr_assert_eq(p.n_calls, 0);
    p = read_all(CN_TOOL_FORMAT_LLAMA3, false, false, "  Hello");
    cr_assert_str_eq(p.content, "  Hello");
}

Test(toolcall, mistral_array_of_calls) {
    parsed p = read_all(
        CN_TOOL_FORMAT_MISTRAL, false, false,
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"k\": \"v,]\"}}]");
    cr_assert_eq(p.n_calls, 2);
    cr_assert_str_eq(p.name[0], "a");
    cr_assert_str_eq(p.args[0], "{}");
    cr_assert_str_eq(p.name[1], "b");
    cr_assert_str_eq(p.args[1], "{\"k\": \"v,]\"}");
    cr_assert_str_eq(p.content, "");
}

Test(toolcall, thinking_is_reasoning) {
    parsed p = read_all(
        CN_TOOL_FORMAT_HERMES, true, false,
        "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>");
    cr_assert_str_eq(p.reasoning, "\nThe user wants weather.\n");
    cr_assert_eq(p.n_calls, 1);
    cr_assert_str_eq(p.content, "\n\n");
    /* the generation prompt opened the thought */
    p = read_all(CN_TOOL_FORMAT_NONE, true, true, "hmm </thin</think>Hi <think>x</think>");
    cr_assert_str_eq(p.reasoning, "hmm </thin");
    cr_assert_str_eq(p.content, "Hi <think>x</think>", "only a thought at the start is one");
    /* think off: tags are text */
    p = read_all(CN_TOOL_FORMAT_NONE, false, false, "<think>a</think>b");
    cr_assert_str_eq(p.content, "<think>a</think>b");
    /* an unclosed thought is all reasoning */
    p = read_all(CN_TOOL_FORMAT_NONE, true, false, " <think>never closed");
    cr_assert_str_eq(p.reasoning, "never closed");
    cr_assert_str_eq(p.content, "");
}

Test(toolcall, formats_from_templates) {
    cr_assert_eq(cn_tool_format_detect("{% if tools %}<tool_call>{{ x }}</tool_call>{% endif %}"),
                 CN_TOOL_FORMAT_HERMES);
    cr_assert_eq(cn_tool_format_detect("[AVAILABLE_TOOLS]...[TOOL_CALLS]"), CN_TOOL_FORMAT_MISTRAL);
    cr_assert_eq(cn_tool_format_detect("<|start_header_id|>ipython ... <|python_tag|>"), CN_TOOL_FORMAT_LLAMA3);
    cr_assert_eq(cn_tool_format_detect("<|im_start|>{{ m.content }}<|im_end|>"), CN_TOOL_FORMAT_GENERIC);
    cr_assert_eq(cn_tool_format_detect(NULL), CN_TOOL_FORMAT_GENERIC);
    cr_assert_str_eq(cn_tool_format_name(CN_TOOL_FORMAT_MISTRAL), "mistral");
    cr_assert_null(cn_tool_format_name((cn_tool_format)99));
    cn_tool_reader *r;
    cn_error err = {0};
    cr_assert_eq(cn_tool_reader_new((cn_tool_format)99, false, false, &r, &err), CN_STATUS_INVALID_ARG);
    cr_assert_null(r);
}

Test(toolcall, a_huge_call_is_a_limit_not_a_crash) {
    cn_tool_reader *r;
    cr_assert_eq(cn_tool_reader_new(CN_TOOL_FORMAT_HERMES, false, false, &r, NULL), CN_STATUS_OK);
    const cn_tool_event *ev;
    size_t n;
    const char *head = "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"";
    cr_assert_eq(cn_tool_reader_feed(r, head, strlen(head), false, &ev, &n, NULL), CN_STATUS_OK);
    char *big = malloc(1 << 16);
    memset(big, 'a', 1 << 16);
    cn_status st = CN_STATUS_OK;
    for (int i = 0; i < 20 && st == CN_STATUS_OK; i++) st = cn_tool_reader_feed(r, big, 1 << 16, false, &ev, &n, NULL);
    cr_assert_eq(st, CN_STATUS_LIMIT);
    free(big);
    cn_tool_reader_free(r);
}
