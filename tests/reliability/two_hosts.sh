#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, Open MPI
# over TCP between them, mpirun started in the first with a launch agent that starts
# the daemon of the second inside its namespace (and its own hostname). A dp=2 and a
# tp=2 training run across them must give the losses of the same runs on one host.
# Skips (77) only when the kernel refuses to create network namespaces.
#   two_hosts.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
command -v ip > /dev/null || { echo "FAIL: iproute2 (ip) is not installed"; exit 1; }
A=mgA$$ Bn=mgB$$ VA=vmg$$a VB=vmg$$b NET=10.213.$(( $$ % 250 ))
cleanup() { ip netns del "$A" 2>/dev/null; ip netns del "$Bn" 2>/dev/null; ip link del "$VA" 2>/dev/null; }
trap cleanup EXIT
if ! ip netns add "$A" 2> netns.err; then
    echo "skip: the kernel refused to create a network namespace: $(cat netns.err)"; exit 77
fi
ip netns add "$Bn" && ip link add "$VA" type veth peer name "$VB" && ip link set "$VA" netns "$A" &&
ip link set "$VB" netns "$Bn" && ip -n "$A" addr add "$NET.1/24" dev "$VA" && ip -n "$Bn" addr add "$NET.2/24" dev "$VB" &&
ip -n "$A" link set "$VA" up && ip -n "$Bn" link set "$VB" up && ip -n "$A" link set lo up && ip -n "$Bn" link set lo up ||
    { echo "FAIL: setting up the namespaces"; exit 1; }
# the launch agent: Open MPI calls it as "agent [options] HOST COMMAND..."
cat > agent.sh <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
  $NET.1) ns=$A ;;
  $NET.2) ns=$Bn ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
AGENT
chmod +x agent.sh
printf '%s slots=1\n%s slots=1\n' "$NET.1" "$NET.2" > hosts
export OMPI_MCA_mpi_yield_when_idle=1
MPI_NET=(--mca plm_rsh_agent "$PWD/agent.sh" --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24"
         --mca oob_tcp_if_include "$NET.0/24")
ARGS=(--text-file "$PWD/corpus.txt" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 8 --train-iters 5 --log-interval 1 --eval-iters 0 --cpu-workers 1
      --hidden-dropout 0 --attention-dropout 0)
losses() { grep -o '"lm_loss": [^,]*' "$1" | cut -d' ' -f2; }
for plan in "dp2" "tp2 --tensor-model-parallel-size 2"; do
    name=${plan%% *}
    extra=${plan#$name}
    # where each rank ran: the hostname each namespace was given
    bounded ip netns exec "$A" unshare --uts sh -c "hostname $A; exec mpirun --hostfile hosts -np 2 ${MPI_NET[*]} \
        sh -c 'echo rank \$OMPI_COMM_WORLD_RANK on \$(hostname)' "
    [ $rc -eq 0 ] && [[ $out == *"rank 0 on $A"* ]] && [[ $out == *"rank 1 on $Bn"* ]] ||
        { fail "$name: ranks not placed one per namespace: $out"; continue; }
    bounded ip netns exec "$A" unshare --uts sh -c "hostname $A; exec mpirun --hostfile hosts -np 2 ${MPI_NET[*]} \
        $RUN ${ARGS[*]} $extra --metrics-file $PWD/$name.two.jsonl"
    [ $rc -eq 0 ] || { fail "$name across two namespaces: rc $rc ($secs s): $out"; continue; }
    two_secs=$secs
    bounded mpirun -np 2 "$RUN" "${ARGS[@]}" $extra --metrics-file "$PWD/$name.one.jsonl"
    [ $rc -eq 0 ] || { fail "$name on one host: rc $rc: $out"; continue; }
    # the same collectives in the same order: the losses agree to fp32 rounding (1e-5 relative)
    if paste <(losses $name.two.jsonl) <(losses $name.one.jsonl) |
        awk 'NF != 2 { exit 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) exit 1; n++ } END { exit n != 5 }'; then
        ok "$name across two namespaces over TCP ($two_secs s): losses $(losses $name.two.jsonl | tr '\n' ' ')= one host"
    else
        fail "$name losses differ: $(paste <(losses $name.two.jsonl) <(losses $name.one.jsonl) | tr '\n' ';')"
    fi
done
finish
