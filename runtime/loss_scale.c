/* Megatron's grad scalers (include/mgraph/precision.h): ConstantGradScaler and
 * DynamicGradScaler of megatron/core/optimizer/grad_scaler.py, step for step. */
#include <math.h>

#include "mgraph/precision.h"

mg_loss_scaler mg_loss_scaler_dynamic(float initial, float min_scale, int window, int hysteresis) {
    return (mg_loss_scaler){.scale = initial, .dynamic = true, .min_scale = min_scale, .window = window,
                            .hysteresis = hysteresis, .hysteresis_tracker = hysteresis};
}

mg_loss_scaler mg_loss_scaler_constant(float scale) {
    return (mg_loss_scaler){.scale = scale, .min_scale = scale, .window = 1, .hysteresis = 1, .hysteresis_tracker = 1};
}

const char *mg_loss_scaler_invalid(const mg_loss_scaler *s) {
    if (!(s->scale > 0) || !isfinite(s->scale)) return "the loss scale must be a positive finite number";
    if (!s->dynamic) return NULL;
    if (!(s->min_scale > 0) || s->min_scale > s->scale)
        return "the minimum loss scale must be positive and at most the initial loss scale";
    if (s->window < 1) return "the loss-scale window must be at least 1";
    if (s->hysteresis < 1) return "the hysteresis must be at least 1";
    return NULL;
}

void mg_loss_scaler_update(mg_loss_scaler *s, bool found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) s->scale = fmaxf(s->scale * 0.5f, s->min_scale);
    } else {
        s->growth_tracker++;
        if (s->growth_tracker == s->window) {
            s->growth_tracker = 0;
            s->hysteresis_tracker = s->hysteresis;
            s->scale *= 2.0f;
        }
    }
}
