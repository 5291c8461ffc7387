/* Numpy broadcasting shared by the elementwise ops and their gradients. */
#ifndef MG_OPS_BROADCAST_H
#define MG_OPS_BROADCAST_H

#include "ops/op.h"

/* Result shape of broadcasting a with b (right-aligned). Returns false if they clash. */
bool mg_bcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nout, int64_t *sout);
/* Element strides of a tensor of shape (n, s) read in an output of shape (nout, sout):
 * 0 along broadcast dimensions. strides has nout entries. */
void mg_bcast_strides(int n, const int64_t *s, int nout, const int64_t *sout, int64_t *strides);
/* True when (n, s) can be broadcast to (nout, sout). */
bool mg_bcast_to_ok(int n, const int64_t *s, int nout, const int64_t *sout);

/* sum_to(t, like->shape) unless shapes already match (gradient of a broadcast). */
mg_tensor *mg_sum_to_like(mg_graph *g, mg_tensor *t, const mg_tensor *like);

#endif
