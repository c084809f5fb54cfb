/* jinja_builtins.c — what a template can call: jinja2's filters and tests, the Python
 * methods of str, list, tuple and dict that templates use (the mutating ones refused as
 * the immutable sandbox refuses them), loop.cycle / loop.changed, and the globals
 * (range, dict, namespace, and HF's raise_exception and strftime_now). tojson is Hugging
 * Face's: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False), not jinja2's HTML-safe one.
 *
 * Each follows the Python function it stands for: its parameters (positional and by
 * keyword), its results' types (a generator from select or map prints as one and is
 * true even when empty; items() is a view), its errors. Filters jinja2 has that no chat
 * template uses (groupby, batch, slice, wordwrap, urlize, xmlattr, urlencode,
 * filesizeformat, pprint, striptags, random) are known names that fail when run, so
 * templates naming them still parse as under jinja2.
 *
 * Filters, tests and str methods are tables of small handlers, one row a name: its
 * parameters, bound by name before the handler runs as Python binds them (so every
 * "takes at most", "unexpected keyword" and "multiple values" error is jr_bind's), and
 * the int a handler shared by several names is told (the case of upper / lower, the
 * side of lstrip / rstrip). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja_impl.h"

/* ---- the tables' shape ---- */

/* One call of a builtin from the tables below (filters, str methods): v the filter's
 * input or the method's receiver, p the parameters bound by name (borrowed, missing when
 * not given), a the arguments as the template passed them, arg the table entry's. */
typedef struct {
    jv v;
    jv p[4];
    const jargs *a;
    const char *name;
    int arg;
} jcall;

typedef bool (*jb_fn)(jr *r, const jcall *c, jv *out);

typedef struct {
    const char *name;
    jb_fn fn;              /* NULL: a name jinja2 (or Python) has that cinder does not run */
    const char *params[4]; /* bound by name before fn runs, NULL-ended */
    int arg;               /* what a handler that serves several names needs to know */
    bool raw;              /* fn reads c->a itself (any number of arguments) */
    bool soft_str;         /* filters: the input made a string first, as jinja2's soft_str */
    uint8_t on;            /* methods: the receivers it exists on (R_*) */
} jb_entry;

/* Python methods by id; the receivers each one exists on. */
enum { R_STR = 1, R_LIST = 2, R_TUPLE = 4, R_DICT = 8, R_LOOP = 16, R_RANGE = 32, R_MUT_LIST = 64, R_MUT_DICT = 128 };
enum {
    M_CAPITALIZE,
    M_CASEFOLD,
    M_CENTER,
    M_COUNT,
    M_ENDSWITH,
    M_FIND,
    M_FORMAT,
    M_INDEX,
    M_ISALNUM,
    M_ISALPHA,
    M_ISASCII,
    M_ISDECIMAL,
    M_ISDIGIT,
    M_ISLOWER,
    M_ISNUMERIC,
    M_ISSPACE,
    M_ISTITLE,
    M_ISUPPER,
    M_JOIN,
    M_LJUST,
    M_LOWER,
    M_LSTRIP,
    M_PARTITION,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_REPLACE,
    M_RFIND,
    M_RINDEX,
    M_RJUST,
    M_RPARTITION,
    M_RSPLIT,
    M_RSTRIP,
    M_SPLIT,
    M_SPLITLINES,
    M_STARTSWITH,
    M_STRIP,
    M_SWAPCASE,
    M_TITLE,
    M_UPPER,
    M_ZFILL,
    M_COPY,
    M_GET,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_CYCLE,
    M_CHANGED,
    M_APPEND,
    M_CLEAR,
    M_EXTEND,
    M_INSERT,
    M_POP,
    M_REMOVE,
    M_REVERSE,
    M_SORT,
    M_POPITEM,
    M_SETDEFAULT,
    M_UPDATE,
    M_ENCODE,
    M_EXPANDTABS,
    M_FORMAT_MAP,
    M_ISIDENTIFIER,
    M_ISPRINTABLE,
    M_TRANSLATE,
    M_MAKETRANS,
    M_FROMKEYS,
    M_COUNT_ALL
};

enum { G_RANGE, G_DICT, G_NAMESPACE, G_RAISE_EXCEPTION, G_STRFTIME_NOW, G_LIPSUM, G_CYCLER, G_JOINER, G_COUNT_ALL };
static const char *const GLOBALS[G_COUNT_ALL] = {"range",        "dict",   "namespace", "raise_exception",
                                                 "strftime_now", "lipsum", "cycler",    "joiner"};

/* The index of name in a table whose rows begin with their name (a const char *), or -1. */
static int find_name(const void *table, size_t n, size_t row_size, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(*(const char *const *)((const char *)table + i * row_size), name)) return (int)i;
    return -1;
}
#define FIND(table, name) find_name(table, CN_ARRAY_LEN(table), sizeof *(table), name)

int jb_global_id(const char *name) { return FIND(GLOBALS, name); }

/* jpy_strip's sides and pad_str's alignments, by name */
enum { STRIP_LEFT = 1, STRIP_RIGHT = 2, STRIP_BOTH = 3 };
enum { PAD_CENTER, PAD_LJUST, PAD_RJUST };

/* ---- helpers ---- */

static bool is_true_arg(jv v) { return !jv_is_missing(v) && jv_truthy(v); }

static bool new_list(jr *r, size_t cap, jlist **out) {
    if (!jr_steps(r, cap)) return false;
    *out = jlist_new(cap);
    return *out ? true : jr_oom(r);
}

static bool push(jr *r, jlist *l, jv v) { return jlist_push(l, v) ? true : jr_oom(r); }

static bool make_iter(jr *r, jlist *items, jiter_kind kind, jv *out) {
    jiter *it = calloc(1, sizeof *it);
    if (!it) {
        jv_unref(jv_list(items, false));
        return jr_oom(r);
    }
    it->h = (jobj){.rc = 1, .type = JV_ITER};
    it->items = items;
    it->kind = kind;
    *out = (jv){.kind = JV_ITER, .u.it = it};
    return true;
}

static bool tuple2(jr *r, jv a, jv b, jv *out) {
    jlist *t = jlist_new(2);
    if (!t) return jr_oom(r);
    jlist_push(t, jv_ref(a));
    jlist_push(t, jv_ref(b));
    *out = jv_list(t, true);
    return true;
}

static bool need_str(jr *r, jv v, const char *what) {
    if (v.kind == JV_STR) return true;
    return jr_fail(r, "%s must be str, not %s", what, jv_type_name(v));
}

static bool need_int(jr *r, jv v, const char *what, int64_t *out) {
    if (jv_is_intlike(v)) {
        *out = v.u.i;
        return true;
    }
    return jr_fail(r, "%s: '%s' object cannot be interpreted as an integer", what, jv_type_name(v));
}

/* jinja2's soft_str: strings as they are (Markup stays Markup), anything else str(). */
static bool soft_str(jr *r, jv v, jv *out) {
    if (v.kind == JV_STR) {
        *out = jv_ref(v);
        return true;
    }
    return jr_to_str(r, v, out);
}

/* Runs a table entry: binds the parameters (unless raw), makes the input a string when
 * the entry asks, then calls the handler. */
static bool jb_run(jr *r, const jb_entry *e, jv v, const jargs *a, jv *out) {
    jcall c = {.v = v, .a = a, .name = e->name, .arg = e->arg};
    size_t n = 0;
    while (n < CN_ARRAY_LEN(e->params) && e->params[n]) n++;
    if (!e->raw && !jr_bind(r, e->name, e->params, n, a, c.p)) return false;
    if (!e->soft_str) return e->fn(r, &c, out);
    if (!soft_str(r, v, &c.v)) return false;
    const bool ok = e->fn(r, &c, out);
    jv_unref(c.v);
    return ok;
}

/* Python's len(). */
static bool py_len(jr *r, jv v, int64_t *n) {
    switch (v.kind) {
    case JV_UNDEF: *n = 0; return true;
    case JV_STR: *n = (int64_t)jstr_ncp(v.u.s); return true;
    case JV_LIST: *n = (int64_t)v.u.l->n; return true;
    case JV_DICT: *n = (int64_t)v.u.d->n; return true;
    case JV_LOOP: *n = (int64_t)v.u.loop->items->n; return true;
    case JV_ITER:
        if (v.u.it->kind >= IT_DICT_KEYS) {
            *n = (int64_t)v.u.it->items->n;
            return true;
        }
        break;
    case JV_RANGE: {
        jlist *l;
        if (!jr_iterate(r, v, &l)) return false;
        *n = (int64_t)l->n;
        jv_unref(jv_list(l, false));
        return true;
    }
    default: break;
    }
    return jr_fail(r, "object of type '%s' has no len()", jv_type_name(v));
}

/* make_attrgetter: "a.b.0" looked up part by part with getitem (digit parts as ints). */
static bool attr_get(jr *r, jv item, jv attr, jv def, jv *out) {
    if (attr.kind != JV_STR) {
        if (!jr_getitem(r, item, attr, out)) return false;
    } else {
        jv cur = jv_ref(item);
        const char *s = attr.u.s->b, *end = s + attr.u.s->len;
        while (true) {
            const char *dot = memchr(s, '.', (size_t)(end - s));
            const char *pe = dot ? dot : end;
            jv key, next;
            if (!jr_key_from_text(r, s, pe, &key)) {
                jv_unref(cur);
                return false;
            }
            const bool ok = jr_getitem(r, cur, key, &next);
            jv_unref(key);
            jv_unref(cur);
            if (!ok) return false;
            cur = next;
            if (!jv_is_missing(def) && def.kind != JV_NONE && cur.kind == JV_UNDEF) {
                jv_unref(cur);
                cur = jv_ref(def);
            }
            if (!dot) break;
            s = dot + 1;
        }
        *out = cur;
        return true;
    }
    if (!jv_is_missing(def) && def.kind != JV_NONE && out->kind == JV_UNDEF) {
        jv_unref(*out);
        *out = jv_ref(def);
    }
    return true;
}

/* ignore_case: strings lowered, others as they are. */
static bool ignore_case(jr *r, jv v, jv *out) {
    if (v.kind != JV_STR) {
        *out = jv_ref(v);
        return true;
    }
    jbuf b;
    jr_buf_init(r, &b);
    jpy_case(&b, v.u.s->b, v.u.s->len, JCASE_LOWER);
    return jr_buf_to_str_as(r, &b, v.flags & JF_MARKUP, out);
}

/* A stable merge sort of idx[0..n) by keys (Python's sorted). */
static bool sort_idx(jr *r, const jv *keys, size_t *idx, size_t n, bool reverse) {
    size_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return jr_oom(r);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            const size_t mid = CN_MIN(lo + w, n), hi = CN_MIN(lo + 2 * w, n);
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                const char *why = NULL;
                /* take from the right only when it sorts strictly before the left */
                if (!jv_compare(keys[idx[j]], keys[idx[i]], &c, &why)) {
                    free(tmp);
                    if (why) return jr_fail(r, "%s", why);
                    return jr_fail(r, "'<' not supported between instances of '%s' and '%s'",
                                   jv_type_name(keys[idx[j]]), jv_type_name(keys[idx[i]]));
                }
                if (reverse) c = -c;
                tmp[k++] = c < 0 ? idx[j++] : idx[i++];
            }
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
        if (!jr_steps(r, n)) {
            free(tmp);
            return false;
        }
    }
    free(tmp);
    return true;
}

/* ---- string helpers ---- */

/* Byte range of s[start:end] with Python's clamping (code point indices). */
static bool cp_range(jr *r, jstr *s, jv start, jv end, size_t *a, size_t *z) {
    const int64_t n = (int64_t)jstr_ncp(s);
    int64_t lo = 0, hi = n;
    if (!jv_is_missing(start) && start.kind != JV_NONE) {
        if (!need_int(r, start, "slice indices", &lo)) return false;
        if (lo < 0) lo = CN_MAX(lo + n, 0);
    }
    if (!jv_is_missing(end) && end.kind != JV_NONE) {
        if (!need_int(r, end, "slice indices", &hi)) return false;
        if (hi < 0) hi = CN_MAX(hi + n, 0);
    }
    lo = CN_MIN(lo, n);
    hi = CN_MIN(hi, n);
    *a = ju8_offset(s, (size_t)lo);
    *z = hi > lo ? ju8_offset(s, (size_t)hi) : *a;
    return true;
}

/* The last needle[0..k) in h[0..n), or NULL; an empty needle is found at the end. */
static const char *memrmem(const char *h, size_t n, const char *needle, size_t k) {
    if (k > n) return NULL;
    for (size_t j = n - k + 1; j-- > 0;)
        if (memcmp(h + j, needle, k) == 0) return h + j;
    return NULL;
}

/* Where the line that starts at s[i] ends (at str.splitlines' line breaks), and in *eol
 * the length of its break: 0 at the end of s, 2 for \r\n. */
static size_t line_end(const char *s, size_t n, size_t i, size_t *eol) {
    *eol = 0;
    for (size_t j = i; j < n;) {
        uint32_t cp;
        bool ok;
        const size_t k = ju8_next(s + j, n - j, &cp, &ok);
        if (ok && (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
                   cp == 0x85 || cp == 0x2028 || cp == 0x2029)) {
            *eol = k + (cp == '\r' && j + 1 < n && s[j + 1] == '\n');
            return j;
        }
        j += k;
    }
    return n;
}

/* Appends s[0..n) to l as a string, Markup when markup says so. */
static bool push_piece(jr *r, jlist *l, const char *s, size_t n, uint8_t markup) {
    jv piece;
    if (!jr_str(r, s, n, &piece)) return false;
    piece.flags = markup;
    return push(r, l, piece);
}

/* str.split(sep, maxsplit) with a separator: pieces left to right */
static bool split_sep(jr *r, jlist *l, jv str, const jstr *sep, int64_t maxsplit) {
    const char *s = str.u.s->b;
    const size_t n = str.u.s->len, k = sep->len;
    const uint8_t fl = str.flags & JF_MARKUP;
    size_t i = 0;
    for (; maxsplit != 0; maxsplit--) {
        const char *f = memmem(s + i, n - i, sep->b, k);
        if (!f) break;
        if (!push_piece(r, l, s + i, (size_t)(f - s) - i, fl)) return false;
        i = (size_t)(f - s) + k;
    }
    return push_piece(r, l, s + i, n - i, fl);
}

/* str.rsplit(sep, maxsplit): pieces right to left (the caller reverses them) */
static bool rsplit_sep(jr *r, jlist *l, jv str, const jstr *sep, int64_t maxsplit) {
    const char *s = str.u.s->b;
    const size_t k = sep->len;
    const uint8_t fl = str.flags & JF_MARKUP;
    size_t z = str.u.s->len;
    for (; maxsplit != 0 && z >= k; maxsplit--) {
        const char *at = memrmem(s, z, sep->b, k);
        if (!at) break;
        const size_t f = (size_t)(at - s);
        if (!push_piece(r, l, s + f + k, z - f - k, fl)) return false;
        z = f;
    }
    return push_piece(r, l, s, z, fl);
}

/* str.split(None, maxsplit): runs of Unicode whitespace separate, none at the ends */
static bool split_ws(jr *r, jlist *l, jv str, int64_t maxsplit) {
    const char *s = str.u.s->b;
    const size_t n = str.u.s->len;
    const uint8_t fl = str.flags & JF_MARKUP;
    for (size_t i = 0;; maxsplit--) {
        size_t a, z;
        jpy_strip(s + i, n - i, NULL, 0, STRIP_LEFT, &a, &z);
        i += a;
        if (i >= n) return true;
        if (maxsplit == 0) return push_piece(r, l, s + i, n - i, fl);
        size_t j = i;
        while (j < n) {
            uint32_t cp;
            bool ok;
            const size_t k = ju8_next(s + j, n - j, &cp, &ok);
            if (ok && jpy_isspace(cp)) break;
            j += k;
        }
        if (!push_piece(r, l, s + i, j - i, fl)) return false;
        i = j;
    }
}

/* str.rsplit(None, maxsplit): the same from the right (the caller reverses the pieces) */
static bool rsplit_ws(jr *r, jlist *l, jv str, int64_t maxsplit) {
    const char *s = str.u.s->b;
    const uint8_t fl = str.flags & JF_MARKUP;
    for (size_t z = str.u.s->len;; maxsplit--) {
        size_t a, e;
        jpy_strip(s, z, NULL, 0, STRIP_RIGHT, &a, &e);
        z = e;
        if (z == 0) return true;
        if (maxsplit == 0) return push_piece(r, l, s, z, fl);
        size_t j = z;
        while (j > 0) {
            const size_t k = ju8_prev(s, j);
            uint32_t cp;
            bool ok;
            ju8_next(s + j - k, k, &cp, &ok);
            if (ok && jpy_isspace(cp)) break;
            j -= k;
        }
        if (!push_piece(r, l, s + j, z - j, fl)) return false;
        z = j;
    }
}

/* Python's str.split / rsplit (right): by sep, or on whitespace when sep is None;
 * maxsplit < 0 for no limit. */
static bool split_str(jr *r, jv str, jv sep, int64_t maxsplit, bool right, jv *out) {
    jlist *l;
    if (!new_list(r, 0, &l)) return false;
    bool ok;
    if (sep.kind == JV_STR && sep.u.s->len == 0) ok = jr_fail(r, "empty separator");
    else if (sep.kind == JV_STR) ok = (right ? rsplit_sep : split_sep)(r, l, str, sep.u.s, maxsplit);
    else ok = (right ? rsplit_ws : split_ws)(r, l, str, maxsplit);
    if (!ok) {
        jv_unref(jv_list(l, false));
        return false;
    }
    for (size_t i = 0; right && i < l->n / 2; i++) {
        const jv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    *out = jv_list(l, false);
    return true;
}

static bool strip_str(jr *r, jv s, jv chars, int which, jv *out) {
    if (jv_is_missing(chars) || chars.kind == JV_NONE) chars = jv_missing();
    else if (!need_str(r, chars, "strip arg")) return false;
    size_t a, z;
    jpy_strip(s.u.s->b, s.u.s->len, jv_is_missing(chars) ? NULL : chars.u.s->b,
              jv_is_missing(chars) ? 0 : chars.u.s->len, which, &a, &z);
    if (!jr_str(r, s.u.s->b + a, z - a, out)) return false;
    out->flags = s.flags & JF_MARKUP;
    return true;
}

static bool case_str(jr *r, jv s, jcase how, jv *out) {
    jbuf b;
    jr_buf_init(r, &b);
    jpy_case(&b, s.u.s->b, s.u.s->len, how);
    return jr_buf_to_str_as(r, &b, s.flags & JF_MARKUP, out);
}

static bool replace_str(jr *r, jv s, jv old, jv rep, int64_t count, bool markup, jv *out) {
    const char *p = s.u.s->b;
    const size_t n = s.u.s->len, k = old.u.s->len;
    jbuf b;
    jr_buf_init(r, &b);
    if (k == 0) { /* Python inserts the replacement around every code point */
        for (size_t i = 0; i <= n;) {
            if (count != 0) {
                jbuf_put(&b, rep.u.s->b, rep.u.s->len);
                count--;
            }
            if (i == n) break;
            uint32_t cp;
            bool ok;
            const size_t c = ju8_next(p + i, n - i, &cp, &ok);
            jbuf_put(&b, p + i, c);
            i += c;
        }
    } else {
        size_t i = 0;
        while (count != 0) {
            const char *f = memmem(p + i, n - i, old.u.s->b, k);
            if (!f) break;
            jbuf_put(&b, p + i, (size_t)(f - p) - i);
            jbuf_put(&b, rep.u.s->b, rep.u.s->len);
            i = (size_t)(f - p) + k;
            count--;
        }
        jbuf_put(&b, p + i, n - i);
    }
    return jr_buf_to_str_as(r, &b, markup, out);
}

/* str.center / ljust / rjust with a one-character fill. */
static bool pad_str(jr *r, jv s, int64_t width, jv fill, int how, jv *out) {
    const char *f = " ";
    size_t fl = 1;
    if (!jv_is_missing(fill)) {
        if (!need_str(r, fill, "fill character")) return false;
        if (jstr_ncp(fill.u.s) != 1) return jr_fail(r, "The fill character must be exactly one character long");
        f = fill.u.s->b;
        fl = fill.u.s->len;
    }
    const int64_t len = (int64_t)jstr_ncp(s.u.s);
    if (width <= len) {
        *out = jv_ref(s);
        return true;
    }
    if (width > (int64_t)r->lim.max_output_bytes)
        return jr_limit(r, "the output budget is spent: a padded string grew too large");
    const int64_t marg = width - len;
    int64_t left = how == 0 ? marg / 2 + (marg & width & 1) : how == 1 ? 0 : marg;
    jbuf b;
    jr_buf_init(r, &b);
    for (int64_t i = 0; i < left; i++) jbuf_put(&b, f, fl);
    jbuf_put(&b, s.u.s->b, s.u.s->len);
    for (int64_t i = 0; i < marg - left; i++) jbuf_put(&b, f, fl);
    return jr_buf_to_str_as(r, &b, s.flags & JF_MARKUP, out);
}

/* Does s[a..z) start (or end) with any of prefix (a string or a tuple of them)? */
static bool affix_test(jr *r, jv s, jv affix, size_t a, size_t z, bool end, bool *res) {
    *res = false;
    const jv *items = &affix;
    size_t n = 1;
    if (affix.kind == JV_LIST && (affix.flags & JF_TUPLE)) {
        items = affix.u.l->v;
        n = affix.u.l->n;
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].kind != JV_STR)
            return jr_fail(r, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith",
                           jv_type_name(items[i]));
        const size_t k = items[i].u.s->len;
        if (k > z - a) continue;
        if (memcmp(s.u.s->b + (end ? z - k : a), items[i].u.s->b, k) == 0) *res = true;
    }
    return true;
}

/* ---- str methods ---- */

/* upper, lower, casefold, title, capitalize, swapcase; the case filters (arg: the jcase) */
static bool case_fn(jr *r, const jcall *c, jv *out) { return case_str(r, c->v, (jcase)c->arg, out); }

/* strip, lstrip, rstrip; the trim filter (arg: the sides) */
static bool strip_fn(jr *r, const jcall *c, jv *out) { return strip_str(r, c->v, c->p[0], c->arg, out); }

/* split, rsplit (arg: from the right) */
static bool m_split(jr *r, const jcall *c, jv *out) {
    int64_t maxsplit = -1;
    if (!jv_is_missing(c->p[1]) && !need_int(r, c->p[1], c->name, &maxsplit)) return false;
    if (!jv_is_missing(c->p[0]) && c->p[0].kind != JV_NONE && !need_str(r, c->p[0], "sep")) return false;
    return split_str(r, c->v, c->p[0], maxsplit, c->arg, out);
}

static bool m_splitlines(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    const bool keep = is_true_arg(c->p[0]);
    jlist *l;
    if (!new_list(r, 0, &l)) return false;
    for (size_t i = 0; i < s->len;) {
        size_t eol;
        const size_t j = line_end(s->b, s->len, i, &eol);
        if (!push_piece(r, l, s->b + i, j - i + (keep ? eol : 0), c->v.flags & JF_MARKUP)) goto fail;
        i = j + eol;
    }
    *out = jv_list(l, false);
    return true;
fail:
    jv_unref(jv_list(l, false));
    return false;
}

/* startswith, endswith (arg: the end) */
static bool m_affix(jr *r, const jcall *c, jv *out) {
    if (jv_is_missing(c->p[0])) return jr_fail(r, "%s() takes at least 1 argument (0 given)", c->name);
    size_t lo, hi;
    bool res;
    if (!cp_range(r, c->v.u.s, c->p[1], c->p[2], &lo, &hi) || !affix_test(r, c->v, c->p[0], lo, hi, c->arg, &res))
        return false;
    *out = jv_bool(res);
    return true;
}

static bool m_replace(jr *r, const jcall *c, jv *out) {
    const bool mk = c->v.flags & JF_MARKUP;
    if (!need_str(r, c->p[0], "replace() argument 1") || !need_str(r, c->p[1], "replace() argument 2")) return false;
    int64_t count = -1;
    if (!jv_is_missing(c->p[2]) && !need_int(r, c->p[2], c->name, &count)) return false;
    jv rep = jv_ref(c->p[1]), old = jv_ref(c->p[0]);
    if (mk) { /* Markup.replace escapes its arguments */
        jv e1, e2;
        const bool ok = jr_escape(r, c->p[0], &e1) && (jr_escape(r, c->p[1], &e2) || (jv_unref(e1), false));
        jv_unref(rep);
        jv_unref(old);
        if (!ok) return false;
        old = e1;
        rep = e2;
    }
    const bool ok = replace_str(r, c->v, old, rep, count, mk, out);
    jv_unref(rep);
    jv_unref(old);
    return ok;
}

/* The substring argument of find, index and count, and their s[start:end] in bytes */
static bool sub_args(jr *r, const jcall *c, size_t *lo, size_t *hi) {
    return need_str(r, c->p[0], "substring") && cp_range(r, c->v.u.s, c->p[1], c->p[2], lo, hi);
}

/* find, rfind, index, rindex (arg: FIND_* flags): the code point index of sub in s[start:end] */
enum { FIND_RIGHT = 1, FIND_RAISE = 2 };
static bool m_find(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    size_t lo, hi;
    if (!sub_args(r, c, &lo, &hi)) return false;
    const char *sub = c->p[0].u.s->b;
    const size_t k = c->p[0].u.s->len;
    const char *f = NULL;
    if (!(c->arg & FIND_RIGHT)) f = k <= hi - lo ? memmem(s->b + lo, hi - lo, sub, k) : NULL;
    else f = memrmem(s->b + lo, hi - lo, sub, k);
    const int64_t at = f ? (int64_t)ju8_count(s->b, (size_t)(f - s->b)) : -1;
    if (at < 0 && (c->arg & FIND_RAISE)) return jr_fail(r, "substring not found");
    *out = jv_int(at);
    return true;
}

static bool m_count(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    size_t lo, hi;
    if (!sub_args(r, c, &lo, &hi)) return false;
    const char *sub = c->p[0].u.s->b;
    const size_t k = c->p[0].u.s->len;
    int64_t n = 0;
    if (k == 0) n = (int64_t)ju8_count(s->b + lo, hi - lo) + 1;
    else
        for (size_t i = lo; hi - i >= k && i <= hi;) {
            const char *f = memmem(s->b + i, hi - i, sub, k);
            if (!f) break;
            n++;
            i = (size_t)(f - s->b) + k;
        }
    *out = jv_int(n);
    return true;
}

static bool m_join(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    const bool mk = c->v.flags & JF_MARKUP;
    if (jv_is_missing(c->p[0])) return jr_fail(r, "join() takes exactly one argument (0 given)");
    jlist *l;
    if (!jr_iterate(r, c->p[0], &l)) return false;
    jbuf b;
    jr_buf_init(r, &b);
    bool ok = true;
    for (size_t i = 0; i < l->n && ok; i++) {
        if (i) jbuf_put(&b, s->b, s->len);
        jv item = l->v[i];
        if (item.kind != JV_STR) {
            ok = jr_fail(r, "sequence item %zu: expected str instance, %s found", i, jv_type_name(item));
            break;
        }
        if (mk && !(item.flags & JF_MARKUP)) {
            jv e;
            if (!(ok = jr_escape(r, item, &e))) break;
            jbuf_put(&b, e.u.s->b, e.u.s->len);
            jv_unref(e);
        } else {
            jbuf_put(&b, item.u.s->b, item.u.s->len);
        }
    }
    jv_unref(jv_list(l, false));
    if (!ok) {
        jbuf_free(&b);
        return false;
    }
    return jr_buf_to_str_as(r, &b, mk, out);
}

/* center, ljust, rjust (arg: PAD_*) */
static bool m_pad(jr *r, const jcall *c, jv *out) {
    int64_t w = 0;
    if (!need_int(r, c->p[0], c->name, &w)) return false;
    return pad_str(r, c->v, w, c->p[1], c->arg, out);
}

static bool m_zfill(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    int64_t w = 0;
    if (!need_int(r, c->p[0], c->name, &w)) return false;
    const int64_t len = (int64_t)jstr_ncp(c->v.u.s);
    if (w <= len) {
        *out = jv_ref(c->v);
        return true;
    }
    if (w > (int64_t)r->lim.max_output_bytes) return jr_limit(r, "the output budget is spent: zfill");
    jbuf b;
    jr_buf_init(r, &b);
    size_t start = 0;
    if (s->len && (s->b[0] == '+' || s->b[0] == '-')) {
        jbuf_putc(&b, s->b[0]);
        start = 1;
    }
    for (int64_t i = 0; i < w - len; i++) jbuf_putc(&b, '0');
    jbuf_put(&b, s->b + start, s->len - start);
    return jr_buf_to_str_as(r, &b, c->v.flags & JF_MARKUP, out);
}

/* partition, rpartition (arg: from the right) */
static bool m_partition(jr *r, const jcall *c, jv *out) {
    const jv self = c->v, sep = c->p[0];
    const jstr *s = self.u.s;
    const bool right = c->arg;
    if (!need_str(r, sep, "sep")) return false;
    const size_t k = sep.u.s->len;
    if (!k) return jr_fail(r, "empty separator");
    const char *f = right ? memrmem(s->b, s->len, sep.u.s->b, k) : memmem(s->b, s->len, sep.u.s->b, k);
    jv parts[3];
    if (!f) {
        jv empty;
        if (!jr_str(r, "", 0, &empty)) return false;
        parts[0] = !right ? jv_ref(self) : jv_ref(empty);
        parts[1] = jv_ref(empty);
        parts[2] = !right ? empty : jv_ref(self);
        if (right) jv_unref(empty);
    } else {
        const size_t at = (size_t)(f - s->b);
        parts[0] = parts[1] = parts[2] = jv_undef();
        if (!jr_str(r, s->b, at, &parts[0]) || !jr_str(r, f, k, &parts[1]) ||
            !jr_str(r, f + k, s->len - at - k, &parts[2])) {
            for (int i = 0; i < 3; i++) jv_unref(parts[i]);
            return false;
        }
    }
    jlist *t = jlist_new(3);
    if (!t) {
        for (int i = 0; i < 3; i++) jv_unref(parts[i]);
        return jr_oom(r);
    }
    for (int i = 0; i < 3; i++) {
        if (parts[i].kind == JV_STR) parts[i].flags = self.flags & JF_MARKUP;
        jlist_push(t, parts[i]);
    }
    *out = jv_list(t, true);
    return true;
}

/* removeprefix, removesuffix (arg: the suffix) */
static bool m_remove_affix(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    if (!need_str(r, c->p[0], c->name)) return false;
    const size_t k = c->p[0].u.s->len;
    size_t lo = 0, hi = s->len;
    if (k <= s->len && memcmp(c->arg ? s->b + s->len - k : s->b, c->p[0].u.s->b, k) == 0) {
        if (!c->arg) lo = k;
        else hi = s->len - k;
    }
    if (!jr_str(r, s->b + lo, hi - lo, out)) return false;
    out->flags = c->v.flags & JF_MARKUP;
    return true;
}

static bool m_format(jr *r, const jcall *c, jv *out) { return jr_str_format(r, c->v, c->a, out); }

/* Does cp pass str.isalnum, isalpha, ... (id: the method; first: the string's first code point)? */
static bool cp_is(int id, uint32_t cp, bool valid, bool first) {
    switch (id) {
    case M_ISALNUM: return jpy_isalpha(cp) || jpy_isdigit(cp);
    case M_ISALPHA: return jpy_isalpha(cp);
    case M_ISASCII: return valid && cp < 0x80;
    case M_ISSPACE: return jpy_isspace(cp);
    case M_ISPRINTABLE: return jpy_isprintable(cp);
    case M_ISIDENTIFIER: return cp == '_' || jpy_isalpha(cp) || (!first && jpy_isdigit(cp));
    default: return jpy_isdigit(cp); /* isdecimal, isdigit, isnumeric */
    }
}

/* The str.is* methods that every code point must pass (arg: the method id); an empty
 * string passes only isascii and isprintable. */
static bool m_is(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    bool all = s->len > 0 || c->arg == M_ISASCII || c->arg == M_ISPRINTABLE;
    for (size_t i = 0; i < s->len && all;) {
        uint32_t cp;
        bool ok;
        const size_t k = ju8_next(s->b + i, s->len - i, &cp, &ok);
        all = cp_is(c->arg, cp, ok, i == 0);
        i += k;
    }
    (void)r;
    *out = jv_bool(all);
    return true;
}

/* str.islower (upper false) / isupper: a cased code point, and none of the other case. */
static bool str_is_cased(const jstr *s, bool upper) {
    bool any = false;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        bool ok;
        i += ju8_next(s->b + i, s->len - i, &cp, &ok);
        if (upper ? jpy_islower(cp) : jpy_isupper(cp)) return false;
        any |= upper ? jpy_isupper(cp) : jpy_islower(cp);
    }
    return any;
}

/* islower, isupper (arg: upper) */
static bool m_is_cased(jr *r, const jcall *c, jv *out) {
    (void)r;
    *out = jv_bool(str_is_cased(c->v.u.s, c->arg));
    return true;
}

/* str.istitle: an upper or title character only after an uncased one, a lower one only
 * after a cased one, and some cased character. */
static bool m_istitle(jr *r, const jcall *c, jv *out) {
    const jstr *s = c->v.u.s;
    bool any = false, prev_cased = false, title = true;
    for (size_t i = 0; i < s->len && title;) {
        uint32_t cp;
        bool ok;
        i += ju8_next(s->b + i, s->len - i, &cp, &ok);
        if (jpy_isupper(cp) || jpy_istitle_char(cp)) {
            title = !prev_cased;
            prev_cased = any = true;
        } else if (jpy_islower(cp)) {
            title = prev_cased;
            prev_cased = any = true;
        } else {
            prev_cased = false;
        }
    }
    (void)r;
    *out = jv_bool(title && any);
    return true;
}

#define IS(m, id) [id] = {m, m_is, .arg = id, .on = R_STR}
#define SEQ (R_STR | R_LIST | R_TUPLE | R_RANGE)
static const jb_entry METHODS[M_COUNT_ALL] = {
    [M_CAPITALIZE] = {"capitalize", case_fn, .arg = JCASE_CAPITALIZE, .on = R_STR},
    [M_CASEFOLD] = {"casefold", case_fn, .arg = JCASE_LOWER, .on = R_STR},
    [M_CENTER] = {"center", m_pad, {"width", "fillchar"}, .arg = PAD_CENTER, .on = R_STR},
    [M_COUNT] = {"count", m_count, {"sub", "start", "end"}, .on = SEQ},
    [M_ENDSWITH] = {"endswith", m_affix, {"prefix", "start", "end"}, .arg = true, .on = R_STR},
    [M_FIND] = {"find", m_find, {"sub", "start", "end"}, .on = R_STR},
    [M_FORMAT] = {"format", m_format, .raw = true, .on = R_STR},
    [M_INDEX] = {"index", m_find, {"sub", "start", "end"}, .arg = FIND_RAISE, .on = SEQ},
    IS("isalnum", M_ISALNUM),
    IS("isalpha", M_ISALPHA),
    IS("isascii", M_ISASCII),
    IS("isdecimal", M_ISDECIMAL),
    IS("isdigit", M_ISDIGIT),
    [M_ISLOWER] = {"islower", m_is_cased, .arg = false, .on = R_STR},
    IS("isnumeric", M_ISNUMERIC),
    IS("isspace", M_ISSPACE),
    [M_ISTITLE] = {"istitle", m_istitle, .on = R_STR},
    [M_ISUPPER] = {"isupper", m_is_cased, .arg = true, .on = R_STR},
    IS("isidentifier", M_ISIDENTIFIER),
    IS("isprintable", M_ISPRINTABLE),
    [M_JOIN] = {"join", m_join, {"iterable"}, .on = R_STR},
    [M_LJUST] = {"ljust", m_pad, {"width", "fillchar"}, .arg = PAD_LJUST, .on = R_STR},
    [M_LOWER] = {"lower", case_fn, .arg = JCASE_LOWER, .on = R_STR},
    [M_LSTRIP] = {"lstrip", strip_fn, {"chars"}, .arg = STRIP_LEFT, .on = R_STR},
    [M_PARTITION] = {"partition", m_partition, {"sep"}, .on = R_STR},
    [M_REMOVEPREFIX] = {"removeprefix", m_remove_affix, {"affix"}, .on = R_STR},
    [M_REMOVESUFFIX] = {"removesuffix", m_remove_affix, {"affix"}, .arg = true, .on = R_STR},
    [M_REPLACE] = {"replace", m_replace, {"old", "new", "count"}, .on = R_STR},
    [M_RFIND] = {"rfind", m_find, {"sub", "start", "end"}, .arg = FIND_RIGHT, .on = R_STR},
    [M_RINDEX] = {"rindex", m_find, {"sub", "start", "end"}, .arg = FIND_RIGHT | FIND_RAISE, .on = R_STR},
    [M_RJUST] = {"rjust", m_pad, {"width", "fillchar"}, .arg = PAD_RJUST, .on = R_STR},
    [M_RPARTITION] = {"rpartition", m_partition, {"sep"}, .arg = true, .on = R_STR},
    [M_RSPLIT] = {"rsplit", m_split, {"sep", "maxsplit"}, .arg = true, .on = R_STR},
    [M_RSTRIP] = {"rstrip", strip_fn, {"chars"}, .arg = STRIP_RIGHT, .on = R_STR},
    [M_SPLIT] = {"split", m_split, {"sep", "maxsplit"}, .on = R_STR},
    [M_SPLITLINES] = {"splitlines", m_splitlines, {"keepends"}, .on = R_STR},
    [M_STARTSWITH] = {"startswith", m_affix, {"prefix", "start", "end"}, .on = R_STR},
    [M_STRIP] = {"strip", strip_fn, {"chars"}, .arg = STRIP_BOTH, .on = R_STR},
    [M_SWAPCASE] = {"swapcase", case_fn, .arg = JCASE_SWAP, .on = R_STR},
    [M_TITLE] = {"title", case_fn, .arg = JCASE_TITLE_WORDS, .on = R_STR},
    [M_UPPER] = {"upper", case_fn, .arg = JCASE_UPPER, .on = R_STR},
    [M_ZFILL] = {"zfill", m_zfill, {"width"}, .on = R_STR},
    /* the methods of other receivers: jb_call_method runs them */
    [M_COPY] = {"copy", .on = R_LIST | R_DICT},
    [M_GET] = {"get", .on = R_DICT},
    [M_ITEMS] = {"items", .on = R_DICT},
    [M_KEYS] = {"keys", .on = R_DICT},
    [M_VALUES] = {"values", .on = R_DICT},
    [M_CYCLE] = {"cycle", .on = R_LOOP},
    [M_CHANGED] = {"changed", .on = R_LOOP},
    /* the mutating ones the immutable sandbox refuses */
    [M_APPEND] = {"append", .on = R_MUT_LIST},
    [M_CLEAR] = {"clear", .on = R_MUT_LIST | R_MUT_DICT},
    [M_EXTEND] = {"extend", .on = R_MUT_LIST},
    [M_INSERT] = {"insert", .on = R_MUT_LIST},
    [M_POP] = {"pop", .on = R_MUT_LIST | R_MUT_DICT},
    [M_REMOVE] = {"remove", .on = R_MUT_LIST},
    [M_REVERSE] = {"reverse", .on = R_MUT_LIST},
    [M_SORT] = {"sort", .on = R_MUT_LIST},
    [M_POPITEM] = {"popitem", .on = R_MUT_DICT},
    [M_SETDEFAULT] = {"setdefault", .on = R_MUT_DICT},
    [M_UPDATE] = {"update", .on = R_MUT_DICT},
    /* str methods cinder does not run */
    [M_ENCODE] = {"encode", .on = R_STR},
    [M_EXPANDTABS] = {"expandtabs", .on = R_STR},
    [M_FORMAT_MAP] = {"format_map", .on = R_STR},
    [M_TRANSLATE] = {"translate", .on = R_STR},
    [M_MAKETRANS] = {"maketrans", .on = R_STR},
    [M_FROMKEYS] = {"fromkeys", .on = R_DICT},
};
#undef IS
#undef SEQ

int jb_method_id(const char *name) { return FIND(METHODS, name); }

const char *jb_method_name(int id) { return id >= 0 && id < M_COUNT_ALL ? METHODS[id].name : "?"; }

jb_attr jb_method_attr(jr *r, jv obj, int id, jv *out) {
    if (id < 0 || id >= M_COUNT_ALL) return JB_ATTR_NONE;
    const uint8_t on = METHODS[id].on;
    uint8_t want = 0, mut = 0;
    switch (obj.kind) {
    case JV_STR: want = R_STR; break;
    case JV_LIST:
        want = obj.flags & JF_TUPLE ? R_TUPLE : R_LIST;
        mut = obj.flags & JF_TUPLE ? 0 : R_MUT_LIST;
        break;
    case JV_DICT:
        want = R_DICT;
        mut = R_MUT_DICT;
        break;
    case JV_LOOP: want = R_LOOP; break;
    case JV_RANGE: want = R_RANGE; break;
    default: return JB_ATTR_NONE;
    }
    if (on & mut) {
        char m[160];
        snprintf(m, sizeof m, "access to attribute '%s' of '%s' object is unsafe.", METHODS[id].name,
                 jv_type_name(obj));
        *out = jr_undef_msg(r, m);
        out->flags = JF_UNSAFE;
        return JB_ATTR_FOUND;
    }
    if (!(on & want)) return JB_ATTR_NONE;
    *out = (jv){.kind = JV_METHOD, .flags = obj.flags, .sub = (uint16_t)id, .u.o = jv_obj(jv_ref(obj))};
    return JB_ATTR_FOUND;
}

static bool str_method(jr *r, jv self, int id, const jargs *a, jv *out) {
    const jb_entry *m = &METHODS[id];
    if (!m->fn) return jr_fail(r, "str.%s() is not supported by cinder's template engine", m->name);
    return jb_run(r, m, self, a, out);
}

static bool no_method(jr *r, jv self, int id) {
    return jr_fail(r, "'%s' object has no method %s", jv_type_name(self), jb_method_name(id));
}

/* list.count / index, and range's and tuple's */
static bool seq_index_count(jr *r, jv self, int id, const jargs *a, jv *out) {
    static const char *const ps[] = {"value", "start", "stop"};
    jv p[3];
    if (!jr_bind(r, METHODS[id].name, ps, 3, a, p)) return false;
    jlist *l;
    if (!jr_iterate(r, self, &l)) return false;
    bool deep = false;
    int64_t c = 0, at = -1;
    for (size_t i = 0; i < l->n; i++)
        if (jv_equal(l->v[i], p[0], &deep)) {
            c++;
            if (at < 0) at = (int64_t)i;
        }
    jv_unref(jv_list(l, false));
    if (id == M_COUNT) *out = jv_int(c);
    else if (at < 0) return jr_fail(r, "value is not in %s", jv_type_name(self));
    else *out = jv_int(at);
    return true;
}

static bool list_method(jr *r, jv self, int id, const jargs *a, jv *out) {
    if (id != M_COPY) return seq_index_count(r, self, id, a, out);
    if (!jr_bind(r, "copy", NULL, 0, a, NULL)) return false;
    jlist *l;
    if (!new_list(r, self.u.l->n, &l)) return false;
    for (size_t i = 0; i < self.u.l->n; i++) jlist_push(l, jv_ref(self.u.l->v[i]));
    *out = jv_list(l, false);
    return true;
}

/* dict.items / keys / values: a view over a copy of the entries */
static bool dict_view(jr *r, const jdict *d, int id, const jargs *a, jv *out) {
    if (!jr_bind(r, METHODS[id].name, NULL, 0, a, NULL)) return false;
    jlist *l;
    if (!new_list(r, d->n, &l)) return false;
    for (size_t i = 0; i < d->n; i++) {
        jv item;
        if (id == M_ITEMS) {
            if (!tuple2(r, d->k[i], d->v[i], &item)) {
                jv_unref(jv_list(l, false));
                return false;
            }
        } else {
            item = jv_ref(id == M_KEYS ? d->k[i] : d->v[i]);
        }
        jlist_push(l, item);
    }
    return make_iter(r, l, id == M_ITEMS ? IT_DICT_ITEMS : id == M_KEYS ? IT_DICT_KEYS : IT_DICT_VALUES, out);
}

static bool dict_method(jr *r, jv self, int id, const jargs *a, jv *out) {
    const jdict *d = self.u.d;
    jv p[2];
    switch (id) {
    case M_GET: {
        static const char *const ps[] = {"key", "default"};
        if (!jr_bind(r, "get", ps, 2, a, p)) return false;
        if (jv_is_missing(p[0])) return jr_fail(r, "get expected at least 1 argument, got 0");
        if (!jv_hashable(p[0])) return jr_fail(r, "unhashable type: '%s'", jv_type_name(p[0]));
        const jv *v = jdict_get(d, p[0]);
        *out = v ? jv_ref(*v) : jv_is_missing(p[1]) ? jv_none() : jv_ref(p[1]);
        return true;
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: return dict_view(r, d, id, a, out);
    case M_COPY: {
        if (!jr_bind(r, "copy", NULL, 0, a, NULL)) return false;
        jdict *c = jdict_new(d->n);
        if (!c) return jr_oom(r);
        for (size_t i = 0; i < d->n; i++) jdict_set(c, jv_ref(d->k[i]), jv_ref(d->v[i]));
        *out = jv_dict(c);
        return true;
    }
    default: return no_method(r, self, id);
    }
}

/* loop.changed(*values): true when they differ from the previous call's */
static bool loop_changed(jr *r, jloop *l, const jargs *a, jv *out) {
    jlist *now;
    if (!new_list(r, a->n_pos, &now)) return false;
    for (size_t i = 0; i < a->n_pos; i++) jlist_push(now, jv_ref(a->pos[i]));
    const jv nv = jv_list(now, false);
    bool deep = false;
    const bool changed = !l->changed_last || !jv_equal(*l->changed_last, nv, &deep);
    if (changed) {
        if (l->changed_last) {
            jv_unref(*l->changed_last);
        } else if (!(l->changed_last = malloc(sizeof *l->changed_last))) {
            jv_unref(nv);
            return jr_oom(r);
        }
        *l->changed_last = nv;
    } else {
        jv_unref(nv);
    }
    *out = jv_bool(changed);
    return true;
}

static bool loop_method(jr *r, jv self, int id, const jargs *a, jv *out) {
    jloop *l = self.u.loop;
    if (id == M_CHANGED) return loop_changed(r, l, a, out);
    if (id != M_CYCLE) return no_method(r, self, id);
    if (a->n_kw) return jr_fail(r, "cycle() takes no keyword arguments");
    if (!a->n_pos) return jr_fail(r, "no items for cycling given");
    *out = jv_ref(a->pos[l->index0 % (int64_t)a->n_pos]);
    return true;
}

bool jb_call_method(jr *r, jv self, int id, const jargs *a, jv *out) {
    switch (self.kind) {
    case JV_STR: return str_method(r, self, id, a, out);
    case JV_LIST:
    case JV_RANGE: return list_method(r, self, id, a, out);
    case JV_DICT: return dict_method(r, self, id, a, out);
    case JV_LOOP: return loop_method(r, self, id, a, out);
    default: return no_method(r, self, id);
    }
}

/* ---- tests ---- */

static bool is_iterable(jv v) {
    switch (v.kind) {
    case JV_UNDEF:
    case JV_STR:
    case JV_LIST:
    case JV_DICT:
    case JV_ITER:
    case JV_RANGE:
    case JV_LOOP: return true;
    default: return false;
    }
}

static bool is_callable(jv v) {
    return v.kind == JV_MACRO || v.kind == JV_FUNC || v.kind == JV_METHOD || v.kind == JV_UNDEF || v.kind == JV_LOOP;
}

static bool is_defined(jv v) { return v.kind != JV_UNDEF; }
static bool is_undefined(jv v) { return v.kind == JV_UNDEF; }
static bool is_none(jv v) { return v.kind == JV_NONE; }
static bool is_boolean(jv v) { return v.kind == JV_BOOL; }
static bool is_true(jv v) { return v.kind == JV_BOOL && v.u.i; }
static bool is_false(jv v) { return v.kind == JV_BOOL && !v.u.i; }
static bool is_integer(jv v) { return v.kind == JV_INT; }
static bool is_float(jv v) { return v.kind == JV_FLOAT; }
static bool is_string(jv v) { return v.kind == JV_STR; }
static bool is_mapping(jv v) { return v.kind == JV_DICT; }
static bool is_escaped(jv v) { return v.kind == JV_STR && (v.flags & JF_MARKUP); }
static bool is_filter(jv v) { return v.kind == JV_STR && jb_filter_id(v.u.s->b) >= 0; }
static bool is_test(jv v) { return v.kind == JV_STR && jb_test_id(v.u.s->b) >= 0; }
static bool is_sequence(jv v) {
    return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_RANGE || v.kind == JV_UNDEF;
}

/* lower, upper (arg: upper): str(v).islower() / isupper() */
static bool t_cased(jr *r, jv v, jv other, int arg, bool *out) {
    jv s;
    if (!jr_to_str(r, v, &s)) return false;
    *out = str_is_cased(s.u.s, arg);
    jv_unref(s);
    (void)other;
    return true;
}

/* odd, even (v % 2 == arg), divisibleby (v % other == 0) */
static bool t_mod(jr *r, jv v, jv other, int arg, bool *out) {
    jv m;
    if (!jr_binop(r, OP_MOD, v, jv_is_missing(other) ? jv_int(2) : other, &m)) return false;
    bool deep;
    *out = jv_equal(m, jv_int(arg), &deep);
    jv_unref(m);
    return true;
}

/* eq, ne, lt, ..., in (arg: the CMP_ operator) */
static bool t_compare(jr *r, jv v, jv other, int arg, bool *out) { return jr_compare(r, arg, v, other, out); }

/* sameas: Python's `is`, as far as values without identity can tell (small ints are cached) */
static bool t_sameas(jr *r, jv v, jv o, int arg, bool *out) {
    if (v.kind != o.kind) *out = false;
    else if (v.kind == JV_NONE || v.kind == JV_UNDEF) *out = v.kind == JV_NONE;
    else if (v.kind == JV_BOOL) *out = v.u.i == o.u.i;
    else if (v.kind == JV_INT) *out = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;
    else if (v.kind == JV_FUNC) *out = v.sub == o.sub;
    else if (v.kind == JV_NS) *out = v.u.ns == o.u.ns;
    else *out = v.kind >= JV_STR && v.u.o == o.u.o;
    (void)r;
    (void)arg;
    return true;
}

/* A test: is (of the value alone), or fn with its one parameter, which is then required
 * (py_name: the function jinja2's missing-argument message names, NULL: the test's). */
typedef struct {
    const char *name;
    bool (*is)(jv v);
    bool (*fn)(jr *r, jv v, jv other, int arg, bool *out);
    const char *param;
    const char *py_name;
    int arg;
} jtest;

/* clang-format off */
#define CMP(name, op) {name, NULL, t_compare, "other", NULL, op}
/* clang-format on */
static const jtest TESTS[] = {
    {"boolean", .is = is_boolean},
    {"callable", .is = is_callable},
    {"defined", .is = is_defined},
    {"divisibleby", NULL, t_mod, "num", "test_divisibleby", 0},
    CMP("eq", CMP_EQ),
    CMP("equalto", CMP_EQ),
    {"escaped", .is = is_escaped},
    {"even", NULL, t_mod, NULL, NULL, 0},
    {"false", .is = is_false},
    {"filter", .is = is_filter},
    {"float", .is = is_float},
    CMP("ge", CMP_GE),
    CMP("gt", CMP_GT),
    CMP("greaterthan", CMP_GT),
    {"in", NULL, t_compare, "seq", "test_in", CMP_IN},
    {"integer", .is = is_integer},
    {"iterable", .is = is_iterable},
    CMP("le", CMP_LE),
    CMP("lessthan", CMP_LT),
    {"lower", NULL, t_cased, NULL, NULL, false},
    CMP("lt", CMP_LT),
    {"mapping", .is = is_mapping},
    CMP("ne", CMP_NE),
    {"none", .is = is_none},
    {"number", .is = jv_is_num},
    {"odd", NULL, t_mod, NULL, NULL, 1},
    {"sameas", NULL, t_sameas, "other", NULL, 0},
    {"sequence", .is = is_sequence},
    {"string", .is = is_string},
    {"test", .is = is_test},
    {"true", .is = is_true},
    {"undefined", .is = is_undefined},
    {"upper", NULL, t_cased, NULL, NULL, true},
    CMP("==", CMP_EQ),
    CMP("!=", CMP_NE),
    CMP("<", CMP_LT),
    CMP("<=", CMP_LE),
    CMP(">", CMP_GT),
    CMP(">=", CMP_GE),
};
#undef CMP

int jb_test_id(const char *name) { return FIND(TESTS, name); }

bool jb_test(jr *r, int id, jv v, const jargs *a, bool *out) {
    const jtest *t = &TESTS[id];
    jv other = jv_missing();
    if (!jr_bind(r, t->name, &t->param, t->param ? 1 : 0, a, &other)) return false;
    if (t->param && jv_is_missing(other))
        return jr_fail(r, "%s() missing 1 required positional argument: '%s'", t->py_name ? t->py_name : t->name,
                       t->param);
    *out = false;
    if (!t->is) return t->fn(r, v, other, t->arg, out);
    *out = t->is(v);
    return true;
}

/* A test by name at run time (select, reject, selectattr, rejectattr). */
static bool call_test_named(jr *r, jv name, jv item, const jargs *rest, bool *out) {
    if (name.kind != JV_STR) return jr_fail(r, "test name must be a string");
    const int id = jb_test_id(name.u.s->b);
    if (id < 0) return jr_fail(r, "No test named '%.64s'.", name.u.s->b);
    return jb_test(r, id, item, rest, out);
}

/* ---- filters ---- */

/* select / reject / selectattr / rejectattr, and map below: jinja2's generators check
 * `if value:` first, so a false input (None, an empty list) is an empty generator. */
static bool empty_gen(jr *r, jv *out) {
    jlist *l;
    return new_list(r, 0, &l) && make_iter(r, l, IT_GENERATOR, out);
}

/* select, reject, selectattr, rejectattr (arg: SEL_* flags) */
enum { SEL_WANT = 1, SEL_ATTR = 2 };
static bool f_select(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    const jargs *a = c->a;
    const bool attr = c->arg & SEL_ATTR, want = c->arg & SEL_WANT;
    if (!jv_truthy(v)) return empty_gen(r, out);
    size_t off = 0;
    jv attrname = jv_missing();
    if (attr) {
        if (a->n_pos < 1) return jr_fail(r, "Missing parameter for attribute name");
        attrname = a->pos[0];
        off = 1;
    }
    jv test = a->n_pos > off ? a->pos[off] : jv_missing();
    jargs rest = {.pos = a->n_pos > off + 1 ? a->pos + off + 1 : NULL,
                  .n_pos = a->n_pos > off + 1 ? a->n_pos - off - 1 : 0,
                  .kw_names = a->kw_names,
                  .kw = a->kw,
                  .n_kw = a->n_kw};
    jlist *items, *kept;
    if (!jr_iterate(r, v, &items)) return false;
    if (!new_list(r, 0, &kept)) {
        jv_unref(jv_list(items, false));
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < items->n && ok; i++) {
        jv x = jv_ref(items->v[i]);
        if (attr) {
            jv y;
            ok = attr_get(r, x, attrname, jv_missing(), &y);
            jv_unref(x);
            if (!ok) break;
            x = y;
        }
        bool t;
        if (jv_is_missing(test)) t = jv_truthy(x);
        else ok = call_test_named(r, test, x, &rest, &t);
        jv_unref(x);
        if (ok && t == want) ok = push(r, kept, jv_ref(items->v[i]));
    }
    jv_unref(jv_list(items, false));
    if (!ok) {
        jv_unref(jv_list(kept, false));
        return false;
    }
    return make_iter(r, kept, IT_GENERATOR, out);
}

static bool f_map(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    const jargs *a = c->a;
    if (!jv_truthy(v)) return empty_gen(r, out);
    jv attrname = jv_missing(), def = jv_missing(), fname = jv_missing();
    jargs rest = {0};
    if (a->n_pos == 0) {
        for (size_t k = 0; k < a->n_kw; k++) {
            if (!strcmp(a->kw_names[k]->b, "attribute")) attrname = a->kw[k];
            else if (!strcmp(a->kw_names[k]->b, "default")) def = a->kw[k];
            else return jr_fail(r, "Unexpected keyword argument '%.64s'", a->kw_names[k]->b);
        }
        if (jv_is_missing(attrname)) return jr_fail(r, "map requires a filter argument");
    } else {
        fname = a->pos[0];
        rest = (jargs){.pos = a->pos + 1, .n_pos = a->n_pos - 1, .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
        if (fname.kind != JV_STR) return jr_fail(r, "map: filter name must be a string");
    }
    const int fid = jv_is_missing(fname) ? -1 : jb_filter_id(fname.u.s->b);
    if (!jv_is_missing(fname) && fid < 0) return jr_fail(r, "No filter named '%.64s'.", fname.u.s->b);
    jlist *items, *res;
    if (!jr_iterate(r, v, &items)) return false;
    if (!new_list(r, items->n, &res)) {
        jv_unref(jv_list(items, false));
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < items->n && ok; i++) {
        jv y;
        /* clang-format off */
        if (fid < 0) ok = attr_get(r, items->v[i], attrname, def, &y);
        else if ((ok = jr_enter(r))) { /* map('map', ...) recurses */
            ok = jb_filter(r, fid, items->v[i], &rest, &y);
            jr_leave(r);
        }
        /* clang-format on */
        if (ok) ok = push(r, res, y);
    }
    jv_unref(jv_list(items, false));
    if (!ok) {
        jv_unref(jv_list(res, false));
        return false;
    }
    return make_iter(r, res, IT_MAP, out);
}

/* Keys for sort / unique / min / max: the attribute (comma-separated in sort), case
 * folded unless case_sensitive. */
static bool key_of(jr *r, jv item, jv attr, bool multi, bool case_sensitive, jv *out) {
    if (jv_is_missing(attr) || attr.kind == JV_NONE) {
        if (case_sensitive) {
            *out = jv_ref(item);
            return true;
        }
        return ignore_case(r, item, out);
    }
    if (multi && attr.kind == JV_STR && memchr(attr.u.s->b, ',', attr.u.s->len)) {
        jlist *parts;
        if (!new_list(r, 2, &parts)) return false;
        const char *s = attr.u.s->b, *end = s + attr.u.s->len;
        while (true) {
            const char *c = memchr(s, ',', (size_t)(end - s));
            const char *pe = c ? c : end;
            jv name, val, k;
            if (!jr_str(r, s, (size_t)(pe - s), &name)) goto fail;
            const bool ok = attr_get(r, item, name, jv_missing(), &val);
            jv_unref(name);
            if (!ok) goto fail;
            const bool ok2 = case_sensitive ? (k = jv_ref(val), true) : ignore_case(r, val, &k);
            jv_unref(val);
            if (!ok2 || !push(r, parts, k)) goto fail;
            if (!c) break;
            s = c + 1;
        }
        *out = jv_list(parts, false);
        return true;
    fail:
        jv_unref(jv_list(parts, false));
        return false;
    }
    jv val;
    if (!attr_get(r, item, attr, jv_missing(), &val)) return false;
    if (case_sensitive) {
        *out = val;
        return true;
    }
    const bool ok = ignore_case(r, val, out);
    jv_unref(val);
    return ok;
}

static bool filter_sort(jr *r, jv v, jv reverse, jv case_sensitive, jv attr, bool unique, jv *out) {
    jlist *items;
    if (!jr_iterate(r, v, &items)) return false;
    const size_t n = items->n;
    jv *keys = calloc(n ? n : 1, sizeof *keys);
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    bool ok = keys && idx;
    if (!ok) jr_oom(r);
    size_t nk = 0;
    for (; ok && nk < n; nk++) {
        ok = key_of(r, items->v[nk], attr, !unique, is_true_arg(case_sensitive), &keys[nk]);
        idx[nk] = nk;
        if (!ok) break;
    }
    jlist *res = NULL;
    if (ok && !unique) ok = sort_idx(r, keys, idx, n, is_true_arg(reverse));
    if (ok) ok = new_list(r, n, &res);
    for (size_t i = 0; ok && i < n; i++) {
        if (unique) {
            if (!jv_hashable(keys[i])) {
                ok = jr_fail(r, "unhashable type: '%s'", jv_type_name(keys[i]));
                break;
            }
            bool seen = false, deep = false;
            for (size_t j = 0; j < i && !seen; j++) seen = jv_equal(keys[j], keys[i], &deep);
            if (!jr_steps(r, i / 8)) ok = false;
            if (seen) continue;
        }
        ok = ok && push(r, res, jv_ref(items->v[idx[i]]));
    }
    for (size_t i = 0; i < nk; i++) jv_unref(keys[i]);
    free(keys);
    free(idx);
    jv_unref(jv_list(items, false));
    if (!ok) {
        if (res) jv_unref(jv_list(res, false));
        return false;
    }
    if (unique) return make_iter(r, res, IT_GENERATOR, out);
    *out = jv_list(res, false);
    return true;
}

/* min, max (arg: max) */
static bool f_minmax(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, case_sensitive = c->p[0], attr = c->p[1];
    const bool max = c->arg;
    jlist *items;
    if (!jr_iterate(r, v, &items)) return false;
    if (items->n == 0) {
        jv_unref(jv_list(items, false));
        *out = jr_undef_msg(r, "No aggregated item, sequence was empty.");
        return true;
    }
    size_t best = 0;
    jv bestk = jv_undef();
    bool ok = key_of(r, items->v[0], attr, false, is_true_arg(case_sensitive), &bestk);
    for (size_t i = 1; ok && i < items->n; i++) {
        jv k;
        if (!(ok = key_of(r, items->v[i], attr, false, is_true_arg(case_sensitive), &k))) break;
        int c;
        const char *why = NULL;
        if (!jv_compare(k, bestk, &c, &why)) {
            ok = why ? jr_fail(r, "%s", why)
                     : jr_fail(r, "'%s' not supported between instances of '%s' and '%s'", max ? ">" : "<",
                               jv_type_name(k), jv_type_name(bestk));
            jv_unref(k);
            break;
        }
        if (max ? c > 0 : c < 0) {
            jv_unref(bestk);
            bestk = k;
            best = i;
        } else {
            jv_unref(k);
        }
    }
    jv_unref(bestk);
    if (ok) *out = jv_ref(items->v[best]);
    jv_unref(jv_list(items, false));
    return ok;
}

/* Python's int() and float() on strings (whitespace, sign, underscores between
 * digits, a base prefix matching base). */
static bool parse_int_str(const char *s, size_t n, int base, int64_t *out) {
    size_t i = 0;
    while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) i++;
    while (n > i && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r'))) n--;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (n - i >= 2 && s[i] == '0') {
        const char c = (char)(s[i + 1] | 32);
        if ((c == 'x' && (base == 16 || base == 0)) || (c == 'o' && (base == 8 || base == 0)) ||
            (c == 'b' && (base == 2 || base == 0))) {
            base = c == 'x' ? 16 : c == 'o' ? 8 : 2;
            i += 2;
            if (i < n && s[i] == '_') i++;
        }
    }
    if (base == 0) base = 10;
    if (i >= n) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (!prev_digit || i + 1 >= n) return false;
            prev_digit = false;
            continue;
        }
        const int d = s[i] >= '0' && s[i] <= '9'                 ? s[i] - '0'
                      : (s[i] | 32) >= 'a' && (s[i] | 32) <= 'z' ? (s[i] | 32) - 'a' + 10
                                                                 : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = true;
    }
    if (v > (uint64_t)INT64_MAX + neg) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_float_str(const char *s, size_t n, double *out) {
    char buf[128];
    size_t i = 0, k = 0;
    while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) i++;
    while (n > i && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r'))) n--;
    if (i >= n || n - i >= sizeof buf) return false;
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (!k || i + 1 >= n || !(buf[k - 1] >= '0' && buf[k - 1] <= '9') || !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return false;
            continue;
        }
        buf[k++] = s[i];
    }
    buf[k] = 0;
    /* strtod accepts hex floats and "nan(...)", which Python's float() does not */
    for (size_t j = 0; j < k; j++)
        if (buf[j] == 'x' || buf[j] == 'X' || buf[j] == '(') return false;
    char *end;
    *out = strtod(buf, &end);
    return end == buf + k;
}

static bool f_int(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, def = c->p[0], base = c->p[1];
    int64_t b = 10;
    if (!jv_is_missing(base) && !need_int(r, base, "int() base", &b)) return false;
    const jv d = jv_is_missing(def) ? jv_int(0) : def;
    if (v.kind == JV_STR) {
        int64_t x;
        double f;
        if ((b == 0 || (b >= 2 && b <= 36)) && parse_int_str(v.u.s->b, v.u.s->len, (int)b, &x)) *out = jv_int(x);
        else if (parse_float_str(v.u.s->b, v.u.s->len, &f) && isfinite(f) && fabs(f) < 9.2e18)
            *out = jv_int((int64_t)f);
        else if (parse_float_str(v.u.s->b, v.u.s->len, &f) && isinf(f))
            return jr_fail(r, "cannot convert float infinity to integer");
        else *out = jv_ref(d);
        return true;
    }
    if (jv_is_intlike(v)) *out = jv_int(v.u.i);
    else if (v.kind == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) *out = jv_int((int64_t)v.u.f);
    else if (v.kind == JV_FLOAT && isinf(v.u.f)) return jr_fail(r, "cannot convert float infinity to integer");
    else *out = jv_ref(d);
    return true;
}

static bool f_round(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, prec = c->p[0], method = c->p[1];
    int64_t p = 0;
    if (!jv_is_missing(prec) && !need_int(r, prec, "round precision", &p)) return false;
    const char *m = "common";
    if (!jv_is_missing(method)) {
        if (method.kind != JV_STR) return jr_fail(r, "method must be common, ceil or floor");
        m = method.u.s->b;
    }
    const bool common = !strcmp(m, "common"), ceil_ = !strcmp(m, "ceil"), floor_ = !strcmp(m, "floor");
    if (!common && !ceil_ && !floor_) return jr_fail(r, "method must be common, ceil or floor");
    if (!jv_is_num(v)) return jr_fail(r, "type %s doesn't define __round__ method", jv_type_name(v));
    if (common && jv_is_intlike(v) && p >= 0) {
        *out = jv_int(v.u.i);
        return true;
    }
    const double x = jv_to_f(v);
    if (!isfinite(x)) {
        *out = jv_float(x);
        return true;
    }
    if (common) {
        if (p >= 0 && p <= 300) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)p, x); /* correctly rounded, ties to even */
            *out = jv_float(strtod(buf, NULL));
        } else {
            const double e = pow(10.0, (double)-p);
            *out = jv_float(p < 0 ? nearbyint(x / e) * e : x);
        }
        return true;
    }
    const double e = pow(10.0, (double)p);
    *out = jv_float((ceil_ ? ceil(x * e) : floor(x * e)) / e);
    return true;
}

static bool f_indent(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, first = c->p[1], blank = c->p[2];
    jv width = c->p[0];
    /* jinja2 starts with `s += "\n"`: only strings get through */
    if (v.kind == JV_UNDEF) return jr_undef_fail(r, v);
    if (v.kind != JV_STR) return jr_fail(r, "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(v));
    jv s = jv_ref(v);
    jv ind = jv_undef();
    if (jv_is_missing(width)) width = jv_int(4);
    if (width.kind == JV_STR) ind = jv_ref(width);
    else {
        int64_t w = 0;
        if (!need_int(r, width, "indent width", &w)) {
            jv_unref(s);
            return false;
        }
        if (w > 4096) w = 4096;
        char sp[4097];
        memset(sp, ' ', (size_t)CN_MAX(w, 0));
        if (!jr_str(r, sp, (size_t)CN_MAX(w, 0), &ind)) {
            jv_unref(s);
            return false;
        }
    }
    /* s + "\n" split into lines (str.splitlines), joined back with the indentation */
    jbuf b;
    jr_buf_init(r, &b);
    const char *p = s.u.s->b;
    const size_t n = s.u.s->len;
    size_t i = 0, line_no = 0;
    /* lines of s + "\n" */
    while (i <= n) {
        size_t eol;
        const size_t j = line_end(p, n, i, &eol);
        const bool end = j == n;
        /* the appended "\n" ends the last line; an empty remainder is no line */
        if (end && j == i && line_no > 0) break;
        const bool empty = j == i;
        if (line_no > 0) jbuf_putc(&b, '\n');
        if (is_true_arg(blank)) {
            if (line_no > 0) jbuf_put(&b, ind.u.s->b, ind.u.s->len);
        } else if (line_no > 0 && !empty) {
            jbuf_put(&b, ind.u.s->b, ind.u.s->len);
        }
        jbuf_put(&b, p + i, j - i);
        line_no++;
        if (end) break;
        i = j + eol;
    }
    jv body;
    const bool ok = jr_buf_to_str_as(r, &b, s.flags & JF_MARKUP, &body);
    if (!ok) {
        jv_unref(s);
        jv_unref(ind);
        return false;
    }
    if (is_true_arg(first)) {
        jbuf f;
        jr_buf_init(r, &f);
        jbuf_put(&f, ind.u.s->b, ind.u.s->len);
        jbuf_put(&f, body.u.s->b, body.u.s->len);
        jv_unref(body);
        if (!jr_buf_to_str_as(r, &f, s.flags & JF_MARKUP, &body)) {
            jv_unref(s);
            jv_unref(ind);
            return false;
        }
    }
    jv_unref(s);
    jv_unref(ind);
    *out = body;
    return true;
}

static bool f_tojson(jr *r, const jcall *c, jv *out) {
    const jv *p = c->p;
    jjson_opts o = {.ensure_ascii = is_true_arg(p[0]), .sort_keys = is_true_arg(p[3])};
    char spaces[4097];
    if (!jv_is_missing(p[1]) && p[1].kind != JV_NONE) {
        o.has_indent = true;
        if (p[1].kind == JV_STR) {
            o.indent = p[1].u.s->b;
            o.indent_len = p[1].u.s->len;
        } else if (jv_is_intlike(p[1])) {
            const int64_t w = CN_MAX(CN_MIN(p[1].u.i, 4096), 0);
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        } else {
            return jr_fail(r, "can't multiply sequence by non-int of type '%s'", jv_type_name(p[1]));
        }
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.item_sep_len = o.has_indent ? 1 : 2;
    o.key_sep = ": ";
    o.key_sep_len = 2;
    if (!jv_is_missing(p[2]) && p[2].kind != JV_NONE) {
        if (p[2].kind != JV_LIST || p[2].u.l->n != 2 || p[2].u.l->v[0].kind != JV_STR || p[2].u.l->v[1].kind != JV_STR)
            return jr_fail(r, "separators must be a pair of strings");
        o.item_sep = p[2].u.l->v[0].u.s->b;
        o.item_sep_len = p[2].u.l->v[0].u.s->len;
        o.key_sep = p[2].u.l->v[1].u.s->b;
        o.key_sep_len = p[2].u.l->v[1].u.s->len;
    }
    jbuf b;
    jr_buf_init(r, &b);
    char why[128];
    if (!jv_write_json(&b, c->v, &o, why)) {
        jr_buf_fail(r, &b, why);
        jbuf_free(&b);
        return false;
    }
    return jr_buf_to_str(r, &b, out);
}

/* jinja2's title filter: split before runs of - whitespace ( { [ <, each piece's first
 * character upper, the rest lower. */
static bool title_sep(const char *p, size_t n, size_t i, size_t *k) {
    uint32_t cp;
    bool ok;
    *k = ju8_next(p + i, n - i, &cp, &ok);
    return ok && (cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jpy_isspace(cp));
}

static bool f_title(jr *r, const jcall *c, jv *out) {
    const jv s = c->v;
    jbuf b;
    jr_buf_init(r, &b);
    const char *p = s.u.s->b;
    const size_t n = s.u.s->len;
    for (size_t i = 0; i < n;) {
        size_t k;
        if (title_sep(p, n, i, &k)) {
            jbuf_put(&b, p + i, k);
            i += k;
            continue;
        }
        /* a word: its first character upper, the rest lowered as one string (final sigma) */
        size_t j = i + k;
        while (j < n && !title_sep(p, n, j, &k)) j += k;
        uint32_t cp, m[3];
        bool ok;
        const size_t first = ju8_next(p + i, n - i, &cp, &ok);
        if (ok) {
            const int nm = jpy_upper(cp, m);
            for (int t = 0; t < nm; t++) ju8_put(&b, m[t]);
        } else {
            jbuf_put(&b, p + i, first);
        }
        jpy_case(&b, p + i + first, j - i - first, JCASE_LOWER);
        i = j;
    }
    return jr_buf_to_str_as(r, &b, false, out);
}

static bool f_wordcount(jr *r, const jcall *c, jv *out) {
    const jv s = c->v;
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp;
        bool ok;
        i += ju8_next(s.u.s->b + i, s.u.s->len - i, &cp, &ok);
        const bool w = ok && (cp == '_' || jpy_isalpha(cp) || jpy_isdigit(cp));
        if (w && !in) words++;
        in = w;
    }
    (void)r;
    *out = jv_int(words);
    return true;
}

static bool f_join(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, sep = c->p[0], attr = c->p[1];
    jlist *items;
    if (!jr_iterate(r, v, &items)) return false;
    jv d;
    if (jv_is_missing(sep)) {
        if (!jr_str(r, "", 0, &d)) {
            jv_unref(jv_list(items, false));
            return false;
        }
    } else if (!jr_to_str(r, sep, &d)) {
        jv_unref(jv_list(items, false));
        return false;
    }
    jbuf b;
    jr_buf_init(r, &b);
    bool ok = true;
    for (size_t i = 0; i < items->n && ok; i++) {
        if (i) jbuf_put(&b, d.u.s->b, d.u.s->len);
        jv x = jv_ref(items->v[i]);
        if (!jv_is_missing(attr) && attr.kind != JV_NONE) {
            jv y;
            ok = attr_get(r, x, attr, jv_missing(), &y);
            jv_unref(x);
            if (!ok) break;
            x = y;
        }
        const char *why = NULL;
        if (!jv_write_str(&b, x, &why)) ok = jr_buf_fail(r, &b, why);
        jv_unref(x);
    }
    jv_unref(d);
    jv_unref(jv_list(items, false));
    if (!ok) {
        jbuf_free(&b);
        return false;
    }
    return jr_buf_to_str(r, &b, out);
}

static bool f_reverse(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    if (v.kind == JV_STR) {
        jv s;
        jlist *chars;
        if (!jr_iterate(r, v, &chars)) return false;
        jbuf b;
        jr_buf_init(r, &b);
        for (size_t i = chars->n; i-- > 0;) jbuf_put(&b, chars->v[i].u.s->b, chars->v[i].u.s->len);
        jv_unref(jv_list(chars, false));
        if (!jr_buf_to_str_as(r, &b, v.flags & JF_MARKUP, &s)) return false;
        *out = s;
        return true;
    }
    jlist *items, *rev;
    const bool reversible = v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_RANGE ||
                            (v.kind == JV_ITER && v.u.it->kind >= IT_DICT_KEYS);
    if (!jr_iterate(r, v, &items)) return false;
    if (!new_list(r, items->n, &rev)) {
        jv_unref(jv_list(items, false));
        return false;
    }
    for (size_t i = items->n; i-- > 0;) jlist_push(rev, jv_ref(items->v[i]));
    jv_unref(jv_list(items, false));
    if (reversible) return make_iter(r, rev, IT_REVERSED, out);
    *out = jv_list(rev, false);
    return true;
}

static bool f_dictsort(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, case_sensitive = c->p[0], by = c->p[1], reverse = c->p[2];
    if (v.kind != JV_DICT) return jr_fail(r, "'%s' object has no attribute 'items'", jv_type_name(v));
    int pos = 0;
    if (!jv_is_missing(by)) {
        if (by.kind == JV_STR && !strcmp(by.u.s->b, "value")) pos = 1;
        else if (!(by.kind == JV_STR && !strcmp(by.u.s->b, "key")))
            return jr_fail(r, "You can only sort by either \"key\" or \"value\"");
    }
    const jdict *d = v.u.d;
    jv *keys = calloc(d->n ? d->n : 1, sizeof *keys);
    size_t *idx = malloc((d->n ? d->n : 1) * sizeof *idx);
    bool ok = keys && idx;
    if (!ok) jr_oom(r);
    size_t nk = 0;
    for (; ok && nk < d->n; nk++) {
        const jv x = pos ? d->v[nk] : d->k[nk];
        ok = is_true_arg(case_sensitive) ? (keys[nk] = jv_ref(x), true) : ignore_case(r, x, &keys[nk]);
        idx[nk] = nk;
    }
    if (ok) ok = sort_idx(r, keys, idx, d->n, is_true_arg(reverse));
    jlist *res = NULL;
    if (ok) ok = new_list(r, d->n, &res);
    for (size_t i = 0; ok && i < d->n; i++) {
        jv t;
        ok = tuple2(r, d->k[idx[i]], d->v[idx[i]], &t) && push(r, res, t);
    }
    for (size_t i = 0; i < nk; i++) jv_unref(keys[i]);
    free(keys);
    free(idx);
    if (!ok) {
        if (res) jv_unref(jv_list(res, false));
        return false;
    }
    *out = jv_list(res, false);
    return true;
}

static bool f_abs(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    if (v.kind == JV_FLOAT) *out = jv_float(fabs(v.u.f));
    else if (jv_is_intlike(v)) {
        if (v.u.i == INT64_MIN) return jr_fail(r, "integer overflow in abs");
        *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    } else return jr_fail(r, "bad operand type for abs(): '%s'", jv_type_name(v));
    return true;
}

static bool f_attr(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, name = c->p[0];
    if (name.kind != JV_STR) return jr_fail(r, "attribute name must be a string");
    if (v.kind == JV_UNDEF) return jr_undef_fail(r, v);
    const int mid = name.u.s->len < 32 ? jb_method_id(name.u.s->b) : -1;
    if (mid >= 0 && jb_method_attr(r, v, mid, out) == JB_ATTR_FOUND) return true;
    if (v.kind == JV_NS || v.kind == JV_LOOP) return jr_getattr(r, v, name, -1, out);
    *out = jr_undef_attr(r, v, name);
    return true;
}

static bool f_center(jr *r, const jcall *c, jv *out) {
    int64_t w = 80;
    if (!jv_is_missing(c->p[0]) && !need_int(r, c->p[0], "center width", &w)) return false;
    jv s;
    if (!soft_str(r, c->v, &s)) return false;
    const bool ok = pad_str(r, s, w, jv_missing(), PAD_CENTER, out);
    jv_unref(s);
    return ok;
}

/* length, count */
static bool f_length(jr *r, const jcall *c, jv *out) {
    int64_t n = 0;
    if (!py_len(r, c->v, &n)) return false;
    *out = jv_int(n);
    return true;
}

/* default, d */
static bool f_default(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, def = c->p[0];
    if (v.kind == JV_UNDEF || (is_true_arg(c->p[1]) && !jv_truthy(v))) {
        if (jv_is_missing(def)) return jr_str(r, "", 0, out);
        *out = jv_ref(def);
    } else {
        *out = jv_ref(v);
    }
    return true;
}

/* escape, e */
static bool f_escape(jr *r, const jcall *c, jv *out) { return jr_escape(r, c->v, out); }

static bool f_forceescape(jr *r, const jcall *c, jv *out) {
    jv s;
    if (!jr_to_str(r, c->v, &s)) return false;
    const bool ok = jr_escape(r, s, out);
    jv_unref(s);
    return ok;
}

static bool f_first(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    if (v.kind == JV_ITER && v.u.it->kind < IT_DICT_KEYS) { /* next(generator) */
        jiter *it = v.u.it;
        if (it->pos < it->items->n) *out = jv_ref(it->items->v[it->pos++]);
        else *out = jr_undef_msg(r, "No first item, sequence was empty.");
        return true;
    }
    jlist *l;
    if (!jr_iterate(r, v, &l)) return false;
    *out = l->n ? jv_ref(l->v[0]) : jr_undef_msg(r, "No first item, sequence was empty.");
    jv_unref(jv_list(l, false));
    return true;
}

static bool f_last(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    if (v.kind == JV_ITER && v.u.it->kind < IT_DICT_KEYS)
        return jr_fail(r, "'%s' object is not reversible", jv_type_name(v));
    if (v.kind != JV_UNDEF && !is_iterable(v)) return jr_fail(r, "'%s' object is not reversible", jv_type_name(v));
    jlist *l;
    if (!jr_iterate(r, v, &l)) return false;
    *out = l->n ? jv_ref(l->v[l->n - 1]) : jr_undef_msg(r, "No last item, sequence was empty.");
    jv_unref(jv_list(l, false));
    return true;
}

static bool f_float(jr *r, const jcall *c, jv *out) {
    const jv v = c->v, d = jv_is_missing(c->p[0]) ? jv_float(0.0) : c->p[0];
    double f;
    if (v.kind == JV_STR && parse_float_str(v.u.s->b, v.u.s->len, &f)) *out = jv_float(f);
    else if (jv_is_num(v)) *out = jv_float(jv_to_f(v));
    else *out = jv_ref(d);
    (void)r;
    return true;
}

/* fmt|format(*args) is fmt % args; fmt|format(**kwargs) is fmt % kwargs */
static bool f_format(jr *r, const jcall *c, jv *out) {
    const jargs *a = c->a;
    jv s, args;
    if (a->n_pos && a->n_kw) return jr_fail(r, "can't handle positional and keyword arguments at the same time");
    if (!soft_str(r, c->v, &s)) return false;
    if (a->n_kw) {
        jdict *d = jdict_new(a->n_kw);
        if (!d) {
            jv_unref(s);
            return jr_oom(r);
        }
        for (size_t k = 0; k < a->n_kw; k++) jdict_set(d, jv_ref(jv_str(a->kw_names[k])), jv_ref(a->kw[k]));
        args = jv_dict(d);
    } else {
        jlist *t = jlist_new(a->n_pos);
        if (!t) {
            jv_unref(s);
            return jr_oom(r);
        }
        for (size_t k = 0; k < a->n_pos; k++) jlist_push(t, jv_ref(a->pos[k]));
        args = jv_list(t, true);
    }
    const bool ok = jr_binop(r, OP_MOD, s, args, out);
    jv_unref(s);
    jv_unref(args);
    return ok;
}

static bool f_items(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    jlist *l;
    if (v.kind == JV_UNDEF) {
        if (!new_list(r, 0, &l)) return false;
        return make_iter(r, l, IT_GENERATOR, out);
    }
    if (v.kind != JV_DICT) return jr_fail(r, "Can only get item pairs from a mapping.");
    if (!new_list(r, v.u.d->n, &l)) return false;
    for (size_t i = 0; i < v.u.d->n; i++) {
        jv t;
        if (!tuple2(r, v.u.d->k[i], v.u.d->v[i], &t)) {
            jv_unref(jv_list(l, false));
            return false;
        }
        jlist_push(l, t);
    }
    return make_iter(r, l, IT_GENERATOR, out);
}

static bool f_list(jr *r, const jcall *c, jv *out) {
    jlist *l, *copy;
    if (!jr_iterate(r, c->v, &l)) return false;
    if (!new_list(r, l->n, &copy)) {
        jv_unref(jv_list(l, false));
        return false;
    }
    for (size_t i = 0; i < l->n; i++) jlist_push(copy, jv_ref(l->v[i]));
    jv_unref(jv_list(l, false));
    *out = jv_list(copy, false);
    return true;
}

static bool f_replace(jr *r, const jcall *c, jv *out) {
    if (jv_is_missing(c->p[0]) || jv_is_missing(c->p[1]))
        return jr_fail(r, "do_replace() missing required positional arguments: 'old' and 'new'");
    int64_t count = -1;
    if (!jv_is_missing(c->p[2]) && c->p[2].kind != JV_NONE && !need_int(r, c->p[2], "replace count", &count))
        return false;
    jv s, o, n;
    if (!jr_to_str(r, c->v, &s)) return false;
    if (!jr_to_str(r, c->p[0], &o)) {
        jv_unref(s);
        return false;
    }
    if (!jr_to_str(r, c->p[1], &n)) {
        jv_unref(s);
        jv_unref(o);
        return false;
    }
    const bool ok = replace_str(r, s, o, n, count, false, out);
    jv_unref(s);
    jv_unref(o);
    jv_unref(n);
    return ok;
}

static bool f_safe(jr *r, const jcall *c, jv *out) {
    if (!soft_str(r, c->v, out)) return false;
    out->flags = JF_MARKUP;
    return true;
}

static bool f_sort(jr *r, const jcall *c, jv *out) {
    return filter_sort(r, c->v, c->p[0], c->p[1], c->p[2], false, out);
}
static bool f_unique(jr *r, const jcall *c, jv *out) {
    return filter_sort(r, c->v, jv_missing(), c->p[0], c->p[1], true, out);
}
static bool f_string(jr *r, const jcall *c, jv *out) { return soft_str(r, c->v, out); }

static bool f_sum(jr *r, const jcall *c, jv *out) {
    const jv attr = c->p[0];
    jlist *l;
    if (!jr_iterate(r, c->v, &l)) return false;
    jv acc = jv_is_missing(c->p[1]) ? jv_int(0) : jv_ref(c->p[1]);
    bool ok = true;
    for (size_t i = 0; i < l->n && ok; i++) {
        jv x = jv_ref(l->v[i]), y;
        if (!jv_is_missing(attr) && attr.kind != JV_NONE) {
            ok = attr_get(r, x, attr, jv_missing(), &y);
            jv_unref(x);
            if (!ok) break;
            x = y;
        }
        jv s;
        ok = jr_binop(r, OP_ADD, acc, x, &s);
        jv_unref(x);
        if (ok) {
            jv_unref(acc);
            acc = s;
        }
    }
    jv_unref(jv_list(l, false));
    if (!ok) {
        jv_unref(acc);
        return false;
    }
    *out = acc;
    return true;
}

/* truncate of a value that is not a string: jinja2 takes its len() and slices it */
static bool truncate_other(jr *r, jv v, int64_t most, jv *out) {
    int64_t n = 0;
    if (!py_len(r, v, &n)) return false;
    if (n > most) return jr_fail(r, "cannot truncate a %s", jv_type_name(v));
    *out = jv_ref(v);
    return true;
}

/* s cut after keep code points, back to the last space before the cut unless killwords,
 * then end */
static bool truncate_str(jr *r, jstr *s, int64_t keep, bool killwords, const jstr *end, jv *out) {
    size_t cut = ju8_offset(s, (size_t)keep);
    if (!killwords)
        for (size_t k = cut; k-- > 0;)
            if (s->b[k] == ' ') {
                cut = k;
                break;
            }
    jbuf b;
    jr_buf_init(r, &b);
    jbuf_put(&b, s->b, cut);
    jbuf_put(&b, end->b, end->len);
    return jr_buf_to_str(r, &b, out);
}

/* jinja2: longer than length + leeway (default 5): cut to length - len(end), at a space
 * unless killwords, and end appended */
static bool f_truncate(jr *r, const jcall *c, jv *out) {
    const jv v = c->v;
    int64_t length = 255, leeway = 5;
    if (!jv_is_missing(c->p[0]) && !need_int(r, c->p[0], "truncate length", &length)) return false;
    if (!jv_is_missing(c->p[3]) && c->p[3].kind != JV_NONE && !need_int(r, c->p[3], "truncate leeway", &leeway))
        return false;
    jv end;
    if (jv_is_missing(c->p[2])) {
        if (!jr_str(r, "...", 3, &end)) return false;
    } else if (!jr_to_str(r, c->p[2], &end)) {
        return false;
    }
    const int64_t end_len = (int64_t)jstr_ncp(end.u.s);
    bool ok;
    if (length < end_len || leeway < 0)
        ok = jr_fail(r, "expected length >= %lld and leeway >= 0, got %lld and %lld", (long long)end_len,
                     (long long)length, (long long)leeway);
    else if (v.kind != JV_STR) ok = truncate_other(r, v, length + leeway, out);
    else if ((int64_t)jstr_ncp(v.u.s) > length + leeway)
        ok = truncate_str(r, v.u.s, length - end_len, is_true_arg(c->p[1]), end.u.s, out);
    else {
        *out = jv_ref(v);
        ok = true;
    }
    jv_unref(end);
    return ok;
}

/* jinja2's filters in name order; those with no handler are known names that fail when
 * run (see the top of this file). */
static const jb_entry FILTERS[] = {
    {"abs", .fn = f_abs},
    {"attr", f_attr, .params = {"name"}},
    {.name = "batch"},
    {"capitalize", case_fn, .arg = JCASE_CAPITALIZE, .soft_str = true},
    {"center", f_center, .params = {"width"}},
    {"count", .fn = f_length},
    {"d", f_default, .params = {"default_value", "boolean"}},
    {"default", f_default, .params = {"default_value", "boolean"}},
    {"dictsort", f_dictsort, .params = {"case_sensitive", "by", "reverse"}},
    {"e", .fn = f_escape},
    {"escape", .fn = f_escape},
    {.name = "filesizeformat"},
    {"first", .fn = f_first},
    {"float", f_float, .params = {"default"}},
    {"forceescape", .fn = f_forceescape},
    {"format", f_format, .raw = true},
    {.name = "groupby"},
    {"indent", f_indent, .params = {"width", "first", "blank"}},
    {"int", f_int, .params = {"default", "base"}},
    {"items", .fn = f_items},
    {"join", f_join, .params = {"d", "attribute"}},
    {"last", .fn = f_last},
    {"length", .fn = f_length},
    {"list", .fn = f_list},
    {"lower", case_fn, .arg = JCASE_LOWER, .soft_str = true},
    {"map", f_map, .raw = true},
    {"max", f_minmax, {"case_sensitive", "attribute"}, .arg = true},
    {"min", f_minmax, .params = {"case_sensitive", "attribute"}},
    {.name = "pprint"},
    {.name = "random"},
    {"reject", f_select, .arg = 0, .raw = true},
    {"rejectattr", f_select, .arg = SEL_ATTR, .raw = true},
    {"replace", f_replace, .params = {"old", "new", "count"}},
    {"reverse", .fn = f_reverse},
    {"round", f_round, .params = {"precision", "method"}},
    {"safe", .fn = f_safe},
    {"select", f_select, .arg = SEL_WANT, .raw = true},
    {"selectattr", f_select, .arg = SEL_ATTR | SEL_WANT, .raw = true},
    {.name = "slice"},
    {"sort", f_sort, .params = {"reverse", "case_sensitive", "attribute"}},
    {"string", .fn = f_string},
    {.name = "striptags"},
    {"sum", f_sum, .params = {"attribute", "start"}},
    {"title", f_title, .soft_str = true},
    {"tojson", f_tojson, .params = {"ensure_ascii", "indent", "separators", "sort_keys"}},
    {"trim", strip_fn, {"chars"}, .arg = STRIP_BOTH, .soft_str = true},
    {"truncate", f_truncate, .params = {"length", "killwords", "end", "leeway"}},
    {"unique", f_unique, .params = {"case_sensitive", "attribute"}},
    {"upper", case_fn, .arg = JCASE_UPPER, .soft_str = true},
    {.name = "urlencode"},
    {.name = "urlize"},
    {"wordcount", f_wordcount, .soft_str = true},
    {.name = "wordwrap"},
    {.name = "xmlattr"},
};

int jb_filter_id(const char *name) { return FIND(FILTERS, name); }

bool jb_filter(jr *r, int id, jv v, const jargs *a, jv *out) {
    const jb_entry *f = &FILTERS[id];
    if (!f->fn) return jr_fail(r, "the '%s' filter is not supported by cinder's template engine", f->name);
    return jb_run(r, f, v, a, out);
}

/* ---- globals ---- */

#define JB_MAX_RANGE 100000 /* jinja2's sandbox refuses longer ranges */

static bool dict_from_args(jr *r, const char *fn, const jargs *a, jdict **out) {
    if (a->n_pos > 1) return jr_fail(r, "%s expected at most 1 argument, got %zu", fn, a->n_pos);
    jdict *d = jdict_new(0);
    if (!d) return jr_oom(r);
    if (a->n_pos == 1) {
        const jv src = a->pos[0];
        if (src.kind == JV_DICT || src.kind == JV_NS) {
            const jdict *s = src.kind == JV_DICT ? src.u.d : src.u.ns->attrs;
            for (size_t i = 0; i < s->n; i++) jdict_set(d, jv_ref(s->k[i]), jv_ref(s->v[i]));
        } else {
            jlist *l;
            if (!jr_iterate(r, src, &l)) {
                jv_unref(jv_dict(d));
                return false;
            }
            for (size_t i = 0; i < l->n; i++) {
                jlist *pair;
                if (!jr_iterate(r, l->v[i], &pair)) {
                    jv_unref(jv_list(l, false));
                    jv_unref(jv_dict(d));
                    return false;
                }
                const bool bad = pair->n != 2 || !jv_hashable(pair->v[0]);
                if (!bad) jdict_set(d, jv_ref(pair->v[0]), jv_ref(pair->v[1]));
                jv_unref(jv_list(pair, false));
                if (bad) {
                    jv_unref(jv_list(l, false));
                    jv_unref(jv_dict(d));
                    return jr_fail(r, "dictionary update sequence element #%zu has the wrong length or key", i);
                }
            }
            jv_unref(jv_list(l, false));
        }
    }
    for (size_t k = 0; k < a->n_kw; k++) jdict_set(d, jv_ref(jv_str(a->kw_names[k])), jv_ref(a->kw[k]));
    *out = d;
    return true;
}

bool jb_call_global(jr *r, int id, const jargs *a, jv *out) {
    switch (id) {
    case G_RANGE: {
        if (a->n_kw) return jr_fail(r, "range() takes no keyword arguments");
        if (a->n_pos < 1 || a->n_pos > 3) return jr_fail(r, "range expected 1 to 3 arguments, got %zu", a->n_pos);
        int64_t v[3] = {0, 0, 1};
        for (size_t i = 0; i < a->n_pos; i++)
            if (!need_int(r, a->pos[i], "range()", &v[a->n_pos == 1 ? 1 : i])) return false;
        if (v[2] == 0) return jr_fail(r, "range() arg 3 must not be zero");
        const __int128 span = v[2] > 0 ? (__int128)v[1] - v[0] : (__int128)v[0] - v[1];
        const __int128 len = span > 0 ? (span + (v[2] > 0 ? v[2] : -(__int128)v[2]) - 1) /
                                            (v[2] > 0 ? v[2] : -(__int128)v[2])
                                      : 0;
        if (len > JB_MAX_RANGE)
            return jr_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JB_MAX_RANGE);
        jrange *g = calloc(1, sizeof *g);
        if (!g) return jr_oom(r);
        g->h = (jobj){.rc = 1, .type = JV_RANGE};
        g->start = v[0];
        g->stop = v[1];
        g->step = v[2];
        *out = (jv){.kind = JV_RANGE, .u.rg = g};
        return true;
    }
    case G_DICT: {
        jdict *d;
        if (!dict_from_args(r, "dict", a, &d)) return false;
        *out = jv_dict(d);
        return true;
    }
    case G_NAMESPACE: {
        jdict *d;
        if (!dict_from_args(r, "namespace", a, &d)) return false;
        jns *ns = calloc(1, sizeof *ns);
        if (!ns) {
            jv_unref(jv_dict(d));
            return jr_oom(r);
        }
        ns->attrs = d;
        ns->next = r->namespaces;
        r->namespaces = ns;
        *out = (jv){.kind = JV_NS, .u.ns = ns};
        return true;
    }
    case G_RAISE_EXCEPTION: {
        if (a->n_pos != 1 || a->n_kw) return jr_fail(r, "raise_exception() takes 1 positional argument");
        jv s;
        if (!jr_to_str(r, a->pos[0], &s)) return false;
        jr_fail(r, "%s", s.u.s->b);
        jv_unref(s);
        return false;
    }
    case G_STRFTIME_NOW: {
        static const char *const ps[] = {"format"};
        jv p[1];
        if (!jr_bind(r, "strftime_now", ps, 1, a, p)) return false;
        if (p[0].kind != JV_STR) return jr_fail(r, "strftime() argument 1 must be str, not %s", jv_type_name(p[0]));
        if (memchr(p[0].u.s->b, 0, p[0].u.s->len)) return jr_fail(r, "embedded null character");
        const time_t now = r->lim.now_unix ? (time_t)r->lim.now_unix : time(NULL);
        struct tm tm;
        if (!(r->lim.now_unix ? gmtime_r(&now, &tm) : localtime_r(&now, &tm)))
            return jr_fail(r, "strftime_now: bad clock");
        if (p[0].u.s->len > 1024) return jr_fail(r, "strftime_now: format too long");
        char buf[4096];
        const size_t k = p[0].u.s->len ? strftime(buf, sizeof buf, p[0].u.s->b, &tm) : 0;
        return jr_str(r, buf, k, out);
    }
    default: return jr_fail(r, "%s() is not supported by cinder's template engine", GLOBALS[id]);
    }
}
