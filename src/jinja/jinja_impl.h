/* jinja_impl.h — what the files of the Jinja interpreter share (jinja.h is the contract
 * for everyone else): values, the AST, the render state and the helpers between them.
 * Nothing outside src/jinja includes this.
 *
 * Values (jv) are small structs passed by value. Scalars live inside; strings, lists,
 * dicts and the other heap objects are reference-counted, and objects are never changed
 * once shared, so plain counting frees them: jinja2's sandbox forbids mutating lists and
 * dicts, and the only mutable objects, namespaces, belong to the render and are freed
 * when it ends (so a namespace that holds itself leaks nothing). Freeing walks a pending
 * list instead of recursing, so a value nested any depth is freed in constant stack.
 * Objects a template owns (its constants) are immortal: rendering never touches their
 * counts, which is what makes one template safe to render from many threads at once. */
#ifndef CN_JINJA_IMPL_H
#define CN_JINJA_IMPL_H

#include "jinja/jinja.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- values ---- */

typedef enum {
    JV_UNDEF = 0, /* jinja2's Undefined; u.s: its message or NULL */
    JV_NONE,
    JV_BOOL,   /* u.i 0 / 1 */
    JV_INT,    /* u.i */
    JV_FLOAT,  /* u.f */
    JV_STR,    /* u.s; flags JF_MARKUP for markupsafe.Markup */
    JV_LIST,   /* u.l; flags JF_TUPLE for a tuple */
    JV_DICT,   /* u.d */
    JV_NS,     /* u.ns: a namespace(), owned by the render */
    JV_MACRO,  /* u.m: a macro or a call block's caller */
    JV_FUNC,   /* sub: a global function (range, namespace, ...) */
    JV_METHOD, /* u.o: the receiver object, sub: the method id, flags: the receiver's */
    JV_LOOP,   /* u.loop: a for loop's `loop` */
    JV_ITER,   /* u.it: a generator, an iterator or a dict view */
    JV_RANGE,  /* u.rg */
} jv_kind;

enum {
    JF_MARKUP = 1,  /* JV_STR: Markup (|safe, |escape): + and methods escape their operands */
    JF_TUPLE = 2,   /* JV_LIST: a tuple */
    JF_UNSAFE = 4,  /* JV_UNDEF: a sandbox refusal (SecurityError when used) */
    JF_MISSING = 8, /* JV_UNDEF: an argument not given (binding builtins) */
};

typedef struct jobj {
    uint32_t rc;            /* JOBJ_IMMORTAL: owned by a template, never counted */
    uint8_t type;           /* the jv_kind of values that point here */
    struct jobj *next_free; /* used only while freeing */
} jobj;

#define JOBJ_IMMORTAL UINT32_MAX

typedef struct jstr {
    jobj h;
    size_t len; /* bytes, NUL after them */
    size_t ncp; /* code points, SIZE_MAX until counted */
    bool ascii; /* every byte < 0x80 (valid when ncp is known) */
    char b[];
} jstr;

typedef struct jv jv;
typedef struct jlist {
    jobj h;
    size_t n, cap;
    jv *v;
} jlist;

typedef struct jdict {
    jobj h;
    size_t n, cap;
    jv *k, *v;
    uint32_t *idx; /* open-addressing index into k (slot+1, 0 empty), NULL while n is small */
    size_t idx_cap;
} jdict;

typedef struct jns {
    struct jdict *attrs;
    struct jns *next; /* the render's list */
} jns;

struct jnode;
struct jscope;
typedef struct jmacro {
    jobj h;
    const char *name;        /* "caller" for a call block's body */
    const struct jnode *def; /* N_MACRO or N_CALLBLOCK */
    struct jscope *closure;  /* where it was defined (kept alive by the render) */
} jmacro;

typedef struct jloop {
    jobj h;
    struct jlist *items;
    int64_t index0, depth0;
    struct jv *changed_last;  /* loop.changed's previous arguments, NULL before the first call */
    const struct jnode *node; /* the for loop (recursive calls) */
    struct jscope *scope;     /* the scope the loop runs in (recursive calls) */
} jloop;

typedef enum { IT_GENERATOR, IT_MAP, IT_REVERSED, IT_DICT_KEYS, IT_DICT_VALUES, IT_DICT_ITEMS } jiter_kind;
typedef struct jiter {
    jobj h;
    struct jlist *items;
    size_t pos; /* generators and iterators are used up by iteration; views are not */
    jiter_kind kind;
} jiter;

typedef struct jrange {
    jobj h;
    int64_t start, stop, step;
} jrange;

struct jv {
    uint8_t kind;
    uint8_t flags;
    uint16_t sub;
    union {
        int64_t i;
        double f;
        jobj *o;
        jstr *s;
        jlist *l;
        jdict *d;
        jns *ns;
        jmacro *m;
        jloop *loop;
        jiter *it;
        jrange *rg;
    } u;
};

static inline jv jv_undef(void) { return (jv){.kind = JV_UNDEF}; }
static inline jv jv_missing(void) { return (jv){.kind = JV_UNDEF, .flags = JF_MISSING}; }
static inline jv jv_none(void) { return (jv){.kind = JV_NONE}; }
static inline jv jv_bool(bool b) { return (jv){.kind = JV_BOOL, .u.i = b}; }
static inline jv jv_int(int64_t i) { return (jv){.kind = JV_INT, .u.i = i}; }
static inline jv jv_float(double f) { return (jv){.kind = JV_FLOAT, .u.f = f}; }
static inline bool jv_is_missing(jv v) { return v.kind == JV_UNDEF && (v.flags & JF_MISSING); }
static inline bool jv_is_num(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }
static inline bool jv_is_intlike(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT; }
static inline double jv_to_f(jv v) { return v.kind == JV_FLOAT ? v.u.f : (double)v.u.i; } /* of a number */
/* A heap object the value holds, or NULL. */
static inline jobj *jv_obj(jv v) {
    return v.kind >= JV_STR && v.kind != JV_NS && v.kind != JV_FUNC ? v.u.o : v.kind == JV_UNDEF ? (jobj *)v.u.s : NULL;
}
static inline jv jv_ref(jv v) {
    jobj *o = jv_obj(v);
    if (o && o->rc != JOBJ_IMMORTAL) o->rc++;
    return v;
}
void jv_unref(jv v);

/* Strings. Construction returns NULL on no memory. */
jstr *jstr_new(const char *s, size_t n);
jstr *jstr_alloc(size_t n); /* n bytes to fill, NUL already written after them */
static inline jv jv_str(jstr *s) { return (jv){.kind = JV_STR, .u.s = s}; }
size_t jstr_ncp(jstr *s); /* code points (invalid UTF-8 bytes count one each) */

/* Lists and dicts: new ones have rc 1. Push/set take a reference (the value is
 * consumed); false only on no memory (the value is then released). */
jlist *jlist_new(size_t cap);
bool jlist_push(jlist *l, jv v);
static inline jv jv_list(jlist *l, bool tuple) {
    return (jv){.kind = JV_LIST, .flags = tuple ? JF_TUPLE : 0, .u.l = l};
}
jdict *jdict_new(size_t cap);
/* Sets key k (consumed) to v (consumed), keeping the first position of an existing key
 * as Python's dict does. The key must be hashable (checked by the caller). */
bool jdict_set(jdict *d, jv k, jv v);
/* The value for k (borrowed), or NULL. Python equality: 1, 1.0 and True are one key. */
jv *jdict_get(const jdict *d, jv k);
jv *jdict_get_str(const jdict *d, const char *s, size_t n);
static inline jv jv_dict(jdict *d) { return (jv){.kind = JV_DICT, .u.d = d}; }

/* ---- text buffers ---- */

typedef struct {
    char *p;
    size_t n, cap;
    size_t limit; /* appending past it fails (the output budget) */
    bool over;    /* an append went past the limit */
    bool oom;
} jbuf;

bool jbuf_put(jbuf *b, const char *s, size_t n); /* false when over the limit or out of memory */
static inline bool jbuf_putc(jbuf *b, char c) { return jbuf_put(b, &c, 1); }
bool jbuf_printf(jbuf *b, const char *fmt, ...) CN_PRINTF(2, 3);
void jbuf_free(jbuf *b);

/* ---- UTF-8 and Python's str semantics (jinja_str.c) ---- */

/* The code point at s[0..n) (n >= 1) and its byte length; an invalid or truncated
 * sequence is one byte (*valid false, *cp the byte). */
size_t ju8_next(const char *s, size_t n, uint32_t *cp, bool *valid);
size_t ju8_prev(const char *s, size_t n); /* length of the code point that ends at s[n] */
void ju8_put(jbuf *b, uint32_t cp);
size_t ju8_count(const char *s, size_t n); /* code points, as ju8_next steps */
/* Byte offset of code point i of s (i <= code points; ascii strings are O(1)). */
size_t ju8_offset(jstr *s, size_t i);
bool jpy_isspace(uint32_t cp);
bool jpy_isprintable(uint32_t cp);
bool jpy_isalpha(uint32_t cp);
bool jpy_isdigit(uint32_t cp);
bool jpy_isupper(uint32_t cp);
bool jpy_islower(uint32_t cp);
bool jpy_istitle_char(uint32_t cp); /* the title forms of the Latin digraphs (ǅ) */
/* Python's full case mappings for the scripts templates meet (Latin, Greek, Cyrillic,
 * fullwidth); writes 1-3 code points, returns how many. */
int jpy_upper(uint32_t cp, uint32_t out[3]);
int jpy_lower(uint32_t cp, uint32_t out[3]);
int jpy_title(uint32_t cp, uint32_t out[3]);

typedef enum { JCASE_UPPER, JCASE_LOWER, JCASE_TITLE_WORDS, JCASE_CAPITALIZE, JCASE_SWAP } jcase;
bool jpy_case(jbuf *b, const char *s, size_t n, jcase how);
/* strip with chars NULL: Unicode whitespace. which: 1 left, 2 right, 3 both. */
void jpy_strip(const char *s, size_t n, const char *chars, size_t nchars, int which, size_t *a, size_t *z);

/* ---- Python formatting of values (jinja_value.c) ---- */

#define JV_MAX_NEST 512 /* containers deeper than this are refused by str(), ==, json */

/* str(v) as Python prints it (what {{ v }} writes); false: too deep or over the buffer's
 * limit (b->over), or an error text in *why (static). */
bool jv_write_str(jbuf *b, jv v, const char **why);
bool jv_write_repr(jbuf *b, jv v, const char **why);
void jpy_float_repr(double x, char out[32]);
/* Python type names for messages: "str", "dict", "NoneType", "Undefined", ... */
const char *jv_type_name(jv v);
bool jv_truthy(jv v);
/* Python ==; never fails except over depth (then *too_deep). */
bool jv_equal(jv a, jv b, bool *too_deep);
/* Python hash-equality support: false for unhashable values (lists, dicts, ...). */
bool jv_hashable(jv v);
uint64_t jv_hash(jv v);
/* Python <: -1 a < b, 0 equal, 1 greater; false with *why when the types do not order. */
bool jv_compare(jv a, jv b, int *cmp, const char **why);

typedef struct {
    bool ensure_ascii;
    bool sort_keys;
    const char *indent;
    size_t indent_len;
    bool has_indent;
    const char *item_sep;
    size_t item_sep_len;
    const char *key_sep;
    size_t key_sep_len;
} jjson_opts;
/* json.dumps(v, ...) into b; false with a message in why (buffer of 128) when a value is
 * not serializable or keys are not sortable. */
bool jv_write_json(jbuf *b, jv v, const jjson_opts *o, char *why);
/* A JSON document parsed by jansson into values (dict key order kept); NULL json text is
 * not an object: see the message. */
bool jv_from_json_text(const char *s, size_t n, bool need_object, jv *out, char *why, size_t why_len);

/* ---- lexing (jinja_lex.c) ---- */

/* Memory that lives as long as a template: AST nodes, interned names, constants. */
typedef struct jarena jarena;
void *jarena_alloc(jarena *a, size_t n);              /* zeroed; NULL on no memory */
jstr *jarena_str(jarena *a, const char *s, size_t n); /* an immortal string */

typedef enum {
    T_EOF,
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
} jtok_kind;

typedef enum {
    TO_ADD,
    TO_SUB,
    TO_DIV,
    TO_FLOORDIV,
    TO_MUL,
    TO_POW,
    TO_MOD,
    TO_TILDE,
    TO_LBRACKET,
    TO_RBRACKET,
    TO_LPAREN,
    TO_RPAREN,
    TO_LBRACE,
    TO_RBRACE,
    TO_EQ,
    TO_NE,
    TO_GT,
    TO_GTEQ,
    TO_LT,
    TO_LTEQ,
    TO_ASSIGN,
    TO_DOT,
    TO_COLON,
    TO_PIPE,
    TO_COMMA,
    TO_SEMICOLON,
} jtok_op;

typedef struct {
    uint8_t kind;
    uint8_t op; /* T_OP */
    int32_t line;
    const char *p; /* T_NAME, T_DATA: the text (in the lexer's copy of the source) */
    size_t n;
    jstr *s;   /* T_STRING: the decoded value (arena) */
    int64_t i; /* T_INT */
    double f;  /* T_FLOAT */
} jtok;

typedef struct {
    jtok *v;
    size_t n, cap;
    char *src; /* the source with newlines normalized, which tokens point into */
} jtoks;

/* Tokenizes src[0..n) as jinja2's lexer does with trim_blocks and lstrip_blocks (see
 * jinja_lex.c). false: *line and msg say where and why. */
bool jlex(const char *src, size_t n, jarena *a, jtoks *out, int *line, char *msg, size_t msg_len);
void jtoks_free(jtoks *t);

/* ---- the AST (jinja_parse.c) ---- */

typedef enum {
    /* statements */
    N_TEXT,
    N_PRINT,
    N_IF,
    N_FOR,
    N_SET,
    N_SETBLOCK,
    N_MACRO,
    N_CALLBLOCK,
    N_FILTERBLOCK,
    N_WITH,
    N_BREAK,
    N_CONTINUE,
    N_SCOPE,
    N_FAIL,
    /* expressions */
    N_CONST,
    N_NAME,
    N_NSREF,
    N_GETATTR,
    N_GETITEM,
    N_SLICE,
    N_CALL,
    N_KWARG,
    N_FILTER,
    N_TEST,
    N_NEG,
    N_POS,
    N_NOT,
    N_BINOP,
    N_AND,
    N_OR,
    N_CONCAT,
    N_COMPARE,
    N_OPERAND,
    N_CONDEXPR,
    N_LIST,
    N_TUPLE,
    N_DICT,
} jn_kind;

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW } jn_binop;
typedef enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN } jn_cmp;

enum {
    NF_RECURSIVE = 1,   /* N_FOR */
    NF_USES_CALLER = 2, /* N_MACRO / N_CALLBLOCK: the body names caller, varargs, kwargs */
    NF_USES_VARARGS = 4,
    NF_USES_KWARGS = 8,
};

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;
    uint8_t op;
    uint16_t flags;
    int32_t line;
    int32_t atom; /* names: N_NAME, N_NSREF, N_MACRO, N_KWARG */
    int32_t id;   /* builtin: filter / test id (-1 unknown), N_GETATTR method id */
    jv val;       /* N_CONST, N_TEXT, N_FAIL message, attribute / filter / kwarg name */
    jnode *a, *b, *c;
    jnode **kids;  /* body, items, positional args, operands */
    jnode **kids2; /* else body, dict values, keyword args, macro parameters */
    jnode **defs;  /* macro / with: defaults or values aligned with kids2 (entries may be NULL) */
    uint32_t n_kids, n_kids2;
    /* Frames (for bodies, macros, call / filter / set blocks, with, scopes): the names
     * jinja2's compiler starts as missing there, bound so when the frame is entered;
     * undef2: a for loop's else frame. See frames() in jinja_parse.c. */
    int32_t *undef, *undef2;
    uint32_t n_undef, n_undef2;
};

struct cn_jinja {
    jnode **body;
    uint32_t n_body;
    char **atoms; /* interned names, atoms[id] NUL-terminated */
    uint32_t n_atoms;
    int32_t *atom_global; /* per atom: the builtin global function id, or -1 */
    struct jarena *arena;
    int32_t atom_loop, atom_caller, atom_varargs, atom_kwargs;
    int32_t *root_undef; /* the root frame's names that start as missing (see jnode.undef) */
    uint32_t n_root_undef;
};

int32_t jatom_find(const cn_jinja *t, const char *s, size_t n); /* -1 if the template never names it */

/* ---- rendering (jinja_eval.c) ---- */

typedef struct jvar {
    int32_t atom;
    jv val;
} jvar;

typedef struct jscope {
    struct jscope *parent;
    jvar *v;
    uint32_t n;
    size_t cap;
    bool captured; /* a macro closes over it: freed when the render ends */
    struct jscope *next_kept;
} jscope;

typedef struct jr {
    const cn_jinja *t;
    cn_jinja_limits lim;
    uint64_t steps;
    int depth;
    jscope *root;
    jv *globals; /* per atom: the render's variable, or missing */
    jns *namespaces;
    jscope *kept;
    size_t n_kept;
    /* the error: set once, by jr_fail / jr_limit */
    bool failed;
    cn_status status;
    int line; /* the line being evaluated */
    char msg[CN_ERROR_MSG_LEN];
} jr;

/* Records an error at the current line (the first one wins) and returns false. */
bool jr_fail(jr *r, const char *fmt, ...) CN_PRINTF(2, 3);
bool jr_limit(jr *r, const char *fmt, ...) CN_PRINTF(2, 3);
bool jr_oom(jr *r);
/* Charges n steps; false when the budget is spent. */
bool jr_steps(jr *r, uint64_t n);
/* One more level of recursion (a builtin calling a builtin, as map('map', ...) does);
 * false when the depth budget is spent. jr_leave undoes it. */
bool jr_enter(jr *r);
static inline void jr_leave(jr *r) { r->depth--; }
/* A new string of b's bytes, the buffer's budget checked; false on error (recorded). */
bool jr_buf_to_str(jr *r, jbuf *b, jv *out);
bool jr_buf_to_str_as(jr *r, jbuf *b, bool markup, jv *out); /* the same, Markup when markup */
bool jr_str(jr *r, const char *s, size_t n, jv *out);
void jr_buf_init(jr *r, jbuf *b);
/* A buffer's failure as the render's error. */
bool jr_buf_fail(jr *r, const jbuf *b, const char *why);

/* Undefined values with jinja2's messages. */
jv jr_undef_name(jr *r, const char *name);
jv jr_undef_attr(jr *r, jv obj, jv name);
jv jr_undef_msg(jr *r, const char *msg);
/* Raises the error an Undefined carries when used (UndefinedError / SecurityError). */
bool jr_undef_fail(jr *r, jv u);

/* Arguments of a call as evaluated. */
typedef struct {
    jv *pos;
    size_t n_pos;
    jstr **kw_names;
    jv *kw;
    size_t n_kw;
} jargs;

/* Binds args to params[0..n) (positional, then by name; unknown names and extra
 * positionals are errors naming fn); out[i] borrowed, missing when absent. */
bool jr_bind(jr *r, const char *fn, const char *const *params, size_t n, const jargs *a, jv *out);

/* Evaluator entry points the builtins call back into. */
bool jr_getattr(jr *r, jv obj, jv name, int method_id, jv *out);
bool jr_getitem(jr *r, jv obj, jv key, jv *out);
bool jr_call(jr *r, jv fn, const jargs *a, jv *out);
bool jr_iterate(jr *r, jv v, jlist **out); /* the items iteration yields, materialized */
bool jr_to_str(jr *r, jv v, jv *out);      /* str(v) as a string value */
bool jr_to_repr(jr *r, jv v, jv *out);     /* repr(v) as a string value */
/* A lookup key written as text, s[0..e) ("a.0.b" parts, str.format's [key]): an int when
 * it is all digits and short enough to fit, else the string. */
bool jr_key_from_text(jr *r, const char *s, const char *e, jv *out);

/* ---- builtins (jinja_builtins.c) ---- */

int jb_filter_id(const char *name);
int jb_test_id(const char *name);
int jb_method_id(const char *name);
int jb_global_id(const char *name);
bool jb_filter(jr *r, int id, jv in, const jargs *a, jv *out);
bool jb_test(jr *r, int id, jv in, const jargs *a, bool *out);
bool jb_call_global(jr *r, int id, const jargs *a, jv *out);
/* getattr(obj, name) for a Python method name (id >= 0): the bound method, an unsafe
 * Undefined (list.append), or not found. */
typedef enum { JB_ATTR_NONE, JB_ATTR_FOUND } jb_attr;
jb_attr jb_method_attr(jr *r, jv obj, int id, jv *out);
bool jb_call_method(jr *r, jv self, int id, const jargs *a, jv *out);
const char *jb_method_name(int id);

/* ---- string formatting (jinja_format.c) ---- */

/* fmt % args (printf-style; a tuple gives several arguments, a dict named ones) and
 * fmt.format(*args, **kwargs); Markup escapes the arguments and stays Markup. */
bool jr_format_percent(jr *r, jv fmt, jv args, jv *out);
bool jr_str_format(jr *r, jv fmt, const jargs *a, jv *out);

/* Arithmetic and operators (jinja_eval.c, used by the builtins too). */
bool jr_binop(jr *r, int op, jv a, jv b, jv *out);
bool jr_compare(jr *r, int op, jv a, jv b, bool *out);
bool jr_contains(jr *r, jv container, jv item, bool *out);
/* Escapes s as markupsafe does (& < > ' "), as a Markup string. */
bool jr_escape(jr *r, jv v, jv *out);

#endif
