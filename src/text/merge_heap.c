/* merge_heap.c — the merge queue of merge_heap.h: a binary min-heap on (key, left).
 * The tie on left keeps both tokenizers' merge order equal to llama.cpp's (leftmost
 * pair first among equal scores/ranks). It must stay free of tokenizer knowledge. */
#include "text/merge_heap.h"
#include "core/buf.h"

#include <stdlib.h>

static bool merge_before(const cn_merge *a, const cn_merge *b) {
    if (a->key != b->key) return a->key < b->key;
    return a->left < b->left;
}

bool cn_merge_push(cn_merge_heap *h, cn_merge x) {
    if (!CN_GROW(h->v, h->cap, h->n + 1)) return false;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_before(&x, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
    return true;
}

cn_merge cn_merge_pop(cn_merge_heap *h) {
    cn_merge top = h->v[0];
    cn_merge last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && merge_before(&h->v[c + 1], &h->v[c])) c++;
        if (!merge_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}
