/* test_system.c — cinder.h's measuring functions: the system info agrees with the CPU
 * detection and the online CPU count, the bandwidth probe refuses a thread count outside
 * its range (naming it) and measures positive rates. (cn_model_decode_bytes is checked
 * against gguf-py's tensor sizes by tests/py/test_bench.py.) */
#include <criterion/criterion.h>
#include <unistd.h>

#include "core/cpu.h"
#include "cinder.h"

Test(system, info_matches_detection) {
    cn_system_info si;
    cn_system_get_info(&si);
    cr_assert_eq(si.n_cpus, sysconf(_SC_NPROCESSORS_ONLN) > 1024 ? 1024 : sysconf(_SC_NPROCESSORS_ONLN));
    cr_assert_eq(si.avx2, cn_cpu_get()->avx2);
    cr_assert_eq(si.avx512f, cn_cpu_get()->avx512f);
    cr_assert_eq(si.neon, cn_cpu_get()->neon);
}

Test(system, bandwidth_refuses_bad_threads_and_measures) {
    cn_error err = {0};
    double rd = -1, cp = -1;
    cr_assert_eq(cn_system_measure_bandwidth(0, 1 << 20, &rd, &cp, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "n_threads");
    cr_assert_eq(cn_system_measure_bandwidth(1025, 1 << 20, &rd, &cp, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_system_measure_bandwidth(2, 1 << 20, &rd, &cp, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(rd > 0 && cp > 0, "read %g copy %g", rd, cp);
}
