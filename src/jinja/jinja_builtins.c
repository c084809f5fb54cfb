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
 * template uses (groupby, batch, slice, truncate, wordwrap, urlize, xmlattr, urlencode,
 * filesizeformat, pprint, striptags, random) are known names that fail when run, so
 * templates naming them still parse as under jinja2. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja_impl.h"

/* ---- names ---- */

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST, F_FLOAT,
    F_FORCEESCAPE, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN,
    F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM,
    F_TITLE, F_TOJSON, F_TRIM, F_TRUNCATE, F_UNIQUE, F_UPPER, F_WORDCOUNT,
    F_UNSUPPORTED_FIRST,
    F_BATCH = F_UNSUPPORTED_FIRST, F_FILESIZEFORMAT, F_GROUPBY, F_PPRINT, F_RANDOM, F_SLICE, F_STRIPTAGS,
    F_URLENCODE, F_URLIZE, F_WORDWRAP, F_XMLATTR,
    F_COUNT_ALL
};
static const char *const FILTERS[F_COUNT_ALL] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
    "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
    "title", "tojson", "trim", "truncate", "unique", "upper", "wordcount",
    "batch", "filesizeformat", "groupby", "pprint", "random", "slice", "striptags",
    "urlencode", "urlize", "wordwrap", "xmlattr",
};

enum {
    TS_BOOLEAN, TS_CALLABLE, TS_DEFINED, TS_DIVISIBLEBY, TS_EQ, TS_EQUALTO, TS_ESCAPED, TS_EVEN, TS_FALSE, TS_FILTER, TS_FLOAT,
    TS_GE, TS_GT, TS_GREATERTHAN, TS_IN, TS_INTEGER, TS_ITERABLE, TS_LE, TS_LESSTHAN, TS_LOWER, TS_LT, TS_MAPPING, TS_NE, TS_NONE,
    TS_NUMBER, TS_ODD, TS_SAMEAS, TS_SEQUENCE, TS_STRING, TS_TEST, TS_TRUE, TS_UNDEFINED, TS_UPPER, TS_SYM_EQ, TS_SYM_NE,
    TS_SYM_LT, TS_SYM_LE, TS_SYM_GT, TS_SYM_GE, TS_COUNT_ALL
};
static const char *const TESTS[TS_COUNT_ALL] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter", "float",
    "ge", "gt", "greaterthan", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper", "==", "!=",
    "<", "<=", ">", ">=",
};

/* Python methods by name; the receivers each one exists on. */
enum { R_STR = 1, R_LIST = 2, R_TUPLE = 4, R_DICT = 8, R_LOOP = 16, R_RANGE = 32, R_MUT_LIST = 64, R_MUT_DICT = 128 };
enum {
    M_CAPITALIZE, M_CASEFOLD, M_CENTER, M_COUNT, M_ENDSWITH, M_FIND, M_FORMAT, M_INDEX, M_ISALNUM, M_ISALPHA,
    M_ISASCII, M_ISDECIMAL, M_ISDIGIT, M_ISLOWER, M_ISNUMERIC, M_ISSPACE, M_ISTITLE, M_ISUPPER, M_JOIN, M_LJUST,
    M_LOWER, M_LSTRIP, M_PARTITION, M_REMOVEPREFIX, M_REMOVESUFFIX, M_REPLACE, M_RFIND, M_RINDEX, M_RJUST,
    M_RPARTITION, M_RSPLIT, M_RSTRIP, M_SPLIT, M_SPLITLINES, M_STARTSWITH, M_STRIP, M_SWAPCASE, M_TITLE, M_UPPER,
    M_ZFILL, M_COPY, M_GET, M_ITEMS, M_KEYS, M_VALUES, M_CYCLE, M_CHANGED, M_APPEND, M_CLEAR, M_EXTEND, M_INSERT,
    M_POP, M_REMOVE, M_REVERSE, M_SORT, M_POPITEM, M_SETDEFAULT, M_UPDATE, M_ENCODE, M_EXPANDTABS, M_FORMAT_MAP,
    M_ISIDENTIFIER, M_ISPRINTABLE, M_TRANSLATE, M_MAKETRANS, M_FROMKEYS, M_COUNT_ALL
};
static const struct {
    const char *name;
    uint8_t on;
} METHODS[M_COUNT_ALL] = {
    {"capitalize", R_STR}, {"casefold", R_STR}, {"center", R_STR}, {"count", R_STR | R_LIST | R_TUPLE | R_RANGE},
    {"endswith", R_STR}, {"find", R_STR}, {"format", R_STR}, {"index", R_STR | R_LIST | R_TUPLE | R_RANGE},
    {"isalnum", R_STR}, {"isalpha", R_STR}, {"isascii", R_STR}, {"isdecimal", R_STR}, {"isdigit", R_STR},
    {"islower", R_STR}, {"isnumeric", R_STR}, {"isspace", R_STR}, {"istitle", R_STR}, {"isupper", R_STR},
    {"join", R_STR}, {"ljust", R_STR}, {"lower", R_STR}, {"lstrip", R_STR}, {"partition", R_STR},
    {"removeprefix", R_STR}, {"removesuffix", R_STR}, {"replace", R_STR}, {"rfind", R_STR}, {"rindex", R_STR},
    {"rjust", R_STR}, {"rpartition", R_STR}, {"rsplit", R_STR}, {"rstrip", R_STR}, {"split", R_STR},
    {"splitlines", R_STR}, {"startswith", R_STR}, {"strip", R_STR}, {"swapcase", R_STR}, {"title", R_STR},
    {"upper", R_STR}, {"zfill", R_STR}, {"copy", R_LIST | R_DICT}, {"get", R_DICT}, {"items", R_DICT},
    {"keys", R_DICT}, {"values", R_DICT}, {"cycle", R_LOOP}, {"changed", R_LOOP}, {"append", R_MUT_LIST},
    {"clear", R_MUT_LIST | R_MUT_DICT}, {"extend", R_MUT_LIST}, {"insert", R_MUT_LIST},
    {"pop", R_MUT_LIST | R_MUT_DICT}, {"remove", R_MUT_LIST}, {"reverse", R_MUT_LIST}, {"sort", R_MUT_LIST},
    {"popitem", R_MUT_DICT}, {"setdefault", R_MUT_DICT}, {"update", R_MUT_DICT}, {"encode", R_STR},
    {"expandtabs", R_STR}, {"format_map", R_STR}, {"isidentifier", R_STR}, {"isprintable", R_STR},
    {"translate", R_STR}, {"maketrans", R_STR}, {"fromkeys", R_DICT},
};

enum { G_RANGE, G_DICT, G_NAMESPACE, G_RAISE_EXCEPTION, G_STRFTIME_NOW, G_LIPSUM, G_CYCLER, G_JOINER, G_COUNT_ALL };
static const char *const GLOBALS[G_COUNT_ALL] = {"range", "dict", "namespace", "raise_exception", "strftime_now",
                                                 "lipsum", "cycler", "joiner"};

static int find_name(const char *const *names, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return i;
    return -1;
}

int jb_filter_id(const char *name) { return find_name(FILTERS, F_COUNT_ALL, name); }
int jb_test_id(const char *name) { return find_name(TESTS, TS_COUNT_ALL, name); }
int jb_global_id(const char *name) { return find_name(GLOBALS, G_COUNT_ALL, name); }
const char *jb_filter_name(int id) { return id >= 0 && id < F_COUNT_ALL ? FILTERS[id] : "?"; }
const char *jb_test_name(int id) { return id >= 0 && id < TS_COUNT_ALL ? TESTS[id] : "?"; }
const char *jb_method_name(int id) { return id >= 0 && id < M_COUNT_ALL ? METHODS[id].name : "?"; }
int jb_method_id(const char *name) {
    for (int i = 0; i < M_COUNT_ALL; i++)
        if (!strcmp(METHODS[i].name, name)) return i;
    return -1;
}

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

static bool str_result(jr *r, jbuf *b, bool markup, jv *out) {
    if (!jr_buf_to_str(r, b, out)) return false;
    out->flags = markup ? JF_MARKUP : 0;
    return true;
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
            bool digits = pe > s;
            for (const char *c = s; c < pe; c++) digits = digits && *c >= '0' && *c <= '9';
            jv key, next;
            if (digits && pe - s < 18) key = jv_int(strtoll(s, NULL, 10));
            else if (!jr_str(r, s, (size_t)(pe - s), &key)) {
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
    return str_result(r, &b, v.flags & JF_MARKUP, out);
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
                    return jr_fail(r, "'<' not supported between instances of '%s' and '%s'", jv_type_name(keys[idx[j]]),
                                   jv_type_name(keys[idx[i]]));
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

static size_t cp_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; k++) {
        uint32_t cp;
        bool ok;
        i += ju8_next(s + i, n - i, &cp, &ok);
    }
    return k;
}

/* Python whitespace split (sep None) or by sep; maxsplit < 0 for all; from the right
 * when right. */
static bool split_str(jr *r, jv str, jv sep, int64_t maxsplit, bool right, jv *out) {
    const char *s = str.u.s->b;
    const size_t n = str.u.s->len;
    const uint8_t fl = str.flags & JF_MARKUP;
    jlist *l;
    if (!new_list(r, 0, &l)) return false;
    jv piece;
    if (sep.kind == JV_STR) {
        const char *p = sep.u.s->b;
        const size_t k = sep.u.s->len;
        if (k == 0) {
            jv_unref(jv_list(l, false));
            return jr_fail(r, "empty separator");
        }
        if (!right) {
            size_t i = 0;
            while (maxsplit != 0) {
                const char *f = memmem(s + i, n - i, p, k);
                if (!f) break;
                if (!jr_str(r, s + i, (size_t)(f - s) - i, &piece)) goto fail;
                piece.flags = fl;
                if (!push(r, l, piece)) goto fail;
                i = (size_t)(f - s) + k;
                maxsplit--;
            }
            if (!jr_str(r, s + i, n - i, &piece)) goto fail;
            piece.flags = fl;
            if (!push(r, l, piece)) goto fail;
        } else {
            size_t z = n;
            while (maxsplit != 0 && z >= k) {
                size_t f = SIZE_MAX;
                for (size_t j = z - k + 1; j-- > 0;)
                    if (memcmp(s + j, p, k) == 0) {
                        f = j;
                        break;
                    }
                if (f == SIZE_MAX) break;
                if (!jr_str(r, s + f + k, z - f - k, &piece)) goto fail;
                piece.flags = fl;
                if (!push(r, l, piece)) goto fail;
                z = f;
                maxsplit--;
            }
            if (!jr_str(r, s, z, &piece)) goto fail;
            piece.flags = fl;
            if (!push(r, l, piece)) goto fail;
            for (size_t i = 0; i < l->n / 2; i++) {
                const jv t = l->v[i];
                l->v[i] = l->v[l->n - 1 - i];
                l->v[l->n - 1 - i] = t;
            }
        }
    } else if (!right) {
        size_t i = 0;
        for (;;) {
            size_t a, z;
            jpy_strip(s + i, n - i, NULL, 0, 1, &a, &z);
            i += a;
            if (i >= n) break;
            if (maxsplit == 0) {
                if (!jr_str(r, s + i, n - i, &piece)) goto fail;
                piece.flags = fl;
                if (!push(r, l, piece)) goto fail;
                break;
            }
            size_t j = i;
            while (j < n) {
                uint32_t cp;
                bool ok;
                const size_t k = ju8_next(s + j, n - j, &cp, &ok);
                if (ok && jpy_isspace(cp)) break;
                j += k;
            }
            if (!jr_str(r, s + i, j - i, &piece)) goto fail;
            piece.flags = fl;
            if (!push(r, l, piece)) goto fail;
            i = j;
            maxsplit--;
        }
    } else {
        size_t z = n;
        for (;;) {
            size_t a, e;
            jpy_strip(s, z, NULL, 0, 2, &a, &e);
            z = e;
            if (z == 0) break;
            if (maxsplit == 0) {
                if (!jr_str(r, s, z, &piece)) goto fail;
                piece.flags = fl;
                if (!push(r, l, piece)) goto fail;
                break;
            }
            size_t j = z;
            while (j > 0) {
                const size_t k = ju8_prev(s, j);
                uint32_t cp;
                bool ok;
                ju8_next(s + j - k, k, &cp, &ok);
                if (ok && jpy_isspace(cp)) break;
                j -= k;
            }
            if (!jr_str(r, s + j, z - j, &piece)) goto fail;
            piece.flags = fl;
            if (!push(r, l, piece)) goto fail;
            z = j;
            maxsplit--;
        }
        for (size_t i = 0; i < l->n / 2; i++) {
            const jv t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    }
    *out = jv_list(l, false);
    return true;
fail:
    jv_unref(jv_list(l, false));
    return false;
}

static bool strip_str(jr *r, jv s, jv chars, int which, jv *out) {
    if (jv_is_missing(chars) || chars.kind == JV_NONE) chars = jv_missing();
    else if (!need_str(r, chars, "strip arg")) return false;
    size_t a, z;
    jpy_strip(s.u.s->b, s.u.s->len, jv_is_missing(chars) ? NULL : chars.u.s->b, jv_is_missing(chars) ? 0 : chars.u.s->len,
              which, &a, &z);
    if (!jr_str(r, s.u.s->b + a, z - a, out)) return false;
    out->flags = s.flags & JF_MARKUP;
    return true;
}

static bool case_str(jr *r, jv s, jcase how, jv *out) {
    jbuf b;
    jr_buf_init(r, &b);
    jpy_case(&b, s.u.s->b, s.u.s->len, how);
    return str_result(r, &b, s.flags & JF_MARKUP, out);
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
    return str_result(r, &b, markup, out);
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
    if (width > (int64_t)r->lim.max_output_bytes) return jr_limit(r, "the output budget is spent: a padded string grew too large");
    const int64_t marg = width - len;
    int64_t left = how == 0 ? marg / 2 + (marg & width & 1) : how == 1 ? 0 : marg;
    jbuf b;
    jr_buf_init(r, &b);
    for (int64_t i = 0; i < left; i++) jbuf_put(&b, f, fl);
    jbuf_put(&b, s.u.s->b, s.u.s->len);
    for (int64_t i = 0; i < marg - left; i++) jbuf_put(&b, f, fl);
    return str_result(r, &b, s.flags & JF_MARKUP, out);
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

/* ---- str.format ---- */

/* format(value, spec) for the mini-language subset templates use: [[fill]align][sign]
 * [#][0][width][,][.precision][type] on strings, integers and floats. */
static bool format_spec(jr *r, jbuf *b, jv v, const char *spec, size_t n) {
    if (n == 0) {
        const char *why = NULL;
        if (!jv_write_str(b, v, &why)) return jr_buf_fail(r, b, why);
        return true;
    }
    size_t i = 0;
    const char *fill = " ";
    size_t fill_len = 1;
    char align = 0, sign = '-', type = 0;
    bool alt = false, zero = false, comma = false;
    int64_t width = -1, prec = -1;
    {
        uint32_t cp;
        bool ok;
        const size_t k = ju8_next(spec, n, &cp, &ok);
        if (k < n && strchr("<>^=", spec[k])) {
            fill = spec;
            fill_len = k;
            align = spec[k];
            i = k + 1;
        } else if (strchr("<>^=", spec[0])) {
            align = spec[0];
            i = 1;
        }
    }
    if (i < n && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < n && spec[i] == '#') alt = true, i++;
    if (i < n && spec[i] == '0') zero = true, i++;
    while (i < n && spec[i] >= '0' && spec[i] <= '9' && width < 100000) width = (width < 0 ? 0 : width) * 10 + (spec[i++] - '0');
    if (i < n && (spec[i] == ',' || spec[i] == '_')) comma = true, i++;
    if (i < n && spec[i] == '.') {
        prec = 0;
        i++;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && prec < 100000) prec = prec * 10 + (spec[i++] - '0');
    }
    if (i < n) type = spec[i++];
    if (i != n || width >= 100000 || prec >= 100000) return jr_fail(r, "Invalid format specifier");
    (void)alt;
    char num[512];
    const char *body = NULL;
    size_t body_len = 0;
    jv str = jv_undef();
    bool numeric = false;
    if (v.kind == JV_STR && (type == 0 || type == 's')) {
        body = v.u.s->b;
        body_len = v.u.s->len;
        if (prec >= 0) body_len = ju8_offset(v.u.s, (size_t)CN_MIN((size_t)prec, jstr_ncp(v.u.s)));
    } else if (jv_is_intlike(v) && (type == 0 || strchr("dnxXobc", type)) && prec < 0) {
        numeric = true;
        const long long x = v.u.i;
        const unsigned long long ax = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
        char digits[80];
        if (type == 'x' || type == 'X' || type == 'o') snprintf(digits, sizeof digits, type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", ax);
        else if (type == 'b') {
            int k = 0;
            char t[70];
            unsigned long long y = ax;
            do { t[k++] = (char)('0' + (y & 1)); y >>= 1; } while (y);
            for (int j = 0; j < k; j++) digits[j] = t[k - 1 - j];
            digits[k] = 0;
        } else if (type == 'c') {
            jbuf cb = {.limit = 8};
            ju8_put(&cb, (uint32_t)(ax & 0x1FFFFF));
            snprintf(digits, sizeof digits, "%s", cb.p ? cb.p : "");
            jbuf_free(&cb);
            numeric = false;
        } else {
            snprintf(digits, sizeof digits, "%llu", ax);
            if (comma) {
                char t[80];
                const size_t dl = strlen(digits);
                size_t k = 0;
                for (size_t j = 0; j < dl; j++) {
                    t[k++] = digits[j];
                    if ((dl - 1 - j) % 3 == 0 && j + 1 < dl) t[k++] = ',';
                }
                t[k] = 0;
                memcpy(digits, t, k + 1);
            }
        }
        snprintf(num, sizeof num, "%s%s", x < 0 ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "", digits);
        body = num;
        body_len = strlen(num);
    } else if (jv_is_num(v) && (type == 0 || strchr("eEfFgG%", type))) {
        numeric = true;
        const double x = v.kind == JV_FLOAT ? v.u.f : (double)v.u.i;
        char fmt[16];
        if (type == 0 && prec < 0) jpy_float_repr(x, num);
        else {
            const char t = type == 0 ? 'g' : type == '%' ? 'f' : type;
            snprintf(fmt, sizeof fmt, "%%%s.*%c", sign == '+' ? "+" : sign == ' ' ? " " : "", t);
            snprintf(num, sizeof num - 1, fmt, (int)(prec < 0 ? 6 : prec), type == '%' ? x * 100 : x);
            if (type == '%') strcat(num, "%");
        }
        if (type == 0 && prec < 0 && sign != '-' && x >= 0) {
            memmove(num + 1, num, strlen(num) + 1);
            num[0] = sign == '+' ? '+' : ' ';
        }
        body = num;
        body_len = strlen(num);
    } else if (v.kind == JV_STR) {
        return jr_fail(r, "Unknown format code '%c' for object of type 'str'", type);
    } else if (jv_is_num(v)) {
        return jr_fail(r, "Unknown format code '%c' for object of type '%s'", type, jv_type_name(v));
    } else { /* object.__format__ takes no format spec */
        return jr_fail(r, "unsupported format string passed to %s.__format__", jv_type_name(v));
    }
    if (!align) align = numeric ? '>' : '<';
    if (zero && numeric && width > 0) {
        fill = "0";
        fill_len = 1;
        align = '=';
    }
    const int64_t len = (int64_t)cp_count(body, body_len), pad = width > len ? width - len : 0;
    const int64_t left = align == '<' ? 0 : align == '^' ? pad / 2 : align == '=' ? 0 : pad;
    if (align == '=' && body_len && strchr("+- ", body[0])) {
        jbuf_put(b, body, 1);
        body++;
        body_len--;
    }
    for (int64_t k = 0; k < (align == '=' ? pad : left); k++) jbuf_put(b, fill, fill_len);
    jbuf_put(b, body, body_len);
    for (int64_t k = 0; k < (align == '=' ? 0 : pad - left); k++) jbuf_put(b, fill, fill_len);
    jv_unref(str);
    return true;
}

/* str.format(*args, **kwargs) with {}, {0}, {name}, .attr and [key] lookups, !r / !s
 * conversions and format specs; markup escapes the arguments (Markup.format). */
static bool str_format(jr *r, jv fmt, const jargs *a, jv *out) {
    const char *s = fmt.u.s->b;
    const size_t n = fmt.u.s->len;
    const bool markup = fmt.flags & JF_MARKUP;
    jbuf b;
    jr_buf_init(r, &b);
    int auto_idx = 0; /* >= 0: automatic numbering so far; -1: manual */
    bool used_auto = false, used_manual = false;
    for (size_t i = 0; i < n;) {
        if (s[i] == '}') {
            if (i + 1 < n && s[i + 1] == '}') {
                jbuf_putc(&b, '}');
                i += 2;
                continue;
            }
            jbuf_free(&b);
            return jr_fail(r, "Single '}' encountered in format string");
        }
        if (s[i] != '{') {
            size_t j = i;
            while (j < n && s[j] != '{' && s[j] != '}') j++;
            jbuf_put(&b, s + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            jbuf_putc(&b, '{');
            i += 2;
            continue;
        }
        size_t j = i + 1;
        int nest = 0;
        while (j < n && (s[j] != '}' || nest)) {
            if (s[j] == '[') nest++;
            else if (s[j] == ']' && nest) nest--;
            j++;
        }
        if (j >= n) {
            jbuf_free(&b);
            return jr_fail(r, "expected '}' before end of string");
        }
        const char *f = s + i + 1, *fe = s + j;
        i = j + 1;
        const char *colon = NULL, *bang = NULL;
        for (const char *c = f; c < fe; c++) {
            if (*c == '[') {
                while (c < fe && *c != ']') c++;
                continue;
            }
            if (*c == '!' && !bang && !colon) bang = c;
            if (*c == ':' && !colon) {
                colon = c;
                break;
            }
        }
        const char *name_end = bang ? bang : colon ? colon : fe;
        /* the first part of the field name */
        const char *p = f;
        while (p < name_end && *p != '.' && *p != '[') p++;
        jv v;
        if (p == f) {
            if (used_manual) {
                jbuf_free(&b);
                return jr_fail(r, "cannot switch from manual field specification to automatic field numbering");
            }
            used_auto = true;
            if ((size_t)auto_idx >= a->n_pos) {
                jbuf_free(&b);
                return jr_fail(r, "Replacement index %d out of range for positional args tuple", auto_idx);
            }
            v = jv_ref(a->pos[auto_idx++]);
        } else {
            bool digits = true;
            for (const char *c = f; c < p; c++) digits = digits && *c >= '0' && *c <= '9';
            if (digits) {
                if (used_auto) {
                    jbuf_free(&b);
                    return jr_fail(r, "cannot switch from manual field specification to automatic field numbering");
                }
                used_manual = true;
                const long k = p - f < 9 ? strtol(f, NULL, 10) : LONG_MAX;
                if (k < 0 || (size_t)k >= a->n_pos) {
                    jbuf_free(&b);
                    return jr_fail(r, "Replacement index %ld out of range for positional args tuple", k);
                }
                v = jv_ref(a->pos[k]);
            } else {
                size_t k;
                for (k = 0; k < a->n_kw; k++)
                    if (a->kw_names[k]->len == (size_t)(p - f) && !memcmp(a->kw_names[k]->b, f, (size_t)(p - f))) break;
                if (k == a->n_kw) {
                    jbuf_free(&b);
                    return jr_fail(r, "KeyError: '%.*s'", (int)CN_MIN(p - f, 64), f);
                }
                v = jv_ref(a->kw[k]);
            }
        }
        /* .attr and [key] */
        while (p < name_end) {
            jv key, next;
            bool ok;
            if (*p == '.') {
                const char *q = ++p;
                while (p < name_end && *p != '.' && *p != '[') p++;
                if (!jr_str(r, q, (size_t)(p - q), &key)) ok = false;
                else {
                    ok = jr_getattr(r, v, key, p - q < 32 ? jb_method_id(key.u.s->b) : -1, &next);
                    jv_unref(key);
                }
            } else {
                const char *q = ++p;
                while (p < name_end && *p != ']') p++;
                bool digits = p > q;
                for (const char *c = q; c < p; c++) digits = digits && *c >= '0' && *c <= '9';
                if (digits && p - q < 18) key = jv_int(strtoll(q, NULL, 10));
                else if (!jr_str(r, q, (size_t)(p - q), &key)) {
                    jv_unref(v);
                    jbuf_free(&b);
                    return false;
                }
                ok = jr_getitem(r, v, key, &next);
                jv_unref(key);
                if (p < name_end) p++;
            }
            jv_unref(v);
            if (!ok) {
                jbuf_free(&b);
                return false;
            }
            v = next;
        }
        if (bang && bang + 1 < fe && (bang[1] == 'r' || bang[1] == 'a')) {
            jbuf rb;
            jr_buf_init(r, &rb);
            const char *why = NULL;
            const bool ok = jv_write_repr(&rb, v, &why);
            jv_unref(v);
            if (!ok) {
                jr_buf_fail(r, &rb, why);
                jbuf_free(&rb);
                jbuf_free(&b);
                return false;
            }
            if (!jr_buf_to_str(r, &rb, &v)) {
                jbuf_free(&b);
                return false;
            }
        } else if (bang) {
            jv sv;
            const bool ok = jr_to_str(r, v, &sv);
            jv_unref(v);
            if (!ok) {
                jbuf_free(&b);
                return false;
            }
            v = sv;
        }
        if (markup) {
            jv e;
            const bool ok = jr_escape(r, v, &e);
            jv_unref(v);
            if (!ok) {
                jbuf_free(&b);
                return false;
            }
            v = e;
        }
        const bool ok = format_spec(r, &b, v, colon ? colon + 1 : fe, colon ? (size_t)(fe - colon - 1) : 0);
        jv_unref(v);
        if (!ok) {
            jbuf_free(&b);
            return false;
        }
    }
    return str_result(r, &b, markup, out);
}

/* ---- methods ---- */

jb_attr jb_method_attr(jr *r, jv obj, int id, jv *out) {
    if (id < 0 || id >= M_COUNT_ALL) return JB_ATTR_NONE;
    const uint8_t on = METHODS[id].on;
    uint8_t want = 0, mut = 0;
    switch (obj.kind) {
    case JV_STR: want = R_STR; break;
    case JV_LIST: want = obj.flags & JF_TUPLE ? R_TUPLE : R_LIST; mut = obj.flags & JF_TUPLE ? 0 : R_MUT_LIST; break;
    case JV_DICT: want = R_DICT; mut = R_MUT_DICT; break;
    case JV_LOOP: want = R_LOOP; break;
    case JV_RANGE: want = R_RANGE; break;
    default: return JB_ATTR_NONE;
    }
    if (on & mut) {
        char m[160];
        snprintf(m, sizeof m, "access to attribute '%s' of '%s' object is unsafe.", METHODS[id].name, jv_type_name(obj));
        *out = jr_undef_msg(r, m);
        out->flags = JF_UNSAFE;
        return JB_ATTR_FOUND;
    }
    if (!(on & want)) return JB_ATTR_NONE;
    *out = (jv){.kind = JV_METHOD, .flags = obj.flags, .sub = (uint16_t)id, .u.o = jv_obj(jv_ref(obj))};
    return JB_ATTR_FOUND;
}

static bool str_method(jr *r, jv self, int id, const jargs *a, jv *out) {
    jstr *s = self.u.s;
    const bool mk = self.flags & JF_MARKUP;
    const char *name = METHODS[id].name;
    jv p[4];
    switch (id) {
    case M_UPPER:
    case M_LOWER:
    case M_CASEFOLD:
    case M_TITLE:
    case M_CAPITALIZE:
    case M_SWAPCASE:
        if (!jr_bind(r, name, NULL, 0, a, p)) return false;
        return case_str(r, self, id == M_UPPER ? JCASE_UPPER : id == M_TITLE ? JCASE_TITLE_WORDS
                                 : id == M_CAPITALIZE ? JCASE_CAPITALIZE : id == M_SWAPCASE ? JCASE_SWAP : JCASE_LOWER, out);
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        static const char *const ps[] = {"chars"};
        if (!jr_bind(r, name, ps, 1, a, p)) return false;
        return strip_str(r, self, p[0], id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, out);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const ps[] = {"sep", "maxsplit"};
        if (!jr_bind(r, name, ps, 2, a, p)) return false;
        int64_t maxsplit = -1;
        if (!jv_is_missing(p[1]) && !need_int(r, p[1], name, &maxsplit)) return false;
        if (!jv_is_missing(p[0]) && p[0].kind != JV_NONE && !need_str(r, p[0], "sep")) return false;
        return split_str(r, self, p[0], maxsplit, id == M_RSPLIT, out);
    }
    case M_SPLITLINES: {
        static const char *const ps[] = {"keepends"};
        if (!jr_bind(r, name, ps, 1, a, p)) return false;
        const bool keep = is_true_arg(p[0]);
        jlist *l;
        if (!new_list(r, 0, &l)) return false;
        size_t i = 0;
        while (i < s->len) {
            size_t j = i, eol = 0;
            while (j < s->len) {
                uint32_t cp;
                bool ok;
                const size_t k = ju8_next(s->b + j, s->len - j, &cp, &ok);
                if (ok && (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
                           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029)) {
                    eol = k + (cp == '\r' && j + 1 < s->len && s->b[j + 1] == '\n');
                    break;
                }
                j += k;
            }
            jv piece;
            if (!jr_str(r, s->b + i, j - i + (keep ? eol : 0), &piece)) goto sl_fail;
            piece.flags = mk ? JF_MARKUP : 0;
            if (!push(r, l, piece)) goto sl_fail;
            i = j + eol;
        }
        *out = jv_list(l, false);
        return true;
    sl_fail:
        jv_unref(jv_list(l, false));
        return false;
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        static const char *const ps[] = {"prefix", "start", "end"};
        if (!jr_bind(r, name, ps, 3, a, p)) return false;
        if (jv_is_missing(p[0])) return jr_fail(r, "%s() takes at least 1 argument (0 given)", name);
        size_t lo, hi;
        bool res;
        if (!cp_range(r, s, p[1], p[2], &lo, &hi) || !affix_test(r, self, p[0], lo, hi, id == M_ENDSWITH, &res))
            return false;
        *out = jv_bool(res);
        return true;
    }
    case M_REPLACE: {
        static const char *const ps[] = {"old", "new", "count"};
        if (!jr_bind(r, name, ps, 3, a, p)) return false;
        if (!need_str(r, p[0], "replace() argument 1") || !need_str(r, p[1], "replace() argument 2")) return false;
        int64_t count = -1;
        if (!jv_is_missing(p[2]) && !need_int(r, p[2], name, &count)) return false;
        jv rep = jv_ref(p[1]), old = jv_ref(p[0]);
        if (mk) { /* Markup.replace escapes its arguments */
            jv e1, e2;
            const bool ok = jr_escape(r, p[0], &e1) && (jr_escape(r, p[1], &e2) || (jv_unref(e1), false));
            jv_unref(rep);
            jv_unref(old);
            if (!ok) return false;
            old = e1;
            rep = e2;
        }
        const bool ok = replace_str(r, self, old, rep, count, mk, out);
        jv_unref(rep);
        jv_unref(old);
        return ok;
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
    case M_COUNT: {
        static const char *const ps[] = {"sub", "start", "end"};
        if (!jr_bind(r, name, ps, 3, a, p)) return false;
        if (!need_str(r, p[0], "substring")) return false;
        size_t lo, hi;
        if (!cp_range(r, s, p[1], p[2], &lo, &hi)) return false;
        const char *sub = p[0].u.s->b;
        const size_t k = p[0].u.s->len;
        if (id == M_COUNT) {
            int64_t c = 0;
            if (k == 0) c = (int64_t)cp_count(s->b + lo, hi - lo) + 1;
            else
                for (size_t i = lo; hi - i >= k && i <= hi;) {
                    const char *f = memmem(s->b + i, hi - i, sub, k);
                    if (!f) break;
                    c++;
                    i = (size_t)(f - s->b) + k;
                }
            *out = jv_int(c);
            return true;
        }
        int64_t at = -1;
        if (id == M_FIND || id == M_INDEX) {
            const char *f = k <= hi - lo ? memmem(s->b + lo, hi - lo, sub, k) : NULL;
            if (f) at = (int64_t)cp_count(s->b, (size_t)(f - s->b));
        } else if (k <= hi - lo) {
            for (size_t j = hi - k + 1; j-- > lo;)
                if (memcmp(s->b + j, sub, k) == 0) {
                    at = (int64_t)cp_count(s->b, j);
                    break;
                }
        }
        if (at < 0 && (id == M_INDEX || id == M_RINDEX)) return jr_fail(r, "substring not found");
        *out = jv_int(at);
        return true;
    }
    case M_JOIN: {
        static const char *const ps[] = {"iterable"};
        if (!jr_bind(r, name, ps, 1, a, p)) return false;
        if (jv_is_missing(p[0])) return jr_fail(r, "join() takes exactly one argument (0 given)");
        jlist *l;
        if (!jr_iterate(r, p[0], &l)) return false;
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
        return str_result(r, &b, mk, out);
    }
    case M_CENTER:
    case M_LJUST:
    case M_RJUST: {
        static const char *const ps[] = {"width", "fillchar"};
        if (!jr_bind(r, name, ps, 2, a, p)) return false;
        int64_t w = 0;
        if (!need_int(r, p[0], name, &w)) return false;
        return pad_str(r, self, w, p[1], id == M_CENTER ? 0 : id == M_LJUST ? 1 : 2, out);
    }
    case M_ZFILL: {
        static const char *const ps[] = {"width"};
        if (!jr_bind(r, name, ps, 1, a, p)) return false;
        int64_t w = 0;
        if (!need_int(r, p[0], name, &w)) return false;
        const int64_t len = (int64_t)jstr_ncp(s);
        if (w <= len) {
            *out = jv_ref(self);
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
        return str_result(r, &b, mk, out);
    }
    case M_PARTITION:
    case M_RPARTITION: {
        static const char *const ps[] = {"sep"};
        if (!jr_bind(r, name, ps, 1, a, p)) return false;
        if (!need_str(r, p[0], "sep")) return false;
        const size_t k = p[0].u.s->len;
        if (!k) return jr_fail(r, "empty separator");
        const char *f = NULL;
        if (id == M_PARTITION) f = memmem(s->b, s->len, p[0].u.s->b, k);
        else
            for (size_t j = s->len >= k ? s->len - k + 1 : 0; j-- > 0;)
                if (memcmp(s->b + j, p[0].u.s->b, k) == 0) {
                    f = s->b + j;
                    break;
                }
        jv parts[3];
        bool ok;
        if (!f) {
            jv empty;
            ok = jr_str(r, "", 0, &empty);
            if (!ok) return false;
            parts[0] = id == M_PARTITION ? jv_ref(self) : jv_ref(empty);
            parts[1] = jv_ref(empty);
            parts[2] = id == M_PARTITION ? empty : jv_ref(self);
            if (id != M_PARTITION) jv_unref(empty);
        } else {
            const size_t at = (size_t)(f - s->b);
            parts[0] = parts[1] = parts[2] = jv_undef();
            ok = jr_str(r, s->b, at, &parts[0]) && jr_str(r, f, k, &parts[1]) && jr_str(r, f + k, s->len - at - k, &parts[2]);
            if (!ok) {
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
            if (parts[i].kind == JV_STR) parts[i].flags = mk ? JF_MARKUP : 0;
            jlist_push(t, parts[i]);
        }
        *out = jv_list(t, true);
        return true;
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        static const char *const ps[] = {"affix"};
        if (!jr_bind(r, name, ps, 1, a, p)) return false;
        if (!need_str(r, p[0], name)) return false;
        const size_t k = p[0].u.s->len;
        size_t lo = 0, hi = s->len;
        if (k <= s->len && memcmp(id == M_REMOVEPREFIX ? s->b : s->b + s->len - k, p[0].u.s->b, k) == 0) {
            if (id == M_REMOVEPREFIX) lo = k;
            else hi = s->len - k;
        }
        if (!jr_str(r, s->b + lo, hi - lo, out)) return false;
        out->flags = mk ? JF_MARKUP : 0;
        return true;
    }
    case M_FORMAT: return str_format(r, self, a, out);
    case M_ISALNUM:
    case M_ISALPHA:
    case M_ISASCII:
    case M_ISDECIMAL:
    case M_ISDIGIT:
    case M_ISNUMERIC:
    case M_ISSPACE:
    case M_ISLOWER:
    case M_ISUPPER:
    case M_ISTITLE:
    case M_ISPRINTABLE:
    case M_ISIDENTIFIER: {
        if (!jr_bind(r, name, NULL, 0, a, p)) return false;
        bool all = s->len > 0 || id == M_ISASCII || id == M_ISPRINTABLE, any_cased = false, prev_cased = false,
             title_ok = true;
        for (size_t i = 0; i < s->len && all;) {
            uint32_t cp;
            bool ok;
            const size_t k = ju8_next(s->b + i, s->len - i, &cp, &ok);
            const bool up = jpy_isupper(cp), lo = jpy_islower(cp);
            switch (id) {
            case M_ISALNUM: all = jpy_isalpha(cp) || jpy_isdigit(cp); break;
            case M_ISALPHA: all = jpy_isalpha(cp); break;
            case M_ISASCII: all = ok && cp < 0x80; break;
            case M_ISDECIMAL:
            case M_ISDIGIT:
            case M_ISNUMERIC: all = jpy_isdigit(cp); break;
            case M_ISSPACE: all = jpy_isspace(cp); break;
            case M_ISPRINTABLE: all = jpy_isprintable(cp); break;
            case M_ISIDENTIFIER: all = cp == '_' || jpy_isalpha(cp) || (i > 0 && jpy_isdigit(cp)); break;
            case M_ISLOWER: if (up) all = false; any_cased |= lo; break;
            case M_ISUPPER: if (lo) all = false; any_cased |= up; break;
            default: /* istitle: an upper or title character only after an uncased one */
                if (up || jpy_istitle_char(cp)) {
                    if (prev_cased) title_ok = false;
                    prev_cased = any_cased = true;
                } else if (lo) {
                    if (!prev_cased) title_ok = false;
                    prev_cased = any_cased = true;
                } else {
                    prev_cased = false;
                }
                break;
            }
            i += k;
        }
        if (id == M_ISLOWER || id == M_ISUPPER) all = all && any_cased;
        if (id == M_ISTITLE) all = title_ok && any_cased;
        *out = jv_bool(all);
        return true;
    }
    default: return jr_fail(r, "str.%s() is not supported by cinder's template engine", name);
    }
}

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

bool jb_call_method(jr *r, jv self, int id, const jargs *a, jv *out) {
    jv p[2];
    switch (self.kind) {
    case JV_STR: return str_method(r, self, id, a, out);
    case JV_LIST:
    case JV_RANGE:
        if (id == M_COPY) {
            if (!jr_bind(r, "copy", NULL, 0, a, p)) return false;
            jlist *l;
            if (!new_list(r, self.u.l->n, &l)) return false;
            for (size_t i = 0; i < self.u.l->n; i++) jlist_push(l, jv_ref(self.u.l->v[i]));
            *out = jv_list(l, false);
            return true;
        }
        return seq_index_count(r, self, id, a, out);
    case JV_DICT: {
        const jdict *d = self.u.d;
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
        case M_VALUES: {
            if (!jr_bind(r, METHODS[id].name, NULL, 0, a, p)) return false;
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
        case M_COPY: {
            if (!jr_bind(r, "copy", NULL, 0, a, p)) return false;
            jdict *c = jdict_new(d->n);
            if (!c) return jr_oom(r);
            for (size_t i = 0; i < d->n; i++) jdict_set(c, jv_ref(d->k[i]), jv_ref(d->v[i]));
            *out = jv_dict(c);
            return true;
        }
        default: break;
        }
        break;
    }
    case JV_LOOP: {
        jloop *l = self.u.loop;
        if (id == M_CYCLE) {
            if (a->n_kw) return jr_fail(r, "cycle() takes no keyword arguments");
            if (!a->n_pos) return jr_fail(r, "no items for cycling given");
            *out = jv_ref(a->pos[l->index0 % (int64_t)a->n_pos]);
            return true;
        }
        if (id == M_CHANGED) {
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
        break;
    }
    default: break;
    }
    return jr_fail(r, "'%s' object has no method %s", jv_type_name(self), jb_method_name(id));
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

bool jb_test(jr *r, int id, jv v, const jargs *a, bool *out) {
    jv p[1] = {jv_missing()};
    static const char *const ps_other[] = {"other"};
    static const char *const ps_num[] = {"num"};
    static const char *const ps_seq[] = {"seq"};
    const char *name = TESTS[id];
    bool ok = true;
    switch (id) {
    case TS_EQ:
    case TS_EQUALTO:
    case TS_SYM_EQ:
    case TS_NE:
    case TS_SYM_NE:
    case TS_LT:
    case TS_LESSTHAN:
    case TS_SYM_LT:
    case TS_LE:
    case TS_SYM_LE:
    case TS_GT:
    case TS_GREATERTHAN:
    case TS_SYM_GT:
    case TS_GE:
    case TS_SYM_GE:
    case TS_SAMEAS:
        ok = jr_bind(r, name, ps_other, 1, a, p);
        if (ok && jv_is_missing(p[0])) ok = jr_fail(r, "%s() missing 1 required positional argument: 'other'", name);
        break;
    case TS_DIVISIBLEBY:
        ok = jr_bind(r, name, ps_num, 1, a, p);
        if (ok && jv_is_missing(p[0])) ok = jr_fail(r, "test_divisibleby() missing 1 required positional argument: 'num'");
        break;
    case TS_IN:
        ok = jr_bind(r, name, ps_seq, 1, a, p);
        if (ok && jv_is_missing(p[0])) ok = jr_fail(r, "test_in() missing 1 required positional argument: 'seq'");
        break;
    default: ok = jr_bind(r, name, NULL, 0, a, p); break;
    }
    if (!ok) return false;
    *out = false;
    switch (id) {
    case TS_DEFINED: *out = v.kind != JV_UNDEF; return true;
    case TS_UNDEFINED: *out = v.kind == JV_UNDEF; return true;
    case TS_NONE: *out = v.kind == JV_NONE; return true;
    case TS_BOOLEAN: *out = v.kind == JV_BOOL; return true;
    case TS_TRUE: *out = v.kind == JV_BOOL && v.u.i; return true;
    case TS_FALSE: *out = v.kind == JV_BOOL && !v.u.i; return true;
    case TS_INTEGER: *out = v.kind == JV_INT; return true;
    case TS_FLOAT: *out = v.kind == JV_FLOAT; return true;
    case TS_NUMBER: *out = jv_is_num(v); return true;
    case TS_STRING: *out = v.kind == JV_STR; return true;
    case TS_MAPPING: *out = v.kind == JV_DICT; return true;
    case TS_ITERABLE: *out = is_iterable(v); return true;
    case TS_SEQUENCE:
        *out = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_RANGE || v.kind == JV_UNDEF;
        return true;
    case TS_CALLABLE: *out = is_callable(v); return true;
    case TS_ESCAPED: *out = v.kind == JV_STR && (v.flags & JF_MARKUP); return true;
    case TS_LOWER:
    case TS_UPPER: {
        jv s;
        if (!jr_to_str(r, v, &s)) return false;
        jargs none = {0};
        jv res;
        const bool k = str_method(r, s, id == TS_LOWER ? M_ISLOWER : M_ISUPPER, &none, &res);
        jv_unref(s);
        if (k) *out = res.u.i;
        return k;
    }
    case TS_ODD:
    case TS_EVEN:
    case TS_DIVISIBLEBY: {
        jv m;
        if (!jr_binop(r, OP_MOD, v, id == TS_DIVISIBLEBY ? p[0] : jv_int(2), &m)) return false;
        bool deep;
        *out = jv_equal(m, jv_int(id == TS_ODD ? 1 : 0), &deep);
        jv_unref(m);
        return true;
    }
    case TS_EQ:
    case TS_EQUALTO:
    case TS_SYM_EQ: return jr_compare(r, CMP_EQ, v, p[0], out);
    case TS_NE:
    case TS_SYM_NE: return jr_compare(r, CMP_NE, v, p[0], out);
    case TS_LT:
    case TS_LESSTHAN:
    case TS_SYM_LT: return jr_compare(r, CMP_LT, v, p[0], out);
    case TS_LE:
    case TS_SYM_LE: return jr_compare(r, CMP_LE, v, p[0], out);
    case TS_GT:
    case TS_GREATERTHAN:
    case TS_SYM_GT: return jr_compare(r, CMP_GT, v, p[0], out);
    case TS_GE:
    case TS_SYM_GE: return jr_compare(r, CMP_GE, v, p[0], out);
    case TS_IN: return jr_compare(r, CMP_IN, v, p[0], out);
    case TS_SAMEAS: {
        const jv o = p[0];
        if (v.kind != o.kind) *out = false;
        else if (v.kind == JV_NONE || v.kind == JV_UNDEF) *out = v.kind == JV_NONE;
        else if (v.kind == JV_BOOL) *out = v.u.i == o.u.i;
        else if (v.kind == JV_INT) *out = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;
        else if (v.kind == JV_FUNC) *out = v.sub == o.sub;
        else if (v.kind == JV_NS) *out = v.u.ns == o.u.ns;
        else *out = v.kind >= JV_STR && v.u.o == o.u.o;
        return true;
    }
    case TS_FILTER: *out = v.kind == JV_STR && jb_filter_id(v.u.s->b) >= 0; return true;
    case TS_TEST: *out = v.kind == JV_STR && jb_test_id(v.u.s->b) >= 0; return true;
    }
    return jr_fail(r, "unknown test");
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

static bool select_like(jr *r, jv v, const jargs *a, bool attr, bool want, jv *out) {
    if (!jv_truthy(v)) return empty_gen(r, out);
    size_t off = 0;
    jv attrname = jv_missing();
    if (attr) {
        if (a->n_pos < 1) return jr_fail(r, "Missing parameter for attribute name");
        attrname = a->pos[0];
        off = 1;
    }
    jv test = a->n_pos > off ? a->pos[off] : jv_missing();
    jargs rest = {.pos = a->n_pos > off + 1 ? a->pos + off + 1 : NULL, .n_pos = a->n_pos > off + 1 ? a->n_pos - off - 1 : 0,
                  .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
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

static bool filter_map(jr *r, jv v, const jargs *a, jv *out) {
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
        if (fid < 0) ok = attr_get(r, items->v[i], attrname, def, &y);
        else if ((ok = jr_enter(r))) { /* map('map', ...) recurses */
            ok = jb_filter(r, fid, items->v[i], &rest, &y);
            jr_leave(r);
        }
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

static bool filter_minmax(jr *r, jv v, jv case_sensitive, jv attr, bool max, jv *out) {
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
        const int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : (s[i] | 32) >= 'a' && (s[i] | 32) <= 'z' ? (s[i] | 32) - 'a' + 10 : 99;
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

static bool filter_int(jr *r, jv v, jv def, jv base, jv *out) {
    int64_t b = 10;
    if (!jv_is_missing(base) && !need_int(r, base, "int() base", &b)) return false;
    const jv d = jv_is_missing(def) ? jv_int(0) : def;
    if (v.kind == JV_STR) {
        int64_t x;
        double f;
        if ((b == 0 || (b >= 2 && b <= 36)) && parse_int_str(v.u.s->b, v.u.s->len, (int)b, &x)) *out = jv_int(x);
        else if (parse_float_str(v.u.s->b, v.u.s->len, &f) && isfinite(f) && fabs(f) < 9.2e18) *out = jv_int((int64_t)f);
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

static bool filter_round(jr *r, jv v, jv prec, jv method, jv *out) {
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
    const double x = v.kind == JV_FLOAT ? v.u.f : (double)v.u.i;
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

static bool filter_indent(jr *r, jv v, jv width, jv first, jv blank, jv *out) {
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
        size_t j = i, eol = 0;
        bool end = false;
        while (true) {
            if (j == n) {
                end = true;
                break;
            }
            uint32_t cp;
            bool ok;
            const size_t k = ju8_next(p + j, n - j, &cp, &ok);
            if (ok && (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
                       cp == 0x85 || cp == 0x2028 || cp == 0x2029)) {
                eol = k + (cp == '\r' && j + 1 < n && p[j + 1] == '\n');
                break;
            }
            j += k;
        }
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
    const bool ok = str_result(r, &b, s.flags & JF_MARKUP, &body);
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
        if (!str_result(r, &f, s.flags & JF_MARKUP, &body)) {
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

static bool filter_tojson(jr *r, jv v, const jargs *a, jv *out) {
    static const char *const ps[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    jv p[4];
    if (!jr_bind(r, "tojson", ps, 4, a, p)) return false;
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
    if (!jv_write_json(&b, v, &o, why)) {
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

static bool filter_title(jr *r, jv s, jv *out) {
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
    return str_result(r, &b, false, out);
}

static bool filter_wordcount(jr *r, jv s, jv *out) {
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

static bool filter_join(jr *r, jv v, jv sep, jv attr, jv *out) {
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

static bool filter_reverse(jr *r, jv v, jv *out) {
    if (v.kind == JV_STR) {
        jv s;
        jlist *chars;
        if (!jr_iterate(r, v, &chars)) return false;
        jbuf b;
        jr_buf_init(r, &b);
        for (size_t i = chars->n; i-- > 0;) jbuf_put(&b, chars->v[i].u.s->b, chars->v[i].u.s->len);
        jv_unref(jv_list(chars, false));
        if (!str_result(r, &b, v.flags & JF_MARKUP, &s)) return false;
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

static bool filter_dictsort(jr *r, jv v, jv case_sensitive, jv by, jv reverse, jv *out) {
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

bool jb_filter(jr *r, int id, jv v, const jargs *a, jv *out) {
    jv p[4];
    const char *name = FILTERS[id];
#define BIND(...)                                                                            \
    do {                                                                                     \
        static const char *const ps_[] = {__VA_ARGS__};                                      \
        if (!jr_bind(r, name, ps_, CN_ARRAY_LEN(ps_), a, p)) return false;                   \
    } while (0)
#define BIND0()                                                                              \
    do {                                                                                     \
        if (!jr_bind(r, name, NULL, 0, a, p)) return false;                                  \
    } while (0)
    switch (id) {
    case F_ABS:
        BIND0();
        if (v.kind == JV_FLOAT) *out = jv_float(fabs(v.u.f));
        else if (jv_is_intlike(v)) {
            if (v.u.i == INT64_MIN) return jr_fail(r, "integer overflow in abs");
            *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        } else return jr_fail(r, "bad operand type for abs(): '%s'", jv_type_name(v));
        return true;
    case F_ATTR: {
        BIND("name");
        if (p[0].kind != JV_STR) return jr_fail(r, "attribute name must be a string");
        if (v.kind == JV_UNDEF) return jr_undef_fail(r, v);
        const int mid = p[0].u.s->len < 32 ? jb_method_id(p[0].u.s->b) : -1;
        if (mid >= 0 && jb_method_attr(r, v, mid, out) == JB_ATTR_FOUND) return true;
        if (v.kind == JV_NS || v.kind == JV_LOOP) return jr_getattr(r, v, p[0], -1, out);
        *out = jr_undef_attr(r, v, p[0]);
        return true;
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER: {
        BIND0();
        jv s;
        if (!soft_str(r, v, &s)) return false;
        const bool ok = case_str(r, s, id == F_CAPITALIZE ? JCASE_CAPITALIZE : id == F_LOWER ? JCASE_LOWER : JCASE_UPPER, out);
        jv_unref(s);
        return ok;
    }
    case F_TITLE: {
        BIND0();
        jv s;
        if (!soft_str(r, v, &s)) return false;
        const bool ok = filter_title(r, s, out);
        jv_unref(s);
        return ok;
    }
    case F_CENTER: {
        BIND("width");
        int64_t w = 80;
        if (!jv_is_missing(p[0]) && !need_int(r, p[0], "center width", &w)) return false;
        jv s;
        if (!soft_str(r, v, &s)) return false;
        const bool ok = pad_str(r, s, w, jv_missing(), 0, out);
        jv_unref(s);
        return ok;
    }
    case F_COUNT:
    case F_LENGTH: {
        BIND0();
        int64_t n = 0;
        if (!py_len(r, v, &n)) return false;
        *out = jv_int(n);
        return true;
    }
    case F_D:
    case F_DEFAULT:
        BIND("default_value", "boolean");
        if (v.kind == JV_UNDEF || (is_true_arg(p[1]) && !jv_truthy(v))) {
            if (jv_is_missing(p[0])) return jr_str(r, "", 0, out);
            *out = jv_ref(p[0]);
        } else {
            *out = jv_ref(v);
        }
        return true;
    case F_DICTSORT: BIND("case_sensitive", "by", "reverse"); return filter_dictsort(r, v, p[0], p[1], p[2], out);
    case F_E:
    case F_ESCAPE: BIND0(); return jr_escape(r, v, out);
    case F_FORCEESCAPE: {
        BIND0();
        jv s;
        if (!jr_to_str(r, v, &s)) return false;
        const bool ok = jr_escape(r, s, out);
        jv_unref(s);
        return ok;
    }
    case F_FIRST: {
        BIND0();
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
    case F_LAST: {
        BIND0();
        if (v.kind == JV_ITER && v.u.it->kind < IT_DICT_KEYS)
            return jr_fail(r, "'%s' object is not reversible", jv_type_name(v));
        if (v.kind != JV_UNDEF && !is_iterable(v)) return jr_fail(r, "'%s' object is not reversible", jv_type_name(v));
        jlist *l;
        if (!jr_iterate(r, v, &l)) return false;
        *out = l->n ? jv_ref(l->v[l->n - 1]) : jr_undef_msg(r, "No last item, sequence was empty.");
        jv_unref(jv_list(l, false));
        return true;
    }
    case F_FLOAT: {
        BIND("default");
        const jv d = jv_is_missing(p[0]) ? jv_float(0.0) : p[0];
        double f;
        if (v.kind == JV_STR && parse_float_str(v.u.s->b, v.u.s->len, &f)) *out = jv_float(f);
        else if (jv_is_num(v)) *out = jv_float(v.kind == JV_FLOAT ? v.u.f : (double)v.u.i);
        else *out = jv_ref(d);
        return true;
    }
    case F_FORMAT: {
        jv s, args;
        if (a->n_pos && a->n_kw) return jr_fail(r, "can't handle positional and keyword arguments at the same time");
        if (!soft_str(r, v, &s)) return false;
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
    case F_INDENT: BIND("width", "first", "blank"); return filter_indent(r, v, p[0], p[1], p[2], out);
    case F_INT: BIND("default", "base"); return filter_int(r, v, p[0], p[1], out);
    case F_ITEMS: {
        BIND0();
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
    case F_JOIN: BIND("d", "attribute"); return filter_join(r, v, p[0], p[1], out);
    case F_LIST: {
        BIND0();
        jlist *l, *c;
        if (!jr_iterate(r, v, &l)) return false;
        if (!new_list(r, l->n, &c)) {
            jv_unref(jv_list(l, false));
            return false;
        }
        for (size_t i = 0; i < l->n; i++) jlist_push(c, jv_ref(l->v[i]));
        jv_unref(jv_list(l, false));
        *out = jv_list(c, false);
        return true;
    }
    case F_MAP: return filter_map(r, v, a, out);
    case F_MAX:
    case F_MIN: BIND("case_sensitive", "attribute"); return filter_minmax(r, v, p[0], p[1], id == F_MAX, out);
    case F_REJECT:
    case F_SELECT: return select_like(r, v, a, false, id == F_SELECT, out);
    case F_REJECTATTR:
    case F_SELECTATTR: return select_like(r, v, a, true, id == F_SELECTATTR, out);
    case F_REPLACE: {
        BIND("old", "new", "count");
        if (jv_is_missing(p[0]) || jv_is_missing(p[1]))
            return jr_fail(r, "do_replace() missing required positional arguments: 'old' and 'new'");
        int64_t count = -1;
        if (!jv_is_missing(p[2]) && p[2].kind != JV_NONE && !need_int(r, p[2], "replace count", &count)) return false;
        jv s, o, n;
        if (!jr_to_str(r, v, &s)) return false;
        if (!jr_to_str(r, p[0], &o)) {
            jv_unref(s);
            return false;
        }
        if (!jr_to_str(r, p[1], &n)) {
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
    case F_REVERSE: BIND0(); return filter_reverse(r, v, out);
    case F_ROUND: BIND("precision", "method"); return filter_round(r, v, p[0], p[1], out);
    case F_SAFE: {
        BIND0();
        if (!soft_str(r, v, out)) return false;
        out->flags = JF_MARKUP;
        return true;
    }
    case F_SORT: BIND("reverse", "case_sensitive", "attribute"); return filter_sort(r, v, p[0], p[1], p[2], false, out);
    case F_STRING: BIND0(); return soft_str(r, v, out);
    case F_SUM: {
        BIND("attribute", "start");
        jlist *l;
        if (!jr_iterate(r, v, &l)) return false;
        jv acc = jv_is_missing(p[1]) ? jv_int(0) : jv_ref(p[1]);
        bool ok = true;
        for (size_t i = 0; i < l->n && ok; i++) {
            jv x = jv_ref(l->v[i]), y;
            if (!jv_is_missing(p[0]) && p[0].kind != JV_NONE) {
                ok = attr_get(r, x, p[0], jv_missing(), &y);
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
    case F_TOJSON: return filter_tojson(r, v, a, out);
    case F_TRIM: {
        BIND("chars");
        jv s;
        if (!soft_str(r, v, &s)) return false;
        const bool ok = strip_str(r, s, p[0], 3, out);
        jv_unref(s);
        return ok;
    }
    case F_TRUNCATE: {
        /* jinja2: longer than length + leeway (default 5): cut to length - len(end), at a
         * space unless killwords, and end appended */
        BIND("length", "killwords", "end", "leeway");
        int64_t length = 255, leeway = 5;
        if (!jv_is_missing(p[0]) && !need_int(r, p[0], "truncate length", &length)) return false;
        if (!jv_is_missing(p[3]) && p[3].kind != JV_NONE && !need_int(r, p[3], "truncate leeway", &leeway)) return false;
        jv end, s;
        if (jv_is_missing(p[2])) {
            if (!jr_str(r, "...", 3, &end)) return false;
        } else if (!jr_to_str(r, p[2], &end)) {
            return false;
        }
        const int64_t end_len = (int64_t)jstr_ncp(end.u.s);
        if (length < end_len || leeway < 0) {
            jv_unref(end);
            return jr_fail(r, "expected length >= %lld and leeway >= 0, got %lld and %lld", (long long)end_len,
                           (long long)length, (long long)leeway);
        }
        if (v.kind != JV_STR) { /* jinja2 takes len() of the value as it is, and slices it */
            jv_unref(end);
            int64_t n = 0;
            if (!py_len(r, v, &n)) return false;
            if (n <= length + leeway) {
                *out = jv_ref(v);
                return true;
            }
            return jr_fail(r, "cannot truncate a %s", jv_type_name(v));
        }
        s = jv_ref(v);
        const int64_t n = (int64_t)jstr_ncp(s.u.s);
        if (n <= length + leeway) {
            jv_unref(end);
            *out = s;
            return true;
        }
        size_t cut = ju8_offset(s.u.s, (size_t)(length - end_len));
        if (!is_true_arg(p[1])) {
            const char *sp = NULL;
            for (size_t k = cut; k-- > 0;)
                if (s.u.s->b[k] == ' ') {
                    sp = s.u.s->b + k;
                    break;
                }
            if (sp) cut = (size_t)(sp - s.u.s->b);
        }
        jbuf b;
        jr_buf_init(r, &b);
        jbuf_put(&b, s.u.s->b, cut);
        jbuf_put(&b, end.u.s->b, end.u.s->len);
        jv_unref(s);
        jv_unref(end);
        return jr_buf_to_str(r, &b, out);
    }
    case F_UNIQUE: BIND("case_sensitive", "attribute"); return filter_sort(r, v, jv_missing(), p[0], p[1], true, out);
    case F_WORDCOUNT: {
        BIND0();
        jv s;
        if (!soft_str(r, v, &s)) return false;
        const bool ok = filter_wordcount(r, s, out);
        jv_unref(s);
        return ok;
    }
    default: return jr_fail(r, "the '%s' filter is not supported by cinder's template engine", name);
    }
#undef BIND
#undef BIND0
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
        const __int128 len = span > 0 ? (span + (v[2] > 0 ? v[2] : -(__int128)v[2]) - 1) / (v[2] > 0 ? v[2] : -(__int128)v[2]) : 0;
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
        if (!(r->lim.now_unix ? gmtime_r(&now, &tm) : localtime_r(&now, &tm))) return jr_fail(r, "strftime_now: bad clock");
        if (p[0].u.s->len > 1024) return jr_fail(r, "strftime_now: format too long");
        char buf[4096];
        const size_t k = p[0].u.s->len ? strftime(buf, sizeof buf, p[0].u.s->b, &tm) : 0;
        return jr_str(r, buf, k, out);
    }
    default: return jr_fail(r, "%s() is not supported by cinder's template engine", GLOBALS[id]);
    }
}
