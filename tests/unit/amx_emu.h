/* amx_emu.h — the AMX family with software tiles (amx_emu_avx512.c), for the tests on
 * machines with the AVX-512 family but no AMX. Call only where cn_kernels_avx512() may
 * run. */
#ifndef CN_TEST_AMX_EMU_H
#define CN_TEST_AMX_EMU_H

#include "kernels/kernels.h"

const cn_kernels *cn_test_kernels_amx_emu(void);

#endif
