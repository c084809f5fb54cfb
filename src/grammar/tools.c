/* tools.c — the tool-call front end: the grammar of a reply that may call the given
 * functions, in a model's call format (src/text/toolcall.h's table, the one the reply
 * reader uses, so that whatever this grammar lets a model write, the reader reads).
 *
 * A call is `open ws {"name": "f", ARGS_KEY: ARGS(f)} ws close`, ARGS(f) the function's
 * parameters schema (the JSON Schema front end, all tools sharing its lexical rules);
 * with an array format, `open ws [call object, ...] ws close`. The reply is, by
 * tool_choice:
 *   auto      FREE | FREE CALLS ws (anywhere triggers) | ws CALLS ws (at-start triggers)
 *   required  ws CALLS ws, any trigger
 *   named     the same with that one function
 * where FREE (inline in the root) is any text that holds no anywhere-trigger and does not begin with an
 * at-start one (an intersection with a complement: compile.c's product DFA), and CALLS is
 * one call, or with parallel calls one or more. So free text costs nothing but the
 * trigger's absence, and from the trigger on the call is exactly the schema's: the
 * lazily triggered constraint of llama.cpp, but exact, in one grammar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/grammar_impl.h"
#include "text/toolcall.h"

#define GR_TOOLS_MAX 512

static int32_t ws(gr_builder *b) {
    uint8_t set[32] = {0};
    const char *s = " \t\n\r";
    for (; *s; s++) set[(uint8_t)*s >> 3] |= (uint8_t)(1u << (*s & 7));
    return gr_repeat(b, gr_byteset(b, set), 0, CN_GRAMMAR_MAX_WS);
}

static int32_t lit(gr_builder *b, const char *s) { return gr_literal(b, s, strlen(s)); }

/* A JSON string literal of s (its bytes, with JSON's escapes). */
static int32_t json_string_lit(gr_builder *b, const char *s) {
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!t) {
        gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the tool grammar");
        return -1;
    }
    int32_t r = lit(b, t);
    free(t);
    return r;
}

/* Any text (Unicode scalar values) holding none of the anywhere-triggers and not
 * starting, after whitespace, with an at-start one. */
static int32_t free_text(gr_builder *b, const cn_tool_spec *sp) {
    const uint32_t all[] = {0, 0x10FFFF};
    int32_t any = gr_repeat(b, gr_codepoints(b, all, 1, false), 0, GR_INF);
    int32_t bad[CN_TOOL_MAX_TRIGGERS];
    size_t n_bad = 0;
    for (int t = 0; t < sp->n_trig; t++) {
        const cn_tool_trigger *tr = &sp->trig[t];
        if (tr->at_start) {
            const char *o = tr->open[0] ? tr->open : "{";
            bad[n_bad++] = gr_seq(b, (int32_t[]){ws(b), lit(b, o), any}, 3);
        } else {
            bad[n_bad++] = gr_seq(b, (int32_t[]){any, lit(b, tr->open), any}, 3);
        }
    }
    return gr_and(b, any, gr_not(b, gr_alt(b, bad, n_bad)));
}

static int32_t calls_for(gr_builder *b, const cn_tool_trigger *tr, int32_t obj, bool parallel) {
    int32_t body;
    if (tr->array) {
        int32_t more = gr_repeat(b, gr_seq(b, (int32_t[]){ws(b), lit(b, ","), ws(b), obj}, 4), 0,
                                 parallel ? GR_INF : 0);
        body = gr_seq(b, (int32_t[]){lit(b, "["), ws(b), obj, more, ws(b), lit(b, "]")}, 6);
    } else {
        body = obj;
    }
    int32_t call = gr_seq(
        b, (int32_t[]){lit(b, tr->open), ws(b), body, tr->close[0] ? ws(b) : gr_empty(b), lit(b, tr->close)}, 5);
    if (!parallel || tr->array) return call;
    return gr_seq2(b, call, gr_repeat(b, gr_seq2(b, ws(b), call), 0, GR_INF));
}

int32_t gr_tools(gr_builder *b, int format, const char *tools_json, size_t n, int choice, const char *name,
                 bool parallel) {
    const cn_tool_spec *sp = cn_tool_spec_of(format);
    if (!sp) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "tools: no tool-call format %d", format);
        return -1;
    }
    json_error_t je;
    json_t *tools = tools_json ? json_loadb(tools_json, n, 0, &je) : NULL;
    const char **schemas = NULL, **names = NULL;
    char **owned = NULL, **paths = NULL;
    size_t *lens = NULL;
    int32_t *values = NULL, root = -1;
    size_t nt = json_is_array(tools) ? json_array_size(tools) : 0;
    if (!json_is_array(tools) || nt == 0) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "tools must be a non-empty array%s%s", tools ? "" : ": ",
                        tools || !tools_json ? "" : je.text);
        goto out;
    }
    if (nt > GR_TOOLS_MAX) {
        gr_builder_fail(b, CN_STATUS_LIMIT, "more than %d tools", GR_TOOLS_MAX);
        goto out;
    }
    schemas = calloc(nt, sizeof *schemas);
    names = calloc(nt, sizeof *names);
    owned = calloc(nt, sizeof *owned);
    paths = calloc(nt, sizeof *paths);
    lens = calloc(nt, sizeof *lens);
    values = calloc(nt, sizeof *values);
    if (!schemas || !names || !owned || !paths || !lens || !values) {
        gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the tool grammar");
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < nt; i++) {
        json_t *t = json_array_get(tools, i), *fn = json_object_get(t, "function");
        json_t *type = json_object_get(t, "type");
        if (!json_is_object(t) ||
            (type && (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0))) {
            gr_builder_fail(b, CN_STATUS_INVALID_ARG,
                            "tools[%zu]: only {\"type\": \"function\", \"function\": {...}} tools", i);
            goto out;
        }
        json_t *nm = json_object_get(fn, "name"), *par = json_object_get(fn, "parameters");
        if (!json_is_object(fn) || !json_is_string(nm) || json_string_length(nm) == 0 || json_string_length(nm) > 256) {
            gr_builder_fail(b, CN_STATUS_INVALID_ARG,
                            "tools[%zu].function.name: a function needs a name (1 to 256 bytes)", i);
            goto out;
        }
        for (size_t j = 0; j < i; j++)
            if (names[j] && strcmp(names[j], json_string_value(nm)) == 0) {
                gr_builder_fail(b, CN_STATUS_INVALID_ARG, "tools[%zu].function.name: '%s' is listed twice", i,
                                names[j]);
                goto out;
            }
        if (par && !json_is_object(par) && !json_is_boolean(par)) {
            gr_builder_fail(b, CN_STATUS_INVALID_ARG, "tools[%zu].function.parameters: a JSON Schema object", i);
            goto out;
        }
        if (choice == 2 && strcmp(json_string_value(nm), name ? name : "") != 0) {
            names[i] = json_string_value(nm); /* for the duplicate check */
            continue;
        }
        names[i] = json_string_value(nm);
        owned[k] = par ? json_dumps(par, JSON_ENCODE_ANY | JSON_COMPACT) : strdup("{\"type\": \"object\"}");
        paths[k] = malloc(48);
        if (!owned[k] || !paths[k]) {
            gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the tool grammar");
            goto out;
        }
        snprintf(paths[k], 48, "/tools/%zu/function/parameters", i);
        schemas[k] = owned[k];
        lens[k] = strlen(owned[k]);
        values[k] = (int32_t)i; /* the tool's index until the schemas are built */
        k++;
    }
    if (choice == 2 && k == 0) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "tool_choice names '%.100s', which is not among the tools",
                        name ? name : "");
        goto out;
    }
    int32_t *which = malloc((k + 1) * sizeof *which);
    if (!which) {
        gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the tool grammar");
        goto out;
    }
    memcpy(which, values, k * sizeof *which);
    if (gr_json_schema_values(b, schemas, lens, (const char *const *)paths, k, true, values) < 0) {
        free(which);
        goto out;
    }
    /* {"name": "f", ARGS_KEY: ARGS(f)} for each function */
    int32_t *alts = malloc((k + 1) * sizeof *alts);
    if (!alts) {
        free(which);
        gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the tool grammar");
        goto out;
    }
    char key[32];
    snprintf(key, sizeof key, "\"%s\"", sp->args_key);
    for (size_t i = 0; i < k; i++)
        alts[i] = gr_seq(b,
                         (int32_t[]){json_string_lit(b, names[which[i]]), ws(b), lit(b, ","), ws(b), lit(b, key), ws(b),
                                     lit(b, ":"), ws(b), values[i]},
                         9);
    int32_t obj_rule = gr_rule_fresh(b, "call");
    gr_rule_define(b, obj_rule,
                   gr_seq(b,
                          (int32_t[]){lit(b, "{"), ws(b), lit(b, "\"name\""), ws(b), lit(b, ":"), ws(b),
                                      gr_alt(b, alts, k), ws(b), lit(b, "}")},
                          9));
    free(alts);
    free(which);
    int32_t obj = gr_ref(b, obj_rule);
    int32_t reply[CN_TOOL_MAX_TRIGGERS + 2];
    size_t nr = 0;
    int32_t fr = -1;
    if (choice == 0) {
        /* inline, not a rule of its own: the root's states never pass tokens to a parent,
         * while a called rule that may end anywhere would send its cache entries' rests
         * to be walked from its caller at every mask */
        fr = free_text(b, sp);
        reply[nr++] = fr;
    }
    for (int t = 0; t < sp->n_trig; t++) {
        const cn_tool_trigger *tr = &sp->trig[t];
        int32_t calls = calls_for(b, tr, obj, parallel);
        int32_t before = choice == 0 && !tr->at_start ? fr : ws(b);
        reply[nr++] = gr_seq(b, (int32_t[]){before, calls, ws(b)}, 3);
    }
    root = gr_rule(b, "root");
    if (gr_rule_define(b, root, gr_alt(b, reply, nr)) < 0) root = -1;
out:
    if (owned)
        for (size_t i = 0; i < nt; i++) free(owned[i]);
    if (paths)
        for (size_t i = 0; i < nt; i++) free(paths[i]);
    free(owned);
    free(paths);
    free(schemas);
    free(names);
    free(lens);
    free(values);
    json_decref(tools);
    return gr_builder_error(b)->status ? -1 : root;
}
