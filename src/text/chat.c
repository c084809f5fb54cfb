/* chat.c — chat templates: the model's own Jinja template run by the interpreter
 * (jinja/jinja.h), and three families (ChatML, Gemma, Llama-3) rendered by hand-written C.
 *
 * Jinja templates get the conversation as Hugging Face's apply_chat_template passes it:
 * messages, tools (or None), documents (None), add_generation_prompt, bos_token,
 * eos_token, then the caller's extra variables; tool-call arguments given as JSON text
 * become objects first. The interpreter's budgets bound every render (the output budget
 * is CN_CHAT_MAX_PROMPT_BYTES).
 *
 * Each hand-written family reproduces one reference template (the expected strings in
 * tests/unit/test_chat.c were produced by jinja2 from those templates):
 *   ChatML  SmolLM2-135M-Instruct's tokenizer.chat_template (Qwen2.5's has the same shape);
 *   Gemma   google/gemma-3-*-it's, text contents only (no image parts);
 *   Llama-3 Meta-Llama-3-8B-Instruct's (later 3.x templates add a dated system header and
 *           tool calls, which are not reproduced; llama.cpp's built-in llama3 format does
 *           the same).
 * They render twice over the messages, first counting bytes, then writing, so limits are
 * checked before anything is allocated; family detection only searches a template's
 * text for fixed markers. */
#include "text/chat.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/utf8.h"
#include "jinja/jinja.h"
#include "text/tokenizer.h"

struct cn_chat_template {
    cn_chat_family family; /* hand-written: the renderer; Jinja: the family its markers show */
    char *default_system;  /* ChatML only; NULL if none */
    cn_jinja *jinja;       /* NULL for the hand-written templates */
    char *source;          /* the Jinja text, NUL-terminated */
    char *bos, *eos;       /* bos_token / eos_token for the template ("" when unknown) */
    char *eot;             /* end_of_turn of a Jinja template */
    bool strip_bos;        /* the tokenizer adds BOS: a leading BOS text is removed */
    int64_t now_unix;      /* strftime_now's clock; 0: the real one */
};

static const char *const FAMILY_NAME[] = {"chatml", "gemma", "llama3"};
static const char *const END_OF_TURN[] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>"};

static cn_status make(cn_chat_family family, const char *sys, size_t sys_len, cn_chat_template **out, cn_error *err) {
    cn_chat_template *t = calloc(1, sizeof *t);
    if (!t) return cn_err(err, CN_STATUS_NO_MEMORY, "chat template: out of memory");
    t->family = family;
    if (sys) {
        t->default_system = malloc(sys_len + 1);
        if (!t->default_system) {
            free(t);
            return cn_err(err, CN_STATUS_NO_MEMORY, "chat template: out of memory");
        }
        memcpy(t->default_system, sys, sys_len);
        t->default_system[sys_len] = 0;
    }
    *out = t;
    return CN_STATUS_OK;
}

cn_status cn_chat_template_from_name(const char *name, cn_chat_template **out, cn_error *err) {
    if (out) *out = NULL;
    if (!out || !name) return cn_err(err, CN_STATUS_INVALID_ARG, "chat template: NULL argument");
    for (size_t f = 0; f < CN_ARRAY_LEN(FAMILY_NAME); f++)
        if (strcasecmp(name, FAMILY_NAME[f]) == 0) return make((cn_chat_family)f, NULL, 0, out, err);
    return cn_err(err, CN_STATUS_INVALID_ARG, "unknown chat template '%.64s' (known: %s)", name,
                  CN_CHAT_TEMPLATE_NAMES);
}

/* The default system prompt a ChatML template writes as one literal:
 * '<|im_start|>system' + newline (real, or the two characters \n of a Jinja escape) +
 * text + '<|im_end|>', the text free of quotes, braces and backslashes (anything else is
 * an expression such as messages[0]['content'], not a literal). First such occurrence. */
static bool chatml_default_system(const char *j, size_t len, const char **sys, size_t *sys_len) {
    static const char open[] = "<|im_start|>system";
    static const char close[] = "<|im_end|>";
    const size_t n_open = sizeof open - 1, n_close = sizeof close - 1;
    const char *end = j + len, *p = j;
    while ((p = memmem(p, (size_t)(end - p), open, n_open)) != NULL) {
        const char *q = p + n_open;
        p = q;
        if (q < end && *q == '\n') q += 1;
        else if (end - q >= 2 && q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        const char *e = memmem(q, (size_t)(end - q), close, n_close);
        if (!e || e == q || e - q > CN_CHAT_MAX_SYSTEM_BYTES) continue;
        bool literal = true;
        for (const char *c = q; c < e && literal; c++) literal = !strchr("'\"{}\\", *c);
        if (!literal) continue;
        *sys = q;
        *sys_len = (size_t)(e - q);
        return true;
    }
    return false;
}

cn_status cn_chat_template_detect(const char *jinja, size_t len, cn_chat_template **out, cn_error *err) {
    if (out) *out = NULL;
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "chat template: NULL argument");
    if (!jinja || len == 0)
        return cn_err(err, CN_STATUS_UNSUPPORTED,
                      "the model has no chat template (tokenizer.chat_template); "
                      "pass --chat-template NAME, one of: %s",
                      CN_CHAT_TEMPLATE_NAMES);
    if (memmem(jinja, len, "<|im_start|>", 12)) {
        const char *sys = NULL;
        size_t sys_len = 0;
        chatml_default_system(jinja, len, &sys, &sys_len);
        return make(CN_CHAT_CHATML, sys, sys_len, out, err);
    }
    if (memmem(jinja, len, "<start_of_turn>", 15)) return make(CN_CHAT_GEMMA, NULL, 0, out, err);
    if (memmem(jinja, len, "<|start_header_id|>", 19)) return make(CN_CHAT_LLAMA3, NULL, 0, out, err);
    return cn_err(err, CN_STATUS_UNSUPPORTED,
                  "unrecognized chat template in the model (not ChatML, Gemma or Llama-3); "
                  "pass --chat-template NAME, one of: %s",
                  CN_CHAT_TEMPLATE_NAMES);
}

void cn_chat_template_free(cn_chat_template *t) {
    if (!t) return;
    free(t->default_system);
    cn_jinja_free(t->jinja);
    free(t->source);
    free(t->bos);
    free(t->eos);
    free(t->eot);
    free(t);
}

cn_chat_family cn_chat_template_family(const cn_chat_template *t) { return t->family; }
bool cn_chat_template_is_jinja(const cn_chat_template *t) { return t->jinja != NULL; }
const char *cn_chat_template_name(const cn_chat_template *t) { return t->jinja ? "jinja" : FAMILY_NAME[t->family]; }
const char *cn_chat_template_end_of_turn(const cn_chat_template *t) {
    return t->jinja ? t->eot : END_OF_TURN[t->family];
}
const char *cn_chat_end_of_turn_stop(const cn_chat_template *t, const cn_tokenizer *tok) {
    const char *eot = t ? cn_chat_template_end_of_turn(t) : "";
    if (!eot[0]) return NULL;
    const int32_t id = cn_tokenizer_find(tok, eot);
    return id >= 0 && cn_tokenizer_is_eog(tok, id) ? NULL : eot;
}
const char *cn_chat_template_default_system(const cn_chat_template *t) { return t->default_system; }
bool cn_chat_template_bos_in_template(const cn_chat_template *t) {
    if (t->jinja) return strstr(t->source, "bos_token") != NULL;
    return t->family != CN_CHAT_CHATML;
}
const char *cn_chat_template_source(const cn_chat_template *t) { return t && t->jinja ? t->source : NULL; }
void cn_chat_template_set_clock(cn_chat_template *t, int64_t unix_seconds) {
    if (t) t->now_unix = unix_seconds;
}

/* --- Jinja templates --- */

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        if (n) memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* A Jinja template of src[0..n) with these token texts (bos / eos may be NULL). */
static cn_status make_jinja(const char *src, size_t n, const char *bos, const char *eos, bool strip_bos,
                            cn_chat_template **out, cn_error *err) {
    *out = NULL;
    cn_jinja *j = NULL;
    cn_status st = cn_jinja_parse(src, n, &j, err);
    if (st != CN_STATUS_OK) return st;
    cn_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        cn_jinja_free(j);
        return cn_err(err, CN_STATUS_NO_MEMORY, "chat template: out of memory");
    }
    t->jinja = j;
    t->source = dup_n(src, n);
    t->bos = dup_n(bos ? bos : "", bos ? strlen(bos) : 0);
    t->eos = dup_n(eos ? eos : "", eos ? strlen(eos) : 0);
    t->strip_bos = strip_bos && t->bos && t->bos[0];
    /* end of turn: the family's marker when the template shows one, else EOS */
    const char *eot = t->eos;
    t->family = CN_CHAT_CHATML;
    if (memmem(src, n, "<|im_start|>", 12)) eot = END_OF_TURN[CN_CHAT_CHATML];
    else if (memmem(src, n, "<start_of_turn>", 15)) {
        t->family = CN_CHAT_GEMMA;
        eot = END_OF_TURN[CN_CHAT_GEMMA];
    } else if (memmem(src, n, "<|start_header_id|>", 19)) {
        t->family = CN_CHAT_LLAMA3;
        eot = END_OF_TURN[CN_CHAT_LLAMA3];
    }
    t->eot = eot ? dup_n(eot, strlen(eot)) : NULL;
    if (!t->source || !t->bos || !t->eos || !t->eot) {
        cn_chat_template_free(t);
        return cn_err(err, CN_STATUS_NO_MEMORY, "chat template: out of memory");
    }
    *out = t;
    return CN_STATUS_OK;
}

cn_status cn_chat_template_from_jinja(const char *src, size_t n, cn_chat_template **out, cn_error *err) {
    if (out) *out = NULL;
    if (!out || (!src && n)) return cn_err(err, CN_STATUS_INVALID_ARG, "chat template: NULL argument");
    return make_jinja(src ? src : "", n, NULL, NULL, false, out, err);
}

/* The text of token id (NULL when there is none). */
static const char *token_text(const cn_tokenizer *tok, int32_t id) {
    return tok && id >= 0 ? cn_tokenizer_token_text(tok, id, NULL) : NULL;
}

cn_status cn_chat_template_for_model(const cn_gguf *g, const cn_tokenizer *tok, cn_chat_template **out, cn_error *err) {
    if (out) *out = NULL;
    if (!out || !g) return cn_err(err, CN_STATUS_INVALID_ARG, "chat template: NULL argument");
    cn_gguf_str js = {0};
    if (!cn_gguf_get_str(g, "tokenizer.chat_template", &js) || js.len == 0)
        return cn_chat_template_detect(NULL, 0, out, err);
    cn_error why = {0};
    const cn_status st = make_jinja(js.ptr, js.len, token_text(tok, tok ? cn_tokenizer_bos(tok) : -1),
                                    token_text(tok, tok ? cn_tokenizer_eos(tok) : -1), tok && cn_tokenizer_add_bos(tok),
                                    out, &why);
    if (st == CN_STATUS_OK || st == CN_STATUS_NO_MEMORY) {
        if (st != CN_STATUS_OK && err) *err = why;
        return st;
    }
    /* the interpreter refuses it: the family's renderer, when the markers show one */
    if (cn_chat_template_detect(js.ptr, js.len, out, NULL) == CN_STATUS_OK) {
        cn_log(CN_LOG_WARN, "chat template: the model's template does not parse (%s); using the %s renderer", why.msg,
               FAMILY_NAME[(*out)->family]);
        return CN_STATUS_OK;
    }
    return cn_err(err, CN_STATUS_UNSUPPORTED,
                  "the model's chat template does not parse (%s); pass --chat-template NAME, one of: %s", why.msg,
                  CN_CHAT_TEMPLATE_NAMES);
}

/* --- trimming as Python's str.strip() (what Jinja's trim filter calls) --- */

static bool py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

static void trim(const char **s, size_t *n) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t a = 0, b = *n;
    uint32_t cp;
    size_t len;
    /* bytes that are not UTF-8 decode as U+FFFD, which is not whitespace: trimming stops */
    while (a < b) {
        len = cn_utf8_decode(*s + a, b - a, &cp);
        if (!py_space(cp)) break;
        a += len;
    }
    while (b > a) {
        size_t start = b - 1; /* back to the lead byte of the last character */
        while (start > a && b - start < 4 && (p[start] & 0xC0) == 0x80) start--;
        len = cn_utf8_decode(*s + start, b - start, &cp);
        if (len != b - start || !py_space(cp)) break;
        b = start;
    }
    *s += a;
    *n = b - a;
}

/* --- rendering --- */

/* Counts bytes when buf is NULL, writes them otherwise. */
typedef struct {
    char *buf;
    uint64_t len;
} out_text;

static void put(out_text *o, const char *s, size_t n) {
    if (o->buf) memcpy(o->buf + o->len, s, n);
    o->len += n;
}
static void puts_(out_text *o, const char *s) { put(o, s, strlen(s)); }

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } role;

/* Content lengths are measured once, in validate, and passed in. */
static void render_chatml(const cn_chat_template *t, const cn_chat_msg *m, const role *roles, const size_t *lens,
                          size_t n, bool gen, out_text *o) {
    if (t->default_system && roles[0] != ROLE_SYSTEM) {
        puts_(o, "<|im_start|>system\n");
        puts_(o, t->default_system);
        puts_(o, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        puts_(o, "<|im_start|>");
        puts_(o, m[i].role);
        puts_(o, "\n");
        put(o, m[i].content, lens[i]);
        puts_(o, "<|im_end|>\n");
    }
    if (gen) puts_(o, "<|im_start|>assistant\n");
}

static void render_gemma(const cn_chat_msg *m, const role *roles, const size_t *lens, size_t n, bool gen, out_text *o) {
    size_t first = roles[0] == ROLE_SYSTEM ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        puts_(o, "<start_of_turn>");
        puts_(o, roles[i] == ROLE_ASSISTANT ? "model" : m[i].role);
        puts_(o, "\n");
        if (i == first && first == 1) {
            put(o, m[0].content, lens[0]);
            puts_(o, "\n\n");
        }
        const char *c = m[i].content;
        size_t len = lens[i];
        trim(&c, &len);
        put(o, c, len);
        puts_(o, "<end_of_turn>\n");
    }
    if (gen) puts_(o, "<start_of_turn>model\n");
}

static void render_llama3(const cn_chat_msg *m, const size_t *lens, size_t n, bool gen, out_text *o) {
    for (size_t i = 0; i < n; i++) {
        puts_(o, "<|start_header_id|>");
        puts_(o, m[i].role);
        puts_(o, "<|end_header_id|>\n\n");
        const char *c = m[i].content;
        size_t len = lens[i];
        trim(&c, &len);
        put(o, c, len);
        puts_(o, "<|eot_id|>");
    }
    if (gen) puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render(const cn_chat_template *t, const cn_chat_msg *m, const role *roles, const size_t *lens, size_t n,
                   bool gen, out_text *o) {
    switch (t->family) {
    case CN_CHAT_CHATML: render_chatml(t, m, roles, lens, n, gen, o); break;
    case CN_CHAT_GEMMA: render_gemma(m, roles, lens, n, gen, o); break;
    case CN_CHAT_LLAMA3: render_llama3(m, lens, n, gen, o); break;
    }
}

/* Checks every message and fills roles[] and lens[]. */
static cn_status validate(const cn_chat_template *t, const cn_chat_msg *m, size_t n, role *roles, size_t *lens,
                          cn_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role) return cn_err(err, CN_STATUS_INVALID_ARG, "message %zu: NULL role", i);
        if (!m[i].content) return cn_err(err, CN_STATUS_INVALID_ARG, "message %zu: NULL content", i);
        if (strcmp(m[i].role, "system") == 0) roles[i] = ROLE_SYSTEM;
        else if (strcmp(m[i].role, "user") == 0) roles[i] = ROLE_USER;
        else if (strcmp(m[i].role, "assistant") == 0) roles[i] = ROLE_ASSISTANT;
        else
            return cn_err(err, CN_STATUS_INVALID_ARG,
                          "message %zu: unknown role '%.32s' (expected system, user or assistant)", i, m[i].role);
        lens[i] = strnlen(m[i].content, (size_t)CN_CHAT_MAX_PROMPT_BYTES + 1);
        if (lens[i] > CN_CHAT_MAX_PROMPT_BYTES)
            return cn_err(err, CN_STATUS_LIMIT, "message %zu: content longer than %u bytes", i,
                          CN_CHAT_MAX_PROMPT_BYTES);
    }
    if (t->family == CN_CHAT_GEMMA) {
        /* The Gemma 3 template's rule: after a leading system message, even turns are
         * user and odd turns are not. */
        size_t first = roles[0] == ROLE_SYSTEM ? 1 : 0;
        for (size_t i = first; i < n; i++)
            if ((roles[i] == ROLE_USER) != ((i - first) % 2 == 0))
                return cn_err(err, CN_STATUS_INVALID_ARG,
                              "message %zu (%s): the gemma template needs turns that alternate "
                              "user/assistant, starting with user",
                              i, m[i].role);
    }
    return CN_STATUS_OK;
}

static cn_status render_jinja(const cn_chat_template *t, json_t *messages, json_t *tools, bool gen, json_t *extra,
                              char **out, size_t *out_len, cn_error *err);

/* role/content messages as the JSON messages a Jinja template gets. */
static cn_status render_msgs_jinja(const cn_chat_template *t, const cn_chat_msg *msgs, size_t n, bool gen, char **out,
                                   size_t *out_len, cn_error *err) {
    json_t *arr = json_array();
    if (!arr) return cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role) {
            json_decref(arr);
            return cn_err(err, CN_STATUS_INVALID_ARG, "message %zu: NULL role", i);
        }
        if (!msgs[i].content) {
            json_decref(arr);
            return cn_err(err, CN_STATUS_INVALID_ARG, "message %zu: NULL content", i);
        }
        const size_t len = strnlen(msgs[i].content, (size_t)CN_CHAT_MAX_PROMPT_BYTES + 1);
        if (len > CN_CHAT_MAX_PROMPT_BYTES) {
            json_decref(arr);
            return cn_err(err, CN_STATUS_LIMIT, "message %zu: content longer than %u bytes", i,
                          CN_CHAT_MAX_PROMPT_BYTES);
        }
        /* json_pack refuses text that is not UTF-8 (jinja2 works on str) */
        json_t *m = json_pack("{s:s, s:s%}", "role", msgs[i].role, "content", msgs[i].content, len);
        if (!m) {
            json_decref(arr);
            return cn_err(err, CN_STATUS_INVALID_ARG, "message %zu: role or content is not valid UTF-8", i);
        }
        if (json_array_append_new(arr, m)) {
            json_decref(arr);
            return cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
        }
    }
    const cn_status st = render_jinja(t, arr, NULL, gen, NULL, out, out_len, err);
    json_decref(arr);
    return st;
}

cn_status cn_chat_render(const cn_chat_template *t, const cn_chat_msg *msgs, size_t n_msgs, bool add_generation_prompt,
                         char **out, size_t *out_len, cn_error *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out || (n_msgs > 0 && !msgs)) return cn_err(err, CN_STATUS_INVALID_ARG, "chat render: NULL argument");
    if (n_msgs == 0) return cn_err(err, CN_STATUS_INVALID_ARG, "chat render: no messages");
    if (n_msgs > CN_CHAT_MAX_MESSAGES)
        return cn_err(err, CN_STATUS_LIMIT, "chat render: %zu messages (at most %d)", n_msgs, CN_CHAT_MAX_MESSAGES);
    if (t->jinja) return render_msgs_jinja(t, msgs, n_msgs, add_generation_prompt, out, out_len, err);

    out_text o = {NULL, 0};
    role *roles = malloc(n_msgs * sizeof *roles);
    size_t *lens = malloc(n_msgs * sizeof *lens);
    cn_status st = CN_STATUS_OK;
    if (!roles || !lens) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
        goto done;
    }
    st = validate(t, msgs, n_msgs, roles, lens, err);
    if (st != CN_STATUS_OK) goto done;

    /* Each content is at most the limit and there are at most CN_CHAT_MAX_MESSAGES of
     * them, so the count cannot overflow 64 bits. */
    render(t, msgs, roles, lens, n_msgs, add_generation_prompt, &o);
    if (o.len > CN_CHAT_MAX_PROMPT_BYTES) {
        st = cn_err(err, CN_STATUS_LIMIT, "chat render: prompt of %llu bytes (at most %u)", (unsigned long long)o.len,
                    CN_CHAT_MAX_PROMPT_BYTES);
        goto done;
    }
    o.buf = malloc((size_t)o.len + 1);
    if (!o.buf) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
        goto done;
    }
    o.len = 0;
    render(t, msgs, roles, lens, n_msgs, add_generation_prompt, &o);
    o.buf[o.len] = 0;
    *out = o.buf;
    if (out_len) *out_len = (size_t)o.len;
done:
    free(roles);
    free(lens);
    return st;
}

/* --- cn_chat_render_json --- */

static cn_status field_error(cn_error *err, const char *fmt, size_t i, const char *rest) {
    return cn_err_param(err, CN_STATUS_INVALID_ARG, "messages", fmt, i, rest);
}

/* Checks one message's fields and turns tool-call arguments given as JSON text into
 * objects (a text that is not a JSON object stays as it is). */
static cn_status normalize_message(json_t *m, size_t i, cn_error *err) {
    if (!json_is_object(m)) return field_error(err, "messages[%zu]: %s", i, "expected an object");
    if (!json_is_string(json_object_get(m, "role")))
        return field_error(err, "messages[%zu].role: %s", i, "expected a string");
    json_t *content = json_object_get(m, "content");
    if (content && !json_is_string(content) && !json_is_null(content)) {
        if (!json_is_array(content))
            return field_error(err, "messages[%zu].content: %s", i, "expected a string, null or a list of parts");
        size_t k;
        json_t *part;
        json_array_foreach(content, k, part) {
            if (!json_is_object(part) || !json_is_string(json_object_get(part, "type")))
                return cn_err_param(err, CN_STATUS_INVALID_ARG, "messages",
                                    "messages[%zu].content[%zu]: expected an object with a \"type\"", i, k);
            if (!strcmp(json_string_value(json_object_get(part, "type")), "text") &&
                !json_is_string(json_object_get(part, "text")))
                return cn_err_param(err, CN_STATUS_INVALID_ARG, "messages",
                                    "messages[%zu].content[%zu].text: expected a string", i, k);
        }
    }
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls || json_is_null(calls)) return CN_STATUS_OK;
    if (!json_is_array(calls)) return field_error(err, "messages[%zu].tool_calls: %s", i, "expected a list");
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call) {
        json_t *fn = json_is_object(call) ? json_object_get(call, "function") : NULL;
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return cn_err_param(
                err, CN_STATUS_INVALID_ARG, "messages",
                "messages[%zu].tool_calls[%zu]: expected an object with a function {\"name\", \"arguments\"}", i, k);
        json_t *args = json_object_get(fn, "arguments");
        if (json_is_string(args)) {
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (json_is_object(parsed)) {
                if (json_object_set_new(fn, "arguments", parsed))
                    return cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
            } else {
                json_decref(parsed);
            }
        } else if (args && !json_is_object(args) && !json_is_null(args)) {
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "messages",
                                "messages[%zu].tool_calls[%zu].function.arguments: expected a JSON string or an object",
                                i, k);
        }
    }
    return CN_STATUS_OK;
}

static cn_status render_jinja(const cn_chat_template *t, json_t *messages, json_t *tools, bool gen, json_t *extra,
                              char **out, size_t *out_len, cn_error *err) {
    json_t *vars = json_object();
    if (!vars || json_object_set(vars, "messages", messages) ||
        json_object_set_new(vars, "tools", tools ? json_incref(tools) : json_null()) ||
        json_object_set_new(vars, "documents", json_null()) ||
        json_object_set_new(vars, "add_generation_prompt", json_boolean(gen)) ||
        json_object_set_new(vars, "bos_token", json_string(t->bos)) ||
        json_object_set_new(vars, "eos_token", json_string(t->eos)) || (extra && json_object_update(vars, extra))) {
        json_decref(vars);
        return cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
    }
    char *text = json_dumps(vars, JSON_ENCODE_ANY);
    json_decref(vars);
    if (!text) return cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
    cn_jinja_limits lim = cn_jinja_default_limits();
    lim.max_output_bytes = CN_CHAT_MAX_PROMPT_BYTES;
    lim.now_unix = t->now_unix;
    char *res = NULL;
    size_t n = 0;
    const cn_status st = cn_jinja_render(t->jinja, text, strlen(text), &lim, &res, &n, err);
    free(text);
    if (st != CN_STATUS_OK) return st;
    const size_t nb = strlen(t->bos);
    if (t->strip_bos && n >= nb && memcmp(res, t->bos, nb) == 0) { /* the tokenizer adds BOS */
        memmove(res, res + nb, n - nb + 1);
        n -= nb;
    }
    *out = res;
    if (out_len) *out_len = n;
    return CN_STATUS_OK;
}

/* The role/content renderers with JSON messages: text parts joined, anything about tools
 * refused. */
static cn_status render_json_by_hand(const cn_chat_template *t, json_t *messages, const json_t *tools, bool gen,
                                     char **out, size_t *out_len, cn_error *err) {
    const char *name = FAMILY_NAME[t->family];
    if (tools && json_array_size(tools) > 0)
        return cn_err(err, CN_STATUS_UNSUPPORTED,
                      "the %s template renders roles and contents only; tools need the model's own (Jinja) template",
                      name);
    const size_t n = json_array_size(messages);
    cn_chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    char **owned = calloc(n ? n : 1, sizeof *owned);
    cn_status st = msgs && owned ? CN_STATUS_OK : cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
    for (size_t i = 0; st == CN_STATUS_OK && i < n; i++) {
        json_t *m = json_array_get(messages, i), *content = json_object_get(m, "content");
        json_t *calls = json_object_get(m, "tool_calls");
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        if (!strcmp(msgs[i].role, "tool") || (calls && json_array_size(calls) > 0)) {
            st = cn_err(err, CN_STATUS_UNSUPPORTED,
                        "messages[%zu]: the %s template renders roles and contents only; tool calls and results need "
                        "the model's own (Jinja) template",
                        i, name);
            break;
        }
        if (json_is_string(content)) {
            msgs[i].content = json_string_value(content);
            continue;
        }
        size_t len = 0, k;
        json_t *part;
        json_array_foreach(content, k, part) {
            if (strcmp(json_string_value(json_object_get(part, "type")), "text") != 0) {
                st = cn_err(err, CN_STATUS_UNSUPPORTED, "messages[%zu].content[%zu]: the %s template renders text only",
                            i, k, name);
                break;
            }
            len += json_string_length(json_object_get(part, "text"));
        }
        if (st != CN_STATUS_OK) break;
        if (!(owned[i] = malloc(len + 1))) {
            st = cn_err(err, CN_STATUS_NO_MEMORY, "chat render: out of memory");
            break;
        }
        len = 0;
        json_array_foreach(content, k, part) {
            const json_t *tx = json_object_get(part, "text");
            memcpy(owned[i] + len, json_string_value(tx), json_string_length(tx));
            len += json_string_length(tx);
        }
        owned[i][len] = 0;
        msgs[i].content = owned[i];
    }
    if (st == CN_STATUS_OK) st = cn_chat_render(t, msgs, n, gen, out, out_len, err);
    for (size_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return st;
}

cn_status cn_chat_render_json(const cn_chat_template *t, const char *messages_json, const char *tools_json,
                              bool add_generation_prompt, const char *vars_json, char **out, size_t *out_len,
                              cn_error *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out || !messages_json) return cn_err(err, CN_STATUS_INVALID_ARG, "chat render: NULL argument");
    json_error_t je;
    json_t *messages = json_loads(messages_json, JSON_ALLOW_NUL, &je), *tools = NULL, *vars = NULL;
    cn_status st = CN_STATUS_OK;
    if (!messages) {
        st = cn_err_param(err, CN_STATUS_INVALID_ARG, "messages", "messages: invalid JSON at line %d, column %d: %s",
                          je.line, je.column, je.text);
        goto done;
    }
    if (!json_is_array(messages)) {
        st = cn_err_param(err, CN_STATUS_INVALID_ARG, "messages", "messages: expected a JSON array");
        goto done;
    }
    if (json_array_size(messages) == 0) {
        st = cn_err_param(err, CN_STATUS_INVALID_ARG, "messages", "chat render: no messages");
        goto done;
    }
    if (json_array_size(messages) > CN_CHAT_MAX_MESSAGES) {
        st = cn_err(err, CN_STATUS_LIMIT, "chat render: %zu messages (at most %d)", json_array_size(messages),
                    CN_CHAT_MAX_MESSAGES);
        goto done;
    }
    for (size_t i = 0; i < json_array_size(messages) && st == CN_STATUS_OK; i++)
        st = normalize_message(json_array_get(messages, i), i, err);
    if (st != CN_STATUS_OK) goto done;
    if (tools_json) {
        tools = json_loads(tools_json, JSON_ALLOW_NUL, &je);
        if (!tools) {
            st = cn_err_param(err, CN_STATUS_INVALID_ARG, "tools", "tools: invalid JSON at line %d, column %d: %s",
                              je.line, je.column, je.text);
            goto done;
        }
        if (!json_is_array(tools)) {
            st = cn_err_param(err, CN_STATUS_INVALID_ARG, "tools", "tools: expected a JSON array");
            goto done;
        }
    }
    if (vars_json) {
        vars = json_loads(vars_json, JSON_ALLOW_NUL, &je);
        if (!vars || !json_is_object(vars)) {
            st = vars ? cn_err(err, CN_STATUS_INVALID_ARG, "template variables: expected a JSON object")
                      : cn_err(err, CN_STATUS_INVALID_ARG, "template variables: invalid JSON at line %d, column %d: %s",
                               je.line, je.column, je.text);
            goto done;
        }
    }
    st = t->jinja ? render_jinja(t, messages, tools, add_generation_prompt, vars, out, out_len, err)
                  : render_json_by_hand(t, messages, tools, add_generation_prompt, out, out_len, err);
done:
    json_decref(messages);
    json_decref(tools);
    json_decref(vars);
    return st;
}
