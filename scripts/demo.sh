#!/usr/bin/env bash
# The operator's main job with the examples, the way users run it: its image
# (scripts/images.sh, from the release build), in its pod, installed with the
# Helm chart into a namespace enforcing the `restricted` Pod Security profile,
# with examples/config.yaml as the chart's configuration; the example instances'
# pods really run on the plane's node (scripts/control-plane.sh up --node, which
# needs root). Waits until every instance is Ready and its pods run and are
# Ready on the node, prints `kubectl get kurainstances,pods`, then follows the
# operator's log until Ctrl-C (the operator keeps running in its pod).
#
# What a single node has not (a registry, a cloud load balancer, an ingress
# controller, a volume provisioner) is said at the start, with what the demo
# does instead; nothing is marked Ready that did not become Ready.
#
#   KURA_DEMO_EXIT=1        exit once converged (the README test)
#   KURA_DEMO_TIMEOUT=300   seconds to wait for convergence
#   KURA_DEMO_NODE=0        the demo without a node and without root
#                           (scripts/demo-host.sh: a host process, simulated pods)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
if [ "${KURA_DEMO_NODE:-1}" = 0 ]; then exec scripts/demo-host.sh; fi

say() { printf 'demo: %s\n' "$*"; }
if [ "$(id -u)" != 0 ]; then
  say "the operator runs in its pod on a real node, and a node needs root (network, mounts, cgroups):" >&2
  say "run this as root, or KURA_DEMO_NODE=0 scripts/dev.sh demo (the operator as a host process; kura-sim simulates the pods)" >&2
  exit 1
fi

state="${KURA_CP_STATE:-$repo/.control-plane}"
node="${KURA_NODE_NAME:-kura-node}"
ns=kura-demo
release=kura-operator
standin=kura.local/kura-standin:1
volumes="$state/node/volumes"
# Paths in the checkout are said relative to it.
show() { echo "${1#"$repo"/}"; }

scripts/control-plane.sh up --node
eval "$(scripts/control-plane.sh env)"
# The CLI of the README's next commands (render, diff): the very binary
# `scripts/dev.sh test` builds, so after the tests there is nothing to build.
scripts/dev.sh build
# The image's binary, built as the Dockerfile's builder stage builds it.
scripts/release-build.sh
scripts/images.sh operator --import >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)

kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for=condition=Established crd/kurainstances.kura.dev crd/kuragateways.kura.dev --timeout=60s >/dev/null
# The operator and the instances' pods meet the restricted profile; the namespace enforces it.
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
YAML

# The chart's values: the imported image, and examples/config.yaml as the operator
# configuration. The image tag is the version whatever the build, so the build's
# hash goes into a pod annotation: a rebuilt binary rolls the operator's pod.
values="$state/demo-values.yaml"
{
  echo "image: {repository: kura.local/kura-operator, tag: \"$version\", pullPolicy: Never}"
  echo "podAnnotations: {kura.dev/demo-build: \"$(sha256sum target/release/kura-operator | cut -c1-16)\"}"
  echo "config:"
  sed 's/^/  /' examples/config.yaml
} > "$values"
say "helm upgrade --install $release charts/kura-operator -n $ns -f $(show "$values") (waits for the operator's pod to be Ready)"
helm upgrade --install "$release" charts/kura-operator -n "$ns" -f "$values" --wait --timeout 180s >/dev/null

say "on this single node, as in a cluster: the operator's image in its pod, from the chart; the instances'"
say "  StatefulSet pods on node $node, Ready through their own readiness probes. What the node has not:"
say "  - no registry: the instances run $standin, a stand-in answering Kura's probes"
say "    from the configuration the operator renders, instead of ghcr.io/kura-dev/kura:1.8.2"
say "  - no cloud load balancer: acme-eu (Auto) and globex-eu (Dedicated) would each get a dedicated"
say "    gateway (Traefik behind a LoadBalancer Service), whose Service no load balancer gives an address"
say "    here; they are applied with gateway mode Shared. What they get in a cloud:"
say "    kura-operator render -f examples/instances.yaml --config examples/config.yaml"
say "  - the ingress controller is real: Traefik $(awk '$1 == "github.com/traefik/traefik/v3" {print $2}' \
  hack/control-plane/traefik/go.mod), built from its Go module, in its pod on the node (kura-ingress/traefik),"
say "    serves the shared class kura-shared on the node's address, :80"
say "  - no volume provisioner: each claim is bound to a hostPath volume under $(show "$volumes")"
say "  - initech-fra reads CACHE_TOKEN from Secret initech-cache, which the examples leave to you:"
say "    the demo creates it with a random token"
kubectl apply -f examples/shared-ingress-class.yaml >/dev/null
kubectl -n "$ns" get secret initech-cache >/dev/null 2>&1 \
  || kubectl -n "$ns" create secret generic initech-cache --from-literal=token="$(openssl rand -hex 16)" >/dev/null
kubectl patch --local -f examples/instances.yaml --type merge -o json \
  -p "{\"spec\": {\"image\": \"$standin\", \"gateway\": {\"mode\": \"Shared\"}}}" | kubectl apply -f -

# No provisioner: every unbound claim of the demo's namespace gets a volume bound
# to it in advance (claimRef), of its class and size, on a directory of the node's
# state, which `scripts/control-plane.sh down` removes. World-writable, as a
# local-path provisioner makes them: hostPath volumes get no fsGroup ownership.
bind_claims() {
  local claim class size dir
  { kubectl -n "$ns" get pvc -o jsonpath='{range .items[?(@.status.phase=="Pending")]}{.metadata.name}{"|"}{.spec.storageClassName}{"|"}{.spec.resources.requests.storage}{"\n"}{end}' || true; } |
    while IFS='|' read -r claim class size; do
      kubectl get pv "$ns-$claim" >/dev/null 2>&1 && continue
      dir="$volumes/$ns-$claim"
      mkdir -p "$dir" && chmod 0777 "$dir"
      kubectl create -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: $ns-$claim}
spec:
  capacity: {storage: $size}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: "$class"
  hostPath: {path: $dir, type: Directory}
  claimRef: {namespace: $ns, name: $claim}
YAML
      say "claim $claim ($size${class:+, class $class}): hostPath volume $(show "$dir")"
    done
}

# Converged: every instance Ready, and as many pods of instances as their
# replicas add up to, each bound to the node, Ready, and run by containerd.
# A failed read counts as nothing yet: the loop asks again.
progress() {
  local instances pods
  instances=$(kubectl -n "$ns" get kurainstances \
    -o jsonpath='{range .items[*]}{.spec.replicas}{" "}{.status.phase}{"\n"}{end}' 2>/dev/null || true)
  pods=$(kubectl -n "$ns" get pods -l app.kubernetes.io/name=kura -o jsonpath='{range .items[*]}{.spec.nodeName}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"|"}{.status.containerStatuses[0].containerID}{"\n"}{end}' 2>/dev/null || true)
  echo "$(grep -c ' Ready$' <<<"$instances") $(grep -c . <<<"$instances")" \
    "$(grep -c "^$node|True|containerd://" <<<"$pods") $(awk '{n += $1} END {print n + 0}' <<<"$instances")"
}

timeout=${KURA_DEMO_TIMEOUT:-300}
deadline=$((SECONDS + timeout))
last=""
while :; do
  bind_claims
  read -r ready total pods want < <(progress)
  line="instances Ready: $ready/$total; their pods running and Ready on $node: $pods/$want"
  [ "$line" = "$last" ] || say "$line"
  last=$line
  if [ "$total" -gt 0 ] && [ "$ready" = "$total" ] && [ "$pods" = "$want" ]; then break; fi
  if [ $SECONDS -ge $deadline ]; then
    say "not converged in ${timeout}s:"
    kubectl -n "$ns" get kurainstances,pods,pvc -o wide || true
    kubectl -n "$ns" logs "deploy/$release" --tail 20 || true
    exit 1
  fi
  sleep 2
done

echo
echo "\$ kubectl -n $ns get kurainstances,pods -o wide"
kubectl -n "$ns" get kurainstances,pods -o wide
echo
# A real request through the ingress controller to one instance: its host, at
# the address the controller published in its Ingress's status.
ingress=$(kubectl -n "$ns" get ingress -l kura.dev/instance=acme-eu -o jsonpath='{.items[0].metadata.name}')
host=$(kubectl -n "$ns" get ingress "$ingress" -o jsonpath='{.spec.rules[0].host}')
address=$(kubectl -n "$ns" get ingress "$ingress" -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
# Ready is the pods' and the address's: the controller may route a moment later.
for _ in $(seq 1 30); do
  curl -fsS -o /dev/null --max-time 2 --resolve "$host:80:$address" "http://$host/up" 2>/dev/null && break
  sleep 1
done
echo "\$ curl -sS -i --resolve $host:80:$address http://$host/up"
curl -sS -i --max-time 5 --resolve "$host:80:$address" "http://$host/up" | tr -d '\r'
echo
[ "${KURA_DEMO_EXIT:-0}" = 1 ] && exit 0
say "the operator keeps running in its pod until scripts/control-plane.sh down (which also undoes the node's"
say "host changes). In another shell: eval \"\$(scripts/control-plane.sh env)\"; then e.g."
say "  kubectl -n $ns annotate kurainstance acme-eu kura.dev/reapply-at=\"\$(date -Is)\" --overwrite"
say "following the operator's log; Ctrl-C stops following"
exec kubectl -n "$ns" logs -f "deploy/$release"
