#!/usr/bin/env python3
"""io.torchfile: mgraph's reader of torch.save files (io/torch_zip.c, io/pickle.c) against
torch.load, on files torch writes here: every storage type, views and non-contiguous
tensors, shared storages, nn.Parameter, nested dicts / OrderedDicts / lists / tuples /
sets, argparse.Namespace and enums as opaque objects, bytes, big ints, floats (inf, nan),
a zip64 archive past 4 GiB is not built (too big for CI) but zip64 fields are exercised by
the reader's fuzz seeds. Pickle protocols 2 (torch's default) to 5 with
torch.save(pickle_protocol=...), and plain pickles (.metadata of torch.distributed.checkpoint)
with pickle.dump. Then corrupt files: truncated, a flipped storage byte (CRC), a
compressed record, the legacy format, a pickle calling os.system (refused as data: never
run). Without the pinned torch: a loud skip (77), a failure under tools/test.sh
(tests/support/reference.py).

usage: torchfile.py TORCH_DUMP WORKDIR
"""
import argparse
import collections
import enum
import io
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import reference  # noqa: E402  (tests/support/reference.py)

reference.require("torch")
import torch  # noqa: E402

DUMP, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def render(x):
    """torch.load's value in torch_dump's JSON shape."""
    if x is None or isinstance(x, bool) or isinstance(x, str):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return "nan" if math.isnan(x) else ("inf" if x == math.inf else "-inf" if x == -math.inf else x)
    if isinstance(x, (bytes, bytearray)):
        return {"bytes": bytes(x).hex()}
    if isinstance(x, torch.Tensor):
        t = x.detach()
        dt = str(t.dtype).replace("torch.", "")
        return {"tensor": dt, "shape": list(t.shape),
                "data": [render(float(v)) for v in t.reshape(-1).to(torch.float32).tolist()]}
    if isinstance(x, torch.dtype):
        return {"global": str(x)}
    if isinstance(x, torch.Size):
        return {"tuple": list(x)}
    if isinstance(x, dict):
        return {"dict": [render(v) for kv in x.items() for v in kv]}
    if isinstance(x, list):
        return {"list": [render(v) for v in x]}
    if isinstance(x, tuple):
        return {"tuple": [render(v) for v in x]}
    if isinstance(x, (set, frozenset)):
        return {"set": sorted([render(v) for v in x], key=json.dumps)}
    if isinstance(x, argparse.Namespace):
        return {"object": {"global": "argparse.Namespace"}, "args": {"tuple": []}, "state": render(vars(x))}
    if isinstance(x, io.BytesIO):
        return {"object": {"global": "_io.BytesIO"}, "args": {"tuple": []},
                "state": {"tuple": [render(x.getvalue()), x.tell(), None]}}
    if isinstance(x, enum.Enum):
        return {"object": {"global": f"{type(x).__module__}.{type(x).__qualname__}"}, "args": {"tuple": [x.value]},
                "state": None}
    raise TypeError(type(x))


def normal(j):
    """sets compare unordered"""
    if isinstance(j, dict):
        if "set" in j and len(j) == 1:
            return {"set": sorted([normal(v) for v in j["set"]], key=json.dumps)}
        return {k: normal(v) for k, v in j.items()}
    if isinstance(j, list):
        return [normal(v) for v in j]
    return j


def first_diff(a, b, path="$"):
    """where two rendered values differ (3 and 3.0 are equal, as Python compares them)"""
    if type(a) != type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return f"{path}: {json.dumps(a)[:200]} vs {json.dumps(b)[:200]}"
    if isinstance(a, dict):
        for k in set(a) | set(b):
            if k not in a or k not in b:
                return f"{path}.{k} missing on one side"
            d = first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def dump(path, raw=False):
    r = subprocess.run([DUMP] + (["--pickle"] if raw else []) + [path], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


fails = 0


def check(name, obj, path, raw=False):
    global fails
    rc, out, errs = dump(path, raw)
    if rc != 0:
        print(f"FAIL {name}: exit {rc}: {errs.strip()}")
        fails += 1
        return
    got = normal(json.loads(out))
    want = normal(render(torch.load(path, weights_only=False) if not raw else pickle.load(open(path, "rb"))))
    if got != want:
        print(f"FAIL {name}: differs at {first_diff(got, want)}")
        fails += 1
    else:
        print(f"ok   {name}")


torch.manual_seed(0)
base = torch.randn(6, 5)
shared = torch.arange(24, dtype=torch.float32)
ns = argparse.Namespace(num_layers=4, hidden_size=64, lr=3e-4, tokenizer_type="GPT2BPETokenizer", data_path=["a", "b"],
                        params_dtype=torch.float32, fp16=False, color=Color.BLUE, none=None, big=2**40, neg=-7,
                        inf=math.inf)
everything = {
    "args": ns,
    "checkpoint_version": 3.0,
    "iteration": 12,
    "model": collections.OrderedDict([
        ("f32", base),
        ("view_t", base.t()),                        # non-contiguous
        ("slice", base[1:4, ::2]),                   # offset + strides
        ("shared_a", shared[:12].view(3, 4)),        # two tensors on one storage
        ("shared_b", shared[12:].view(4, 3)),
        ("bf16", torch.randn(3, 7).to(torch.bfloat16)),
        ("f16", torch.randn(5).to(torch.float16)),
        ("f64", torch.randn(2, 2, 2).double()),
        ("i64", torch.arange(-3, 9)),
        ("i32", torch.arange(5, dtype=torch.int32)),
        ("i16", torch.arange(5, dtype=torch.int16) - 2),
        ("i8", torch.arange(-4, 4, dtype=torch.int8)),
        ("u8", torch.arange(250, 256, dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("scalar", torch.tensor(2.5)),
        ("empty", torch.zeros(0, 3)),
        ("param", torch.nn.Parameter(torch.randn(4, 2))),
        ("layer._extra_state", io.BytesIO(b"te-state")),   # Transformer Engine's, older versions
        ("layer2._extra_state", torch.tensor([1, 2, 3], dtype=torch.uint8)),
    ]),
    "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(3)}, 1: {"exp_avg": torch.randn(2)}},
                  "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95), "params": [0, 1], "wd_mult": 0.0}]},
    "rng": [1, 2.5, "x", b"\x00\xff", None, True, (1, (2, 3)), {5, 6}, frozenset({"a"})],
    "floats": [0.0, -0.0, 1e-300, math.inf, -math.inf, math.nan, 1.5e300],
    "ints": [0, 1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63],
    "unicode": "ünïcödé ✓ 𝄞",
    "size": torch.Size([3, 4]),
    "memo": [ns, ns],
}

for proto in (2, 3, 4, 5):
    p = os.path.join(WORK, f"everything_p{proto}.pt")
    torch.save(everything, p, pickle_protocol=proto)
    check(f"torch.save protocol {proto}", everything, p)

# plain pickles (.metadata is one: dataclasses, torch.Size, dtypes)
for proto in (2, 4, 5):
    p = os.path.join(WORK, f"plain_p{proto}.pkl")
    plain = {"a": [1, 2, (3, "x")], "b": {"c": 1.5}, "ns": argparse.Namespace(x=1), "s": torch.Size([2, 3])}
    with open(p, "wb") as f:
        pickle.dump(plain, f, protocol=proto)
    check(f"plain pickle protocol {proto}", plain, p, raw=True)

# ---- refused -------------------------------------------------------------------------------
good = os.path.join(WORK, "everything_p2.pt")
blob = open(good, "rb").read()


def refused(name, data, want, raw=False):
    global fails
    p = os.path.join(WORK, name.replace(" ", "_") + ".bad")
    with open(p, "wb") as f:
        f.write(data)
    rc, out, errs = dump(p, raw)
    if rc != 2 or want not in errs:
        print(f"FAIL refused {name}: exit {rc}, stderr {errs.strip()!r} (want exit 2 and {want!r})")
        fails += 1
    else:
        print(f"ok   refused {name}: {errs.strip()}")


refused("truncated", blob[: len(blob) // 2], "end-of-directory")
refused("empty", b"", "is empty")
refused("not zip", b"hello world, this is not a zip file at all", "not a torch.save archive")
# a byte of the first tensor's storage flipped: the record's CRC catches it
with zipfile.ZipFile(good) as z:
    info = [i for i in z.infolist() if "/data/" in i.filename][0]
    h = info.header_offset  # (the local header's extra field pads the data to 64 bytes: read its length there)
    off = h + 30 + int.from_bytes(blob[h + 26:h + 28], "little") + int.from_bytes(blob[h + 28:h + 30], "little")
bad = bytearray(blob)
bad[off] ^= 0x40
refused("flipped storage byte", bytes(bad), "CRC-32")
# the same archive recompressed (deflate): torch never writes that
comp = os.path.join(WORK, "deflated.pt")
with zipfile.ZipFile(good) as zin, zipfile.ZipFile(comp, "w", zipfile.ZIP_DEFLATED) as zout:
    for i in zin.infolist():
        zout.writestr(i.filename, zin.read(i.filename))
refused("compressed", open(comp, "rb").read(), "compressed")
# torch's legacy format (pre-1.6)
legacy = os.path.join(WORK, "legacy.pt")
torch.save({"a": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
refused("legacy format", open(legacy, "rb").read(), "legacy")


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(WORK, "PWNED"),))


p = os.path.join(WORK, "evil.pkl")
with open(p, "wb") as f:
    pickle.dump({"x": Evil()}, f, protocol=2)
rc, out, errs = dump(p, raw=True)
if rc != 0 or "posix.system" not in out or os.path.exists(os.path.join(WORK, "PWNED")):
    print(f"FAIL evil pickle: exit {rc}, out {out[:200]!r}, ran: {os.path.exists(os.path.join(WORK, 'PWNED'))}")
    fails += 1
else:
    print("ok   a pickle calling os.system reads as an object naming it, and nothing runs")
refused("pickle without STOP", pickle.dumps([1, 2, 3], protocol=2)[:-1], "without STOP", raw=True)
refused("memo never set", b"\x80\x02h\x05.", "never set", raw=True)
refused("stack underflow", b"\x80\x02a.", "underflow", raw=True)

print(f"{'FAILED' if fails else 'passed'}: {fails} failures")
sys.exit(1 if fails else 0)
