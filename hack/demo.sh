#!/usr/bin/env bash
# The README's first command: the operator's main job end to end on the local cluster.
# Brings the kwok cluster up with its simulated A100 / TPU / CPU node pools, installs the CRDs,
# applies the examples and shows what Ringmaster decides for each of them.
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGMASTER_BIN_DIR=${RINGMASTER_BIN_DIR:-$(bash hack/cluster-tools.sh)}
export PATH="$RINGMASTER_BIN_DIR:$PATH"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "local cluster (kube-apiserver, etcd, kube-scheduler, kube-controller-manager, kwok)"
ringmaster cluster up
KUBECONFIG=$(ringmaster cluster kubeconfig)
export KUBECONFIG

step "custom resources"
kubectl apply --server-side --force-conflicts -f crds/
kubectl wait --for=condition=Established -f crds/ --timeout=60s

step "examples"
kubectl apply --server-side -f examples/
kubectl get tj,rsp,ie -A

step "what Ringmaster decides (ringmaster plan: the engine's prediction, no cluster needed)"
ringmaster plan examples/*.yaml

echo
echo "KUBECONFIG=$KUBECONFIG   (tear down: make cluster-down)"
