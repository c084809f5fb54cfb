/* test_tokenizer_util.c — see test_tokenizer_util.h. */
#include "test_tokenizer_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tt_path(char *out, size_t cap, const char *file) {
    const char *root = getenv("CINDER_TESTDATA");
    snprintf(out, cap, "%s/tokenizer/%s", root && *root ? root : "../shared/testdata", file);
}

cn_tokenizer *tt_load_vocab(const char *name) {
    char path[512], file[128];
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf", name);
    tt_path(path, sizeof path, file);
    cn_gguf *g = NULL;
    cn_error e;
    cn_status st = cn_gguf_open(path, &g, &e);
    cr_assert_eq(st, CN_STATUS_OK, "open %s: %s", path, e.msg);
    cn_tokenizer *t = NULL;
    st = cn_tokenizer_load(g, &t, &e);
    cn_gguf_close(g);
    cr_assert_eq(st, CN_STATUS_OK, "load %s: %s", name, e.msg);
    return t;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[sz] = 0;
    *n = (size_t)sz;
    return b;
}

bool tt_read_cases(const char *name, tt_cases *c) {
    memset(c, 0, sizeof *c);
    char path[512], file[128];
    size_t n_inp, n_out;
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf.inp", name);
    tt_path(path, sizeof path, file);
    char *inp = slurp(path, &n_inp);
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf.out", name);
    tt_path(path, sizeof path, file);
    char *out = slurp(path, &n_out);
    if (!inp || !out) {
        free(inp);
        free(out);
        return false;
    }
    /* Texts: split on the full separator; the piece after the last one is not a case. */
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t cap = 64;
    c->text = malloc(cap * sizeof *c->text);
    c->len = malloc(cap * sizeof *c->len);
    c->ids = calloc(cap, sizeof *c->ids);
    c->n_ids = calloc(cap, sizeof *c->n_ids);
    char *p = inp, *end = inp + n_inp;
    while (p < end) {
        char *s = memmem(p, (size_t)(end - p), sep, sizeof sep - 1);
        if (!s || c->n == (int)cap) break;
        *s = 0;
        c->text[c->n] = p;
        c->len[c->n] = (size_t)(s - p);
        c->n++;
        p = s + sizeof sep - 1;
    }
    c->buf_inp = inp;
    /* Ids: one line per case. */
    int line = 0;
    char *q = out;
    while (*q && line < c->n) {
        char *nl = strchr(q, '\n');
        if (nl) *nl = 0;
        size_t k = 0, kcap = 16;
        int32_t *ids = malloc(kcap * sizeof *ids);
        for (char *tok = strtok(q, " \r"); tok; tok = strtok(NULL, " \r")) {
            if (k == kcap) ids = realloc(ids, (kcap *= 2) * sizeof *ids);
            ids[k++] = (int32_t)strtol(tok, NULL, 10);
        }
        c->ids[line] = ids;
        c->n_ids[line] = k;
        line++;
        if (!nl) break;
        q = nl + 1;
    }
    free(out);
    return line == c->n;
}

void tt_free_cases(tt_cases *c) {
    for (int i = 0; i < c->n; i++) free(c->ids[i]);
    free(c->text);
    free(c->len);
    free(c->ids);
    free(c->n_ids);
    free(c->buf_inp);
    memset(c, 0, sizeof *c);
}

int32_t *tt_tokenize(const cn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                     size_t *n) {
    cn_error e;
    size_t need = 0;
    cn_status st = cn_tokenize(t, text, len, add_special, parse_special, NULL, 0, &need, &e);
    cr_assert_eq(st, CN_STATUS_OK, "tokenize: %s", e.msg);
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    st = cn_tokenize(t, text, len, add_special, parse_special, ids, need + 1, n, &e);
    cr_assert_eq(st, CN_STATUS_OK, "tokenize: %s", e.msg);
    cr_assert_eq(*n, need);
    return ids;
}

char *tt_detok_all(const cn_tokenizer *t, const int32_t *ids, size_t n, bool render_special, size_t *n_text) {
    cn_detok *d = NULL;
    cr_assert_eq(cn_detok_new(t, render_special, &d), CN_STATUS_OK);
    size_t cap = 64, k = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t m;
        cn_status st = i < n ? cn_detok_push(d, ids[i], &p, &m) : cn_detok_flush(d, &p, &m);
        cr_assert_eq(st, CN_STATUS_OK);
        while (k + m + 1 > cap) s = realloc(s, cap *= 2);
        memcpy(s + k, p, m);
        k += m;
    }
    s[k] = 0;
    cn_detok_free(d);
    *n_text = k;
    return s;
}

void tt_escape(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') k += (size_t)snprintf(out + k, cap - k, "\\n");
        else if (c == '\t') k += (size_t)snprintf(out + k, cap - k, "\\t");
        else if (c == '"' || c == '\\') k += (size_t)snprintf(out + k, cap - k, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) k += (size_t)snprintf(out + k, cap - k, "\\x%02x", c);
        else out[k++] = (char)c;
    }
    out[k] = 0;
}

cn_status tt_load_written(cn_gguf_writer *w, cn_tokenizer **t, cn_error *err) {
    uint8_t *blob = NULL;
    size_t n = 0;
    cr_assert_eq(cn_gguf_writer_write_mem(w, &blob, &n, err), CN_STATUS_OK);
    cn_gguf *g = NULL;
    cr_assert_eq(cn_gguf_parse(blob, n, &g, err), CN_STATUS_OK, "%s", err->msg);
    *t = NULL;
    cn_status st = cn_tokenizer_load(g, t, err);
    cn_gguf_close(g);
    free(blob);
    return st;
}
