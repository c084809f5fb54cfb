/* grammar.h — the grammar layer's internal API: an expression builder that every front end
 * (JSON Schema, GBNF, regex, choice) writes into, the compiler that turns the rules into
 * one byte-level automaton per rule, and the matcher (a pushdown automaton over those
 * automata) that computes token masks through the vocabulary's token trie.
 *
 * The model: a grammar is a set of rules; each rule is a regular expression over bytes
 * and references to rules. compile turns each rule into a DFA whose edges are bytes and
 * rule calls; the matcher keeps the set of live stacks of (rule, state) frames. Left
 * recursion (a rule reaching itself before consuming a byte) is refused at compile time.
 *
 * The public face is cn_grammar / cn_grammar_matcher (include/cinder.h); grammar.c maps it
 * onto these functions. */
#ifndef CN_GRAMMAR_H
#define CN_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "cinder.h"

/* ---- the builder ----
 * Expressions are ids (int32_t >= 0) into the builder. A function that fails (out of
 * memory, or the node budget) returns -1 and records the first error in the builder
 * (gr_builder_error); every function taking a -1 argument returns -1, so a front end may
 * build a whole tree and check once at the end. */

typedef struct gr_builder gr_builder;

#define GR_INF UINT32_MAX /* an unbounded repeat's max */

gr_builder *gr_builder_new(void); /* NULL: out of memory */
void gr_builder_free(gr_builder *b);
/* The first error ("" when none): status and message. */
const cn_error *gr_builder_error(const gr_builder *b);
/* Records an error (a front end's own: "unsupported keyword ..."), if none yet. */
void gr_builder_fail(gr_builder *b, cn_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A clock for the front end (cn_time_ms() value; 0, the default: none). Past it the
 * next node fails with a "compile budget" error, so a schema whose front-end work grows
 * fast (a oneOf of many long required lists) is refused in time, not just its automata. */
void gr_builder_set_deadline(gr_builder *b, double deadline_ms);

/* The rule called name: declared on first use (forward references are fine), defined once
 * with gr_rule_define. Names are only for messages and GBNF; a front end may make fresh
 * ones with gr_rule_fresh ("name-1", "name-2", ...). */
int32_t gr_rule(gr_builder *b, const char *name);
int32_t gr_rule_fresh(gr_builder *b, const char *prefix);
/* Defines rule as expr. Defining a rule twice is an error. */
int32_t gr_rule_define(gr_builder *b, int32_t rule, int32_t expr);
const char *gr_rule_name(const gr_builder *b, int32_t rule);

int32_t gr_empty(gr_builder *b);   /* matches "" */
int32_t gr_nothing(gr_builder *b); /* matches nothing (an unsatisfiable branch) */
/* One byte from set (bit (c % 8) of set[c / 8]). */
int32_t gr_byteset(gr_builder *b, const uint8_t set[32]);
int32_t gr_byte_range(gr_builder *b, uint8_t lo, uint8_t hi);
int32_t gr_literal(gr_builder *b, const char *s, size_t n); /* the bytes of s, in order */
/* One Unicode scalar value, as UTF-8: in one of the inclusive ranges (pairs lo, hi of
 * code points, n_ranges pairs, any order, may overlap), or, with negate, in none of them.
 * Surrogates (U+D800..U+DFFF) and values above U+10FFFF are never matched. */
int32_t gr_codepoints(gr_builder *b, const uint32_t *ranges, size_t n_ranges, bool negate);
int32_t gr_seq(gr_builder *b, const int32_t *items, size_t n);
int32_t gr_seq2(gr_builder *b, int32_t x, int32_t y);
int32_t gr_alt(gr_builder *b, const int32_t *items, size_t n);
int32_t gr_alt2(gr_builder *b, int32_t x, int32_t y);
/* item repeated min..max times (max GR_INF: unbounded). min > max: error. */
int32_t gr_repeat(gr_builder *b, int32_t item, uint32_t min, uint32_t max);
int32_t gr_ref(gr_builder *b, int32_t rule); /* a call of rule */
/* The texts both x and y match; the texts x does not match (any bytes at all: intersect
 * it with what may stand there). Neither may call a rule (compile says so, naming the
 * rule being compiled); each operand becomes a DFA, so keep them to lexical pieces. */
int32_t gr_and(gr_builder *b, int32_t x, int32_t y);
int32_t gr_not(gr_builder *b, int32_t x);

/* ---- front ends (each builds into b and returns the root rule, or -1 with the error
 * in b, or sets *err directly when they report before building) ---- */

/* A regular expression, matched in full (no anchors needed; ^ at the start and $ at the
 * end are accepted and ignored). ECMAScript / PCRE syntax as JSON Schema's "pattern" uses
 * it: literals, escapes (\d \w \s \D \W \S \n \t \r \f \v \0 \xHH \uHHHH \u{H..} \. ...),
 * classes [...] with ranges and negation, ., |, groups (...) (?:...) (?<name>...), and
 * the quantifiers * + ? {n} {n,} {n,m} (lazy forms accepted: a mask does not care).
 * Returns an expression (not a rule), or -1 with an error naming the offset. */
int32_t gr_regex_expr(gr_builder *b, const char *re, size_t n);
/* A JSON Schema pattern: not anchored ("pattern" matches anywhere in the string), so the
 * expression is .*(re).* unless re starts with ^ / ends with $. Returns an expression
 * matching the string's *content* as JSON string bytes would spell it undecoded. */
int32_t gr_regex_expr_unanchored(gr_builder *b, const char *re, size_t n);

/* llama.cpp's GBNF: rules "name ::= alternatives", literals "..." with escapes, classes
 * [...] / [^...], ., groups, * + ? {m,n}, comments #. Returns the rule named root. */
int32_t gr_gbnf(gr_builder *b, const char *src, size_t n, const char *root);

/* JSON Schema (text) and JSON object front end. flexible_ws: [ \t\n\r]{0,CN_GRAMMAR_MAX_WS}
 * between tokens instead of nothing. Returns the root rule. */
int32_t gr_json_schema(gr_builder *b, const char *schema, size_t n, bool flexible_ws);
int32_t gr_json_object(gr_builder *b, bool flexible_ws);
/* Several schemas' values (as rule calls, without the document's surrounding whitespace)
 * into one builder, sharing the string / number / value rules: values[i] is schemas[i]
 * (lens[i] bytes); paths[i] (or NULL) starts the JSON pointer of its error messages
 * ("/tools/2/function/parameters"). 0, or -1 with the error in b. */
int gr_json_schema_values(gr_builder *b, const char *const *schemas, const size_t *lens, const char *const *paths,
                          size_t n, bool flexible_ws, int32_t *values);

/* A reply that may call tools (tools.c): format a cn_tool_format, tools_json the OpenAI
 * tools array (n bytes), choice 0 auto, 1 required, 2 the function called name;
 * parallel: more than one call. Returns the root rule. */
int32_t gr_tools(gr_builder *b, int format, const char *tools_json, size_t n, int choice, const char *name,
                 bool parallel);

/* One of the strings, exactly. */
int32_t gr_choice(gr_builder *b, const char *const *choices, size_t n);

/* ---- compile ---- */

typedef struct gr_grammar gr_grammar;

typedef struct {
    size_t max_states;     /* total DFA + NFA states; 0: 1,000,000 */
    double max_compile_ms; /* 0: 10,000 */
} gr_limits;

/* Compiles every rule reachable from root. Errors: INVALID_ARG (an undefined rule named,
 * left recursion named by rule, a rule that can never finish: "rule 'x' matches no
 * text"), the budget ("compile budget: ..."; the builder's deadline, when it has one, ends
 * it too), NO_MEMORY. The builder may be freed after. */
cn_status gr_compile(gr_builder *b, int32_t root, const gr_limits *lim, gr_grammar **out, cn_error *err);
void gr_grammar_free(gr_grammar *g);

/* ---- the byte-level matcher (no vocabulary) ----
 * A set of live stacks. Used by the token matcher and directly by tests. */

typedef struct gr_state gr_state;
gr_state *gr_state_new(const gr_grammar *g); /* at the start; NULL: out of memory */
void gr_state_free(gr_state *s);
/* Feeds bytes; false and no change if they cannot continue any sentence. */
bool gr_state_feed(gr_state *s, const uint8_t *bytes, size_t n);
bool gr_state_can_end(const gr_state *s);
/* Whether a whole text is a sentence of g (a fresh state fed with it). */
bool gr_matches(const gr_grammar *g, const char *text, size_t n);

/* ---- the vocabulary ----
 * The tokens' bytes, sorted into a trie, plus the caches shared by every grammar compiled
 * against the same vocabulary. Refcounted; thread-safe. */

typedef struct gr_vocab gr_vocab;
/* bytes[i] / len[i]: token i's text as it enters the output (NULL or len 0: never allowed,
 * e.g. control tokens); eog: the n_eog end-of-generation ids, allowed when complete. */
cn_status gr_vocab_new(int32_t n_vocab, const char *const *bytes, const size_t *len, const int32_t *eog, size_t n_eog,
                       gr_vocab **out, cn_error *err);
/* From a tokenizer (pieces as cn_token_to_piece renders them without specials). */
cn_status gr_vocab_from_tokenizer(const cn_tokenizer *t, gr_vocab **out, cn_error *err);
gr_vocab *gr_vocab_ref(gr_vocab *v);
void gr_vocab_free(gr_vocab *v);

/* ---- the token matcher ---- */

typedef struct gr_matcher gr_matcher;
/* g and v must outlive the matcher. */
cn_status gr_matcher_new(const gr_grammar *g, gr_vocab *v, gr_matcher **out, cn_error *err);
void gr_matcher_free(gr_matcher *m);
/* mask: (n_vocab + 31) / 32 words, fully written. */
cn_status gr_matcher_mask(gr_matcher *m, uint32_t *mask, cn_error *err);
bool gr_matcher_accept(gr_matcher *m, int32_t token);
bool gr_matcher_accept_bytes(gr_matcher *m, const uint8_t *s, size_t n);
bool gr_matcher_is_complete(const gr_matcher *m);
bool gr_matcher_is_done(const gr_matcher *m);
cn_status gr_matcher_rollback(gr_matcher *m, size_t n, cn_error *err);
/* Tests: the walk automaton's state budget (default GR_WALK_STATES in matcher.c), so
 * that a small one makes walks keep only their path again and again. */
void gr_matcher_set_walk_states(gr_matcher *m, uint32_t n);
size_t gr_matcher_n_steps(const gr_matcher *m);
void gr_matcher_reset(gr_matcher *m);

#endif
