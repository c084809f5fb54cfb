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
        cn_buf_free(&w->items[i].text);
        free(w->items[i].name);
    }
    free(w->items);
    cn_buf_free(&w->ws);
    memset(w, 0, sizeof *w);
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
    if (!CN_GROW(w->items, w->cap_items, (size_t)w->n_items + 1)) return w->oom = true, NULL;
    api_item *it = &w->items[w->n_items++];
    memset(it, 0, sizeof *it);
    it->kind = k;
    w->open = true;
    return it;
}

static void add(api_writer *w, const api_meta *m, const char *s, size_t n, json_t *events) {
    api_item *it = &w->items[w->n_items - 1];
    if (n == 0) return;
    if (!cn_buf_put(&it->text, s, n)) {
        w->oom = true;
        return;
    }
    dispatch(w, m, API_ITEM_GROW, w->n_items - 1, s, n, events);
}

static api_item *open_item(api_writer *w) { return w->open ? &w->items[w->n_items - 1] : NULL; }

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
        } else if (oai_blank(s, n)) {
            if (!cn_buf_put(&w->ws, s, n)) w->oom = true;
        } else if (begin(w, m, API_ITEM_TEXT, events)) {
            dispatch(w, m, API_ITEM_BEGIN, w->n_items - 1, NULL, 0, events);
            if (w->ws.n) add(w, m, w->ws.p, w->ws.n, events);
            cn_buf_free(&w->ws);
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
            cn_buf_free(&w->ws); /* whitespace before a call is no text */
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
    if (w->ws.n && !calls && begin(w, m, API_ITEM_TEXT, events)) {
        dispatch(w, m, API_ITEM_BEGIN, w->n_items - 1, NULL, 0, events);
        add(w, m, w->ws.p, w->ws.n, events);
        end_open(w, m, events);
    }
    cn_buf_free(&w->ws);
    if (w->ar->kind == API_ANTHROPIC) ant_close(w, m, events);
    else resp_close(w, m, events);
}

json_t *api_writer_response(api_writer *w, const api_meta *m) {
    return w->ar->kind == API_ANTHROPIC ? ant_response(w, m) : resp_response(w, m);
}

json_t *api_call_input(const api_item *it) {
    json_t *v = it->text.p ? json_mem_load(it->text.p, it->text.n, 0, NULL) : NULL;
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}
