/* The model flags a checkpoint records (its index.json's "model" object): written by
 * mgraph-run's saves and mgraph-convert --from-hf, read back by mgraph-run --load (which
 * refuses a run whose flags differ) and mgraph-convert --load. One writer and one reader
 * of the GPT family's options, so that the two tools cannot drift apart. */
#ifndef MG_TOOLS_MODEL_FLAGS_H
#define MG_TOOLS_MODEL_FLAGS_H

#include <jansson.h>

#include "mgraph/error.h"
#include "mgraph/model.h"

/* The model object of config m (m->vocab: the padded vocabulary); NULL when out of memory. */
json_t *mg_model_flags_json(const mg_gpt_config *m, int64_t vocab_unpadded, int divisible_by, const char *tokenizer_type);
/* The options beside the sizes that the object holds into *m (which the caller filled
 * with sizes and defaults): head size, RoPE scaling, multi-latent attention, MoE.
 * MG_ERR_IO naming the key when one is malformed. Absent keys leave the defaults (a
 * checkpoint saved before the option existed). */
int mg_model_flags_read_variants(json_t *mm, const char *path, mg_gpt_config *m, mg_error *err);

#endif
