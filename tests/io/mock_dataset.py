#!/usr/bin/env python3
"""--mock-data against Megatron's MockGPTDataset, sample for sample.

usage: mock_dataset.py TEST_MOCK_DATASET SCRATCH

1. numpy's streams: default_rng(seed) (SeedSequence + PCG64: raw draws and
   Generator.integers for int32 and int64 over small, 32-bit-edge and 64-bit ranges) and
   RandomState(seed) (MT19937 raw words and RandomState.shuffle of int32 and int64 arrays),
   drawn by mgraph's io/numpy_random.c, must equal numpy's.
2. The mock dataset: Megatron's classes cannot be imported without torch and Megatron's
   compiled helpers, so the few lines that define the samples are reproduced below from
   Megatron-LM (commit d98e8a6), each function naming its source:
     megatron/core/datasets/gpt_dataset.py: MockGPTLowLevelDataset.__init__ / __getitem__,
       GPTDataset._build_document_sample_shuffle_indices (num_epochs, separate_final_epoch),
       _get_num_epochs, _build_document_index, _build_shuffle_index,
       _query_document_sample_shuffle_indices;
     megatron/core/datasets/helpers.cpp: build_sample_idx (ported literally; a vectorised
       equivalent, checked equal to it on the first configuration, serves the larger ones);
     megatron/core/datasets/blended_megatron_dataset_builder.py: _build_megatron_dataset_splits
       and blended_megatron_dataset_config.py: convert_split_vector_to_split_matrix.
   For each configuration, the sample counts and the token streams of the first and the
   last K samples of every split must be mgraph's exactly: one epoch, several epochs with
   the final one shuffled apart (under 80% used) and together (over 80%), seeds 1234 and
   0 and 2^32 - 1, a vocabulary smaller than the documents (tokens wrap), an empty split.
3. Refusals exit 2 with a message: a seed numpy's RandomState refuses, no EOD token, a bad
   --split, --seq-length 1.
"""
import functools
import os
import subprocess
import sys

import numpy

BIN, SCRATCH = sys.argv[1], sys.argv[2]
os.makedirs(SCRATCH, exist_ok=True)
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg)


# ---- 1. numpy's streams --------------------------------------------------------------
def streams_reference():
    out = []
    for seed in [0, 1, 1234, 2**32 - 1, 2**32, 2**64 - 1]:
        out += [int(v) for v in numpy.random.default_rng(seed).bit_generator.random_raw(8)]
        g = numpy.random.default_rng(seed)
        for lo, hi in [(1, 4096), (0, 2), (-5, 7), (0, 2**31 - 1), (-2**31, 2**31 - 1), (3, 4)]:
            out += [int(v) for v in g.integers(lo, hi, 50, dtype=numpy.int32)]
        for lo, hi in [(1, 4096), (0, 2**32), (0, 2**32 + 1), (-7, 2**40), (-2**63, 2**63 - 1), (0, 2**62 + 12345)]:
            out += [int(v) for v in g.integers(lo, hi, 50, dtype=numpy.int64)]
        if seed >= 2**32:
            continue
        rs = numpy.random.RandomState(seed)
        out += [int(v) for v in rs._bit_generator.random_raw(700)]
        for r, n in enumerate([1, 2, 3, 10, 1000, 70000]):
            a = numpy.arange(n, dtype=numpy.int64 if r % 2 else numpy.int32)
            rs.shuffle(a)
            out += [int(v) for v in a]
    return out


path = os.path.join(SCRATCH, "streams.bin")
subprocess.run([BIN, "streams", path], check=True)
got = numpy.fromfile(path, dtype=numpy.int64)
ref = streams_reference()
ref = numpy.array([v - 2**64 if v >= 2**63 else v for v in ref], dtype=numpy.int64)
if got.shape != ref.shape:
    fail(f"numpy streams: {got.shape[0]} values, numpy gives {ref.shape[0]}")
elif not numpy.array_equal(got, ref):
    i = int(numpy.argmax(got != ref))
    fail(f"numpy streams differ first at value {i}: mgraph {got[i]}, numpy {ref[i]}")
else:
    print(f"ok: {ref.shape[0]} values of numpy's PCG64 / Generator.integers / MT19937 / RandomState.shuffle equal")


# ---- 2. Megatron's mock dataset, reproduced --------------------------------------------
class MockGPTLowLevelDataset:  # gpt_dataset.py
    seed, size, max_sequence_length = 0, 100000, 4096

    def __init__(self, vocab_size, eod):
        self.vocab_size, self.eod_token = vocab_size, eod
        rng = numpy.random.default_rng(seed=self.seed)
        self.sequence_lengths = rng.integers(low=1, high=self.max_sequence_length, size=self.size, dtype=numpy.int32)

    def __getitem__(self, idx):
        length = self.sequence_lengths[idx]
        return numpy.int64(numpy.concatenate([(numpy.arange(length - 1) + 1) % self.vocab_size, [self.eod_token]]))

    def get(self, idx, offset=0, length=None):
        if length is None:
            length = self.sequence_lengths[idx] - offset
        return self[idx][offset:offset + length]


def split_matrix(split):  # parse_and_normalize_split + convert_split_vector_to_split_matrix
    v = [float(x) for x in split.split(",")]
    v = v + [0.0] * (3 - len(v))
    v = [x / sum(v) for x in v]
    exp = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *v])
    return [None if hi <= lo else (lo, hi) for lo, hi in zip(exp[:-1], exp[1:])]


def _build_document_index(documents, num_epochs, rs, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1).astype(numpy.int32)
        rs.shuffle(document_index)
        return document_index
    first = _build_document_index(documents, num_epochs - 1, rs, False)
    last = _build_document_index(documents, 1, rs, False)
    return numpy.concatenate((first, last))


def _build_shuffle_index(num_samples, total_size, rs):
    dtype_ = numpy.uint32 if total_size < numpy.iinfo(numpy.uint32).max - 1 else numpy.int64
    first = numpy.arange(0, num_samples, 1, dtype=dtype_)
    rs.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, 1, dtype=dtype_)
    rs.shuffle(last)
    return numpy.concatenate((first, last))


def build_sample_idx_literal(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch, extra=1):
    # helpers.cpp build_sample_idx, drop_last_partial_sequence = true
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    sample_idx = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    sidx, didx, off = 1, 0, 0
    while sidx <= num_samples:
        remaining = seq_length + extra
        while remaining != 0:
            doc_len = int(sizes[document_idx[didx]]) - off
            remaining -= doc_len
            if remaining <= 0:
                off += remaining + doc_len - extra
                remaining = 0
            else:
                if didx == len(document_idx) - 1:
                    off = int(sizes[document_idx[didx]]) - extra
                    break
                didx += 1
                off = 0
        sample_idx[sidx] = (didx, off)
        sidx += 1
    return sample_idx


def build_sample_idx_fast(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch):
    # sample s starts at token s * seq_length of the document stream
    num_samples = (num_epochs * tokens_per_epoch - 1) // seq_length
    cum = numpy.concatenate([[0], numpy.cumsum(sizes[document_idx].astype(numpy.int64))])
    start = numpy.arange(num_samples + 1, dtype=numpy.int64) * seq_length
    d = numpy.searchsorted(cum, start, side="right") - 1
    return numpy.stack([d, start - cum[d]], axis=1)


class MockGPTDataset:  # GPTDataset over MockGPTLowLevelDataset (the parts a sample needs)
    def __init__(self, ll, indices, num_samples, seq_length, seed, literal):
        self.ll, self.seq_length = ll, seq_length
        num_tokens_per_epoch = int(numpy.sum(ll.sequence_lengths[indices]))  # _get_num_tokens_per_epoch
        num_epochs, num_tokens = 1, num_tokens_per_epoch  # _get_num_epochs
        while num_tokens < num_samples * seq_length + 1:
            num_epochs += 1
            num_tokens += num_tokens_per_epoch
        separate_final_epoch = False
        if num_epochs > 1:
            sans = ((num_epochs - 1) * num_tokens_per_epoch - 1) // seq_length
            per_epoch = (num_tokens_per_epoch - 1) // seq_length
            separate_final_epoch = num_samples - sans < int(0.80 * per_epoch)
        self.separate_final_epoch, self.num_epochs = separate_final_epoch, num_epochs
        rs = numpy.random.RandomState(seed)
        self.document_index = _build_document_index(indices, num_epochs, rs, separate_final_epoch)
        if literal:
            self.sample_index = build_sample_idx_literal(ll.sequence_lengths, self.document_index, seq_length,
                                                         num_epochs, num_tokens_per_epoch)
            fast = build_sample_idx_fast(ll.sequence_lengths, self.document_index, seq_length, num_epochs,
                                         num_tokens_per_epoch)
            if not numpy.array_equal(fast, self.sample_index):
                fail("the vectorised build_sample_idx differs from helpers.cpp's")
        else:
            self.sample_index = build_sample_idx_fast(ll.sequence_lengths, self.document_index, seq_length,
                                                      num_epochs, num_tokens_per_epoch)
        n = self.sample_index.shape[0] - 1
        self.shuffle_index = _build_shuffle_index(sans if separate_final_epoch else n, n, rs)

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def text(self, idx):  # _query_document_sample_shuffle_indices (add_extra_token_to_sequence)
        idx = self.shuffle_index[idx]
        db, ob = self.sample_index[idx]
        de, oe = self.sample_index[idx + 1]
        if db == de:
            parts = [self.ll.get(self.document_index[db], offset=int(ob), length=oe - ob + 1)]
        else:
            parts = []
            for i in range(db, de + 1):
                offset = 0 if i > db else ob
                length = None if i < de else oe + 1
                parts.append(self.ll.get(self.document_index[i], offset=int(offset), length=length))
        return numpy.concatenate(parts, dtype=numpy.int64)


def check(name, split, seq, seed, nums, vocab, eod, K, literal=False):
    ll = MockGPTLowLevelDataset(vocab, eod)
    mats = split_matrix(split)
    ds = []
    for i in range(3):
        if mats[i] is None:
            ds.append(None)
            continue
        beg, end = int(round(mats[i][0] * float(ll.size))), int(round(mats[i][1] * float(ll.size)))
        ds.append(MockGPTDataset(ll, numpy.arange(beg, end, 1, dtype=numpy.int32), nums[i], seq, seed, literal))
    out = os.path.join(SCRATCH, name + ".bin")
    r = subprocess.run([BIN, "dump", out, split, str(seq), str(seed), *map(str, nums), str(vocab), str(eod), str(K)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{name}: exit {r.returncode}: {r.stderr}")
        return
    raw = numpy.fromfile(out, dtype=numpy.int32)
    counts = raw[:6].view(numpy.int64)
    want = [len(d) if d is not None else 0 for d in ds]
    if list(counts) != want:
        fail(f"{name}: sample counts {list(counts)}, Megatron's {want}")
        return
    pos, compared = 6, 0
    for s in range(3):
        n = want[s]
        for i in range(n):
            if i >= K and i + K < n:
                continue
            got = raw[pos:pos + seq + 1]
            pos += seq + 1
            ref = ds[s].text(i)
            compared += 1
            if not numpy.array_equal(got, ref):
                fail(f"{name}: split {s} sample {i} differs from Megatron's")
                return
    note = ", ".join(f"{len(d)} samples in {d.num_epochs} epoch(s){' (final apart)' if d.separate_final_epoch else ''}"
                     for d in ds if d is not None)
    print(f"ok: {name}: {compared} samples equal Megatron's ({note})")


# several epochs with the final one apart (valid: 1600 samples of 1530 per epoch) and together
# (train: 2 epochs, 94% of the second; test: 3 epochs), the literal build_sample_idx
check("multi-epoch", "969,30,1", 4096, 1234, [94000, 1600, 131], 50257, 50256, 40, literal=True)
# Megatron's default --seq-length-like sample, a recipe's split, a small vocabulary that wraps
check("recipe", "99,1,0", 64, 1234, [800, 320, 0], 1000, 999, 64)
check("seed-0", "969,30,1", 257, 0, [5000, 480, 160], 131072, 128001, 16)
check("seed-max", "8,1,1", 128, 2**32 - 1, [0, 0, 0], 32000, 2, 16)

# ---- 3. refusals ------------------------------------------------------------------------
for args, msg in [(["969,30,1", "64", str(2**32), "8", "8", "8", "1000", "999"], "outside [0, 2^32)"),
                  (["969,30,1", "64", "1234", "8", "8", "8", "1000", "-1"], "no end-of-document token"),
                  (["9x,1", "64", "1234", "8", "8", "8", "1000", "999"], "bad --split"),
                  (["969,30,1", "1", "1234", "8", "8", "8", "1000", "999"], "--seq-length must be at least 2")]:
    r = subprocess.run([BIN, "open", *args], capture_output=True, text=True)
    if r.returncode != 2 or msg not in r.stderr:
        fail(f"open {' '.join(args)}: exit {r.returncode}, {r.stderr.strip()!r} (want 2 and {msg!r})")
print("ok: refusals exit 2" if not failures else f"{failures} failure(s)")
sys.exit(1 if failures else 0)
