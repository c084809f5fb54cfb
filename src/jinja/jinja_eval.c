/* jinja_eval.c — renders a parsed template: statements write to an output buffer,
 * expressions produce values, with jinja2's runtime semantics under the immutable
 * sandbox:
 *
 *  - scopes: a for loop's iterations, macro calls, call-block bodies, filter blocks,
 *    block sets and with blocks each get a fresh scope whose parent is where they
 *    stand (macros: where they were defined); if blocks do not. So a set inside a loop
 *    is gone at the next iteration (namespace() is how templates carry state), and a
 *    macro sees the template's variables as they are when it is called;
 *  - names resolve through the scopes, then the render's variables, then the globals;
 *    what is found nowhere is Undefined: it prints as "", is false, iterates as empty,
 *    and raises (naming what was undefined) when used otherwise;
 *  - x.y tries the Python attribute first (dict.items, str.upper, ...) and then x['y'];
 *    x['y'] tries the item first and then the attribute; list.append, dict.pop and
 *    other mutators are refused as jinja2's sandbox refuses them;
 *  - operators follow Python (int/float promotion, floor division and modulo signs,
 *    string and list repetition, chained comparisons, `and`/`or` returning an operand);
 *    Markup (|safe) escapes what is added to it.
 *
 * Budgets: every node evaluated and every loop iteration is a step, strings and lists
 * built cost steps by size, recursion (macro calls, nested blocks and expressions)
 * counts against the depth budget, and every buffer stops at the output budget. An
 * error records the line of the node being evaluated. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "jinja/jinja_impl.h"

typedef enum { X_OK, X_ERR, X_BREAK, X_CONTINUE } xres;

/* ---- errors and budgets ---- */

static bool set_error(jr *r, cn_status st, const char *fmt, va_list ap) {
    if (!r->failed) {
        r->failed = true;
        r->status = st;
        vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    }
    return false;
}

bool jr_fail(jr *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(r, CN_STATUS_INVALID_ARG, fmt, ap);
    va_end(ap);
    return false;
}

bool jr_limit(jr *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(r, CN_STATUS_LIMIT, fmt, ap);
    va_end(ap);
    return false;
}

bool jr_oom(jr *r) {
    if (!r->failed) {
        r->failed = true;
        r->status = CN_STATUS_NO_MEMORY;
        snprintf(r->msg, sizeof r->msg, "out of memory");
    }
    return false;
}

bool jr_steps(jr *r, uint64_t n) {
    r->steps += n;
    if (r->steps > r->lim.max_steps)
        return jr_limit(r, "the step budget (%llu) is spent: the template runs too long",
                        (unsigned long long)r->lim.max_steps);
    return true;
}

void jr_buf_init(jr *r, jbuf *b) { *b = (jbuf){.limit = r->lim.max_output_bytes}; }

bool jr_buf_fail(jr *r, const jbuf *b, const char *why) {
    if (b->oom) return jr_oom(r);
    if (b->over)
        return jr_limit(r, "the output budget (%zu bytes) is spent: a string or the output grew too large",
                        r->lim.max_output_bytes);
    return jr_fail(r, "%s", why ? why : "cannot format the value");
}

bool jr_str(jr *r, const char *s, size_t n, jv *out) {
    if (n > r->lim.max_output_bytes)
        return jr_limit(r, "the output budget (%zu bytes) is spent: a string grew too large", r->lim.max_output_bytes);
    if (!jr_steps(r, n / 64)) return false;
    jstr *js = jstr_new(s, n);
    if (!js) return jr_oom(r);
    *out = jv_str(js);
    return true;
}

bool jr_buf_to_str(jr *r, jbuf *b, jv *out) {
    if (b->over || b->oom) {
        jr_buf_fail(r, b, NULL);
        jbuf_free(b);
        return false;
    }
    const bool ok = jr_str(r, b->p ? b->p : "", b->n, out);
    jbuf_free(b);
    return ok;
}

/* str(v) or repr(v) as a new string value */
static bool to_text(jr *r, jv v, bool repr, jv *out) {
    jbuf b;
    jr_buf_init(r, &b);
    const char *why = NULL;
    if (!(repr ? jv_write_repr : jv_write_str)(&b, v, &why)) {
        jr_buf_fail(r, &b, why);
        jbuf_free(&b);
        return false;
    }
    return jr_buf_to_str(r, &b, out);
}

bool jr_buf_to_str_as(jr *r, jbuf *b, bool markup, jv *out) {
    if (!jr_buf_to_str(r, b, out)) return false;
    out->flags = markup ? JF_MARKUP : 0;
    return true;
}

bool jr_to_str(jr *r, jv v, jv *out) {
    if (v.kind == JV_STR) {
        *out = jv_ref(v);
        out->flags = 0;
        return true;
    }
    return to_text(r, v, false, out);
}

bool jr_to_repr(jr *r, jv v, jv *out) { return to_text(r, v, true, out); }

/* ---- Undefined ---- */

/* jinja2's object_type_repr: "None", "dict object", "jinja2.utils.Namespace object". */
static const char *type_repr(jv obj, char buf[64]) {
    switch (obj.kind) {
    case JV_NONE: return "None";
    case JV_NS: return "jinja2.utils.Namespace object";
    case JV_LOOP: return "jinja2.runtime.LoopContext object";
    case JV_MACRO: return "jinja2.runtime.Macro object";
    default: snprintf(buf, 64, "%s object", jv_type_name(obj)); return buf;
    }
}

jv jr_undef_msg(jr *r, const char *msg) {
    (void)r;
    jv u = jv_undef();
    u.u.s = jstr_new(msg, strlen(msg)); /* NULL (no memory): a plain Undefined */
    return u;
}

jv jr_undef_name(jr *r, const char *name) {
    char m[160];
    snprintf(m, sizeof m, "'%.120s' is undefined", name);
    return jr_undef_msg(r, m);
}

jv jr_undef_attr(jr *r, jv obj, jv name) {
    char m[200], t[64];
    if (name.kind == JV_STR) {
        snprintf(m, sizeof m, "'%s' has no attribute '%.100s'", type_repr(obj, t), name.u.s->b);
    } else {
        jbuf b = {.limit = 100};
        const char *why;
        jv_write_repr(&b, name, &why);
        snprintf(m, sizeof m, "%s has no element %.100s", type_repr(obj, t), b.p ? b.p : "");
        jbuf_free(&b);
    }
    return jr_undef_msg(r, m);
}

static jv undef_unsafe(jr *r, jv obj, const char *attr) {
    char m[200];
    snprintf(m, sizeof m, "access to attribute '%.64s' of '%s' object is unsafe.", attr, jv_type_name(obj));
    jv u = jr_undef_msg(r, m);
    u.flags = JF_UNSAFE;
    return u;
}

bool jr_undef_fail(jr *r, jv u) {
    if (u.u.s) return jr_fail(r, "%s", u.u.s->b);
    return jr_fail(r, "an undefined value was used");
}

/* ---- scopes ---- */

static jscope *scope_new(jr *r, jscope *parent) {
    jscope *s = calloc(1, sizeof *s);
    if (!s) {
        jr_oom(r);
        return NULL;
    }
    s->parent = parent;
    return s;
}

static void scope_free(jscope *s) {
    for (uint32_t i = 0; i < s->n; i++) jv_unref(s->v[i].val);
    free(s->v);
    free(s);
}

#define JR_MAX_KEPT_SCOPES 100000 /* scopes macros close over, per render */

static void scope_end(jr *r, jscope *s) {
    if (!s) return;
    if (s->captured) { /* a macro made here may still be called: keep it to the end */
        s->next_kept = r->kept;
        r->kept = s;
        return;
    }
    scope_free(s);
}

/* Marks s and the scopes above it as closed over by a macro. */
static bool capture(jr *r, jscope *s) {
    for (; s && s != r->root && !s->captured; s = s->parent) {
        s->captured = true;
        if (++r->n_kept > JR_MAX_KEPT_SCOPES)
            return jr_limit(r, "too many macros defined inside loops and calls (more than %d)", JR_MAX_KEPT_SCOPES);
    }
    return true;
}

static bool scope_set(jr *r, jscope *s, int32_t atom, jv v);

/* A frame's names that start as missing (jnode.undef), bound so in its new scope. */
static bool frame_start(jr *r, jscope *s, const int32_t *undef, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (!scope_set(r, s, undef[i], jv_missing())) return false;
    return true;
}

/* Sets atom in s to v (consumed). */
static bool scope_set(jr *r, jscope *s, int32_t atom, jv v) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->v[i].atom == atom) {
            jv_unref(s->v[i].val);
            s->v[i].val = v;
            return true;
        }
    if (!CN_GROW(s->v, s->cap, (size_t)s->n + 1)) {
        jv_unref(v);
        return jr_oom(r);
    }
    s->v[s->n++] = (jvar){atom, v};
    return true;
}

/* The value of a name (a new reference), or Undefined naming it. */
static jv lookup(jr *r, jscope *s, int32_t atom) {
    for (; s; s = s->parent)
        for (uint32_t i = 0; i < s->n; i++)
            if (s->v[i].atom == atom)
                return jv_is_missing(s->v[i].val) ? jr_undef_name(r, r->t->atoms[atom]) : jv_ref(s->v[i].val);
    if (!jv_is_missing(r->globals[atom])) return jv_ref(r->globals[atom]);
    if (r->t->atom_global[atom] >= 0) return (jv){.kind = JV_FUNC, .sub = (uint16_t)r->t->atom_global[atom]};
    return jr_undef_name(r, r->t->atoms[atom]);
}

/* ---- evaluation ---- */

static bool eval(jr *r, const jnode *n, jscope *s, jv *out);
static xres exec_body(jr *r, jnode *const *body, uint32_t n, jscope *s, jbuf *out);

bool jr_enter(jr *r) {
    if (++r->depth > r->lim.max_depth) {
        r->depth--;
        return jr_limit(r, "the depth budget (%d) is spent: macros or blocks nest too deeply", r->lim.max_depth);
    }
    return true;
}

static bool enter(jr *r, const jnode *n) {
    r->line = n->line;
    return jr_enter(r) && jr_steps(r, 1);
}

static void args_free(jargs *a) {
    for (size_t i = 0; i < a->n_pos; i++) jv_unref(a->pos[i]);
    for (size_t i = 0; i < a->n_kw; i++) {
        jv_unref(a->kw[i]);
        jv_unref(jv_str(a->kw_names[i]));
    }
    free(a->pos);
    free(a->kw);
    free(a->kw_names);
    memset(a, 0, sizeof *a);
}

static bool args_push_pos(jr *r, jargs *a, jv v, size_t *cap) {
    if (!CN_GROW(a->pos, *cap, a->n_pos + 1)) {
        jv_unref(v);
        return jr_oom(r);
    }
    a->pos[a->n_pos++] = v;
    return true;
}

static bool args_push_kw(jr *r, jargs *a, jstr *name, jv v, size_t *cap) {
    for (size_t i = 0; i < a->n_kw; i++)
        if (a->kw_names[i]->len == name->len && memcmp(a->kw_names[i]->b, name->b, name->len) == 0) {
            jv_unref(v);
            return jr_fail(r, "got multiple values for keyword argument '%.64s'", name->b);
        }
    if (a->n_kw == *cap) { /* names and values grow together */
        const size_t c = cn_grow_cap(*cap, a->n_kw + 1, sizeof *a->kw);
        jv *p = c ? realloc(a->kw, c * sizeof *p) : NULL;
        jstr **q = p ? realloc(a->kw_names, c * sizeof *q) : NULL;
        if (p) a->kw = p;
        if (q) a->kw_names = q;
        if (!p || !q) {
            jv_unref(v);
            return jr_oom(r);
        }
        *cap = c;
    }
    a->kw_names[a->n_kw] = (jstr *)jv_ref(jv_str(name)).u.s;
    a->kw[a->n_kw++] = v;
    return true;
}

/* The arguments of a call, filter or test node (kids, kwargs, *args, **kwargs). */
static bool eval_args(jr *r, const jnode *n, jscope *s, jargs *a) {
    memset(a, 0, sizeof *a);
    size_t cap_pos = 0, cap_kw = 0;
    for (uint32_t i = 0; i < n->n_kids; i++) {
        jv v;
        if (!eval(r, n->kids[i], s, &v) || !args_push_pos(r, a, v, &cap_pos)) goto fail;
    }
    if (n->b) { /* *args */
        jv v;
        jlist *l;
        if (!eval(r, n->b, s, &v)) goto fail;
        const bool ok = jr_iterate(r, v, &l);
        jv_unref(v);
        if (!ok) goto fail;
        for (size_t i = 0; i < l->n; i++)
            if (!args_push_pos(r, a, jv_ref(l->v[i]), &cap_pos)) {
                jv_unref(jv_list(l, false));
                goto fail;
            }
        jv_unref(jv_list(l, false));
    }
    for (uint32_t i = 0; i < n->n_kids2; i++) {
        jv v;
        if (!eval(r, n->kids2[i]->a, s, &v) || !args_push_kw(r, a, n->kids2[i]->val.u.s, v, &cap_kw)) goto fail;
    }
    if (n->c) { /* **kwargs */
        jv v;
        if (!eval(r, n->c, s, &v)) goto fail;
        if (v.kind != JV_DICT) {
            jr_fail(r, "argument after ** must be a mapping, not %s", jv_type_name(v));
            jv_unref(v);
            goto fail;
        }
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (v.u.d->k[i].kind != JV_STR) {
                jv_unref(v);
                jr_fail(r, "keywords must be strings");
                goto fail;
            }
            if (!args_push_kw(r, a, v.u.d->k[i].u.s, jv_ref(v.u.d->v[i]), &cap_kw)) {
                jv_unref(v);
                goto fail;
            }
        }
        jv_unref(v);
    }
    return true;
fail:
    args_free(a);
    return false;
}

bool jr_bind(jr *r, const char *fn, const char *const *params, size_t n, const jargs *a, jv *out) {
    for (size_t i = 0; i < n; i++) out[i] = jv_missing();
    if (a->n_pos > n)
        return jr_fail(r, "%s() takes at most %zu argument%s (%zu given)", fn, n, n == 1 ? "" : "s", a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++) out[i] = a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i;
        for (i = 0; i < n; i++)
            if (strlen(params[i]) == a->kw_names[k]->len &&
                memcmp(params[i], a->kw_names[k]->b, a->kw_names[k]->len) == 0)
                break;
        if (i == n) return jr_fail(r, "%s() got an unexpected keyword argument '%.64s'", fn, a->kw_names[k]->b);
        if (!jv_is_missing(out[i])) return jr_fail(r, "%s() got multiple values for argument '%s'", fn, params[i]);
        out[i] = a->kw[k];
    }
    return true;
}

/* ---- assignment ---- */

static bool assign(jr *r, const jnode *target, jv v, jscope *s);

static bool assign_tuple(jr *r, const jnode *target, jv v, jscope *s) {
    jlist *l;
    const bool ok = jr_iterate(r, v, &l);
    jv_unref(v);
    if (!ok) return false;
    bool res = true;
    if (l->n < target->n_kids)
        res = jr_fail(r, "not enough values to unpack (expected %u, got %zu)", target->n_kids, l->n);
    else if (l->n > target->n_kids) res = jr_fail(r, "too many values to unpack (expected %u)", target->n_kids);
    for (uint32_t i = 0; res && i < target->n_kids; i++) res = assign(r, target->kids[i], jv_ref(l->v[i]), s);
    jv_unref(jv_list(l, false));
    return res;
}

/* Binds target (a name, a namespace attribute or a tuple of them) to v (consumed). */
static bool assign(jr *r, const jnode *target, jv v, jscope *s) {
    switch (target->kind) {
    case N_NAME: return scope_set(r, s, target->atom, v);
    case N_NSREF: {
        jv ns = lookup(r, s, target->atom);
        if (ns.kind != JV_NS) {
            jv_unref(ns);
            jv_unref(v);
            return jr_fail(r, "cannot assign attribute on non-namespace object");
        }
        jv key = jv_ref(target->val);
        if (!jdict_set(ns.u.ns->attrs, key, v)) return jr_oom(r);
        return true;
    }
    case N_TUPLE: return assign_tuple(r, target, v, s);
    default: jv_unref(v); return jr_fail(r, "cannot assign to this target");
    }
}

/* ---- attribute and item access ---- */

static bool loop_attr(jr *r, jv obj, const jstr *name, jv *out) {
    const jloop *l = obj.u.loop;
    const int64_t len = (int64_t)l->items->n, i0 = l->index0;
    const char *s = name->b;
    if (!strcmp(s, "index")) *out = jv_int(i0 + 1);
    else if (!strcmp(s, "index0")) *out = jv_int(i0);
    else if (!strcmp(s, "revindex")) *out = jv_int(len - i0);
    else if (!strcmp(s, "revindex0")) *out = jv_int(len - i0 - 1);
    else if (!strcmp(s, "first")) *out = jv_bool(i0 == 0);
    else if (!strcmp(s, "last")) *out = jv_bool(i0 == len - 1);
    else if (!strcmp(s, "length")) *out = jv_int(len);
    else if (!strcmp(s, "depth")) *out = jv_int(l->depth0 + 1);
    else if (!strcmp(s, "depth0")) *out = jv_int(l->depth0);
    else if (!strcmp(s, "previtem"))
        *out = i0 > 0 ? jv_ref(l->items->v[i0 - 1]) : jr_undef_msg(r, "there is no previous item");
    else if (!strcmp(s, "nextitem"))
        *out = i0 + 1 < len ? jv_ref(l->items->v[i0 + 1]) : jr_undef_msg(r, "there is no next item");
    else return false;
    return true;
}

bool jr_getattr(jr *r, jv obj, jv name, int method_id, jv *out) {
    if (obj.kind == JV_UNDEF) return jr_undef_fail(r, obj);
    const jstr *ns = name.u.s;
    if (ns->len >= 2 && ns->b[0] == '_' && ns->b[1] == '_') {
        *out = undef_unsafe(r, obj, ns->b);
        return true;
    }
    if (method_id >= 0 && jb_method_attr(r, obj, method_id, out) == JB_ATTR_FOUND) return true;
    switch (obj.kind) {
    case JV_DICT: {
        const jv *v = jdict_get(obj.u.d, name);
        *out = v ? jv_ref(*v) : jr_undef_attr(r, obj, name);
        return true;
    }
    case JV_NS: {
        const jv *v = jdict_get(obj.u.ns->attrs, name);
        *out = v ? jv_ref(*v) : jr_undef_attr(r, obj, name);
        return true;
    }
    case JV_LOOP:
        if (loop_attr(r, obj, ns, out)) return true;
        break;
    default: break;
    }
    *out = jr_undef_attr(r, obj, name);
    return true;
}

/* Python's index normalization: i in [-n, n) -> [0, n); false when out of range. */
static bool norm_index(int64_t i, int64_t n, int64_t *out) {
    if (i < 0) i += n;
    if (i < 0 || i >= n) return false;
    *out = i;
    return true;
}

bool jr_getitem(jr *r, jv obj, jv key, jv *out) {
    if (obj.kind == JV_UNDEF) return jr_undef_fail(r, obj);
    int64_t i;
    switch (obj.kind) {
    case JV_DICT:
        if (jv_hashable(key)) {
            const jv *v = jdict_get(obj.u.d, key);
            if (v) {
                *out = jv_ref(*v);
                return true;
            }
        }
        break;
    case JV_LIST:
        if (jv_is_intlike(key)) {
            if (norm_index(key.u.i, (int64_t)obj.u.l->n, &i)) {
                *out = jv_ref(obj.u.l->v[i]);
                return true;
            }
            *out = jr_undef_attr(r, obj, key);
            return true;
        }
        break;
    case JV_STR:
        if (jv_is_intlike(key)) {
            jstr *s = obj.u.s;
            if (norm_index(key.u.i, (int64_t)jstr_ncp(s), &i)) {
                const size_t a = ju8_offset(s, (size_t)i);
                uint32_t cp;
                bool ok;
                const size_t k = ju8_next(s->b + a, s->len - a, &cp, &ok);
                if (!jr_str(r, s->b + a, k, out)) return false;
                out->flags = obj.flags & JF_MARKUP;
                return true;
            }
            *out = jr_undef_attr(r, obj, key);
            return true;
        }
        break;
    case JV_RANGE:
        if (jv_is_intlike(key)) {
            const jrange *g = obj.u.rg;
            const int64_t n = g->step > 0 ? (g->stop > g->start ? (g->stop - g->start + g->step - 1) / g->step : 0)
                                          : (g->start > g->stop ? (g->start - g->stop - g->step - 1) / -g->step : 0);
            if (norm_index(key.u.i, n, &i)) {
                *out = jv_int(g->start + i * g->step);
                return true;
            }
            *out = jr_undef_attr(r, obj, key);
            return true;
        }
        break;
    default: break;
    }
    if (key.kind == JV_STR) {
        const int id = key.u.s->len < 32 ? jb_method_id(key.u.s->b) : -1;
        return jr_getattr(r, obj, key, id, out);
    }
    *out = jr_undef_attr(r, obj, key);
    return true;
}

bool jr_key_from_text(jr *r, const char *s, const char *e, jv *out) {
    bool digits = e > s;
    for (const char *c = s; c < e; c++) digits = digits && *c >= '0' && *c <= '9';
    if (!digits || e - s >= 18) return jr_str(r, s, (size_t)(e - s), out);
    *out = jv_int(strtoll(s, NULL, 10));
    return true;
}

static bool slice_index(jr *r, jv v, bool *given, int64_t *out) {
    *given = false;
    if (v.kind == JV_NONE || jv_is_missing(v)) return true;
    if (!jv_is_intlike(v)) return jr_fail(r, "slice indices must be integers or None or have an __index__ method");
    *given = true;
    *out = v.u.i;
    return true;
}

/* Python's slice.indices(n) and the selected positions. */
static bool slice_positions(jr *r, jv a, jv b, jv c, int64_t n, int64_t *start, int64_t *step, int64_t *count) {
    bool ga, gb, gc;
    int64_t va = 0, vb = 0, vc = 1;
    if (!slice_index(r, a, &ga, &va) || !slice_index(r, b, &gb, &vb) || !slice_index(r, c, &gc, &vc)) return false;
    if (gc && vc == 0) return jr_fail(r, "slice step cannot be zero");
    const int64_t st = gc ? vc : 1;
    int64_t lo, hi;
    if (st > 0) {
        lo = !ga ? 0 : va < 0 ? CN_MAX(va + n, 0) : CN_MIN(va, n);
        hi = !gb ? n : vb < 0 ? CN_MAX(vb + n, 0) : CN_MIN(vb, n);
        *count = hi > lo ? (hi - lo + st - 1) / st : 0;
    } else {
        lo = !ga ? n - 1 : va < 0 ? CN_MAX(va + n, -1) : CN_MIN(va, n - 1);
        hi = !gb ? -1 : vb < 0 ? CN_MAX(vb + n, -1) : CN_MIN(vb, n - 1);
        *count = lo > hi ? (lo - hi + (-st) - 1) / (-st) : 0;
    }
    *start = lo;
    *step = st;
    return true;
}

static bool do_slice(jr *r, jv obj, jv a, jv b, jv c, jv *out) {
    int64_t start, step, count;
    switch (obj.kind) {
    case JV_UNDEF: return jr_undef_fail(r, obj);
    case JV_LIST: {
        if (!slice_positions(r, a, b, c, (int64_t)obj.u.l->n, &start, &step, &count)) return false;
        if (!jr_steps(r, (uint64_t)count)) return false;
        jlist *l = jlist_new((size_t)count);
        if (!l) return jr_oom(r);
        for (int64_t k = 0; k < count; k++) jlist_push(l, jv_ref(obj.u.l->v[start + k * step]));
        *out = jv_list(l, obj.flags & JF_TUPLE);
        return true;
    }
    case JV_STR: {
        jstr *s = obj.u.s;
        const int64_t n = (int64_t)jstr_ncp(s);
        if (!slice_positions(r, a, b, c, n, &start, &step, &count)) return false;
        if (s->ascii || (size_t)n == s->len) {
            jbuf o;
            jr_buf_init(r, &o);
            if (step == 1) jbuf_put(&o, s->b + start, (size_t)count);
            else
                for (int64_t k = 0; k < count; k++) jbuf_putc(&o, s->b[start + k * step]);
            if (!jr_buf_to_str(r, &o, out)) return false;
        } else {
            /* byte offsets of every code point, then pick */
            size_t *off = malloc(((size_t)n + 1) * sizeof *off);
            if (!off) return jr_oom(r);
            size_t p = 0;
            for (int64_t k = 0; k < n; k++) {
                off[k] = p;
                uint32_t cp;
                bool ok;
                p += ju8_next(s->b + p, s->len - p, &cp, &ok);
            }
            off[n] = s->len;
            jbuf o;
            jr_buf_init(r, &o);
            for (int64_t k = 0; k < count; k++) {
                const int64_t j = start + k * step;
                jbuf_put(&o, s->b + off[j], off[j + 1] - off[j]);
            }
            free(off);
            if (!jr_buf_to_str(r, &o, out)) return false;
        }
        out->flags = obj.flags & JF_MARKUP;
        return true;
    }
    case JV_RANGE: {
        jv items;
        jlist *l;
        if (!jr_iterate(r, obj, &l)) return false;
        items = jv_list(l, false);
        const bool ok = do_slice(r, items, a, b, c, out);
        jv_unref(items);
        return ok;
    }
    case JV_DICT: return jr_fail(r, "unhashable type: 'slice'");
    default: return jr_fail(r, "'%s' object is not subscriptable", jv_type_name(obj));
    }
}

/* ---- iteration ---- */

bool jr_iterate(jr *r, jv v, jlist **out) {
    *out = NULL;
    switch (v.kind) {
    case JV_UNDEF:
        if (!(*out = jlist_new(0))) return jr_oom(r);
        return true;
    case JV_LIST: *out = (jlist *)jv_ref(v).u.l; return true;
    case JV_DICT: {
        if (!jr_steps(r, v.u.d->n)) return false;
        jlist *l = jlist_new(v.u.d->n);
        if (!l) return jr_oom(r);
        for (size_t i = 0; i < v.u.d->n; i++) jlist_push(l, jv_ref(v.u.d->k[i]));
        *out = l;
        return true;
    }
    case JV_STR: {
        jstr *s = v.u.s;
        const size_t n = jstr_ncp(s);
        if (!jr_steps(r, n)) return false;
        jlist *l = jlist_new(n);
        if (!l) return jr_oom(r);
        for (size_t p = 0; p < s->len;) {
            uint32_t cp;
            bool ok;
            const size_t k = ju8_next(s->b + p, s->len - p, &cp, &ok);
            jstr *c = jstr_new(s->b + p, k);
            if (!c || !jlist_push(l, jv_str(c))) { /* Markup iterates as plain characters */
                jv_unref(jv_list(l, false));
                return jr_oom(r);
            }
            p += k;
        }
        *out = l;
        return true;
    }
    case JV_RANGE: {
        const jrange *g = v.u.rg;
        jlist *l = jlist_new(0);
        if (!l) return jr_oom(r);
        for (int64_t x = g->start; g->step > 0 ? x < g->stop : x > g->stop; x += g->step) {
            if (!jr_steps(r, 1)) {
                jv_unref(jv_list(l, false));
                return false;
            }
            if (!jlist_push(l, jv_int(x))) {
                jv_unref(jv_list(l, false));
                return jr_oom(r);
            }
            if ((g->step > 0 && x > INT64_MAX - g->step) || (g->step < 0 && x < INT64_MIN - g->step)) break;
        }
        *out = l;
        return true;
    }
    case JV_ITER: {
        jiter *it = v.u.it;
        if (it->kind >= IT_DICT_KEYS) {
            *out = (jlist *)jv_ref(jv_list(it->items, false)).u.l;
            return true;
        }
        jlist *l = jlist_new(it->items->n - it->pos);
        if (!l) return jr_oom(r);
        for (; it->pos < it->items->n; it->pos++) jlist_push(l, jv_ref(it->items->v[it->pos]));
        *out = l;
        return true;
    }
    default: return jr_fail(r, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- operators ---- */

bool jr_escape(jr *r, jv v, jv *out) {
    if (v.kind == JV_STR && (v.flags & JF_MARKUP)) {
        *out = jv_ref(v);
        return true;
    }
    jv s;
    if (!jr_to_str(r, v, &s)) return false;
    jbuf b;
    jr_buf_init(r, &b);
    const char *p = s.u.s->b;
    size_t run = 0;
    for (size_t i = 0; i < s.u.s->len; i++) {
        const char *e = p[i] == '&'    ? "&amp;"
                        : p[i] == '<'  ? "&lt;"
                        : p[i] == '>'  ? "&gt;"
                        : p[i] == '"'  ? "&#34;"
                        : p[i] == '\'' ? "&#39;"
                                       : NULL;
        if (!e) continue;
        jbuf_put(&b, p + run, i - run);
        jbuf_put(&b, e, strlen(e));
        run = i + 1;
    }
    jbuf_put(&b, p + run, s.u.s->len - run);
    jv_unref(s);
    return jr_buf_to_str_as(r, &b, true, out);
}

static bool concat_str(jr *r, jv a, jv b, jv *out) {
    jv ea = jv_ref(a), eb = jv_ref(b);
    const bool markup = (a.flags | b.flags) & JF_MARKUP;
    if (markup) { /* Markup.__add__ / __radd__: the other operand is escaped */
        jv_unref(ea);
        jv_unref(eb);
        if (!jr_escape(r, a, &ea)) return false;
        if (!jr_escape(r, b, &eb)) {
            jv_unref(ea);
            return false;
        }
    }
    jbuf o;
    jr_buf_init(r, &o);
    jbuf_put(&o, ea.u.s->b, ea.u.s->len);
    jbuf_put(&o, eb.u.s->b, eb.u.s->len);
    jv_unref(ea);
    jv_unref(eb);
    return jr_buf_to_str_as(r, &o, markup, out);
}

static bool repeat(jr *r, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.kind == JV_STR) {
        const size_t len = seq.u.s->len;
        if (len && (uint64_t)times > r->lim.max_output_bytes / len)
            return jr_limit(r, "the output budget (%zu bytes) is spent: a string grew too large",
                            r->lim.max_output_bytes);
        jbuf o;
        jr_buf_init(r, &o);
        for (int64_t i = 0; i < times; i++) jbuf_put(&o, seq.u.s->b, len);
        return jr_buf_to_str_as(r, &o, seq.flags & JF_MARKUP, out);
    }
    const size_t n = seq.u.l->n;
    if (n && (uint64_t)times > r->lim.max_output_bytes / (n * sizeof(jv)))
        return jr_limit(r, "the output budget (%zu bytes) is spent: a list grew too large", r->lim.max_output_bytes);
    if (!jr_steps(r, n * (uint64_t)times)) return false;
    jlist *l = jlist_new(n * (size_t)times);
    if (!l) return jr_oom(r);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < n; k++) jlist_push(l, jv_ref(seq.u.l->v[k]));
    *out = jv_list(l, seq.flags & JF_TUPLE);
    return true;
}

static const char *op_name(int op) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    return names[op];
}

static bool type_error(jr *r, int op, jv a, jv b) {
    if (op == OP_ADD && a.kind == JV_STR)
        return jr_fail(r, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == OP_ADD && a.kind == JV_LIST && !(a.flags & JF_TUPLE))
        return jr_fail(r, "can only concatenate list (not \"%s\") to list", jv_type_name(b));
    return jr_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op), jv_type_name(a),
                   jv_type_name(b));
}

static bool int_pow(jr *r, int64_t base, int64_t e, jv *out) {
    int64_t acc = 1, b = base;
    while (e > 0) {
        if (e & 1 && __builtin_mul_overflow(acc, b, &acc)) goto over;
        e >>= 1;
        if (e && __builtin_mul_overflow(b, b, &b)) goto over;
    }
    *out = jv_int(acc);
    return true;
over:
    return jr_fail(r, "integer overflow in ** (cinder's integers are 64-bit)");
}

/* + - * of two numbers: ints checked for overflow, floats otherwise */
static bool arith(jr *r, int op, jv a, jv b, jv *out) {
    if (jv_is_intlike(a) && jv_is_intlike(b)) {
        int64_t v;
        const bool over = op == OP_ADD   ? __builtin_add_overflow(a.u.i, b.u.i, &v)
                          : op == OP_SUB ? __builtin_sub_overflow(a.u.i, b.u.i, &v)
                                         : __builtin_mul_overflow(a.u.i, b.u.i, &v);
        if (over) return jr_fail(r, "integer overflow in %s", op == OP_ADD ? "+" : op == OP_SUB ? "-" : "*");
        *out = jv_int(v);
        return true;
    }
    const double x = jv_to_f(a), y = jv_to_f(b);
    *out = jv_float(op == OP_ADD ? x + y : op == OP_SUB ? x - y : x * y);
    return true;
}

static bool op_add(jr *r, jv a, jv b, jv *out) {
    if (jv_is_num(a) && jv_is_num(b)) return arith(r, OP_ADD, a, b, out);
    if (a.kind == JV_STR && b.kind == JV_STR) return concat_str(r, a, b, out);
    if (a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JF_TUPLE) == (b.flags & JF_TUPLE)) {
        const size_t n = a.u.l->n + b.u.l->n;
        if (!jr_steps(r, n)) return false;
        jlist *l = jlist_new(n);
        if (!l) return jr_oom(r);
        for (size_t i = 0; i < a.u.l->n; i++) jlist_push(l, jv_ref(a.u.l->v[i]));
        for (size_t i = 0; i < b.u.l->n; i++) jlist_push(l, jv_ref(b.u.l->v[i]));
        *out = jv_list(l, a.flags & JF_TUPLE);
        return true;
    }
    return type_error(r, OP_ADD, a, b);
}

static bool op_mul(jr *r, jv a, jv b, jv *out) {
    if (jv_is_num(a) && jv_is_num(b)) return arith(r, OP_MUL, a, b, out);
    if ((a.kind == JV_STR || a.kind == JV_LIST) && jv_is_intlike(b)) return repeat(r, a, b.u.i, out);
    if ((b.kind == JV_STR || b.kind == JV_LIST) && jv_is_intlike(a)) return repeat(r, b, a.u.i, out);
    return jr_fail(r, "can't multiply sequence by non-int of type '%s'",
                   jv_type_name(a.kind == JV_STR || a.kind == JV_LIST ? b : a));
}

/* // and % of ints: Python's floor rounding (the remainder takes the divisor's sign) */
static bool int_floordiv_mod(jr *r, int op, int64_t x, int64_t y, jv *out) {
    if (y == 0) return jr_fail(r, "integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) {
        if (op != OP_MOD) return jr_fail(r, "integer overflow in //");
        *out = jv_int(0);
        return true;
    }
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
    }
    *out = jv_int(op == OP_MOD ? m : q);
    return true;
}

/* // and % of floats as CPython's float_divmod computes them */
static bool float_floordiv_mod(jr *r, int op, double x, double y, jv *out) {
    if (y == 0.0) return jr_fail(r, op == OP_MOD ? "float modulo" : "float floor division by zero");
    double mod = fmod(x, y), div = (x - mod) / y;
    if (mod != 0.0) {
        if ((y < 0) != (mod < 0)) {
            mod += y;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, y);
    }
    double fd;
    if (div != 0.0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, x / y);
    }
    *out = jv_float(op == OP_MOD ? mod : fd);
    return true;
}

static bool op_pow(jr *r, jv a, jv b, jv *out) {
    if (jv_is_intlike(a) && jv_is_intlike(b) && b.u.i >= 0) return int_pow(r, a.u.i, b.u.i, out);
    if (!jv_is_num(a) || !jv_is_num(b)) return type_error(r, OP_POW, a, b);
    const double x = jv_to_f(a), y = jv_to_f(b);
    if (x == 0.0 && y < 0) return jr_fail(r, "0.0 cannot be raised to a negative power");
    if (x < 0 && y != floor(y)) return jr_fail(r, "a negative number to a fractional power is complex");
    *out = jv_float(pow(x, y));
    if (isinf(out->u.f) && !isinf(x) && !isinf(y)) return jr_fail(r, "(34, 'Numerical result out of range')");
    return true;
}

bool jr_binop(jr *r, int op, jv a, jv b, jv *out) {
    if (a.kind == JV_UNDEF) return jr_undef_fail(r, a);
    if (b.kind == JV_UNDEF) return jr_undef_fail(r, b);
    const bool ni = jv_is_intlike(a) && jv_is_intlike(b), nf = jv_is_num(a) && jv_is_num(b);
    switch (op) {
    case OP_ADD: return op_add(r, a, b, out);
    case OP_SUB: return nf ? arith(r, OP_SUB, a, b, out) : type_error(r, op, a, b);
    case OP_MUL: return op_mul(r, a, b, out);
    case OP_DIV:
        if (!nf) return type_error(r, op, a, b);
        if (jv_to_f(b) == 0.0) return jr_fail(r, "division by zero");
        *out = jv_float(jv_to_f(a) / jv_to_f(b));
        return true;
    case OP_FLOORDIV:
    case OP_MOD:
        if (a.kind == JV_STR && op == OP_MOD) return jr_format_percent(r, a, b, out);
        if (!nf) return type_error(r, op, a, b);
        if (ni) return int_floordiv_mod(r, op, a.u.i, b.u.i, out);
        return float_floordiv_mod(r, op, jv_to_f(a), jv_to_f(b), out);
    case OP_POW: return op_pow(r, a, b, out);
    }
    return jr_fail(r, "unknown operator");
}

bool jr_contains(jr *r, jv c, jv item, bool *out) {
    bool deep = false;
    *out = false;
    switch (c.kind) {
    case JV_UNDEF: return true;
    case JV_STR:
        if (item.kind != JV_STR)
            return jr_fail(r, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        *out = item.u.s->len == 0 || memmem(c.u.s->b, c.u.s->len, item.u.s->b, item.u.s->len) != NULL;
        return true;
    case JV_LIST:
        for (size_t i = 0; i < c.u.l->n && !*out; i++) *out = jv_equal(c.u.l->v[i], item, &deep);
        return deep ? jr_fail(r, "values nested too deeply to compare") : true;
    case JV_DICT:
        if (!jv_hashable(item)) return jr_fail(r, "unhashable type: '%s'", jv_type_name(item));
        *out = jdict_get(c.u.d, item) != NULL;
        return true;
    case JV_NS: return jr_fail(r, "argument of type 'Namespace' is not iterable");
    case JV_RANGE:
    case JV_ITER: {
        jlist *l;
        if (c.kind == JV_ITER && c.u.it->kind < IT_DICT_KEYS) { /* a generator is used up to the match */
            jiter *it = c.u.it;
            for (; it->pos < it->items->n && !*out; it->pos++) *out = jv_equal(it->items->v[it->pos], item, &deep);
            return true;
        }
        if (!jr_iterate(r, c, &l)) return false;
        for (size_t i = 0; i < l->n && !*out; i++) *out = jv_equal(l->v[i], item, &deep);
        jv_unref(jv_list(l, false));
        return true;
    }
    default: return jr_fail(r, "argument of type '%s' is not iterable", jv_type_name(c));
    }
}

bool jr_compare(jr *r, int op, jv a, jv b, bool *out) {
    bool deep = false;
    switch (op) {
    case CMP_EQ:
    case CMP_NE:
        *out = jv_equal(a, b, &deep) == (op == CMP_EQ);
        return deep ? jr_fail(r, "values nested too deeply to compare") : true;
    case CMP_IN:
    case CMP_NOTIN:
        if (!jr_contains(r, b, a, out)) return false;
        if (op == CMP_NOTIN) *out = !*out;
        return true;
    default: {
        if (a.kind == JV_UNDEF) return jr_undef_fail(r, a);
        if (b.kind == JV_UNDEF) return jr_undef_fail(r, b);
        int c;
        const char *why = NULL;
        static const char *const sym[] = {"", "", "<", "<=", ">", ">="};
        if (!jv_compare(a, b, &c, &why)) {
            if (why) return jr_fail(r, "%s", why);
            return jr_fail(r, "'%s' not supported between instances of '%s' and '%s'", sym[op], jv_type_name(a),
                           jv_type_name(b));
        }
        const bool unordered = (a.kind == JV_FLOAT && isnan(a.u.f)) || (b.kind == JV_FLOAT && isnan(b.u.f));
        *out = !unordered && (op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0);
        return true;
    }
    }
}

/* ---- calls ---- */

static xres run_for(jr *r, const jnode *n, jv iterable, jscope *s, int64_t depth0, jbuf *out);

static bool call_macro(jr *r, jv fn, const jargs *a, jv *out) {
    const jmacro *m = fn.u.m;
    const jnode *def = m->def;
    const uint32_t np = def->n_kids2;
    jscope *ms = scope_new(r, m->closure);
    if (!ms) return false;
    if (!frame_start(r, ms, def->undef, def->n_undef)) {
        scope_end(r, ms);
        return false;
    }
    bool ok = true;
    bool *bound = calloc(np ? np : 1, sizeof *bound);
    if (!bound) {
        scope_end(r, ms);
        return jr_oom(r);
    }
    jlist *extra = NULL;
    jdict *kwextra = NULL;
    jv caller = jv_missing();
    for (size_t i = 0; ok && i < a->n_pos; i++) {
        if (i < np) {
            ok = scope_set(r, ms, def->kids2[i]->atom, jv_ref(a->pos[i]));
            bound[i] = true;
        } else if (def->flags & NF_USES_VARARGS) {
            if (!extra && !(extra = jlist_new(0))) ok = jr_oom(r);
            else if (!jlist_push(extra, jv_ref(a->pos[i]))) ok = jr_oom(r);
        } else {
            ok = jr_fail(r, "macro '%s' takes not more than %u argument(s)", m->name, np);
        }
    }
    for (size_t k = 0; ok && k < a->n_kw; k++) {
        const jstr *kn = a->kw_names[k];
        uint32_t i;
        for (i = 0; i < np; i++) {
            const char *pn = r->t->atoms[def->kids2[i]->atom];
            if (strlen(pn) == kn->len && memcmp(pn, kn->b, kn->len) == 0) break;
        }
        if (i < np && !bound[i]) {
            ok = scope_set(r, ms, def->kids2[i]->atom, jv_ref(a->kw[k]));
            bound[i] = true;
        } else if (kn->len == 6 && !memcmp(kn->b, "caller", 6) && (def->flags & NF_USES_CALLER)) {
            caller = a->kw[k];
        } else if (def->flags & NF_USES_KWARGS) {
            if (!kwextra && !(kwextra = jdict_new(0))) ok = jr_oom(r);
            else if (!jdict_set(kwextra, jv_ref(jv_str((jstr *)kn)), jv_ref(a->kw[k]))) ok = jr_oom(r);
        } else if (kn->len == 6 && !memcmp(kn->b, "caller", 6)) {
            ok = jr_fail(
                r, "macro '%s' was invoked with two values for the special caller argument. This is most likely a bug.",
                m->name);
        } else {
            ok = jr_fail(r, "macro '%s' takes no keyword argument '%.64s'", m->name, kn->b);
        }
    }
    /* defaults, in order, seeing the parameters before them */
    for (uint32_t i = 0; ok && i < np; i++) {
        if (bound[i]) continue;
        jv v;
        if (def->defs && def->defs[i]) {
            ok = eval(r, def->defs[i], ms, &v) && scope_set(r, ms, def->kids2[i]->atom, v);
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "parameter '%.64s' was not provided", r->t->atoms[def->kids2[i]->atom]);
            ok = scope_set(r, ms, def->kids2[i]->atom, jr_undef_msg(r, msg));
        }
    }
    free(bound);
    if (ok && (def->flags & NF_USES_CALLER))
        ok = scope_set(r, ms, r->t->atom_caller,
                       jv_is_missing(caller) ? jr_undef_msg(r, "No caller defined") : jv_ref(caller));
    if (ok && (def->flags & NF_USES_VARARGS)) {
        if (!extra && !(extra = jlist_new(0))) ok = jr_oom(r);
        if (ok) {
            ok = scope_set(r, ms, r->t->atom_varargs, jv_list(extra, true));
            extra = NULL;
        }
    }
    if (ok && (def->flags & NF_USES_KWARGS)) {
        if (!kwextra && !(kwextra = jdict_new(0))) ok = jr_oom(r);
        if (ok) {
            ok = scope_set(r, ms, r->t->atom_kwargs, jv_dict(kwextra));
            kwextra = NULL;
        }
    }
    if (extra) jv_unref(jv_list(extra, true));
    if (kwextra) jv_unref(jv_dict(kwextra));
    if (ok) {
        jbuf b;
        jr_buf_init(r, &b);
        const xres x = exec_body(r, def->kids, def->n_kids, ms, &b);
        if (x == X_ERR) {
            jbuf_free(&b);
            ok = false;
        } else {
            ok = jr_buf_to_str(r, &b, out);
        }
    }
    scope_end(r, ms);
    return ok;
}

bool jr_call(jr *r, jv fn, const jargs *a, jv *out) {
    switch (fn.kind) {
    case JV_UNDEF: return jr_undef_fail(r, fn);
    case JV_MACRO: return call_macro(r, fn, a, out);
    case JV_FUNC: return jb_call_global(r, fn.sub, a, out);
    case JV_METHOD: {
        jv self = {.kind = fn.u.o->type, .flags = fn.flags, .u.o = fn.u.o};
        return jb_call_method(r, self, fn.sub, a, out);
    }
    case JV_LOOP: {
        const jloop *l = fn.u.loop;
        if (!(l->node->flags & NF_RECURSIVE))
            return jr_fail(r, "The loop must have the 'recursive' marker to be called recursively.");
        if (a->n_pos != 1 || a->n_kw) return jr_fail(r, "loop() takes exactly one argument");
        jbuf b;
        jr_buf_init(r, &b);
        const xres x = run_for(r, l->node, a->pos[0], l->scope, l->depth0 + 1, &b);
        if (x == X_ERR) {
            jbuf_free(&b);
            return false;
        }
        return jr_buf_to_str(r, &b, out);
    }
    default: return jr_fail(r, "'%s' object is not callable", jv_type_name(fn));
    }
}

/* ---- expressions ---- */

/* A filter chain whose innermost input is the body text (filter blocks, block sets). */
static bool apply_filter(jr *r, const jnode *f, jscope *s, jv body, jv *out);

static bool eval_filter(jr *r, const jnode *n, jscope *s, jv in, jv *out) {
    jargs a;
    if (!eval_args(r, n, s, &a)) {
        jv_unref(in);
        return false;
    }
    r->line = n->line;
    bool ok;
    if (n->id < 0) ok = jr_fail(r, "No filter named '%.64s' found.", n->val.u.s->b);
    else ok = jb_filter(r, n->id, in, &a, out);
    jv_unref(in);
    args_free(&a);
    return ok;
}

static bool apply_filter(jr *r, const jnode *f, jscope *s, jv body, jv *out) {
    if (!f) {
        *out = body;
        return true;
    }
    jv in;
    if (!apply_filter(r, f->a, s, body, &in)) return false;
    return eval_filter(r, f, s, in, out);
}

/* One function per kind of expression node; eval() dispatches through EVAL below. */

static bool ev_const(jr *r, const jnode *n, jscope *s, jv *out) {
    (void)r;
    (void)s;
    *out = jv_ref(n->val);
    return true;
}

static bool ev_name(jr *r, const jnode *n, jscope *s, jv *out) {
    *out = lookup(r, s, n->atom);
    return true;
}

static bool ev_getattr(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a;
    if (!eval(r, n->a, s, &a)) return false;
    r->line = n->line;
    const bool ok = jr_getattr(r, a, n->val, n->id, out);
    jv_unref(a);
    return ok;
}

/* a[start:stop:step], the parts not written missing */
static bool eval_slice(jr *r, const jnode *n, jscope *s, jv a, jv *out) {
    jv p[3] = {jv_missing(), jv_missing(), jv_missing()};
    const jnode *q[3] = {n->b->a, n->b->b, n->b->c};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++)
        if (q[i]) ok = eval(r, q[i], s, &p[i]);
    r->line = n->line;
    if (ok) ok = do_slice(r, a, p[0], p[1], p[2], out);
    for (int i = 0; i < 3; i++) jv_unref(p[i]);
    return ok;
}

static bool ev_getitem(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a, b;
    if (!eval(r, n->a, s, &a)) return false;
    bool ok;
    if (n->b->kind == N_SLICE) {
        ok = eval_slice(r, n, s, a, out);
    } else if ((ok = eval(r, n->b, s, &b))) {
        r->line = n->line;
        ok = jr_getitem(r, a, b, out);
        jv_unref(b);
    }
    jv_unref(a);
    return ok;
}

static bool ev_call(jr *r, const jnode *n, jscope *s, jv *out) {
    jv fn;
    if (!eval(r, n->a, s, &fn)) return false;
    jargs args;
    bool ok = eval_args(r, n, s, &args);
    if (ok) {
        r->line = n->line;
        ok = jr_call(r, fn, &args, out);
        args_free(&args);
    }
    jv_unref(fn);
    return ok;
}

static bool ev_filter(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a;
    if (!eval(r, n->a, s, &a)) return false;
    return eval_filter(r, n, s, a, out);
}

static bool ev_test(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a;
    if (!eval(r, n->a, s, &a)) return false;
    jargs args;
    bool ok = eval_args(r, n, s, &args);
    if (ok) {
        r->line = n->line;
        bool res = false;
        if (n->id < 0) ok = jr_fail(r, "No test named '%.64s' found.", n->val.u.s->b);
        else ok = jb_test(r, n->id, a, &args, &res);
        args_free(&args);
        *out = jv_bool(res);
    }
    jv_unref(a);
    return ok;
}

/* -a and +a */
static bool ev_sign(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a;
    if (!eval(r, n->a, s, &a)) return false;
    r->line = n->line;
    const bool neg = n->kind == N_NEG;
    bool ok = true;
    if (a.kind == JV_UNDEF) ok = jr_undef_fail(r, a);
    else if (jv_is_intlike(a) && neg && a.u.i == INT64_MIN) ok = jr_fail(r, "integer overflow in -");
    else if (jv_is_intlike(a)) *out = jv_int(neg ? -a.u.i : a.u.i);
    else if (a.kind == JV_FLOAT) *out = jv_float(neg ? -a.u.f : a.u.f);
    else ok = jr_fail(r, "bad operand type for unary %s: '%s'", neg ? "-" : "+", jv_type_name(a));
    jv_unref(a);
    return ok;
}

static bool ev_not(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a;
    if (!eval(r, n->a, s, &a)) return false;
    *out = jv_bool(!jv_truthy(a));
    jv_unref(a);
    return true;
}

static bool ev_binop(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a, b = jv_undef();
    bool ok = eval(r, n->a, s, &a) && eval(r, n->b, s, &b);
    if (ok) {
        r->line = n->line;
        ok = jr_binop(r, n->op, a, b, out);
    }
    jv_unref(a);
    jv_unref(b);
    return ok;
}

/* a and b, a or b: the operand that decides, as Python returns it */
static bool ev_andor(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a;
    if (!eval(r, n->a, s, &a)) return false;
    if (jv_truthy(a) == (n->kind == N_AND)) {
        jv_unref(a);
        return eval(r, n->b, s, out);
    }
    *out = a;
    return true;
}

/* a ~ b ~ ...: each operand's str() */
static bool ev_concat(jr *r, const jnode *n, jscope *s, jv *out) {
    jbuf o;
    jr_buf_init(r, &o);
    bool ok = true;
    for (uint32_t i = 0; i < n->n_kids && ok; i++) {
        jv v;
        if (!(ok = eval(r, n->kids[i], s, &v))) break;
        const char *why = NULL;
        if (!jv_write_str(&o, v, &why)) ok = jr_buf_fail(r, &o, why);
        jv_unref(v);
    }
    if (ok) return jr_buf_to_str(r, &o, out);
    jbuf_free(&o);
    return false;
}

/* a < b <= c ...: chained, each operand evaluated once, stopping at the first false */
static bool ev_compare(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a, b = jv_undef();
    if (!eval(r, n->a, s, &a)) return false;
    bool ok = true;
    *out = jv_bool(true);
    for (uint32_t i = 0; i < n->n_kids && ok; i++) {
        if (!(ok = eval(r, n->kids[i]->a, s, &b))) break;
        bool res;
        r->line = n->kids[i]->line;
        if (!(ok = jr_compare(r, n->kids[i]->op, a, b, &res))) break;
        jv_unref(a);
        a = b;
        b = jv_undef();
        if (!res) {
            *out = jv_bool(false);
            break;
        }
    }
    jv_unref(a);
    jv_unref(b);
    return ok;
}

/* a if cond else b; without else, an Undefined that says so */
static bool ev_condexpr(jr *r, const jnode *n, jscope *s, jv *out) {
    jv a;
    if (!eval(r, n->a, s, &a)) return false;
    const bool yes = jv_truthy(a);
    jv_unref(a);
    if (yes) return eval(r, n->b, s, out);
    if (n->c) return eval(r, n->c, s, out);
    char m[160];
    snprintf(m, sizeof m, "the inline if-expression on line %d evaluated to false and no else section was defined.",
             n->line);
    *out = jr_undef_msg(r, m);
    return true;
}

/* [a, b] and (a, b) */
static bool ev_list(jr *r, const jnode *n, jscope *s, jv *out) {
    if (!jr_steps(r, n->n_kids)) return false;
    jlist *l = jlist_new(n->n_kids);
    if (!l) return jr_oom(r);
    for (uint32_t i = 0; i < n->n_kids; i++) {
        jv v;
        if (!eval(r, n->kids[i], s, &v)) {
            jv_unref(jv_list(l, false));
            return false;
        }
        jlist_push(l, v);
    }
    *out = jv_list(l, n->kind == N_TUPLE);
    return true;
}

static bool ev_dict(jr *r, const jnode *n, jscope *s, jv *out) {
    if (!jr_steps(r, n->n_kids)) return false;
    jdict *d = jdict_new(n->n_kids);
    if (!d) return jr_oom(r);
    for (uint32_t i = 0; i < n->n_kids; i++) {
        jv k, v;
        if (!eval(r, n->kids[i], s, &k)) {
            jv_unref(jv_dict(d));
            return false;
        }
        if (!jv_hashable(k)) {
            r->line = n->kids[i]->line;
            jr_fail(r, "unhashable type: '%s'", jv_type_name(k));
            jv_unref(k);
            jv_unref(jv_dict(d));
            return false;
        }
        if (!eval(r, n->kids2[i], s, &v)) {
            jv_unref(k);
            jv_unref(jv_dict(d));
            return false;
        }
        if (!jdict_set(d, k, v)) {
            jv_unref(jv_dict(d));
            return jr_oom(r);
        }
    }
    *out = jv_dict(d);
    return true;
}

typedef bool (*eval_fn)(jr *r, const jnode *n, jscope *s, jv *out);
static const eval_fn EVAL[] = {
    [N_CONST] = ev_const, [N_NAME] = ev_name,     [N_GETATTR] = ev_getattr, [N_GETITEM] = ev_getitem,
    [N_CALL] = ev_call,   [N_FILTER] = ev_filter, [N_TEST] = ev_test,       [N_NEG] = ev_sign,
    [N_POS] = ev_sign,    [N_NOT] = ev_not,       [N_BINOP] = ev_binop,     [N_AND] = ev_andor,
    [N_OR] = ev_andor,    [N_CONCAT] = ev_concat, [N_COMPARE] = ev_compare, [N_CONDEXPR] = ev_condexpr,
    [N_LIST] = ev_list,   [N_TUPLE] = ev_list,    [N_DICT] = ev_dict,
};

static bool eval_inner(jr *r, const jnode *n, jscope *s, jv *out) {
    const eval_fn f = n->kind < CN_ARRAY_LEN(EVAL) ? EVAL[n->kind] : NULL;
    return f ? f(r, n, s, out) : jr_fail(r, "unexpected node in an expression");
}

static bool eval(jr *r, const jnode *n, jscope *s, jv *out) {
    *out = jv_undef();
    if (!enter(r, n)) return false;
    const bool ok = eval_inner(r, n, s, out);
    r->depth--;
    if (!ok) {
        jv_unref(*out);
        *out = jv_undef();
    }
    return ok;
}

/* ---- statements ---- */

/* Renders body in a child scope of s into a new string. */
static bool render_to_str(jr *r, const jnode *frame, jscope *s, jv *out) {
    jscope *c = scope_new(r, s);
    if (!c) return false;
    if (!frame_start(r, c, frame->undef, frame->n_undef)) {
        scope_end(r, c);
        return false;
    }
    jnode *const *body = frame->kids;
    const uint32_t n = frame->n_kids;
    jbuf b;
    jr_buf_init(r, &b);
    const xres x = exec_body(r, body, n, c, &b);
    scope_end(r, c);
    if (x == X_ERR) {
        jbuf_free(&b);
        return false;
    }
    return jr_buf_to_str(r, &b, out);
}

static xres run_for(jr *r, const jnode *n, jv iterable, jscope *s, int64_t depth0, jbuf *out) {
    jlist *items;
    r->line = n->line;
    if (!jr_iterate(r, iterable, &items)) return X_ERR;
    if (n->c) { /* for x in y if cond: the test sees the loop target, not `loop` */
        jlist *kept = jlist_new(0);
        if (!kept) {
            jv_unref(jv_list(items, false));
            {
                jr_oom(r);
                return X_ERR;
            }
        }
        for (size_t i = 0; i < items->n; i++) {
            jscope *ts = scope_new(r, s);
            jv t;
            bool ok = ts && assign(r, n->a, jv_ref(items->v[i]), ts) && eval(r, n->c, ts, &t);
            scope_end(r, ts);
            if (ok) {
                if (jv_truthy(t) && !jlist_push(kept, jv_ref(items->v[i]))) ok = jr_oom(r);
                jv_unref(t);
            }
            if (!ok) {
                jv_unref(jv_list(kept, false));
                jv_unref(jv_list(items, false));
                return X_ERR;
            }
        }
        jv_unref(jv_list(items, false));
        items = kept;
    }
    /* a recursive loop keeps its scope for loop(...) calls, even from outside it */
    if ((n->flags & NF_RECURSIVE) && !capture(r, s)) {
        jv_unref(jv_list(items, false));
        return X_ERR;
    }
    jloop *loop = calloc(1, sizeof *loop);
    if (!loop) {
        jv_unref(jv_list(items, false));
        {
            jr_oom(r);
            return X_ERR;
        }
    }
    loop->h = (jobj){.rc = 1, .type = JV_LOOP};
    loop->items = items;
    loop->node = n;
    loop->scope = s;
    loop->depth0 = depth0;
    const jv lv = {.kind = JV_LOOP, .u.loop = loop};
    xres res = X_OK;
    for (size_t i = 0; i < items->n; i++) {
        loop->index0 = (int64_t)i;
        if (!jr_steps(r, 1)) {
            res = X_ERR;
            break;
        }
        jscope *is = scope_new(r, s);
        if (!is || !frame_start(r, is, n->undef, n->n_undef) || !assign(r, n->a, jv_ref(items->v[i]), is) ||
            !scope_set(r, is, r->t->atom_loop, jv_ref(lv))) {
            scope_end(r, is);
            res = X_ERR;
            break;
        }
        const xres x = exec_body(r, n->kids, n->n_kids, is, out);
        scope_end(r, is);
        if (x == X_ERR) {
            res = X_ERR;
            break;
        }
        if (x == X_BREAK) break;
    }
    if (res == X_OK && items->n == 0 && n->n_kids2) {
        jscope *es = scope_new(r, s);
        const xres x = es && frame_start(r, es, n->undef2, n->n_undef2) ? exec_body(r, n->kids2, n->n_kids2, es, out)
                                                                        : X_ERR;
        scope_end(r, es);
        res = x == X_ERR ? X_ERR : X_OK;
    }
    jv_unref(lv);
    return res;
}

static bool write_value(jr *r, jbuf *out, jv v) {
    const char *why = NULL;
    if (!jv_write_str(out, v, &why)) return jr_buf_fail(r, out, why);
    return true;
}

/* One function per kind of statement node; exec() dispatches through EXEC below. */

static xres ex_text(jr *r, const jnode *n, jscope *s, jbuf *out) {
    (void)s;
    if (jbuf_put(out, n->val.u.s->b, n->val.u.s->len)) return X_OK;
    jr_buf_fail(r, out, NULL);
    return X_ERR;
}

static xres ex_print(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv v;
    if (!eval(r, n->a, s, &v)) return X_ERR;
    const bool ok = write_value(r, out, v);
    jv_unref(v);
    return ok ? X_OK : X_ERR;
}

static xres ex_if(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv v;
    if (!eval(r, n->a, s, &v)) return X_ERR;
    const bool t = jv_truthy(v);
    jv_unref(v);
    return t ? exec_body(r, n->kids, n->n_kids, s, out) : exec_body(r, n->kids2, n->n_kids2, s, out);
}

static xres ex_for(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv v;
    if (!eval(r, n->b, s, &v)) return X_ERR;
    const xres x = run_for(r, n, v, s, 0, out);
    jv_unref(v);
    return x;
}

static xres ex_set(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv v;
    (void)out;
    if (!eval(r, n->b, s, &v)) return X_ERR;
    r->line = n->line;
    return assign(r, n->a, v, s) ? X_OK : X_ERR;
}

/* {% set x %}body{% endset %}, through its filters */
static xres ex_setblock(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv body, res;
    (void)out;
    if (!render_to_str(r, n, s, &body)) return X_ERR;
    if (!apply_filter(r, n->b, s, body, &res)) return X_ERR;
    r->line = n->line;
    return assign(r, n->a, res, s) ? X_OK : X_ERR;
}

/* A macro (or a call block's caller) defined by n, closing over s. */
static bool new_macro(jr *r, const jnode *n, jscope *s, const char *name, jv *out) {
    jmacro *m = calloc(1, sizeof *m);
    if (!m) return jr_oom(r);
    m->h = (jobj){.rc = 1, .type = JV_MACRO};
    m->def = n;
    m->closure = s;
    m->name = name;
    *out = (jv){.kind = JV_MACRO, .u.m = m};
    if (capture(r, s)) return true;
    jv_unref(*out);
    return false;
}

static xres ex_macro(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv m;
    (void)out;
    if (!new_macro(r, n, s, r->t->atoms[n->atom], &m)) return X_ERR;
    return scope_set(r, s, n->atom, m) ? X_OK : X_ERR;
}

/* {% call f(args) %}body{% endcall %}: f called with caller= the body as a macro */
static xres ex_callblock(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv caller;
    if (!new_macro(r, n, s, "caller", &caller)) return X_ERR;
    const jnode *call = n->a;
    jv fn, res;
    jargs a;
    if (!eval(r, call->a, s, &fn)) {
        jv_unref(caller);
        return X_ERR;
    }
    if (!eval_args(r, call, s, &a)) {
        jv_unref(fn);
        jv_unref(caller);
        return X_ERR;
    }
    size_t cap = a.n_kw;
    jstr *caller_name = jstr_new("caller", 6);
    bool ok = caller_name ? args_push_kw(r, &a, caller_name, caller, &cap) : jr_oom(r);
    if (caller_name) jv_unref(jv_str(caller_name));
    else jv_unref(caller);
    r->line = n->line;
    if (ok) ok = jr_call(r, fn, &a, &res);
    args_free(&a);
    jv_unref(fn);
    if (!ok) return X_ERR;
    ok = write_value(r, out, res);
    jv_unref(res);
    return ok ? X_OK : X_ERR;
}

static xres ex_filterblock(jr *r, const jnode *n, jscope *s, jbuf *out) {
    jv body, res;
    if (!render_to_str(r, n, s, &body)) return X_ERR;
    if (!apply_filter(r, n->a, s, body, &res)) return X_ERR;
    const bool ok = write_value(r, out, res);
    jv_unref(res);
    return ok ? X_OK : X_ERR;
}

static xres ex_with(jr *r, const jnode *n, jscope *s, jbuf *out) {
    /* the values are evaluated where the with stands, not seeing each other */
    jscope *ws = scope_new(r, s);
    if (!ws) return X_ERR;
    bool ok = frame_start(r, ws, n->undef, n->n_undef);
    for (uint32_t i = 0; i < n->n_kids2 && ok; i++) {
        jv v;
        ok = eval(r, n->defs[i], s, &v) && assign(r, n->kids2[i], v, ws);
    }
    const xres x = ok ? exec_body(r, n->kids, n->n_kids, ws, out) : X_ERR;
    scope_end(r, ws);
    return x;
}

static xres ex_break(jr *r, const jnode *n, jscope *s, jbuf *out) {
    (void)r, (void)n, (void)s, (void)out;
    return X_BREAK;
}

static xres ex_continue(jr *r, const jnode *n, jscope *s, jbuf *out) {
    (void)r, (void)n, (void)s, (void)out;
    return X_CONTINUE;
}

/* a body in a frame of its own (flags 1: in the enclosing one) */
static xres ex_scope(jr *r, const jnode *n, jscope *s, jbuf *out) {
    if (n->flags == 1) return exec_body(r, n->kids, n->n_kids, s, out);
    jscope *c = scope_new(r, s);
    if (!c) return X_ERR;
    const xres x = frame_start(r, c, n->undef, n->n_undef) ? exec_body(r, n->kids, n->n_kids, c, out) : X_ERR;
    scope_end(r, c);
    return x;
}

/* what the parser found wrong where jinja2 fails only when it runs */
static xres ex_fail(jr *r, const jnode *n, jscope *s, jbuf *out) {
    (void)s, (void)out;
    jr_fail(r, "%s", n->val.u.s->b);
    return X_ERR;
}

typedef xres (*exec_fn)(jr *r, const jnode *n, jscope *s, jbuf *out);
static const exec_fn EXEC[] = {
    [N_TEXT] = ex_text,
    [N_PRINT] = ex_print,
    [N_IF] = ex_if,
    [N_FOR] = ex_for,
    [N_SET] = ex_set,
    [N_SETBLOCK] = ex_setblock,
    [N_MACRO] = ex_macro,
    [N_CALLBLOCK] = ex_callblock,
    [N_FILTERBLOCK] = ex_filterblock,
    [N_WITH] = ex_with,
    [N_BREAK] = ex_break,
    [N_CONTINUE] = ex_continue,
    [N_SCOPE] = ex_scope,
    [N_FAIL] = ex_fail,
};

static xres exec(jr *r, const jnode *n, jscope *s, jbuf *out) {
    const exec_fn f = n->kind < CN_ARRAY_LEN(EXEC) ? EXEC[n->kind] : NULL;
    if (f) return f(r, n, s, out);
    jr_fail(r, "unexpected node in a statement list");
    return X_ERR;
}

static xres exec_body(jr *r, jnode *const *body, uint32_t n, jscope *s, jbuf *out) {
    for (uint32_t i = 0; i < n; i++) {
        if (!enter(r, body[i])) return X_ERR;
        const xres x = exec(r, body[i], s, out);
        r->depth--;
        if (x != X_OK) return x;
    }
    return X_OK;
}

/* ---- entry ---- */

cn_jinja_limits cn_jinja_default_limits(void) {
    return (cn_jinja_limits){.max_output_bytes = 64u << 20, .max_steps = 50000000, .max_depth = 500, .now_unix = 0};
}

cn_status cn_jinja_render(const cn_jinja *t, const char *vars_json, size_t n, const cn_jinja_limits *lim, char **out,
                          size_t *out_len, cn_error *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out || (!vars_json && n)) return cn_err(err, CN_STATUS_INVALID_ARG, "jinja render: NULL argument");
    jr r = {.t = t, .lim = lim ? *lim : cn_jinja_default_limits()};
    if (r.lim.max_depth < 1) r.lim.max_depth = 1;
    jv vars = jv_undef();
    char why[160];
    if (!jv_from_json_text(vars_json ? vars_json : "{}", vars_json ? n : 2, true, &vars, why, sizeof why))
        return cn_err(err, strstr(why, "out of memory") ? CN_STATUS_NO_MEMORY : CN_STATUS_INVALID_ARG,
                      "template variables: %s", why);
    r.globals = malloc((t->n_atoms ? t->n_atoms : 1) * sizeof *r.globals);
    r.root = calloc(1, sizeof *r.root);
    jbuf o = {.limit = r.lim.max_output_bytes};
    cn_status st = CN_STATUS_OK;
    if (!r.globals || !r.root) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "jinja render: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < t->n_atoms; i++) r.globals[i] = jv_missing();
    for (size_t i = 0; i < vars.u.d->n; i++) {
        const jstr *k = vars.u.d->k[i].u.s;
        const int32_t a = jatom_find(t, k->b, k->len);
        if (a >= 0) r.globals[a] = vars.u.d->v[i]; /* borrowed from vars */
    }
    const xres x = frame_start(&r, r.root, t->root_undef, t->n_root_undef)
                       ? exec_body(&r, t->body, t->n_body, r.root, &o)
                       : X_ERR;
    if (x == X_ERR || r.failed) {
        if (!r.failed) jr_fail(&r, "rendering failed");
        st = cn_err(err, r.status, "template line %d: %s", r.line, r.msg);
        goto done;
    }
    if (o.over || o.oom) {
        st = o.oom ? cn_err(err, CN_STATUS_NO_MEMORY, "jinja render: out of memory")
                   : cn_err(err, CN_STATUS_LIMIT, "the output budget (%zu bytes) is spent", r.lim.max_output_bytes);
        goto done;
    }
    if (!o.p && !jbuf_put(&o, "", 0)) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "jinja render: out of memory");
        goto done;
    }
    *out = o.p;
    if (out_len) *out_len = o.n;
    o.p = NULL;
done:
    jbuf_free(&o);
    if (r.root) scope_free(r.root);
    for (jscope *k = r.kept; k;) {
        jscope *next = k->next_kept;
        scope_free(k);
        k = next;
    }
    for (jns *ns = r.namespaces; ns;) {
        jns *next = ns->next;
        jv_unref(jv_dict(ns->attrs));
        free(ns);
        ns = next;
    }
    free(r.globals);
    jv_unref(vars);
    return st;
}
