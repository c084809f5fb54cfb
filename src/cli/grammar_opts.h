/* grammar_opts.h — the structured-output flags of the CLI (--json-schema, --json-object,
 * --grammar, --regex, --choice, --flexible-ws): one table that `cinder run` and `cinder
 * grammar check` both take, and the compile of what they name into a cn_grammar (the
 * library's, against a tokenizer). Parsing and messages only (grammar_opts.c); the
 * `grammar` subcommand itself is grammar.c. */
#ifndef CN_CLI_GRAMMAR_OPTS_H
#define CN_CLI_GRAMMAR_OPTS_H

#include <stdbool.h>

#include "cinder.h"
#include "flags.h"

#define CLI_GRAMMAR_MAX_CHOICES 4096

typedef struct {
    const char *json_schema; /* a path, when such a file exists, else inline JSON */
    const char *gbnf_path;   /* --grammar FILE */
    const char *regex;
    const char *choice; /* "a,b,c": ',' separates, "\," and "\\" escape */
    bool json_object, flexible_ws;
    cli_flag table[6]; /* the rows, pointing into this struct */
} cli_grammar_opts;

/* The flag group over o (its table lives in o). */
cli_flag_group cli_grammar_group(cli_grammar_opts *o);

/* Whether any grammar flag was given (--flexible-ws alone counts: it is then an error). */
bool cli_grammar_given(const cli_grammar_opts *o);

/* The usage checks that need no model: one kind at most, --flexible-ws only with JSON.
 * 0 or 2 (message printed, naming cmd). */
int cli_grammar_check_opts(const char *cmd, const cli_grammar_opts *o);

/* Compiles the grammar o names against tok into *out (NULL when none is named). 0; 2
 * when the grammar is refused (its compile message: an unsupported keyword, a GBNF
 * line:column, a regex offset) or a flag is malformed; 1 when a file cannot be read or
 * memory runs out. Message printed, naming cmd. */
int cli_grammar_compile(const char *cmd, const cli_grammar_opts *o, const cn_tokenizer *tok, cn_grammar **out);

#endif
