/* draft.c — `cinder draft-from MODEL OUT --layers K`: a draft model for speculative
 * decoding cut from the target itself, for models with no smaller partner: the first K
 * layers, the final norm and the head, every other tensor and all metadata as they are
 * (block_count set to K, the name marked), written with the GGUF writer. Its vocabulary
 * is the target's by construction. File handling only: no model is run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"

static void usage(FILE *f) {
    fprintf(f, "usage: cinder draft-from MODEL OUT --layers K\n"
               "  writes OUT: MODEL's first K layers with its final norm and output head, the rest of\n"
               "  its tensors and metadata unchanged (block_count = K), to use with --draft OUT\n");
}

/* blk.N.… with N >= k: a layer the draft leaves out. */
static bool dropped(cn_gguf_str name, long k) {
    if (name.len < 5 || memcmp(name.ptr, "blk.", 4) != 0) return false;
    long n = 0;
    uint64_t i = 4;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9'; i++) n = n * 10 + (name.ptr[i] - '0');
    return i > 4 && n >= k;
}

int cn_cli_draft_from(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    long k = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--layers")) {
            char *end = NULL;
            k = i + 1 < argc ? strtol(argv[++i], &end, 10) : -1;
            if (!end || *end || k < 1 || k > 4096) {
                cn_cli_errorf("draft-from: --layers wants a layer count of at least 1");
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cn_cli_errorf("draft-from: unknown option '%s' (see 'cinder draft-from --help')", argv[i]);
            return 2;
        } else if (!in) in = argv[i];
        else if (!out) out = argv[i];
        else {
            cn_cli_errorf("draft-from: one MODEL and one OUT (see 'cinder draft-from --help')");
            return 2;
        }
    }
    if (!in || !out || k < 0) {
        cn_cli_errorf("draft-from: give MODEL OUT --layers K (see 'cinder draft-from --help')");
        return 2;
    }
    cn_error err = {0};
    cn_gguf *g = NULL;
    cn_gguf_writer *w = NULL;
    int rc = 1;
    if (cn_gguf_open(in, &g, &err) != CN_STATUS_OK) {
        cn_cli_errorf("draft-from: %s", err.msg);
        return 1;
    }
    cn_gguf_str arch;
    char bc_key[160], name[512], key[512];
    uint32_t n_layer = 0;
    if (!cn_gguf_get_str(g, "general.architecture", &arch) || arch.len > 100) {
        cn_cli_errorf("draft-from: %s has no general.architecture", in);
        goto done;
    }
    snprintf(bc_key, sizeof bc_key, "%.*s.block_count", (int)arch.len, arch.ptr);
    if (!cn_gguf_get_u32(g, bc_key, &n_layer)) {
        cn_cli_errorf("draft-from: %s has no %s", in, bc_key);
        goto done;
    }
    if ((uint32_t)k >= n_layer) {
        cn_cli_errorf("draft-from: --layers %ld keeps the whole model (it has %u layers): give fewer", k, n_layer);
        rc = 2;
        goto done;
    }
    if (!(w = cn_gguf_writer_new())) {
        cn_cli_errorf("draft-from: out of memory");
        goto done;
    }
    cn_status st = CN_STATUS_OK;
    for (int64_t i = 0; i < cn_gguf_n_kv(g) && st == CN_STATUS_OK; i++) {
        const cn_gguf_str ks = cn_gguf_kv_key(g, i);
        if (ks.len >= sizeof key) continue;
        memcpy(key, ks.ptr, ks.len);
        key[ks.len] = 0;
        if (!strcmp(key, bc_key)) st = cn_gguf_writer_set_u32(w, key, (uint32_t)k);
        else if (!strcmp(key, "general.name")) {
            cn_gguf_str nm = {"", 0};
            cn_gguf_kv_str(g, i, &nm);
            snprintf(name, sizeof name, "%.*s (first %ld of %u layers, cinder draft-from)", (int)CN_MIN(nm.len, 300),
                     nm.ptr, k, n_layer);
            st = cn_gguf_writer_set_str(w, key, name);
        } else st = cn_gguf_writer_copy_kv(w, g, i, key, &err);
    }
    if (cn_gguf_find_key(g, "general.name") < 0 && st == CN_STATUS_OK) {
        snprintf(name, sizeof name, "first %ld of %u layers (cinder draft-from)", k, n_layer);
        st = cn_gguf_writer_set_str(w, "general.name", name);
    }
    int64_t kept = 0;
    for (int64_t i = 0; i < cn_gguf_n_tensors(g) && st == CN_STATUS_OK; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        if (dropped(t->name, k)) continue;
        if (!t->data) {
            st = cn_err(&err, CN_STATUS_UNSUPPORTED, "tensor %.*s has a type (%u) this build cannot copy",
                        (int)t->name.len, t->name.ptr, t->type);
            break;
        }
        snprintf(key, sizeof key, "%.*s", (int)CN_MIN(t->name.len, sizeof key - 1), t->name.ptr);
        st = cn_gguf_writer_add_tensor(w, key, (cn_type)t->type, t->n_dims, t->ne, t->data, t->n_bytes, &err);
        kept++;
    }
    if (st == CN_STATUS_OK) st = cn_gguf_writer_write_file(w, out, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("draft-from: %s", err.msg[0] ? err.msg : "could not build the draft");
        goto done;
    }
    fprintf(stderr, "cinder: draft-from: wrote %s: %ld of %u layers, %lld tensors\n", out, k, n_layer, (long long)kept);
    rc = 0;
done:
    cn_gguf_writer_free(w);
    cn_gguf_close(g);
    return rc;
}
