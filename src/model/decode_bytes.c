/* decode_bytes.c — cn_model_decode_bytes (cinder.h, measuring): the weight bytes one
 * decoded token reads, so a tool can set decode speed against memory bandwidth. It only
 * sums the sizes of the weights model.c loaded; it reads no weight. */
#include "model.h"

static uint64_t wbytes(const cn_weight *w) { return w && w->data ? (uint64_t)w->row_bytes * (uint64_t)w->ne1 : 0; }

uint64_t cn_model_decode_bytes(const cn_model *m) {
    const cn_hparams *hp = cn_model_hparams(m);
    /* the output weight is token_embd when tied: then the whole table is read per token */
    uint64_t n = wbytes(cn_model_output(m)) + wbytes(cn_model_output_norm(m));
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const cn_layer *L = cn_model_layer(m, il);
        const cn_weight *ws[] = {&L->attn_norm,
                                 &L->wq,
                                 &L->wk,
                                 &L->wv,
                                 &L->wo,
                                 &L->bq,
                                 &L->bk,
                                 &L->bv,
                                 &L->q_norm,
                                 &L->k_norm,
                                 &L->post_attn_norm,
                                 &L->ffn_norm,
                                 &L->w_gate,
                                 &L->w_up,
                                 &L->w_down,
                                 &L->post_ffn_norm};
        for (size_t i = 0; i < CN_ARRAY_LEN(ws); i++) n += wbytes(ws[i]);
    }
    return n;
}
