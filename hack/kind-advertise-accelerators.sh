#!/usr/bin/env bash
# kind nodes have no GPUs or TPUs. Advertise them as extended resources on the nodes' status, as the
# Kubernetes docs describe ("Advertise Extended Resources for a Node"), so the scheduler counts them:
# nvidia.com/gpu from the nvidia.com/gpu.count label, google.com/tpu (4 per host) on TPU nodes.
set -euo pipefail
for node in $(kubectl get nodes -o name); do
  gpus=$(kubectl get "$node" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.count}')
  tpu=$(kubectl get "$node" -o jsonpath='{.metadata.labels.cloud\.google\.com/gke-tpu-accelerator}')
  if [[ -n $gpus ]]; then
    kubectl patch "$node" --subresource=status --type=json \
      -p "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$gpus\"}]"
  elif [[ -n $tpu ]]; then
    kubectl patch "$node" --subresource=status --type=json \
      -p '[{"op":"add","path":"/status/capacity/google.com~1tpu","value":"4"}]'
  fi
done
kubectl get nodes -L cloud.google.com/gke-nodepool,cloud.google.com/gke-accelerator
