/* grammar.c — the public face of the layer (cn_grammar, cn_grammar_matcher in cinder.h):
 * picks the front end, compiles, and binds the grammar to the tokenizer's vocabulary.
 * The vocabulary (token bytes + trie, ~100 ms to build for 150k tokens) is built once per
 * tokenizer: a small memo maps a tokenizer to its gr_vocab, checked by a fingerprint
 * (vocabulary size and the pieces of a spread of ids), so a tokenizer freed and another
 * loaded at the same address is not mistaken for it unless their vocabularies agree. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "grammar/grammar_impl.h"

struct cn_grammar {
    int refs;
    gr_grammar *g;
    gr_vocab *v;
};

struct cn_grammar_matcher {
    cn_grammar *g;
    gr_matcher *m;
};

cn_grammar_params cn_grammar_default_params(void) { return (cn_grammar_params){.kind = CN_GRAMMAR_JSON_SCHEMA}; }

/* ---- the tokenizer memo ---- */

typedef struct {
    const cn_tokenizer *tok;
    uint64_t fp;
    gr_vocab *v; /* one reference held by the memo */
} memo_ent;

static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static memo_ent memo[8];
static size_t n_memo;

static uint64_t fingerprint(const cn_tokenizer *t) {
    int32_t n = cn_tokenizer_n_vocab(t);
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uint32_t)n;
    char buf[256];
    for (int k = 0; k < 257 && n > 0; k++) {
        int32_t id = (int32_t)((int64_t)k * (n - 1) / 256);
        size_t L = cn_token_to_piece(t, id, true, buf, sizeof buf);
        if (L > sizeof buf) L = sizeof buf;
        for (size_t i = 0; i < L; i++) h = (h ^ (uint8_t)buf[i]) * 1099511628211ull;
        h = (h ^ (0x1000u + L + (cn_tokenizer_is_eog(t, id) ? 0x100000u : 0))) * 1099511628211ull;
    }
    return h;
}

static cn_status vocab_for(const cn_tokenizer *t, gr_vocab **out, cn_error *err) {
    uint64_t fp = fingerprint(t);
    pthread_mutex_lock(&memo_mu);
    for (size_t i = 0; i < n_memo; i++)
        if (memo[i].tok == t && memo[i].fp == fp) {
            *out = gr_vocab_ref(memo[i].v);
            pthread_mutex_unlock(&memo_mu);
            return CN_STATUS_OK;
        }
    pthread_mutex_unlock(&memo_mu);
    gr_vocab *v;
    cn_status st = gr_vocab_from_tokenizer(t, &v, err);
    if (st != CN_STATUS_OK) return st;
    pthread_mutex_lock(&memo_mu);
    gr_vocab *drop = NULL;
    if (n_memo == CN_ARRAY_LEN(memo)) {
        drop = memo[0].v;
        memmove(memo, memo + 1, (n_memo - 1) * sizeof *memo);
        n_memo--;
    }
    memo[n_memo++] = (memo_ent){t, fp, gr_vocab_ref(v)};
    pthread_mutex_unlock(&memo_mu);
    gr_vocab_free(drop);
    *out = v;
    return CN_STATUS_OK;
}

/* ---- compile ---- */

static int32_t build(gr_builder *b, const cn_grammar_params *p, cn_error *err) {
    size_t n = p->source && !p->source_len ? strlen(p->source) : p->source_len;
    switch (p->kind) {
    case CN_GRAMMAR_JSON_SCHEMA:
        if (!p->source)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "source", "a JSON Schema grammar needs a schema"), -1;
        return gr_json_schema(b, p->source, n, p->flexible_whitespace);
    case CN_GRAMMAR_JSON_OBJECT: return gr_json_object(b, p->flexible_whitespace);
    case CN_GRAMMAR_GBNF:
        if (!p->source) return cn_err_param(err, CN_STATUS_INVALID_ARG, "source", "a GBNF grammar needs its text"), -1;
        return gr_gbnf(b, p->source, n, "root");
    case CN_GRAMMAR_REGEX: {
        if (!p->source)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "source", "a regex grammar needs a pattern"), -1;
        int32_t root = gr_rule(b, "root");
        return gr_rule_define(b, root, gr_regex_expr(b, p->source, n));
    }
    case CN_GRAMMAR_CHOICE:
        if (!p->n_choices || !p->choices)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "choices", "a choice grammar needs at least one choice"),
                   -1;
        for (size_t i = 0; i < p->n_choices; i++)
            if (!p->choices[i]) return cn_err_param(err, CN_STATUS_INVALID_ARG, "choices", "choice %zu is NULL", i), -1;
        return gr_choice(b, p->choices, p->n_choices);
    case CN_GRAMMAR_TOOLS:
        if (!p->source)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "source", "a tools grammar needs the tools"), -1;
        if (p->tool_choice < CN_TOOL_CHOICE_AUTO || p->tool_choice > CN_TOOL_CHOICE_NAMED)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "tool_choice", "unknown tool_choice %d",
                                (int)p->tool_choice),
                   -1;
        if (p->tool_choice == CN_TOOL_CHOICE_NAMED && !p->tool_name)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "tool_name", "a named tool_choice needs the name"), -1;
        if (!cn_tool_format_name((cn_tool_format)p->tool_format) || p->tool_format == CN_TOOL_FORMAT_NONE)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "tool_format", "unknown tool format %d", p->tool_format),
                   -1;
        return gr_tools(b, p->tool_format, p->source, n, (int)p->tool_choice, p->tool_name, p->parallel_tool_calls);
    }
    cn_err_param(err, CN_STATUS_INVALID_ARG, "kind", "unknown grammar kind %d", (int)p->kind);
    return -1;
}

cn_status cn_grammar_compile(const cn_tokenizer *tok, const cn_grammar_params *p, cn_grammar **out, cn_error *err) {
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_grammar_compile: out is NULL");
    *out = NULL;
    if (!tok || !p) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_grammar_compile: tokenizer and params are required");
    if (p->max_compile_ms < 0 || p->max_compile_ms != p->max_compile_ms)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "max_compile_ms", "max_compile_ms must be >= 0");
    if (err) cn_err_clear(err);
    gr_builder *b = gr_builder_new();
    if (!b) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
    /* one budget for the front end and the automata together (gr_compile keeps to it) */
    gr_builder_set_deadline(b, cn_time_ms() + (p->max_compile_ms > 0 ? p->max_compile_ms : 10000));
    int32_t root = build(b, p, err);
    cn_status st;
    if (root < 0) {
        if (err && err->status != CN_STATUS_OK) {
            st = err->status;
        } else {
            const cn_error *be = gr_builder_error(b);
            st = be->status != CN_STATUS_OK ? be->status : CN_STATUS_INVALID_ARG;
            cn_err(err, st, "%s", be->status != CN_STATUS_OK ? be->msg : "the grammar could not be built");
        }
        gr_builder_free(b);
        return st;
    }
    gr_limits lim = {.max_states = p->max_states, .max_compile_ms = p->max_compile_ms};
    gr_grammar *g;
    st = gr_compile(b, root, &lim, &g, err);
    gr_builder_free(b);
    if (st != CN_STATUS_OK) return st;
    gr_vocab *v;
    st = vocab_for(tok, &v, err);
    if (st != CN_STATUS_OK) {
        gr_grammar_free(g);
        return st;
    }
    cn_grammar *cg = calloc(1, sizeof *cg);
    if (!cg) {
        gr_grammar_free(g);
        gr_vocab_free(v);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
    }
    cg->refs = 1;
    cg->g = g;
    cg->v = v;
    *out = cg;
    return CN_STATUS_OK;
}

cn_grammar *cn_grammar_ref(cn_grammar *g) {
    if (g) __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void cn_grammar_free(cn_grammar *g) {
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    gr_grammar_free(g->g);
    gr_vocab_free(g->v);
    free(g);
}

int32_t cn_grammar_n_vocab(const cn_grammar *g) { return g ? g->v->n_vocab : 0; }

bool cn_grammar_check_text(const cn_grammar *g, const char *text, size_t n) {
    return g && (text || !n) && gr_matches(g->g, text ? text : "", n);
}

/* ---- matchers ---- */

cn_status cn_grammar_matcher_new(cn_grammar *g, cn_grammar_matcher **out, cn_error *err) {
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_grammar_matcher_new: out is NULL");
    *out = NULL;
    if (!g) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_grammar_matcher_new: no grammar");
    cn_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating a grammar matcher");
    cn_status st = gr_matcher_new(g->g, g->v, &m->m, err);
    if (st != CN_STATUS_OK) {
        free(m);
        return st;
    }
    m->g = cn_grammar_ref(g);
    *out = m;
    return CN_STATUS_OK;
}

void cn_grammar_matcher_free(cn_grammar_matcher *m) {
    if (!m) return;
    gr_matcher_free(m->m);
    cn_grammar_free(m->g);
    free(m);
}

cn_status cn_grammar_matcher_mask(cn_grammar_matcher *m, uint32_t *mask, size_t n_words, cn_error *err) {
    if (!m || !mask)
        return cn_err(err, CN_STATUS_INVALID_ARG, "cn_grammar_matcher_mask: matcher and mask are required");
    size_t need = ((size_t)m->g->v->n_vocab + 31) / 32;
    if (n_words < need)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_words", "the mask needs %zu words, %zu given", need,
                            n_words);
    return gr_matcher_mask(m->m, mask, err);
}

bool cn_grammar_matcher_accept(cn_grammar_matcher *m, int32_t token) { return m && gr_matcher_accept(m->m, token); }

bool cn_grammar_matcher_accept_text(cn_grammar_matcher *m, const char *s, size_t n) {
    return m && (s || !n) && gr_matcher_accept_bytes(m->m, (const uint8_t *)(s ? s : ""), n);
}

bool cn_grammar_matcher_is_complete(const cn_grammar_matcher *m) { return m && gr_matcher_is_complete(m->m); }
bool cn_grammar_matcher_is_done(const cn_grammar_matcher *m) { return m && gr_matcher_is_done(m->m); }

cn_status cn_grammar_matcher_rollback(cn_grammar_matcher *m, size_t n, cn_error *err) {
    if (!m) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_grammar_matcher_rollback: no matcher");
    return gr_matcher_rollback(m->m, n, err);
}

size_t cn_grammar_matcher_n_steps(const cn_grammar_matcher *m) { return m ? gr_matcher_n_steps(m->m) : 0; }

void cn_grammar_matcher_reset(cn_grammar_matcher *m) {
    if (m) gr_matcher_reset(m->m);
}
