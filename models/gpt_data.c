/* The GPT family's data source over a dataset (include/mgraph/gpt_data.h). */
#include <stdlib.h>
#include <string.h>

#include "mgraph/gpt_data.h"

int mg_gpt_data_init(mg_gpt_data *d, mg_error *err) {
    d->sample_ = NULL;
    if (!d->data || d->seq_length < 1 || mg_dataset_seq_length(d->data) != d->seq_length)
        return mg_error_set(err, MG_ERR_INVALID, "gpt data: the dataset's samples are not of seq_length %d + 1 tokens",
                            d->seq_length);
    if ((d->eod_mask_loss || d->reset_position_ids || d->reset_attention_mask) && d->eod < 0)
        return mg_error_set(err, MG_ERR_INVALID, "gpt data: %s needs an end-of-document token",
                            d->eod_mask_loss ? "the loss mask" : "documents");
    d->sample_ = malloc(((size_t)d->seq_length + 1) * sizeof *d->sample_);
    return d->sample_ ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
}

void mg_gpt_data_release(mg_gpt_data *d) {
    free(d->sample_);
    d->sample_ = NULL;
}

/* The label of position t of a sample: the next token, or MG_LABEL_IGNORE where the
 * input is the end-of-document token eod (>= 0: with the loss mask). */
static int32_t label_at(const int32_t *sample, int t, int32_t eod) {
    return eod >= 0 && sample[t] == eod ? MG_LABEL_IGNORE : sample[t + 1];
}

static int read_sample(mg_gpt_data *d, int split, uint64_t idx, mg_error *err) {
    static const char *split_names[] = {"train", "validation", "test"};
    int rc = mg_dataset_sample(d->data, split, idx, d->sample_, err);
    if (rc) return rc;
    /* the embedding would read a zero row for such an id: say it instead */
    for (int t = 0; t <= d->seq_length; t++)
        if (d->sample_[t] < 0 || d->sample_[t] >= d->vocab)
            return mg_error_set(err, MG_ERR_INVALID,
                                "data error: sample %llu of the %s split holds token id %d, outside the vocabulary of %s "
                                "[0, %lld) (is the dataset tokenized with another tokenizer?)",
                                (unsigned long long)idx, split_names[split], d->sample_[t],
                                d->tokenizer ? d->tokenizer : "the tokenizer", (long long)d->vocab);
    return MG_OK;
}

/* Positions 0..s-1, written once (a block of them under context parallelism), or one
 * micro-batch instance, laid out [s, b]: each token's position and document start count
 * from the last end-of-document token before it among the sample's inputs (Megatron's
 * _get_ltor_masks_and_position_ids). */
static int feed(void *user, const mg_feed *f, mg_error *err) {
    mg_gpt_data *d = user;
    const mg_tensor *local;
    int32_t *pos = mg_feed_data(f, "position_ids", &local);
    if (f->instance < 0) {
        for (int64_t t = 0; pos && t < mg_numel(local); t++) pos[t] = (int32_t)(local->logical.offset[0] + t);
        return MG_OK;
    }
    int32_t *tok = mg_feed_data(f, "input_ids", NULL), *lab = mg_feed_data(f, "labels", NULL),
            *dst = mg_feed_data(f, "doc_start", NULL);
    int32_t eod = d->eod_mask_loss ? d->eod : -1, doc_eod = pos || dst ? d->eod : -1;
    uint64_t n = mg_dataset_num_samples(d->data, f->split);
    int s = d->seq_length, b = f->n_samples;
    for (int j = 0; j < b; j++) {
        int rc = read_sample(d, f->split, (f->first_sample + (uint64_t)j) % n, err);
        if (rc) return rc;
        int32_t start = 0; /* the document of token t (an end-of-document token ends its own) */
        for (int t = 0; t < s; t++) {
            if (tok) tok[t * b + j] = d->sample_[t];
            if (lab) lab[t * b + j] = label_at(d->sample_, t, eod);
            if (pos) pos[t * b + j] = t - start;
            if (dst) dst[t * b + j] = start;
            if (doc_eod >= 0 && d->sample_[t] == doc_eod) start = t + 1;
        }
    }
    return MG_OK;
}

/* The labels kept in the loss over samples [first, first + count) of a split. */
static int count_tokens(void *user, int split, uint64_t first, int64_t count, uint64_t *kept, mg_error *err) {
    mg_gpt_data *d = user;
    *kept = (uint64_t)count * (uint64_t)d->seq_length;
    if (!d->eod_mask_loss) return MG_OK; /* no mask: every label is kept, nothing to read */
    uint64_t n = mg_dataset_num_samples(d->data, split);
    *kept = 0;
    for (int64_t i = 0; i < count; i++) {
        int rc = mg_dataset_sample(d->data, split, (first + (uint64_t)i) % n, d->sample_, err);
        if (rc) return rc;
        for (int t = 0; t < d->seq_length; t++) *kept += label_at(d->sample_, t, d->eod) != MG_LABEL_IGNORE;
    }
    return MG_OK;
}

static uint64_t num_samples(void *user, int split) {
    const mg_gpt_data *d = user;
    return mg_dataset_num_samples(d->data, split);
}

mg_data_source mg_gpt_data_source(mg_gpt_data *d) {
    mg_data_source s = {d, feed, num_samples, count_tokens};
    return s;
}
