/* fuzz_imatrix.c — fuzz entry for the importance-matrix reader (src/quant/imatrix.c):
 * llama-imatrix's GGUF and legacy .dat files, which `cinder quantize --imatrix` reads.
 *
 * A refused input must carry a message and no result. An accepted one must keep the
 * reader's promises: at least one entry, names sorted and unique, every entry found by
 * its own name, at least one value each and every value finite. Built by `make fuzz`;
 * the unit tests replay its corpus (tests/fuzz/corpus/imatrix: small files in both
 * formats, made by tests/py/test_quantize.py's writers). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "quant/imatrix.h"

int fuzz_imatrix_one(const uint8_t *data, size_t size);

int fuzz_imatrix_one(const uint8_t *data, size_t size) {
    cn_imatrix *m = NULL;
    cn_error err = {0};
    if (cn_imatrix_parse(data, size, &m, &err) != CN_STATUS_OK) {
        if (m || !err.msg[0]) abort();
        return -1;
    }
    if (!m || m->n_entries < 1) abort();
    for (int64_t i = 0; i < m->n_entries; i++) {
        const cn_imatrix_entry *e = &m->e[i];
        if (!e->name || !e->w || e->n < 1) abort();
        if (i > 0 && strcmp(m->e[i - 1].name, e->name) >= 0) abort();
        if (cn_imatrix_find(m, e->name) != e) abort();
        for (int64_t j = 0; j < e->n; j++)
            if (!isfinite(e->w[j])) abort();
    }
    cn_imatrix_free(m);
    return 0;
}

FUZZ_ENTRY(fuzz_imatrix_one)
