/* json_schema.c — the JSON Schema front end (gr_json_schema, gr_json_object): walks a
 * schema (parsed with jansson) and builds, with the gr_builder API, a grammar whose
 * sentences are exactly the JSON documents the schema accepts, in the spelling a model
 * is asked to write: properties in the schema's order, optional ones skippable,
 * additional properties (when allowed) after the listed ones; compact separators, or
 * [ \t\n\r]{0,CN_GRAMMAR_MAX_WS} wherever JSON allows whitespace.
 *
 * The rule of the front end: never accept a document the schema rejects. A keyword that
 * changes the set of valid documents and that we cannot express exactly is an error
 * naming the keyword and its JSON pointer; annotations (title, description, default,
 * examples, ...) and keywords JSON Schema does not define are ignored, as validators do.
 * Where we are narrower than the schema (one property order, one spelling of a listed
 * name, numbers without exponents under a bound) a valid document may be refused; that
 * is the price of a grammar a model can follow.
 *
 * What it owns: keyword dispatch, $ref resolution (local JSON pointers and anchors; each
 * target becomes one rule, so recursion is a rule calling itself), allOf merging (and
 * siblings of $ref / anyOf merged into every branch), dependencies (an anyOf of objects
 * with and without each name), objects, arrays, enum filtering.
 * The lexical pieces (strings, numbers, ranges, formats, literals) are json_schema_lex.c.
 * It must not compile or match anything: that is compile.c and pda.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "grammar/json_schema_impl.h"

#define JS_MAX_BRANCHES 256    /* anyOf branches after distributing siblings and allOf */
#define JS_MAX_EXPANSIONS 1024 /* $ref / allOf expansions inside one merge */
#define JS_TAIL_CHUNK 16       /* optional-property tails become rules every this many */
#define JS_MAX_PATTERNS 64     /* patternProperties of one object */
#define JS_MAX_OVERLAP 3       /* patterns in one overlapping group (2^k - 1 key classes) */

typedef struct {
    const json_t *target;
    int32_t rule;
    char *ptr; /* for messages */
} js_def;

typedef struct {
    js_lex x;
    json_t *doc;
    char *base; /* the root's $id without its fragment, or NULL */
    js_def *defs;
    size_t n_defs, cap_defs;
    json_t *owned; /* schemas made by merging, kept alive until the end */
    int depth;
    const char *why;   /* the keyword the enum checker could not decide */
    size_t dep_splits; /* dependencies() splits in the merge at hand (depth 0) */
} js_ctx;

/* ---- messages and paths ---- */

static const char *where(const js_ctx *c) { return c->x.n_path ? c->x.path : "the schema's root"; }

static int32_t fail(js_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int32_t fail(js_ctx *c, const char *fmt, ...) {
    char msg[CN_ERROR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gr_builder_fail(c->x.b, CN_STATUS_INVALID_ARG, "%s at %s", msg, where(c));
    return -1;
}

static void oom(js_ctx *c) { gr_builder_fail(c->x.b, CN_STATUS_NO_MEMORY, "out of memory compiling the JSON schema"); }

/* Appends "/seg" (escaped as a JSON pointer) to the path; returns the old length. A path
 * too long for the buffer is cut (with "...") but stays consistent for popping. */
static size_t push(js_ctx *c, const char *seg) {
    size_t old = c->x.n_path;
    char *p = c->x.path;
    size_t n = old;
    if (n + 1 < JS_MAX_PATH) p[n++] = '/';
    for (const char *s = seg; *s && n + 3 < JS_MAX_PATH; s++) {
        if (*s == '~' || *s == '/') {
            p[n++] = '~';
            p[n++] = *s == '~' ? '0' : '1';
        } else p[n++] = *s;
    }
    p[n] = 0;
    c->x.n_path = n;
    return old;
}

static size_t push_i(js_ctx *c, size_t i) {
    char s[24];
    snprintf(s, sizeof s, "%zu", i);
    return push(c, s);
}

static void pop(js_ctx *c, size_t old) {
    c->x.n_path = old;
    c->x.path[old] = 0;
}

/* ---- keywords ---- */

static const char *const annotations[] = {
    "title",
    "description",
    "examples",
    "example",
    "$comment",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$defs",
    "definitions",
    "$vocabulary",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "$dynamicAnchor",
    "$recursiveAnchor",
    NULL,
};

/* Keywords that constrain what we build (everything not here and not unsupported is
 * ignored). */
static const char *const handled[] = {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "nullable",
    "uniqueItems",
    "multipleOf",
    "minProperties",
    "patternProperties",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "if",
    NULL,
};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (strcmp(*l, k) == 0) return true;
    return false;
}

static bool is_trivial_schema(const json_t *v) {
    return json_is_true(v) || (json_is_object(v) && json_object_size(v) == 0);
}

/* The first keyword of s that changes the valid set and that we do not support; NULL if
 * none. Some are fine with a no-op value (uniqueItems: false, minProperties: 0, ...). */
static const char *unsupported_keyword(const json_t *s) {
    static const char *const never[] = {
        "not",         "unevaluatedProperties", "unevaluatedItems", "contains",      "minContains",
        "maxContains", "maxProperties",         "$dynamicRef",      "$recursiveRef", NULL,
    };
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(never, k)) {
            if (strcmp(k, "unevaluatedProperties") == 0 || strcmp(k, "unevaluatedItems") == 0) {
                if (is_trivial_schema(v)) continue;
            }
            return k;
        }
        if (strcmp(k, "uniqueItems") == 0 && json_is_true(v)) return k;
        if (strcmp(k, "minProperties") == 0 && !(json_is_number(v) && json_number_value(v) <= 0)) return k;
        if (strcmp(k, "propertyNames") == 0 && !is_trivial_schema(v)) return k;
        if (strcmp(k, "if") == 0 && (json_object_get(s, "then") || json_object_get(s, "else"))) return k;
        if (strcmp(k, "multipleOf") == 0 && !(json_is_number(v) && json_number_value(v) == 1.0)) return k;
    }
    return NULL;
}

static const char *const dependency_keywords[] = {"dependencies", "dependentRequired", "dependentSchemas", NULL};

/* Whether s has a dependency to compile (an empty one is none). */
static bool has_dependencies(const json_t *s) {
    for (const char *const *k = dependency_keywords; *k; k++) {
        const json_t *v = json_object_get(s, *k);
        if (v && !(json_is_object(v) && json_object_size(v) == 0)) return true;
    }
    return false;
}

enum { DEP_BAD, DEP_NAMES, DEP_SCHEMA };

/* What a name's dependency d under keyword k is: a list of names (dependencies,
 * dependentRequired), a schema (dependencies, dependentSchemas), or neither. */
static int dependency_kind(const char *k, const json_t *d) {
    bool names = json_is_array(d);
    size_t i;
    json_t *e;
    json_array_foreach(d, i, e) names &= json_is_string(e);
    if (names && strcmp(k, "dependentSchemas") != 0) return DEP_NAMES;
    if ((json_is_object(d) || json_is_boolean(d)) && strcmp(k, "dependentRequired") != 0) return DEP_SCHEMA;
    return DEP_BAD;
}

static bool required_has(const json_t *s, const char *name) {
    const json_t *r = json_object_get(s, "required");
    size_t i;
    json_t *e;
    json_array_foreach(r, i, e) if (json_is_string(e) && strcmp(json_string_value(e), name) == 0) return true;
    return false;
}

/* ---- types ---- */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

static int type_bit(const char *t) {
    static const struct {
        const char *n;
        int bit;
    } names[] = {{"null", T_NULL},  {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_NUM | T_INT},
                 {"string", T_STR}, {"array", T_ARR},    {"object", T_OBJ}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(t, names[i].n) == 0) return names[i].bit;
    return -1;
}

/* The types s allows (T_ALL when it says nothing); -1 with an error for a bad "type". */
static int types_of(js_ctx *c, const json_t *s) {
    const json_t *t = json_object_get(s, "type");
    int m = T_ALL;
    if (t) {
        m = 0;
        if (json_is_string(t)) {
            m = type_bit(json_string_value(t));
        } else if (json_is_array(t)) {
            size_t i;
            json_t *e;
            json_array_foreach(t, i, e) {
                int bit = json_is_string(e) ? type_bit(json_string_value(e)) : -1;
                if (bit < 0) {
                    m = -1;
                    break;
                }
                m |= bit;
            }
        } else m = -1;
        if (m < 0) {
            char *d = json_dumps(t, JSON_COMPACT | JSON_ENCODE_ANY);
            fail(c, "unknown type %.80s", d ? d : "?");
            free(d);
            return -1;
        }
    }
    if (json_is_true(json_object_get(s, "nullable"))) m |= T_NULL;
    return m;
}

/* ---- references ---- */

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static const json_t *find_anchor(const json_t *s, const char *name, int depth) {
    if (depth > 64) return NULL;
    if (json_is_object(s)) {
        const json_t *a = json_object_get(s, "$anchor");
        if (json_is_string(a) && strcmp(json_string_value(a), name) == 0) return s;
        const json_t *id = json_object_get(s, "$id");
        if (!id) id = json_object_get(s, "id");
        if (json_is_string(id) && json_string_value(id)[0] == '#' && strcmp(json_string_value(id) + 1, name) == 0)
            return s;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)s, k, v) {
            const json_t *r = find_anchor(v, name, depth + 1);
            if (r) return r;
        }
    } else if (json_is_array(s)) {
        size_t i;
        json_t *v;
        json_array_foreach(s, i, v) {
            const json_t *r = find_anchor(v, name, depth + 1);
            if (r) return r;
        }
    }
    return NULL;
}

/* The schema a $ref names, or NULL with an error. */
static const json_t *resolve(js_ctx *c, const char *ref) {
    const char *frag = strchr(ref, '#');
    size_t nbase = frag ? (size_t)(frag - ref) : strlen(ref);
    if (nbase > 0) {
        bool same = c->base && strlen(c->base) == nbase && strncmp(ref, c->base, nbase) == 0;
        if (!same) {
            fail(c, "unsupported $ref '%.200s' (only references inside the schema)", ref);
            return NULL;
        }
    }
    if (!frag || !frag[1]) return c->doc;
    frag++;
    /* percent-decoding first, then the pointer's own ~ escapes */
    size_t n = strlen(frag);
    char *d = malloc(n + 1);
    if (!d) {
        oom(c);
        return NULL;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (frag[i] == '%' && i + 2 < n && hexval(frag[i + 1]) >= 0 && hexval(frag[i + 2]) >= 0) {
            d[m++] = (char)(hexval(frag[i + 1]) * 16 + hexval(frag[i + 2]));
            i += 2;
        } else d[m++] = frag[i];
    }
    d[m] = 0;
    const json_t *at = NULL;
    if (d[0] != '/') {
        at = find_anchor(c->doc, d, 0);
    } else {
        at = c->doc;
        char *seg = d + 1;
        while (at) {
            char *end = strchr(seg, '/');
            if (end) *end = 0;
            /* unescape ~1 then ~0, in place */
            char *w = seg;
            for (char *r = seg; *r; r++) {
                if (r[0] == '~' && r[1] == '1') {
                    *w++ = '/';
                    r++;
                } else if (r[0] == '~' && r[1] == '0') {
                    *w++ = '~';
                    r++;
                } else *w++ = *r;
            }
            *w = 0;
            if (json_is_object(at)) at = json_object_get(at, seg);
            else if (json_is_array(at)) {
                char *e = NULL;
                unsigned long i = strtoul(seg, &e, 10);
                at = (*seg && !*e) ? json_array_get(at, i) : NULL;
            } else at = NULL;
            if (!end) break;
            seg = end + 1;
        }
    }
    free(d);
    if (!at) fail(c, "unresolvable $ref '%.200s'", ref);
    return at;
}

/* The rule that target's schema compiles into (made on first use, built later). */
static int32_t def_rule(js_ctx *c, const json_t *target, const char *label) {
    for (size_t i = 0; i < c->n_defs; i++)
        if (c->defs[i].target == target) return c->defs[i].rule;
    if (!CN_GROW(c->defs, c->cap_defs, c->n_defs + 1)) {
        oom(c);
        return -1;
    }
    /* a readable name: the last segment of the pointer */
    const char *last = strrchr(label, '/');
    last = last ? last + 1 : label;
    char name[48];
    size_t k = 0;
    for (const char *s = last; *s && k < 32; s++)
        name[k++] = ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
                     *s == '-')
                        ? *s
                        : '_';
    name[k] = 0;
    char full[64];
    snprintf(full, sizeof full, "def-%s", k ? name : "root");
    int32_t r = gr_rule_fresh(c->x.b, full);
    char *ptr = strdup(label);
    if (r < 0 || !ptr) {
        free(ptr);
        if (r >= 0) oom(c);
        return -1;
    }
    c->defs[c->n_defs++] = (js_def){target, r, ptr};
    return r;
}

/* ---- allOf merging ----
 * The parts are flattened ($ref resolved, allOf spliced in), anyOf / oneOf distributed
 * (A and (B or C) = (A and B) or (A and C)), and the plain parts merged keyword by
 * keyword. For objects the merge is exact: a property listed in one part is constrained
 * in every other part by that part's additionalProperties (when it has one). */

static json_t *keep(js_ctx *c, json_t *v) {
    if (!v) {
        oom(c);
        return NULL;
    }
    if (json_array_append_new(c->owned, v) < 0) {
        oom(c);
        return NULL;
    }
    return v;
}

static json_t *all_of2(js_ctx *c, json_t *a, json_t *b) {
    if (json_is_false(a) || json_is_false(b)) return json_false();
    if (!a || is_trivial_schema(a)) return b;
    if (!b || is_trivial_schema(b)) return a;
    if (json_equal(a, b)) return a;
    return keep(c, json_pack("{s:[OO]}", "allOf", a, b));
}

/* Draft 4's boolean exclusiveMinimum / exclusiveMaximum as the numeric form. */
static void draft4_bounds(json_t *o) {
    static const char *const pair[2][2] = {{"minimum", "exclusiveMinimum"}, {"maximum", "exclusiveMaximum"}};
    for (int i = 0; i < 2; i++) {
        json_t *e = json_object_get(o, pair[i][1]);
        if (!json_is_boolean(e)) continue;
        json_t *m = json_object_get(o, pair[i][0]);
        if (json_is_true(e) && m) {
            json_object_set(o, pair[i][1], m);
            json_object_del(o, pair[i][0]);
        } else json_object_del(o, pair[i][1]);
    }
}

typedef struct {
    json_t **v;
    size_t n, cap;
} js_parts;

static int parts_add(js_ctx *c, js_parts *p, json_t *s) {
    if (!CN_GROW(p->v, p->cap, p->n + 1)) {
        oom(c);
        return -1;
    }
    p->v[p->n++] = s;
    return 0;
}

static json_t *merge(js_ctx *c, json_t *const *in, size_t n_in, int depth);

/* Inserts s before p->v[at]. */
static int parts_insert(js_ctx *c, js_parts *p, size_t at, json_t *s) {
    if (parts_add(c, p, s) < 0) return -1;
    memmove(p->v + at + 1, p->v + at, (p->n - 1 - at) * sizeof *p->v);
    p->v[at] = s;
    return 0;
}

/* A shallow copy of s (an object or an array), kept by c. jansson's json_copy leaves out
 * the members it had no memory for and says nothing: a copy that came out short is out
 * of memory too. */
static json_t *copy(js_ctx *c, const json_t *s) {
    json_t *o = keep(c, json_copy((json_t *)s));
    const size_t n = json_is_object(s) ? json_object_size(s) : json_array_size(s);
    if (o && (json_is_object(s) ? json_object_size(o) : json_array_size(o)) != n) return oom(c), NULL;
    return o;
}

/* A copy of s without the keywords listed (kept alive by c). */
static json_t *without(js_ctx *c, json_t *s, const char *const *keys) {
    json_t *o = copy(c, s);
    if (!o) return NULL;
    for (; *keys; keys++) json_object_del(o, *keys);
    return o;
}

static int num_pick(json_t *r, const char *k, const json_t *v, bool bigger) {
    json_t *cur = json_object_get(r, k);
    if (!cur ||
        (bigger ? json_number_value(v) > json_number_value(cur) : json_number_value(v) < json_number_value(cur)))
        return json_object_set(r, k, (json_t *)v);
    return 0;
}

static bool has_any(const json_t *s, const char *const *keys) {
    for (; *keys; keys++)
        if (json_object_get(s, *keys)) return true;
    return false;
}

/* ---- merging plain parts ----
 * Plain parts (no $ref / allOf / anyOf / oneOf) merge keyword by keyword into one
 * schema: each keyword a part holds goes through its row of merge_rows (bounds keep the
 * tighter, "required" the union, "enum" the intersection); a keyword without a row must
 * be equal in every part that has it. */

typedef struct {
    json_t *r;     /* the merged schema, kept by c */
    int types;     /* the types every part allows */
    bool any_type; /* some part said "type" or "nullable" */
    json_t *en;    /* the enum so far (a list), NULL: none */
    bool has_obj;  /* some part has "properties" or "additionalProperties" */
    json_t *deps;  /* name -> the schema its presence adds, NULL: none */
} js_merged;

/* The keywords' merges: s the part, k its keyword, v the value. false: an error, said. */
typedef bool (*merge_fn)(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v);

static bool merge_equal(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)s;
    json_t *cur = json_object_get(m->r, k);
    if (cur && !json_equal(cur, v)) return fail(c, "allOf: cannot merge two different '%s'", k), false;
    if (!cur && json_object_set(m->r, k, v) < 0) return oom(c), false;
    return true;
}

static bool merge_skip(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)c, (void)m, (void)s, (void)k, (void)v;
    return true;
}

/* properties and additionalProperties: merged name by name at the end (merge_objects). */
static bool merge_note_object(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)c, (void)s, (void)k, (void)v;
    m->has_obj = true;
    return true;
}

static bool merge_required(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)s, (void)k;
    json_t *req = json_object_get(m->r, "required");
    if (!req) {
        req = json_array();
        if (!req || json_object_set_new(m->r, "required", req) < 0) return oom(c), false;
    }
    size_t j;
    json_t *e;
    json_array_foreach(v, j, e) {
        bool seen = false;
        size_t q;
        json_t *f;
        json_array_foreach(req, q, f) seen |= json_equal(e, f);
        if (!seen && json_array_append(req, e) < 0) return oom(c), false;
    }
    return true;
}

/* enum and const: the values in every list so far. */
static bool merge_enum(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)s;
    json_t *list = strcmp(k, "const") == 0 ? keep(c, json_pack("[O]", v)) : v;
    if (!list || !json_is_array(list)) return fail(c, "'enum' must be an array"), false;
    if (!m->en) {
        m->en = list;
        return true;
    }
    json_t *x = keep(c, json_array());
    if (!x) return false;
    size_t a, bb;
    json_t *e, *f;
    json_array_foreach(m->en, a, e) {
        bool both = false;
        json_array_foreach(list, bb, f) both |= json_equal(e, f);
        if (both && json_array_append(x, e) < 0) return oom(c), false;
    }
    m->en = x;
    return true;
}

/* A bound: the tighter one, the larger of lower bounds (bigger), the smaller of upper. */
static bool merge_bound(js_ctx *c, js_merged *m, const char *k, const json_t *v, bool bigger) {
    if (!json_is_number(v)) return fail(c, "'%s' must be a number", k), false;
    if (num_pick(m->r, k, v, bigger) < 0) return oom(c), false;
    return true;
}

static bool merge_lower(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)s;
    return merge_bound(c, m, k, v, true);
}

static bool merge_upper(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)s;
    return merge_bound(c, m, k, v, false);
}

/* items as one schema (not a tuple, not beside prefixItems): every part's, together. */
static bool merge_items(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    if (json_is_array(v) || json_object_get(s, "prefixItems")) return merge_equal(c, m, s, k, v);
    json_t *cur = json_object_get(m->r, "items");
    if (cur && json_is_array(cur)) return fail(c, "allOf: cannot merge 'items' arrays"), false;
    json_t *all = all_of2(c, cur, v);
    if (!all || json_object_set(m->r, "items", all) < 0) return oom(c), false;
    return true;
}

/* dependencies (draft 7: a list of names or a schema per name), dependentRequired (lists)
 * and dependentSchemas (schemas): each name's dependency as a schema (a list of names is
 * {"required": list}); NULL with the error when the value is neither. */
static json_t *dependency_schema(js_ctx *c, const char *k, json_t *d) {
    switch (dependency_kind(k, d)) {
    case DEP_NAMES: return keep(c, json_pack("{s:O}", "required", d));
    case DEP_SCHEMA: return d;
    }
    const bool lists = strcmp(k, "dependentSchemas") != 0, schemas = strcmp(k, "dependentRequired") != 0;
    fail(c, "a value of '%s' must be %s", k,
         !schemas ? "an array of strings"
         : !lists ? "a schema"
                  : "an array of strings or a schema");
    return NULL;
}

/* Every part's dependencies, name by name (several for one name: all of them), into
 * m->deps; dependencies() compiles them. */
static bool merge_dependencies(js_ctx *c, js_merged *m, const json_t *s, const char *k, json_t *v) {
    (void)s;
    size_t old = push(c, k);
    bool ok = json_is_object(v) || (fail(c, "'%s' must be an object", k), false);
    if (ok && !m->deps) ok = (m->deps = keep(c, json_object())) != NULL;
    const char *name;
    json_t *d;
    if (ok) json_object_foreach(v, name, d) {
            size_t o2 = push(c, name);
            json_t *dep = dependency_schema(c, k, d);
            pop(c, o2);
            json_t *all = dep ? all_of2(c, json_object_get(m->deps, name), dep) : NULL;
            if (!all || json_object_set(m->deps, name, all) < 0) {
                if (dep && all) oom(c);
                ok = false;
                break;
            }
        }
    pop(c, old);
    return ok;
}

static const struct {
    const char *kw;
    merge_fn merge;
} merge_rows[] = {
    /* clang-format off */
    { "type", merge_skip },           { "nullable", merge_skip },       /* merge_types */
    { "properties", merge_note_object }, { "additionalProperties", merge_note_object },
    { "required", merge_required },   { "enum", merge_enum },           { "const", merge_enum },
    { "minimum", merge_lower },       { "exclusiveMinimum", merge_lower }, { "minLength", merge_lower },
    { "minItems", merge_lower },      { "maximum", merge_upper },       { "exclusiveMaximum", merge_upper },
    { "maxLength", merge_upper },     { "maxItems", merge_upper },      { "items", merge_items },
    { "dependencies", merge_dependencies }, { "dependentRequired", merge_dependencies },
    { "dependentSchemas", merge_dependencies },
    /* clang-format on */
};

static merge_fn merge_for(const char *k) {
    if (in_list(annotations, k)) return merge_skip;
    for (size_t i = 0; i < sizeof merge_rows / sizeof merge_rows[0]; i++)
        if (strcmp(merge_rows[i].kw, k) == 0) return merge_rows[i].merge;
    return merge_equal;
}

/* The names of the parts' properties, in order of first appearance (kept by c). */
static json_t *property_names(js_ctx *c, json_t *const *p, size_t n) {
    json_t *names = keep(c, json_array());
    if (!names) return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *props = json_object_get(p[i], "properties");
        const char *k;
        json_t *v;
        if (json_is_object(props)) json_object_foreach(props, k, v) {
                bool seen = false;
                size_t j;
                json_t *e;
                json_array_foreach(names, j, e) seen |= strcmp(json_string_value(e), k) == 0;
                if (!seen && json_array_append_new(names, json_string(k)) < 0) return oom(c), NULL;
            }
    }
    return names;
}

/* patternProperties merge only when one part alone constrains objects: another part's
 * additionalProperties would rule names the patterns rule. */
static bool patterns_mergeable(js_ctx *c, json_t *const *p, size_t n) {
    static const char *const okw[] = {"properties", "additionalProperties", "patternProperties", NULL};
    size_t n_obj = 0, n_pat = 0;
    for (size_t i = 0; i < n; i++) {
        n_obj += has_any(p[i], okw);
        n_pat += json_object_get(p[i], "patternProperties") != NULL;
    }
    if (n_pat && n_obj > 1) return fail(c, "allOf: cannot merge 'patternProperties' with another object schema"), false;
    return true;
}

/* Each listed name takes every part's schema for it (its own, else the part's
 * additionalProperties), and additionalProperties every part's. */
static bool merge_objects(js_ctx *c, json_t *const *p, size_t n, json_t *names, json_t *r) {
    json_t *props = keep(c, json_object());
    if (!props) return false;
    size_t j;
    json_t *e;
    json_array_foreach(names, j, e) {
        const char *name = json_string_value(e);
        json_t *m = NULL;
        for (size_t i = 0; i < n; i++) {
            json_t *pp = json_object_get(p[i], "properties");
            json_t *v = json_is_object(pp) ? json_object_get(pp, name) : NULL;
            if (!v) v = json_object_get(p[i], "additionalProperties");
            if (v) m = all_of2(c, m, v);
            if (c->x.b && gr_builder_error(c->x.b)->status) return false;
        }
        if (json_object_set(props, name, m ? m : json_true()) < 0) return oom(c), false;
    }
    if (json_object_set(r, "properties", props) < 0) return oom(c), false;
    json_t *add = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(p[i], "additionalProperties");
        if (v) add = all_of2(c, add, v);
    }
    if (add && json_object_set(r, "additionalProperties", add) < 0) return oom(c), false;
    return true;
}

/* r's "type" as the list of the types in the mask types ("number" covers "integer"). */
static bool set_types(js_ctx *c, json_t *r, int types) {
    static const char *const tn[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    json_t *tl = json_array();
    if (!tl || json_object_set_new(r, "type", tl) < 0) return oom(c), false;
    for (int i = 0; i < 7; i++) {
        if (i == 2 && (types & T_NUM)) continue;
        if ((types & (1 << i)) && json_array_append_new(tl, json_string(tn[i])) < 0) return oom(c), false;
    }
    return true;
}

/* One part's keywords into m. */
static bool merge_part(js_ctx *c, js_merged *m, json_t *s) {
    int t = types_of(c, s);
    if (t < 0) return false;
    if (json_object_get(s, "type") || json_object_get(s, "nullable")) {
        m->types &= t;
        m->any_type = true;
    }
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (!merge_for(k)(c, m, s, k, v)) return false;
    return true;
}

/* Merges plain parts. Returns a schema kept by c. */
static json_t *merge_plain(js_ctx *c, json_t *const *p, size_t n) {
    js_merged m = {.r = keep(c, json_object()), .types = T_ALL};
    if (!m.r) return NULL;
    json_t *names = property_names(c, p, n);
    if (!names || !patterns_mergeable(c, p, n)) return NULL;
    for (size_t i = 0; i < n; i++)
        if (!merge_part(c, &m, p[i])) return NULL;
    if (m.has_obj && !merge_objects(c, p, n, names, m.r)) return NULL;
    if (m.any_type && !set_types(c, m.r, m.types)) return NULL;
    if (m.en && json_object_set(m.r, "enum", m.en) < 0) return oom(c), NULL;
    if (m.deps && json_object_size(m.deps) && json_object_set(m.r, "dependentSchemas", m.deps) < 0) return oom(c), NULL;
    return m.r;
}

/* ---- dependencies ----
 * A dependency "name -> S" holds for objects without the property name, and for those
 * with it that match S. merge_plain gathers every dependency of the parts as
 * "dependentSchemas" (one schema per name); dependencies() turns them into what the
 * grammar can say: a name the object must have has its S merged in at once; a name it
 * may not have drops its dependency; any other name splits the schema in two — name
 * forbidden, or name required and S merged in — each half with the dependencies left
 * (which the half may now decide). The halves are disjoint (an object has the name or
 * not, and the second holds only objects), so their anyOf is exact. A half in which no
 * object holds (S requires a name the schema forbids) keeps its other types, or goes.
 * k undecided names make up to 2^k halves: JS_MAX_BRANCHES splits at the most. */

/* Whether s rules out the property name: its schema false, or not listed under
 * additionalProperties: false (and no patternProperties, which might take it). */
static bool forbids(const json_t *s, const char *name) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *v = json_is_object(props) ? json_object_get(props, name) : NULL;
    if (v) return json_is_false(v);
    const json_t *pp = json_object_get(s, "patternProperties");
    if (json_is_object(pp) && json_object_size(pp)) return false;
    return json_is_false(json_object_get(s, "additionalProperties"));
}

/* s (kept by c) without the object type when s requires a name it forbids; false when
 * no type is left. */
static json_t *drop_objects(js_ctx *c, json_t *s) {
    if (!json_is_object(s)) return s;
    const json_t *req = json_object_get(s, "required");
    bool none = false;
    size_t i;
    json_t *e;
    json_array_foreach(req, i, e) none |= json_is_string(e) && forbids(s, json_string_value(e));
    if (!none) return s;
    const int t = types_of(c, s);
    if (t < 0) return NULL;
    if (!(t & ~T_OBJ)) return json_false();
    json_t *o = copy(c, s);
    return o && set_types(c, o, t & ~T_OBJ) ? o : NULL;
}

/* m's branches (an anyOf's, else m) into out, each through drop_objects; false ones
 * dropped. */
static bool add_branches(js_ctx *c, json_t *out, json_t *m) {
    if (!m) return false;
    json_t *any = json_is_object(m) && json_object_size(m) == 1 ? json_object_get(m, "anyOf") : NULL;
    size_t n = any ? json_array_size(any) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = drop_objects(c, any ? json_array_get(any, i) : m);
        if (!e) return false;
        if (!json_is_false(e) && json_array_append(out, e) < 0) return oom(c), false;
    }
    return true;
}

/* out's branches as one schema: false when none, the one, or their anyOf. */
static json_t *any_of(js_ctx *c, json_t *out) {
    if (json_array_size(out) < 2) return json_array_size(out) ? json_array_get(out, 0) : json_false();
    return keep(c, json_pack("{s:O}", "anyOf", out));
}

/* A copy of s (kept by c) with list (an object's or an array's member) key replaced by
 * a copy with x added: under name when name is given, else appended. */
static json_t *with_member(js_ctx *c, json_t *s, const char *key, const char *name, json_t *x) {
    json_t *o = copy(c, s), *cur = json_object_get(s, key);
    if (!o) return NULL;
    if (cur && (name ? !json_is_object(cur) : !json_is_array(cur)))
        return fail(c, "'%s' must be %s", key, name ? "an object" : "an array"), NULL;
    json_t *l = cur ? copy(c, cur) : keep(c, name ? json_object() : json_array());
    if (!l || (name ? json_object_set(l, name, x) : json_array_append(l, x)) < 0 || json_object_set(o, key, l) < 0)
        return oom(c), NULL;
    return o;
}

/* base's objects split on name (its dependency s; rest: the dependencies left for both
 * halves, may be empty). */
static json_t *split_on(js_ctx *c, json_t *base, int types, const char *name, json_t *s, json_t *rest, int depth) {
    if (++c->dep_splits > JS_MAX_BRANCHES)
        return fail(c, "dependencies: more than %d cases of present and absent names", JS_MAX_BRANCHES), NULL;
    json_t *nm = keep(c, json_string(name));
    json_t *absent = with_member(c, base, "properties", name, json_false());
    json_t *present = nm ? with_member(c, base, "required", NULL, nm) : NULL;
    json_t *out = keep(c, json_array());
    if (!absent || !present || !out || !set_types(c, present, types & T_OBJ)) return NULL;
    const bool more = json_object_size(rest) > 0;
    if (more && (json_object_set(absent, "dependentSchemas", rest) < 0 ||
                 json_object_set(present, "dependentSchemas", rest) < 0))
        return oom(c), NULL;
    json_t *parts[2] = {present, s};
    if (!add_branches(c, out, merge(c, &absent, 1, depth + 1)) || !add_branches(c, out, merge(c, parts, 2, depth + 1)))
        return NULL;
    return any_of(c, out);
}

/* r, a merged plain schema with "dependentSchemas", as a schema without. */
static json_t *dependencies(js_ctx *c, json_t *r, int depth) {
    static const char *const drop[] = {"dependentSchemas", NULL};
    json_t *deps = json_object_get(r, "dependentSchemas");
    json_t *base = without(c, r, drop);
    if (base) base = drop_objects(c, base);
    const int t = base && json_is_object(base) ? types_of(c, base) : 0;
    if (!base || t < 0 || !(t & T_OBJ)) return t < 0 ? NULL : base;
    js_parts now = {0}; /* base and the dependencies it decides */
    json_t *rest = keep(c, json_object()), *res = NULL;
    const char *name;
    json_t *s;
    if (!rest || parts_add(c, &now, base) < 0) goto done;
    json_object_foreach(deps, name, s) {
        if (required_has(base, name)) {
            if (parts_add(c, &now, s) < 0) goto done;
        } else if (!forbids(base, name) && json_object_set(rest, name, s) < 0) {
            oom(c);
            goto done;
        }
    }
    if (now.n == 1 && json_object_size(rest) == 0) {
        res = base;
    } else if (now.n == 1) {
        void *first = json_object_iter(rest);
        name = json_object_iter_key(first);
        s = json_object_iter_value(first);
        json_t *left = copy(c, rest);
        if (left && json_object_del(left, name) == 0) res = split_on(c, base, t, name, s, left, depth);
    } else {
        json_t *more = json_object_size(rest) ? keep(c, json_pack("{s:O}", "dependentSchemas", rest)) : json_true();
        json_t *out = keep(c, json_array());
        if (more && out && parts_add(c, &now, more) == 0 && add_branches(c, out, merge(c, now.v, now.n, depth + 1)))
            res = any_of(c, out);
    }
done:
    free(now.v);
    return res;
}

static json_t *merge(js_ctx *c, json_t *const *in, size_t n_in, int depth) {
    if (depth == 0) c->dep_splits = 0;
    if (depth > JS_MAX_DEPTH) return fail(c, "allOf / anyOf nested deeper than %d levels", JS_MAX_DEPTH), NULL;
    js_parts p = {0};
    json_t *res = NULL;
    for (size_t i = 0; i < n_in; i++)
        if (parts_add(c, &p, in[i]) < 0) goto done;
    /* flatten $ref and allOf */
    size_t expansions = 0;
    for (size_t i = 0; i < p.n; i++) {
        json_t *s = p.v[i];
        if (json_is_false(s)) {
            res = json_false();
            goto done;
        }
        if (!json_is_object(s)) continue; /* true (or junk, refused when compiled) */
        json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
        if (!ref && !all) continue;
        if (++expansions > JS_MAX_EXPANSIONS) {
            fail(c, "allOf: too many $ref expansions (a reference cycle through allOf?)");
            goto done;
        }
        static const char *const drop[] = {"$ref", "allOf", NULL};
        json_t *rest = without(c, s, drop);
        if (!rest) goto done;
        /* the referenced and allOf parts go before the siblings, in that order: a base
         * schema's properties come before those a schema adds to it */
        size_t at = i;
        if (ref) {
            if (!json_is_string(ref)) {
                fail(c, "$ref must be a string");
                goto done;
            }
            const json_t *t = resolve(c, json_string_value(ref));
            if (!t || parts_insert(c, &p, at++, (json_t *)t) < 0) goto done;
        }
        if (all) {
            if (!json_is_array(all)) {
                fail(c, "allOf must be an array");
                goto done;
            }
            size_t j;
            json_t *e;
            json_array_foreach(all, j, e) if (parts_insert(c, &p, at++, e) < 0) goto done;
        }
        p.v[at] = rest;
        i = (size_t)-1; /* look again from the start: the new parts may hold more */
    }
    /* distribute the first anyOf / oneOf (oneOf as anyOf: see sch_any) */
    for (size_t i = 0; i < p.n; i++) {
        json_t *s = p.v[i];
        if (!json_is_object(s)) continue;
        const char *kw = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
        if (!kw) continue;
        json_t *br = json_object_get(s, kw);
        if (!json_is_array(br) || json_array_size(br) == 0) {
            fail(c, "%s must be a non-empty array", kw);
            goto done;
        }
        const char *drop[] = {kw, NULL};
        json_t *rest = without(c, s, drop);
        if (!rest) goto done;
        json_t *out = keep(c, json_array());
        if (!out) goto done;
        size_t j;
        json_t *e;
        json_array_foreach(br, j, e) {
            /* the branch stands where the anyOf stood, after its siblings */
            json_t *saved = p.v[i];
            p.v[i] = rest;
            if (parts_insert(c, &p, i + 1, e) < 0) goto done;
            json_t *m = merge(c, p.v, p.n, depth + 1);
            memmove(p.v + i + 1, p.v + i + 2, (p.n - i - 2) * sizeof *p.v);
            p.n--;
            p.v[i] = saved;
            if (!m) goto done;
            if (json_is_false(m)) continue;
            if (kw[0] == 'a' && json_is_object(m) && json_object_get(m, "anyOf") && json_object_size(m) == 1) {
                size_t q;
                json_t *f;
                json_array_foreach(json_object_get(m, "anyOf"), q, f) json_array_append(out, f);
            } else json_array_append(out, m);
            if (json_array_size(out) > JS_MAX_BRANCHES) {
                fail(c, "allOf / anyOf: more than %d branches after merging", JS_MAX_BRANCHES);
                goto done;
            }
        }
        res = json_array_size(out) == 0 ? json_false() : keep(c, json_pack("{s:O}", kw, out));
        goto done;
    }
    {
        json_t **plain = p.v;
        size_t np = 0;
        for (size_t i = 0; i < p.n; i++) {
            if (!json_is_object(p.v[i])) {
                if (json_is_true(p.v[i])) continue;
                fail(c, "a schema must be an object or a boolean");
                goto done;
            }
            json_t *cp = copy(c, p.v[i]);
            if (!cp) goto done;
            draft4_bounds(cp);
            plain[np++] = cp;
        }
        res = np == 0 ? json_true() : merge_plain(c, plain, np);
        if (res && json_object_get(res, "dependentSchemas")) res = dependencies(c, res, depth);
    }
done:
    free(p.v);
    return res;
}

/* ---- the enum checker ----
 * An enum / const value is offered only if the rest of the schema accepts it. 1 valid,
 * 0 invalid, -1 undecidable here (c->why names the keyword). */

static size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static int check(js_ctx *c, const json_t *s, const json_t *v, int depth);

static int check_list(js_ctx *c, const json_t *list, const json_t *v, int depth, int mode /* 0 all 1 any 2 one */) {
    size_t i, n_ok = 0;
    json_t *e;
    json_array_foreach(list, i, e) {
        int r = check(c, e, v, depth + 1);
        if (r < 0) return -1;
        n_ok += (size_t)r;
        if (mode == 0 && !r) return 0;
    }
    return mode == 0 ? 1 : mode == 1 ? n_ok > 0 : n_ok == 1;
}

/* Keyword k's dependencies w for the enum checker: 1 when every name v has meets its
 * dependency, 0 when one does not, -1 undecidable (c->why). */
static int check_dependencies(js_ctx *c, const char *k, const json_t *w, const json_t *v, int depth) {
    if (!json_is_object(v)) return 1;
    if (!json_is_object(w)) return c->why = k, -1;
    const char *name;
    json_t *d;
    json_object_foreach((json_t *)w, name, d) {
        if (!json_object_get(v, name)) continue;
        int ok = 1;
        size_t i;
        json_t *e;
        switch (dependency_kind(k, d)) {
        case DEP_NAMES: json_array_foreach(d, i, e) ok &= json_object_get(v, json_string_value(e)) != NULL; break;
        case DEP_SCHEMA: ok = check(c, d, v, depth + 1); break;
        default: return c->why = k, -1;
        }
        if (ok <= 0) return ok;
    }
    return 1;
}

static int check(js_ctx *c, const json_t *s, const json_t *v, int depth) {
    if (depth > JS_MAX_DEPTH) {
        c->why = "$ref (too deep)";
        return -1;
    }
    if (json_is_boolean(s)) return json_is_true(s);
    if (!json_is_object(s)) return 0;
    const char *uk = unsupported_keyword(s);
    if (uk) {
        c->why = uk;
        return -1;
    }
    const char *k;
    json_t *w;
    json_object_foreach((json_t *)s, k, w) {
        int ok = 1;
        if (strcmp(k, "type") == 0 || strcmp(k, "nullable") == 0) {
            int t = types_of(c, s);
            if (t < 0) return -1;
            int have = json_is_null(v)      ? T_NULL
                       : json_is_boolean(v) ? T_BOOL
                       : json_is_integer(v) ? T_INT
                       : json_is_real(v)    ? (json_real_value(v) == floor(json_real_value(v)) ? T_INT : T_NUM)
                       : json_is_string(v)  ? T_STR
                       : json_is_array(v)   ? T_ARR
                                            : T_OBJ;
            ok = (t & have) != 0;
        } else if (strcmp(k, "enum") == 0) {
            size_t i;
            json_t *e;
            ok = 0;
            if (json_is_array(w)) json_array_foreach(w, i, e) ok |= json_equal(e, v);
        } else if (strcmp(k, "const") == 0) {
            ok = json_equal(w, v);
        } else if (strcmp(k, "minLength") == 0 || strcmp(k, "maxLength") == 0) {
            if (json_is_string(v)) {
                double len = (double)utf8_len(json_string_value(v), json_string_length(v));
                ok = k[1] == 'i' ? len >= json_number_value(w) : len <= json_number_value(w);
            }
        } else if (strcmp(k, "minItems") == 0 || strcmp(k, "maxItems") == 0) {
            if (json_is_array(v)) {
                double len = (double)json_array_size(v);
                ok = k[1] == 'i' ? len >= json_number_value(w) : len <= json_number_value(w);
            }
        } else if (strcmp(k, "minimum") == 0 || strcmp(k, "maximum") == 0 || strcmp(k, "exclusiveMinimum") == 0 ||
                   strcmp(k, "exclusiveMaximum") == 0) {
            if (json_is_number(v) && json_is_number(w)) {
                double x = json_number_value(v), b = json_number_value(w);
                bool lo = strstr(k, "in") != NULL;
                bool ex = k[0] == 'e' || json_is_true(json_object_get(s, lo ? "exclusiveMinimum" : "exclusiveMaximum"));
                ok = lo ? (ex ? x > b : x >= b) : (ex ? x < b : x <= b);
            }
        } else if (strcmp(k, "required") == 0) {
            if (json_is_object(v)) {
                size_t i;
                json_t *e;
                json_array_foreach(w, i, e) ok &= json_is_string(e) && json_object_get(v, json_string_value(e)) != NULL;
            }
        } else if (strcmp(k, "properties") == 0 || strcmp(k, "additionalProperties") == 0) {
            if (json_is_object(v)) {
                const json_t *props = json_object_get(s, "properties"),
                             *add = json_object_get(s, "additionalProperties");
                const char *pk;
                json_t *pv;
                json_object_foreach((json_t *)v, pk, pv) {
                    const json_t *ps = json_is_object(props) ? json_object_get(props, pk) : NULL;
                    int r = ps ? check(c, ps, pv, depth + 1) : add ? check(c, add, pv, depth + 1) : 1;
                    if (r < 0) return -1;
                    ok &= r;
                }
            }
        } else if (strcmp(k, "items") == 0 || strcmp(k, "prefixItems") == 0 || strcmp(k, "additionalItems") == 0) {
            if (json_is_array(v)) {
                const json_t *pre = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items");
                const json_t *rest = it;
                if (!pre && json_is_array(it)) {
                    pre = it;
                    rest = json_object_get(s, "additionalItems");
                }
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e) {
                    const json_t *is = pre && i < json_array_size(pre) ? json_array_get(pre, i) : rest;
                    int r = is ? check(c, is, e, depth + 1) : 1;
                    if (r < 0) return -1;
                    ok &= r;
                }
            }
        } else if (strcmp(k, "allOf") == 0 || strcmp(k, "anyOf") == 0 || strcmp(k, "oneOf") == 0) {
            if (!json_is_array(w)) return 0;
            ok = check_list(c, w, v, depth, k[1] == 'l' ? 0 : k[1] == 'n' ? 1 : 2);
        } else if (strcmp(k, "$ref") == 0) {
            const json_t *t = json_is_string(w) ? resolve(c, json_string_value(w)) : NULL;
            if (!t) return -1;
            ok = check(c, t, v, depth + 1);
        } else if (in_list(dependency_keywords, k)) {
            ok = check_dependencies(c, k, w, v, depth);
        } else if (strcmp(k, "pattern") == 0 || strcmp(k, "format") == 0) {
            if (json_is_string(v)) {
                static const char *const known[] = {"date", "time", "date-time", "duration", "uuid", "email",
                                                    "ipv4", "ipv6", "hostname",  "uri",      NULL};
                if (strcmp(k, "pattern") == 0 || (json_is_string(w) && in_list(known, json_string_value(w)))) {
                    c->why = k;
                    return -1;
                }
            }
        }
        if (ok < 0) return -1;
        if (!ok) return 0;
    }
    return 1;
}

/* ---- compiling a schema ---- */

static int32_t sch(js_ctx *c, json_t *s);

static bool has_assertions(const json_t *s, const char *const *skip) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(skip, k)) continue;
        if (in_list(handled, k)) return true;
    }
    return false;
}

static int32_t sch_enum(js_ctx *c, json_t *s, const json_t *list) {
    static const char *const drop[] = {"enum", "const", NULL};
    json_t *rest = without(c, s, drop);
    if (!rest) return -1;
    draft4_bounds(rest);
    gr_builder *b = c->x.b;
    int32_t r = gr_nothing(b);
    size_t i, n_ok = 0;
    json_t *e;
    json_array_foreach(list, i, e) {
        int ok = check(c, rest, e, 0);
        if (gr_builder_error(b)->status) return -1;
        if (ok < 0) return fail(c, "enum / const together with '%s' is not supported", c->why ? c->why : "?");
        if (!ok) continue;
        r = gr_alt2(b, r, js_json_literal(&c->x, e));
        n_ok++;
    }
    /* no value left (enum: ["a"] with type: array): this schema accepts nothing, which
     * is no error where it may be left out (an optional property, one anyOf branch);
     * where it may not, compile reports the rule that matches no text */
    if (n_ok == 0) return gr_nothing(b);
    int32_t rule = gr_rule_fresh(b, "enum");
    if (gr_rule_define(b, rule, r) < 0) return -1;
    return gr_ref(b, rule);
}

static int get_count(js_ctx *c, const json_t *s, const char *k, uint32_t dflt, uint32_t *out) {
    const json_t *v = json_object_get(s, k);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) != floor(json_number_value(v))) {
        fail(c, "'%s' must be a non-negative integer", k);
        return -1;
    }
    double d = json_number_value(v);
    if (d >= 1e9) {
        if (dflt == GR_INF) return 0; /* a maximum this large bounds nothing we can write */
        fail(c, "'%s' = %.0f is larger than supported", k, d);
        return -1;
    }
    *out = (uint32_t)d;
    return 0;
}

static int32_t sch_string(js_ctx *c, const json_t *s) {
    uint32_t lo, hi;
    if (get_count(c, s, "minLength", 0, &lo) < 0 || get_count(c, s, "maxLength", GR_INF, &hi) < 0) return -1;
    if (lo > hi) return fail(c, "unsatisfiable schema: minLength %u > maxLength %u", lo, hi);
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) return fail(c, "'pattern' must be a string");
    /* only known formats constrain; an unknown one is an annotation */
    const char *f = json_is_string(fmt) && js_format_known(json_string_value(fmt)) ? json_string_value(fmt) : NULL;
    size_t old = push(c, pat ? "pattern" : f ? "format" : "maxLength");
    int32_t r = js_string_constrained(&c->x, lo, hi, pat ? json_string_value(pat) : NULL,
                                      pat ? json_string_length(pat) : 0, f);
    pop(c, old);
    return r;
}

static int32_t sch_number(js_ctx *c, const json_t *s, bool integer_only) {
    const json_t *lo = json_object_get(s, "minimum"), *hi = json_object_get(s, "maximum");
    const json_t *xlo = json_object_get(s, "exclusiveMinimum"), *xhi = json_object_get(s, "exclusiveMaximum");
    const json_t *mo = json_object_get(s, "multipleOf");
    if (mo) integer_only = true; /* only multipleOf: 1 gets here */
    bool lx = false, hx = false;
    /* draft 4: booleans modifying minimum / maximum; later: numbers of their own */
    if (json_is_boolean(xlo)) {
        lx = json_is_true(xlo);
        xlo = NULL;
    }
    if (json_is_boolean(xhi)) {
        hx = json_is_true(xhi);
        xhi = NULL;
    }
    const json_t *vals[4] = {lo, xlo, hi, xhi};
    for (int i = 0; i < 4; i++)
        if (vals[i] && !json_is_number(vals[i])) return fail(c, "a numeric bound must be a number");
    /* the tighter of minimum / exclusiveMinimum (and of the maxima) */
    if (xlo && (!lo || json_number_value(xlo) >= json_number_value(lo))) {
        lo = xlo;
        lx = true;
    }
    if (xhi && (!hi || json_number_value(xhi) <= json_number_value(hi))) {
        hi = xhi;
        hx = true;
    }
    if (!lo && !hi) return integer_only ? js_integer(&c->x) : js_number(&c->x);
    js_dec dl = {0}, dh = {0};
    int32_t r = -1;
    if ((lo && js_dec_from_json(&c->x, lo, &dl) < 0) || (hi && js_dec_from_json(&c->x, hi, &dh) < 0)) goto out;
    if (lo && hi) {
        int cmp = js_dec_cmp(&dl, &dh);
        if (cmp > 0 || (cmp == 0 && (lx || hx))) {
            fail(c, "unsatisfiable schema: minimum > maximum");
            goto out;
        }
    }
    gr_builder *b = c->x.b;
    int32_t rule = gr_rule_fresh(b, integer_only ? "integer-range" : "number-range");
    int32_t e = js_num_range(&c->x, lo ? &dl : NULL, lx, hi ? &dh : NULL, hx, integer_only);
    if (gr_rule_define(b, rule, e) >= 0) r = gr_ref(b, rule);
out:
    js_dec_free(&dl);
    js_dec_free(&dh);
    return r;
}

/* An item list: prefix[0..k) then rest (rest_ok false: no more), min..max items. */
static int32_t sch_array(js_ctx *c, const json_t *s) {
    gr_builder *b = c->x.b;
    uint32_t lo, hi;
    if (get_count(c, s, "minItems", 0, &lo) < 0 || get_count(c, s, "maxItems", GR_INF, &hi) < 0) return -1;
    if (lo > hi) return fail(c, "unsatisfiable schema: minItems %u > maxItems %u", lo, hi);
    json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    json_t *rest = items;
    const char *pre_kw = "prefixItems", *rest_kw = "items";
    if (!pre && json_is_array(items)) { /* drafts 4 to 2019-09 */
        pre = items;
        pre_kw = "items";
        rest = json_object_get(s, "additionalItems");
        rest_kw = "additionalItems";
    } else if (json_is_array(items)) return fail(c, "'items' must be a schema when 'prefixItems' is given");
    if (pre && !json_is_array(pre)) return fail(c, "'%s' must be an array", pre_kw);
    size_t k = pre ? json_array_size(pre) : 0;
    if (k > 4096) return fail(c, "'%s' has more than 4096 entries", pre_kw);
    /* the prefix stops at the first unsatisfiable item (and so do the lengths) */
    int32_t *px = malloc((k + 1) * sizeof *px);
    if (!px) {
        oom(c);
        return -1;
    }
    size_t kk = 0;
    for (; kk < k; kk++) {
        json_t *it = json_array_get(pre, kk);
        if (json_is_false(it)) break;
        size_t o1 = push(c, pre_kw), o2 = push_i(c, kk);
        (void)o2;
        px[kk] = sch(c, it);
        pop(c, o1);
    }
    bool rest_ok = kk == k && !json_is_false(rest);
    int32_t rx = -1;
    if (rest_ok) {
        size_t old = push(c, rest_kw);
        rx = rest ? sch(c, rest) : js_value(&c->x);
        pop(c, old);
    }
    if (!rest_ok && hi > kk) hi = (uint32_t)kk;
    if (lo > hi) {
        free(px);
        return fail(c, "unsatisfiable schema: minItems %u but at most %u items allowed", lo, hi);
    }
    /* build from the back: cont(i) = what may follow after i items */
    int32_t sep = js_sep(&c->x);
    int32_t tail;
    uint32_t n_pre = hi < kk ? hi : (uint32_t)kk;
    if (rest_ok && hi > n_pre) {
        uint32_t rmin = lo > n_pre ? lo - n_pre : 0;
        uint32_t rmax = hi == GR_INF ? GR_INF : hi - n_pre;
        if (n_pre == 0) {
            /* no prefix: item (sep item){rmin-1, rmax-1}, optional when rmin == 0 */
            int32_t more = gr_repeat(b, gr_seq2(b, sep, rx), rmin ? rmin - 1 : 0, rmax == GR_INF ? GR_INF : rmax - 1);
            tail = gr_seq2(b, rx, more);
            if (rmin == 0) tail = gr_repeat(b, tail, 0, 1);
        } else tail = gr_repeat(b, gr_seq2(b, sep, rx), rmin, rmax);
    } else tail = gr_empty(b);
    int32_t body = tail;
    for (uint32_t i = n_pre; i-- > 0;) {
        /* item i (0-based) present: required when i < lo */
        int32_t one = i == 0 ? gr_seq2(b, px[0], body) : gr_seq(b, (int32_t[]){sep, px[i], body}, 3);
        body = i < lo ? one : gr_repeat(b, one, 0, 1);
    }
    free(px);
    int32_t ws = js_ws(&c->x);
    int32_t e = gr_seq(b, (int32_t[]){js_lit(&c->x, "["), ws, body, js_ws(&c->x), js_lit(&c->x, "]")}, 5);
    int32_t rule = gr_rule_fresh(b, "array");
    if (gr_rule_define(b, rule, e) < 0) return -1;
    return gr_ref(b, rule);
}

typedef struct {
    const char *name;
    json_t *schema;
    bool required;
    bool unlisted; /* required, not in properties: additionalProperties or patterns rule it */
} js_prop;

/* ---- patternProperties ----
 * A name other than the listed ones falls in one key class per set of patterns it
 * matches: patterns are grouped by overlap (two overlap when some unlisted name matches
 * both: the intersection compiled on its own, empty when the compile says it matches no
 * text), and a group of k patterns has 2^k - 1 classes, each a key content (all of its
 * patterns, none of its group's others; js_key_content) with the value schema all of its
 * patterns' schemas. Names matching none take additionalProperties. A listed name takes
 * the schemas of the patterns it matches besides its own. */

typedef struct {
    const char **re;
    size_t *n_re;
    json_t **schema;
    int *group; /* (n) overlap group */
    size_t n;
} js_pats;

static void pats_free(js_pats *q) {
    free(q->re);
    free(q->n_re);
    free(q->schema);
    free(q->group);
}

/* Compiles expr (built by the caller into b2) as a grammar on its own: *g, or NULL when
 * it matches no text. -1: another error, reported at the current path. */
static int side_compile(js_ctx *c, gr_builder *b2, int32_t expr, gr_grammar **g) {
    *g = NULL;
    int32_t r = gr_rule(b2, "side");
    gr_rule_define(b2, r, expr);
    cn_error err = {0};
    cn_status st = gr_compile(b2, r, NULL, g, &err);
    if (st == CN_STATUS_OK) return 0;
    if (strstr(err.msg, "matches no text")) return 0;
    if (st == CN_STATUS_NO_MEMORY) {
        oom(c);
        return -1;
    }
    fail(c, "%s", err.msg);
    return -1;
}

/* Whether the listed name matches pattern re; -1: error. */
static int name_matches(js_ctx *c, const char *re, size_t n_re, const char *name, bool *out) {
    gr_builder *b2 = gr_builder_new();
    char *ks = NULL;
    size_t kl = 0, kc = 0;
    if (!b2 || js_spell_string(name, strlen(name), &ks, &kl, &kc) < 0) {
        gr_builder_free(b2);
        free(ks);
        oom(c);
        return -1;
    }
    gr_grammar *g = NULL;
    int rc = side_compile(c, b2, gr_regex_expr_unanchored(b2, re, n_re), &g);
    *out = g && gr_matches(g, ks + 1, kl - 2);
    gr_grammar_free(g);
    gr_builder_free(b2);
    free(ks);
    return rc;
}

/* Whether some name, none of names[], matches both patterns i and j; -1: error. */
static int patterns_overlap(js_ctx *c, const js_pats *q, size_t i, size_t j, const char *const *names,
                            const size_t *lens, size_t n_names, bool *out) {
    gr_builder *b2 = gr_builder_new();
    uint8_t *want = malloc(q->n);
    if (!b2 || !want) {
        gr_builder_free(b2);
        free(want);
        oom(c);
        return -1;
    }
    memset(want, 2, q->n);
    want[i] = want[j] = 1;
    js_lex t = {.b = b2};
    gr_grammar *g = NULL;
    int rc = side_compile(c, b2, js_key_content(&t, names, lens, n_names, q->re, q->n_re, want, q->n), &g);
    *out = g != NULL;
    gr_grammar_free(g);
    js_lex_free(&t);
    gr_builder_free(b2);
    free(want);
    return rc;
}

/* Reads patternProperties into q, groups the patterns by overlap and adds their schemas
 * to the listed names that match them. -1: error. */
static int pats_read(js_ctx *c, const json_t *pp, js_prop *p, size_t n, const char *const *names, const size_t *lens,
                     js_pats *q) {
    size_t np = json_object_size(pp);
    if (np > JS_MAX_PATTERNS) return fail(c, "more than %d patternProperties", JS_MAX_PATTERNS);
    q->re = calloc(np + 1, sizeof *q->re);
    q->n_re = calloc(np + 1, sizeof *q->n_re);
    q->schema = calloc(np + 1, sizeof *q->schema);
    q->group = calloc(np + 1, sizeof *q->group);
    if (!q->re || !q->n_re || !q->schema || !q->group) {
        oom(c);
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)pp, k, v) {
        q->re[q->n] = k;
        q->n_re[q->n] = strlen(k);
        q->schema[q->n] = v;
        q->group[q->n] = (int)q->n;
        q->n++;
    }
    size_t old = push(c, "patternProperties");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < q->n; i++) {
        size_t o2 = push(c, q->re[i]);
        for (size_t j = 0; rc == 0 && j < n; j++) {
            bool m;
            rc = name_matches(c, q->re[i], q->n_re[i], p[j].name, &m);
            if (rc == 0 && m) {
                p[j].schema = p[j].unlisted ? q->schema[i] : all_of2(c, p[j].schema, q->schema[i]);
                p[j].unlisted = false;
                if (!p[j].schema) rc = -1;
            }
        }
        /* union-find by overlap, smallest index as the group's name */
        for (size_t j = 0; rc == 0 && j < i; j++) {
            if (q->group[i] == q->group[j]) continue;
            bool ov;
            rc = patterns_overlap(c, q, i, j, names, lens, n, &ov);
            if (rc == 0 && ov) {
                int from = q->group[i], to = q->group[j];
                if (from < to) {
                    int t = from;
                    from = to;
                    to = t;
                }
                for (size_t x = 0; x <= i; x++)
                    if (q->group[x] == from) q->group[x] = to;
            }
        }
        pop(c, o2);
    }
    for (size_t i = 0; rc == 0 && i < q->n; i++) {
        size_t k2 = 0;
        for (size_t j = 0; j < q->n; j++) k2 += q->group[j] == q->group[i];
        if (k2 > JS_MAX_OVERLAP) rc = fail(c, "more than %d patternProperties that overlap", JS_MAX_OVERLAP);
    }
    pop(c, old);
    return rc;
}

/* One member rule: "key content" ws ":" ws value. */
static int32_t member_rule(js_ctx *c, int32_t content, int32_t val, const char *label) {
    gr_builder *b = c->x.b;
    int32_t r = gr_rule_fresh(b, label);
    int32_t key = gr_seq(b, (int32_t[]){js_lit(&c->x, "\""), content, js_lit(&c->x, "\"")}, 3);
    if (gr_rule_define(b, r, gr_seq(b, (int32_t[]){key, js_ws(&c->x), js_lit(&c->x, ":"), js_ws(&c->x), val}, 5)) < 0)
        return -1;
    return gr_ref(b, r);
}

/* The members for unlisted names under patterns: one per key class (see above), and the
 * names that match no pattern with additionalProperties' value (add; NULL: any value;
 * false: none). -2: no member at all. */
static int32_t pattern_members(js_ctx *c, const js_pats *q, const char *const *names, const size_t *lens, size_t n,
                               json_t *add) {
    gr_builder *b = c->x.b;
    uint8_t *want = malloc(q->n + 1);
    size_t *in = malloc((q->n + 1) * sizeof *in);
    int32_t *alts = malloc(((size_t)q->n * 8 + 2) * sizeof *alts);
    size_t n_alt = 0;
    int32_t r = -1;
    if (!want || !in || !alts) {
        oom(c);
        goto out;
    }
    for (size_t gi = 0; gi < q->n; gi++) {
        if (q->group[gi] != (int)gi) continue;
        size_t k = 0;
        for (size_t j = 0; j < q->n; j++)
            if (q->group[j] == (int)gi) in[k++] = j;
        for (uint32_t set = 1; set < (1u << k); set++) {
            memset(want, 2, q->n);
            json_t *vs = json_true();
            for (size_t t = 0; t < k; t++) {
                bool on = (set >> t) & 1;
                want[in[t]] = on;
                if (on) vs = all_of2(c, vs, q->schema[in[t]]);
            }
            if (!vs) goto out;
            size_t old = push(c, "patternProperties");
            push(c, q->re[in[__builtin_ctz(set)]]);
            int32_t val = sch(c, vs);
            pop(c, old);
            int32_t content = js_key_content(&c->x, names, lens, n, q->re, q->n_re, want, q->n);
            alts[n_alt++] = member_rule(c, content, val, "pattern-member");
        }
    }
    if (!json_is_false(add)) {
        memset(want, 0, q->n);
        size_t old = push(c, "additionalProperties");
        int32_t val = add ? sch(c, add) : js_value(&c->x);
        pop(c, old);
        int32_t content = js_key_content(&c->x, names, lens, n, q->re, q->n_re, want, q->n);
        alts[n_alt++] = member_rule(c, content, val, "additional");
    }
    r = n_alt ? gr_alt(b, alts, n_alt) : -2;
out:
    free(want);
    free(in);
    free(alts);
    return r;
}

static int32_t sch_object(js_ctx *c, const json_t *s) {
    gr_builder *b = c->x.b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, "'required' must be an array");
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    js_prop *p = calloc(np + nr + 1, sizeof *p);
    const char **names = calloc(np + nr + 1, sizeof *names);
    size_t *lens = calloc(np + nr + 1, sizeof *lens);
    int32_t *kv = calloc(np + nr + 1, sizeof *kv);
    js_pats pats = {0};
    int32_t result = -1;
    if (!p || !names || !lens || !kv) {
        oom(c);
        goto out;
    }
    size_t n = 0;
    const char *k;
    json_t *v;
    if (props) json_object_foreach(props, k, v) p[n++] = (js_prop){k, v, false, false};
    for (size_t i = 0; i < nr; i++) {
        json_t *e = json_array_get(req, i);
        if (!json_is_string(e)) {
            fail(c, "'required' must list strings");
            goto out;
        }
        size_t j = 0;
        while (j < n && strcmp(p[j].name, json_string_value(e)) != 0) j++;
        if (j == n) /* required but not listed: governed by additionalProperties (or patterns) */
            p[n++] = (js_prop){json_string_value(e), add ? add : json_true(), false, true};
        p[j].required = true;
    }
    size_t n_names = 0;
    for (size_t i = 0; i < n; i++) {
        names[n_names] = p[i].name;
        lens[n_names++] = strlen(p[i].name);
    }
    json_t *pp = json_object_get(s, "patternProperties");
    if (pp && !json_is_object(pp)) {
        fail(c, "'patternProperties' must be an object");
        goto out;
    }
    if (pp && json_object_size(pp) && pats_read(c, pp, p, n, names, lens, &pats) < 0) goto out;
    /* the members: "name" ws ":" ws value; NULL (-2) for a forbidden optional property */
    for (size_t i = 0; i < n; i++) {
        if (json_is_false(p[i].schema)) {
            if (p[i].required) {
                size_t old = push(c, "properties");
                push(c, p[i].name);
                fail(c, "unsatisfiable schema: required property '%.100s' is forbidden", p[i].name);
                pop(c, old);
                goto out;
            }
            kv[i] = -2;
            continue;
        }
        char *ks = NULL;
        size_t kl = 0, kc = 0;
        if (js_spell_string(p[i].name, strlen(p[i].name), &ks, &kl, &kc) < 0) {
            free(ks);
            oom(c);
            goto out;
        }
        size_t old = push(c, "properties");
        push(c, p[i].name);
        int32_t val = sch(c, p[i].schema);
        pop(c, old);
        kv[i] = gr_seq(b, (int32_t[]){gr_literal(b, ks, kl), js_ws(&c->x), js_lit(&c->x, ":"), js_ws(&c->x), val}, 5);
        free(ks);
    }
    /* additional members: a name other than the listed ones */
    int32_t extra = -2;
    if (pats.n) {
        extra = pattern_members(c, &pats, names, lens, n_names, add);
        if (extra == -1) goto out;
        if (extra >= 0) {
            /* its own rule, as below */
            int32_t er = gr_rule_fresh(b, "additional");
            if (gr_rule_define(b, er, extra) < 0) goto out;
            extra = gr_ref(b, er);
        }
    } else if (!json_is_false(add)) {
        size_t old = push(c, "additionalProperties");
        int32_t val = add ? sch(c, add) : js_value(&c->x);
        pop(c, old);
        int32_t key = gr_seq(
            b, (int32_t[]){js_lit(&c->x, "\""), js_key_not_in(&c->x, names, lens, n_names), js_lit(&c->x, "\"")}, 3);
        /* its own rule: the object's rule copies it into every place a member may
         * follow, and the name's complement is large */
        int32_t er = gr_rule_fresh(b, "additional");
        if (gr_rule_define(b, er, gr_seq(b, (int32_t[]){key, js_ws(&c->x), js_lit(&c->x, ":"), js_ws(&c->x), val}, 5)) <
            0)
            goto out;
        extra = gr_ref(b, er);
    }
    /* A(i): members i.. with nothing before them; B(i): the same after a member (each
     * with a leading separator). B is shared by A and by the B before it, so every
     * JS_TAIL_CHUNK members it becomes a rule (keeps the tree linear in size). */
    int32_t sep = js_sep(&c->x);
    int32_t B = extra == -2 ? gr_empty(b) : gr_repeat(b, gr_seq2(b, sep, extra), 0, GR_INF);
    int32_t A = extra == -2 ? gr_empty(b)
                            : gr_repeat(b, gr_seq2(b, extra, gr_repeat(b, gr_seq2(b, sep, extra), 0, GR_INF)), 0, 1);
    for (size_t i = n; i-- > 0;) {
        if ((n - i) % JS_TAIL_CHUNK == 0) {
            int32_t tr = gr_rule_fresh(b, "members");
            if (gr_rule_define(b, tr, B) < 0) goto out;
            B = gr_ref(b, tr);
        }
        if (kv[i] == -2) continue;
        int32_t first = gr_seq2(b, kv[i], B);
        if (p[i].required) {
            B = gr_seq(b, (int32_t[]){sep, kv[i], B}, 3);
            A = first;
        } else {
            B = gr_seq2(b, gr_repeat(b, gr_seq2(b, sep, kv[i]), 0, 1), B);
            A = gr_alt2(b, first, A);
        }
    }
    int32_t e = gr_seq(b, (int32_t[]){js_lit(&c->x, "{"), js_ws(&c->x), A, js_ws(&c->x), js_lit(&c->x, "}")}, 5);
    int32_t rule = gr_rule_fresh(b, "object");
    if (gr_rule_define(b, rule, e) >= 0) result = gr_ref(b, rule);
out:
    free(p);
    free(names);
    free(lens);
    free(kv);
    pats_free(&pats);
    return result;
}

/* Whether s has a keyword we do not support: then an error naming it and its pointer. */
static bool refuse_unsupported(js_ctx *c, const json_t *s) {
    const char *uk = unsupported_keyword(s);
    if (!uk) return false;
    size_t old = push(c, uk);
    fail(c, "unsupported keyword '%s'", uk);
    pop(c, old);
    return true;
}

/* A plain schema (no $ref / allOf; anyOf / oneOf handled by the caller). */
static int32_t sch_typed(js_ctx *c, json_t *s) {
    gr_builder *b = c->x.b;
    if (refuse_unsupported(c, s)) return -1;
    int t = types_of(c, s);
    if (t < 0) return -1;
    if (t == 0) return fail(c, "unsatisfiable schema: no type allowed");
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        if (en && !json_is_array(en)) return fail(c, "'enum' must be an array");
        json_t *list = en;
        if (cn) {
            list = keep(c, json_array());
            if (!list) return -1;
            if (!en) json_array_append(list, cn);
            else {
                size_t i;
                json_t *e;
                json_array_foreach(en, i, e) if (json_equal(e, cn)) json_array_append(list, e);
            }
        }
        if (json_array_size(list) == 0) return fail(c, "unsatisfiable schema: an empty enum");
        return sch_enum(c, s, list);
    }
    static const char *const num_kw[] = {"minimum",          "maximum",    "exclusiveMinimum",
                                         "exclusiveMaximum", "multipleOf", NULL};
    static const char *const str_kw[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const arr_kw[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", NULL};
    static const char *const obj_kw[] = {"properties", "required", "additionalProperties", "patternProperties", NULL};
    bool cn_num = has_any(s, num_kw), cn_str = has_any(s, str_kw), cn_arr = has_any(s, arr_kw),
         cn_obj = has_any(s, obj_kw);
    if (t == T_ALL && !cn_num && !cn_str && !cn_arr && !cn_obj) return js_value(&c->x);
    int32_t alts[7];
    size_t n = 0;
    if (t & T_NULL) alts[n++] = js_null(&c->x);
    if (t & T_BOOL) alts[n++] = js_boolean(&c->x);
    if (t & (T_INT | T_NUM)) alts[n++] = sch_number(c, s, !(t & T_NUM));
    if (t & T_STR) alts[n++] = cn_str ? sch_string(c, s) : js_string(&c->x);
    if (t & T_ARR) alts[n++] = cn_arr ? sch_array(c, s) : js_any_array(&c->x);
    if (t & T_OBJ) alts[n++] = cn_obj ? sch_object(c, s) : js_any_object(&c->x);
    return gr_alt(b, alts, n);
}

/* ---- oneOf ----
 * oneOf is anyOf plus "not two at once". A grammar has no intersection or complement,
 * so oneOf compiles as the alternation of its branches only where no document can match
 * two of them: branches proven disjoint (types that do not meet, enum values the other
 * branch rejects, a property one requires that the other forbids or constrains to a
 * disjoint set), or branches that differ only in "required", where each branch is made
 * exclusive by forbidding the names only the others require. Anything else is refused. */

/* The schema s gives property name (NULL: unconstrained). */
static json_t *prop_schema(const json_t *s, const char *name) {
    json_t *p = json_object_get(s, "properties");
    json_t *v = json_is_object(p) ? json_object_get(p, name) : NULL;
    return v ? v : json_object_get(s, "additionalProperties");
}

static bool disjoint(js_ctx *c, json_t *a, json_t *b, int depth);

static bool disjoint_branches(js_ctx *c, json_t *list, json_t *other, int depth) {
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_t *m = merge(c, &e, 1, 0);
        if (!m || !disjoint(c, m, other, depth + 1)) return false;
    }
    return true;
}

static bool enum_outside(js_ctx *c, const json_t *a, const json_t *b) {
    const json_t *en = json_object_get(a, "enum");
    if (!json_is_array(en)) return false;
    size_t i;
    json_t *v;
    json_array_foreach(en, i, v) if (check(c, b, v, 0) != 0) return false;
    return true;
}

static bool disjoint(js_ctx *c, json_t *a, json_t *b, int depth) {
    if (json_is_false(a) || json_is_false(b)) return true;
    if (!json_is_object(a) || !json_is_object(b) || depth > 16) return false;
    for (int k = 0; k < 2; k++) {
        json_t *x = k ? b : a, *y = k ? a : b;
        json_t *l = json_object_get(x, "anyOf");
        if (!l) l = json_object_get(x, "oneOf");
        if (json_is_array(l)) return disjoint_branches(c, l, y, depth);
    }
    int ta = types_of(c, a), tb = types_of(c, b);
    if (ta < 0 || tb < 0) return false;
    if (!(ta & tb)) return true;
    if (enum_outside(c, a, b) || enum_outside(c, b, a)) return true;
    if ((ta & tb) != T_OBJ) return false;
    for (int k = 0; k < 2; k++) {
        json_t *x = k ? b : a, *y = k ? a : b;
        const json_t *r = json_object_get(x, "required");
        size_t i;
        json_t *e;
        if (!json_is_array(r)) continue;
        json_array_foreach(r, i, e) {
            if (!json_is_string(e)) continue;
            const char *name = json_string_value(e);
            json_t *py = prop_schema(y, name);
            if (json_is_false(py)) return true;
            if (!py || !required_has(y, name)) continue;
            json_t *px = prop_schema(x, name);
            if (!px) continue;
            json_t *mx = merge(c, &px, 1, 0), *my = merge(c, &py, 1, 0);
            if (mx && my && disjoint(c, mx, my, depth + 1)) return true;
        }
    }
    return false;
}

/* Branches equal but for "required": branch i also forbids every name that only another
 * branch j requires (one of them, when j requires several). NULL when not of that form. */
static json_t *exclusive_required(js_ctx *c, json_t *const *m, size_t n) {
    static const char *const req[] = {"required", NULL};
    json_t *base = without(c, m[0], req);
    if (!base) return NULL;
    for (size_t i = 1; i < n; i++) {
        json_t *o = without(c, m[i], req);
        if (!o || !json_equal(o, base)) return NULL;
    }
    json_t *out = keep(c, json_array());
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        js_parts p = {0};
        bool implied = false;
        if (parts_add(c, &p, m[i]) < 0) return NULL;
        for (size_t j = 0; j < n && !implied; j++) {
            if (j == i) continue;
            json_t *alts = keep(c, json_array());
            const json_t *rj = json_object_get(m[j], "required");
            size_t q;
            json_t *e;
            if (!alts) break;
            if (json_is_array(rj)) json_array_foreach(rj, q, e) {
                    if (!json_is_string(e) || required_has(m[i], json_string_value(e))) continue;
                    json_array_append_new(alts, json_pack("{s:{s:b}}", "properties", json_string_value(e), 0));
                }
            if (json_array_size(alts) == 0) {
                implied = true; /* every document of branch i matches branch j too */
                break;
            }
            parts_add(c, &p,
                      json_array_size(alts) == 1 ? json_array_get(alts, 0)
                                                 : keep(c, json_pack("{s:O}", "anyOf", alts)));
        }
        if (!implied) {
            json_t *r = merge(c, p.v, p.n, 0);
            if (r && !json_is_false(r)) json_array_append(out, r);
        }
        free(p.v);
        if (gr_builder_error(c->x.b)->status) return NULL;
    }
    return out;
}

/* anyOf / oneOf: the branches as alternatives (oneOf only when exclusive, above). */
static int32_t sch_any(js_ctx *c, json_t *list, const char *kw) {
    gr_builder *b = c->x.b;
    if (!json_is_array(list) || json_array_size(list) == 0) return fail(c, "'%s' must be a non-empty array", kw);
    size_t old = push(c, kw);
    if (kw[0] == 'o' && json_array_size(list) > 1) {
        size_t n = json_array_size(list);
        json_t **m = calloc(n, sizeof *m);
        if (!m) {
            oom(c);
            return -1;
        }
        bool ok = true;
        for (size_t i = 0; i < n && ok; i++) {
            json_t *e = json_array_get(list, i);
            m[i] = merge(c, &e, 1, 0);
            ok = m[i] != NULL;
        }
        for (size_t i = 0; ok && i < n; i++)
            for (size_t j = i + 1; ok && j < n; j++) ok = disjoint(c, m[i], m[j], 0);
        json_t *excl = NULL;
        if (!ok && !gr_builder_error(b)->status) {
            bool objects = true;
            for (size_t i = 0; i < n; i++)
                objects &= m[i] && json_is_object(m[i]) && !json_object_get(m[i], "anyOf") &&
                           !json_object_get(m[i], "oneOf");
            if (objects) excl = exclusive_required(c, m, n);
        }
        free(m);
        if (gr_builder_error(b)->status) {
            pop(c, old);
            return -1;
        }
        if (!ok && !excl) {
            fail(c, "oneOf whose branches may overlap is not supported (a document matching two must be refused)");
            pop(c, old);
            return -1;
        }
        if (excl) {
            if (json_array_size(excl) == 0) {
                pop(c, old);
                return fail(c, "unsatisfiable schema: no oneOf branch can hold alone");
            }
            list = excl;
        }
    }
    int32_t r = gr_nothing(b);
    size_t i, n_ok = 0;
    json_t *e;
    json_array_foreach(list, i, e) {
        if (json_is_false(e)) continue;
        size_t o2 = push_i(c, i);
        r = gr_alt2(b, r, sch(c, e));
        pop(c, o2);
        n_ok++;
    }
    pop(c, old);
    if (n_ok == 0) return fail(c, "unsatisfiable schema: every '%s' branch is false", kw);
    return r;
}

static int32_t sch(js_ctx *c, json_t *s) {
    gr_builder *b = c->x.b;
    if (gr_builder_error(b)->status) return -1;
    if (json_is_true(s)) return js_value(&c->x);
    if (json_is_false(s)) return gr_nothing(b);
    if (!json_is_object(s)) return fail(c, "a schema must be an object or a boolean");
    if (refuse_unsupported(c, s)) return -1;
    if (++c->depth > JS_MAX_DEPTH) {
        c->depth--;
        return fail(c, "schema nested deeper than %d levels", JS_MAX_DEPTH);
    }
    int32_t r;
    json_t *ref = json_object_get(s, "$ref");
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    static const char *const combinators[] = {"$ref", "anyOf", "oneOf", NULL};
    bool siblings = has_assertions(s, combinators);
    if (json_object_get(s, "allOf") || (ref && (siblings || any || one)) || ((any || one) && siblings) ||
        (any && one) || has_dependencies(s)) {
        json_t *m = merge(c, &s, 1, 0);
        if (!m) r = -1;
        else if (json_is_false(m)) r = fail(c, "unsatisfiable schema: allOf / anyOf with no satisfiable combination");
        else if (json_is_object(m) && json_object_get(m, "anyOf")) r = sch_any(c, json_object_get(m, "anyOf"), "anyOf");
        else if (json_is_object(m) && json_object_get(m, "oneOf")) r = sch_any(c, json_object_get(m, "oneOf"), "oneOf");
        else r = sch(c, m);
    } else if (ref) {
        if (!json_is_string(ref)) {
            r = fail(c, "$ref must be a string");
        } else {
            const json_t *t = resolve(c, json_string_value(ref));
            int32_t rule = t ? def_rule(c, t, json_string_value(ref)) : -1;
            r = gr_ref(b, rule);
        }
    } else if (any || one) {
        r = sch_any(c, any ? any : one, any ? "anyOf" : "oneOf");
    } else r = sch_typed(c, s);
    c->depth--;
    return r;
}

/* ---- entry points ---- */

static void ctx_free(js_ctx *c) {
    for (size_t i = 0; i < c->n_defs; i++) free(c->defs[i].ptr);
    free(c->defs);
    free(c->base);
    json_decref(c->owned);
    json_decref(c->doc);
    js_lex_free(&c->x);
}

static void ctx_init(js_ctx *c, gr_builder *b, bool flex) {
    *c = (js_ctx){0};
    c->x.b = b;
    c->x.flex = flex;
    c->x.r_string = c->x.r_number = c->x.r_integer = c->x.r_bool = c->x.r_null = c->x.r_value = c->x.r_object =
        c->x.r_array = c->x.r_krest = c->x.r_kna = c->x.r_kesc = c->x.r_ws = -1;
}

/* root: ws value ws with flexible whitespace (JSON allows it around the document) */
static int32_t root_rule(js_ctx *c, int32_t value) {
    gr_builder *b = c->x.b;
    int32_t root = gr_rule(b, "root");
    int32_t e = gr_seq(b, (int32_t[]){js_ws(&c->x), value, js_ws(&c->x)}, 3);
    if (gr_rule_define(b, root, e) < 0) return -1;
    return root;
}

/* One schema into c (made by ctx_init): its value rule, or -1 with the error in the
 * builder. The path of messages starts with c->x.path as the caller set it. */
static int32_t one_schema(js_ctx *c, const char *schema, size_t n) {
    gr_builder *b = c->x.b;
    if (!schema) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "no JSON schema given");
        return -1;
    }
    json_error_t je;
    c->doc = json_loadb(schema, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!c->doc && strstr(je.text, "too big")) /* integers beyond 64 bits: as reals */
        c->doc = json_loadb(schema, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    if (!c->doc) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "the JSON schema is not valid JSON: %s (line %d, column %d)", je.text,
                        je.line, je.column);
        return -1;
    }
    c->owned = json_array();
    if (!c->owned) {
        oom(c);
        return -1;
    }
    if (!json_is_object(c->doc) && !json_is_boolean(c->doc)) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "a JSON schema must be an object or a boolean");
        return -1;
    }
    if (json_is_false(c->doc)) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "unsatisfiable schema: false accepts no document");
        return -1;
    }
    const json_t *id = json_is_object(c->doc) ? json_object_get(c->doc, "$id") : NULL;
    if (!id && json_is_object(c->doc)) id = json_object_get(c->doc, "id");
    if (json_is_string(id)) {
        const char *s = json_string_value(id);
        const char *h = strchr(s, '#');
        c->base = strndup(s, h ? (size_t)(h - s) : strlen(s));
        if (!c->base) oom(c);
    }
    char prefix[JS_MAX_PATH];
    snprintf(prefix, sizeof prefix, "%s", c->x.path);
    int32_t top = def_rule(c, c->doc, "");
    /* every referenced definition, each at depth 0 with its pointer as the path */
    for (size_t i = 0; i < c->n_defs && !gr_builder_error(b)->status; i++) {
        snprintf(c->x.path, sizeof c->x.path, "%s%s", prefix,
                 c->defs[i].ptr[0] == '#' ? c->defs[i].ptr + 1 : c->defs[i].ptr);
        c->x.n_path = strlen(c->x.path);
        c->depth = 0;
        int32_t e = sch(c, (json_t *)c->defs[i].target);
        gr_rule_define(b, c->defs[i].rule, e);
    }
    return gr_builder_error(b)->status ? -1 : top;
}

int32_t gr_json_schema(gr_builder *b, const char *schema, size_t n, bool flexible_ws) {
    if (!b) return -1;
    if (gr_builder_error(b)->status) return -1;
    js_ctx c;
    ctx_init(&c, b, flexible_ws);
    int32_t top = one_schema(&c, schema, n);
    int32_t root = top < 0 ? -1 : root_rule(&c, gr_ref(b, top));
    ctx_free(&c);
    return gr_builder_error(b)->status ? -1 : root;
}

int gr_json_schema_values(gr_builder *b, const char *const *schemas, const size_t *lens, const char *const *paths,
                          size_t n, bool flexible_ws, int32_t *values) {
    if (!b || gr_builder_error(b)->status) return -1;
    js_ctx c;
    ctx_init(&c, b, flexible_ws);
    js_lex lex = c.x; /* the shared rules, passed from one schema to the next */
    for (size_t i = 0; i < n; i++) {
        ctx_init(&c, b, flexible_ws);
        c.x = lex;
        snprintf(c.x.path, sizeof c.x.path, "%s", paths && paths[i] ? paths[i] : "");
        c.x.n_path = strlen(c.x.path);
        int32_t top = one_schema(&c, schemas[i], lens[i]);
        values[i] = top < 0 ? -1 : gr_ref(b, top);
        lex = c.x;
        c.x.strc = NULL; /* kept by lex */
        c.x.n_strc = c.x.cap_strc = 0;
        ctx_free(&c);
        if (top < 0) break;
    }
    js_lex_free(&lex);
    return gr_builder_error(b)->status ? -1 : 0;
}

int32_t gr_json_object(gr_builder *b, bool flexible_ws) {
    if (!b || gr_builder_error(b)->status) return -1;
    js_ctx c;
    ctx_init(&c, b, flexible_ws);
    int32_t root = root_rule(&c, js_any_object(&c.x));
    ctx_free(&c);
    return gr_builder_error(b)->status ? -1 : root;
}
