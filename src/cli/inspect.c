/* inspect.c — `cinder inspect MODEL.gguf`: what a GGUF file holds, readable at a glance.
 *
 * Prints the header (version, alignment, counts, data offset, file size), every metadata
 * key with its type and value (strings escaped and shortened, long arrays abbreviated to
 * their first elements, nested arrays in parentheses), the tensor table (name, type,
 * shape, bytes, offset) and totals (parameters, bytes by type). Reads only through
 * cinder.h's gguf files tier, and a type cinder cannot compute with is flagged, not
 * hidden. Output is for people: tests match on lines, not on exact layout. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cinder.h"
#include "cinder_gguf.h"
#include "cli.h"
#include "flags.h"

#define STR_SHOW 60   /* characters of a string value shown */
#define ARR_SHOW 8    /* elements of an array shown */
#define ARR_CHARS 100 /* about this many characters of array elements shown */

/* A bounded text buffer for one value. */
typedef struct {
    char p[1024];
    size_t n;
} line;

static void lput(line *l, const char *s, size_t n) {
    if (n > sizeof l->p - 1 - l->n) n = sizeof l->p - 1 - l->n;
    memcpy(l->p + l->n, s, n);
    l->n += n;
    l->p[l->n] = '\0';
}

static void lprintf(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lprintf(line *l, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) lput(l, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* "escaped text", cut after max characters with "..." and the full length in bytes. */
static void put_str(line *l, cn_gguf_str s, size_t max) {
    size_t i = 0;
    lput(l, "\"", 1);
    for (size_t shown = 0; i < s.len && shown < max; shown++) {
        char esc[8];
        i += cn_cli_escape_char(s.ptr + i, s.len - i, '"', esc);
        lput(l, esc, strlen(esc));
    }
    lput(l, "\"", 1);
    if (i < s.len) lprintf(l, "... (%llu bytes)", (unsigned long long)s.len);
}

/* A key or tensor name: bare, unless escaping or cutting changed it. */
static const char *put_name(line *l, cn_gguf_str s) {
    put_str(l, s, 60);
    if (l->n != s.len + 2 || memcmp(l->p + 1, s.ptr, s.len) != 0) return l->p;
    l->p[l->n - 1] = '\0';
    return l->p + 1;
}

static void put_f64(line *l, double d, bool f32) { lprintf(l, f32 ? "%.7g" : "%.15g", d); }

static void put_arr(line *l, const cn_gguf_arr *a) {
    lprintf(l, "[%llu × %s]", (unsigned long long)a->n, cn_gguf_vtype_name(a->type));
    size_t start = l->n;
    uint64_t j = 0;
    for (; j < a->n && j < ARR_SHOW && l->n - start < ARR_CHARS; j++) {
        lput(l, j ? ", " : " ", j ? 2 : 1);
        switch (a->type) {
        case CN_GGUF_STRING: put_str(l, cn_gguf_arr_str(a, j), 24); break;
        case CN_GGUF_ARRAY: {
            cn_gguf_arr sub;
            lput(l, "(", 1);
            if (cn_gguf_arr_sub(a, j, &sub)) put_arr(l, &sub);
            lput(l, ")", 1);
            break;
        }
        case CN_GGUF_FLOAT32:
        case CN_GGUF_FLOAT64: put_f64(l, cn_gguf_arr_f64(a, j), a->type == CN_GGUF_FLOAT32); break;
        case CN_GGUF_BOOL: lput(l, cn_gguf_arr_i64(a, j) ? "true" : "false", cn_gguf_arr_i64(a, j) ? 4 : 5); break;
        case CN_GGUF_UINT64: lprintf(l, "%llu", (unsigned long long)(uint64_t)cn_gguf_arr_i64(a, j)); break;
        default: lprintf(l, "%lld", (long long)cn_gguf_arr_i64(a, j)); break;
        }
    }
    if (j < a->n) lput(l, ", ...", 5);
}

static void put_value(line *l, const cn_gguf *g, int64_t i) {
    cn_gguf_vtype t = cn_gguf_kv_type(g, i);
    cn_gguf_str s;
    cn_gguf_arr a;
    double d;
    int64_t v;
    uint64_t u;
    if (t == CN_GGUF_STRING && cn_gguf_kv_str(g, i, &s)) {
        put_str(l, s, STR_SHOW);
    } else if (t == CN_GGUF_ARRAY && cn_gguf_kv_arr(g, i, &a)) {
        put_arr(l, &a);
    } else if (t == CN_GGUF_BOOL && cn_gguf_kv_i64(g, i, &v)) {
        lput(l, v ? "true" : "false", v ? 4 : 5);
    } else if ((t == CN_GGUF_FLOAT32 || t == CN_GGUF_FLOAT64) && cn_gguf_kv_f64(g, i, &d)) {
        put_f64(l, d, t == CN_GGUF_FLOAT32);
    } else if (cn_gguf_kv_i64(g, i, &v)) {
        lprintf(l, "%lld", (long long)v);
    } else if (cn_gguf_kv_u64(g, i, &u)) { /* a u64 above INT64_MAX */
        lprintf(l, "%llu", (unsigned long long)u);
    }
}

/* n in the largest of unit[1..3] (steps of k) it reaches, "%.2f" (unit[0]: n as it is):
 * "1.23M" for counts, "1.23 MiB" for bytes. */
static void human(char *buf, size_t cap, uint64_t n, uint64_t k, const char *const unit[4]) {
    int i = 0;
    uint64_t scale = 1;
    while (i < 3 && n >= scale * k) scale *= k, i++;
    if (i) snprintf(buf, cap, "%.2f%s", (double)n / (double)scale, unit[i]);
    else snprintf(buf, cap, "%llu%s", (unsigned long long)n, unit[0]);
}

static const char *const k_count_units[4] = {"", "K", "M", "B"}, *const k_byte_units[4] = {" B", " KiB", " MiB",
                                                                                           " GiB"};

static const char *type_name(uint32_t type, char *buf, size_t cap) {
    const char *name = cn_type_name((cn_type)type);
    if (name) return name;
    snprintf(buf, cap, "type%u?", type);
    return buf;
}

static void print_tensors(const cn_gguf *g) {
    int64_t n = cn_gguf_n_tensors(g);
    size_t w_name = 4;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t len = cn_gguf_tensor(g, i)->name.len;
        if (len > w_name) w_name = len < 60 ? len : 60;
    }
    printf("\ntensors:\n  %5s  %-*s  %-8s  %-18s  %12s  %12s\n", "#", (int)w_name, "name", "type", "shape", "bytes",
           "offset");
    uint64_t n_params = 0, by_type_bytes[CN_TYPE_COUNT] = {0}, other_bytes = 0;
    int64_t by_type_n[CN_TYPE_COUNT] = {0}, n_unknown = 0, n_other = 0;
    for (int64_t i = 0; i < n; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        line nm = {0}, shape = {0};
        const char *shown = put_name(&nm, t->name);
        lput(&shape, "[", 1);
        uint64_t n_elem = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            lprintf(&shape, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
            n_elem *= (uint64_t)t->ne[d]; /* the reader checked the product fits */
        }
        lput(&shape, "]", 1);
        n_params += n_elem;
        char tb[32], bytes[32];
        bool sized = cn_gguf_type_size(t->type, NULL, NULL);
        if (sized) snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)t->n_bytes);
        else snprintf(bytes, sizeof bytes, "?");
        printf("  %5lld  %-*s  %-8s  %-18s  %12s  %12llu\n", (long long)i, (int)w_name, shown,
               type_name(t->type, tb, sizeof tb), shape.p, bytes, (unsigned long long)t->offset);
        if (!cn_type_name((cn_type)t->type)) n_unknown++;
        if (t->type < CN_TYPE_COUNT) {
            by_type_bytes[t->type] += t->n_bytes;
            by_type_n[t->type]++;
        } else {
            other_bytes += t->n_bytes;
            n_other++;
        }
    }
    char hc[32], hb[32];
    human(hc, sizeof hc, n_params, 1000, k_count_units);
    printf("\ntotals:\n  parameters  %s (%llu)\n", hc, (unsigned long long)n_params);
    uint64_t all = other_bytes;
    for (uint32_t t = 0; t < CN_TYPE_COUNT; t++) {
        if (!by_type_n[t]) continue;
        char tb[32];
        human(hb, sizeof hb, by_type_bytes[t], 1024, k_byte_units);
        printf("  %-10s  %lld tensors, %llu bytes (%s)\n", type_name(t, tb, sizeof tb), (long long)by_type_n[t],
               (unsigned long long)by_type_bytes[t], hb);
        all += by_type_bytes[t];
    }
    if (n_other) printf("  %-10s  %lld tensors\n", "unknown", (long long)n_other);
    human(hb, sizeof hb, all, 1024, k_byte_units);
    printf("  %-10s  %lld tensors, %llu bytes (%s)\n", "all", (long long)n, (unsigned long long)all, hb);
    if (n_unknown)
        printf("\nnote: %lld tensor(s) have a type cinder cannot compute with (marked '?')\n", (long long)n_unknown);
}

int cn_cli_inspect(int argc, char **argv) {
    const char *pos[2];
    int n_pos;
    const int rc = cli_flags_parse("inspect",
                                   "usage: cinder inspect MODEL.gguf\n\n"
                                   "Prints the header, metadata and tensor table of a GGUF file.\n",
                                   NULL, 0, argc, argv, pos, 2, &n_pos);
    if (rc) return CLI_FLAGS_EXIT(rc);
    if (n_pos == 0) {
        cn_cli_errorf("inspect: no file given (usage: cinder inspect MODEL.gguf)");
        return 2;
    }
    if (n_pos > 1) {
        cn_cli_errorf("inspect: one file at a time ('%s' and '%s')", pos[0], pos[1]);
        return 2;
    }
    const char *path = pos[0];
    cn_gguf *g;
    cn_error err;
    if (cn_gguf_open(path, &g, &err)) {
        cn_cli_errorf("%s", err.msg);
        return 1;
    }
    char hb[32];
    human(hb, sizeof hb, cn_gguf_file_size(g), 1024, k_byte_units);
    printf("file: %s\n", path);
    printf("  version      %u\n  alignment    %u\n  kvs          %lld\n  tensors      %lld\n"
           "  data offset  %llu\n  file size    %zu (%s)\n",
           cn_gguf_version(g), cn_gguf_alignment(g), (long long)cn_gguf_n_kv(g), (long long)cn_gguf_n_tensors(g),
           (unsigned long long)cn_gguf_data_offset(g), cn_gguf_file_size(g), hb);

    printf("\nmetadata:\n");
    size_t w_key = 8;
    for (int64_t i = 0; i < cn_gguf_n_kv(g); i++) {
        const uint64_t len = cn_gguf_kv_key(g, i).len;
        if (len > w_key) w_key = len < 48 ? len : 48;
    }
    for (int64_t i = 0; i < cn_gguf_n_kv(g); i++) {
        line key = {0}, val = {0};
        const char *shown = put_name(&key, cn_gguf_kv_key(g, i));
        put_value(&val, g, i);
        printf("  %-*s  %-6s  %s\n", (int)w_key, shown, cn_gguf_vtype_name(cn_gguf_kv_type(g, i)), val.p);
    }
    if (cn_gguf_n_tensors(g) > 0) print_tensors(g);
    else printf("\ntensors: none (a vocabulary-only file)\n");
    cn_gguf_close(g);
    if (fflush(stdout) != 0) {
        cn_cli_errorf("inspect: cannot write the output");
        return 1;
    }
    return 0;
}
