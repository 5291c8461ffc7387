/* OpenBLAS 0.3.21 (Debian bookworm) picks its sgemm kernel once, when the library is
 * loaded, from the CPU model it recognises. On processors newer than it knows (the
 * virtual machines mgraph is developed on report a generic model) it falls back to
 * the SSE3 "Prescott" kernel, which runs sgemm 3-5x slower than the AVX2 or AVX-512
 * kernels the same CPU executes. A training step is dominated by sgemm, so the tools
 * choose the kernel by CPU feature when the user has not (OPENBLAS_CORETYPE unset),
 * and re-execute themselves once so OpenBLAS sees the choice at load time.
 * MGRAPH_KEEP_OPENBLAS=1 turns this off. */
#include "blas_env.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

void mg_tool_pick_openblas_kernel(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("MGRAPH_KEEP_OPENBLAS")) return;
    const char *core = NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_is("intel") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        core = "Haswell";
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    /* exec the resolved path, not /proc/self/exe: the process name (comm) is the
     * executable's base name, so it stays "mgraph-run" for ps and pgrep -x */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    self[n] = '\0';
    execv(self, argv); /* only returns on failure: carry on with the default */
}
