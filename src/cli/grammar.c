/* grammar.c — `cinder grammar check`, which compiles a JSON Schema, GBNF grammar, regex
 * or choice list (the flags of grammar_opts.h) against a model's tokenizer and says
 * whether a text is a sentence of it (exit 0 yes, 1 no, 2 error). The compiling and
 * matching are the library's (cn_grammar_*); this file reads flags and files and prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "genopts.h"
#include "grammar_opts.h"

/* ---- cinder grammar check ---- */

static const char k_usage[] =
    "usage: cinder grammar check (--json-schema X | --json-object | --grammar FILE | --regex RE |\n"
    "                             --choice A,B,...) [-m MODEL] [--text T | --file F]\n"
    "  compiles the grammar against MODEL's tokenizer and says whether the text (--text, --file,\n"
    "  else stdin) is a sentence of it: 'match' and exit 0, 'no match: ...' and exit 1; 2 on an error\n\n";

/* Why text is not a sentence: where the first byte is that no sentence continues with,
 * or that the text stops short. Uses a matcher byte by byte; stays vague if that
 * disagrees with cn_grammar_check_text (the verdict). */
static void explain_mismatch(cn_grammar *g, const char *text, size_t n) {
    cn_grammar_matcher *m = NULL;
    if (cn_grammar_matcher_new(g, &m, NULL) != CN_STATUS_OK) {
        puts("no match");
        return;
    }
    size_t i = 0;
    while (i < n && cn_grammar_matcher_accept_text(m, text + i, 1)) i++;
    if (i < n) {
        char ch[8];
        cn_cli_escape_char(text + i, n - i, '\'', ch);
        printf("no match: byte %zu ('%s') cannot continue the text before it\n", i, ch);
    } else if (!cn_grammar_matcher_is_complete(m)) {
        printf("no match: the text ends before it is complete (%zu bytes, all a valid start)\n", n);
    } else {
        puts("no match");
    }
    cn_grammar_matcher_free(m);
}

static int grammar_check(int argc, char **argv) {
    cli_grammar_opts go;
    memset(&go, 0, sizeof go);
    const char *model = NULL, *text_arg = NULL, *file = NULL;
    const cli_flag own[] = {
        CLI_F_MODEL(&model),
        CLI_F_STR("--text", NULL, &text_arg, "T", "the text to check"),
        CLI_F_STR("--file", NULL, &file, "F", "the text to check, from a file"),
    };
    const cli_flag_group groups[] = {cli_grammar_group(&go), CLI_GROUP("input", own)};
    const int pr = cli_flags_parse("grammar check", k_usage, groups, 2, argc, argv, NULL, 0, &(int){0});
    if (pr) return CLI_FLAGS_EXIT(pr);
    if (cli_grammar_check_opts("grammar check", &go)) return 2;
    if (!cli_grammar_given(&go)) { /* --flexible-ws alone was refused above */
        cn_cli_errorf("grammar check: no grammar: give --json-schema, --json-object, --grammar, --regex or --choice");
        return 2;
    }
    if (text_arg && file) {
        cn_cli_errorf("grammar check: --text and --file both give the text: give one");
        return 2;
    }
    char buf[4096];
    const char *path = cli_model_path("grammar check", model, buf, sizeof buf);
    if (!path) return 2;
    cn_tokenizer *tok = NULL;
    cn_grammar *g = NULL;
    char *owned = NULL;
    size_t n = 0;
    int rc = 2;
    cn_error err = {0};
    if (cn_tokenizer_load_file(path, &tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("grammar check: %s", err.msg);
        goto done;
    }
    if (cli_grammar_compile("grammar check", &go, tok, &g)) goto done;
    const char *text = text_arg;
    if (text) n = strlen(text);
    else if (file) text = owned = cn_cli_read_file(file, &n);
    else text = owned = cn_cli_read_file("/dev/stdin", &n); /* a pipe or a file alike */
    if (!text) goto done;
    if (cn_grammar_check_text(g, text, n)) {
        puts("match");
        rc = 0;
    } else {
        explain_mismatch(g, text, n);
        rc = 1;
    }
done:
    free(owned);
    cn_grammar_free(g);
    cn_tokenizer_free(tok);
    return rc;
}

int cn_cli_grammar(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "check")) return grammar_check(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(k_usage, stdout);
        return 0;
    }
    cn_cli_errorf("grammar: %s (the subcommand is 'check'; see 'cinder grammar check --help')",
                  argc >= 2 ? "unknown subcommand" : "no subcommand");
    return 2;
}
