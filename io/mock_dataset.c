/* Megatron's --mock-data: MockGPTDataset over MockGPTLowLevelDataset
 * (megatron/core/datasets/gpt_dataset.py), sample for sample.
 *
 * The low-level dataset is 100000 documents whose lengths are
 * default_rng(0).integers(1, 4096, 100000, dtype=int32); document d of length L holds
 * the tokens 1, 2, ..., L - 1 (mod the tokenizer's vocabulary size) and then the EOD
 * token. The split cuts the documents as --split cuts an indexed dataset
 * (_build_megatron_dataset_splits); each split is a GPTDataset whose indices are built
 * exactly as _build_document_sample_shuffle_indices builds them: the document index
 * (_build_document_index) and the shuffle index (_build_shuffle_index) shuffled with
 * numpy.random.RandomState(--seed), the final epoch apart when it is used for less than
 * 80% of its samples, and the sample index as helpers.cpp build_sample_idx (a sample is
 * seq_length + 1 tokens, the next starting on its last; partial samples dropped, as
 * Megatron drops them by default in every split). So sample i of a split holds the
 * tokens Megatron's MockGPTDataset[i] holds for the same --seed, --seq-length, --split
 * and sample counts, and a mock run reads what Megatron's reads.
 * Nothing is cached: the indices take well under a second to build. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset_internal.h"
#include "io/numpy_random.h"

/* MockGPTLowLevelDataset's hard-coded seed, size and max_sequence_length */
#define MOCK_LL_SEED 0
#define MOCK_LL_SIZE 100000
#define MOCK_LL_MAX_LEN 4096
/* Most entries an index array may hold (2^34, as the GPT dataset bounds its own). */
#define MOCK_MAX_INDEX (1ULL << 34)

typedef struct mock_part {
    int32_t *doc_idx;
    uint64_t n_doc_idx;
    int64_t *sample_idx; /* 2 * (num_samples + 1) */
    int64_t *shuffle_idx;
    uint64_t num_samples;
} mock_part;

typedef struct mock_ds {
    int32_t *lengths; /* MOCK_LL_SIZE document lengths */
    int64_t vocab;
    int32_t eod;
    int seq_length;
    mock_part part[3];
} mock_ds;

static void mock_destroy(void *impl) {
    mock_ds *m = impl;
    for (int s = 0; s < 3; s++) {
        free(m->part[s].doc_idx);
        free(m->part[s].sample_idx);
        free(m->part[s].shuffle_idx);
    }
    free(m->lengths);
    free(m);
}

static uint64_t mock_num_samples(const mg_dataset *ds, int split) {
    const mock_ds *m = ds->impl;
    return m->part[split].num_samples;
}

/* tokens [begin, end) of document d: 1, 2, ..., L - 1 (mod vocab), then EOD */
static void doc_tokens(const mock_ds *m, int32_t d, int64_t begin, int64_t end, int32_t *out) {
    int64_t len = m->lengths[d];
    for (int64_t k = begin; k < end; k++) *out++ = k == len - 1 ? m->eod : (int32_t)((k + 1) % m->vocab);
}

/* GPTDataset._query_document_sample_shuffle_indices with add_extra_token_to_sequence */
static int mock_sample(const mg_dataset *ds, int split, uint64_t idx, int32_t *tokens, mg_error *err) {
    const mock_ds *m = ds->impl;
    const mock_part *p = &m->part[split];
    int64_t s = p->shuffle_idx[idx];
    int64_t db = p->sample_idx[2 * s], ob = p->sample_idx[2 * s + 1];
    int64_t de = p->sample_idx[2 * s + 2], oe = p->sample_idx[2 * s + 3];
    int64_t got = 0, want = (int64_t)m->seq_length + 1;
    for (int64_t i = db; i <= de; i++) {
        int32_t d = p->doc_idx[i];
        int64_t begin = i == db ? ob : 0, end = i == de ? oe + 1 : m->lengths[d];
        if (end > m->lengths[d] || end < begin || got + (end - begin) > want) break;
        doc_tokens(m, d, begin, end, tokens + got);
        got += end - begin;
    }
    if (got != want) /* (build_sample_idx with partial samples dropped never gives one) */
        return mg_error_set(err, MG_ERR_RUNTIME, "mock dataset: sample %lld of split %d is not %lld tokens", (long long)s,
                            split, (long long)want);
    return MG_OK;
}

static const mg_dataset_ops mock_ops = {mock_num_samples, mock_sample, mock_destroy};

/* _build_document_index(documents, epochs, rs, False): the documents tiled `epochs`
 * times and shuffled as one array */
static void doc_index(int32_t *out, uint64_t lo, uint64_t ndocs, uint64_t epochs, mg_np_mt19937 *rs) {
    for (uint64_t e = 0; e < epochs; e++)
        for (uint64_t i = 0; i < ndocs; i++) out[e * ndocs + i] = (int32_t)(lo + i);
    mg_np_shuffle_i32(rs, out, epochs * ndocs);
}

static int build_part(mock_ds *m, mock_part *p, int split, uint64_t lo, uint64_t hi, uint64_t requested, uint32_t seed,
                      mg_error *err) {
    static const char *names[] = {"train", "valid", "test"};
    const int64_t S = m->seq_length;
    uint64_t ndocs = hi - lo, T = 0;
    for (uint64_t i = lo; i < hi; i++) T += (uint64_t)m->lengths[i];
    if (ndocs == 0) { /* Megatron builds no dataset for an empty split */
        p->sample_idx = calloc(2, sizeof *p->sample_idx);
        return p->sample_idx ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    /* _get_num_epochs: the fewest epochs whose tokens reach requested x S + 1 */
    unsigned __int128 need = (unsigned __int128)requested * (unsigned __int128)S + 1;
    unsigned __int128 e128 = need <= T ? 1 : (need + T - 1) / T;
    if (e128 * ndocs > MOCK_MAX_INDEX || (e128 * T - 1) / (uint64_t)S > MOCK_MAX_INDEX)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--mock-data: %llu %s samples of %lld + 1 tokens need more than %llu index entries "
                            "(fewer --train-iters, --eval-iters or --global-batch-size)",
                            (unsigned long long)requested, names[split], (long long)S, (unsigned long long)MOCK_MAX_INDEX);
    uint64_t E = (uint64_t)e128;
    /* separate_final_epoch: the last epoch shuffled apart when it gives fewer than 80% of
     * an epoch's samples */
    int separate = 0;
    uint64_t sans_final = 0;
    if (E > 1) {
        sans_final = ((E - 1) * T - 1) / (uint64_t)S;
        uint64_t from_final = requested - sans_final, per_epoch = (T - 1) / (uint64_t)S;
        separate = (double)from_final < (double)(int64_t)(0.80 * (double)per_epoch);
    }
    uint64_t nsamp = (E * T - 1) / (uint64_t)S; /* build_sample_idx, drop_last_partial_sequence */
    p->n_doc_idx = E * ndocs;
    p->num_samples = nsamp;
    p->doc_idx = malloc(p->n_doc_idx * sizeof *p->doc_idx);
    p->sample_idx = malloc(2 * (nsamp + 1) * sizeof *p->sample_idx);
    p->shuffle_idx = malloc((nsamp ? nsamp : 1) * sizeof *p->shuffle_idx);
    if (!p->doc_idx || !p->sample_idx || !p->shuffle_idx)
        return mg_error_set(err, MG_ERR_NOMEM, "--mock-data: out of memory building indices for %llu samples",
                            (unsigned long long)nsamp);
    mg_np_mt19937 rs;
    mg_np_mt19937_seed(&rs, seed);
    if (!separate) {
        doc_index(p->doc_idx, lo, ndocs, E, &rs);
    } else {
        doc_index(p->doc_idx, lo, ndocs, E - 1, &rs);
        doc_index(p->doc_idx + (E - 1) * ndocs, lo, ndocs, 1, &rs);
    }
    /* helpers.cpp build_sample_idx (add_extra_token_to_sequence = 1) */
    int64_t di = 0, off = 0;
    p->sample_idx[0] = p->sample_idx[1] = 0;
    for (uint64_t s = 1; s <= nsamp; s++) {
        int64_t remaining = S + 1;
        while (remaining != 0) {
            int64_t len = m->lengths[p->doc_idx[di]] - off;
            remaining -= len;
            if (remaining <= 0) {
                off += remaining + len - 1;
                remaining = 0;
            } else {
                if ((uint64_t)di == p->n_doc_idx - 1) { /* the documents' end: only at the last sample */
                    off = m->lengths[p->doc_idx[di]] - 1;
                    break;
                }
                di++;
                off = 0;
            }
        }
        p->sample_idx[2 * s] = di;
        p->sample_idx[2 * s + 1] = off;
    }
    /* _build_shuffle_index(num_samples, total_size, rs): the samples of all but a
     * separate final epoch shuffled, then the final epoch's apart */
    uint64_t first = separate ? sans_final : nsamp;
    for (uint64_t i = 0; i < nsamp; i++) p->shuffle_idx[i] = (int64_t)i;
    mg_np_shuffle_i64(&rs, p->shuffle_idx, first);
    if (first < nsamp) mg_np_shuffle_i64(&rs, p->shuffle_idx + first, nsamp - first);
    return MG_OK;
}

int mg_mock_dataset_open(const mg_mock_dataset_config *cfg, mg_dataset **out, mg_error *err) {
    *out = NULL;
    if (cfg->seq_length <= 1)
        return mg_error_set(err, MG_ERR_INVALID, "--mock-data: --seq-length must be at least 2 (got %d)", cfg->seq_length);
    if (cfg->seed > UINT32_MAX) /* numpy.random.RandomState(seed) */
        return mg_error_set(err, MG_ERR_INVALID,
                            "--mock-data: --seed %llu is outside [0, 2^32), the seeds numpy's RandomState takes",
                            (unsigned long long)cfg->seed);
    if (cfg->vocab_size < 1 || cfg->vocab_size > INT32_MAX)
        return mg_error_set(err, MG_ERR_INVALID, "--mock-data: a vocabulary of %lld tokens", (long long)cfg->vocab_size);
    if (cfg->eod < 0)
        return mg_error_set(err, MG_ERR_INVALID, "--mock-data: the tokenizer has no end-of-document token, which "
                                                 "ends every mock document");
    double frac[3];
    int rc = mg_parse_split(cfg->split ? cfg->split : "969,30,1", frac, err);
    if (rc) return rc;
    mock_ds *m = calloc(1, sizeof *m);
    mg_dataset *ds = calloc(1, sizeof *ds);
    if (m) m->lengths = malloc(MOCK_LL_SIZE * sizeof *m->lengths);
    if (!m || !ds || !m->lengths) {
        if (m) free(m->lengths);
        free(m);
        free(ds);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    ds->ops = &mock_ops;
    ds->impl = m;
    ds->kind = MG_DATASET_MOCK;
    ds->seq_length = m->seq_length = cfg->seq_length;
    ds->vocab = m->vocab = cfg->vocab_size;
    m->eod = cfg->eod;
    mg_np_pcg64 g;
    mg_np_pcg64_seed(&g, MOCK_LL_SEED);
    mg_np_integers_i32(&g, 1, MOCK_LL_MAX_LEN, MOCK_LL_SIZE, m->lengths);
    uint64_t b[4];
    mg_split_bounds(frac, MOCK_LL_SIZE, b);
    for (int s = 0; s < 3 && !rc; s++)
        rc = build_part(m, &m->part[s], s, b[s], b[s + 1], cfg->num_samples[s], (uint32_t)cfg->seed, err);
    if (rc) {
        mg_dataset_free(ds);
        return rc;
    }
    *out = ds;
    return MG_OK;
}
