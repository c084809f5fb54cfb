/* template.c — `cinder template render`: a conversation through a chat template, printed
 * exactly as rendered (stdout carries the prompt and nothing else; no newline is added).
 * The template is a model's own (-m) or a Jinja file's (--template); the messages and
 * tools are OpenAI-style JSON files; --var adds template variables (the value as JSON
 * when it parses, else as a string); --now fixes strftime_now's clock. The rendering is
 * the library's (cn_chat_render_json); this file reads flags and files and prints. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"

#define TEMPLATE_MAX_VARS 64

static const char k_usage[] =
    "usage: cinder template render (-m MODEL | --template FILE) --messages FILE [--tools FILE]\n"
    "                              [--no-generation-prompt] [--var NAME=VALUE]... [--now UNIX]\n\n"
    "Prints the prompt a chat template makes of a conversation, byte for byte as Hugging Face's\n"
    "apply_chat_template renders it with jinja2 (with -m, less a leading BOS the tokenizer adds).\n"
    "FILE '-' is stdin. --messages: a JSON array of OpenAI-style messages; --tools: a JSON array of\n"
    "OpenAI tools.\n\n";

/* The --var list as a JSON object text (malloc'ed), or NULL after an error message. */
static char *vars_object(const char *const *vars, int n) {
    json_t *o = json_object();
    if (!o) return NULL;
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(vars[i], '=');
        if (!eq || eq == vars[i]) {
            cn_cli_errorf("template: --var takes NAME=VALUE, got '%s'", vars[i]);
            json_decref(o);
            return NULL;
        }
        char *name = strndup(vars[i], (size_t)(eq - vars[i]));
        json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        if (!v) v = json_string(eq + 1);
        if (!name || !v || json_object_set_new(o, name, v)) {
            cn_cli_errorf("template: --var %s: %s", vars[i], v ? "out of memory" : "not valid UTF-8");
            free(name);
            json_decref(o);
            return NULL;
        }
        free(name);
    }
    char *s = json_dumps(o, JSON_ENCODE_ANY);
    json_decref(o);
    if (!s) cn_cli_errorf("template: out of memory");
    return s;
}

int cn_cli_template(int argc, char **argv) {
    const char *model = NULL, *tmpl_path = NULL, *messages_path = NULL, *tools_path = NULL;
    const char *vars[TEMPLATE_MAX_VARS];
    int32_t n_vars = 0;
    bool no_gen = false;
    int64_t now = 0;
    const cli_flag flags[] = {
        CLI_F_STR("--model", "-m", &model, "PATH", "the model whose tokenizer.chat_template renders"),
        CLI_F_STR("--template", NULL, &tmpl_path, "FILE", "a Jinja chat template to render instead"),
        CLI_F_STR("--messages", NULL, &messages_path, "FILE", "the conversation: a JSON array of messages"),
        CLI_F_STR("--tools", NULL, &tools_path, "FILE", "a JSON array of OpenAI tools"),
        CLI_F_BOOL("--no-generation-prompt", NULL, &no_gen, "do not open an assistant turn at the end"),
        {.name = "--var",
         .kind = CLI_STRS,
         .dst = vars,
         .max = TEMPLATE_MAX_VARS,
         .count = &n_vars,
         .metavar = "NAME=VALUE",
         .help = "a template variable (VALUE as JSON when it parses, else a string)"},
        CLI_F_NUM("--now", NULL, CLI_I64, &now, 0, 253402300799.0, "UNIX",
                  "strftime_now's clock, seconds since 1970 read as UTC (default: now, local time)"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    const char *pos[2];
    int n_pos = 0;
    int rc = cli_flags_parse("template", k_usage, groups, 1, argc, argv, pos, 2, &n_pos);
    if (rc) return CLI_FLAGS_EXIT(rc);
    const char *bad = n_pos == 0                 ? "no action given (render)"
                      : strcmp(pos[0], "render") ? "unknown action (the one action is render)"
                      : n_pos > 1                ? "one action at a time"
                      : !model == !tmpl_path     ? "give one of -m MODEL and --template FILE"
                      : !messages_path           ? "no --messages FILE given"
                                                 : NULL;
    if (bad) {
        cn_cli_errorf("template: %s (see 'cinder template --help')", bad);
        return 2;
    }

    cn_error err = {0};
    cn_model *m = NULL;
    cn_chat_template *t = NULL;
    char *src = NULL, *messages = NULL, *tools = NULL, *vars_json = NULL, *out = NULL;
    size_t n = 0, out_len = 0;
    rc = 1;
    if (!(messages = cn_cli_read_file(messages_path, &n))) goto done;
    if (tools_path && !(tools = cn_cli_read_file(tools_path, &n))) goto done;
    if (n_vars && !(vars_json = vars_object(vars, n_vars))) {
        rc = 2;
        goto done;
    }
    if (tmpl_path) {
        if (!(src = cn_cli_read_file(tmpl_path, &n))) goto done;
        if (cn_chat_template_from_jinja(src, n, &t, &err) != CN_STATUS_OK) {
            cn_cli_errorf("%s: %s", tmpl_path, err.msg);
            goto done;
        }
    } else {
        cn_model_params mp = cn_model_default_params();
        if (cn_model_load(model, &mp, &m, &err) != CN_STATUS_OK ||
            cn_chat_template_from_model(m, &t, &err) != CN_STATUS_OK) {
            cn_cli_errorf("%s", err.msg);
            goto done;
        }
    }
    if (now) cn_chat_template_set_clock(t, now);
    if (cn_chat_render_json(t, messages, tools, !no_gen, vars_json, &out, &out_len, &err) != CN_STATUS_OK) {
        cn_cli_errorf("template: %s", err.msg);
        goto done;
    }
    if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0) {
        cn_cli_errorf("template: cannot write the output");
        goto done;
    }
    rc = 0;
done:
    free(out);
    free(vars_json);
    free(src);
    free(messages);
    free(tools);
    cn_chat_template_free(t);
    cn_model_free(m);
    return rc;
}
