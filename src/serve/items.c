/* items.c — a reply as items (reasoning, text, calls) for the Anthropic and Responses
 * writers: the chat deltas oai_reply makes are read in order, each kind of delta grows
 * the open item of its kind or ends it and begins another; every change is passed to the
 * writer of the request's API (anthropic.c, responses.c), which makes its events.
 *
 * Whitespace rule (as oai_reply_message drops content that is only whitespace beside
 * calls): content outside a text item that is only whitespace is held; it begins a text
 * item only when more content follows, or, at the end, when the reply made no call.
 * Pure translation: no sockets, no threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/apis.h"
#include "serve/json_mem.h"

void api_event(api_writer *w, json_t *events, json_t *ev) {
    if (events && (!ev || json_array_append(events, ev))) w->oom = true; /* a lost event: the stream is cut */
    json_decref(ev);
}

void api_request_free(api_request *ar) {
    if (!ar) return;
    for (int32_t i = 0; i < ar->n_stops; i++) free(ar->stops[i]);
    json_decref(ar->echo);
    memset(ar, 0, sizeof *ar);
}

void api_writer_init(api_writer *w, const api_request *ar) {
    memset(w, 0, sizeof *w);
    w->ar = ar;
}

void api_writer_free(api_writer *w) {
    if (!w) return;
    for (int32_t i = 0; i < w->n_items; i++) {
        free(w->items[i].text);
        free(w->items[i].name);
    }
    free(w->items);
    free(w->ws);
    memset(w, 0, sizeof *w);
}

static bool grow(char **p, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t nc = *cap ? *cap : 64;
        while (nc < *n + len + 1) nc *= 2;
        char *q = realloc(*p, nc);
        if (!q) return false;
        *p = q;
        *cap = nc;
    }
    if (len) memcpy(*p + *n, s, len);
    *n += len;
    (*p)[*n] = 0;
    return true;
}

static void dispatch(api_writer *w, const api_meta *m, api_item_ev ev, int32_t i, const char *text, size_t n,
                     json_t *events) {
    if (w->ar->kind == API_ANTHROPIC) ant_item(w, m, ev, i, text, n, events);
    else resp_item(w, m, ev, i, text, n, events);
}

static void end_open(api_writer *w, const api_meta *m, json_t *events) {
    if (!w->open) return;
    w->open = false;
    dispatch(w, m, API_ITEM_END, w->n_items - 1, NULL, 0, events);
}

/* A new open item of kind k (the open one ended first); NULL when memory ran out. */
static api_item *begin(api_writer *w, const api_meta *m, api_item_kind k, json_t *events) {
    end_open(w, m, events);
    if (w->n_items == w->cap_items) {
        int32_t cap = w->cap_items ? 2 * w->cap_items : 4;
        api_item *q = realloc(w->items, (size_t)cap * sizeof *q);
        if (!q) return w->oom = true, NULL;
        w->items = q;
        w->cap_items = cap;
    }
    api_item *it = &w->items[w->n_items++];
    memset(it, 0, sizeof *it);
    it->kind = k;
    w->open = true;
    return it;
}

static void add(api_writer *w, const api_meta *m, const char *s, size_t n, json_t *events) {
    api_item *it = &w->items[w->n_items - 1];
    if (n == 0) return;
    if (!grow(&it->text, &it->n, &it->cap, s, n)) {
        w->oom = true;
        return;
    }
    dispatch(w, m, API_ITEM_GROW, w->n_items - 1, s, n, events);
}

static api_item *open_item(api_writer *w) { return w->open ? &w->items[w->n_items - 1] : NULL; }

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') return false;
    return true;
}

void api_writer_open(api_writer *w, const api_meta *m, json_t *events) {
    if (w->ar->kind == API_ANTHROPIC) ant_open(w, m, events);
    else resp_open(w, m, events);
}

void api_writer_feed(api_writer *w, const api_meta *m, json_t *delta, const oai_reply *rp, json_t *events) {
    json_t *content = json_object_get(delta, "content"), *reasoning = json_object_get(delta, "reasoning_content");
    json_t *calls = json_object_get(delta, "tool_calls");
    api_item *it = open_item(w);
    if (json_is_string(content)) {
        const char *s = json_string_value(content);
        const size_t n = json_string_length(content);
        if (it && it->kind == API_ITEM_TEXT) {
            add(w, m, s, n, events);
        } else if (it && it->kind == API_ITEM_CALL && rp && it->call_index < rp->n_calls &&
                   rp->calls[it->call_index].broken) {
            it->broken = true; /* the call's own text, given back as content: it stays a call */
        } else if (blank(s, n)) {
            if (!grow(&w->ws, &w->n_ws, &w->cap_ws, s, n)) w->oom = true;
        } else if (begin(w, m, API_ITEM_TEXT, events)) {
            dispatch(w, m, API_ITEM_BEGIN, w->n_items - 1, NULL, 0, events);
            if (w->n_ws) add(w, m, w->ws, w->n_ws, events);
            w->n_ws = 0;
            add(w, m, s, n, events);
        }
    } else if (json_is_string(reasoning)) {
        if (!(it && it->kind == API_ITEM_REASONING)) {
            if (!begin(w, m, API_ITEM_REASONING, events)) return;
            dispatch(w, m, API_ITEM_BEGIN, w->n_items - 1, NULL, 0, events);
        }
        add(w, m, json_string_value(reasoning), json_string_length(reasoning), events);
    } else if (json_is_array(calls)) {
        json_t *tc = json_array_get(calls, 0), *fn = json_object_get(tc, "function");
        json_t *id = json_object_get(tc, "id"), *args = json_object_get(fn, "arguments");
        const int32_t index = (int32_t)json_integer_value(json_object_get(tc, "index"));
        if (json_is_string(id)) {
            api_item *c = begin(w, m, API_ITEM_CALL, events);
            if (!c) return;
            w->n_ws = 0; /* whitespace before a call is no text */
            snprintf(c->call_id, sizeof c->call_id, "%s", json_string_value(id));
            c->call_index = index;
            c->name = strdup(json_string_value(json_object_get(fn, "name")));
            if (!c->name) {
                w->oom = true;
                w->n_items--;
                w->open = false;
                return;
            }
            dispatch(w, m, API_ITEM_BEGIN, w->n_items - 1, NULL, 0, events);
        }
        it = open_item(w);
        if (it && it->kind == API_ITEM_CALL && it->call_index == index && json_is_string(args))
            add(w, m, json_string_value(args), json_string_length(args), events);
    }
}

void api_writer_close(api_writer *w, const api_meta *m, json_t *events) {
    end_open(w, m, events);
    bool calls = false;
    for (int32_t i = 0; i < w->n_items; i++) calls |= w->items[i].kind == API_ITEM_CALL;
    if (w->n_ws && !calls && begin(w, m, API_ITEM_TEXT, events)) {
        dispatch(w, m, API_ITEM_BEGIN, w->n_items - 1, NULL, 0, events);
        add(w, m, w->ws, w->n_ws, events);
        end_open(w, m, events);
    }
    w->n_ws = 0;
    if (w->ar->kind == API_ANTHROPIC) ant_close(w, m, events);
    else resp_close(w, m, events);
}

json_t *api_writer_response(api_writer *w, const api_meta *m) {
    return w->ar->kind == API_ANTHROPIC ? ant_response(w, m) : resp_response(w, m);
}

json_t *api_call_input(const api_item *it) {
    json_t *v = it->text ? json_mem_load(it->text, it->n, 0, NULL) : NULL;
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}

/* Replaces every `from` in s (cap bytes) with `to`. */
static void replace_in(char *s, size_t cap, const char *from, const char *to) {
    char out[1024];
    const size_t nf = strlen(from), nt = strlen(to);
    size_t k = 0;
    for (const char *p = s; *p && k + 1 < sizeof out;) {
        if (!strncmp(p, from, nf)) {
            for (size_t i = 0; i < nt && k + 1 < sizeof out; i++) out[k++] = to[i];
            p += nf;
        } else {
            out[k++] = *p++;
        }
    }
    out[k < cap ? k : cap - 1] = 0;
    memcpy(s, out, strlen(out) + 1);
}

void api_rename(oai_error *e, const char *from, const char *to) {
    replace_in(e->param, sizeof e->param, from, to);
    replace_in(e->message, sizeof e->message, from, to);
}
