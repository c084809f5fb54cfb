/* schema_bytes.c — MaskBench files checked at the byte level against the JSON Schema
 * front end: each file's schema compiled (flexible whitespace, as the instances are
 * serialized with ", " and ": "), each test instance serialized exactly as MaskBench's
 * runner does (Python's json.dumps(data, indent=None, ensure_ascii=False)) and matched
 * with gr_matches. A file passes when it compiles, every valid instance matches and
 * every invalid one does not. A wrong acceptance (an invalid instance matched) is the
 * error that counts: the front end promises it never happens.
 *
 *   build/tools/schema_bytes [-v] [--dump] FILE|DIR...
 *
 * prints one line per file that does not pass (-v: every file), then a summary. --dump
 * prints each serialized instance instead (to compare with Python's own json.dumps).
 *
 * The serializer re-reads the instance's raw text (not jansson's values: integers of
 * any size, and the exact float repr): strings re-escaped as Python does, integers as
 * written ("-0" as "0"), other numbers as Python's repr of the double. Duplicate keys
 * (which Python collapses) are not collapsed.
 *
 * Included by tests/unit/test_json_schema.c with SCHEMA_BYTES_NO_MAIN. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "grammar/grammar.h"
#include "grammar/json_schema_impl.h"

typedef struct {
    char *p;
    size_t n, cap;
} sb_buf;

static int sb_add(sb_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) return -1;
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static size_t sb_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static int sb_hex4(const char *s, size_t n, size_t i, unsigned *out) {
    if (i + 4 > n) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[i + k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static void sb_utf8(sb_buf *o, unsigned c) {
    char u[4];
    size_t n = 0;
    if (c < 0x80) u[n++] = (char)c;
    else if (c < 0x800) {
        u[n++] = (char)(0xC0 | (c >> 6));
        u[n++] = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        u[n++] = (char)(0xE0 | (c >> 12));
        u[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[n++] = (char)(0x80 | (c & 0x3F));
    } else {
        u[n++] = (char)(0xF0 | (c >> 18));
        u[n++] = (char)(0x80 | ((c >> 12) & 0x3F));
        u[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[n++] = (char)(0x80 | (c & 0x3F));
    }
    sb_add(o, u, n);
}

/* A JSON string at s[i] (the quote) decoded and re-spelled into o; returns the index
 * after it, or 0 on malformed input. */
static size_t sb_string(const char *s, size_t n, size_t i, sb_buf *o) {
    sb_buf raw = {0};
    i++;
    while (i < n && s[i] != '"') {
        if (s[i] != '\\') {
            sb_add(&raw, s + i, 1);
            i++;
            continue;
        }
        if (i + 1 >= n) goto bad;
        char e = s[i + 1];
        i += 2;
        const char *m = strchr("\"\\/bfnrt", e);
        if (m && e) {
            static const char dec[] = "\"\\/\b\f\n\r\t";
            sb_add(&raw, &dec[m - "\"\\/bfnrt"], 1);
            continue;
        }
        if (e != 'u') goto bad;
        unsigned c;
        if (sb_hex4(s, n, i, &c) < 0) goto bad;
        i += 4;
        if (c >= 0xD800 && c < 0xDC00 && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
            unsigned d;
            if (sb_hex4(s, n, i + 2, &d) == 0 && d >= 0xDC00 && d < 0xE000) {
                c = 0x10000 + ((c - 0xD800) << 10) + (d - 0xDC00);
                i += 6;
            }
        }
        sb_utf8(&raw, c); /* a lone surrogate becomes its (invalid) 3-byte form, as Python would fail on */
    }
    if (i >= n) goto bad;
    char *sp = NULL;
    size_t len = 0, cap = 0;
    if (js_spell_string(raw.p ? raw.p : "", raw.n, &sp, &len, &cap) == 0) sb_add(o, sp, len);
    free(sp);
    free(raw.p);
    return i + 1;
bad:
    free(raw.p);
    return 0;
}

/* The value at s[i] re-serialized into o (o NULL: only skipped); returns the index after
 * it, 0 on malformed input. */
static size_t sb_value(const char *s, size_t n, size_t i, sb_buf *o, int depth) {
    sb_buf sink = {0};
    sb_buf *out = o ? o : &sink;
    size_t r = 0;
    if (depth > 512) return 0;
    i = sb_ws(s, n, i);
    if (i >= n) return 0;
    char c = s[i];
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        sb_add(out, &c, 1);
        i = sb_ws(s, n, i + 1);
        bool first = true;
        while (i < n && s[i] != close) {
            if (!first) {
                if (s[i] != ',') goto done;
                i = sb_ws(s, n, i + 1);
                sb_add(out, ", ", 2);
            }
            first = false;
            if (c == '{') {
                if (i >= n || s[i] != '"') goto done;
                i = sb_string(s, n, i, out);
                if (!i) goto done;
                i = sb_ws(s, n, i);
                if (i >= n || s[i] != ':') goto done;
                sb_add(out, ": ", 2);
                i++;
            }
            i = sb_value(s, n, i, out, depth + 1);
            if (!i) goto done;
            i = sb_ws(s, n, i);
        }
        if (i >= n) goto done;
        sb_add(out, &close, 1);
        r = i + 1;
    } else if (c == '"') {
        r = sb_string(s, n, i, out);
    } else if (c == 't' || c == 'f' || c == 'n') {
        const char *w = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t k = strlen(w);
        if (i + k <= n && memcmp(s + i, w, k) == 0) {
            sb_add(out, w, k);
            r = i + k;
        }
    } else {
        size_t j = i;
        bool is_float = false;
        while (j < n && strchr("+-0123456789.eE", s[j])) {
            is_float |= s[j] == '.' || s[j] == 'e' || s[j] == 'E';
            j++;
        }
        if (j == i) goto done;
        if (!is_float) {
            if (j - i == 2 && s[i] == '-' && s[i + 1] == '0') sb_add(out, "0", 1);
            else sb_add(out, s + i, j - i);
        } else {
            char tmp[512], f[64];
            size_t k = j - i < sizeof tmp - 1 ? j - i : sizeof tmp - 1;
            memcpy(tmp, s + i, k);
            tmp[k] = 0;
            js_py_float(strtod(tmp, NULL), f, sizeof f);
            sb_add(out, f, strlen(f));
        }
        r = j;
    }
done:
    free(sink.p);
    return r;
}

typedef struct {
    bool valid;
    char *text; /* serialized */
    size_t len;
} sb_test;

typedef struct {
    const char *schema; /* raw span inside the file text */
    size_t schema_len;
    sb_test *tests;
    size_t n_tests;
} sb_file;

static void sb_file_free(sb_file *f) {
    for (size_t i = 0; i < f->n_tests; i++) free(f->tests[i].text);
    free(f->tests);
}

/* Reads a MaskBench file's text: 0, or -1 when it is not one. */
static int sb_parse(const char *s, size_t n, sb_file *f) {
    *f = (sb_file){0};
    size_t i = sb_ws(s, n, 0);
    if (i >= n || s[i] != '{') return -1;
    i = sb_ws(s, n, i + 1);
    while (i < n && s[i] != '}') {
        if (s[i] == ',') i = sb_ws(s, n, i + 1);
        sb_buf key = {0};
        i = sb_string(s, n, i, &key);
        if (!i) return -1;
        i = sb_ws(s, n, i);
        if (i >= n || s[i] != ':') {
            free(key.p);
            return -1;
        }
        i = sb_ws(s, n, i + 1);
        size_t start = i;
        if (key.p && strcmp(key.p, "\"schema\"") == 0) {
            i = sb_value(s, n, i, NULL, 0);
            f->schema = s + start;
            f->schema_len = i - start;
        } else if (key.p && strcmp(key.p, "\"tests\"") == 0 && s[i] == '[') {
            i = sb_ws(s, n, i + 1);
            while (i && i < n && s[i] != ']') {
                if (s[i] == ',') i = sb_ws(s, n, i + 1);
                if (s[i] != '{') return -1;
                sb_test t = {0};
                i = sb_ws(s, n, i + 1);
                while (i && i < n && s[i] != '}') {
                    if (s[i] == ',') i = sb_ws(s, n, i + 1);
                    sb_buf k2 = {0};
                    i = sb_string(s, n, i, &k2);
                    if (!i) return -1;
                    i = sb_ws(s, n, i);
                    i = sb_ws(s, n, i + 1); /* the ':' */
                    if (k2.p && strcmp(k2.p, "\"data\"") == 0) {
                        sb_buf d = {0};
                        i = sb_value(s, n, i, &d, 0);
                        t.text = d.p ? d.p : strdup("");
                        t.len = d.n;
                    } else {
                        if (k2.p && strcmp(k2.p, "\"valid\"") == 0) t.valid = s[i] == 't';
                        i = sb_value(s, n, i, NULL, 0);
                    }
                    free(k2.p);
                    if (i) i = sb_ws(s, n, i);
                }
                if (!i || i >= n) {
                    free(t.text);
                    return -1;
                }
                i = sb_ws(s, n, i + 1);
                sb_test *q = realloc(f->tests, (f->n_tests + 1) * sizeof *q);
                if (!q) return -1;
                f->tests = q;
                f->tests[f->n_tests++] = t;
            }
            if (!i || i >= n) return -1;
            i++;
        } else {
            i = sb_value(s, n, i, NULL, 0);
        }
        free(key.p);
        if (!i) return -1;
        i = sb_ws(s, n, i);
    }
    return f->schema ? 0 : -1;
}

typedef struct {
    int n_files, n_passed, n_compile_err, n_wrong_accept_files, n_wrong_reject_files;
    int n_wrong_accept, n_wrong_reject;
} sb_stats;

/* One file: 1 passed, 0 failed; *msg (static buffer) says why. */
static int sb_check_text(const char *text, size_t n, sb_stats *st, char *msg, size_t cap) {
    sb_file f;
    st->n_files++;
    if (sb_parse(text, n, &f) < 0) {
        snprintf(msg, cap, "not a MaskBench file");
        sb_file_free(&f);
        st->n_compile_err++;
        return 0;
    }
    gr_builder *b = gr_builder_new();
    int32_t root = b ? gr_json_schema(b, f.schema, f.schema_len, true) : -1;
    gr_grammar *g = NULL;
    cn_error err = {0};
    if (root < 0) {
        snprintf(msg, cap, "compile: %s", b ? gr_builder_error(b)->msg : "no memory");
    } else if (gr_compile(b, root, NULL, &g, &err) != CN_STATUS_OK) {
        snprintf(msg, cap, "compile: %s", err.msg);
    }
    gr_builder_free(b);
    if (!g) {
        st->n_compile_err++;
        sb_file_free(&f);
        return 0;
    }
    int wa = 0, wr = 0;
    msg[0] = 0;
    for (size_t i = 0; i < f.n_tests; i++) {
        bool m = gr_matches(g, f.tests[i].text, f.tests[i].len);
        if (m && !f.tests[i].valid) {
            if (!wa) snprintf(msg, cap, "WRONG ACCEPTANCE of test %zu: %.200s", i, f.tests[i].text);
            wa++;
        } else if (!m && f.tests[i].valid) {
            if (!wa && !wr) snprintf(msg, cap, "wrong rejection of test %zu: %.200s", i, f.tests[i].text);
            wr++;
        }
    }
    gr_grammar_free(g);
    sb_file_free(&f);
    st->n_wrong_accept += wa;
    st->n_wrong_reject += wr;
    st->n_wrong_accept_files += wa > 0;
    st->n_wrong_reject_files += wr > 0 && !wa;
    st->n_passed += !wa && !wr;
    return !wa && !wr;
}

static char *sb_read(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *t = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (t && fread(t, 1, (size_t)len, fp) != (size_t)len) {
        free(t);
        t = NULL;
    }
    fclose(fp);
    if (t) {
        t[len] = 0;
        *n = (size_t)len;
    }
    return t;
}

static int sb_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The .json files of dir, sorted; *n_out of them (malloc'd names, full paths). */
static char **sb_list(const char *dir, size_t *n_out) {
    DIR *d = opendir(dir);
    *n_out = 0;
    if (!d) return NULL;
    char **v = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".json") != 0) continue;
        char **q = realloc(v, (n + 1) * sizeof *q);
        if (!q) break;
        v = q;
        size_t pl = strlen(dir) + l + 2;
        v[n] = malloc(pl);
        if (!v[n]) break;
        snprintf(v[n++], pl, "%s/%s", dir, de->d_name);
    }
    closedir(d);
    qsort(v, n, sizeof *v, sb_cmp);
    *n_out = n;
    return v;
}

#ifndef SCHEMA_BYTES_NO_MAIN
static void one(const char *path, bool verbose, bool dump, sb_stats *st) {
    size_t n = 0;
    char *t = sb_read(path, &n);
    if (!t) {
        fprintf(stderr, "%s: cannot read\n", path);
        return;
    }
    if (dump) {
        sb_file f;
        if (sb_parse(t, n, &f) == 0)
            for (size_t i = 0; i < f.n_tests; i++)
                printf("%s\t%zu\t%s\n", strrchr(path, '/') ? strrchr(path, '/') + 1 : path, i, f.tests[i].text);
        sb_file_free(&f);
        free(t);
        return;
    }
    char msg[512];
    int ok = sb_check_text(t, n, st, msg, sizeof msg);
    if (verbose || !ok) printf("%s\t%s\t%s\n", path, ok ? "pass" : "FAIL", ok ? "" : msg);
    free(t);
}

int main(int argc, char **argv) {
    bool verbose = false, dump = false;
    sb_stats st = {0};
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-v") == 0) {
            verbose = true;
            continue;
        }
        if (strcmp(argv[a], "--dump") == 0) {
            dump = true;
            continue;
        }
        struct stat sst;
        if (stat(argv[a], &sst) == 0 && S_ISDIR(sst.st_mode)) {
            size_t n = 0;
            char **v = sb_list(argv[a], &n);
            for (size_t i = 0; i < n; i++) {
                one(v[i], verbose, dump, &st);
                free(v[i]);
            }
            free(v);
        } else one(argv[a], verbose, dump, &st);
    }
    if (!dump)
        printf("files %d passed %d compile_errors %d wrong_acceptance_files %d (instances %d) "
               "wrong_rejection_files %d (instances %d)\n",
               st.n_files, st.n_passed, st.n_compile_err, st.n_wrong_accept_files, st.n_wrong_accept,
               st.n_wrong_reject_files, st.n_wrong_reject);
    return 0;
}
#endif
