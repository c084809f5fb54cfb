/* chat.c — chat template families recognized from their Jinja text and rendered in C.
 *
 * Each family reproduces one reference template (the expected strings in
 * tests/unit/test_chat.c were produced by jinja2 from those templates):
 *   ChatML  SmolLM2-135M-Instruct's tokenizer.chat_template (Qwen2.5's has the same shape);
 *   Gemma   google/gemma-3-*-it's, text contents only (no image parts);
 *   Llama-3 Meta-Llama-3-8B-Instruct's (later 3.x templates add a dated system header and
 *           tool calls, which are not reproduced; llama.cpp's built-in llama3 format does
 *           the same).
 * Rendering runs twice over the messages, first counting bytes, then writing, so limits
 * are checked before anything is allocated. No Jinja is interpreted, so a template's text
 * can never run code or loop here: detection only searches it for fixed markers. */
#include "text/chat.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct cn_chat_template {
    cn_chat_family family;
    char *default_system; /* ChatML only; NULL if none */
};

static const char *const FAMILY_NAME[] = {"chatml", "gemma", "llama3"};
static const char *const END_OF_TURN[] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>"};

static cn_status make(cn_chat_family family, const char *sys, size_t sys_len,
                      cn_chat_template **out, cn_error *err) {
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
        for (const char *c = q; c < e && literal; c++)
            literal = !strchr("'\"{}\\", *c);
        if (!literal) continue;
        *sys = q;
        *sys_len = (size_t)(e - q);
        return true;
    }
    return false;
}

cn_status cn_chat_template_detect(const char *jinja, size_t len, cn_chat_template **out,
                                  cn_error *err) {
    if (out) *out = NULL;
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "chat template: NULL argument");
    if (!jinja || len == 0)
        return cn_err(err, CN_STATUS_UNSUPPORTED,
                      "the model has no chat template (tokenizer.chat_template); "
                      "pass --chat-template NAME, one of: %s", CN_CHAT_TEMPLATE_NAMES);
    if (memmem(jinja, len, "<|im_start|>", 12)) {
        const char *sys = NULL;
        size_t sys_len = 0;
        chatml_default_system(jinja, len, &sys, &sys_len);
        return make(CN_CHAT_CHATML, sys, sys_len, out, err);
    }
    if (memmem(jinja, len, "<start_of_turn>", 15)) return make(CN_CHAT_GEMMA, NULL, 0, out, err);
    if (memmem(jinja, len, "<|start_header_id|>", 19))
        return make(CN_CHAT_LLAMA3, NULL, 0, out, err);
    return cn_err(err, CN_STATUS_UNSUPPORTED,
                  "unrecognized chat template in the model (not ChatML, Gemma or Llama-3); "
                  "pass --chat-template NAME, one of: %s", CN_CHAT_TEMPLATE_NAMES);
}

void cn_chat_template_free(cn_chat_template *t) {
    if (!t) return;
    free(t->default_system);
    free(t);
}

cn_chat_family cn_chat_template_family(const cn_chat_template *t) { return t->family; }
const char *cn_chat_template_name(const cn_chat_template *t) { return FAMILY_NAME[t->family]; }
const char *cn_chat_template_end_of_turn(const cn_chat_template *t) {
    return END_OF_TURN[t->family];
}
const char *cn_chat_template_default_system(const cn_chat_template *t) {
    return t->default_system;
}
bool cn_chat_template_bos_in_template(const cn_chat_template *t) {
    return t->family != CN_CHAT_CHATML;
}

/* --- trimming as Python's str.strip() (what Jinja's trim filter calls) --- */

static bool py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
           cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Decodes the well-formed UTF-8 character at s[0..n) (n >= 1); returns its length, or 0
 * if the bytes there are not one (then it is not whitespace). */
static size_t utf8_char(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t len;
    uint32_t c, min;
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if ((s[0] & 0xE0) == 0xC0) { len = 2; c = s[0] & 0x1F; min = 0x80; }
    else if ((s[0] & 0xF0) == 0xE0) { len = 3; c = s[0] & 0x0F; min = 0x800; }
    else if ((s[0] & 0xF8) == 0xF0) { len = 4; c = s[0] & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[k] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

static void trim(const char **s, size_t *n) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t a = 0, b = *n;
    uint32_t cp;
    size_t len;
    while (a < b && (len = utf8_char(p + a, b - a, &cp)) > 0 && py_space(cp)) a += len;
    while (b > a) {
        size_t start = b - 1; /* back to the lead byte of the last character */
        while (start > a && b - start < 4 && (p[start] & 0xC0) == 0x80) start--;
        len = utf8_char(p + start, b - start, &cp);
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
static void render_chatml(const cn_chat_template *t, const cn_chat_msg *m, const role *roles,
                          const size_t *lens, size_t n, bool gen, out_text *o) {
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

static void render_gemma(const cn_chat_msg *m, const role *roles, const size_t *lens, size_t n,
                         bool gen, out_text *o) {
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

static void render_llama3(const cn_chat_msg *m, const size_t *lens, size_t n, bool gen,
                          out_text *o) {
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

static void render(const cn_chat_template *t, const cn_chat_msg *m, const role *roles,
                   const size_t *lens, size_t n, bool gen, out_text *o) {
    switch (t->family) {
    case CN_CHAT_CHATML: render_chatml(t, m, roles, lens, n, gen, o); break;
    case CN_CHAT_GEMMA: render_gemma(m, roles, lens, n, gen, o); break;
    case CN_CHAT_LLAMA3: render_llama3(m, lens, n, gen, o); break;
    }
}

/* Checks every message and fills roles[] and lens[]. */
static cn_status validate(const cn_chat_template *t, const cn_chat_msg *m, size_t n,
                          role *roles, size_t *lens, cn_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role) return cn_err(err, CN_STATUS_INVALID_ARG, "message %zu: NULL role", i);
        if (!m[i].content)
            return cn_err(err, CN_STATUS_INVALID_ARG, "message %zu: NULL content", i);
        if (strcmp(m[i].role, "system") == 0) roles[i] = ROLE_SYSTEM;
        else if (strcmp(m[i].role, "user") == 0) roles[i] = ROLE_USER;
        else if (strcmp(m[i].role, "assistant") == 0) roles[i] = ROLE_ASSISTANT;
        else
            return cn_err(err, CN_STATUS_INVALID_ARG,
                          "message %zu: unknown role '%.32s' (expected system, user or assistant)",
                          i, m[i].role);
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
                              "user/assistant, starting with user", i, m[i].role);
    }
    return CN_STATUS_OK;
}

cn_status cn_chat_render(const cn_chat_template *t, const cn_chat_msg *msgs, size_t n_msgs,
                         bool add_generation_prompt, char **out, size_t *out_len,
                         cn_error *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out || (n_msgs > 0 && !msgs))
        return cn_err(err, CN_STATUS_INVALID_ARG, "chat render: NULL argument");
    if (n_msgs == 0) return cn_err(err, CN_STATUS_INVALID_ARG, "chat render: no messages");
    if (n_msgs > CN_CHAT_MAX_MESSAGES)
        return cn_err(err, CN_STATUS_LIMIT, "chat render: %zu messages (at most %d)", n_msgs,
                      CN_CHAT_MAX_MESSAGES);

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
        st = cn_err(err, CN_STATUS_LIMIT, "chat render: prompt of %llu bytes (at most %u)",
                    (unsigned long long)o.len, CN_CHAT_MAX_PROMPT_BYTES);
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

/* Until the Jinja renderer: hand-written families render no tools, calls or variables. */
cn_status cn_chat_render_json(const cn_chat_template *t, const char *messages_json, const char *tools_json,
                              bool add_generation_prompt, const char *vars_json, char **out, size_t *out_len,
                              cn_error *err) {
    (void)t;
    (void)messages_json;
    (void)tools_json;
    (void)add_generation_prompt;
    (void)vars_json;
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    return cn_err(err, CN_STATUS_UNSUPPORTED, "this chat template renders no tools, tool calls or template variables");
}

const char *cn_chat_template_source(const cn_chat_template *t) {
    (void)t;
    return NULL;
}
