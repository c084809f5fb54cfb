/* openai.c — OpenAI request bodies to engine requests, and the pieces of the responses.
 *
 * Every field the API defines either maps onto cinder's parameters, is accepted at its
 * neutral value (tools: [], tool_choice "none", ...), or gets a 400 naming the field:
 * nothing a client sends is silently ignored ("user" is the one field OpenAI itself says
 * is only for abuse tracking). Ranges are the engine's (cn_gen_validate), so a 400 carries
 * the same message `cinder run` prints. Structured output is compiled here, last (it is
 * the one costly check), through the server's grammar cache. Pure translation: no
 * sockets, no threads. */
#include "serve/openai.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/json_mem.h"
#include "serve/validate.h"

/* Drops a UTF-8 sequence that a cut to the buffer's size left incomplete at the end of s. */
static void utf8_trim_cut(char *s) {
    size_t n = strlen(s), i = n;
    while (i > 0 && n - i < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--; /* continuation bytes */
    if (i == 0 || (unsigned char)s[i - 1] < 0xC0) return;                       /* ends in ASCII or a stray byte */
    const unsigned char c = (unsigned char)s[i - 1];
    const size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (n - (i - 1) < len) s[i - 1] = 0;
}

bool oai_fail(oai_error *e, int http_status, const char *type, const char *param, const char *code, const char *fmt,
              ...) {
    e->http_status = http_status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    utf8_trim_cut(e->param);
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    utf8_trim_cut(e->message);
    return false;
}

/* s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD, into o (room for 3n + 1
 * bytes), NUL-terminated; returns the length. */
static size_t utf8_clean_into(const char *s, size_t n, char *o) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
        for (size_t j = 1; ok && j < len; j++) {
            const unsigned char d = (unsigned char)s[i + j];
            ok = (d & 0xC0) == 0x80;
            cp = cp << 6 | (d & 0x3Fu);
        }
        if (ok)
            ok = !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) &&
                 !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) && !(cp >= 0xD800 && cp <= 0xDFFF);
        if (ok) {
            memcpy(o + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += 1;
        }
    }
    o[k] = 0;
    return k;
}

static char *utf8_clean(const char *s, size_t n, size_t *n_out) {
    char *o = malloc(3 * n + 1);
    if (o) *n_out = utf8_clean_into(s, n, o);
    return o;
}

json_t *oai_error_json(const oai_error *e) {
    size_t n = 0;
    char *msg = utf8_clean(e->message, strlen(e->message), &n);
    char param[3 * sizeof e->param + 1]; /* made valid UTF-8 too: json_pack refuses anything else */
    utf8_clean_into(e->param, strlen(e->param), param);
    json_t *err = json_pack("{s:s?,s:s,s:s?,s:s?}", "message", msg, "type", e->type ? e->type : "invalid_request_error",
                            "param", param[0] ? param : NULL, "code", e->code);
    free(msg);
    return json_pack("{s:o}", "error", err ? err : json_object());
}

/* ---- dialects: OpenAI's own, and the spelling of a field in another's (openai.h) ---- */

const oai_dialect OAI_CHAT_API = {OAI_CHAT, "/v1/chat/completions", NULL, 0};
const oai_dialect OAI_COMPLETIONS_API = {OAI_COMPLETION, "/v1/completions", NULL, 0};

static const char *lookup(const oai_dialect *d, const char *openai) {
    for (size_t i = 0; i < d->n_names; i++)
        if (!strcmp(d->names[i].openai, openai)) return d->names[i].client;
    return NULL;
}

const char *oai_field(const oai_dialect *d, const char *openai) {
    const char *c = lookup(d, openai);
    return c ? c : openai;
}

#define OAI_PATH_MAX_INDICES 4

/* The table's spelling of openai[0..cut) (its indices written []), with those indices
 * put back, then openai[cut..), into out; false when the table lacks it. */
static bool path_prefix(const oai_dialect *d, const char *openai, size_t cut, char *out, size_t n) {
    char key[128];
    const char *idx[OAI_PATH_MAX_INDICES];
    int n_idx[OAI_PATH_MAX_INDICES];
    size_t k = 0, ni = 0;
    for (size_t i = 0; i < cut && k + 1 < sizeof key; i++) {
        key[k++] = openai[i];
        if (openai[i] != '[') continue;
        size_t j = i + 1;
        while (j < cut && isdigit((unsigned char)openai[j])) j++;
        if (ni == OAI_PATH_MAX_INDICES) return false;
        idx[ni] = openai + i + 1;
        n_idx[ni++] = (int)(j - i - 1);
        i = j - 1;
    }
    key[k] = 0;
    const char *client = lookup(d, key);
    if (!client) return false;
    size_t w = 0, used = 0;
    for (const char *c = client; *c && w + 1 < n; c++) {
        if (c[0] == '[' && c[1] == ']' && used < ni) {
            w += (size_t)snprintf(out + w, n - w, "[%.*s", n_idx[used], idx[used]);
            used++;
        } else {
            out[w++] = *c;
        }
        if (w >= n) w = n - 1;
    }
    out[w] = 0;
    snprintf(out + w, n - w, "%s", openai + cut);
    return true;
}

const char *oai_path(const oai_dialect *d, const char *openai, char *out, size_t n) {
    for (size_t cut = strlen(openai); cut > 0; cut--) {
        if ((openai[cut] == 0 || openai[cut] == '.') && path_prefix(d, openai, cut, out, n)) return out;
    }
    snprintf(out, n, "%s", openai);
    return out;
}

/* The tool path at s, written as the library writes a JSON pointer into the tools
 * ("/tools/N/function/FIELD"), as d spells it (a pointer still) into out; its length in
 * s, or 0 when s holds no such path. */
static size_t tool_pointer(const oai_dialect *d, const char *s, char *out, size_t n) {
    if (strncmp(s, "/tools/", 7) || !isdigit((unsigned char)s[7])) return 0;
    size_t i = 7;
    while (isdigit((unsigned char)s[i])) i++;
    if (strncmp(s + i, "/function/", 10)) return 0;
    const size_t field = i + 10;
    size_t end = field;
    while (isalnum((unsigned char)s[end]) || s[end] == '_') end++;
    char dotted[96], client[96];
    snprintf(dotted, sizeof dotted, "tools[%.*s].function.%.*s", (int)(i - 7), s + 7, (int)(end - field), s + field);
    oai_path(d, dotted, client, sizeof client);
    size_t w = 0;
    out[w++] = '/';
    for (const char *c = client; *c && w + 1 < n; c++) {
        if (*c == '[' || *c == '.') out[w++] = '/';
        else if (*c != ']') out[w++] = *c;
    }
    out[w] = 0;
    return end;
}

/* The library speaks OpenAI's shape: it names the field at fault by its path there, in
 * the param and in the message (quoted, 'tools[0].function.name', or leading its range,
 * "repetition_penalty = 0 is out of range"), and a tool's schema by a JSON pointer
 * (/tools/0/function/parameters). Those are spelled here in d's names: the one place
 * where text made elsewhere is respelled, since the library cannot know the client's
 * API. */
bool oai_lib_fail(const oai_dialect *d, oai_error *e, int http_status, const char *code, const char *param,
                  const char *msg) {
    const char *lib = param && *param ? param : NULL;
    const size_t n_lib = lib ? strlen(lib) : 0;
    char client[96] = "", out[sizeof e->message];
    if (lib) oai_path(d, lib, client, sizeof client);
    size_t w = 0;
    for (const char *s = msg; *s && w + 1 < sizeof out;) {
        const bool quoted = lib && s[0] == '\'' && !strncmp(s + 1, lib, n_lib) && s[1 + n_lib] == '\'';
        const bool leading = lib && s == msg && !strncmp(s, lib, n_lib) && !strncmp(s + n_lib, " = ", 3);
        char ptr[96];
        const size_t n_ptr = tool_pointer(d, s, ptr, sizeof ptr);
        const char *put = quoted || leading ? client : n_ptr ? ptr : NULL;
        if (!put) {
            out[w++] = *s++;
            continue;
        }
        w += (size_t)snprintf(out + w, sizeof out - w, "%s%s%s", quoted ? "'" : "", put, quoted ? "'" : "");
        if (w >= sizeof out) w = sizeof out - 1;
        s += quoted ? n_lib + 2 : leading ? n_lib : n_ptr;
    }
    out[w] = 0;
    return oai_fail(e, http_status, "invalid_request_error", lib ? client : NULL, code, "%s", out);
}

/* ---- field readers: absent is fine (false returned with no error); a wrong type is a 400
 * naming the field as d spells it ---- */

static bool bad_type(const oai_dialect *d, oai_error *e, const char *field, const char *want) {
    const char *f = oai_field(d, field);
    return val_bad(e, f, "'%s' must be %s", f, want);
}

/* 1: read, 0: absent or null, -1: error (e filled). */
static int get_num(const oai_dialect *d, json_t *o, const char *k, double *v, oai_error *e) {
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) return 0;
    if (!json_is_number(x)) return bad_type(d, e, k, "a number"), -1;
    *v = json_number_value(x);
    return 1;
}

static int get_int(const oai_dialect *d, json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *v, oai_error *e) {
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) return 0;
    if (json_is_real(x) && json_real_value(x) == floor(json_real_value(x)) && fabs(json_real_value(x)) < 9e15) {
        *v = (int64_t)json_real_value(x);
    } else if (json_is_integer(x)) {
        *v = json_integer_value(x);
    } else {
        return bad_type(d, e, k, "an integer"), -1;
    }
    if (*v < lo || *v > hi) {
        const char *f = oai_field(d, k);
        val_bad(e, f, "'%s' = %lld is out of range: must be in [%lld, %lld]", f, (long long)*v, (long long)lo,
                (long long)hi);
        return -1;
    }
    return 1;
}

static int get_bool(const oai_dialect *d, json_t *o, const char *k, bool *v, oai_error *e) {
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) return 0;
    if (!json_is_boolean(x)) return bad_type(d, e, k, "a boolean"), -1;
    *v = json_is_true(x);
    return 1;
}

/* ---- which fields a request may carry ---- */

static const char *const COMMON_FIELDS[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "typical_p", "repetition_penalty",
    "presence_penalty", "frequency_penalty", "logit_bias", "seed", "n", "stop", "stream", "stream_options", "logprobs",
    "ignore_eos", "user", "speculative",
    /* structured output: OpenAI's, llama-server's (json_schema, grammar), vLLM's (guided_*) */
    "response_format", "json_schema", "grammar", "guided_json", "guided_regex", "guided_choice", "guided_grammar"};
static const char *const CHAT_FIELDS[] = {
    "messages",    "max_completion_tokens", "top_logprobs",         "tools",
    "tool_choice", "parallel_tool_calls",   "chat_template_kwargs", "reasoning_format"};
static const char *const COMPLETION_FIELDS[] = {"prompt", "echo", "suffix", "best_of"};

/* Unknown fields, and known ones at a value we cannot honour, are refused by name. */
static bool check_fields(const oai_dialect *d, json_t *body, oai_error *e) {
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        const char *f = oai_field(d, k);
        const bool known = val_in_list(k, COMMON_FIELDS, ARRAY_LEN(COMMON_FIELDS)) ||
                           (d->kind == OAI_CHAT ? val_in_list(k, CHAT_FIELDS, ARRAY_LEN(CHAT_FIELDS))
                                                : val_in_list(k, COMPLETION_FIELDS, ARRAY_LEN(COMPLETION_FIELDS)));
        if (!known)
            return oai_fail(e, 400, "invalid_request_error", f, "unsupported_parameter",
                            "unsupported field '%s' for %s", f, d->endpoint);
        if (json_is_null(v)) continue;
        if (!strcmp(k, "suffix") && !json_is_string(v)) return bad_type(d, e, "suffix", "a string");
        const bool neutral = json_is_integer(v) && json_integer_value(v) == 1;
        if (!neutral && !strcmp(k, "best_of"))
            return oai_fail(e, 400, "invalid_request_error", f, "unsupported_parameter",
                            "'%s' is not supported by this server (only its neutral value is accepted)", f);
    }
    return true;
}

/* ---- prompts ---- */

/* A failed library call: 503 when memory ran out, else 400 naming param (as d spells it). */
static bool status_fail(const oai_dialect *d, oai_error *e, cn_status st, const char *param, const cn_error *err) {
    if (st == CN_STATUS_NO_MEMORY) return oai_fail(e, 503, "server_error", NULL, NULL, "%s", err->msg);
    return oai_lib_fail(d, e, 400, NULL, param, err->msg);
}

/* text tokenized as the prompt (the field param, OpenAI's name: "prompt", "messages"). */
static bool tokenize_text(const oai_ctx *c, const oai_dialect *d, const char *text, size_t len, int32_t **ids,
                          int32_t *n, const char *param, oai_error *e) {
    size_t cnt = 0;
    cn_error err = {0};
    const cn_status st = cn_tokenize_alloc(c->tok, text, len, true, true, ids, &cnt, &err);
    if (st != CN_STATUS_OK) return status_fail(d, e, st, param, &err);
    if (cnt == 0 || cnt > INT32_MAX / 2) {
        free(*ids);
        *ids = NULL;
        return cnt == 0 ? val_bad(e, oai_field(d, param), "the prompt is empty")
                        : oai_fail(e, 400, "invalid_request_error", oai_field(d, param), "context_length_exceeded",
                                   "the prompt is too long");
    }
    *n = (int32_t)cnt;
    return true;
}

static bool token_array(const oai_ctx *c, const oai_dialect *d, json_t *a, int32_t **ids, int32_t *n, oai_error *e) {
    const char *f = oai_field(d, "prompt");
    const size_t cnt = json_array_size(a);
    if (cnt == 0) return val_bad(e, f, "the prompt is empty");
    if (cnt > (size_t)INT32_MAX / 2)
        return oai_fail(e, 400, "invalid_request_error", f, "context_length_exceeded", "the prompt is too long");
    *ids = malloc(cnt * sizeof **ids);
    if (!*ids) return val_oom(e);
    for (size_t i = 0; i < cnt; i++) {
        json_t *x = json_array_get(a, i);
        const json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
        if (!json_is_integer(x) || v < 0 || v >= c->n_vocab) {
            free(*ids);
            *ids = NULL;
            return val_bad(e, f, "%s token %zu is not a token id in [0, %d)", f, i, c->n_vocab);
        }
        (*ids)[i] = (int32_t)v;
    }
    *n = (int32_t)cnt;
    return true;
}

/* The prompt as the prefix of a hole whose suffix is suffix: the model's FIM tokens
 * around them (cn_fim_prompt with no repository context: PRE prompt SUF suffix MID). */
static bool fim_text(const oai_ctx *c, const oai_dialect *d, const char *s, size_t len, const char *suffix,
                     int32_t **ids, int32_t *n, oai_error *e) {
    const char *fs = oai_field(d, "suffix");
    if (strlen(s) != len) return val_bad(e, oai_field(d, "prompt"), "a prompt with '%s' must not contain NUL", fs);
    cn_fim_params fp = cn_fim_default_params();
    fp.prefix = s;
    fp.suffix = suffix;
    fp.n_extra_max = 0;
    size_t cnt = 0;
    cn_error err = {0};
    const cn_status st = cn_fim_prompt(c->tok, &fp, ids, &cnt, &err);
    if (st == CN_STATUS_UNSUPPORTED)
        return oai_fail(e, 400, "invalid_request_error", fs, "fim_not_supported",
                        "'%s' needs a model that fills in the middle: %s", fs, err.msg);
    if (st != CN_STATUS_OK) return status_fail(d, e, st, "suffix", &err);
    *n = (int32_t)cnt;
    return true;
}

static bool add_prompt_text(const oai_ctx *c, const oai_dialect *d, oai_request *r, const char *s, size_t len,
                            const char *suffix, oai_error *e) {
    if (r->n_prompts == OAI_MAX_PROMPTS)
        return val_bad(e, oai_field(d, "prompt"), "at most %d prompts per request", OAI_MAX_PROMPTS);
    const int i = r->n_prompts;
    if (suffix ? !fim_text(c, d, s, len, suffix, &r->prompt[i], &r->n_prompt[i], e)
               : !tokenize_text(c, d, s, len, &r->prompt[i], &r->n_prompt[i], "prompt", e))
        return false;
    r->echo_text[i] = strndup(s, len);
    r->n_prompts++;
    if (!r->echo_text[i]) return val_oom(e);
    return true;
}

/* suffix: NULL, or the text after the hole (each prompt is then its prefix). */
static bool parse_prompt(const oai_ctx *c, const oai_dialect *d, json_t *p, const char *suffix, oai_request *r,
                         oai_error *e) {
    static const char *const KINDS = "a string, an array of strings, or an array of token ids";
    const char *f = oai_field(d, "prompt");
    if (!p) return val_bad(e, f, "'%s' is required", f);
    if (json_is_string(p)) return add_prompt_text(c, d, r, json_string_value(p), json_string_length(p), suffix, e);
    if (!json_is_array(p) || json_array_size(p) == 0) return bad_type(d, e, "prompt", KINDS);
    json_t *first = json_array_get(p, 0);
    if (suffix && !json_is_string(first))
        return val_bad(e, f, "with '%s' the prompt must be text (a string or strings), not token ids",
                       oai_field(d, "suffix"));
    if (json_is_integer(first)) {
        if (!token_array(c, d, p, &r->prompt[0], &r->n_prompt[0], e)) return false;
        r->n_prompts = 1;
        return true;
    }
    size_t i;
    json_t *x;
    json_array_foreach(p, i, x) {
        if (json_is_string(x)) {
            if (!add_prompt_text(c, d, r, json_string_value(x), json_string_length(x), suffix, e)) return false;
        } else if (json_is_array(x) && !suffix) {
            if (r->n_prompts == OAI_MAX_PROMPTS)
                return val_bad(e, f, "at most %d prompts per request", OAI_MAX_PROMPTS);
            if (!token_array(c, d, x, &r->prompt[r->n_prompts], &r->n_prompt[r->n_prompts], e)) return false;
            r->n_prompts++;
        } else {
            return bad_type(d, e, "prompt", KINDS);
        }
    }
    return true;
}

/* The chat: tools, then the messages rendered through the template (oai_tools.c). */
static bool parse_messages(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    if (!oai_parse_tools(d, body, r, e)) return false;
    json_t *vars = json_object_get(body, "chat_template_kwargs");
    if (vars && !json_is_null(vars) && !json_is_object(vars))
        return bad_type(d, e, "chat_template_kwargs", "an object of template variables");
    if (json_is_null(vars)) vars = NULL;
    json_t *rf = json_object_get(body, "reasoning_format");
    if (rf && !json_is_null(rf)) {
        const char *v = json_is_string(rf) ? json_string_value(rf) : "";
        if (strcmp(v, "none") && strcmp(v, "auto") && strcmp(v, "deepseek"))
            return bad_type(d, e, "reasoning_format", "\"none\", \"auto\" or \"deepseek\"");
    }
    char *prompt = NULL;
    size_t len = 0;
    bool ok = oai_render_chat(c, d, json_object_get(body, "messages"), vars, r, &prompt, &len, e);
    if (ok && json_is_string(rf) && !strcmp(json_string_value(rf), "none")) r->think = r->in_think = false;
    if (ok) ok = tokenize_text(c, d, prompt, len, &r->prompt[0], &r->n_prompt[0], "messages", e);
    if (ok) r->n_prompts = 1;
    free(prompt);
    return ok;
}

/* ---- sampling and stopping ---- */

static bool parse_stop(const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    static const char *const WANT = "a string or an array of strings";
    const char *f = oai_field(d, "stop");
    json_t *s = json_object_get(body, "stop");
    if (!s || json_is_null(s)) return true;
    json_t *one = json_is_string(s) ? s : NULL;
    const size_t n = one ? 1 : json_array_size(s);
    if (!one && !json_is_array(s)) return bad_type(d, e, "stop", WANT);
    if (n > CN_GEN_MAX_STOP) return val_bad(e, f, "at most %d stop strings", CN_GEN_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *x = one ? one : json_array_get(s, i);
        if (!json_is_string(x)) return bad_type(d, e, "stop", WANT);
        const size_t len = json_string_length(x);
        if (len == 0 || len > CN_GEN_MAX_STOP_LEN)
            return val_bad(e, f, "stop strings must be 1 to %d bytes", CN_GEN_MAX_STOP_LEN);
        if (memchr(json_string_value(x), 0, len)) return val_bad(e, f, "stop strings must not contain NUL");
        r->stops[r->gen.n_stop] = strndup(json_string_value(x), len);
        if (!r->stops[r->gen.n_stop]) return val_oom(e);
        r->gen.n_stop++;
    }
    return true;
}

/* The template's end-of-turn text as a stop string where the tokenizer does not already
 * end generation on it (the engine says which: c->eot_stop). */
static bool add_end_of_turn(const oai_ctx *c, const oai_dialect *d, oai_request *r, oai_error *e) {
    const char *eot = c->eot_stop;
    if (!eot) return true;
    if (r->gen.n_stop == CN_GEN_MAX_STOP)
        return val_bad(e, oai_field(d, "stop"),
                       "no room for the end-of-turn stop string (at most %d stop strings, one taken by the template)",
                       CN_GEN_MAX_STOP - 1);
    r->stops[r->gen.n_stop] = strdup(eot);
    if (!r->stops[r->gen.n_stop]) return val_oom(e);
    r->gen.n_stop++;
    return true;
}

static bool parse_logit_bias(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    const char *f = oai_field(d, "logit_bias");
    json_t *b = json_object_get(body, "logit_bias");
    if (!b || json_is_null(b)) return true;
    if (!json_is_object(b)) return bad_type(d, e, "logit_bias", "an object mapping token ids to biases");
    const size_t n = json_object_size(b);
    if (n > CN_SAMPLING_MAX_LOGIT_BIAS) return val_bad(e, f, "at most %d %s entries", CN_SAMPLING_MAX_LOGIT_BIAS, f);
    if (n == 0) return true;
    r->bias = malloc(n * sizeof *r->bias);
    if (!r->bias) return val_oom(e);
    const char *k;
    json_t *v;
    int32_t i = 0;
    json_object_foreach(b, k, v) {
        char *end = NULL;
        const long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id >= c->n_vocab)
            return val_bad(e, f, "%s key '%.32s' is not a token id in [0, %d)", f, k, c->n_vocab);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return val_bad(e, f, "%s values must be numbers in [-100, 100] (-100 bans the token)", f);
        const double x = json_number_value(v);
        r->bias[i].token = (int32_t)id;
        r->bias[i].bias = x <= -100 ? -INFINITY : (float)x;
        i++;
    }
    r->gen.sampling.logit_bias = r->bias;
    r->gen.sampling.n_logit_bias = i;
    return true;
}

static bool parse_sampling(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    cn_sampling_params *sp = &r->gen.sampling;
    double x;
    int64_t v;
    int k;
    struct {
        const char *name;
        float *dst;
    } floats[] = {{"temperature", &sp->temperature},
                  {"top_p", &sp->top_p},
                  {"min_p", &sp->min_p},
                  {"typical_p", &sp->typical_p},
                  {"repetition_penalty", &sp->repetition_penalty},
                  {"presence_penalty", &sp->presence_penalty},
                  {"frequency_penalty", &sp->frequency_penalty}};
    for (size_t i = 0; i < ARRAY_LEN(floats); i++) {
        if ((k = get_num(d, body, floats[i].name, &x, e)) < 0) return false;
        if (k) *floats[i].dst = (float)x;
    }
    if ((k = get_int(d, body, "top_k", -1, INT32_MAX, &v, e)) < 0) return false;
    if (k) sp->top_k = v < 0 ? 0 : (int32_t)v;
    if ((k = get_int(d, body, "seed", INT64_MIN + 1, INT64_MAX, &v, e)) < 0) return false;
    if (k) sp->seed = (uint64_t)v & (UINT64_MAX >> 1);
    bool b = false;
    if ((k = get_bool(d, body, "ignore_eos", &b, e)) < 0) return false;
    sp->ignore_eos = b;
    if (d->kind == OAI_CHAT) {
        bool lp = false;
        if ((k = get_bool(d, body, "logprobs", &lp, e)) < 0) return false;
        int64_t top = 0;
        if ((k = get_int(d, body, "top_logprobs", 0, CN_SAMPLING_MAX_LOGPROBS, &top, e)) < 0) return false;
        const char *ft = oai_field(d, "top_logprobs");
        if (k && !lp) return val_bad(e, ft, "'%s' needs '%s': true", ft, oai_field(d, "logprobs"));
        r->n_logprobs = lp ? (int32_t)top : -1;
    } else {
        int64_t lp = 0;
        if ((k = get_int(d, body, "logprobs", 0, CN_SAMPLING_MAX_LOGPROBS, &lp, e)) < 0) return false;
        r->n_logprobs = k ? (int32_t)lp : -1;
    }
    sp->n_logprobs = r->n_logprobs;
    return parse_logit_bias(c, d, body, r, e);
}

/* "speculative": false (off), true (the draft model if the server has one, else lookup
 * with n-grams of up to 3), or {"draft": bool, "lookup": N in [0, 8], "max_draft": K in
 * [1, 16]}; absent: the server's default. Speculation never changes a token, only the
 * work per token. */
/* A field inside an object failed: its param becomes "parent.field". */
static bool nested(oai_error *e, const char *parent) {
    char p[2 * sizeof e->param];
    snprintf(p, sizeof p, "%s.%s", parent, e->param);
    snprintf(e->param, sizeof e->param, "%.63s", p);
    return false;
}

static bool parse_speculative(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    const char *f = oai_field(d, "speculative");
    const int32_t lookup_default = c->lookup_n > 0 ? c->lookup_n : 3;
    r->draft = c->has_draft;
    r->lookup_n = c->lookup_n;
    r->max_draft = c->max_draft;
    json_t *x = json_object_get(body, "speculative");
    if (!x || json_is_null(x)) return true;
    if (json_is_boolean(x)) {
        const bool on = json_is_true(x);
        r->draft = on && c->has_draft;
        r->lookup_n = on && !c->has_draft ? lookup_default : 0;
        return true;
    }
    if (!json_is_object(x))
        return bad_type(d, e, "speculative", "a boolean or an object {\"draft\", \"lookup\", \"max_draft\"}");
    static const char *const keys[] = {"lookup", "max_draft", "draft"};
    const char *k = val_unknown_key(x, keys, ARRAY_LEN(keys));
    if (k)
        return oai_fail(e, 400, "invalid_request_error", f, "unsupported_parameter",
                        "unsupported field '%s.%.40s' (draft, lookup, max_draft)", f, k);
    bool draft = false;
    int got;
    if ((got = get_bool(d, x, "draft", &draft, e)) < 0) return nested(e, f);
    if (got && draft && !c->has_draft)
        return val_bad(e, f, "'%s.draft': this server has no draft model (cinder serve --draft MODEL)", f);
    int64_t n = 0;
    int got_lookup;
    if ((got_lookup = get_int(d, x, "lookup", 0, 8, &n, e)) < 0) return nested(e, f);
    /* an object asks for lookup unless it asks for the draft model */
    r->draft = got ? draft : c->has_draft && !got_lookup;
    r->lookup_n = r->draft ? 0 : got_lookup ? (int32_t)n : lookup_default;
    if ((got = get_int(d, x, "max_draft", 1, CN_ENGINE_MAX_DRAFT, &n, e)) < 0) return nested(e, f);
    if (got) r->max_draft = (int32_t)n;
    return true;
}

/* ---- structured output ----
 * One constraint per request, from whichever field the client's API spells it with:
 * OpenAI's response_format ({"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict", "description"}}; "text" is no constraint),
 * llama-server's json_schema (the schema itself) and grammar (GBNF; "" is none, as there),
 * and vLLM's guided_json (a schema, as an object or as JSON text), guided_regex,
 * guided_choice (strings) and guided_grammar (GBNF). JSON is compiled with flexible
 * whitespace (at most CN_GRAMMAR_MAX_WS bytes per gap), as llama.cpp's and vLLM's grammars
 * allow it. The cache key of a schema is its compact JSON text in the client's key order:
 * spacing and escapes do not matter, property order does (it orders the output). */

typedef struct {
    const char *field; /* the request field */
    cn_grammar_kind kind;
    json_t *schema; /* borrowed or owned (schema_owned): JSON Schema kinds */
    bool schema_owned;
    const char *text; /* GBNF / regex source, borrowed from the body */
    size_t text_len;
    json_t *choices; /* borrowed: an array of strings */
} grammar_req;

static bool is_schema_value(json_t *v) { return json_is_object(v) || json_is_boolean(v); }

/* Only keys from allowed[] in o, the object at path (as the client spells it); else a 400
 * naming param. */
static bool only_keys(json_t *o, const char *param, const char *path, const char *const *allowed, size_t n,
                      oai_error *e) {
    const char *k = val_unknown_key(o, allowed, n);
    return !k || oai_fail(e, 400, "invalid_request_error", param, "unsupported_parameter",
                          "unsupported field '%s.%.40s'", path, k);
}

/* {"type": "json_schema", "json_schema": {name, description, schema, strict}}: 1 (in g),
 * -1 error; rf is response_format as d spells it, and the error's param. */
static int json_schema_format(const oai_dialect *d, const char *rf, json_t *v, grammar_req *g, oai_error *e) {
    static const char *const keys[] = {"type", "json_schema"};
    static const char *const inner[] = {"name", "description", "schema", "strict"};
    if (!only_keys(v, rf, rf, keys, ARRAY_LEN(keys), e)) return -1;
    const char *js_path = oai_field(d, "response_format.json_schema");
    json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return val_bad(e, rf, "'%s' must be an object {\"name\", \"schema\", \"strict\"}", js_path), -1;
    if (!only_keys(js, rf, js_path, inner, ARRAY_LEN(inner), e)) return -1;
    json_t *name = json_object_get(js, "name"), *desc = json_object_get(js, "description"),
           *strict = json_object_get(js, "strict"), *schema = json_object_get(js, "schema");
    if ((name && !json_is_string(name)) || (desc && !json_is_null(desc) && !json_is_string(desc)))
        return val_bad(e, rf, "'%s.name' and '.description' must be strings", js_path), -1;
    /* strict or not, the output follows the schema: a mask cannot half-follow it */
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return val_bad(e, rf, "'%s.strict' must be a boolean", js_path), -1;
    if (!schema || json_is_null(schema))
        return val_bad(e, rf, "'%s.schema' is required (for any JSON object use {\"type\": \"json_object\"})", js_path),
               -1;
    if (!is_schema_value(schema)) return val_bad(e, rf, "'%s.schema' must be a JSON Schema (an object)", js_path), -1;
    g->kind = CN_GRAMMAR_JSON_SCHEMA;
    g->schema = schema;
    return 1;
}

/* response_format: 0 no constraint, 1 one (in g), -1 error. */
static int response_format(const oai_dialect *d, json_t *v, grammar_req *g, oai_error *e) {
    static const char *const F = "response_format";
    const char *rf = oai_field(d, F);
    if (!json_is_object(v))
        return bad_type(d, e, F, "an object {\"type\": \"text\" | \"json_object\" | \"json_schema\"}"), -1;
    const char *t = val_str(v, "type");
    g->field = F;
    if (!strcmp(t, "text")) {
        static const char *const keys[] = {"type"};
        return only_keys(v, rf, rf, keys, ARRAY_LEN(keys), e) ? 0 : -1;
    }
    if (!strcmp(t, "json_object")) {
        /* llama-server also takes {"type": "json_object", "schema": {...}} */
        static const char *const keys[] = {"type", "schema"};
        if (!only_keys(v, rf, rf, keys, ARRAY_LEN(keys), e)) return -1;
        json_t *schema = json_object_get(v, "schema");
        if (schema && !json_is_null(schema)) {
            if (!is_schema_value(schema))
                return bad_type(d, e, F, "an object whose 'schema' is a JSON Schema object"), -1;
            g->kind = CN_GRAMMAR_JSON_SCHEMA;
            g->schema = schema;
        } else {
            g->kind = CN_GRAMMAR_JSON_OBJECT;
        }
        return 1;
    }
    if (!strcmp(t, "json_schema")) return json_schema_format(d, rf, v, g, e);
    return val_bad(e, rf, "'%s.type' must be \"text\", \"json_object\" or \"json_schema\"", rf), -1;
}

/* A schema given as an object or as JSON text (guided_json, json_schema). */
static int schema_field(const oai_dialect *d, json_t *v, const char *field, grammar_req *g, oai_error *e) {
    g->field = field;
    g->kind = CN_GRAMMAR_JSON_SCHEMA;
    if (is_schema_value(v)) {
        g->schema = v;
        return 1;
    }
    static const char *const WANT = "a JSON Schema (an object, or its JSON text)";
    if (!json_is_string(v)) return bad_type(d, e, field, WANT), -1;
    json_error_t je;
    g->schema = json_mem_load(json_string_value(v), json_string_length(v), 0, &je);
    if (!g->schema) {
        if (json_error_code(&je) == json_error_out_of_memory) return val_oom(e), -1;
        const char *f = oai_field(d, field);
        return val_bad(e, f, "'%s' is not valid JSON: %s (line %d, column %d)", f, je.text, je.line, je.column), -1;
    }
    g->schema_owned = true;
    if (!is_schema_value(g->schema)) return bad_type(d, e, field, WANT), -1;
    return 1;
}

static int text_field(const oai_dialect *d, json_t *v, const char *field, cn_grammar_kind kind, grammar_req *g,
                      oai_error *e) {
    if (!json_is_string(v))
        return bad_type(d, e, field,
                        kind == CN_GRAMMAR_REGEX ? "a regular expression (a string)" : "a GBNF grammar (a string)"),
               -1;
    if (kind == CN_GRAMMAR_GBNF && json_string_length(v) == 0) return 0; /* llama-server: "" is none */
    g->field = field;
    g->kind = kind;
    g->text = json_string_value(v);
    g->text_len = json_string_length(v);
    return 1;
}

static int choice_field(const oai_dialect *d, json_t *v, grammar_req *g, oai_error *e) {
    static const char *const F = "guided_choice";
    if (!json_is_array(v) || json_array_size(v) == 0) return bad_type(d, e, F, "a non-empty array of strings"), -1;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x)) return bad_type(d, e, F, "a non-empty array of strings"), -1;
        const char *f = oai_field(d, F);
        if (memchr(json_string_value(x), 0, json_string_length(x)))
            return val_bad(e, f, "%s[%zu] contains NUL", f, i), -1;
    }
    g->field = F;
    g->kind = CN_GRAMMAR_CHOICE;
    g->choices = v;
    return 1;
}

/* Which constraint body asks for: 0 none, 1 one (in g), -1 error (two given, or a bad
 * value). g->schema may be owned even on error (the caller frees it). */
static int find_grammar(const oai_dialect *d, json_t *body, grammar_req *g, oai_error *e) {
    static const char *const FIELDS[] = {"response_format", "json_schema",   "grammar",       "guided_json",
                                         "guided_regex",    "guided_choice", "guided_grammar"};
    const char *given = NULL;
    int found = 0;
    for (size_t i = 0; i < ARRAY_LEN(FIELDS); i++) {
        json_t *v = json_object_get(body, FIELDS[i]);
        if (!v || json_is_null(v)) continue;
        grammar_req one = {0};
        int k;
        switch (i) {
        case 0: k = response_format(d, v, &one, e); break;
        case 1: k = schema_field(d, v, FIELDS[i], &one, e); break;
        case 2: k = text_field(d, v, FIELDS[i], CN_GRAMMAR_GBNF, &one, e); break;
        case 3: k = schema_field(d, v, FIELDS[i], &one, e); break;
        case 4: k = text_field(d, v, FIELDS[i], CN_GRAMMAR_REGEX, &one, e); break;
        case 5: k = choice_field(d, v, &one, e); break;
        default: k = text_field(d, v, FIELDS[i], CN_GRAMMAR_GBNF, &one, e); break;
        }
        if (k > 0 && given) {
            if (one.schema_owned) json_decref(one.schema);
            const char *f = oai_field(d, FIELDS[i]);
            return val_bad(e, f, "'%s' and '%s' both constrain the output: give at most one", oai_field(d, given), f),
                   -1;
        }
        if (k < 0 || k == 0) {
            if (one.schema_owned) json_decref(one.schema);
            if (k < 0) return -1;
            continue;
        }
        *g = one;
        given = FIELDS[i];
        found = 1;
    }
    return found;
}

/* Compiles what the request asks for (if anything) into r->grammar. */
static bool parse_grammar(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    grammar_req g = {0};
    const int k = find_grammar(d, body, &g, e);
    if (k <= 0) {
        if (g.schema_owned) json_decref(g.schema);
        return k == 0;
    }
    cn_grammar_params p = cn_grammar_default_params();
    p.kind = g.kind;
    p.max_states = c->grammar_max_states;
    p.max_compile_ms = c->grammar_max_compile_ms;
    p.flexible_whitespace = g.kind == CN_GRAMMAR_JSON_SCHEMA || g.kind == CN_GRAMMAR_JSON_OBJECT;
    char *key = NULL; /* owned canonical text (schema, choices), or NULL */
    const char **choices = NULL;
    const char *src = "";
    size_t src_len = 0;
    bool ok = true;
    if (g.kind == CN_GRAMMAR_JSON_SCHEMA) {
        key = json_dumps(g.schema, JSON_COMPACT | JSON_ENCODE_ANY);
        ok = key != NULL;
        if (ok) src = key, src_len = strlen(key);
    } else if (g.kind == CN_GRAMMAR_GBNF || g.kind == CN_GRAMMAR_REGEX) {
        src = g.text;
        src_len = g.text_len;
    } else if (g.kind == CN_GRAMMAR_CHOICE) {
        const size_t n = json_array_size(g.choices);
        key = json_dumps(g.choices, JSON_COMPACT);
        choices = malloc(n * sizeof *choices);
        ok = key && choices;
        for (size_t i = 0; ok && i < n; i++) choices[i] = json_string_value(json_array_get(g.choices, i));
        p.choices = choices;
        p.n_choices = n;
        if (ok) src = key, src_len = strlen(key);
    }
    if (g.kind != CN_GRAMMAR_CHOICE) {
        p.source = src;
        p.source_len = src_len;
    }
    cn_error err = {0};
    const cn_status st = ok ? gcache_get(c->grammars, c->tok, &p, src, src_len, &r->grammar, &r->grammar_cached, &err)
                            : CN_STATUS_NO_MEMORY;
    free(key);
    free(choices);
    if (g.schema_owned) json_decref(g.schema);
    if (st == CN_STATUS_NO_MEMORY) return val_oom(e);
    const char *f = oai_field(d, g.field);
    if (st != CN_STATUS_OK) return val_bad(e, f, "invalid '%s': %s", f, err.msg);
    r->grammar_field = g.field;
    r->gen.grammar = r->grammar;
    return true;
}

/* n, stream and stream_options. */
static bool parse_stream(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    int64_t v;
    int k;
    if ((k = get_int(d, body, "n", 1, c->max_n > 0 ? c->max_n : CN_ENGINE_MAX_N, &v, e)) < 0) return false;
    if (k) r->n = (int32_t)v;
    if (get_bool(d, body, "stream", &r->stream, e) < 0) return false;
    json_t *so = json_object_get(body, "stream_options");
    if (!so || json_is_null(so)) return true;
    const char *f = oai_field(d, "stream_options");
    if (!json_is_object(so)) return bad_type(d, e, "stream_options", "an object");
    static const char *const keys[] = {"include_usage"};
    if (!only_keys(so, f, f, keys, ARRAY_LEN(keys), e)) return false;
    if (get_bool(d, so, "include_usage", &r->include_usage, e) < 0) return nested(e, f);
    if (!r->stream) return val_bad(e, f, "'%s' is only allowed with '%s': true", f, oai_field(d, "stream"));
    return true;
}

/* max_tokens, and for a chat max_completion_tokens (the smaller of both counts), into
 * *max (r->max_tokens_given says whether either was given). */
static bool parse_max_tokens(const oai_dialect *d, json_t *body, oai_request *r, int64_t *max, oai_error *e) {
    int k;
    if ((k = get_int(d, body, "max_tokens", 1, CN_GEN_MAX_TOKENS, max, e)) < 0) return false;
    r->max_tokens_given = k > 0;
    if (d->kind != OAI_CHAT) return true;
    int64_t mct = 0;
    if ((k = get_int(d, body, "max_completion_tokens", 1, CN_GEN_MAX_TOKENS, &mct, e)) < 0) return false;
    if (k) {
        *max = r->max_tokens_given ? (mct < *max ? mct : *max) : mct;
        r->max_tokens_given = true;
    }
    return true;
}

/* A completion's prompt: echo, suffix (the text after a hole) and prompt. */
static bool parse_completion(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    const char *fe = oai_field(d, "echo"), *fs = oai_field(d, "suffix");
    if (get_bool(d, body, "echo", &r->echo, e) < 0) return false;
    if (r->echo && r->n_logprobs >= 0)
        return val_bad(e, fe, "'%s' with '%s' (prompt log-probabilities) is not supported", fe,
                       oai_field(d, "logprobs"));
    json_t *sx = json_object_get(body, "suffix");
    const char *suffix = json_is_string(sx) && json_string_length(sx) > 0 ? json_string_value(sx) : NULL;
    if (suffix && strlen(suffix) != json_string_length(sx)) return val_bad(e, fs, "'%s' must not contain NUL", fs);
    if (suffix && r->echo)
        return val_bad(e, fs, "'%s' with '%s' is not supported (the prompt is the text before the hole)", fs, fe);
    return parse_prompt(c, d, json_object_get(body, "prompt"), suffix, r, e);
}

bool oai_parse(const oai_ctx *c, oai_kind kind, json_t *body, oai_request *r, oai_error *e) {
    return oai_parse_as(c, kind == OAI_CHAT ? &OAI_CHAT_API : &OAI_COMPLETIONS_API, body, r, e);
}

bool oai_parse_as(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    const oai_kind kind = d->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->gen = cn_gen_default_params();
    r->n = 1;
    r->n_logprobs = -1;
    if (!json_is_object(body)) return bad_type(d, e, "body", "a JSON object");
    if (!check_fields(d, body, e)) return false;
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) return bad_type(d, e, "model", "a string");
        const char *name = json_string_value(model);
        if (!c->routed && strcmp(name, c->model_id))
            return oai_fail(e, 404, "invalid_request_error", oai_field(d, "model"), "model_not_found",
                            "The model '%.200s' does not exist: this server serves '%.200s'", name, c->model_id);
    }
    int64_t max_tokens = 0;
    if (!parse_stream(c, d, body, r, e) || !parse_max_tokens(d, body, r, &max_tokens, e)) return false;
    if (!parse_sampling(c, d, body, r, e) || !parse_stop(d, body, r, e) || !parse_speculative(c, d, body, r, e))
        return false;
    if (kind == OAI_COMPLETION ? !parse_completion(c, d, body, r, e)
                               : !parse_messages(c, d, body, r, e) || !add_end_of_turn(c, d, r, e))
        return false;
    r->gen.stop = (const char *const *)r->stops;
    int32_t longest = 0;
    for (int i = 0; i < r->n_prompts; i++) longest = r->n_prompt[i] > longest ? r->n_prompt[i] : longest;
    const char *fp = oai_field(d, kind == OAI_CHAT ? "messages" : "prompt");
    if (longest >= c->n_ctx)
        return oai_fail(e, 400, "invalid_request_error", fp, "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, your %s resulted in %d tokens "
                        "(at least one position must be left for the reply).",
                        c->n_ctx, fp, longest);
    /* An output limit, not a context size: the context ends the request sooner ("length"). */
    const int64_t room = c->n_ctx - longest;
    r->gen.max_tokens = (int32_t)(r->max_tokens_given && max_tokens < room ? max_tokens : room);
    cn_error err = {0};
    if (cn_gen_validate(&r->gen, c->n_vocab, &err) != CN_STATUS_OK)
        return oai_lib_fail(d, e, 400, NULL, err.param, err.msg);
    if (!parse_grammar(c, d, body, r, e)) return false;
    return kind != OAI_CHAT || oai_tools_grammar(c, d, r, e);
}

void oai_request_free(oai_request *r) {
    if (!r) return;
    for (int i = 0; i < OAI_MAX_PROMPTS; i++) {
        free(r->prompt[i]);
        free(r->echo_text[i]);
    }
    for (int i = 0; i < CN_GEN_MAX_STOP; i++) free(r->stops[i]);
    free(r->bias);
    cn_grammar_free(r->grammar);
    json_decref(r->tools);
    free(r->tool_name);
    memset(r, 0, sizeof *r);
}

/* ---- response pieces ---- */

json_t *oai_piece(const cn_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t n = cn_token_to_piece(tok, id, true, buf, sizeof buf);
    if (n > sizeof buf) n = 0;
    char clean[3 * sizeof buf + 1];
    const size_t m = utf8_clean_into(buf, n, clean);
    return json_stringn(clean, m); /* NULL only when jansson is out of memory */
}

static json_t *piece_bytes(const cn_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t n = cn_token_to_piece(tok, id, true, buf, sizeof buf);
    if (n > sizeof buf) n = 0;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

static json_t *logprob_value(float lp) { return json_real(isfinite(lp) ? lp : -9999.0); }

json_t *oai_chat_logprob(const cn_tokenizer *tok, const cn_gen_token *t) {
    json_t *top = json_array();
    for (int32_t i = 0; i < t->n_top; i++)
        json_array_append_new(top,
                              json_pack("{s:o,s:o,s:o}", "token", oai_piece(tok, t->top[i].id), "logprob",
                                        logprob_value(t->top[i].logprob), "bytes", piece_bytes(tok, t->top[i].id)));
    return json_pack("{s:o,s:o,s:o,s:o}", "token", oai_piece(tok, t->id), "logprob", logprob_value(t->logprob), "bytes",
                     piece_bytes(tok, t->id), "top_logprobs", top);
}

json_t *oai_timings_json(const cn_gen_timings *t) {
    return json_pack("{s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "prompt_n", t->n_prompt_tokens,
                     "cached_n", t->n_cached_tokens, "predicted_n", t->n_generated_tokens, "queue_ms", t->queue_ms,
                     "prefill_ms", t->prefill_ms, "ttft_ms", t->ttft_ms, "decode_ms", t->decode_ms, "total_ms",
                     t->total_ms, "itl_mean_ms", t->itl_mean_ms, "itl_p50_ms", t->itl_p50_ms, "itl_p90_ms",
                     t->itl_p90_ms, "itl_p99_ms", t->itl_p99_ms, "prefill_tok_s", t->prefill_tok_s, "decode_tok_s",
                     t->decode_tok_s);
}

const char *oai_finish_str(cn_finish_reason r) {
    return r == CN_FINISH_LENGTH ? "length" : r == CN_FINISH_CANCELLED ? "cancelled" : "stop";
}
