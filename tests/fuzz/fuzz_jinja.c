/* fuzz_jinja.c — fuzz entry for the Jinja interpreter (src/jinja): parsing and
 * rendering a template under small budgets.
 *
 * Input: a template text, then optionally a NUL byte and a JSON object of variables;
 * without one (or when it is not a JSON object) the template renders with a fixed chat
 * conversation (messages with tool calls, tools, add_generation_prompt, bos_token).
 * Checked: parsing succeeds, or fails with a message and no template; rendering succeeds
 * with a NUL-terminated text of *out_len bytes within the output budget, the same text
 * when rendered again (no hidden state, the clock fixed), or fails with a message,
 * nothing allocated, and a status that says what went wrong (a template error, a spent
 * budget, no memory). The budgets are small so that loops and recursion end quickly.
 * The template sits in a buffer of exactly its size, so the ASan build catches a read
 * one byte past the end. Built by `make fuzz`; the unit tests replay its corpus. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "jinja/jinja.h"

int fuzz_jinja_one(const uint8_t *data, size_t size);

static const char fuzz_jinja_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3}";

static bool fuzz_jinja_render(const cn_jinja *t, const char *vars, size_t n, const cn_jinja_limits *lim, char **out,
                              size_t *len) {
    cn_error err = {0};
    *out = (char *)1;
    *len = 7;
    const cn_status st = cn_jinja_render(t, vars, n, lim, out, len, &err);
    if (st != CN_STATUS_OK) {
        if (*out || *len || !err.msg[0]) abort();
        if (st != CN_STATUS_INVALID_ARG && st != CN_STATUS_LIMIT && st != CN_STATUS_NO_MEMORY) abort();
        return false;
    }
    if (!*out || (*out)[*len] != 0 || *len > lim->max_output_bytes) abort();
    return true;
}

int fuzz_jinja_one(const uint8_t *data, size_t size) {
    const uint8_t *z = memchr(data, 0, size);
    const size_t tlen = z ? (size_t)(z - data) : size;
    char *src = malloc(tlen ? tlen : 1);
    if (!src) abort();
    memcpy(src, data, tlen);
    cn_jinja *t = (cn_jinja *)1;
    cn_error err = {0};
    const cn_status st = cn_jinja_parse(src, tlen, &t, &err);
    free(src);
    if (st != CN_STATUS_OK) {
        if (t || !err.msg[0]) abort();
        return -1;
    }
    const char *vars = fuzz_jinja_vars;
    size_t vlen = sizeof fuzz_jinja_vars - 1;
    char *own = NULL;
    if (z && (size_t)(z - data) + 1 < size) {
        vlen = size - tlen - 1;
        own = malloc(vlen);
        if (!own) abort();
        memcpy(own, z + 1, vlen);
        vars = own;
    }
    cn_jinja_limits lim = cn_jinja_default_limits();
    lim.max_output_bytes = 1 << 16;
    lim.max_steps = 20000;
    lim.max_depth = 64;
    lim.now_unix = 1700000000;
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc = -1;
    if (fuzz_jinja_render(t, vars, vlen, &lim, &a, &na)) {
        if (!fuzz_jinja_render(t, vars, vlen, &lim, &b, &nb) || na != nb || memcmp(a, b, na) != 0) abort();
        rc = 0;
    } else if (own) { /* variables that are not a JSON object: the fixed ones */
        if (fuzz_jinja_render(t, fuzz_jinja_vars, sizeof fuzz_jinja_vars - 1, &lim, &a, &na)) rc = 0;
    }
    free(a);
    free(b);
    free(own);
    cn_jinja_free(t);
    return rc;
}

FUZZ_ENTRY(fuzz_jinja_one)
