#!/usr/bin/env python3
"""Writes tests/io/split_vectors.txt with Megatron-LM's own split code.

Reads parse_and_normalize_split and convert_split_vector_to_split_matrix
(megatron/core/datasets/blended_megatron_dataset_config.py) and normalize
(megatron/core/datasets/utils.py) out of a Megatron-LM checkout, runs them unchanged, and
maps each book-end to int(round(x * float(n))) as BlendedMegatronDatasetBuilder.
_build_megatron_dataset_splits does; n is the number of sequences of the indexed dataset.
A split Megatron does not build (None) is written "-".

  gen_split_vectors.py MEGATRON_LM_DIR [COMMIT] > tests/io/split_vectors.txt
"""
import ast
import functools
import re
import subprocess
import sys

import numpy

root = sys.argv[1]


def functions(path, names):
    src = open(f"{root}/{path}").read()
    tree = ast.parse(src)
    return "from __future__ import annotations\n\n" + "\n\n".join(ast.get_source_segment(src, n) for n in tree.body
                       if isinstance(n, ast.FunctionDef) and n.name in names)


env = {"numpy": numpy, "functools": functools, "re": re, "List": list, "Optional": lambda t: t, "Tuple": tuple,
       "Split": [0, 1, 2]}
exec(functions("megatron/core/datasets/utils.py", {"normalize"}), env)
exec(functions("megatron/core/datasets/blended_megatron_dataset_config.py",
               {"parse_and_normalize_split", "convert_split_vector_to_split_matrix"}), env)
try:
    rev = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rev = rev or (sys.argv[2] if len(sys.argv) > 2 else "")
except OSError:
    rev = "?"
print(f"# Megatron-LM {rev or '?'}: split string, number of sequences, then (begin, end) of train, valid, test")
print("# (- where Megatron builds no dataset for the split). Written by tests/io/gen_split_vectors.py.")
splits = ["969,30,1", "949,50,1", "98,2,0", "90,5,5", "80,15,5", "1,1,1", "99,1", "100,0,0", "0.7,0.2,0.1",
          "2,1,1", "45,45,10"]
sizes = list(range(1, 121)) + [127, 200, 333, 999, 1000, 1001, 4097, 12345, 99999, 1000003]
for split in splits:
    matrix = env["convert_split_vector_to_split_matrix"](env["parse_and_normalize_split"](split))
    for n in sizes:
        cells = []
        for b in matrix:
            cells.append("-" if b is None else f"{int(round(b[0] * float(n)))} {int(round(b[1] * float(n)))}")
        print(split, n, " | ".join(cells))
