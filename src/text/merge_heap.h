/* merge_heap.h — the priority queue of candidate merges that the SentencePiece and BPE
 * tokenizers both run (tokenizer_spm.c, tokenizer_bpe.c). A leaf of src/text: it knows
 * nothing of tokenizers or vocabularies, only (key, left) order, so the two merge loops
 * can share it without reaching back into tokenizer.c. Not a public header. */
#ifndef CN_MERGE_HEAP_H
#define CN_MERGE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A candidate merge of the adjacent symbols (left, right). Lower key comes out first,
 * ties by smaller left: SPM keys by -score, BPE by merge rank. tag0/tag1 let the caller
 * recognise a stale entry (SPM: merged byte size; BPE: the two symbols' ids). */
typedef struct {
    int32_t left, right;
    double key;
    int32_t tag0, tag1;
} cn_merge;

/* A binary min-heap; {0} is empty, free(h.v) releases it. */
typedef struct {
    cn_merge *v;
    size_t n, cap;
} cn_merge_heap;

bool cn_merge_push(cn_merge_heap *h, cn_merge x); /* false on out of memory */
cn_merge cn_merge_pop(cn_merge_heap *h);          /* h->n > 0 */

#endif
