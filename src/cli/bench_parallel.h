/* bench_parallel.h — what bench.c and bench_parallel.c share: `cinder bench --parallel`
 * (the batched engine under N concurrent requests, bench_parallel.c; bench.c hands over
 * its whole argument list when --parallel is among its options) and the few measuring
 * helpers both report with (bench.c). */
#ifndef CN_CLI_BENCH_PARALLEL_H
#define CN_CLI_BENCH_PARALLEL_H

#include <jansson.h>
#include <stddef.h>

/* argv[0] is "bench"; returns the exit code (0, 1 runtime failure, 2 usage). */
int cn_cli_bench_parallel(int argc, char **argv);

/* j as one line on stdout (json_dumps flags), flushed; takes j (NULL: nothing printed). */
void cli_print_json(json_t *j, size_t flags);
/* The 1-minute load average, -1 where unknown: every figure is printed with it. */
double cli_load1(void);

#endif
