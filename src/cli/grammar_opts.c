/* grammar_opts.c — the structured-output flags (grammar_opts.h) that `cinder run` and
 * `cinder grammar check` share: the flag table, the usage checks, --choice's list, and the
 * compile of what they name into a cn_grammar (the library's cn_grammar_compile). Reads
 * flags and files and prints messages; compiling and matching are the library's. */
#include "grammar_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

cli_flag_group cli_grammar_group(cli_grammar_opts *o) {
    const cli_flag t[] = {
        CLI_F_STR("--json-schema", NULL, &o->json_schema, "FILE|JSON",
                  "constrain the output to a JSON Schema (a file's path, else the JSON itself)"),
        CLI_F_BOOL("--json-object", NULL, &o->json_object, "constrain the output to any JSON object"),
        CLI_F_STR("--grammar", NULL, &o->gbnf_path, "FILE",
                  "constrain the output to a GBNF grammar (root rule 'root')"),
        CLI_F_STR("--regex", NULL, &o->regex, "RE", "constrain the output to match RE in full"),
        CLI_F_STR("--choice", NULL, &o->choice, "A,B,...",
                  "the output is exactly one of the strings ('\\,' is a comma, '\\\\' a backslash)"),
        CLI_F_BOOL("--flexible-ws", NULL, &o->flexible_ws,
                   "JSON: allow whitespace between tokens (default: the compact form)"),
    };
    memcpy(o->table, t, sizeof t);
    return (cli_flag_group){"structured output (one of)", o->table, sizeof t / sizeof t[0]};
}

static int n_kinds(const cli_grammar_opts *o) {
    return !!o->json_schema + !!o->json_object + !!o->gbnf_path + !!o->regex + !!o->choice;
}

bool cli_grammar_given(const cli_grammar_opts *o) { return n_kinds(o) > 0 || o->flexible_ws; }

int cli_grammar_check_opts(const char *cmd, const cli_grammar_opts *o) {
    if (n_kinds(o) > 1) {
        cn_cli_errorf("%s: --json-schema, --json-object, --grammar, --regex and --choice each name a grammar: give "
                      "one",
                      cmd);
        return 2;
    }
    if (o->flexible_ws && !o->json_schema && !o->json_object) {
        cn_cli_errorf("%s: --flexible-ws is for JSON (--json-schema or --json-object)", cmd);
        return 2;
    }
    return 0;
}

/* --choice's list: items split at unescaped commas, "\," and "\\" unescaped. *items and
 * its strings are malloc'ed (free with free_choices). 0, 1 (memory) or 2. */
static int split_choices(const char *cmd, const char *s, char ***items, size_t *n) {
    *items = NULL;
    *n = 0;
    const size_t len = strlen(s);
    char *buf = malloc(len + 1); /* the current item */
    char **v = calloc(CLI_GRAMMAR_MAX_CHOICES, sizeof *v);
    int rc = 1;
    if (!buf || !v) goto fail;
    size_t k = 0;
    for (size_t i = 0;; i++) {
        const char c = s[i];
        if (c == '\\' && (s[i + 1] == ',' || s[i + 1] == '\\')) {
            buf[k++] = s[++i];
            continue;
        }
        if (c == '\\') {
            cn_cli_errorf("%s: --choice: a backslash at byte %zu escapes only ',' or '\\' (write '\\\\' for a "
                          "backslash)",
                          cmd, i);
            rc = 2;
            goto fail;
        }
        if (c != ',' && c != '\0') {
            buf[k++] = c;
            continue;
        }
        if (k == 0) {
            cn_cli_errorf("%s: --choice: choice %zu is empty (write '\\,' for a comma)", cmd, *n + 1);
            rc = 2;
            goto fail;
        }
        if (*n == CLI_GRAMMAR_MAX_CHOICES) {
            cn_cli_errorf("%s: --choice: more than %d choices", cmd, CLI_GRAMMAR_MAX_CHOICES);
            rc = 2;
            goto fail;
        }
        if (!(v[*n] = strndup(buf, k))) goto fail;
        (*n)++;
        k = 0;
        if (c == '\0') break;
    }
    free(buf);
    *items = v;
    return 0;
fail:
    if (rc == 1) cn_cli_errorf("%s: --choice: out of memory", cmd);
    for (size_t i = 0; v && i < *n; i++) free(v[i]);
    free(v);
    free(buf);
    *n = 0;
    return rc;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int cli_grammar_compile(const char *cmd, const cli_grammar_opts *o, const cn_tokenizer *tok, cn_grammar **out) {
    *out = NULL;
    int rc = cli_grammar_check_opts(cmd, o);
    if (rc || n_kinds(o) == 0) return rc;
    cn_grammar_params gp = cn_grammar_default_params();
    gp.flexible_whitespace = o->flexible_ws;
    char *text = NULL, **choices = NULL;
    size_t n_text = 0, n_choices = 0;
    const char *what;
    if (o->json_schema) {
        what = "--json-schema";
        gp.kind = CN_GRAMMAR_JSON_SCHEMA;
        if (is_file(o->json_schema)) {
            if (!(text = cn_cli_read_file(o->json_schema, &n_text))) return 1;
            gp.source = text, gp.source_len = n_text;
        } else {
            gp.source = o->json_schema, gp.source_len = strlen(o->json_schema);
        }
    } else if (o->json_object) {
        what = "--json-object";
        gp.kind = CN_GRAMMAR_JSON_OBJECT;
    } else if (o->gbnf_path) {
        what = "--grammar";
        gp.kind = CN_GRAMMAR_GBNF;
        if (!(text = cn_cli_read_file(o->gbnf_path, &n_text))) return 1;
        gp.source = text, gp.source_len = n_text;
    } else if (o->regex) {
        what = "--regex";
        gp.kind = CN_GRAMMAR_REGEX;
        gp.source = o->regex, gp.source_len = strlen(o->regex);
    } else {
        what = "--choice";
        gp.kind = CN_GRAMMAR_CHOICE;
        if ((rc = split_choices(cmd, o->choice, &choices, &n_choices))) return rc;
        gp.choices = (const char *const *)choices, gp.n_choices = n_choices;
    }
    /* an empty source would mean strlen: an empty file or argument is its own case */
    if (gp.kind != CN_GRAMMAR_JSON_OBJECT && gp.kind != CN_GRAMMAR_CHOICE && gp.source_len == 0) {
        cn_cli_errorf("%s: %s: the %s is empty", cmd, what, gp.kind == CN_GRAMMAR_REGEX ? "regex" : "grammar");
        rc = 2;
    } else {
        cn_error err = {0};
        if (cn_grammar_compile(tok, &gp, out, &err) != CN_STATUS_OK) {
            cn_cli_errorf("%s: %s: %s", cmd, what, err.msg);
            rc = err.status == CN_STATUS_NO_MEMORY ? 1 : 2;
        }
    }
    for (size_t i = 0; i < n_choices; i++) free(choices[i]);
    free(choices);
    free(text);
    return rc;
}
