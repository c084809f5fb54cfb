/* jinja_parse.c — tokens to an AST, following jinja2's parser rule for rule (the same
 * precedence, the same quirks: `-x|f` filters the negation, `a**b**c` groups left, a
 * test's argument may be a bare primary, `x if c` without else is undefined).
 *
 * Statements: if / elif / else, for (tuple targets, `if` filter, else, recursive), set
 * (names, tuples, namespace attributes, block set with filters), macro (defaults; caller,
 * varargs and kwargs when the body names them), call blocks, filter blocks, with, print,
 * raw (in the lexer), break / continue (the loopcontrols extension), HF's generation tag,
 * block and autoescape (their bodies render in place). extends / include / import / from
 * parse but fail when run, as jinja2 without a loader does.
 *
 * As jinja2's compiler does, an unknown filter or test is an error when the template is
 * parsed, unless it sits in an if statement's test or body or a conditional expression
 * (then only running it fails). Nesting is limited (CN_JINJA_MAX_PARSE_DEPTH) so that
 * parsing, and the evaluator's recursion over the tree, use bounded stack. All nodes
 * and names live in the template's arena. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "jinja/jinja_impl.h"

/* ---- the arena ---- */

struct jarena {
    struct jarena_chunk *head;
};
typedef struct jarena_chunk {
    struct jarena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} jarena_chunk;

void *jarena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    jarena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        const size_t cap = n > 16384 ? n : 16384;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

jstr *jarena_str(jarena *a, const char *s, size_t n) {
    jstr *r = jarena_alloc(a, sizeof(jstr) + n + 1);
    if (!r) return NULL;
    r->h = (jobj){.rc = 1, .type = JV_STR};
    r->len = n;
    r->ncp = SIZE_MAX;
    if (n) memcpy(r->b, s, n);
    r->b[n] = 0;
    jstr_ncp(r); /* counted while still mutable */
    r->h.rc = JOBJ_IMMORTAL;
    return r;
}

static void arena_free(jarena *a) {
    if (!a) return;
    for (jarena_chunk *c = a->head; c;) {
        jarena_chunk *n = c->next;
        free(c);
        c = n;
    }
    free(a);
}

/* ---- the parser ---- */

typedef struct {
    const jtok *tk;
    size_t n_tk, pos;
    cn_jinja *t;
    jarena *a;
    int depth;
    int in_loop; /* for-loop bodies around here, within the current function */
    bool failed;
    int line;
    char msg[CN_ERROR_MSG_LEN];
    size_t atom_cap;
    uint32_t *atom_hash; /* slot -> atom + 1 */
    uint32_t hash_cap;
} parser;

static void *perr(parser *P, int line, const char *fmt, ...) CN_PRINTF(3, 4);
static void *perr(parser *P, int line, const char *fmt, ...) {
    if (!P->failed) {
        P->failed = true;
        P->line = line;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(P->msg, sizeof P->msg, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

static const jtok *cur(parser *P) { return &P->tk[P->pos]; }
static const jtok *peek(parser *P) { return &P->tk[P->pos + 1 < P->n_tk ? P->pos + 1 : P->pos]; }
static void adv(parser *P) {
    if (P->tk[P->pos].kind != T_EOF) P->pos++;
}
static bool is_op(const jtok *t, int op) { return t->kind == T_OP && t->op == op; }
static bool is_name(const jtok *t, const char *s) {
    return t->kind == T_NAME && t->n == strlen(s) && memcmp(t->p, s, t->n) == 0;
}

static const char *describe(const jtok *t, char buf[64]) {
    static const char *const ops[] = {"+", "-",  "/",  "//", "*",  "**", "%",  "~", "[", "]", "(", ")", "{",
                                      "}", "==", "!=", ">",  ">=", "<",  "<=", "=", ".", ":", "|", ",", ";"};
    switch (t->kind) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data / text";
    case T_VAR_BEGIN: return "begin of print statement";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "begin of statement block";
    case T_BLOCK_END: return "end of statement block";
    case T_NAME: snprintf(buf, 64, "%.*s", (int)CN_MIN(t->n, 48), t->p); return buf;
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    default: return t->op < CN_ARRAY_LEN(ops) ? ops[t->op] : "operator";
    }
}

static bool expect_op(parser *P, int op, const char *what) {
    if (is_op(cur(P), op)) {
        adv(P);
        return true;
    }
    char b[64];
    perr(P, cur(P)->line, "expected token '%s', got '%s'", what, describe(cur(P), b));
    return false;
}

static bool expect_kind(parser *P, int kind, const char *what) {
    if (cur(P)->kind == kind) {
        adv(P);
        return true;
    }
    char b[64];
    perr(P, cur(P)->line, "expected token '%s', got '%s'", what, describe(cur(P), b));
    return false;
}

static bool expect_name(parser *P, const char *s) {
    if (is_name(cur(P), s)) {
        adv(P);
        return true;
    }
    char b[64];
    perr(P, cur(P)->line, "expected token '%s', got '%s'", s, describe(cur(P), b));
    return false;
}

static bool enter(parser *P) {
    if (++P->depth > CN_JINJA_MAX_PARSE_DEPTH) {
        perr(P, cur(P)->line, "template nested too deeply (more than %d levels)", CN_JINJA_MAX_PARSE_DEPTH);
        return false;
    }
    return true;
}

/* ---- names ---- */

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

int32_t jatom_find(const cn_jinja *t, const char *s, size_t n) {
    for (uint32_t i = 0; i < t->n_atoms; i++)
        if (strlen(t->atoms[i]) == n && memcmp(t->atoms[i], s, n) == 0) return (int32_t)i;
    return -1;
}

static int32_t intern(parser *P, const char *s, size_t n) {
    cn_jinja *t = P->t;
    if (P->hash_cap == 0 || t->n_atoms * 2 >= P->hash_cap) {
        const uint32_t cap = P->hash_cap ? P->hash_cap * 2 : 256;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) return -1;
        for (uint32_t i = 0; i < t->n_atoms; i++) {
            uint32_t k = name_hash(t->atoms[i], strlen(t->atoms[i])) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
        free(P->atom_hash);
        P->atom_hash = h;
        P->hash_cap = cap;
    }
    uint32_t k = name_hash(s, n) & (P->hash_cap - 1);
    while (P->atom_hash[k]) {
        const char *a = t->atoms[P->atom_hash[k] - 1];
        if (strlen(a) == n && memcmp(a, s, n) == 0) return (int32_t)(P->atom_hash[k] - 1);
        k = (k + 1) & (P->hash_cap - 1);
    }
    if (!CN_GROW(t->atoms, P->atom_cap, (size_t)t->n_atoms + 1)) return -1;
    char *c = jarena_alloc(P->a, n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    t->atoms[t->n_atoms] = c;
    P->atom_hash[k] = t->n_atoms + 1;
    return (int32_t)t->n_atoms++;
}

/* ---- nodes ---- */

static jnode *node(parser *P, int kind, int line) {
    jnode *n = jarena_alloc(P->a, sizeof *n);
    if (!n) return perr(P, line, "out of memory");
    n->kind = (uint8_t)kind;
    n->line = line;
    n->atom = -1;
    n->id = -1;
    return n;
}

typedef struct {
    jnode **v;
    uint32_t n;
    size_t cap;
} nvec;

static bool nv_push(parser *P, nvec *v, jnode *x) {
    if (!CN_GROW(v->v, v->cap, (size_t)v->n + 1)) {
        perr(P, cur(P)->line, "out of memory");
        return false;
    }
    v->v[v->n++] = x;
    return true;
}

/* Moves v into the arena (freeing it); NULL for an empty vector (with *n = 0). */
static jnode **nv_done(parser *P, nvec *v, uint32_t *n) {
    *n = v->n;
    jnode **r = NULL;
    if (v->n) {
        r = jarena_alloc(P->a, v->n * sizeof *r);
        if (r) memcpy(r, v->v, v->n * sizeof *r);
        else perr(P, cur(P)->line, "out of memory");
    }
    free(v->v);
    v->v = NULL;
    v->n = v->cap = 0;
    return r;
}

static jnode *name_node(parser *P, const jtok *t, int kind) {
    jnode *n = node(P, kind, t->line);
    if (!n) return NULL;
    n->atom = intern(P, t->p, t->n);
    if (n->atom < 0) return perr(P, t->line, "out of memory");
    return n;
}

static jv name_str(parser *P, const char *s, size_t n) {
    jstr *js = jarena_str(P->a, s, n);
    if (!js) {
        perr(P, cur(P)->line, "out of memory");
        return jv_undef();
    }
    return jv_str(js);
}

/* ---- expressions ---- */

static jnode *parse_expression(parser *P, bool with_condexpr);
static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *const *extra_end,
                          bool explicit_parens, bool with_namespace);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P, bool with_namespace);
static jnode *parse_postfix(parser *P, jnode *n);
static jnode *parse_filter(parser *P, jnode *n, bool start_inline);

static bool parse_call_args(parser *P, jnode *call) {
    const int line = cur(P)->line;
    if (!expect_op(P, TO_LPAREN, "(")) return false;
    nvec args = {0}, kwargs = {0};
    bool need_comma = false, ok = true;
    while (ok && !is_op(cur(P), TO_RPAREN)) {
        if (need_comma) {
            if (!(ok = expect_op(P, TO_COMMA, ","))) break;
            if (is_op(cur(P), TO_RPAREN)) break;
        }
        if (is_op(cur(P), TO_MUL)) {
            if (call->b || call->c) {
                perr(P, line, "invalid syntax for function call expression");
                ok = false;
                break;
            }
            adv(P);
            ok = (call->b = parse_expression(P, true)) != NULL;
        } else if (is_op(cur(P), TO_POW)) {
            if (call->c) {
                perr(P, line, "invalid syntax for function call expression");
                ok = false;
                break;
            }
            adv(P);
            ok = (call->c = parse_expression(P, true)) != NULL;
        } else if (cur(P)->kind == T_NAME && is_op(peek(P), TO_ASSIGN)) {
            if (call->c) {
                perr(P, line, "invalid syntax for function call expression");
                ok = false;
                break;
            }
            jnode *kw = name_node(P, cur(P), N_KWARG);
            if (!kw) {
                ok = false;
                break;
            }
            kw->val = name_str(P, cur(P)->p, cur(P)->n);
            adv(P);
            adv(P);
            ok = (kw->a = parse_expression(P, true)) != NULL && nv_push(P, &kwargs, kw);
        } else {
            if (call->b || call->c || kwargs.n) {
                perr(P, line, "invalid syntax for function call expression");
                ok = false;
                break;
            }
            jnode *e = parse_expression(P, true);
            ok = e && nv_push(P, &args, e);
        }
        need_comma = true;
    }
    if (ok) ok = expect_op(P, TO_RPAREN, ")");
    call->kids = nv_done(P, &args, &call->n_kids);
    call->kids2 = nv_done(P, &kwargs, &call->n_kids2);
    return ok && !P->failed;
}

static jnode *parse_call(parser *P, jnode *callee) {
    jnode *c = node(P, N_CALL, cur(P)->line);
    if (!c) return NULL;
    c->a = callee;
    return parse_call_args(P, c) ? c : NULL;
}

/* A filter or test name, dotted parts joined as jinja2 does. */
static bool dotted_name(parser *P, jbuf *b) {
    const jtok *t = cur(P);
    if (t->kind != T_NAME) {
        char d[64];
        perr(P, t->line, "expected token 'name', got '%s'", describe(t, d));
        return false;
    }
    jbuf_put(b, t->p, t->n);
    adv(P);
    while (is_op(cur(P), TO_DOT)) {
        adv(P);
        if (cur(P)->kind != T_NAME) {
            char d[64];
            perr(P, cur(P)->line, "expected token 'name', got '%s'", describe(cur(P), d));
            return false;
        }
        jbuf_putc(b, '.');
        jbuf_put(b, cur(P)->p, cur(P)->n);
        adv(P);
    }
    if (b->oom || b->over) {
        perr(P, t->line, "out of memory");
        return false;
    }
    return true;
}

/* A filter or test applied to n: its (dotted) name read and resolved by id_of to a
 * builtin (-1: unknown, which fails when it runs, as jinja2 defers it inside an if). */
static jnode *builtin_node(parser *P, int kind, int line, jnode *n, int (*id_of)(const char *)) {
    jbuf b = {.limit = 4096};
    jnode *f = dotted_name(P, &b) ? node(P, kind, line) : NULL;
    if (f) {
        f->a = n;
        f->id = id_of(b.p);
        f->val = name_str(P, b.p, b.n);
    }
    jbuf_free(&b);
    return P->failed ? NULL : f;
}

static jnode *parse_filter(parser *P, jnode *n, bool start_inline) {
    const int depth = P->depth;
    while (is_op(cur(P), TO_PIPE) || start_inline) {
        if (!start_inline) adv(P);
        start_inline = false;
        if (!enter(P)) return NULL;
        jnode *f = builtin_node(P, N_FILTER, cur(P)->line, n, jb_filter_id);
        if (!f) return NULL;
        if (is_op(cur(P), TO_LPAREN) && !parse_call_args(P, f)) return NULL;
        n = f;
    }
    P->depth = depth;
    return n;
}

static jnode *parse_test(parser *P, jnode *n) {
    const int line = cur(P)->line;
    adv(P); /* is */
    bool negated = false;
    if (is_name(cur(P), "not")) {
        adv(P);
        negated = true;
    }
    jnode *t = builtin_node(P, N_TEST, line, n, jb_test_id);
    if (!t) return NULL;
    const jtok *c = cur(P);
    if (is_op(c, TO_LPAREN)) {
        if (!parse_call_args(P, t)) return NULL;
    } else if ((c->kind == T_NAME || c->kind == T_STRING || c->kind == T_INT || c->kind == T_FLOAT ||
                is_op(c, TO_LBRACKET) || is_op(c, TO_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return perr(P, c->line, "You cannot chain multiple tests with is");
        jnode *arg = parse_primary(P, false);
        if (arg) arg = parse_postfix(P, arg);
        if (!arg) return NULL;
        t->kids = jarena_alloc(P->a, sizeof *t->kids);
        if (!t->kids) return perr(P, line, "out of memory");
        t->kids[0] = arg;
        t->n_kids = 1;
    }
    if (negated) {
        jnode *no = node(P, N_NOT, line);
        if (!no) return NULL;
        no->a = t;
        return no;
    }
    return t;
}

static jnode *parse_subscribed(parser *P) {
    const int line = cur(P)->line;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), TO_COLON)) {
        adv(P);
    } else {
        jnode *e = parse_expression(P, true);
        if (!e) return NULL;
        if (!is_op(cur(P), TO_COLON)) return e;
        adv(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), TO_COLON) && !is_op(cur(P), TO_RBRACKET) && !is_op(cur(P), TO_COMMA))
        if (!(parts[1] = parse_expression(P, true))) return NULL;
    if (is_op(cur(P), TO_COLON)) {
        adv(P);
        if (!is_op(cur(P), TO_RBRACKET) && !is_op(cur(P), TO_COMMA))
            if (!(parts[2] = parse_expression(P, true))) return NULL;
    }
    jnode *s = node(P, N_SLICE, line);
    if (!s) return NULL;
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static jnode *parse_subscript(parser *P, jnode *n) {
    const jtok *t = cur(P);
    const int line = t->line;
    adv(P);
    if (t->kind == T_OP && t->op == TO_DOT) {
        const jtok *a = cur(P);
        adv(P);
        if (a->kind == T_NAME) {
            jnode *g = node(P, N_GETATTR, line);
            if (!g) return NULL;
            g->a = n;
            g->val = name_str(P, a->p, a->n);
            char tmp[64];
            snprintf(tmp, sizeof tmp, "%.*s", (int)CN_MIN(a->n, 63), a->p);
            g->id = a->n < 63 ? jb_method_id(tmp) : -1;
            return g;
        }
        if (a->kind != T_INT) return perr(P, a->line, "expected name or number");
        jnode *k = node(P, N_CONST, a->line), *g = node(P, N_GETITEM, line);
        if (!k || !g) return NULL;
        k->val = jv_int(a->i);
        g->a = n;
        g->b = k;
        return g;
    }
    /* '[' */
    nvec args = {0};
    while (!is_op(cur(P), TO_RBRACKET)) {
        if (args.n && !expect_op(P, TO_COMMA, ",")) break;
        jnode *e = parse_subscribed(P);
        if (!e || !nv_push(P, &args, e)) break;
    }
    jnode *g = NULL;
    if (!P->failed && expect_op(P, TO_RBRACKET, "]")) {
        g = node(P, N_GETITEM, line);
        if (g) {
            g->a = n;
            if (args.n == 1) {
                g->b = args.v[0];
            } else {
                jnode *tup = node(P, N_TUPLE, line);
                if (tup) {
                    tup->kids = nv_done(P, &args, &tup->n_kids);
                    g->b = tup;
                }
            }
        }
    }
    free(args.v);
    return P->failed ? NULL : g;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    const int depth = P->depth;
    while (n) {
        if (is_op(cur(P), TO_DOT) || is_op(cur(P), TO_LBRACKET)) {
            if (!enter(P)) return NULL;
            n = parse_subscript(P, n);
        } else if (is_op(cur(P), TO_LPAREN)) {
            if (!enter(P)) return NULL;
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    P->depth = depth;
    return n;
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    const int depth = P->depth;
    while (n) {
        if (is_op(cur(P), TO_PIPE)) {
            n = parse_filter(P, n, false);
        } else if (is_name(cur(P), "is")) {
            if (!enter(P)) return NULL;
            n = parse_test(P, n);
        } else if (is_op(cur(P), TO_LPAREN)) {
            if (!enter(P)) return NULL;
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    P->depth = depth;
    return n;
}

static jnode *parse_list_or_dict(parser *P, bool dict) {
    const int line = cur(P)->line;
    adv(P);
    const int close = dict ? TO_RBRACE : TO_RBRACKET;
    nvec keys = {0}, vals = {0};
    bool ok = true;
    while (ok && !is_op(cur(P), close)) {
        if (keys.n && !(ok = expect_op(P, TO_COMMA, ","))) break;
        if (is_op(cur(P), close)) break;
        jnode *k = parse_expression(P, true);
        if (!(ok = k && nv_push(P, &keys, k))) break;
        if (dict) {
            jnode *v = NULL;
            ok = expect_op(P, TO_COLON, ":") && (v = parse_expression(P, true)) && nv_push(P, &vals, v);
        }
    }
    if (ok) ok = expect_op(P, close, dict ? "}" : "]");
    jnode *n = ok ? node(P, dict ? N_DICT : N_LIST, line) : NULL;
    if (n) {
        n->kids = nv_done(P, &keys, &n->n_kids);
        n->kids2 = nv_done(P, &vals, &n->n_kids2);
    }
    free(keys.v);
    free(vals.v);
    return P->failed ? NULL : n;
}

static jnode *parse_primary(parser *P, bool with_namespace) {
    const jtok *t = cur(P);
    if (!enter(P)) return NULL;
    jnode *n = NULL;
    if (t->kind == T_NAME) {
        adv(P);
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            if ((n = node(P, N_CONST, t->line))) n->val = jv_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            if ((n = node(P, N_CONST, t->line))) n->val = jv_none();
        } else if (with_namespace && is_op(cur(P), TO_DOT)) {
            adv(P);
            const jtok *attr = cur(P);
            if (attr->kind != T_NAME) {
                char d[64];
                return perr(P, attr->line, "expected token 'name', got '%s'", describe(attr, d));
            }
            adv(P);
            if ((n = name_node(P, t, N_NSREF))) n->val = name_str(P, attr->p, attr->n);
        } else {
            n = name_node(P, t, N_NAME);
        }
    } else if (t->kind == T_STRING) {
        adv(P);
        if (cur(P)->kind != T_STRING) {
            if ((n = node(P, N_CONST, t->line))) n->val = jv_str(t->s);
        } else {
            jbuf b = {.limit = SIZE_MAX};
            jbuf_put(&b, t->s->b, t->s->len);
            while (cur(P)->kind == T_STRING) {
                jbuf_put(&b, cur(P)->s->b, cur(P)->s->len);
                adv(P);
            }
            if ((n = node(P, N_CONST, t->line))) n->val = name_str(P, b.p, b.n);
            jbuf_free(&b);
        }
    } else if (t->kind == T_INT || t->kind == T_FLOAT) {
        adv(P);
        if ((n = node(P, N_CONST, t->line))) n->val = t->kind == T_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (is_op(t, TO_LPAREN)) {
        adv(P);
        n = parse_tuple(P, false, true, NULL, true, false);
        if (n && !expect_op(P, TO_RPAREN, ")")) n = NULL;
    } else if (is_op(t, TO_LBRACKET)) {
        n = parse_list_or_dict(P, false);
    } else if (is_op(t, TO_LBRACE)) {
        n = parse_list_or_dict(P, true);
    } else {
        char d[64];
        perr(P, t->line, "unexpected '%s'", describe(t, d));
    }
    P->depth--;
    return P->failed ? NULL : n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    const jtok *t = cur(P);
    if (!enter(P)) return NULL;
    jnode *n;
    if (is_op(t, TO_SUB) || is_op(t, TO_ADD)) {
        adv(P);
        n = node(P, is_op(t, TO_SUB) ? N_NEG : N_POS, t->line);
        if (n && !(n->a = parse_unary(P, false))) n = NULL;
    } else {
        n = parse_primary(P, false);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return P->failed ? NULL : n;
}

/* The binary levels: each operator met adds one level of nesting to the tree, counted
 * against the depth limit like parentheses are. */
static jnode *binop(parser *P, int kind, int op, jnode *l, jnode *r, int line) {
    if (!l || !r) return NULL;
    if (!enter(P)) return NULL;
    jnode *n = node(P, kind, line);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *P) {
    const int depth = P->depth;
    jnode *l = parse_unary(P, true);
    while (l && is_op(cur(P), TO_POW)) {
        const int line = cur(P)->line;
        adv(P);
        l = binop(P, N_BINOP, OP_POW, l, parse_unary(P, true), line);
    }
    P->depth = depth;
    return l;
}

static jnode *parse_math2(parser *P) {
    const int depth = P->depth;
    jnode *l = parse_pow(P);
    while (l && cur(P)->kind == T_OP &&
           (cur(P)->op == TO_MUL || cur(P)->op == TO_DIV || cur(P)->op == TO_FLOORDIV || cur(P)->op == TO_MOD)) {
        const int op = cur(P)->op == TO_MUL        ? OP_MUL
                       : cur(P)->op == TO_DIV      ? OP_DIV
                       : cur(P)->op == TO_FLOORDIV ? OP_FLOORDIV
                                                   : OP_MOD;
        const int line = cur(P)->line;
        adv(P);
        l = binop(P, N_BINOP, op, l, parse_pow(P), line);
    }
    P->depth = depth;
    return l;
}

static jnode *parse_concat(parser *P) {
    const int line = cur(P)->line;
    jnode *first = parse_math2(P);
    if (!first || !is_op(cur(P), TO_TILDE)) return first;
    nvec v = {0};
    if (!nv_push(P, &v, first)) return NULL;
    while (is_op(cur(P), TO_TILDE)) {
        adv(P);
        jnode *e = parse_math2(P);
        if (!e || !nv_push(P, &v, e)) {
            free(v.v);
            return NULL;
        }
    }
    jnode *n = node(P, N_CONCAT, line);
    if (n) n->kids = nv_done(P, &v, &n->n_kids);
    free(v.v);
    return P->failed ? NULL : n;
}

static jnode *parse_math1(parser *P) {
    const int depth = P->depth;
    jnode *l = parse_concat(P);
    while (l && (is_op(cur(P), TO_ADD) || is_op(cur(P), TO_SUB))) {
        const int op = is_op(cur(P), TO_ADD) ? OP_ADD : OP_SUB;
        const int line = cur(P)->line;
        adv(P);
        l = binop(P, N_BINOP, op, l, parse_concat(P), line);
    }
    P->depth = depth;
    return l;
}

static jnode *parse_compare(parser *P) {
    const int line = cur(P)->line;
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    nvec ops = {0};
    for (;;) {
        const jtok *t = cur(P);
        int op = -1;
        if (t->kind == T_OP) {
            op = t->op == TO_EQ     ? CMP_EQ
                 : t->op == TO_NE   ? CMP_NE
                 : t->op == TO_LT   ? CMP_LT
                 : t->op == TO_LTEQ ? CMP_LE
                 : t->op == TO_GT   ? CMP_GT
                 : t->op == TO_GTEQ ? CMP_GE
                                    : -1;
            if (op >= 0) adv(P);
        } else if (is_name(t, "in")) {
            op = CMP_IN;
            adv(P);
        } else if (is_name(t, "not") && is_name(peek(P), "in")) {
            op = CMP_NOTIN;
            adv(P);
            adv(P);
        }
        if (op < 0) break;
        jnode *o = node(P, N_OPERAND, t->line);
        if (!o || !(o->a = parse_math1(P)) || !nv_push(P, &ops, o)) {
            free(ops.v);
            return NULL;
        }
        o->op = (uint8_t)op;
    }
    if (!ops.n) return first;
    jnode *c = node(P, N_COMPARE, line);
    if (c) {
        c->a = first;
        c->kids = nv_done(P, &ops, &c->n_kids);
    }
    free(ops.v);
    return P->failed ? NULL : c;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        const int line = cur(P)->line;
        adv(P);
        if (!enter(P)) return NULL;
        jnode *n = node(P, N_NOT, line);
        if (n && !(n->a = parse_not(P))) n = NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

/* operand (word operand)*, left to right: `and` over `not`, `or` over `and` */
static jnode *parse_logic(parser *P, int kind, const char *word, jnode *(*operand)(parser *)) {
    const int depth = P->depth;
    jnode *l = operand(P);
    while (l && is_name(cur(P), word)) {
        const int line = cur(P)->line;
        adv(P);
        l = binop(P, kind, 0, l, operand(P), line);
    }
    P->depth = depth;
    return l;
}

static jnode *parse_and(parser *P) { return parse_logic(P, N_AND, "and", parse_not); }
static jnode *parse_or(parser *P) { return parse_logic(P, N_OR, "or", parse_and); }

static jnode *parse_condexpr(parser *P) {
    const int line0 = cur(P)->line;
    jnode *e1 = parse_or(P);
    int line = line0;
    const int depth = P->depth;
    while (e1 && is_name(cur(P), "if")) {
        adv(P);
        if (!enter(P)) return NULL;
        jnode *c = node(P, N_CONDEXPR, line);
        if (!c) return NULL;
        c->b = e1;
        if (!(c->a = parse_or(P))) return NULL;
        if (is_name(cur(P), "else")) {
            adv(P);
            if (!(c->c = parse_condexpr(P))) return NULL;
        }
        e1 = c;
        line = cur(P)->line;
    }
    P->depth = depth;
    return e1;
}

static jnode *parse_expression(parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static bool tuple_end(parser *P, const char *const *extra_end) {
    const jtok *t = cur(P);
    if (t->kind == T_VAR_END || t->kind == T_BLOCK_END || is_op(t, TO_RPAREN)) return true;
    for (int i = 0; extra_end && extra_end[i]; i++)
        if (is_name(t, extra_end[i])) return true;
    return false;
}

static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *const *extra_end,
                          bool explicit_parens, bool with_namespace) {
    int line = cur(P)->line;
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(P, TO_COMMA, ",")) break;
        if (tuple_end(P, extra_end)) break;
        jnode *e = simplified ? parse_primary(P, with_namespace) : parse_expression(P, with_condexpr);
        if (!e || !nv_push(P, &items, e)) break;
        if (is_op(cur(P), TO_COMMA)) is_tuple = true;
        else break;
        line = cur(P)->line;
    }
    if (P->failed) {
        free(items.v);
        return NULL;
    }
    if (!is_tuple) {
        if (items.n) {
            jnode *only = items.v[0];
            free(items.v);
            return only;
        }
        if (!explicit_parens) {
            char d[64];
            return perr(P, cur(P)->line, "Expected an expression, got '%s'", describe(cur(P), d));
        }
    }
    jnode *t = node(P, N_TUPLE, line);
    if (t) t->kids = nv_done(P, &items, &t->n_kids);
    free(items.v);
    return P->failed ? NULL : t;
}

/* ---- statements ---- */

static bool can_assign(const jnode *n) {
    if (n->kind == N_NAME || n->kind == N_NSREF) return true;
    if (n->kind != N_TUPLE) return false;
    for (uint32_t i = 0; i < n->n_kids; i++)
        if (!can_assign(n->kids[i])) return false;
    return true;
}

static jnode *parse_assign_target(parser *P, bool name_only, const char *const *extra_end, bool with_namespace) {
    const jtok *t = cur(P);
    if (name_only) {
        if (t->kind != T_NAME) {
            char d[64];
            return perr(P, t->line, "expected token 'name', got '%s'", describe(t, d));
        }
        adv(P);
        return name_node(P, t, N_NAME);
    }
    jnode *n = parse_tuple(P, true, true, extra_end, false, with_namespace);
    if (!n) return NULL;
    if (!can_assign(n)) {
        static const char *const kinds[] = {
            [N_CONST] = "const", [N_LIST] = "list", [N_DICT] = "dict", [N_TUPLE] = "tuple", [N_CALL] = "call"};
        const char *k = n->kind < CN_ARRAY_LEN(kinds) && kinds[n->kind] ? kinds[n->kind] : "expression";
        return perr(P, n->line, "can't assign to '%s'", k);
    }
    return n;
}

static bool subparse(parser *P, const char *const *end, nvec *body);

/* parse_statements: an optional colon, the end of the opening tag, then statements until
 * one of the end tags (left current unless drop). */
static jnode **parse_statements(parser *P, const char *const *end, bool drop, uint32_t *n) {
    *n = 0;
    if (is_op(cur(P), TO_COLON)) adv(P);
    if (!expect_kind(P, T_BLOCK_END, "end of statement block")) return NULL;
    nvec body = {0};
    if (!subparse(P, end, &body)) {
        free(body.v);
        return NULL;
    }
    if (cur(P)->kind == T_EOF) {
        free(body.v);
        char want[160] = "";
        for (int i = 0; end[i]; i++) {
            const size_t k = strlen(want);
            snprintf(want + k, sizeof want - k, "%s'%s'", i ? " or " : "", end[i]);
        }
        return perr(P, cur(P)->line, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
    }
    if (drop) adv(P);
    jnode **r = nv_done(P, &body, n);
    return P->failed ? NULL : r;
}

/* Does the subtree name `atom` (a load)? For a macro's caller / varargs / kwargs. */
static bool names_atom(const jnode *n, int32_t atom, int depth) {
    if (!n || depth > 4 * CN_JINJA_MAX_PARSE_DEPTH) return false;
    if (n->kind == N_NAME && n->atom == atom) return true;
    if (names_atom(n->a, atom, depth + 1) || names_atom(n->b, atom, depth + 1) || names_atom(n->c, atom, depth + 1))
        return true;
    for (uint32_t i = 0; i < n->n_kids; i++)
        if (names_atom(n->kids[i], atom, depth + 1)) return true;
    for (uint32_t i = 0; i < n->n_kids2; i++) {
        if (names_atom(n->kids2[i], atom, depth + 1)) return true;
        if (n->defs && names_atom(n->defs[i], atom, depth + 1)) return true;
    }
    return false;
}

static void mark_uses(parser *P, jnode *m) {
    for (uint32_t i = 0; i < m->n_kids; i++) {
        if (names_atom(m->kids[i], P->t->atom_caller, 0)) m->flags |= NF_USES_CALLER;
        if (names_atom(m->kids[i], P->t->atom_varargs, 0)) m->flags |= NF_USES_VARARGS;
        if (names_atom(m->kids[i], P->t->atom_kwargs, 0)) m->flags |= NF_USES_KWARGS;
    }
}

static bool parse_signature(parser *P, jnode *m) {
    if (!expect_op(P, TO_LPAREN, "(")) return false;
    nvec params = {0}, defs = {0};
    bool any_default = false, ok = true;
    while (ok && !is_op(cur(P), TO_RPAREN)) {
        if (params.n && !(ok = expect_op(P, TO_COMMA, ","))) break;
        jnode *p = parse_assign_target(P, true, NULL, false);
        if (!(ok = p && nv_push(P, &params, p))) break;
        jnode *d = NULL;
        if (is_op(cur(P), TO_ASSIGN)) {
            adv(P);
            ok = (d = parse_expression(P, true)) != NULL;
            any_default = true;
        } else if (any_default) {
            perr(P, p->line, "non-default argument follows default argument");
            ok = false;
        }
        if (ok) ok = nv_push(P, &defs, d);
    }
    if (ok) ok = expect_op(P, TO_RPAREN, ")");
    uint32_t nd;
    m->kids2 = nv_done(P, &params, &m->n_kids2);
    m->defs = nv_done(P, &defs, &nd);
    return ok && !P->failed;
}

static jnode *parse_for(parser *P, int line) {
    static const char *const in_end[] = {"in", NULL}, *const rec_end[] = {"recursive", NULL};
    static const char *const body_end[] = {"endfor", "else", NULL}, *const else_end[] = {"endfor", NULL};
    jnode *f = node(P, N_FOR, line);
    if (!f) return NULL;
    if (!(f->a = parse_assign_target(P, false, in_end, false))) return NULL;
    if (names_atom(f->a, P->t->atom_loop, 0))
        return perr(P, line, "Can't assign to special loop variable in for-loop target");
    if (!expect_name(P, "in")) return NULL;
    if (!(f->b = parse_tuple(P, false, false, rec_end, false, false))) return NULL;
    if (is_name(cur(P), "if")) {
        adv(P);
        if (!(f->c = parse_expression(P, true))) return NULL;
    }
    if (is_name(cur(P), "recursive")) {
        adv(P);
        f->flags |= NF_RECURSIVE;
    }
    P->in_loop++;
    f->kids = parse_statements(P, body_end, false, &f->n_kids);
    P->in_loop--;
    if (P->failed) return NULL;
    const bool has_else = is_name(cur(P), "else");
    adv(P);
    if (has_else && !(f->kids2 = parse_statements(P, else_end, true, &f->n_kids2)) && P->failed) return NULL;
    return f;
}

static jnode *parse_if(parser *P, int line) {
    static const char *const end[] = {"elif", "else", "endif", NULL}, *const else_end[] = {"endif", NULL};
    jnode *top = node(P, N_IF, line), *n = top;
    while (n) {
        if (!(n->a = parse_tuple(P, false, false, NULL, false, false))) return NULL;
        n->kids = parse_statements(P, end, false, &n->n_kids);
        if (P->failed) return NULL;
        const jtok *t = cur(P);
        adv(P);
        if (is_name(t, "elif")) {
            jnode *e = node(P, N_IF, cur(P)->line);
            if (!e) return NULL;
            n->kids2 = jarena_alloc(P->a, sizeof *n->kids2);
            if (!n->kids2) return perr(P, line, "out of memory");
            n->kids2[0] = e;
            n->n_kids2 = 1;
            n = e;
            continue;
        }
        if (is_name(t, "else") && !(n->kids2 = parse_statements(P, else_end, true, &n->n_kids2)) && P->failed)
            return NULL;
        break;
    }
    return top;
}

/* A body in a function of its own (macro, call block, generation): break and continue
 * there do not reach an enclosing loop. */
static jnode **function_body(parser *P, const char *const *end, uint32_t *n) {
    const int in_loop = P->in_loop;
    P->in_loop = 0;
    jnode **b = parse_statements(P, end, true, n);
    P->in_loop = in_loop;
    return b;
}

/* One function per tag, after its name; parse_statement finds them in TAGS below. */

/* {% set x = expr %}, or {% set x %}body{% endset %} (through filters: {% set x | f %}) */
static jnode *tag_set(parser *P, int line) {
    static const char *const end[] = {"endset", NULL};
    jnode *target = parse_assign_target(P, false, NULL, true), *n;
    if (!target) return NULL;
    if (is_op(cur(P), TO_ASSIGN)) {
        adv(P);
        if ((n = node(P, N_SET, line))) {
            n->a = target;
            if (!(n->b = parse_tuple(P, false, true, NULL, false, false))) n = NULL;
        }
    } else if ((n = node(P, N_SETBLOCK, line))) {
        n->a = target;
        if (is_op(cur(P), TO_PIPE)) n->b = parse_filter(P, NULL, false);
        if (!P->failed) n->kids = parse_statements(P, end, true, &n->n_kids);
    }
    return n;
}

static jnode *tag_macro(parser *P, int line) {
    static const char *const end[] = {"endmacro", NULL};
    const jtok *name = cur(P);
    if (name->kind != T_NAME) {
        char d[64];
        return perr(P, name->line, "expected token 'name', got '%s'", describe(name, d));
    }
    adv(P);
    jnode *n = name_node(P, name, N_MACRO);
    if (n && parse_signature(P, n)) {
        n->line = line;
        n->kids = function_body(P, end, &n->n_kids);
        mark_uses(P, n);
    }
    return n;
}

/* {% call(params) f(args) %}body{% endcall %} */
static jnode *tag_call(parser *P, int line) {
    static const char *const end[] = {"endcall", NULL};
    jnode *n = node(P, N_CALLBLOCK, line);
    if (!n) return NULL;
    if (is_op(cur(P), TO_LPAREN) && !parse_signature(P, n)) return NULL;
    const jnode *call = parse_expression(P, true);
    if (!call) return NULL;
    if (call->kind != N_CALL) return perr(P, line, "expected call");
    n->a = (jnode *)call;
    n->kids = function_body(P, end, &n->n_kids);
    mark_uses(P, n);
    return n;
}

static jnode *tag_filter(parser *P, int line) {
    static const char *const end[] = {"endfilter", NULL};
    jnode *n = node(P, N_FILTERBLOCK, line);
    if (n) {
        n->a = parse_filter(P, NULL, true);
        if (!P->failed) n->kids = parse_statements(P, end, true, &n->n_kids);
    }
    return n;
}

/* {% with a = x, b = y %} */
static jnode *tag_with(parser *P, int line) {
    static const char *const end[] = {"endwith", NULL};
    nvec targets = {0}, values = {0};
    jnode *n = NULL;
    while (!P->failed && cur(P)->kind != T_BLOCK_END) {
        if (targets.n && !expect_op(P, TO_COMMA, ",")) break;
        jnode *tg = parse_assign_target(P, false, NULL, false), *v = NULL;
        if (!tg || !expect_op(P, TO_ASSIGN, "=") || !(v = parse_expression(P, true))) break;
        if (!nv_push(P, &targets, tg) || !nv_push(P, &values, v)) break;
    }
    if (!P->failed && (n = node(P, N_WITH, line))) {
        uint32_t nv;
        n->kids2 = nv_done(P, &targets, &n->n_kids2);
        n->defs = nv_done(P, &values, &nv);
        n->kids = parse_statements(P, end, true, &n->n_kids);
    }
    free(targets.v);
    free(values.v);
    return n;
}

/* {% print a, b %}: each expression printed, in the enclosing scope */
static jnode *tag_print(parser *P, int line) {
    nvec items = {0};
    jnode *n = NULL;
    while (!P->failed && cur(P)->kind != T_BLOCK_END) {
        if (items.n && !expect_op(P, TO_COMMA, ",")) break;
        jnode *e = parse_expression(P, true), *p = e ? node(P, N_PRINT, e->line) : NULL;
        if (!p) break;
        p->a = e;
        if (!nv_push(P, &items, p)) break;
    }
    if (!P->failed && (n = node(P, N_SCOPE, line))) {
        n->kids = nv_done(P, &items, &n->n_kids);
        n->flags = 1; /* no scope of its own */
    }
    free(items.v);
    return n;
}

static jnode *loop_control(parser *P, int line, int kind) {
    if (!P->in_loop) return perr(P, line, "'%s' outside loop", kind == N_BREAK ? "break" : "continue");
    return node(P, kind, line);
}
static jnode *tag_break(parser *P, int line) { return loop_control(P, line, N_BREAK); }
static jnode *tag_continue(parser *P, int line) { return loop_control(P, line, N_CONTINUE); }

/* HF's {% generation %}: its body, in a scope and a function body of its own */
static jnode *tag_generation(parser *P, int line) {
    static const char *const end[] = {"endgeneration", NULL};
    jnode *n = node(P, N_SCOPE, line);
    if (n) n->kids = function_body(P, end, &n->n_kids);
    return n;
}

/* {% block name [scoped] [required] %}: without inheritance, its body in place */
static jnode *tag_block(parser *P, int line) {
    static const char *const end[] = {"endblock", NULL};
    if (cur(P)->kind != T_NAME) return perr(P, line, "expected token 'name'");
    const jtok *bn = cur(P);
    adv(P);
    if (is_name(cur(P), "scoped")) adv(P);
    if (is_name(cur(P), "required")) adv(P);
    jnode *n = node(P, N_SCOPE, line);
    if (n) {
        const int in_loop = P->in_loop;
        P->in_loop = 0;
        n->kids = parse_statements(P, end, true, &n->n_kids);
        P->in_loop = in_loop;
        if (cur(P)->kind == T_NAME && cur(P)->n == bn->n && memcmp(cur(P)->p, bn->p, bn->n) == 0) adv(P);
    }
    return n;
}

static jnode *tag_autoescape(parser *P, int line) {
    static const char *const end[] = {"endautoescape", NULL};
    jnode *n = NULL;
    if (parse_expression(P, true) && (n = node(P, N_SCOPE, line))) n->kids = parse_statements(P, end, true, &n->n_kids);
    return n;
}

/* extends, include, import, from: parsed loosely (their arguments up to the end of the
 * tag), failing when they run as jinja2 does without a loader */
static jnode *tag_loader(parser *P, int line) {
    while (cur(P)->kind != T_BLOCK_END && cur(P)->kind != T_EOF) adv(P);
    jnode *n = node(P, N_FAIL, line);
    if (n) n->val = name_str(P, "no loader for this environment specified", 40);
    return n;
}

static const struct {
    const char *name;
    jnode *(*parse)(parser *P, int line);
} TAGS[] = {
    {"for", parse_for},
    {"if", parse_if},
    {"set", tag_set},
    {"macro", tag_macro},
    {"call", tag_call},
    {"filter", tag_filter},
    {"with", tag_with},
    {"print", tag_print},
    {"break", tag_break},
    {"continue", tag_continue},
    {"generation", tag_generation},
    {"block", tag_block},
    {"autoescape", tag_autoescape},
    {"extends", tag_loader},
    {"include", tag_loader},
    {"import", tag_loader},
    {"from", tag_loader},
};

static jnode *parse_statement(parser *P) {
    const jtok *t = cur(P);
    const int line = t->line;
    if (t->kind != T_NAME) return perr(P, line, "tag name expected");
    if (!enter(P)) return NULL;
    adv(P);
    jnode *n = NULL;
    size_t i = 0;
    while (i < CN_ARRAY_LEN(TAGS) && !is_name(t, TAGS[i].name)) i++;
    if (i < CN_ARRAY_LEN(TAGS)) {
        n = TAGS[i].parse(P, line);
    } else {
        char d[64];
        perr(P, line, "Encountered unknown tag '%s'.", describe(t, d));
    }
    P->depth--;
    return P->failed ? NULL : n;
}

static bool subparse(parser *P, const char *const *end, nvec *body) {
    while (!P->failed) {
        const jtok *t = cur(P);
        if (t->kind == T_EOF) return true;
        if (t->kind == T_DATA) {
            jnode *n = node(P, N_TEXT, t->line);
            if (!n) return false;
            n->val = name_str(P, t->p, t->n);
            if (!nv_push(P, body, n)) return false;
            adv(P);
        } else if (t->kind == T_VAR_BEGIN) {
            adv(P);
            jnode *e = parse_tuple(P, false, true, NULL, false, false);
            if (!e) return false;
            jnode *n = node(P, N_PRINT, t->line);
            if (!n) return false;
            n->a = e;
            if (!nv_push(P, body, n) || !expect_kind(P, T_VAR_END, "end of print statement")) return false;
        } else if (t->kind == T_BLOCK_BEGIN) {
            adv(P);
            for (int i = 0; end && end[i]; i++)
                if (is_name(cur(P), end[i])) return true;
            jnode *n = parse_statement(P);
            if (!n || !nv_push(P, body, n)) return false;
            if (!expect_kind(P, T_BLOCK_END, "end of statement block")) return false;
        } else {
            char d[64];
            perr(P, t->line, "unexpected '%s'", describe(t, d));
            return false;
        }
    }
    return false;
}

/* Unknown filters and tests: jinja2's compiler refuses them, except in a "soft" frame
 * (an if statement's test and bodies, a conditional expression) where only running
 * them fails. Frames that loops, macros, call and filter blocks, block sets and with
 * open are not soft again. */
static void check_names(parser *P, const jnode *n, bool soft) {
    if (!n || P->failed) return;
    bool kids_soft = soft, kids2_soft = soft, a_soft = soft, b_soft = soft, c_soft = soft;
    switch (n->kind) {
    case N_FILTER:
    case N_TEST:
        if (n->id < 0 && !soft)
            perr(P, n->line, "No %s named '%.64s'.", n->kind == N_FILTER ? "filter" : "test", n->val.u.s->b);
        break;
    case N_IF: a_soft = kids_soft = kids2_soft = true; break;
    case N_CONDEXPR: a_soft = b_soft = c_soft = true; break;
    case N_FOR: c_soft = kids_soft = kids2_soft = false; break;
    case N_MACRO:
    case N_CALLBLOCK:
    case N_FILTERBLOCK:
    case N_SETBLOCK:
    case N_WITH:
        kids_soft = kids2_soft = false;
        b_soft = n->kind == N_SETBLOCK ? false : soft;
        if (n->kind == N_FILTERBLOCK) a_soft = false;
        break;
    case N_SCOPE: kids_soft = n->flags == 1 ? soft : false; break;
    default: break;
    }
    check_names(P, n->a, a_soft);
    check_names(P, n->b, b_soft);
    check_names(P, n->c, c_soft);
    for (uint32_t i = 0; i < n->n_kids; i++) check_names(P, n->kids[i], kids_soft);
    for (uint32_t i = 0; i < n->n_kids2; i++) {
        check_names(P, n->kids2[i], kids2_soft);
        if (n->defs) check_names(P, n->defs[i], n->kind == N_WITH ? soft : false);
    }
}

/* ---- frames: which names start as missing ----
 *
 * jinja2 compiles each frame (the template, a for body, a macro, a call / filter / set
 * block body, a with body) to Python locals whose first value is decided statically, in
 * statement order: a name whose first use in the frame is a load is looked up in the
 * context when the frame starts; a name first stored unconditionally (not inside an if)
 * starts as missing, unless an enclosing frame uses it (then it starts as that frame's
 * value). Frames nested inside see an enclosing frame's names as they are at that moment
 * (closures). So a macro called before the template's own `set x` sees no x at all, even
 * when a render variable is named x. The evaluator's dynamic scopes give the same values
 * everywhere else; the names that start as missing are found here and bound as missing
 * when the frame is entered. */

enum { FS_NONE, FS_LOAD, FS_STORE, FS_BRANCH };

static void fs_expr(const jnode *e, uint8_t *f, int depth) {
    if (!e || depth > 8 * CN_JINJA_MAX_PARSE_DEPTH) return;
    if ((e->kind == N_NAME || e->kind == N_NSREF) && !f[e->atom]) f[e->atom] = FS_LOAD;
    fs_expr(e->a, f, depth + 1);
    fs_expr(e->b, f, depth + 1);
    fs_expr(e->c, f, depth + 1);
    for (uint32_t i = 0; i < e->n_kids; i++) fs_expr(e->kids[i], f, depth + 1);
    for (uint32_t i = 0; i < e->n_kids2; i++) fs_expr(e->kids2[i], f, depth + 1);
}

static void fs_target(const jnode *t, uint8_t *f, bool branch) {
    if (t->kind == N_NAME && !f[t->atom]) f[t->atom] = branch ? FS_BRANCH : FS_STORE;
    else if (t->kind == N_NSREF && !f[t->atom]) f[t->atom] = FS_LOAD;
    else if (t->kind == N_TUPLE)
        for (uint32_t i = 0; i < t->n_kids; i++) fs_target(t->kids[i], f, branch);
}

/* The frame's own uses of names, statement by statement (what jinja2's
 * FrameSymbolVisitor sees: not the bodies of nested frames). */
static void fs_stmts(jnode *const *body, uint32_t n, uint8_t *f, bool branch) {
    for (uint32_t i = 0; i < n; i++) {
        const jnode *s = body[i];
        switch (s->kind) {
        case N_PRINT: fs_expr(s->a, f, 0); break;
        case N_SET:
            fs_expr(s->b, f, 0);
            fs_target(s->a, f, branch);
            break;
        case N_SETBLOCK: fs_target(s->a, f, branch); break;
        case N_IF:
            fs_expr(s->a, f, 0);
            fs_stmts(s->kids, s->n_kids, f, true);
            fs_stmts(s->kids2, s->n_kids2, f, true);
            break;
        case N_FOR: fs_expr(s->b, f, 0); break;
        case N_MACRO:
            if (!f[s->atom]) f[s->atom] = branch ? FS_BRANCH : FS_STORE;
            break;
        case N_CALLBLOCK: fs_expr(s->a, f, 0); break;
        case N_FILTERBLOCK: fs_expr(s->a, f, 0); break;
        case N_WITH:
            for (uint32_t k = 0; k < s->n_kids2; k++) fs_expr(s->defs[k], f, 0);
            break;
        case N_SCOPE:
            if (s->flags == 1) fs_stmts(s->kids, s->n_kids, f, branch);
            break;
        default: break;
        }
    }
}

static void frame(parser *P, jnode *const *body, uint32_t n, jnode *const *params, uint32_t n_params,
                  const uint8_t *outer, int32_t **undef, uint32_t *n_undef, int depth);

/* The frames nested in a frame's statements (if bodies belong to the frame itself). */
static void fs_children(parser *P, jnode *const *body, uint32_t n, const uint8_t *outer, int depth) {
    for (uint32_t i = 0; i < n && !P->failed; i++) {
        jnode *s = body[i];
        switch (s->kind) {
        case N_IF:
            fs_children(P, s->kids, s->n_kids, outer, depth + 1);
            fs_children(P, s->kids2, s->n_kids2, outer, depth + 1);
            break;
        case N_FOR: {
            jnode *target = s->a;
            frame(P, s->kids, s->n_kids, &target, 1, outer, &s->undef, &s->n_undef, depth + 1);
            frame(P, s->kids2, s->n_kids2, NULL, 0, outer, &s->undef2, &s->n_undef2, depth + 1);
            break;
        }
        case N_MACRO:
        case N_CALLBLOCK:
        case N_WITH:
            frame(P, s->kids, s->n_kids, s->kids2, s->n_kids2, outer, &s->undef, &s->n_undef, depth + 1);
            break;
        case N_SETBLOCK:
        case N_FILTERBLOCK: frame(P, s->kids, s->n_kids, NULL, 0, outer, &s->undef, &s->n_undef, depth + 1); break;
        case N_SCOPE:
            if (s->flags == 1) fs_children(P, s->kids, s->n_kids, outer, depth + 1);
            else frame(P, s->kids, s->n_kids, NULL, 0, outer, &s->undef, &s->n_undef, depth + 1);
            break;
        default: break;
        }
    }
}

/* One frame: its names first stored unconditionally that no enclosing frame uses start
 * as missing; then its nested frames, with this frame's names among the enclosing ones. */
static void frame(parser *P, jnode *const *body, uint32_t n, jnode *const *params, uint32_t n_params,
                  const uint8_t *outer, int32_t **undef, uint32_t *n_undef, int depth) {
    const uint32_t na = P->t->n_atoms;
    if (P->failed || depth > 4 * CN_JINJA_MAX_PARSE_DEPTH) return;
    uint8_t *f = calloc(na ? na : 1, 1);
    if (!f) {
        perr(P, 0, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n_params; i++) fs_target(params[i], f, true); /* parameters: bound on entry */
    fs_stmts(body, n, f, false);
    uint32_t k = 0;
    for (uint32_t a = 0; a < na; a++) k += f[a] == FS_STORE && !(outer && outer[a]);
    if (k) {
        *undef = jarena_alloc(P->a, k * sizeof **undef);
        if (!*undef) {
            free(f);
            perr(P, 0, "out of memory");
            return;
        }
        *n_undef = 0;
        for (uint32_t a = 0; a < na; a++)
            if (f[a] == FS_STORE && !(outer && outer[a])) (*undef)[(*n_undef)++] = (int32_t)a;
    }
    for (uint32_t a = 0; outer && a < na; a++) f[a] |= outer[a];
    fs_children(P, body, n, f, depth);
    free(f);
}

cn_status cn_jinja_parse(const char *src, size_t n, cn_jinja **out, cn_error *err) {
    if (out) *out = NULL;
    if (!out || (!src && n)) return cn_err(err, CN_STATUS_INVALID_ARG, "jinja: NULL argument");
    if (n > CN_JINJA_MAX_SOURCE_BYTES)
        return cn_err(err, CN_STATUS_LIMIT, "jinja: template of %zu bytes (at most %u)", n, CN_JINJA_MAX_SOURCE_BYTES);
    cn_jinja *t = calloc(1, sizeof *t);
    jarena *a = calloc(1, sizeof *a);
    if (!t || !a) {
        free(t);
        free(a);
        return cn_err(err, CN_STATUS_NO_MEMORY, "jinja: out of memory");
    }
    t->arena = a;
    jtoks toks = {0};
    int line = 0;
    char msg[CN_ERROR_MSG_LEN];
    if (!jlex(src ? src : "", n, a, &toks, &line, msg, sizeof msg)) {
        jtoks_free(&toks);
        cn_jinja_free(t);
        return cn_err(err, strstr(msg, "out of memory") ? CN_STATUS_NO_MEMORY : CN_STATUS_INVALID_ARG,
                      "template syntax error, line %d: %s", line, msg);
    }
    parser P = {.tk = toks.v, .n_tk = toks.n, .t = t, .a = a};
    t->atom_loop = intern(&P, "loop", 4);
    t->atom_caller = intern(&P, "caller", 6);
    t->atom_varargs = intern(&P, "varargs", 7);
    t->atom_kwargs = intern(&P, "kwargs", 6);
    nvec body = {0};
    if (t->atom_kwargs >= 0 && subparse(&P, NULL, &body) && cur(&P)->kind != T_EOF) {
        char d[64];
        perr(&P, cur(&P)->line, "unexpected '%s'", describe(cur(&P), d));
    }
    if (t->atom_kwargs < 0) perr(&P, 0, "out of memory");
    if (!P.failed) t->body = nv_done(&P, &body, &t->n_body);
    free(body.v);
    for (uint32_t i = 0; !P.failed && i < t->n_body; i++) check_names(&P, t->body[i], false);
    if (!P.failed) frame(&P, t->body, t->n_body, NULL, 0, NULL, &t->root_undef, &t->n_root_undef, 0);
    if (!P.failed && t->n_atoms) {
        t->atom_global = jarena_alloc(a, t->n_atoms * sizeof *t->atom_global);
        if (!t->atom_global) perr(&P, 0, "out of memory");
        for (uint32_t i = 0; t->atom_global && i < t->n_atoms; i++) t->atom_global[i] = jb_global_id(t->atoms[i]);
    }
    free(P.atom_hash);
    jtoks_free(&toks);
    if (P.failed) {
        cn_jinja_free(t);
        return cn_err(err, strstr(P.msg, "out of memory") ? CN_STATUS_NO_MEMORY : CN_STATUS_INVALID_ARG,
                      "template syntax error, line %d: %s", P.line, P.msg);
    }
    *out = t;
    return CN_STATUS_OK;
}

void cn_jinja_free(cn_jinja *t) {
    if (!t) return;
    free(t->atoms);
    arena_free(t->arena);
    free(t);
}
