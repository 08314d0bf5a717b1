#!/usr/bin/env bash
# The README's first command: the operator's main job end to end on the local cluster.
# Brings the kwok cluster up with its simulated A100 / TPU / CPU node pools, installs the CRDs,
# starts the operator, applies the examples and shows what Ringmaster decided and where the
# real kube-scheduler put the pods. KEEP_OPERATOR=1 leaves the operator running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGMASTER_BIN_DIR=${RINGMASTER_BIN_DIR:-$(bash hack/cluster-tools.sh)}
export PATH="$RINGMASTER_BIN_DIR:$PATH"
namespace=ringmaster-demo
log=${RINGMASTER_CACHE_DIR:-$HOME/.cache/ringmaster}/demo-operator.log

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "local cluster (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok)"
# Room for every example at once: two 8-host BERT gangs and a serving replica on the A100 pool,
# 25 + 16 reducers on the CPU pool (one per host). The LLM training examples take 2 H100 hosts,
# 4 A100 80GB hosts and a 2-host TPU v5e 2x4 slice; the LLM endpoints 1 more H100 host (2 x 1 GPU)
# and 4 more A100 80GB hosts (6 replicas x 4 GPUs of the 70B, 2 x 1 of the INT4 70B).
ringmaster cluster up --pool a100-highgpu-8g=20 --pool reducers=48 \
  --pool h100-highgpu-8g=3 --pool a100-ultragpu-8g=8
KUBECONFIG=$(ringmaster cluster kubeconfig)
export KUBECONFIG

step "custom resources"
kubectl apply --server-side --force-conflicts -f crds/
kubectl wait --for=condition=Established -f crds/ --timeout=60s

step "operator (ringmaster run; log: $log)"
mkdir -p "$(dirname "$log")"
ringmaster run --metrics-port 0 >"$log" 2>&1 &
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
sleep 2

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
