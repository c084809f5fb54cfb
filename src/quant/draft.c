/* draft.c — cn_model_write_draft: a draft model for speculative decoding cut from a
 * model file, for models with no smaller partner. File handling only, through the GGUF
 * reader and writer: the first K layers' tensors (blk.N.* with N < K) and every tensor
 * outside the layers are copied as stored, all metadata too except block_count (set to
 * K) and general.name (marked). It runs no model and checks no weights: the draft is
 * loaded, like any model, by cn_model_load. */
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"

/* blk.N.… with N >= k: a layer the draft leaves out. */
static bool dropped(cn_gguf_str name, int32_t k) {
    if (name.len < 5 || memcmp(name.ptr, "blk.", 4) != 0) return false;
    int64_t n = 0;
    uint64_t i = 4;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && n <= INT32_MAX; i++)
        n = n * 10 + (name.ptr[i] - '0');
    return i > 4 && n >= k;
}

/* Copies every kv of g into w, with block_count and general.name replaced. */
static cn_status copy_meta(cn_gguf_writer *w, const cn_gguf *g, const char *bc_key, int32_t k, uint32_t n_layer,
                           cn_error *err) {
    char key[512], name[512];
    cn_status st = CN_STATUS_OK;
    for (int64_t i = 0; i < cn_gguf_n_kv(g) && st == CN_STATUS_OK; i++) {
        const cn_gguf_str ks = cn_gguf_kv_key(g, i);
        if (ks.len >= sizeof key) continue;
        memcpy(key, ks.ptr, ks.len);
        key[ks.len] = 0;
        if (!strcmp(key, bc_key)) {
            st = cn_gguf_writer_set_u32(w, key, (uint32_t)k);
        } else if (!strcmp(key, "general.name")) {
            cn_gguf_str nm = {"", 0};
            cn_gguf_kv_str(g, i, &nm);
            snprintf(name, sizeof name, "%.*s (first %d of %u layers, cinder draft-from)", (int)CN_MIN(nm.len, 300),
                     nm.ptr, k, n_layer);
            st = cn_gguf_writer_set_str(w, key, name);
        } else {
            st = cn_gguf_writer_copy_kv(w, g, i, key, err);
        }
    }
    if (st == CN_STATUS_OK && cn_gguf_find_key(g, "general.name") < 0) {
        snprintf(name, sizeof name, "first %d of %u layers (cinder draft-from)", k, n_layer);
        st = cn_gguf_writer_set_str(w, "general.name", name);
    }
    return st == CN_STATUS_NO_MEMORY ? cn_err(err, st, "out of memory") : st;
}

cn_status cn_model_write_draft(const char *path, const char *out_path, int32_t n_layers, int32_t *n_layer_model,
                               cn_error *err) {
    if (n_layers < 1)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_layers", "n_layers = %d: a draft keeps at least 1 layer",
                            n_layers);
    cn_gguf *g = NULL;
    cn_gguf_writer *w = NULL;
    cn_status st = cn_gguf_open(path, &g, err);
    if (st != CN_STATUS_OK) return st;
    cn_gguf_str arch;
    char bc_key[160];
    uint32_t n_layer = 0;
    if (!cn_gguf_get_str(g, "general.architecture", &arch) || arch.len > 100) {
        st = cn_err(err, CN_STATUS_CORRUPT, "%s has no general.architecture", path);
        goto done;
    }
    snprintf(bc_key, sizeof bc_key, "%.*s.block_count", (int)arch.len, arch.ptr);
    if (!cn_gguf_get_u32(g, bc_key, &n_layer) || n_layer > INT32_MAX) {
        st = cn_err(err, CN_STATUS_CORRUPT, "%s has no %s", path, bc_key);
        goto done;
    }
    if (n_layer_model) *n_layer_model = (int32_t)n_layer;
    if ((uint32_t)n_layers >= n_layer) {
        st = cn_err_param(err, CN_STATUS_INVALID_ARG, "n_layers",
                          "n_layers = %d keeps the whole model (it has %u layers): give fewer", n_layers, n_layer);
        goto done;
    }
    if (!(w = cn_gguf_writer_new())) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
        goto done;
    }
    st = copy_meta(w, g, bc_key, n_layers, n_layer, err);
    for (int64_t i = 0; i < cn_gguf_n_tensors(g) && st == CN_STATUS_OK; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        if (dropped(t->name, n_layers)) continue;
        if (!t->data) {
            st = cn_err(err, CN_STATUS_UNSUPPORTED, "tensor %.*s has a type (%u) this build cannot copy",
                        (int)CN_MIN(t->name.len, 100), t->name.ptr, t->type);
            break;
        }
        char name[512];
        snprintf(name, sizeof name, "%.*s", (int)CN_MIN(t->name.len, sizeof name - 1), t->name.ptr);
        st = cn_gguf_writer_add_tensor(w, name, (cn_type)t->type, t->n_dims, t->ne, t->data, t->n_bytes, err);
    }
    if (st == CN_STATUS_OK) st = cn_gguf_writer_write_file(w, out_path, err);
done:
    cn_gguf_writer_free(w);
    cn_gguf_close(g);
    return st;
}
