/* test_chat_turn.c — chat turns with tools made ready to generate (src/text/chat_turn.c).
 * Truth: the prompts written out by hand from ChatML's rule (each turn
 * "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then "<|im_start|>assistant\n") and from the
 * generic format the file documents (the tools note first in the system turn, results in
 * <tool_response> tags as user turns, calls as <tool_call> tags); and the checks each
 * malformed conversation must fail, with the field they must name. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"

static cn_chat_template *chatml(void) {
    cn_chat_template *t;
    cr_assert_eq(cn_chat_template_from_name("chatml", &t, NULL), CN_STATUS_OK);
    return t;
}

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}}]";

static const char NOTE[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call>";

Test(chat_turn, plain_messages_render_as_before) {
    cn_chat_template *t = chatml();
    cn_chat_turn turn = {
        "[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]",
        NULL, NULL};
    char *p;
    size_t n;
    cn_chat_turn_info info;
    cr_assert_eq(cn_chat_turn_prepare(t, &turn, &p, &n, &info, NULL), CN_STATUS_OK);
    cr_assert_str_eq(
        p, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n");
    cr_assert_eq(n, strlen(p));
    cr_assert_eq(info.format, CN_TOOL_FORMAT_NONE);
    cr_assert(!info.think);
    free(p);
    cn_chat_template_free(t);
}

Test(chat_turn, generic_tools_calls_and_results) {
    cn_chat_template *t = chatml();
    cn_chat_turn turn = {
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Q\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\": \\\"Oslo\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"12C\"}]",
        TOOLS, NULL};
    char *p;
    cn_chat_turn_info info;
    cr_assert_eq(cn_chat_turn_prepare(t, &turn, &p, NULL, &info, NULL), CN_STATUS_OK);
    const char *want_head = "<|im_start|>system\nS\n\n";
    cr_assert_eq(strncmp(p, want_head, strlen(want_head)), 0, "%s", p);
    cr_assert_eq(strncmp(p + strlen(want_head), NOTE, strlen(NOTE)), 0, "%s", p);
    const char *rest = p + strlen(want_head) + strlen(NOTE);
    cr_assert_str_eq(rest,
                     "<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
                     "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call><|im_end|>\n"
                     "<|im_start|>user\n<tool_response>\n12C\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    cr_assert_eq(info.format, CN_TOOL_FORMAT_GENERIC);
    free(p);
    /* no system message: the note is a system turn of its own */
    cn_chat_turn t2 = {"[{\"role\":\"user\",\"content\":\"Q\"}]", TOOLS, NULL};
    cr_assert_eq(cn_chat_turn_prepare(t, &t2, &p, NULL, &info, NULL), CN_STATUS_OK);
    cr_assert_eq(strncmp(p, "<|im_start|>system\n# Tools\n", 27), 0, "%s", p);
    free(p);
    cn_chat_template_free(t);
}

Test(chat_turn, malformed_conversations_name_the_field) {
    cn_chat_template *t = chatml();
    const char *bad[][2] = {
        {"[]", "messages"},
        {"{}", "messages"},
        {"[1]", "messages[0]"},
        {"[{\"role\":\"robot\",\"content\":\"x\"}]", "messages[0].role"},
        {"[{\"role\":\"user\"}]", "messages[0].content"},
        {"[{\"role\":\"user\",\"content\":\"x\",\"colour\":1}]", "messages[0].colour"},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]", "messages[0].content"},
        {"[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"r\"}]", "messages[1].tool_call_id"},
        {"[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"tool_call_id\":\"nope\",\"content\":\"r\"}]",
         "messages[1].tool_call_id"},
        {"[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"w\"}}]}]",
         "messages[0].tool_calls[0]"},
        {"[{\"role\":\"assistant\",\"content\":\"x\",\"reasoning_content\":3}]", "messages[0].reasoning_content"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cn_chat_turn turn = {bad[i][0], NULL, NULL};
        char *p = (char *)1;
        cn_chat_turn_info info;
        cn_error err = {0};
        cr_assert_eq(cn_chat_turn_prepare(t, &turn, &p, NULL, &info, &err), CN_STATUS_INVALID_ARG, "%s", bad[i][0]);
        cr_assert_null(p);
        cr_assert_str_eq(err.param, bad[i][1], "%s: %s", bad[i][0], err.msg);
    }
    cn_chat_turn turn = {"[{\"role\":\"user\",\"content\":\"x\"}]", "{\"a\":1}", NULL};
    char *p;
    cn_chat_turn_info info;
    cn_error err = {0};
    cr_assert_eq(cn_chat_turn_prepare(t, &turn, &p, NULL, &info, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "tools");
    cn_chat_template_free(t);
}
