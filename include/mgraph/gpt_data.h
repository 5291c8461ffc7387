/* Feeding the GPT family from a dataset: the trainer's data source (mgraph/trainer.h)
 * over mg_dataset samples (mgraph/dataset.h), as Megatron's GPTDataset hands them to
 * pretrain_gpt.py: a sample of seq_length + 1 tokens gives the inputs [0, s) and the
 * labels [1, s]; with a loss mask the label of a position whose input is the end of a
 * document is MG_LABEL_IGNORE; with the document flags each token's position and
 * document start count from the last end of document before it.
 */
#ifndef MGRAPH_GPT_DATA_H
#define MGRAPH_GPT_DATA_H

#include "mgraph/dataset.h"
#include "mgraph/model.h"
#include "mgraph/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_gpt_data {
    const mg_dataset *data;    /* borrowed */
    int seq_length;
    int64_t vocab;             /* token ids must be in [0, vocab) (the unpadded vocabulary) */
    const char *tokenizer;     /* named in a data error */
    int32_t eod;               /* the end-of-document token (< 0: none) */
    bool eod_mask_loss;        /* Megatron's --eod-mask-loss */
    bool reset_position_ids, reset_attention_mask; /* the step's (mg_step_config) */
    int32_t *sample_;          /* scratch: one sample */
} mg_gpt_data;

/* Checks the settings (a flag finding documents needs an end-of-document token:
 * MG_ERR_INVALID naming it) and allocates the scratch. */
int mg_gpt_data_init(mg_gpt_data *d, mg_error *err);
void mg_gpt_data_release(mg_gpt_data *d);
/* The data source over d: feeds "input_ids", "labels", "position_ids", "doc_start" by
 * sample index modulo the split's samples; counts the kept labels of a global batch. */
mg_data_source mg_gpt_data_source(mg_gpt_data *d);

#ifdef __cplusplus
}
#endif
#endif
