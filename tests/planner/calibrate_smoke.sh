#!/bin/bash
# mgraph-calibrate on 2 ranks writes a complete cluster file; mgraph-plan predicts from it;
# a bad argument exits 2. (Numbers are not asserted: the machine is shared.)
# Usage: calibrate_smoke.sh MPIEXEC MGRAPH_CALIBRATE MGRAPH_PLAN WORKDIR
set -u
MPI=$1 CAL=$2 PLAN=$3 W=$4
rm -rf "$W" && mkdir -p "$W"
fail=0
"$MPI" -np 2 "$CAL" --name smoke >"$W/cpu.cluster" 2>"$W/err" || { echo "FAIL: mgraph-calibrate: $(cat "$W/err")"; exit 1; }
for k in gpus-per-node peak-tflops-fp32 vector-tflops hbm-gbps intra-gbps intra-latency-us gemm-half-gflops \
         kernel-overhead-us; do
    grep -q "^$k " "$W/cpu.cluster" || { echo "FAIL: no $k"; fail=1; }
done
grep -q "^gpus-per-node 2$" "$W/cpu.cluster" || { echo "FAIL: gpus-per-node is not the rank count"; fail=1; }
"$PLAN" --cluster "$W/cpu.cluster" --json --num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 32 \
    --micro-batch-size 2 --global-batch-size 4 --world-size 2 --tensor-model-parallel-size 2 >"$W/plan.json" 2>"$W/err" ||
    { echo "FAIL: mgraph-plan on the measured file: $(cat "$W/err")"; fail=1; }
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["step_time_s"] > 0 and j["plan"]["precision"] == "fp32"' \
    "$W/plan.json" || fail=1
"$CAL" --bogus >"$W/out" 2>"$W/err"
[ $? -eq 2 ] && grep -q "unknown argument" "$W/err" || { echo "FAIL: bad argument: $(cat "$W/err")"; fail=1; }
exit $fail
