#!/usr/bin/env python3
"""mgraph checkpoints read back whole with the standard library, and two of them compared.

  ckpt.py compare A B [--iteration N] [--rtol R] [--atol A] [--exact-suffix S]...
        every tensor of checkpoint root A (the serial run's) against B's (a parallel plan's);
        exit 1 naming each tensor out of bounds, or present in one only
  ckpt.py norms ROOT [--iteration N]   each tensor's 2-norm (for a look)

As a module: load(root, iteration=None) -> {name: list of floats}, compare(a, b, ...).

A checkpoint root holds latest_checkpointed_iteration.txt and iter_NNNNNNN/index.json,
which lists each logical tensor's shape and its pieces (file, safetensors key, block offset
and shape, flat range [lo, hi) of the block); load() puts the pieces back in place and
fails on a tensor they do not cover. compare() bounds each tensor in the 2-norm:
|A - B|_2 <= rtol |A|_2 + atol sqrt(n), rtol 1e-5 and atol 1e-7 by default (the parallel
== serial bound of test_equivalence.c); names ending in an --exact-suffix must be equal
bit for bit. The checkpoint holds the parameters and, unless --no-save-optim, Adam's
exp_avg and exp_avg_sq: a gradient scaled by a constant, which Adam's update largely
hides from the weights and clipping from the losses, shows in exp_avg.
"""
import json
import math
import os
import struct
import sys
from array import array

_CODES = {"F32": "f", "I32": "i", "F64": "d", "I64": "q"}


def _iter_dir(root, iteration):
    if iteration is None:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
            iteration = int(f.read().strip())
    return os.path.join(root, f"iter_{iteration:07d}")


def _values(blob, dtype):
    if dtype == "BF16":  # bfloat16: the high half of a float32
        h = array("H")
        h.frombytes(blob)
        return array("f", struct.unpack(f"<{len(h)}f", struct.pack(f"<{len(h)}I", *(x << 16 for x in h))))
    v = array(_CODES[dtype])
    v.frombytes(blob)
    if sys.byteorder != "little":
        v.byteswap()
    return v


def load(root, iteration=None):
    """{name: array of the whole tensor, row-major} of checkpoint root at `iteration`
    (default: the tracker's)."""
    d = _iter_dir(root, iteration)
    with open(os.path.join(d, "index.json")) as f:
        index = json.load(f)
    blobs = []
    for fn in index["files"]:
        with open(os.path.join(d, fn if isinstance(fn, str) else fn["name"]), "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        blobs.append((blob, 8 + n, json.loads(blob[8:8 + n])))
    out = {}
    for name, t in index["tensors"].items():
        shape = t["shape"]
        numel = math.prod(shape)
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        whole, seen = None, 0
        for p in t["pieces"]:
            blob, base, header = blobs[p["file"]]
            e = header[p["key"]]
            a, b = e["data_offsets"]
            v = _values(blob[base + a:base + b], e["dtype"])
            if whole is None:
                whole = array(v.typecode, bytes(numel * v.itemsize))
                covered = bytearray(numel)
            block, off = p["block"], p["offset"]
            lo = p.get("lo", 0)
            hi = p.get("hi", 0) or math.prod(block)
            row = block[-1] if block else 1
            rows_before = [math.prod(block[i + 1:-1]) if block else 1 for i in range(len(block))]
            k = lo
            while k < hi:  # runs of the block's last dimension, cut by [lo, hi)
                r, c = divmod(k, row)
                n = min(row - c, hi - k)
                idx = c + (off[-1] if block else 0)
                rem = r
                for dim in range(len(block) - 1):
                    q, rem = divmod(rem, rows_before[dim])
                    idx += (off[dim] + q) * strides[dim]
                whole[idx:idx + n] = v[k - lo:k - lo + n]
                covered[idx:idx + n] = b"\x01" * n
                seen += n
                k += n
        if whole is None or seen != numel or covered.count(1) != numel:
            raise ValueError(f"{d}: {name} is not covered exactly once by its pieces")
        out[name] = whole
    return out


def compare(a, b, rtol=1e-5, atol=1e-7, exact_suffixes=(), out=print):
    """A, B: load() results (A the reference). Returns (failures, worst fraction of the bound)."""
    bad, worst = 0, 0.0
    for name in sorted(set(a) ^ set(b)):
        out(f"FAIL: {name} is only in {'the first' if name in a else 'the second'} checkpoint")
        bad += 1
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if name.endswith(tuple(exact_suffixes)):
            if x != y:
                out(f"FAIL: {name} differs (it must be equal bit for bit)")
                bad += 1
            continue
        diff = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y)))
        norm = math.sqrt(sum(p * p for p in x))
        err = diff / (rtol * norm + atol * math.sqrt(len(x)))
        worst = max(worst, err)
        if err > 1 or len(x) != len(y):
            out(f"FAIL: {name} differs by {diff:.3g} in the 2-norm (its norm {norm:.3g}): {err:.2f} x the bound")
            bad += 1
    return bad, worst


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="ckpt.py")
    ap.add_argument("cmd", choices=["compare", "norms"])
    ap.add_argument("roots", nargs="+")
    ap.add_argument("--iteration", type=int)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-7)
    ap.add_argument("--exact-suffix", action="append", default=[])
    o = ap.parse_args(argv)
    if o.cmd == "norms":
        for name, v in sorted(load(o.roots[0], o.iteration).items()):
            print(f"{name} {math.sqrt(sum(x * x for x in v)):.9g}")
        return 0
    if len(o.roots) != 2:
        ap.error("compare takes two checkpoint roots")
    try:
        a, b = load(o.roots[0], o.iteration), load(o.roots[1], o.iteration)
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL: {e}")
        return 1
    bad, worst = compare(a, b, o.rtol, o.atol, o.exact_suffix)
    moments = sum(n.endswith(".exp_avg") for n in a)
    how = ("bit for bit" if "" in o.exact_suffix else
           f"worst {worst:.3f} of the bound (2-norm, rtol {o.rtol:g}, atol {o.atol:g} per element)")
    print(f"{'FAIL' if bad else 'ok'}: {len(a)} checkpoint tensors ({moments} with Adam moments) of {o.roots[1]} against "
          f"{o.roots[0]}: {how}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
