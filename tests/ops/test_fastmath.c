/* mg_expf (ops/fastmath.h), the vectorisable exp behind GELU and SiLU: relative error
 * against double exp on its range, the clamped ends, and NaN. */
#include <math.h>

#include "ops/fastmath.h"
#include "testkit.h"

static void accuracy(void) {
    double worst = 0, at = 0;
    for (double x = -87.0; x <= 88.0; x += 0.000731) {
        float xf = (float)x;
        double e = exp((double)xf), rel = fabs((double)mg_expf(xf) - e) / e;
        if (rel > worst) worst = rel, at = xf;
    }
    printf("worst relative error %.3g at %g\n", worst, at);
    TK_CHECK(worst < 2e-7, "relative error %.3g at %g exceeds 2e-7", worst, at);
    TK_CHECK(mg_expf(0.0f) == 1.0f, "exp(0) = %g", mg_expf(0.0f));
    /* outside [-87, 88] the value is clamped, never 0 or inf (callers divide by 1 + e^t) */
    TK_CHECK(mg_expf(-1000.0f) > 0 && mg_expf(-1000.0f) < 1e-37f, "exp(-1000) = %g", mg_expf(-1000.0f));
    TK_CHECK(isfinite(mg_expf(1000.0f)) && mg_expf(1000.0f) > 1e38f, "exp(1000) = %g", mg_expf(1000.0f));
    TK_CHECK(isfinite(mg_expf(INFINITY)) && mg_expf(-INFINITY) > 0, "infinities clamp");
    /* monotone across the clamp points */
    TK_CHECK(mg_expf(-87.0f) <= mg_expf(-86.99f) && mg_expf(87.99f) <= mg_expf(88.0f), "monotone at the ends");
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {{"forward.fast_exp", accuracy}};
    return tk_main(argc, argv, cases, 1);
}
