/* jinja.h — a Jinja interpreter for chat templates: parses a model's
 * tokenizer.chat_template and renders it byte for byte as Python's jinja2 does the way
 * Hugging Face's apply_chat_template calls it (an ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks, the loopcontrols extension, HF's {% generation %} tag, its
 * tojson / raise_exception / strftime_now). The language subset is what real chat
 * templates use (docs in jinja_parse.c for statements, jinja_builtins.c for filters,
 * tests, methods and globals).
 *
 * A template is untrusted input: parsing and rendering check every bound, and rendering
 * runs under a step, an output-size and a recursion-depth budget, so a template that
 * loops for ever or grows a string exponentially ends with an error naming the budget.
 * Errors carry the template's line number ("line 12: ..."); raise_exception's message is
 * given as the template wrote it. Nothing here prints or aborts.
 *
 * Implementation: jinja_lex.c (source to tokens), jinja_parse.c (tokens to an AST),
 * jinja_value.c (values with Python's semantics: str(), repr(), ==, json.dumps),
 * jinja_str.c (Python str methods over UTF-8), jinja_eval.c (the evaluator),
 * jinja_builtins.c (filters, tests, methods, globals), jinja_format.c (% and
 * str.format). */
#ifndef CN_JINJA_H
#define CN_JINJA_H

#include "core/core.h"

typedef struct cn_jinja cn_jinja; /* a parsed template: immutable, thread-safe to render */

/* Parses src[0..n) (borrowed; copied as needed). Errors: a syntax error, an unknown tag,
 * filter or test outside an if (as jinja2 refuses them at compile time), nesting deeper
 * than CN_JINJA_MAX_PARSE_DEPTH (CN_STATUS_INVALID_ARG, "line N: ..."), a template over
 * CN_JINJA_MAX_SOURCE_BYTES (LIMIT), no memory. */
cn_status cn_jinja_parse(const char *src, size_t n, cn_jinja **out, cn_error *err);
void cn_jinja_free(cn_jinja *t); /* NULL is a no-op */

#define CN_JINJA_MAX_SOURCE_BYTES (4u << 20)
#define CN_JINJA_MAX_PARSE_DEPTH 200

typedef struct {
    size_t max_output_bytes; /* the rendered text, and any one string or list built on the way */
    uint64_t max_steps;      /* evaluation steps (nodes, loop iterations, bytes/64 of strings built) */
    int max_depth;           /* nesting of evaluation: macro calls, blocks, expressions */
    int64_t now_unix;        /* strftime_now's clock, UTC; 0: the real clock, local time */
} cn_jinja_limits;

/* Budgets that every real template fits with a wide margin: 64 MiB of output, 50 M
 * steps, depth 500, the real clock. */
cn_jinja_limits cn_jinja_default_limits(void);

/* Renders t with the top-level variables of vars_json[0..n) (a JSON object: messages,
 * tools, add_generation_prompt, bos_token, ...; its key order is kept, as template dict
 * iteration shows it). lim NULL: the defaults. *out is NUL-terminated, freed by the
 * caller with free(); *out_len its length (the text may hold NUL bytes when the input
 * does). Errors (nothing allocated): vars_json not a JSON object (INVALID_ARG, with
 * jansson's line and column); the template raising (raise_exception's message) or
 * failing as jinja2 would (an undefined value used, a type error, a sandbox violation:
 * INVALID_ARG, "line N: ..."); a budget spent (LIMIT, naming it); no memory. */
cn_status cn_jinja_render(const cn_jinja *t, const char *vars_json, size_t n, const cn_jinja_limits *lim, char **out,
                          size_t *out_len, cn_error *err);

#endif
