/* flags.c — the table-driven flag parser (see flags.h). It knows no subcommand: every
 * flag, range and help line comes from the caller's tables. */
#include "flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool cli_parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE) return false;
    *out = (int64_t)v;
    return true;
}

bool cli_parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (end == s || *end || (errno == ERANGE && isfinite(v))) return false;
    *out = (float)v;
    return true;
}

static const cli_flag *find(const cli_flag_group *groups, size_t n_groups, const char *name) {
    for (size_t g = 0; g < n_groups; g++)
        for (size_t i = 0; i < groups[g].n; i++) {
            const cli_flag *f = &groups[g].flags[i];
            if (!strcmp(f->name, name) || (f->alias && !strcmp(f->alias, name))) return f;
        }
    return NULL;
}

static bool has_range(const cli_flag *f) { return f->lo <= f->hi; }

static void range_str(const cli_flag *f, char *buf, size_t n) {
    if (f->kind == CLI_FLOAT) snprintf(buf, n, "[%g, %g]", f->lo, f->hi);
    else snprintf(buf, n, "[%.0f, %.0f]", f->lo, f->hi);
}

/* Stores val into f's destination: 0, or CLI_FLAGS_USAGE after a message. */
static int store(const char *cmd, const cli_flag *f, const char *name, const char *val) {
    char range[64];
    switch (f->kind) {
    case CLI_BOOL: *(bool *)f->dst = true; return 0;
    case CLI_STR: *(const char **)f->dst = val; return 0;
    case CLI_STRS:
        if (*f->count >= f->max) {
            cn_cli_errorf("%s: more than %d %s", cmd, f->max, f->name);
            return CLI_FLAGS_USAGE;
        }
        ((const char **)f->dst)[(*f->count)++] = val;
        return 0;
    case CLI_CUSTOM: return f->parse(f->dst, val, cmd, name) == 0 ? 0 : CLI_FLAGS_USAGE;
    case CLI_INT:
    case CLI_I64: {
        int64_t v;
        if (!cli_parse_i64(val, &v) || (f->kind == CLI_INT && (v < INT32_MIN || v > INT32_MAX))) {
            cn_cli_errorf("%s: %s: '%s' is not an integer", cmd, name, val);
            return CLI_FLAGS_USAGE;
        }
        if (has_range(f) && (v < f->lo || v > f->hi)) {
            range_str(f, range, sizeof range);
            cn_cli_errorf("%s: %s = %lld is out of range: must be in %s", cmd, name, (long long)v, range);
            return CLI_FLAGS_USAGE;
        }
        if (f->kind == CLI_INT) *(int32_t *)f->dst = (int32_t)v;
        else *(int64_t *)f->dst = v;
        return 0;
    }
    case CLI_FLOAT: {
        float v;
        if (!cli_parse_float(val, &v)) {
            cn_cli_errorf("%s: %s wants a number, got '%s'", cmd, name, val);
            return CLI_FLAGS_USAGE;
        }
        if (has_range(f) && !(v >= f->lo && v <= f->hi)) {
            range_str(f, range, sizeof range);
            cn_cli_errorf("%s: %s = %s is out of range: must be in %s", cmd, name, val, range);
            return CLI_FLAGS_USAGE;
        }
        *(float *)f->dst = v;
        return 0;
    }
    }
    return CLI_FLAGS_USAGE;
}

int cli_flags_parse(const char *cmd, const char *usage, const cli_flag_group *groups, size_t n_groups, int argc,
                    char **argv, const char **pos, int max_pos, int *n_pos) {
    *n_pos = 0;
    bool flags_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (flags_done || a[0] != '-' || !a[1]) {
            if (*n_pos >= max_pos) {
                cn_cli_errorf("%s: unexpected argument '%s' (try 'cinder %s --help')", cmd, a, cmd);
                return CLI_FLAGS_USAGE;
            }
            pos[(*n_pos)++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            flags_done = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (usage) cli_flags_usage(stdout, usage, groups, n_groups);
            return CLI_FLAGS_HELP;
        }
        char name[64];
        const char *val = NULL;
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name) {
            cn_cli_errorf("%s: unknown option '%.40s...' (see 'cinder %s --help')", cmd, a, cmd);
            return CLI_FLAGS_USAGE;
        }
        memcpy(name, a, len);
        name[len] = 0;
        if (eq) val = eq + 1;
        const cli_flag *f = find(groups, n_groups, name);
        if (!f) {
            cn_cli_errorf("%s: unknown option '%s' (see 'cinder %s --help')", cmd, name, cmd);
            return CLI_FLAGS_USAGE;
        }
        if (f->kind == CLI_BOOL) {
            if (val) {
                cn_cli_errorf("%s: %s takes no value", cmd, name);
                return CLI_FLAGS_USAGE;
            }
        } else if (!val) {
            if (i + 1 >= argc) {
                cn_cli_errorf("%s: %s needs a value", cmd, name);
                return CLI_FLAGS_USAGE;
            }
            val = argv[++i];
        }
        const int st = store(cmd, f, name, val);
        if (st) return st;
    }
    return 0;
}

void cli_flags_help(FILE *out, const cli_flag_group *groups, size_t n_groups) {
    for (size_t g = 0; g < n_groups; g++) {
        if (groups[g].title) fprintf(out, "%s%s:\n", g ? "\n" : "", groups[g].title);
        for (size_t i = 0; i < groups[g].n; i++) {
            const cli_flag *f = &groups[g].flags[i];
            char left[80];
            snprintf(left, sizeof left, "%s%s%s%s%s", f->alias ? f->alias : "", f->alias ? ", " : "", f->name,
                     f->kind == CLI_BOOL ? "" : " ", f->kind == CLI_BOOL ? "" : (f->metavar ? f->metavar : "X"));
            const char *h = f->help ? f->help : "";
            const char *nl = strchr(h, '\n');
            char range[64] = "";
            if (has_range(f) && (f->kind == CLI_INT || f->kind == CLI_I64 || f->kind == CLI_FLOAT)) {
                char r[48];
                range_str(f, r, sizeof r);
                if (!strstr(h, r)) snprintf(range, sizeof range, " %s", r);
            }
            if (strlen(left) > 26) fprintf(out, "  %s\n  %-26s ", left, "");
            else fprintf(out, "  %-26s ", left);
            if (!nl) {
                fprintf(out, "%s%s\n", h, range);
                continue;
            }
            fprintf(out, "%.*s%s\n", (int)(nl - h), h, range);
            for (const char *line = nl + 1; *line;) {
                const char *e = strchr(line, '\n');
                const int n = e ? (int)(e - line) : (int)strlen(line);
                fprintf(out, "  %-26s %.*s\n", "", n, line);
                line += n + (e ? 1 : 0);
            }
        }
    }
}

void cli_flags_usage(FILE *f, const char *usage, const cli_flag_group *groups, size_t n_groups) {
    fputs(usage, f);
    cli_flags_help(f, groups, n_groups);
}
