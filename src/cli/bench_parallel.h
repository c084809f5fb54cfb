/* bench_parallel.h — `cinder bench --parallel`: the batched engine under N concurrent
 * requests (bench_parallel.c). bench.c hands over its whole argument list when
 * --parallel is among its options. */
#ifndef CN_CLI_BENCH_PARALLEL_H
#define CN_CLI_BENCH_PARALLEL_H

/* argv[0] is "bench"; returns the exit code (0, 1 runtime failure, 2 usage). */
int cn_cli_bench_parallel(int argc, char **argv);

#endif
