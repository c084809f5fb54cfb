/* test_grammar_tools.c — the tool-call front end (src/grammar/tools.c). Truth: replies
 * written here in each format, judged by hand against the OpenAI tools given (a call's
 * arguments must meet its function's parameters schema; free text may not hold a
 * trigger), and the reply reader (src/text/toolcall.c) reading back every reply the
 * grammar accepts as the calls it was written with. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, "
    "\"required\": [\"city\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"integer\"}}, \"required\": [\"a\", \"b\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]";

static gr_grammar *tools_grammar(int format, int choice, const char *name, bool parallel) {
    gr_builder *b = gr_builder_new();
    int32_t root = gr_tools(b, format, TOOLS, strlen(TOOLS), choice, name, parallel);
    cr_assert_geq(root, 0, "%s", gr_builder_error(b)->msg);
    gr_grammar *g = NULL;
    cn_error err = {0};
    cr_assert_eq(gr_compile(b, root, NULL, &g, &err), CN_STATUS_OK, "%s", err.msg);
    gr_builder_free(b);
    return g;
}

/* Every accepted reply reads back (toolcall.c) as the calls it was written with. */
static void reads_back(int format, const char *reply, int n_calls, const char *first_name) {
    cn_tool_reader *r;
    cr_assert_eq(cn_tool_reader_new((cn_tool_format)format, false, false, &r, NULL), CN_STATUS_OK);
    const cn_tool_event *ev;
    size_t n;
    cr_assert_eq(cn_tool_reader_feed(r, reply, strlen(reply), true, &ev, &n, NULL), CN_STATUS_OK);
    int calls = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_neq(ev[i].kind, CN_TOOL_EV_BROKEN, "%s", reply);
        if (ev[i].kind == CN_TOOL_EV_CALL) {
            if (calls == 0 && first_name) cr_assert_str_eq(ev[i].name, first_name, "%s", reply);
            calls++;
        }
    }
    cr_assert_eq(calls, n_calls, "%s: %d calls read, %d written", reply, calls, n_calls);
    cn_tool_reader_free(r);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void check(gr_grammar *g, int format, const char *const *yes, const int *yes_calls, const char *const *no) {
    for (int i = 0; yes[i]; i++) {
        cr_assert(gr_matches(g, yes[i], strlen(yes[i])), "should accept: %s", yes[i]);
        reads_back(format, yes[i], yes_calls[i], NULL);
    }
    for (int i = 0; no && no[i]; i++) cr_assert(!gr_matches(g, no[i], strlen(no[i])), "should reject: %s", no[i]);
}

Test(grammar_tools, hermes_auto) {
    gr_grammar *g = tools_grammar(CN_TOOL_FORMAT_HERMES, 0, NULL, true);
    check(
        g, CN_TOOL_FORMAT_HERMES,
        L("", "Hello! How can I help?", "Use a < or a tool_call > freely",
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n"
          "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":-2}}\n</tool_call>",
          "<tool_call>{\"name\": \"ping\", \"arguments\": {\"any\": [1, {}]}}</tool_call>",
          /* what small models write instead, at the start: the bare object, or fenced */
          "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}",
          "\n```json\n{\"name\": \"ping\", \"arguments\": {}}\n```", "Text, then ```json\n[1]\n``` is fine"),
        (const int[]){0, 0, 0, 1, 2, 1, 1, 1, 0},
        L("<tool_call>hello</tool_call>",                                              /* not a call */
          "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",        /* unknown function */
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", /* city required */
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\", \"unit\": \"k\"}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 2}}\n</tool_call>",
          "<tool_call>\n{\"arguments\": {}, \"name\": \"ping\"}\n</tool_call>",               /* name first */
          "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call> and then text", /* nothing after calls */
          "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}",                             /* unclosed */
          "a <tool_call> b", "{\"name\": \"add\", \"arguments\": {\"a\": 1}}",                /* b required */
          " {not json}", "```json\n{}\n```"));
    gr_grammar_free(g);
    /* one call only */
    g = tools_grammar(CN_TOOL_FORMAT_HERMES, 0, NULL, false);
    const char *two =
        "<tool_call>{\"name\":\"ping\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"ping\",\"arguments\":{}}</tool_call>";
    cr_assert(!gr_matches(g, two, strlen(two)));
    cr_assert(gr_matches(g, two, strlen(two) / 2));
    gr_grammar_free(g);
}

Test(grammar_tools, required_and_named) {
    gr_grammar *g = tools_grammar(CN_TOOL_FORMAT_HERMES, 1, NULL, true);
    check(g, CN_TOOL_FORMAT_HERMES,
          L("<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}</tool_call>"), (const int[]){1},
          L("", "Sure.", "Sure. <tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>"));
    gr_grammar_free(g);
    g = tools_grammar(CN_TOOL_FORMAT_HERMES, 2, "get_weather", false);
    check(g, CN_TOOL_FORMAT_HERMES,
          L("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"),
          (const int[]){1}, L("<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>", ""));
    gr_grammar_free(g);
    gr_builder *b = gr_builder_new();
    cr_assert_lt(gr_tools(b, CN_TOOL_FORMAT_HERMES, TOOLS, strlen(TOOLS), 2, "nope", false), 0);
    cr_assert(strstr(gr_builder_error(b)->msg, "'nope', which is not among the tools"), "%s", gr_builder_error(b)->msg);
    gr_builder_free(b);
}

Test(grammar_tools, llama3_and_mistral) {
    gr_grammar *g = tools_grammar(CN_TOOL_FORMAT_LLAMA3, 0, NULL, false);
    check(g, CN_TOOL_FORMAT_LLAMA3,
          L("The weather is nice.", "  {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
            "<|python_tag|>{\"name\": \"ping\", \"parameters\": {}}", "I would write {x} here"),
          (const int[]){0, 1, 1, 0},
          L("{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}", /* Llama 3 says parameters */
            "{not a call}", " {\"name\": \"nope\", \"parameters\": {}}"));
    gr_grammar_free(g);
    g = tools_grammar(CN_TOOL_FORMAT_MISTRAL, 0, NULL, true);
    check(
        g, CN_TOOL_FORMAT_MISTRAL,
        L("Plain answer.",
          "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"add\", \"arguments\": {\"a\": 0, \"b\": 0}}]"),
        (const int[]){0, 2}, L("[TOOL_CALLS][]", "[TOOL_CALLS]{\"name\": \"ping\", \"arguments\": {}}"));
    gr_grammar_free(g);
}

Test(grammar_tools, bad_tools_are_clear_errors) {
    const char *bad[][2] = {
        {"[]", "non-empty array"},
        {"{\"a\": 1}", "non-empty array"},
        {"[1", "non-empty array"},
        {"[{\"type\": \"code_interpreter\"}]", "only {\"type\": \"function\""},
        {"[{\"type\": \"function\", \"function\": {\"description\": \"x\"}}]", "tools[0].function.name"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": \"function\", \"function\": {\"name\": \"a\"}}]",
         "'a' is listed twice"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": 3}}]",
         "tools[0].function.parameters"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": {\"type\": \"strin\"}}}]",
         "at /tools/0/function/parameters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gr_builder *b = gr_builder_new();
        cr_assert_lt(gr_tools(b, CN_TOOL_FORMAT_HERMES, bad[i][0], strlen(bad[i][0]), 0, NULL, true), 0, "%s",
                     bad[i][0]);
        cr_assert(strstr(gr_builder_error(b)->msg, bad[i][1]), "%s: '%s' lacks '%s'", bad[i][0],
                  gr_builder_error(b)->msg, bad[i][1]);
        gr_builder_free(b);
    }
}
