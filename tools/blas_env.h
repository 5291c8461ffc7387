/* Choosing OpenBLAS's kernel before OpenBLAS loads it. */
#ifndef MG_TOOLS_BLAS_ENV_H
#define MG_TOOLS_BLAS_ENV_H

/* If OPENBLAS_CORETYPE is unset, sets it from the CPU's features and re-executes the
 * program once (OpenBLAS reads it when the library loads, before main). Returns only
 * when nothing is to be done or the re-exec failed. */
void mg_tool_pick_openblas_kernel(char **argv);

#endif
