#!/usr/bin/env python3
"""Writes tests/io/blend_vectors.txt with Megatron-LM's own blend sizing code.

Runs normalize (megatron/core/datasets/utils.py) and _get_size_per_split_per_dataset
(megatron/core/datasets/blended_megatron_dataset_builder.py) unchanged, with the surplus
BlendedMegatronDatasetConfig.mid_level_dataset_surplus defaults to (0.005): the samples
Megatron asks of each dataset of a blend, per split.

  gen_blend_vectors.py MEGATRON_LM_GIT_DIR [COMMIT] > tests/io/blend_vectors.txt

Each line: the weights as written on --data-path, "|", the blend's target sizes of the
three splits, "|", then per dataset its normalised weight (repr) and its three sizes.
"""
import ast
import math
import subprocess
import sys

import numpy

root = sys.argv[1]
commit = sys.argv[2] if len(sys.argv) > 2 else subprocess.run(
    ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def functions(path, names):
    src = subprocess.run(["git", "-C", root, "show", f"{commit}:{path}"], capture_output=True, text=True,
                         check=True).stdout
    tree = ast.parse(src)
    return "\n\n".join(ast.get_source_segment(src, n) for n in tree.body
                       if isinstance(n, ast.FunctionDef) and n.name in names)


env = {"numpy": numpy, "math": math, "List": list, "Optional": lambda t: t}
exec("from __future__ import annotations\n\n" + functions("megatron/core/datasets/utils.py", {"normalize"}), env)
exec("from __future__ import annotations\n\n" + functions("megatron/core/datasets/blended_megatron_dataset_builder.py",
                                                         {"_get_size_per_split_per_dataset"}), env)
src = subprocess.run(["git", "-C", root, "show", f"{commit}:megatron/core/datasets/blended_megatron_dataset_config.py"],
                     capture_output=True, text=True, check=True).stdout
surplus = float(next(l for l in src.splitlines() if "mid_level_dataset_surplus:" in l).split("=")[1])

weights = [["0.5", "0.5"], ["0.3", "0.7"], ["1", "2"], ["0.1", "0.2", "0.7"], ["3", "1", "1"], ["0.25", "0.75"],
           ["0.33", "0.33", "0.34"], ["1e-3", "0.999"], ["7", "13"], ["0.6", "0.4"]]
targets = [[0, 0, 0], [1, 1, 1], [10, 3, 1], [100, 20, 7], [1000, 30, 1], [999, 333, 77], [4096, 128, 64],
           [12345, 678, 9], [100003, 5003, 101], [3000000, 90000, 3000]]
print(f"# Megatron-LM {commit}: --data-path weights | target samples of train valid test | per dataset: "
      f"normalised weight and samples asked of it per split (surplus {surplus}). "
      "Written by tests/io/gen_blend_vectors.py.")
for w in weights:
    norm = env["normalize"]([float(x) for x in w])
    for t in targets:
        sizes = env["_get_size_per_split_per_dataset"](norm, t, surplus=surplus)
        print(" ".join(w), "|", *t, "|", " | ".join(f"{repr(n)} {s[0]} {s[1]} {s[2]}" for n, s in zip(norm, sizes)))
