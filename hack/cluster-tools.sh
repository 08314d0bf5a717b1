#!/usr/bin/env bash
# Builds the local cluster's binaries from their Go modules (through the Go module proxy) into a
# cache outside the clone, keyed by version, and prints the directory that holds them.
#
#   hack/cluster-tools.sh                  build what is missing, print the bin directory
#   hack/cluster-tools.sh etcd kwok kube   build only these components (any of etcd, kwok,
#                                          helm, kube, kueue, lws, gie), print the same directory
#   hack/cluster-tools.sh --pin [...]      rewrite tools/*/go.mod from tools/versions.env, then build
#
# The printed directory links every component built so far, by this call or an earlier one: a
# partial call (make demo asks for etcd kwok kube lws) leaves the others to a later full call.
# Cache: ${RINGMASTER_CACHE_DIR:-$HOME/.cache/ringmaster}/bin/<component>-<version>/
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tools/versions.env
source "$root/tools/versions.env"
cache=${RINGMASTER_CACHE_DIR:-$HOME/.cache/ringmaster}
log() { printf '[cluster-tools] %s\n' "$*" >&2; }

# component dir -> "module version" pairs that its go.mod must require
declare -A want=(
  [kube]="k8s.io/kubernetes v$KUBE_VERSION"
  [etcd]="go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
  [kwok]="sigs.k8s.io/kwok v$KWOK_VERSION"
  [helm]="helm.sh/helm/v3 v$HELM_VERSION"
  [kueue]="sigs.k8s.io/kueue v$KUEUE_VERSION"
  [lws]="sigs.k8s.io/lws v$LWS_VERSION"
  [gie]="sigs.k8s.io/gateway-api-inference-extension v$GIE_VERSION"
)
declare -A version=([kube]=$KUBE_VERSION [etcd]=$ETCD_VERSION [kwok]=$KWOK_VERSION [helm]=$HELM_VERSION
  [kueue]=$KUEUE_VERSION [lws]=$LWS_VERSION [gie]=$GIE_VERSION)

# Build order: the control plane first, the heaviest optional builds last; gie compiles nothing
# (CRDs only), so its place does not matter.
all_components=(etcd kwok helm kube kueue lws gie)
pin=0
if [[ ${1:-} == --pin ]]; then pin=1; shift; fi
components=()
for c in "$@"; do
  if [[ -z ${want[$c]:-} ]]; then
    log "unknown component $c (known: ${all_components[*]})"
    exit 2
  fi
done
for c in "${all_components[@]}"; do
  if [[ $# -eq 0 || " $* " == *" $c "* ]]; then components+=("$c"); fi
done

if [[ $pin == 1 ]]; then
  for c in "${!want[@]}"; do
    read -r mod ver <<<"${want[$c]}"
    (cd "$root/tools/$c" && go mod edit -require="$mod@$ver")
    if [[ $c == kube ]]; then
      # k8s.io/kubernetes replaces its staging modules with paths; pin each to v0.<minor>.<patch>.
      staging=$(go mod edit -json "$root/tools/kube/go.mod" | python3 -c \
        'import json,sys; print(" ".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or []))')
      for m in $staging; do (cd "$root/tools/kube" && go mod edit -replace="$m=$m@v0.${KUBE_VERSION#1.}"); done
    fi
    (cd "$root/tools/$c" && go mod tidy)
  done
fi

for c in "${components[@]}"; do
  read -r mod ver <<<"${want[$c]}"
  if ! grep -Eq "^\s*(require )?$mod $ver( |\$)" "$root/tools/$c/go.mod"; then
    log "tools/$c/go.mod does not require $mod $ver (tools/versions.env): run $0 --pin"
    exit 1
  fi
done

export GOFLAGS="-trimpath -buildvcs=false"
export CGO_ENABLED=0
# One build at a time per cache: callers started together (the e2e workers of a parallel suite,
# two checkouts) wait for the first and then find its binaries, instead of each compiling
# Kubernetes on the same cores.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
for c in "${components[@]}"; do
  out="$cache/bin/$c-${version[$c]}"
  if [[ -f $out/.complete ]]; then
    continue
  fi
  log "building $c ${version[$c]} into $out (cold: a few minutes; kube is the slowest)"
  start=$SECONDS
  # A private temporary directory: two builds at once (two checkouts) must not clobber each other.
  mkdir -p "$cache/bin"
  tmp=$(mktemp -d "$out.tmp.XXXXXX") && chmod 755 "$tmp"
  ldflags="-s -w"
  if [[ $c == kube ]]; then
    # What Kubernetes' own build (hack/lib/version.sh) stamps: without it the binaries report
    # v0.0.0-master, and kwokctl, kubectl and helm all read the server version.
    minor=${KUBE_VERSION#*.}; minor=${minor%%.*}
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
      ldflags+=" -X $pkg.gitTreeState=clean"
    done
  fi
  nice=()
  if [[ $c == lws ]]; then
    ldflags+=" -X sigs.k8s.io/lws/pkg/version.GitVersion=v$LWS_VERSION"
    nice=(nice -n 19)
  fi
  if [[ $c == kueue ]]; then
    ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=v$KUEUE_VERSION"
    # The heaviest build here, and optional to a running cluster: lowest CPU priority, so that a
    # shared machine stays usable while it runs (on an idle CI machine it costs nothing).
    nice=(nice -n 19)
  fi
  # The Gateway API Inference Extension is only its CRDs (InferencePool and the x-k8s.io APIs of
  # the pinned release), installed by `ringmaster cluster up --gie`
  # (operator/ringmaster/localcluster/gie.py): the module's source tree, verified against
  # tools/gie/go.sum, is all we need, so nothing is compiled; never fetched at run time.
  if [[ $c == gie ]]; then
    read -r mod _ <<<"${want[$c]}"
    src=$(cd "$root/tools/gie" && go mod download "$mod" && go list -m -f '{{.Dir}}' "$mod")
    mkdir -p "$tmp/gie-crds"
    cp "$src"/config/crd/bases/*.yaml "$tmp/gie-crds/"
    # cp keeps the module cache's read-only modes (as for Kueue's and LeaderWorkerSet's copies).
    chmod -R u+w "$tmp/gie-crds"
  else
    (cd "$root/tools/$c" && "${nice[@]}" go build -ldflags="$ldflags" -o "$tmp/" tool)
  fi
  # etcd's main package is the module root (server/), so go names the binary "server".
  if [[ $c == etcd ]]; then mv "$tmp/server" "$tmp/etcd"; fi
  # LeaderWorkerSet's main package is cmd/, so go names the binary "cmd".
  if [[ $c == lws ]]; then mv "$tmp/cmd" "$tmp/lws"; fi
  # kwok's own default stages (node heartbeat, pod ready/complete/delete) at the pinned version:
  # a cluster that adds stages of its own must list the defaults too.
  if [[ $c == kwok ]]; then
    src=$(cd "$root/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
    mkdir -p "$tmp/kwok-stages"
    cp "$src/node/fast/node-initialize.yaml" "$src/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
      "$src/pod/fast/pod-ready.yaml" "$src/pod/fast/pod-complete.yaml" "$src/pod/fast/pod-delete.yaml" \
      "$tmp/kwok-stages/"
  fi
  # Kueue's CRDs and webhook configurations at the pinned version, installed by
  # `ringmaster cluster kueue up` (operator/ringmaster/localcluster/kueue.py); never fetched at run time.
  if [[ $c == kueue ]]; then
    src=$(cd "$root/tools/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)/config/components
    mkdir -p "$tmp/kueue-crds"
    cp "$src"/crd/bases/*.yaml "$tmp/kueue-crds/"
    cp "$src/webhook/manifests.yaml" "$tmp/kueue-webhooks.yaml"
    chmod -R u+w "$tmp/kueue-crds" "$tmp/kueue-webhooks.yaml"
  fi
  # LeaderWorkerSet's CRDs and webhook configurations at the pinned version, installed by
  # `ringmaster cluster lws up` (operator/ringmaster/localcluster/lws.py); never fetched at run time.
  if [[ $c == lws ]]; then
    src=$(cd "$root/tools/lws" && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)/config
    mkdir -p "$tmp/lws-crds"
    cp "$src"/crd/bases/*.yaml "$tmp/lws-crds/"
    cp "$src/webhook/manifests.yaml" "$tmp/lws-webhooks.yaml"
    chmod -R u+w "$tmp/lws-crds" "$tmp/lws-webhooks.yaml"
  fi
  touch "$tmp/.complete"
  # Whoever finishes first installs; a build that lost the race keeps the winner's copy.
  if [[ -f $out/.complete ]]; then rm -rf "$tmp"; else rm -rf "$out" && mv "$tmp" "$out"; fi
  log "built $c in $((SECONDS - start))s: $(cd "$out" && echo *)"
done

# One directory with every binary, so callers need one PATH entry: it links each component
# built so far (a partial call's, and whatever earlier calls built), a later call adds the rest.
all="$cache/bin/all-k$KUBE_VERSION-e$ETCD_VERSION-w$KWOK_VERSION-h$HELM_VERSION-q$KUEUE_VERSION-l$LWS_VERSION-g$GIE_VERSION"
mkdir -p "$all"
for c in "${all_components[@]}"; do
  [[ -f $cache/bin/$c-${version[$c]}/.complete ]] || continue
  for f in "$cache/bin/$c-${version[$c]}"/*; do ln -sf "$f" "$all/"; done
done
echo "$all"
