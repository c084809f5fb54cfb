/* draft.c — `cinder draft-from MODEL OUT --layers K`: a draft model for speculative
 * decoding cut from the target itself (cn_model_write_draft does the cutting). Flags and
 * messages only. */
#include <stdio.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"

/* --layers keeps its own message (a count, not a range: the upper bound is the model's). */
static int parse_layers(void *dst, const char *val, const char *cmd, const char *name) {
    int64_t v;
    if (!cli_parse_i64(val, &v) || v < 1 || v > 4096) {
        cn_cli_errorf("%s: %s wants a layer count of at least 1, got '%s'", cmd, name, val);
        return -1;
    }
    *(int32_t *)dst = (int32_t)v;
    return 0;
}

int cn_cli_draft_from(int argc, char **argv) {
    int32_t k = -1;
    const cli_flag flags[] = {
        CLI_F_CUSTOM("--layers", NULL, &k, parse_layers, "K", "layers the draft keeps (fewer than the model's)"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    const char *pos[2];
    int n_pos;
    const int rc = cli_flags_parse(
        "draft-from",
        "usage: cinder draft-from MODEL OUT --layers K\n"
        "  writes OUT: MODEL's first K layers with its final norm and output head, the rest of\n"
        "  its tensors and metadata unchanged (block_count = K), to use with --draft OUT\n\n",
        groups, 1, argc, argv, pos, 2, &n_pos);
    if (rc) return CLI_FLAGS_EXIT(rc);
    if (n_pos < 2 || k < 0) {
        cn_cli_errorf("draft-from: give MODEL OUT --layers K (see 'cinder draft-from --help')");
        return 2;
    }
    cn_error err = {0};
    int32_t n_layer = 0;
    const cn_status st = cn_model_write_draft(pos[0], pos[1], k, &n_layer, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("draft-from: %s", err.msg);
        return st == CN_STATUS_INVALID_ARG ? 2 : 1;
    }
    fprintf(stderr, "cinder: draft-from: wrote %s: %d of %d layers\n", pos[1], k, n_layer);
    return 0;
}
