/* bench/maskbench.c — MaskBench (guidance-ai/jsonschemabench, folder maskbench) for
 * cinder's grammar engine: for each file, the JSON Schema compiled (time to first mask,
 * TTFM: cn_grammar_compile plus the matcher), then each test instance serialized as
 * Python's json.dumps(data, indent=None, ensure_ascii=False) writes it, tokenized by the
 * model's tokenizer (no BOS, no special-token parsing) and fed token by token: the mask
 * (cn_grammar_matcher_mask) plus the commit (cn_grammar_matcher_accept) timed together;
 * a token outside the mask rejects the instance. The measurement is the one the peer's
 * script makes for llguidance (../shared/tools/maskbench_llg.py, after MaskBench's
 * runner.py), so bench/maskbench_compare.sh can set the two side by side; see
 * bench/README.md.
 *
 *     build/bench/maskbench -m MODEL [--json] [--limit N] PATH...
 *     build/bench/maskbench --instances PATH...
 *
 * PATH: MaskBench files or folders of them (their *.json, sorted by name). --json: one
 * JSON line per file with MaskBench's fields, then {"summary": {...}}; otherwise a line
 * per file and the summary as text. --instances: no model, no grammar; prints each
 * file's schema and then each test's instance as this program serializes them, one a
 * line (tests/py/test_maskbench.py holds that against Python's json.dumps).
 *
 * Only the public API (cinder.h) and jansson. Single thread. Not a test: it asserts
 * nothing about speed; that masks are right is the grammar tests' job, this reports how
 * often the engine agrees with MaskBench's labels. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "cinder.h"

#define MB_MAX_FILES 1000000 /* paths on one run */
#define MB_MAX_NESTING 10000 /* JSON depth the serializer follows (jansson's own is 2048) */

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* ---- a growing byte buffer; oom sticks, so a serializer checks once at the end ---- */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - 1 - b->n) {
        b->oom = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* ---- Python's json.dumps(x, indent=None, ensure_ascii=False) ----
 * Separators ", " and ": ", object keys in document order (jansson keeps insertion
 * order; a duplicated key keeps its first place and its last value, as a Python dict
 * does), strings with only ", \, and the C0 controls escaped (\n \r \t \b \f by name,
 * the rest \u00xx in lower case), floats as repr() writes them. An integer beyond int64
 * never gets here: jansson refuses the file on load ("too big integer"). */

/* The p-digit decimal next to e ("[-]D.DDDe(+|-)XX", p digits) by one unit in its last
 * place, up (dir 1) or down (-1), into out; false when that changes its digit count. */
static bool e_neighbor(const char *e, int dir, char out[40]) {
    strcpy(out, e);
    char *mark = strchr(out, 'e');
    if (!mark) return false;
    for (char *d = mark - 1; d >= out; d--) {
        if (*d == '.') continue;
        if (*d < '0' || *d > '9') return false; /* past the sign: a carry out of the digits */
        if (dir > 0 && *d < '9') return ++*d, true;
        if (dir < 0 && *d > '0') {
            --*d;
            return !(*d == '0' && (d == out || d[-1] == '-')); /* the leading digit went */
        }
        *d = dir > 0 ? '0' : '9';
    }
    return false;
}

/* repr(x) of a double: the shortest digits that read back as x (Python's
 * float_repr_style "short", David Gay's mode 0), in fixed notation when the decimal
 * exponent allows (1e-4 <= |x| < 1e16: "0.0001", "1000000000000000.0"), else "1e+16",
 * "1.5e-05". Shortest digits: the first precision at which printf's correctly rounded
 * %.*e, or failing that its neighbour one unit up or down, reads back as x. The
 * neighbour is needed at powers of two, where the gap below x is half the gap above and
 * the nearest p-digit decimal may fall outside it while the next one up is inside
 * (2^-1019 is 7.120236347223045e-307, but %.15e rounds to ...044e-307, which reads back
 * as another double). */
static void py_float_repr(double x, char out[40]) {
    if (isnan(x)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(x)) {
        strcpy(out, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (x == 0) {
        strcpy(out, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char e[40], nb[40];
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, x);
        if (strtod(e, NULL) == x) break;
        if ((e_neighbor(e, 1, nb) && strtod(nb, NULL) == x) || (e_neighbor(e, -1, nb) && strtod(nb, NULL) == x)) {
            strcpy(e, nb);
            break;
        }
    }
    /* e: [-]D[.DDD]e(+|-)XX */
    char digits[24];
    int nd = 0, exp10 = 0;
    const char *s = e;
    char *o = out;
    if (*s == '-') *o++ = *s++;
    for (; *s && *s != 'e'; s++)
        if (*s != '.' && nd < (int)sizeof digits - 1) digits[nd++] = *s;
    if (*s == 'e') exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1; /* x = 0.DIGITS * 10^decpt */
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else if (decpt >= nd) {
        memcpy(o, digits, (size_t)nd);
        o += nd;
        for (int i = nd; i < decpt; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    } else {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, (size_t)(nd - decpt));
        o += nd - decpt;
    }
    *o = '\0';
}

static void py_string(sbuf *b, const char *s, size_t n) {
    sb_add(b, "\"", 1);
    size_t run = 0; /* bytes [i - run, i) to copy as they are */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) {
            run++;
            continue;
        }
        sb_add(b, s + i - run, run);
        run = 0;
        sb_str(b, esc);
    }
    sb_add(b, s + n - run, run);
    sb_add(b, "\"", 1);
}

/* false: nested deeper than MB_MAX_NESTING (b is then incomplete). */
static bool py_dumps_at(sbuf *b, const json_t *x, int depth) {
    char num[40];
    if (depth > MB_MAX_NESTING) return false;
    switch (json_typeof(x)) {
    case JSON_OBJECT: {
        sb_add(b, "{", 1);
        bool first = true;
        for (void *it = json_object_iter((json_t *)x); it; it = json_object_iter_next((json_t *)x, it)) {
            if (!first) sb_add(b, ", ", 2);
            first = false;
            py_string(b, json_object_iter_key(it), json_object_iter_key_len(it));
            sb_add(b, ": ", 2);
            if (!py_dumps_at(b, json_object_iter_value(it), depth + 1)) return false;
        }
        sb_add(b, "}", 1);
        return true;
    }
    case JSON_ARRAY:
        sb_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(x); i++) {
            if (i) sb_add(b, ", ", 2);
            if (!py_dumps_at(b, json_array_get(x, i), depth + 1)) return false;
        }
        sb_add(b, "]", 1);
        return true;
    case JSON_STRING: py_string(b, json_string_value(x), json_string_length(x)); return true;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(x));
        sb_str(b, num);
        return true;
    case JSON_REAL:
        py_float_repr(json_real_value(x), num);
        sb_str(b, num);
        return true;
    case JSON_TRUE: sb_str(b, "true"); return true;
    case JSON_FALSE: sb_str(b, "false"); return true;
    case JSON_NULL: sb_str(b, "null"); return true;
    }
    return true;
}

/* x as Python writes it, into b (emptied first). false: out of memory or too deep. */
static bool py_dumps(sbuf *b, const json_t *x) {
    b->n = 0;
    b->oom = false;
    sb_add(b, "", 0);
    return py_dumps_at(b, x, 0) && !b->oom;
}

/* ---- the file list: each PATH, a folder's *.json sorted by name ---- */

typedef struct {
    char **v;
    size_t n, cap;
} strlist;

static bool sl_push(strlist *l, char *s) {
    if (!s) return false;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            free(s);
            return false;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return true;
}

static void sl_free(strlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Appends path, or its folder's *.json (sorted). false with a message on stderr. */
static bool add_path(strlist *files, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "maskbench: %s: %s\n", path, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (sl_push(files, strdup(path)) && files->n <= MB_MAX_FILES) return true;
        fprintf(stderr, "maskbench: out of memory or more than %d files\n", MB_MAX_FILES);
        return false;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "maskbench: %s: %s\n", path, strerror(errno));
        return false;
    }
    size_t first = files->n;
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (!ends_with(e->d_name, ".json")) continue;
        size_t n = strlen(path) + 1 + strlen(e->d_name) + 1;
        char *full = malloc(n);
        if (full) snprintf(full, n, "%s/%s", path, e->d_name);
        ok = sl_push(files, full) && files->n <= MB_MAX_FILES;
    }
    closedir(d);
    if (!ok) {
        fprintf(stderr, "maskbench: %s: out of memory or more than %d files\n", path, MB_MAX_FILES);
        return false;
    }
    qsort(files->v + first, files->n - first, sizeof *files->v, cmp_str);
    return true;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ---- --instances: what would be tokenized ---- */

static int print_instances(const strlist *files) {
    sbuf b = {0};
    int rc = 0;
    for (size_t f = 0; f < files->n && !rc; f++) {
        json_error_t jerr;
        json_t *root = json_load_file(files->v[f], JSON_ALLOW_NUL, &jerr);
        if (!root) {
            fprintf(stderr, "maskbench: %s:%d:%d: %s\n", files->v[f], jerr.line, jerr.column, jerr.text);
            rc = 1;
            break;
        }
        json_t *schema = json_object_get(root, "schema"), *tests = json_object_get(root, "tests");
        if (!schema || !py_dumps(&b, schema)) {
            fprintf(stderr, "maskbench: %s: %s\n", files->v[f],
                    schema ? "out of memory or nested too deep" : "no \"schema\"");
            rc = 1;
        } else {
            fwrite(b.p, 1, b.n, stdout);
            putchar('\n');
        }
        for (size_t i = 0; !rc && i < json_array_size(tests); i++) {
            json_t *data = json_object_get(json_array_get(tests, i), "data");
            if (!data || !py_dumps(&b, data)) {
                fprintf(stderr, "maskbench: %s: test #%zu: %s\n", files->v[f], i,
                        data ? "out of memory or nested too deep" : "no \"data\"");
                rc = 1;
                break;
            }
            fwrite(b.p, 1, b.n, stdout);
            putchar('\n');
        }
        json_decref(root);
    }
    free(b.p);
    return rc;
}

/* ---- the measurement ---- */

typedef struct {
    double *v;
    size_t n, cap;
} dlist;

static bool dl_push(dlist *l, double x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4096;
        double *v = realloc(l->v, cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The peer's quantile (maskbench_llg.py: a[min(n - 1, int(q * n))] of the sorted
 * values), not cn_gen_percentile's interpolation, so both columns use one estimator. */
static double quantile(dlist *l, double q) {
    if (!l->n) return 0;
    qsort(l->v, l->n, sizeof *l->v, cmp_double);
    size_t i = (size_t)(q * (double)l->n);
    return l->v[i < l->n ? i : l->n - 1];
}

typedef struct {
    const cn_tokenizer *tok;
    uint32_t *mask; /* (n_words) */
    size_t n_words;
    int32_t n_vocab;
    sbuf text;
    dlist masks_us, ttfm_us;
    size_t n_files, n_passed, n_compile_errors, n_load_errors;
    size_t n_wrong_accept, n_wrong_reject; /* instances, not files */
    size_t n_disagree;                     /* the mask and accept told apart */
    size_t n_valid_incomplete;             /* a valid instance accepted, yet not complete */
    size_t n_tokens;
} bench;

/* One test: tokens fed until one is refused. *accepted as MaskBench counts it (every
 * token was in the mask). false: out of memory or an engine error (message in err). */
static bool run_test(bench *B, cn_grammar_matcher *m, const int32_t *ids, size_t n_ids, bool *accepted, double *sum_us,
                     double *max_us, size_t *n_tok, cn_error *err) {
    *accepted = true;
    for (size_t k = 0; k < n_ids; k++) {
        int32_t id = ids[k];
        double t0 = now_us();
        if (cn_grammar_matcher_mask(m, B->mask, B->n_words, err) != CN_STATUS_OK) return false;
        bool allowed = id >= 0 && id < B->n_vocab && (B->mask[id / 32] >> (id % 32) & 1u);
        bool ok = allowed && cn_grammar_matcher_accept(m, id);
        double us = now_us() - t0;
        if (!dl_push(&B->masks_us, us)) {
            snprintf(err->msg, sizeof err->msg, "out of memory");
            err->status = CN_STATUS_NO_MEMORY;
            return false;
        }
        *sum_us += us;
        if (us > *max_us) *max_us = us;
        ++*n_tok;
        /* Outside the timing: the mask said yes and accept no, or the other way round. */
        if (allowed != ok || (!allowed && cn_grammar_matcher_accept(m, id))) B->n_disagree++;
        if (!ok) {
            *accepted = false;
            return true;
        }
    }
    return true;
}

static void set_str(json_t *o, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_str(json_t *o, const char *key, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_object_set_new(o, key, json_string(buf));
}

/* One file: its MaskBench line into st (id set by the caller). false: out of memory. */
static bool run_file(bench *B, const char *path, json_t *st) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    json_t *schema = root ? json_object_get(root, "schema") : NULL,
           *tests = root ? json_object_get(root, "tests") : NULL;
    if (!schema) {
        if (root) set_str(st, "load_error", "no \"schema\"");
        else set_str(st, "load_error", "%d:%d: %s", jerr.line, jerr.column, jerr.text);
        B->n_load_errors++;
        json_decref(root);
        return true;
    }
    size_t n_tests = json_array_size(tests);
    if (!py_dumps(&B->text, schema)) {
        json_decref(root);
        return false;
    }

    cn_grammar_params gp = cn_grammar_default_params();
    gp.kind = CN_GRAMMAR_JSON_SCHEMA;
    gp.source = B->text.p;
    gp.source_len = B->text.n;
    gp.flexible_whitespace = true;
    cn_grammar *g = NULL;
    cn_grammar_matcher *m = NULL;
    cn_error err = {0};
    double t0 = now_us();
    if (cn_grammar_compile(B->tok, &gp, &g, &err) != CN_STATUS_OK ||
        cn_grammar_matcher_new(g, &m, &err) != CN_STATUS_OK) {
        json_object_set_new(st, "num_tests", json_integer((json_int_t)n_tests));
        set_str(st, "compile_error", "%s: %s", cn_status_str(err.status), err.msg);
        B->n_compile_errors++;
        cn_grammar_free(g);
        json_decref(root);
        return err.status != CN_STATUS_NO_MEMORY;
    }
    double ttfm = now_us() - t0;
    bool ok = dl_push(&B->ttfm_us, ttfm);

    size_t n_valid = 0, n_invalid = 0, n_tok = 0;
    double sum_us = 0, max_us = 0;
    char verr[160] = "";
    for (size_t i = 0; ok && i < n_tests; i++) {
        json_t *t = json_array_get(tests, i), *data = json_object_get(t, "data");
        bool valid = json_is_true(json_object_get(t, "valid"));
        if (!data) {
            snprintf(verr, sizeof verr, "test #%zu: no \"data\"", i);
            continue;
        }
        if (!(ok = py_dumps(&B->text, data))) break;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        bool accepted = false;
        cn_grammar_matcher_reset(m);
        if (cn_tokenize_alloc(B->tok, B->text.p, B->text.n, false, false, &ids, &n_ids, &err) != CN_STATUS_OK ||
            !run_test(B, m, ids, n_ids, &accepted, &sum_us, &max_us, &n_tok, &err)) {
            free(ids);
            if (err.status == CN_STATUS_NO_MEMORY) {
                ok = false;
                break;
            }
            snprintf(verr, sizeof verr, "test #%zu: EXN %s: %.100s", i, cn_status_str(err.status), err.msg);
            continue;
        }
        free(ids);
        if (accepted && valid && !cn_grammar_matcher_is_complete(m)) B->n_valid_incomplete++;
        if (accepted && !valid) {
            snprintf(verr, sizeof verr, "test #%zu: should reject but didn't", i);
            B->n_wrong_accept++;
        } else if (!accepted && valid) {
            snprintf(verr, sizeof verr, "test #%zu: should accept but didn't", i);
            B->n_wrong_reject++;
        } else if (valid) {
            n_valid++;
        } else {
            n_invalid++;
        }
    }
    cn_grammar_matcher_free(m);
    cn_grammar_free(g);
    json_decref(root);
    if (!ok) return false;

    /* MaskBench's field order; a later failing test's message replaces an earlier one's,
     * as in its runner. */
    json_object_set_new(st, "ttfm_us", json_integer((json_int_t)ttfm));
    json_object_set_new(st, "masks_us", json_integer((json_int_t)sum_us));
    json_object_set_new(st, "max_mask_us", json_integer((json_int_t)max_us));
    json_object_set_new(st, "num_tokens", json_integer((json_int_t)n_tok));
    json_object_set_new(st, "num_tests", json_integer((json_int_t)n_tests));
    json_object_set_new(st, "num_valid_tests", json_integer((json_int_t)n_valid));
    json_object_set_new(st, "num_invalid_tests", json_integer((json_int_t)n_invalid));
    if (verr[0]) json_object_set_new(st, "validation_error", json_string(verr));
    else B->n_passed++;
    B->n_tokens += n_tok;
    return true;
}

static void print_line(bench *B, const json_t *st, bool as_json) {
    if (as_json) {
        if (py_dumps(&B->text, st)) printf("%s\n", B->text.p);
        return;
    }
    const char *id = json_string_value(json_object_get(st, "id"));
    const char *why = NULL;
    const char *keys[] = {"load_error", "compile_error", "validation_error"};
    for (int k = 0; k < 3 && !why; k++) why = json_string_value(json_object_get(st, keys[k]));
    if (!json_object_get(st, "ttfm_us")) { /* it did not compile */
        printf("FAIL %-48s %s\n", id, why ? why : "");
        return;
    }
    json_int_t n_tok = json_integer_value(json_object_get(st, "num_tokens"));
    json_int_t masks = json_integer_value(json_object_get(st, "masks_us"));
    printf("%-4s %-48s ttfm %8.0f us  %6lld tokens  %8.1f us/mask%s%s\n", why ? "FAIL" : "ok", id,
           (double)json_integer_value(json_object_get(st, "ttfm_us")), (long long)n_tok,
           n_tok ? (double)masks / (double)n_tok : 0.0, why ? "  " : "", why ? why : "");
}

static json_t *summary(bench *B, const char *model, double vocab_ms) {
    double mean = 0;
    for (size_t i = 0; i < B->masks_us.n; i++) mean += B->masks_us.v[i];
    mean = B->masks_us.n ? mean / (double)B->masks_us.n : 0;
    const char *mb = base_name(model);
    char engine[64];
    snprintf(engine, sizeof engine, "cinder %s", cn_version());
    return json_pack("{s:{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}}",
                     "summary", "engine", engine, "model", mb, "cpu", cn_kernels_family(), "files",
                     (json_int_t)B->n_files, "passed", (json_int_t)B->n_passed, "compile_errors",
                     (json_int_t)B->n_compile_errors, "load_errors", (json_int_t)B->n_load_errors, "wrong_acceptances",
                     (json_int_t)B->n_wrong_accept, "wrong_rejections", (json_int_t)B->n_wrong_reject,
                     "mask_accept_disagreements", (json_int_t)B->n_disagree, "valid_but_incomplete",
                     (json_int_t)B->n_valid_incomplete, "num_tokens", (json_int_t)B->n_tokens, "mean_mask_us", mean,
                     "p50_mask_us", quantile(&B->masks_us, 0.5), "p99_mask_us", quantile(&B->masks_us, 0.99),
                     "p75_ttfm_us", quantile(&B->ttfm_us, 0.75), "vocab_ms", vocab_ms);
}

/* A figure of no measurement (no masks, nothing compiled) is null, not 0. */
static void null_if_none(json_t *sum, const dlist *l, const char *const *keys, size_t n) {
    json_t *s = json_object_get(sum, "summary");
    for (size_t i = 0; i < n && !l->n; i++) json_object_set_new(s, keys[i], json_null());
}

static void print_summary_text(const json_t *sum) {
    const json_t *s = json_object_get(sum, "summary");
    printf("\n%s on %s (%s kernels)\n", json_string_value(json_object_get(s, "engine")),
           json_string_value(json_object_get(s, "model")), json_string_value(json_object_get(s, "cpu")));
    const char *ints[] = {"files",
                          "passed",
                          "compile_errors",
                          "load_errors",
                          "wrong_acceptances",
                          "wrong_rejections",
                          "mask_accept_disagreements",
                          "valid_but_incomplete",
                          "num_tokens"};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        printf("  %-26s %lld\n", ints[i], (long long)json_integer_value(json_object_get(s, ints[i])));
    const char *reals[] = {"mean_mask_us", "p50_mask_us", "p99_mask_us", "p75_ttfm_us", "vocab_ms"};
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        const json_t *v = json_object_get(s, reals[i]);
        if (json_is_real(v)) printf("  %-26s %.1f\n", reals[i], json_real_value(v));
        else printf("  %-26s n/a\n", reals[i]);
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: maskbench -m MODEL [--json] [--limit N] PATH...\n"
               "       maskbench --instances PATH...\n"
               "  PATH: MaskBench files (schema + tests) or folders of them\n"
               "  -m MODEL     GGUF file whose tokenizer (vocabulary) to use\n"
               "  --json       one JSON line per file (MaskBench's fields), then {\"summary\": ...}\n"
               "  --limit N    the first N files only (folders sorted by name)\n"
               "  --instances  print each schema and test instance as serialized, one a line\n");
}

static int run_bench(const strlist *files, const char *model, bool as_json) {
    bench B = {0};
    cn_error err = {0};
    cn_tokenizer *tok = NULL;
    json_t *sum = NULL;
    bool ok = false;
    int rc = 1;
    if (cn_tokenizer_load_file(model, &tok, &err) != CN_STATUS_OK) {
        fprintf(stderr, "maskbench: %s\n", err.msg);
        return 1;
    }
    B.tok = tok;
    B.n_vocab = cn_tokenizer_n_vocab(tok);
    B.n_words = ((size_t)B.n_vocab + 31) / 32;
    B.mask = calloc(B.n_words ? B.n_words : 1, sizeof *B.mask);

    /* The vocabulary's trie and caches are built on the first compile against a
     * tokenizer; llguidance builds its own when the tokenizer is made, before any TTFM,
     * so ours is built here, outside the timing, and reported as vocab_ms. */
    double vocab_ms = -1; /* -1: not measured (the warm-up failed) */
    if (B.mask) {
        cn_grammar_params gp = cn_grammar_default_params();
        gp.kind = CN_GRAMMAR_JSON_OBJECT;
        cn_grammar *g = NULL;
        double t0 = now_us();
        if (cn_grammar_compile(tok, &gp, &g, &err) == CN_STATUS_OK) vocab_ms = (now_us() - t0) / 1e3;
        else /* then the first file's TTFM carries the vocabulary's build */
            fprintf(stderr, "maskbench: warning: the warm-up compile (json_object) failed: %s: %s\n",
                    cn_status_str(err.status), err.msg);
        cn_grammar_free(g);
    }

    ok = B.mask != NULL;
    for (size_t f = 0; ok && f < files->n; f++) {
        json_t *st = json_object();
        ok = st && !json_object_set_new(st, "id", json_string(base_name(files->v[f]))) && run_file(&B, files->v[f], st);
        if (ok) {
            B.n_files++;
            print_line(&B, st, as_json);
            fflush(stdout);
        }
        json_decref(st);
    }
    if (!ok) {
        fprintf(stderr, "maskbench: out of memory\n");
        goto done;
    }
    sum = summary(&B, model, vocab_ms);
    if (!sum) {
        fprintf(stderr, "maskbench: out of memory\n");
        goto done;
    }
    static const char *const mask_keys[] = {"mean_mask_us", "p50_mask_us", "p99_mask_us"},
                             *ttfm_keys[] = {"p75_ttfm_us"};
    null_if_none(sum, &B.masks_us, mask_keys, 3);
    null_if_none(sum, &B.ttfm_us, ttfm_keys, 1);
    if (vocab_ms < 0) json_object_set_new(json_object_get(sum, "summary"), "vocab_ms", json_null());
    if (as_json) print_line(&B, sum, true);
    else print_summary_text(sum);
    json_decref(sum);
    rc = 0;
done:
    free(B.mask);
    free(B.text.p);
    free(B.masks_us.v);
    free(B.ttfm_us.v);
    cn_tokenizer_free(tok);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = NULL;
    bool as_json = false, instances = false;
    long limit = -1;
    strlist files = {0};
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if (!strcmp(a, "--json")) as_json = true;
        else if (!strcmp(a, "--instances")) instances = true;
        else if (!strcmp(a, "--limit") && i + 1 < argc) {
            char *end;
            errno = 0;
            limit = strtol(argv[++i], &end, 10);
            if (errno || *end || limit < 0) {
                fprintf(stderr, "maskbench: --limit %s: must be a count >= 0\n", argv[i]);
                goto done;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (a[0] == '-') {
            fprintf(stderr, "maskbench: unknown flag or missing value: %s\n", a);
            usage(stderr);
            goto done;
        } else if (!add_path(&files, a)) {
            rc = 1;
            goto done;
        }
    }
    if (!files.n || (!model && !instances)) {
        if (!files.n) fprintf(stderr, "maskbench: no MaskBench files given\n");
        else fprintf(stderr, "maskbench: no model given (-m MODEL.gguf)\n");
        usage(stderr);
        goto done;
    }
    if (limit >= 0 && (size_t)limit < files.n) {
        for (size_t i = (size_t)limit; i < files.n; i++) free(files.v[i]);
        files.n = (size_t)limit;
    }
    rc = instances ? print_instances(&files) : run_bench(&files, model, as_json);
done:
    sl_free(&files);
    return rc;
}
