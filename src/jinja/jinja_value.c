/* jinja_value.c — the interpreter's values with Python's semantics where a template can
 * see them: str() and repr() of every type (what {{ x }} prints, lists and dicts
 * included), float repr, truthiness, ==, hashing for dict keys, ordering, and
 * json.dumps as Hugging Face's tojson calls it (ensure_ascii, indent, separators,
 * sort_keys) written byte for byte; and JSON input through jansson with key order kept.
 *
 * Ownership: constructors return new references; jv_unref releases one. Containers are
 * immutable once shared. Traversals (str, ==, json) stop at JV_MAX_NEST levels with an
 * error rather than use unbounded stack; freeing never recurses. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "jinja/jinja_impl.h"

/* ---- objects ---- */

jstr *jstr_alloc(size_t n) {
    if (n > SIZE_MAX - sizeof(jstr) - 1) return NULL;
    jstr *s = malloc(sizeof(jstr) + n + 1);
    if (!s) return NULL;
    s->h = (jobj){.rc = 1, .type = JV_STR};
    s->len = n;
    s->ncp = SIZE_MAX;
    s->ascii = false;
    s->b[n] = 0;
    return s;
}

jstr *jstr_new(const char *p, size_t n) {
    jstr *s = jstr_alloc(n);
    if (s && n) memcpy(s->b, p, n);
    return s;
}

jlist *jlist_new(size_t cap) {
    jlist *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->h = (jobj){.rc = 1, .type = JV_LIST};
    if (cap) {
        l->v = malloc(cap * sizeof *l->v);
        if (!l->v) {
            free(l);
            return NULL;
        }
        l->cap = cap;
    }
    return l;
}

bool jlist_push(jlist *l, jv v) {
    if (!CN_GROW(l->v, l->cap, l->n + 1)) {
        jv_unref(v);
        return false;
    }
    l->v[l->n++] = v;
    return true;
}

jdict *jdict_new(size_t cap) {
    jdict *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->h = (jobj){.rc = 1, .type = JV_DICT};
    if (cap) {
        d->k = malloc(cap * sizeof *d->k);
        d->v = malloc(cap * sizeof *d->v);
        if (!d->k || !d->v) {
            free(d->k);
            free(d->v);
            free(d);
            return NULL;
        }
        d->cap = cap;
    }
    return d;
}

#define JDICT_INDEX_MIN 12 /* below this many keys a linear scan is as fast */

static bool dict_reindex(jdict *d) {
    size_t cap = 32;
    while (cap < d->n * 2) cap *= 2;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return false;
    for (size_t i = 0; i < d->n; i++) {
        size_t h = (size_t)jv_hash(d->k[i]) & (cap - 1);
        while (idx[h]) h = (h + 1) & (cap - 1);
        idx[h] = (uint32_t)(i + 1);
    }
    free(d->idx);
    d->idx = idx;
    d->idx_cap = cap;
    return true;
}

jv *jdict_get(const jdict *d, jv k) {
    bool deep = false;
    if (d->idx) {
        size_t h = (size_t)jv_hash(k) & (d->idx_cap - 1);
        while (d->idx[h]) {
            const size_t i = d->idx[h] - 1;
            if (jv_equal(d->k[i], k, &deep)) return &d->v[i];
            h = (h + 1) & (d->idx_cap - 1);
        }
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k, &deep)) return &d->v[i];
    return NULL;
}

jv *jdict_get_str(const jdict *d, const char *s, size_t n) {
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++)
            if (d->k[i].kind == JV_STR && d->k[i].u.s->len == n && memcmp(d->k[i].u.s->b, s, n) == 0) return &d->v[i];
        return NULL;
    }
    jstr *k = jstr_new(s, n);
    if (!k) return NULL;
    jv *r = jdict_get(d, jv_str(k));
    jv_unref(jv_str(k));
    return r;
}

bool jdict_set(jdict *d, jv k, jv v) {
    jv *old = jdict_get(d, k);
    if (old) {
        jv_unref(*old);
        *old = v;
        jv_unref(k);
        return true;
    }
    if (d->n == d->cap) { /* keys and values grow together */
        const size_t cap = cn_grow_cap(d->cap, d->n + 1, sizeof *d->k);
        jv *nk = cap ? realloc(d->k, cap * sizeof *nk) : NULL;
        if (nk) d->k = nk;
        jv *nv = nk ? realloc(d->v, cap * sizeof *nv) : NULL;
        if (nv) d->v = nv;
        if (!nk || !nv) {
            jv_unref(k);
            jv_unref(v);
            return false;
        }
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    if (d->n >= JDICT_INDEX_MIN && (!d->idx || d->n * 2 > d->idx_cap)) {
        if (!dict_reindex(d)) return false; /* the entry stays: lookups fall back to the scan */
    } else if (d->idx) {
        size_t h = (size_t)jv_hash(k) & (d->idx_cap - 1);
        while (d->idx[h]) h = (h + 1) & (d->idx_cap - 1);
        d->idx[h] = (uint32_t)d->n;
    }
    return true;
}

/* Releases a reference; objects whose count reaches zero go on a pending list whose
 * children are released in turn, so no depth of nesting recurses. */
static void release(jobj *o, jobj **pending) {
    if (!o || o->rc == JOBJ_IMMORTAL) return;
    if (--o->rc) return;
    o->next_free = *pending;
    *pending = o;
}

void jv_unref(jv v) {
    jobj *pending = NULL;
    release(jv_obj(v), &pending);
    while (pending) {
        jobj *o = pending;
        pending = o->next_free;
        switch (o->type) {
        case JV_LIST: {
            jlist *l = (jlist *)o;
            for (size_t i = 0; i < l->n; i++) release(jv_obj(l->v[i]), &pending);
            free(l->v);
            break;
        }
        case JV_DICT: {
            jdict *d = (jdict *)o;
            for (size_t i = 0; i < d->n; i++) {
                release(jv_obj(d->k[i]), &pending);
                release(jv_obj(d->v[i]), &pending);
            }
            free(d->k);
            free(d->v);
            free(d->idx);
            break;
        }
        case JV_LOOP: {
            jloop *l = (jloop *)o;
            release(&l->items->h, &pending);
            if (l->changed_last) {
                release(jv_obj(*l->changed_last), &pending);
                free(l->changed_last);
            }
            break;
        }
        case JV_ITER: release(&((jiter *)o)->items->h, &pending); break;
        default: break; /* strings, ranges, macros hold no counted references */
        }
        free(o);
    }
}

/* ---- types and truth ---- */

const char *jv_type_name(jv v) {
    switch (v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return v.flags & JF_MARKUP ? "Markup" : "str";
    case JV_LIST: return v.flags & JF_TUPLE ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    case JV_ITER:
        switch (v.u.it->kind) {
        case IT_MAP: return "generator";
        case IT_REVERSED: return "list_reverseiterator";
        case IT_DICT_KEYS: return "dict_keys";
        case IT_DICT_VALUES: return "dict_values";
        case IT_DICT_ITEMS: return "dict_items";
        default: return "generator";
        }
    case JV_RANGE: return "range";
    }
    return "object";
}

static int64_t range_len(const jrange *r) {
    if (r->step > 0 && r->start < r->stop) return (int64_t)(((__int128)r->stop - r->start - 1) / r->step + 1);
    if (r->step < 0 && r->start > r->stop)
        return (int64_t)(((__int128)r->start - r->stop - 1) / -(__int128)r->step + 1);
    return 0;
}

bool jv_truthy(jv v) {
    switch (v.kind) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL:
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len > 0;
    case JV_LIST: return v.u.l->n > 0;
    case JV_DICT: return v.u.d->n > 0;
    case JV_ITER: return v.u.it->kind >= IT_DICT_KEYS ? v.u.it->items->n > 0 : true;
    case JV_RANGE: return range_len(v.u.rg) > 0;
    default: return true;
    }
}

/* ---- numbers ---- */

void jpy_float_repr(double x, char out[32]) {
    if (isnan(x)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(x)) {
        strcpy(out, x < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, exp10;
    const char *c = tmp;
    const bool neg = *c == '-';
    if (neg) c++;
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9') digits[nd++] = *c;
    exp10 = atoi(c + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp10 < -4 || exp10 >= 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 >= 0) {
        for (int i = 0; i <= exp10; i++) *o++ = i < nd ? digits[i] : '0';
        *o++ = '.';
        if (nd > exp10 + 1) {
            memcpy(o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += nd - exp10 - 1;
        } else {
            *o++ = '0';
        }
    } else {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    }
    *o = 0;
}

/* ---- str() and repr() ---- */

static bool write_repr_str(jbuf *b, const char *s, size_t n) {
    const bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    const char q = sq && !dq ? '"' : '\'';
    jbuf_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        bool ok;
        const size_t k = ju8_next(s + i, n - i, &cp, &ok);
        if (!ok) {
            jbuf_printf(b, "\\x%02x", (unsigned char)s[i]);
        } else if (cp == (uint32_t)q || cp == '\\') {
            jbuf_putc(b, '\\');
            jbuf_putc(b, (char)cp);
        } else if (cp == '\t') {
            jbuf_put(b, "\\t", 2);
        } else if (cp == '\n') {
            jbuf_put(b, "\\n", 2);
        } else if (cp == '\r') {
            jbuf_put(b, "\\r", 2);
        } else if (cp < 0x20 || cp == 0x7F) {
            jbuf_printf(b, "\\x%02x", cp);
        } else if (cp < 0x7F || jpy_isprintable(cp)) {
            jbuf_put(b, s + i, k);
        } else if (cp <= 0xFF) {
            jbuf_printf(b, "\\x%02x", cp);
        } else if (cp <= 0xFFFF) {
            jbuf_printf(b, "\\u%04x", cp);
        } else {
            jbuf_printf(b, "\\U%08x", cp);
        }
        i += k;
    }
    return jbuf_putc(b, q);
}

/* The dicts being printed (Python's repr prints a dict met again inside itself as
 * {...}; only namespaces can make that happen). */
typedef struct {
    const void *open[JV_MAX_NEST];
    int n;
} repr_stack;

static bool write_any(jbuf *b, jv v, bool repr, repr_stack *st, const char **why);

static bool write_dict_body(jbuf *b, const jdict *d, repr_stack *st, const char **why) {
    for (int i = 0; i < st->n; i++)
        if (st->open[i] == d) return jbuf_put(b, "{...}", 5);
    if (st->n >= JV_MAX_NEST) {
        *why = "a value nested too deeply to print";
        return false;
    }
    st->open[st->n++] = d;
    jbuf_putc(b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) jbuf_put(b, ", ", 2);
        if (!write_any(b, d->k[i], true, st, why)) return false;
        jbuf_put(b, ": ", 2);
        if (!write_any(b, d->v[i], true, st, why)) return false;
    }
    st->n--;
    return jbuf_putc(b, '}');
}

static bool write_items(jbuf *b, const jlist *l, const char *open, const char *close, bool tuple, repr_stack *st,
                        const char **why) {
    if (st->n >= JV_MAX_NEST) {
        *why = "a value nested too deeply to print";
        return false;
    }
    st->open[st->n++] = l;
    jbuf_put(b, open, strlen(open));
    for (size_t i = 0; i < l->n; i++) {
        if (i) jbuf_put(b, ", ", 2);
        if (!write_any(b, l->v[i], true, st, why)) return false;
    }
    if (tuple && l->n == 1) jbuf_putc(b, ',');
    st->n--;
    return jbuf_put(b, close, strlen(close));
}

static bool write_any(jbuf *b, jv v, bool repr, repr_stack *st, const char **why) {
    char tmp[64];
    switch (v.kind) {
    case JV_UNDEF: return repr ? jbuf_put(b, "Undefined", 9) : true;
    case JV_NONE: return jbuf_put(b, "None", 4);
    case JV_BOOL: return v.u.i ? jbuf_put(b, "True", 4) : jbuf_put(b, "False", 5);
    case JV_INT: return jbuf_printf(b, "%lld", (long long)v.u.i);
    case JV_FLOAT: jpy_float_repr(v.u.f, tmp); return jbuf_put(b, tmp, strlen(tmp));
    case JV_STR:
        if (!repr) return jbuf_put(b, v.u.s->b, v.u.s->len);
        if (v.flags & JF_MARKUP) {
            jbuf_put(b, "Markup(", 7);
            write_repr_str(b, v.u.s->b, v.u.s->len);
            return jbuf_putc(b, ')');
        }
        return write_repr_str(b, v.u.s->b, v.u.s->len);
    case JV_LIST:
        return v.flags & JF_TUPLE ? write_items(b, v.u.l, "(", ")", true, st, why)
                                  : write_items(b, v.u.l, "[", "]", false, st, why);
    case JV_DICT: return write_dict_body(b, v.u.d, st, why);
    case JV_NS:
        jbuf_put(b, "<Namespace ", 11);
        if (!write_dict_body(b, v.u.ns->attrs, st, why)) return false;
        return jbuf_putc(b, '>');
    case JV_MACRO: /* a call block's caller is jinja2's anonymous macro */
        if (v.u.m->def->kind == N_CALLBLOCK) return jbuf_put(b, "<Macro anonymous>", 17);
        return jbuf_printf(b, "<Macro '%.100s'>", v.u.m->name);
    case JV_FUNC: return jbuf_put(b, "<built-in function>", 19);
    case JV_METHOD: return jbuf_printf(b, "<built-in method %s>", jb_method_name(v.sub));
    case JV_LOOP: {
        const jloop *l = v.u.loop;
        return jbuf_printf(b, "<LoopContext %lld/%zu>", (long long)(l->index0 + 1), l->items->n);
    }
    case JV_ITER: {
        const jiter *it = v.u.it;
        if (it->kind == IT_DICT_KEYS || it->kind == IT_DICT_VALUES || it->kind == IT_DICT_ITEMS) {
            const char *name = jv_type_name(v);
            jbuf_put(b, name, strlen(name));
            return write_items(b, it->items, "([", "])", false, st, why);
        }
        return jbuf_printf(b, "<%s object>", jv_type_name(v));
    }
    case JV_RANGE:
        if (v.u.rg->step == 1)
            return jbuf_printf(b, "range(%lld, %lld)", (long long)v.u.rg->start, (long long)v.u.rg->stop);
        return jbuf_printf(b, "range(%lld, %lld, %lld)", (long long)v.u.rg->start, (long long)v.u.rg->stop,
                           (long long)v.u.rg->step);
    }
    return true;
}

bool jv_write_str(jbuf *b, jv v, const char **why) {
    repr_stack *st = NULL;
    if (v.kind == JV_STR) return jbuf_put(b, v.u.s->b, v.u.s->len);
    if (v.kind < JV_STR) {
        repr_stack none = {.n = 0};
        return write_any(b, v, false, &none, why);
    }
    st = malloc(sizeof *st);
    if (!st) {
        b->oom = true;
        return false;
    }
    st->n = 0;
    const bool ok = write_any(b, v, false, st, why) && !b->over && !b->oom;
    free(st);
    return ok;
}

bool jv_write_repr(jbuf *b, jv v, const char **why) {
    repr_stack *st = malloc(sizeof *st);
    if (!st) {
        b->oom = true;
        return false;
    }
    st->n = 0;
    const bool ok = write_any(b, v, true, st, why) && !b->over && !b->oom;
    free(st);
    return ok;
}

/* ---- equality, hashing, ordering ---- */

static bool num_eq(jv a, jv b) {
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) return a.u.i == b.u.i;
    if (a.kind == JV_FLOAT && b.kind == JV_FLOAT) return a.u.f == b.u.f;
    const double f = a.kind == JV_FLOAT ? a.u.f : b.u.f;
    const int64_t i = a.kind == JV_FLOAT ? b.u.i : a.u.i;
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0) || f != floor(f)) return false;
    return (int64_t)f == i;
}

static bool equal_at(jv a, jv b, int depth, bool *deep) {
    if (depth > JV_MAX_NEST) {
        *deep = true;
        return false;
    }
    if (jv_is_num(a) && jv_is_num(b)) return num_eq(a, b);
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->b, b.u.s->b, a.u.s->len) == 0;
    case JV_LIST:
        if ((a.flags & JF_TUPLE) != (b.flags & JF_TUPLE) || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_at(a.u.l->v[i], b.u.l->v[i], depth + 1, deep)) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jv *o = jdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !equal_at(a.u.d->v[i], *o, depth + 1, deep)) return false;
        }
        return true;
    case JV_RANGE: {
        const int64_t na = range_len(a.u.rg), nb = range_len(b.u.rg);
        if (na != nb) return false;
        return na == 0 || (a.u.rg->start == b.u.rg->start && (na == 1 || a.u.rg->step == b.u.rg->step));
    }
    case JV_METHOD: return a.sub == b.sub && a.u.o == b.u.o;
    case JV_FUNC: return a.sub == b.sub;
    case JV_ITER:
        if (a.u.it->kind == IT_DICT_KEYS && b.u.it->kind == IT_DICT_KEYS) {
            if (a.u.it->items->n != b.u.it->items->n) return false;
            for (size_t i = 0; i < a.u.it->items->n; i++) {
                bool found = false;
                for (size_t j = 0; j < b.u.it->items->n && !found; j++)
                    found = equal_at(a.u.it->items->v[i], b.u.it->items->v[j], depth + 1, deep);
                if (!found) return false;
            }
            return true;
        }
        return a.u.o == b.u.o;
    default: return a.u.o == b.u.o;
    }
}

bool jv_equal(jv a, jv b, bool *too_deep) { return equal_at(a, b, 0, too_deep); }

/* Tuples nested deeper than JV_MAX_NEST count as unhashable (their hash would need
 * unbounded stack). */
static bool hashable_at(jv v, int depth) {
    switch (v.kind) {
    case JV_LIST:
        if (!(v.flags & JF_TUPLE) || depth > JV_MAX_NEST) return false;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!hashable_at(v.u.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
    case JV_NS: return false;
    case JV_ITER:
        return v.u.it->kind != IT_DICT_KEYS && v.u.it->kind != IT_DICT_VALUES && v.u.it->kind != IT_DICT_ITEMS;
    default: return true;
    }
}

bool jv_hashable(jv v) { return hashable_at(v, 0); }

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_at(jv v, int depth) {
    switch (v.kind) {
    case JV_BOOL:
    case JV_INT: return mix((uint64_t)v.u.i);
    case JV_FLOAT:
        if (v.u.f == floor(v.u.f) && v.u.f >= -9223372036854775808.0 && v.u.f < 9223372036854775808.0)
            return mix((uint64_t)(int64_t)v.u.f);
        {
            uint64_t bits;
            memcpy(&bits, &v.u.f, sizeof bits);
            return mix(bits);
        }
    case JV_STR: {
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < v.u.s->len; i++) h = (h ^ (unsigned char)v.u.s->b[i]) * 1099511628211ull;
        return h;
    }
    case JV_LIST: {
        uint64_t h = 0x345678;
        for (size_t i = 0; i < v.u.l->n && i < 64 && depth < JV_MAX_NEST; i++)
            h = mix(h ^ hash_at(v.u.l->v[i], depth + 1));
        return h;
    }
    case JV_NONE: return 0x9e3779b97f4a7c15ull;
    case JV_UNDEF: return 0x51ed270b27ull;
    default: return mix((uint64_t)(uintptr_t)v.u.o);
    }
}

uint64_t jv_hash(jv v) { return hash_at(v, 0); }

static bool compare_at(jv a, jv b, int *cmp, const char **why, int depth) {
    if (depth > JV_MAX_NEST) {
        *why = "values nested too deeply to compare";
        return false;
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            *cmp = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
            return true;
        }
        const long double x = a.kind == JV_FLOAT ? a.u.f : (long double)a.u.i;
        const long double y = b.kind == JV_FLOAT ? b.u.f : (long double)b.u.i;
        *cmp = x < y ? -1 : x > y ? 1 : 0; /* NaN: neither less nor greater */
        return true;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        const size_t n = CN_MIN(a.u.s->len, b.u.s->len);
        const int c = memcmp(a.u.s->b, b.u.s->b, n);
        *cmp = c < 0 ? -1 : c > 0 ? 1 : a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        return true;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JF_TUPLE) == (b.flags & JF_TUPLE)) {
        const size_t n = CN_MIN(a.u.l->n, b.u.l->n);
        bool deep = false;
        for (size_t i = 0; i < n; i++) {
            if (equal_at(a.u.l->v[i], b.u.l->v[i], depth + 1, &deep)) continue;
            if (deep) {
                *why = "values nested too deeply to compare";
                return false;
            }
            return compare_at(a.u.l->v[i], b.u.l->v[i], cmp, why, depth + 1);
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return true;
    }
    *why = NULL;
    return false;
}

bool jv_compare(jv a, jv b, int *cmp, const char **why) { return compare_at(a, b, cmp, why, 0); }

/* ---- json.dumps ---- */

static void json_str(jbuf *b, const char *s, size_t n, bool ascii) {
    jbuf_putc(b, '"');
    size_t run = 0; /* bytes copied as they are, flushed in one put */
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                                      : NULL;
        /* ensure_ascii escapes everything outside ' '..'~', DEL included */
        if (!esc && c >= 0x20 && (c < 0x7F ? true : !ascii)) {
            if (!run) run = i + 1; /* start marker, offset + 1 */
            i++;
            continue;
        }
        if (run) {
            jbuf_put(b, s + run - 1, i - (run - 1));
            run = 0;
        }
        if (esc) {
            jbuf_put(b, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            jbuf_printf(b, "\\u%04x", c);
            i++;
        } else { /* ensure_ascii and a non-ASCII code point */
            uint32_t cp;
            bool ok;
            i += ju8_next(s + i, n - i, &cp, &ok);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                jbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                jbuf_printf(b, "\\u%04x", cp);
            }
        }
    }
    if (run) jbuf_put(b, s + run - 1, n - (run - 1));
    jbuf_putc(b, '"');
}

static void json_newline(jbuf *b, const jjson_opts *o, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < level; i++) jbuf_put(b, o->indent, o->indent_len);
}

/* A dict key as json.dumps writes it: strings as they are, numbers, booleans and None
 * as their JSON text; anything else is an error. */
static bool json_key(jbuf *b, jv k, const jjson_opts *o, char *why) {
    char tmp[40];
    switch (k.kind) {
    case JV_STR: json_str(b, k.u.s->b, k.u.s->len, o->ensure_ascii); return true;
    case JV_INT: jbuf_printf(b, "\"%lld\"", (long long)k.u.i); return true;
    case JV_BOOL: jbuf_put(b, k.u.i ? "\"true\"" : "\"false\"", k.u.i ? 6 : 7); return true;
    case JV_NONE: jbuf_put(b, "\"null\"", 6); return true;
    case JV_FLOAT:
        if (isnan(k.u.f)) strcpy(tmp, "NaN");
        else if (isinf(k.u.f)) strcpy(tmp, k.u.f < 0 ? "-Infinity" : "Infinity");
        else jpy_float_repr(k.u.f, tmp);
        jbuf_printf(b, "\"%s\"", tmp);
        return true;
    default: snprintf(why, 128, "keys must be str, int, float, bool or None, not %s", jv_type_name(k)); return false;
    }
}

static bool json_any(jbuf *b, jv v, const jjson_opts *o, char *why, int level);

static int cmp_keys(const void *pa, const void *pb, void *ok) {
    const jv *a = *(const jv *const *)pa, *b = *(const jv *const *)pb;
    int c = 0;
    const char *why;
    if (!jv_compare(*a, *b, &c, &why)) *(bool *)ok = false;
    return c;
}

static bool json_dict(jbuf *b, const jdict *d, const jjson_opts *o, char *why, int level) {
    if (d->n == 0) return jbuf_put(b, "{}", 2);
    const jv **keys = malloc(d->n * sizeof *keys);
    if (!keys) {
        b->oom = true;
        return false;
    }
    for (size_t i = 0; i < d->n; i++) keys[i] = &d->k[i];
    if (o->sort_keys) {
        bool ok = true;
        qsort_r(keys, d->n, sizeof *keys, cmp_keys, &ok);
        if (!ok) {
            free(keys);
            snprintf(why, 128, "'<' not supported between the dict's keys (sort_keys)");
            return false;
        }
    }
    jbuf_putc(b, '{');
    bool ok = true;
    for (size_t i = 0; i < d->n && ok; i++) {
        if (i) jbuf_put(b, o->item_sep, o->item_sep_len);
        if (o->has_indent) json_newline(b, o, level + 1);
        ok = json_key(b, *keys[i], o, why);
        if (ok) {
            jbuf_put(b, o->key_sep, o->key_sep_len);
            ok = json_any(b, d->v[keys[i] - d->k], o, why, level + 1);
        }
    }
    free(keys);
    if (!ok) return false;
    if (o->has_indent) json_newline(b, o, level);
    return jbuf_putc(b, '}');
}

static bool json_any(jbuf *b, jv v, const jjson_opts *o, char *why, int level) {
    char tmp[40];
    if (b->over || b->oom) return false;
    if (level > JV_MAX_NEST) {
        snprintf(why, 128, "a value nested too deeply for tojson");
        return false;
    }
    switch (v.kind) {
    case JV_NONE: return jbuf_put(b, "null", 4);
    case JV_BOOL: return v.u.i ? jbuf_put(b, "true", 4) : jbuf_put(b, "false", 5);
    case JV_INT: return jbuf_printf(b, "%lld", (long long)v.u.i);
    case JV_FLOAT:
        if (isnan(v.u.f)) return jbuf_put(b, "NaN", 3);
        if (isinf(v.u.f)) return v.u.f < 0 ? jbuf_put(b, "-Infinity", 9) : jbuf_put(b, "Infinity", 8);
        jpy_float_repr(v.u.f, tmp);
        return jbuf_put(b, tmp, strlen(tmp));
    case JV_STR: json_str(b, v.u.s->b, v.u.s->len, o->ensure_ascii); return true;
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->n == 0) return jbuf_put(b, "[]", 2);
        jbuf_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jbuf_put(b, o->item_sep, o->item_sep_len);
            if (o->has_indent) json_newline(b, o, level + 1);
            if (!json_any(b, l->v[i], o, why, level + 1)) return false;
        }
        if (o->has_indent) json_newline(b, o, level);
        return jbuf_putc(b, ']');
    }
    case JV_DICT: return json_dict(b, v.u.d, o, why, level);
    default: snprintf(why, 128, "Object of type %s is not JSON serializable", jv_type_name(v)); return false;
    }
}

bool jv_write_json(jbuf *b, jv v, const jjson_opts *o, char *why) {
    why[0] = 0;
    return json_any(b, v, o, why, 0) && !b->over && !b->oom;
}

/* ---- JSON input ---- */

static bool from_json(json_t *j, jv *out) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = jdict_new(json_object_size(j));
        if (!d) return false;
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            jv val;
            jstr *ks = jstr_new(k, strlen(k));
            if (!ks || !from_json(v, &val)) {
                if (ks) jv_unref(jv_str(ks));
                jv_unref(jv_dict(d));
                return false;
            }
            if (!jdict_set(d, jv_str(ks), val)) {
                jv_unref(jv_dict(d));
                return false;
            }
        }
        *out = jv_dict(d);
        return true;
    }
    case JSON_ARRAY: {
        jlist *l = jlist_new(json_array_size(j));
        if (!l) return false;
        for (size_t i = 0; i < json_array_size(j); i++) {
            jv val;
            if (!from_json(json_array_get(j, i), &val) || !jlist_push(l, val)) {
                jv_unref(jv_list(l, false));
                return false;
            }
        }
        *out = jv_list(l, false);
        return true;
    }
    case JSON_STRING: {
        jstr *s = jstr_new(json_string_value(j), json_string_length(j));
        if (!s) return false;
        *out = jv_str(s);
        return true;
    }
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return true;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return true;
    case JSON_TRUE: *out = jv_bool(true); return true;
    case JSON_FALSE: *out = jv_bool(false); return true;
    default: *out = jv_none(); return true;
    }
}

bool jv_from_json_text(const char *s, size_t n, bool need_object, jv *out, char *why, size_t why_len) {
    json_error_t e;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (!j) {
        snprintf(why, why_len, "invalid JSON at line %d, column %d: %s", e.line, e.column, e.text);
        return false;
    }
    if (need_object && !json_is_object(j)) {
        json_decref(j);
        snprintf(why, why_len, "expected a JSON object");
        return false;
    }
    const bool ok = from_json(j, out);
    json_decref(j);
    if (!ok) snprintf(why, why_len, "out of memory");
    return ok;
}
