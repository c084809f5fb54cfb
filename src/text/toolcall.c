/* toolcall.c — tool-call formats as data, and the reader that takes a reply apart as it
 * streams: content, reasoning (<think>...</think>), and calls, each call's name as soon
 * as it is read and its arguments byte by byte after.
 *
 * The reader is a small machine over bytes. In text it holds back the longest tail that
 * may still become a trigger (or <think> at the start), so content never carries half a
 * trigger. In a call it scans the JSON lexically (depth, strings, escapes): the call
 * object's top-level keys, the name's string, the arguments' span. The grammar writes the
 * name first; a model left unconstrained may not, and then the arguments are held until
 * the object closes. Text after a trigger that is not a call object is given back as
 * content; a reply that ends inside a call gives that call back as BROKEN text.
 *
 * It must not know models, grammars or HTTP: formats in, events out. */
#include "text/toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "core/buf.h"
#include "core/utf8.h"

/* ---- formats ---- */

static const cn_tool_spec SPECS[] = {
    /* Hermes' tags anywhere; and at the reply's start what small models write instead of
     * them: the bare call object, or the object in a fenced JSON block */
    /* clang-format off */
    [CN_TOOL_FORMAT_HERMES] = { "hermes", "arguments",
                                { { "<tool_call>", "</tool_call>", false, false }, { "```json", "```", true, false },
                                  { "", "", true, false } }, 3 },
    [CN_TOOL_FORMAT_LLAMA3] = { "llama3", "parameters",
                                { { "<|python_tag|>", "", true, false }, { "", "", true, false } }, 2 },
    [CN_TOOL_FORMAT_MISTRAL] = { "mistral", "arguments", { { "[TOOL_CALLS]", "", false, true } }, 1 },
    [CN_TOOL_FORMAT_GENERIC] = { "generic", "arguments",
                                 { { "<tool_call>", "</tool_call>", false, false }, { "```json", "```", true, false },
                                   { "", "", true, false } }, 3 },
    /* clang-format on */
};

const cn_tool_spec *cn_tool_spec_of(int f) {
    if (f <= CN_TOOL_FORMAT_NONE || f > CN_TOOL_FORMAT_GENERIC) return NULL;
    return &SPECS[f];
}

const char *cn_tool_format_name(cn_tool_format f) {
    if (f == CN_TOOL_FORMAT_NONE) return "none";
    const cn_tool_spec *s = cn_tool_spec_of((int)f);
    return s ? s->name : NULL;
}

cn_tool_format cn_tool_format_detect(const char *src) {
    if (!src) return CN_TOOL_FORMAT_GENERIC;
    if (strstr(src, "<tool_call>")) return CN_TOOL_FORMAT_HERMES;
    if (strstr(src, "[TOOL_CALLS]")) return CN_TOOL_FORMAT_MISTRAL;
    if (strstr(src, "<|python_tag|>") || (strstr(src, "<|start_header_id|>") && strstr(src, "\"parameters\"")))
        return CN_TOOL_FORMAT_LLAMA3;
    return CN_TOOL_FORMAT_GENERIC;
}

/* ---- the reader ---- */

enum { M_TEXT, M_THINK, M_CALL };
/* inside a call: where the scanner is */
enum {
    C_OPEN,   /* after the trigger: whitespace, then '{' (or '[' for an array) */
    C_ARRAY,  /* in an array of calls: whitespace, '{', ',' or ']' */
    C_OBJECT, /* inside a call object */
    C_CLOSE,  /* after the object (or array): whitespace, then the close text */
};

typedef struct {
    cn_tool_event_kind kind;
    int32_t index;
    size_t name_at; /* in the arena, or SIZE_MAX */
    size_t at, len; /* text in the arena */
} pending_ev;

struct cn_tool_reader {
    const cn_tool_spec *spec;
    bool think;
    int mode;
    bool at_start; /* nothing but whitespace in the reply so far (or since </think>) */
    cn_buf hold;   /* text (or thought) not yet given out */
    /* the call being read */
    const cn_tool_trigger *trig;
    cn_buf call;          /* its text from the trigger on */
    size_t call_open_len; /* the trigger's bytes at the start of call */
    int phase;
    int depth; /* JSON nesting inside the call object (1: its top level) */
    bool in_str, esc;
    bool in_array;      /* the trigger opened an array of calls */
    int key_state;      /* top level: 0 expect key, 1 in key, 2 expect ':', 3 expect value, 4 in value, 5 after */
    size_t key_at;      /* the key's text in call (after the quote) */
    char key[32];       /* the last top-level key, cut to 31 bytes */
    int val_kind;       /* 1 name, 2 arguments, 0 other */
    size_t val_at;      /* the value's first byte in call */
    size_t obj_at;      /* the call object's '{' in call */
    size_t close_at;    /* bytes of close matched */
    bool named;         /* CALL sent for this object */
    bool args_streamed; /* ARGS sent for this object (streaming as it came) */
    bool args_seen;
    size_t args_at, args_len; /* the arguments' span in call, once whole */
    size_t args_sent;         /* bytes of arguments sent so far */
    int32_t index;            /* this call's number */
    int32_t n_calls;          /* calls whose object closed */
    int32_t first_call;       /* n_calls when this trigger was read */
    char *name;               /* the current call's decoded name */
    /* events of the current feed */
    pending_ev *ev;
    size_t n_ev, cap_ev;
    cn_buf arena;
    cn_tool_event *out;
    size_t cap_out;
    bool oom;
};

cn_status cn_tool_reader_new(cn_tool_format f, bool think, bool in_think, cn_tool_reader **out, cn_error *err) {
    *out = NULL;
    const cn_tool_spec *s = cn_tool_spec_of((int)f);
    if (f != CN_TOOL_FORMAT_NONE && !s)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "format", "unknown tool-call format %d", (int)f);
    cn_tool_reader *r = calloc(1, sizeof *r);
    if (!r) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory making a tool-call reader");
    r->spec = s;
    r->think = think || in_think;
    r->mode = in_think ? M_THINK : M_TEXT;
    r->at_start = true;
    *out = r;
    return CN_STATUS_OK;
}

void cn_tool_reader_free(cn_tool_reader *r) {
    if (!r) return;
    free(r->hold.p);
    free(r->call.p);
    free(r->name);
    free(r->ev);
    free(r->arena.p);
    free(r->out);
    free(r);
}

/* Appends an event with text s[0..n) (and a name); adjacent CONTENT / REASONING / ARGS
 * of the same call merge. */
static void emit(cn_tool_reader *r, cn_tool_event_kind k, int32_t index, const char *name, const char *s, size_t n) {
    if (r->oom) return;
    if ((k == CN_TOOL_EV_CONTENT || k == CN_TOOL_EV_REASONING) && n == 0) return;
    if (r->n_ev && k != CN_TOOL_EV_CALL && k != CN_TOOL_EV_BROKEN) {
        pending_ev *last = &r->ev[r->n_ev - 1];
        if (last->kind == k && last->index == index && last->at + last->len == r->arena.n) {
            if (!cn_buf_put(&r->arena, s, n)) r->oom = true;
            last->len += n;
            return;
        }
    }
    if (!CN_GROW(r->ev, r->cap_ev, r->n_ev + 1)) {
        r->oom = true;
        return;
    }
    pending_ev e = {k, index, SIZE_MAX, 0, 0};
    if (name) {
        e.name_at = r->arena.n;
        if (!cn_buf_put(&r->arena, name, strlen(name) + 1)) r->oom = true;
    }
    e.at = r->arena.n;
    e.len = n;
    if (n && !cn_buf_put(&r->arena, s, n)) r->oom = true;
    r->ev[r->n_ev++] = e;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The length of the longest tail of s[0..n) that is a proper prefix of w. */
static size_t tail_prefix(const char *s, size_t n, const char *w) {
    size_t wl = strlen(w);
    for (size_t k = wl ? wl - 1 : 0; k > 0; k--)
        if (k <= n && memcmp(s + n - k, w, k) == 0) return k;
    return 0;
}

static bool ends_with(const char *s, size_t n, const char *w) {
    size_t wl = strlen(w);
    return wl && wl <= n && memcmp(s + n - wl, w, wl) == 0;
}

static void start_call(cn_tool_reader *r, const cn_tool_trigger *t, const char *open, size_t n_open) {
    r->mode = M_CALL;
    r->trig = t;
    r->call.n = 0;
    if (!cn_buf_put(&r->call, open, n_open)) r->oom = true;
    r->call_open_len = n_open;
    r->phase = C_OPEN;
    r->in_array = false;
    r->named = false;
    r->first_call = r->n_calls;
    r->index = r->n_calls;
}

static void object_begin(cn_tool_reader *r) {
    r->phase = C_OBJECT;
    r->depth = 1;
    r->in_str = r->esc = false;
    r->key_state = 0;
    r->obj_at = r->call.n - 1;
    r->named = r->args_streamed = r->args_seen = false;
    r->args_sent = 0;
    r->index = r->n_calls;
    free(r->name);
    r->name = NULL;
}

/* The value of the four hex digits at s, or -1 when one is not a hex digit. */
static int32_t hex4(const char *s) {
    int32_t v = 0;
    for (int j = 0; j < 4; j++) {
        const char h = s[j];
        const int d = h >= '0' && h <= '9'   ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                             : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes the JSON string s[0..n) (between the quotes) into a new string; NULL if it is
 * not a valid string without NUL. */
static char *json_unquote(const char *s, size_t n) {
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\') {
            if ((unsigned char)c < 0x20) goto bad;
            o[k++] = c;
            continue;
        }
        if (++i >= n) goto bad;
        switch (s[i]) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            if (i + 4 >= n) goto bad;
            int32_t cp = hex4(s + i + 1);
            i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u') {
                const int32_t lo = hex4(s + i + 3);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp <= 0 || (cp >= 0xD800 && cp < 0xE000)) goto bad;
            k += cn_utf8_encode((uint32_t)cp, o + k);
            break;
        }
        default: goto bad;
        }
    }
    o[k] = 0;
    return o;
bad:
    free(o);
    return NULL;
}

/* The call text after the trigger was no call: all of it becomes text again. */
static void give_back(cn_tool_reader *r);

/* The call object closed at call[call.n - 1]: send what is left of it. */
static void object_end(cn_tool_reader *r) {
    if (!r->name) {
        /* no name: not a call */
        give_back(r);
        return;
    }
    if (!r->named) {
        emit(r, CN_TOOL_EV_CALL, r->index, r->name, NULL, 0);
        r->named = true;
    }
    if (!r->args_seen) {
        emit(r, CN_TOOL_EV_ARGS, r->index, NULL, "{}", 2);
    } else if (!r->args_streamed) {
        const char *a = r->call.p + r->args_at;
        size_t n = r->args_len;
        if (n && a[0] == '"') {
            /* arguments written as a JSON string holding JSON: its decoded text */
            char *d = json_unquote(a + 1, n - 2);
            if (d) {
                emit(r, CN_TOOL_EV_ARGS, r->index, NULL, d, strlen(d));
                free(d);
            } else {
                emit(r, CN_TOOL_EV_ARGS, r->index, NULL, a, n);
            }
        } else {
            emit(r, CN_TOOL_EV_ARGS, r->index, NULL, a, n);
        }
    }
    r->n_calls++;
    r->phase = r->in_array ? C_ARRAY : C_CLOSE;
    r->close_at = 0;
}

static void text_byte(cn_tool_reader *r, char c);

static void give_back(cn_tool_reader *r) {
    if (r->named || r->n_calls > r->first_call) {
        /* a call went out already: the rest of this text is a broken call */
        emit(r, CN_TOOL_EV_BROKEN, r->index, NULL, r->call.p, r->call.n);
        r->mode = M_TEXT;
        r->at_start = false;
        r->call.n = 0;
        return;
    }
    size_t n = r->call.n;
    char *t = malloc(n + 1);
    if (!t) {
        r->oom = true;
        return;
    }
    memcpy(t, r->call.p, n);
    r->mode = M_TEXT;
    r->at_start = false;
    r->call.n = 0;
    /* the trigger is text now; what follows it may hold another trigger */
    emit(r, CN_TOOL_EV_CONTENT, 0, NULL, t, r->call_open_len);
    for (size_t i = r->call_open_len; i < n; i++) text_byte(r, t[i]);
    free(t);
}

/* One byte of a call object at depth >= 1. */
static void object_byte(cn_tool_reader *r, char c) {
    size_t pos = r->call.n - 1; /* c is call.p[pos] */
    int d0 = r->depth;
    if (r->in_str) {
        if (r->esc) r->esc = false;
        else if (c == '\\') r->esc = true;
        else if (c == '"') r->in_str = false;
    } else if (c == '"') {
        r->in_str = true;
    } else if (c == '{' || c == '[') {
        r->depth++;
    } else if (c == '}' || c == ']') {
        r->depth--;
    }
    if (d0 == 1 || r->depth <= 1) {
        /* the top level of the call object */
        switch (r->key_state) {
        case 0: /* expect a key */
            if (c == '"') {
                r->key_state = 1;
                r->key_at = pos + 1;
            } else if (c == '}') {
                object_end(r);
                return;
            } else if (!is_ws(c) && c != ',') {
                give_back(r);
                return;
            }
            break;
        case 1: /* in the key */
            if (!r->in_str) {
                size_t kl = pos - r->key_at;
                char *k = json_unquote(r->call.p + r->key_at, kl);
                snprintf(r->key, sizeof r->key, "%s", k ? k : "");
                free(k);
                r->key_state = 2;
            }
            break;
        case 2:
            if (c == ':') r->key_state = 3;
            else if (!is_ws(c)) {
                give_back(r);
                return;
            }
            break;
        case 3: /* the value's first byte */
            if (is_ws(c)) break;
            r->val_at = pos;
            r->val_kind = strcmp(r->key, "name") == 0 ? 1 : strcmp(r->key, r->spec->args_key) == 0 ? 2 : 0;
            if (r->val_kind == 2) {
                r->args_seen = true;
                r->args_streamed = r->named && c != '"';
                r->args_sent = 0;
            }
            r->key_state = 4;
            break;
        case 4: {
            /* the value ends: a string at its closing quote, a nested value when its
             * bracket brings the depth back to 1, a scalar before a ',', '}' or blank */
            char v0 = r->call.p[r->val_at];
            size_t end;
            if (v0 == '"') {
                if (r->in_str) break;
                end = pos + 1;
            } else if (v0 == '{' || v0 == '[') {
                if (r->depth > 1 || r->in_str) break;
                end = pos + 1;
            } else {
                if (c != ',' && c != '}' && !is_ws(c)) break;
                end = pos;
            }
            if (r->val_kind == 1) {
                char *nm = v0 == '"' ? json_unquote(r->call.p + r->val_at + 1, end - r->val_at - 2) : NULL;
                if (nm && !r->name) {
                    r->name = nm;
                    emit(r, CN_TOOL_EV_CALL, r->index, r->name, NULL, 0);
                    r->named = true;
                } else {
                    free(nm);
                }
            } else if (r->val_kind == 2) {
                r->args_at = r->val_at;
                r->args_len = end - r->val_at;
                if (r->args_streamed && r->args_len > r->args_sent) {
                    emit(r, CN_TOOL_EV_ARGS, r->index, NULL, r->call.p + r->val_at + r->args_sent,
                         r->args_len - r->args_sent);
                    r->args_sent = r->args_len;
                }
            }
            r->key_state = 5;
            if (end == pos) goto after_value; /* a scalar: this byte comes after it */
            return;
        }
        case 5:
        after_value:
            if (c == ',') r->key_state = 0;
            else if (c == '}') {
                object_end(r);
                return;
            } else if (!is_ws(c)) {
                give_back(r);
                return;
            }
            break;
        }
    }
    if (r->key_state == 4 && r->val_kind == 2 && r->args_streamed) {
        /* stream the arguments as they come */
        size_t have = r->call.n - r->val_at;
        if (have > r->args_sent) {
            emit(r, CN_TOOL_EV_ARGS, r->index, NULL, r->call.p + r->val_at + r->args_sent, have - r->args_sent);
            r->args_sent = have;
        }
    }
}

static void call_byte(cn_tool_reader *r, char c) {
    if (!cn_buf_put(&r->call, &c, 1)) {
        r->oom = true;
        return;
    }
    switch (r->phase) {
    case C_OPEN:
        if (is_ws(c)) return;
        if (r->trig->array && c == '[') {
            r->in_array = true;
            r->phase = C_ARRAY;
            return;
        }
        if (!r->trig->array && c == '{') {
            object_begin(r);
            return;
        }
        give_back(r);
        return;
    case C_ARRAY:
        if (is_ws(c) || c == ',') return;
        if (c == '{') {
            object_begin(r);
            return;
        }
        if (c == ']') {
            r->phase = C_CLOSE;
            r->close_at = 0;
            r->in_array = false;
            if (!r->trig->close[0]) {
                r->mode = M_TEXT;
                r->at_start = false;
            }
            return;
        }
        if (r->n_calls > r->index) {
            /* calls went out already: what follows is text */
            r->mode = M_TEXT;
            r->at_start = false;
            text_byte(r, c);
            return;
        }
        give_back(r);
        return;
    case C_OBJECT: object_byte(r, c); return;
    case C_CLOSE: {
        /* after a call, another may follow (as the grammar lets calls follow calls): the
         * reply is at a start again */
        const char *cl = r->trig->close;
        size_t cn = strlen(cl);
        if (cn == 0) {
            r->mode = M_TEXT;
            r->at_start = true;
            text_byte(r, c);
            return;
        }
        if (r->close_at == 0 && is_ws(c)) return;
        if (c == cl[r->close_at]) {
            if (++r->close_at == cn) {
                r->mode = M_TEXT;
                r->at_start = true;
            }
            return;
        }
        /* no close: the call stands; what was read of the close and this byte are text */
        r->mode = M_TEXT;
        r->at_start = false;
        for (size_t i = 0; i < r->close_at; i++) text_byte(r, cl[i]);
        text_byte(r, c);
        return;
    }
    }
}

/* Gives out the held text that can no longer become a trigger (all of it when flush). */
static void text_release(cn_tool_reader *r, bool flush) {
    size_t keep = 0;
    if (!flush && r->spec) {
        for (int t = 0; t < r->spec->n_trig; t++) {
            const cn_tool_trigger *tr = &r->spec->trig[t];
            if (!tr->open[0] || (tr->at_start && !r->at_start)) continue;
            size_t k = tail_prefix(r->hold.p, r->hold.n, tr->open);
            if (k > keep) keep = k;
        }
    }
    if (!flush && r->think && r->at_start) {
        size_t k = tail_prefix(r->hold.p, r->hold.n, "<think>");
        if (k > keep) keep = k;
    }
    size_t out = r->hold.n - keep;
    if (out) {
        emit(r, CN_TOOL_EV_CONTENT, 0, NULL, r->hold.p, out);
        memmove(r->hold.p, r->hold.p + out, keep);
        r->hold.n = keep;
    }
}

static void text_byte(cn_tool_reader *r, char c) {
    if (r->mode == M_CALL) {
        call_byte(r, c);
        return;
    }
    if (r->mode == M_THINK) {
        if (!cn_buf_put(&r->hold, &c, 1)) {
            r->oom = true;
            return;
        }
        if (ends_with(r->hold.p, r->hold.n, "</think>")) {
            emit(r, CN_TOOL_EV_REASONING, 0, NULL, r->hold.p, r->hold.n - 8);
            r->hold.n = 0;
            r->mode = M_TEXT;
            r->at_start = true;
            return;
        }
        size_t keep = tail_prefix(r->hold.p, r->hold.n, "</think>");
        size_t out = r->hold.n - keep;
        if (out) {
            emit(r, CN_TOOL_EV_REASONING, 0, NULL, r->hold.p, out);
            memmove(r->hold.p, r->hold.p + out, keep);
            r->hold.n = keep;
        }
        return;
    }
    /* text: leading whitespace waits for what follows it */
    if (r->at_start && is_ws(c)) {
        if (!cn_buf_put(&r->hold, &c, 1)) r->oom = true;
        return;
    }
    if (!cn_buf_put(&r->hold, &c, 1)) {
        r->oom = true;
        return;
    }
    if (r->at_start) {
        /* the first byte after the reply's whitespace */
        size_t ws = 0;
        while (ws < r->hold.n && is_ws(r->hold.p[ws])) ws++;
        const char *rest = r->hold.p + ws;
        size_t n_rest = r->hold.n - ws;
        if (r->think && n_rest == 7 && memcmp(rest, "<think>", 7) == 0) {
            r->hold.n = 0;
            r->mode = M_THINK;
            return;
        }
        if (r->spec)
            for (int t = 0; t < r->spec->n_trig; t++) {
                const cn_tool_trigger *tr = &r->spec->trig[t];
                if (!tr->at_start) continue;
                if (!tr->open[0] && n_rest == 1 && rest[0] == '{') {
                    r->hold.n = 0;
                    start_call(r, tr, "", 0);
                    call_byte(r, '{');
                    return;
                }
                if (tr->open[0] && n_rest == strlen(tr->open) && memcmp(rest, tr->open, n_rest) == 0) {
                    r->hold.n = 0;
                    start_call(r, tr, tr->open, n_rest);
                    return;
                }
            }
        /* still a possible start of <think> or an at-start trigger? */
        bool maybe = r->think && n_rest < 7 && memcmp(rest, "<think>", n_rest) == 0;
        if (r->spec)
            for (int t = 0; t < r->spec->n_trig && !maybe; t++) {
                const cn_tool_trigger *tr = &r->spec->trig[t];
                if (!tr->open[0]) continue;
                maybe = n_rest < strlen(tr->open) && memcmp(rest, tr->open, n_rest) == 0;
            }
        if (maybe) return;
        r->at_start = false;
    }
    /* a trigger anywhere */
    if (r->spec)
        for (int t = 0; t < r->spec->n_trig; t++) {
            const cn_tool_trigger *tr = &r->spec->trig[t];
            if (!tr->open[0] || tr->at_start) continue;
            if (ends_with(r->hold.p, r->hold.n, tr->open)) {
                size_t ol = strlen(tr->open);
                emit(r, CN_TOOL_EV_CONTENT, 0, NULL, r->hold.p, r->hold.n - ol);
                r->hold.n = 0;
                start_call(r, tr, tr->open, ol);
                return;
            }
        }
    text_release(r, false);
}

cn_status cn_tool_reader_feed(cn_tool_reader *r, const char *text, size_t n, bool final, const cn_tool_event **ev,
                              size_t *n_ev, cn_error *err) {
    *ev = NULL;
    *n_ev = 0;
    r->n_ev = 0;
    r->arena.n = 0;
    for (size_t i = 0; i < n && !r->oom; i++) {
        text_byte(r, text[i]);
        if (r->mode == M_CALL && r->call.n > CN_TOOL_MAX_CALL_BYTES)
            return cn_err(err, CN_STATUS_LIMIT, "a tool call longer than %u bytes", CN_TOOL_MAX_CALL_BYTES);
    }
    if (final && !r->oom) {
        if (r->mode == M_CALL) {
            if (r->phase == C_CLOSE || (r->phase == C_ARRAY && r->n_calls > r->first_call)) {
                /* the call (or array) is whole, only its close is missing */
                r->mode = M_TEXT;
            } else {
                give_back(r); /* text again, or BROKEN once a call went out */
            }
        }
        if (r->mode == M_THINK) {
            emit(r, CN_TOOL_EV_REASONING, 0, NULL, r->hold.p, r->hold.n);
            r->hold.n = 0;
        } else {
            text_release(r, true);
        }
    }
    if (r->oom) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory reading tool calls");
    if (!CN_GROW(r->out, r->cap_out, r->n_ev))
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory reading tool calls");
    for (size_t i = 0; i < r->n_ev; i++) {
        const pending_ev *p = &r->ev[i];
        r->out[i] = (cn_tool_event){p->kind, p->index, p->name_at == SIZE_MAX ? NULL : r->arena.p + p->name_at,
                                    r->arena.p ? r->arena.p + p->at : "", p->len};
    }
    *ev = r->out;
    *n_ev = r->n_ev;
    return CN_STATUS_OK;
}
