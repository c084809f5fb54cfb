/* flags.h — the one flag parser every subcommand uses: a flag is a row of a table (its
 * names, its kind, where its value goes, its range, its help line), and one call parses
 * argv against a command's tables and prints the help from the same rows. So a flag has
 * one spelling, one range and one message everywhere, and a value out of its range is
 * refused with that range, never silently capped.
 *
 * Values: "--name VALUE" or "--name=VALUE" (long names), "-n VALUE" (short names). The
 * whole argument must parse ("12x" is not an integer). "--" ends the flags; "-" alone is
 * a positional. Ranges that the library checks itself (the sampling parameters) are left
 * open here (lo > hi) so that the library's message, naming the field, is the one given. */
#ifndef CN_CLI_FLAGS_H
#define CN_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CLI_BOOL,   /* no value: *(bool *)dst = true */
    CLI_INT,    /* int32_t */
    CLI_I64,    /* int64_t */
    CLI_FLOAT,  /* float; "inf", "-inf" and "nan" parse (the range check refuses them) */
    CLI_STR,    /* const char *: the argument itself (argv is borrowed) */
    CLI_STRS,   /* repeatable: dst is a const char *[max], *count how many were given */
    CLI_CUSTOM, /* parse(dst, value, cmd, flag name): 0, or -1 after printing an error */
} cli_flag_kind;

typedef struct {
    const char *name;  /* "--max-tokens" */
    const char *alias; /* "-n", or NULL */
    cli_flag_kind kind;
    void *dst;
    double lo, hi;       /* CLI_INT / CLI_I64 / CLI_FLOAT: the valid range, inclusive;
                            lo > hi leaves the check to the library */
    const char *metavar; /* "N", "PATH" (value flags) */
    const char *help;    /* one line (more lines: "\n" then the text; the help indents) */
    int32_t max;         /* CLI_STRS: capacity of dst */
    int32_t *count;      /* CLI_STRS: entries given so far */
    int (*parse)(void *dst, const char *val, const char *cmd, const char *name); /* CLI_CUSTOM */
} cli_flag;

/* One table, with the heading its help section gets ("sampling", NULL: none). */
typedef struct {
    const char *title;
    const cli_flag *flags;
    size_t n;
} cli_flag_group;

#define CLI_GROUP(title, table) ((cli_flag_group){(title), (table), sizeof(table) / sizeof((table)[0])})
/* No range check: lo > hi. */
#define CLI_ANY 1, 0

/* Table rows by kind, so a row names only what it uses. CLI_F_NUM's lo > hi (CLI_ANY)
 * leaves the range to the library. */
/* clang-format off */
#define CLI_F_BOOL(n, a, d, h) {.name = n, .alias = a, .kind = CLI_BOOL, .dst = d, .help = h}
#define CLI_F_STR(n, a, d, m, h) {.name = n, .alias = a, .kind = CLI_STR, .dst = d, .metavar = m, .help = h}
#define CLI_F_NUM(n, a, k, d, l, u, m, h) \
    {.name = n, .alias = a, .kind = k, .dst = d, .lo = l, .hi = u, .metavar = m, .help = h}
#define CLI_F_CUSTOM(n, a, d, fn, m, h) \
    {.name = n, .alias = a, .kind = CLI_CUSTOM, .dst = d, .parse = fn, .metavar = m, .help = h}
/* clang-format on */
/* The rows several commands share: -t, and -m for commands that fall back to the
 * default model (CLI_DEFAULT_MODEL). */
#define CLI_DEFAULT_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"
#define CLI_F_THREADS(d) CLI_F_NUM("--threads", "-t", CLI_INT, d, 1, 1024, "N", "threads (default: every CPU)")
#define CLI_F_MODEL(d)                    \
    CLI_F_STR("--model", "-m", d, "PATH", \
              "GGUF model (default $CINDER_MODELS or ~/.cache/cinder/models/\n" CLI_DEFAULT_MODEL ")")

/* What parse returns besides 0. */
#define CLI_FLAGS_USAGE 2   /* a usage error, already printed: exit with it */
#define CLI_FLAGS_HELP (-1) /* -h / --help was given: print the help, exit 0 */

/* Parses argv[1..argc) (argv[0] is the subcommand, named cmd in messages). Arguments
 * that are not flags go to pos[0..max_pos) in order (*n_pos of them). Returns 0,
 * CLI_FLAGS_HELP (after printing usage and the groups' help to stdout, unless usage is
 * NULL), or CLI_FLAGS_USAGE after printing "cinder: CMD: ..." for an unknown flag, a
 * missing or malformed value, a value out of its range, a value given to a flag that
 * takes none, too many repeats, or too many positionals. */
int cli_flags_parse(const char *cmd, const char *usage, const cli_flag_group *groups, size_t n_groups, int argc,
                    char **argv, const char **pos, int max_pos, int *n_pos);
/* What a command returns for a parse result that is not 0: 0 after the help, else it. */
#define CLI_FLAGS_EXIT(rc) ((rc) == CLI_FLAGS_HELP ? 0 : (rc))

/* usage (as given), then the help of the groups. */
void cli_flags_usage(FILE *f, const char *usage, const cli_flag_group *groups, size_t n_groups);

/* The help of every group: "  -n, --max-tokens N   text", aligned; a range that is
 * checked here and is not in the text is added ("[1, 1024]"). */
void cli_flags_help(FILE *f, const cli_flag_group *groups, size_t n_groups);

/* Strict number parsing, for CLI_CUSTOM parsers and positionals: the whole string. */
bool cli_parse_i64(const char *s, int64_t *out);
bool cli_parse_float(const char *s, float *out);

#endif
