/* json_schema_impl.h — what the two halves of the JSON Schema front end share: the
 * compile context (json_schema.c walks the schema, resolves references and merges
 * allOf), and the lexical builders (json_schema_lex.c: whitespace, the shared string /
 * number / value rules, constrained strings, exact decimal ranges, formats, and JSON
 * literals for enum and const). Only those two files include it. */
#ifndef CN_JSON_SCHEMA_IMPL_H
#define CN_JSON_SCHEMA_IMPL_H

#include <jansson.h>

#include "grammar/grammar.h"

#define JS_MAX_DEPTH 96   /* nesting of schemas inside one definition */
#define JS_MAX_PATH 512   /* bytes of JSON pointer kept for messages */
#define JS_MAX_DIGITS 400 /* digits of a numeric bound (1e308 has 309) */

typedef struct js_strc js_strc; /* a cached constrained-string rule */

typedef struct {
    gr_builder *b;
    bool flex; /* flexible whitespace */
    /* the shared rules, -1 until first used; always built the same way so that the
     * matcher's cross-grammar cache recognizes them */
    int32_t r_string, r_number, r_integer, r_bool, r_null, r_value, r_object, r_array;
    int32_t r_krest, r_kna, r_kesc, r_ws; /* the tails of an unlisted property name */
    js_strc *strc;                        /* length-constrained string rules made so far */
    size_t n_strc, cap_strc;
    char path[JS_MAX_PATH]; /* JSON pointer of the schema being compiled */
    size_t n_path;
} js_lex;

/* [ \t\n\r]{0,CN_GRAMMAR_MAX_WS} with flexible whitespace, else "". */
int32_t js_ws(js_lex *x);
/* ws "," ws */
int32_t js_sep(js_lex *x);
int32_t js_lit(js_lex *x, const char *s);

/* The shared rules (each a gr_ref to its rule). */
int32_t js_string(js_lex *x);
int32_t js_number(js_lex *x);
int32_t js_integer(js_lex *x);
int32_t js_boolean(js_lex *x);
int32_t js_null(js_lex *x);
int32_t js_value(js_lex *x);
int32_t js_any_object(js_lex *x);
int32_t js_any_array(js_lex *x);

/* A JSON string of min..max characters (code points; max GR_INF: none), its own rule. */
int32_t js_string_len(js_lex *x, uint32_t min, uint32_t max);
/* A JSON string whose content meets every constraint given, its own rule: min..max
 * characters, the ECMAScript pattern re (unanchored; NULL: none), the format fmt (NULL,
 * or one js_format_known does not know: none). */
int32_t js_string_constrained(js_lex *x, uint32_t min, uint32_t max, const char *re, size_t n_re, const char *fmt);
bool js_format_known(const char *fmt);
/* The content (between the quotes) of a JSON string other than every name in
 * names[0..n) (UTF-8), in the canonical spelling (js_lit_string's escapes). */
int32_t js_key_not_in(js_lex *x, const char *const *names, const size_t *lens, size_t n);
/* The same kept to patterns re[0..n_pat) (ECMAScript, unanchored, matched against the
 * name as JSON spells it): want[i] 1 must match, 0 must not, 2 either. No rule calls. */
int32_t js_key_content(js_lex *x, const char *const *names, const size_t *lens, size_t n, const char *const *re,
                       const size_t *n_re, const uint8_t *want, size_t n_pat);

/* A decimal bound: the number's sign, integer digits (no leading zeros; "0" for zero)
 * and fraction digits (no trailing zeros; "" for none). */
typedef struct {
    bool neg;
    char *ip;
    char *fp;
} js_dec;

/* From a JSON number: 0, or -1 with an error in x->b (out of memory, too many digits). */
int js_dec_from_json(js_lex *x, const json_t *v, js_dec *out);
void js_dec_free(js_dec *d);
int js_dec_cmp(const js_dec *a, const js_dec *b);
/* Integers (integer_only) or JSON numbers without an exponent, in the range (lo / hi
 * NULL: unbounded on that side). An empty range gives gr_nothing. */
int32_t js_num_range(js_lex *x, const js_dec *lo, bool lo_excl, const js_dec *hi, bool hi_excl, bool integer_only);

/* Exactly the JSON value v, as Python's json.dumps would spell it (with flexible
 * whitespace wherever JSON allows it); numbers also in their other spelling (1 and 1.0). */
int32_t js_json_literal(js_lex *x, const json_t *v);
/* The JSON spelling of a string (with quotes), as Python's json.dumps(ensure_ascii=False)
 * writes it: \" \\ \n \r \t \b \f, other control characters as \u00xx. Appends to a
 * malloc'd buffer; -1 on no memory. */
int js_spell_string(const char *s, size_t n, char **buf, size_t *len, size_t *cap);
/* Python's repr of a double (what json.dumps writes), into out (>= 32 bytes). */
void js_py_float(double v, char *out, size_t cap);

void js_lex_free(js_lex *x);

#endif
