#!/usr/bin/env bash
# The README's first command: the operator's main job end to end on the local cluster.
# Brings the kwok cluster up with its simulated A100 / H100 / TPU / CPU node pools and
# LeaderWorkerSet, installs the CRDs, starts the operator, applies the examples and shows what
# Ringmaster decided and where the real kube-scheduler put the pods. KEEP_OPERATOR=1 leaves the
# operator running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs: the control plane, kwok and LeaderWorkerSet (no Kueue, no helm; a
# later `hack/cluster-tools.sh` with no arguments builds those into the same directory).
export RINGMASTER_BIN_DIR=${RINGMASTER_BIN_DIR:-$(bash hack/cluster-tools.sh etcd kwok kube lws gie)}
export PATH="$RINGMASTER_BIN_DIR:$PATH"
# The CLI as a module of the Python `make install` used: its scripts directory need not be on PATH.
PYTHON=${PYTHON:-python3}
ringmaster() { "$PYTHON" -m ringmaster "$@"; }
namespace=ringmaster-demo
log=${RINGMASTER_CACHE_DIR:-$HOME/.cache/ringmaster}/demo-operator.log

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "local cluster (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok, LeaderWorkerSet, the Inference Extension's CRDs)"
# Room for every example at once, pool by pool (`ringmaster plan examples/<file>` gives each
# count; one pod per host where a pod takes a whole host's accelerators):
# - a100-highgpu-8g (8 x A100 40GB): two 8-host BERT gangs + 1 host for the ResNet-50 endpoint's
#   replica (1 GPU) = 17.
# - reducers (n1-highcpu-16, one reducer per host): the first BERT job's own 25 + the shared
#   pool's 16 = 41.
# - a100-ultragpu-8g (8 x A100 80GB): the 70B layout search's 4 hosts + the 70B endpoint's
#   8 replicas x 4 GPUs (4 hosts) + the INT4 70B's 2 x 1 GPU (1 host) = 9.
# - h100-highgpu-8g (8 x H100): the FSDP fine-tune's 2 hosts + the MoE fine-tune's 1 + the 405B
#   endpoint's 4 replicas x 2 hosts (one LeaderWorkerSet group each, on hosts of exactly 8 H100)
#   + 1 host for Llama-3-8B's 4 x 1 GPU and Mixtral's 1 x 2 + the disaggregated 70B's 3 prefill
#   replicas x 8 GPUs (3 hosts) and 2 decode replicas x 2 (1 host) + 1 host for gpt-oss-120b's
#   3 x 1 GPU = 17.
# - the multislice slices, one node pool per slice: 2 v5e 16x16 slices of 64 hosts
#   (tpu-v5e-16x16-a/b) and 4 v5p 4x4x4 slices of 16 hosts (tpu-v5p-4x4x4-a..d).
# The other pools keep their default sizes (`ringmaster cluster --help`): a v5e 2x4 slice of 2
# hosts, a v4 2x2x4 slice of 4, 8 T4 hosts for the T4 endpoint's 2 replicas.
# The cluster is `ringmaster cluster up`'s default, ringmaster (the e2e tests' clusters are
# ringmaster-e2e*, the scale bench's ringmaster-scale), so `make cluster-down` deletes it.
ringmaster cluster up --lws --gie --pool a100-highgpu-8g=17 --pool reducers=41 \
  --pool a100-ultragpu-8g=9 --pool h100-highgpu-8g=17 \
  --pool tpu-v5e-16x16-a=64 --pool tpu-v5e-16x16-b=64 \
  --pool tpu-v5p-4x4x4-a=16 --pool tpu-v5p-4x4x4-b=16 \
  --pool tpu-v5p-4x4x4-c=16 --pool tpu-v5p-4x4x4-d=16
KUBECONFIG=$(ringmaster cluster kubeconfig)
export KUBECONFIG

step "custom resources"
kubectl apply --server-side --force-conflicts -f crds/
kubectl wait --for=condition=Established -f crds/ --timeout=60s

step "operator (ringmaster run; log: $log)"
mkdir -p "$(dirname "$log")"
# --lws auto: the 405B endpoint's 2-host replicas run as LeaderWorkerSet groups.
# Not through the function, so that $! is the operator itself and the trap below stops it.
"$PYTHON" -m ringmaster run --metrics-port 0 --lws auto >"$log" 2>&1 &
operator=$!
if [[ ${KEEP_OPERATOR:-0} != 1 ]]; then trap 'kill $operator 2>/dev/null || true' EXIT; fi

step "examples, applied to namespace $namespace"
kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -n "$namespace" -f examples/
for job in $(kubectl get trainingjobs -n "$namespace" -o name); do
  # Each gang is admitted whole or waits for room: wait until the operator has decided.
  kubectl wait -n "$namespace" "$job" --for=jsonpath='{.status.conditions[?(@.type=="Schedulable")].reason}' \
    --timeout=60s >/dev/null 2>&1 || true
done

step "waiting until every example runs (kube-scheduler binds the pods, kwok starts them)"
# Every example fits the cluster above: each TrainingJob reaches Running, each reducer pool and
# endpoint Ready (some 300 pods). Whatever is not there after DEMO_WAIT_SECONDS is named, and
# the tables below show its reason.
deadline=$((SECONDS + ${DEMO_WAIT_SECONDS:-300}))
last=
while true; do
  not_yet=$(
    kubectl get trainingjobs -n "$namespace" \
      -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.status.phase}{"\n"}{end}' | grep -v '=Running$' || true
    kubectl get reductionserverpools,inferenceendpoints -n "$namespace" \
      -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.status.phase}{"\n"}{end}' | grep -v '=Ready$' || true
  )
  if [[ -z $not_yet ]]; then
    echo "every TrainingJob Running, every ReductionServerPool and InferenceEndpoint Ready"
    break
  fi
  if ((SECONDS >= deadline)); then
    echo "not there after ${DEMO_WAIT_SECONDS:-300}s:" $not_yet
    break
  fi
  if [[ $not_yet != "$last" ]]; then echo "waiting for:" $not_yet; last=$not_yet; fi
  sleep 3
done

step "TrainingJobs: the strategy the engine chose, its predicted step time and cost"
kubectl get trainingjobs -n "$namespace" -o wide
echo
kubectl get trainingjobs -n "$namespace" \
  -o custom-columns='NAME:.metadata.name,SCHEDULABLE:.status.conditions[?(@.type=="Schedulable")].message'

step "pools of reducers (ReductionServerPools) and serving endpoints (InferenceEndpoints)"
kubectl get reductionserverpools,inferenceendpoints -n "$namespace" -o wide

step "pods, placed by kube-scheduler on the pools (node names carry the pool)"
kubectl get pods -n "$namespace" \
  -o custom-columns='POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName'

step "the whole plan, from the manifests alone (ringmaster plan: no cluster needed)"
for manifest in examples/*.yaml; do ringmaster plan "$manifest"; echo; done

echo
echo "KUBECONFIG=$KUBECONFIG"
echo "explore: kubectl get tj,rsp,ie -n $namespace; tear down: make cluster-down"
