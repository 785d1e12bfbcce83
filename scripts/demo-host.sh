#!/usr/bin/env bash
# The demo without a node (KURA_DEMO_NODE=0 scripts/dev.sh demo), for machines
# where it cannot run as root: the operator as a host process (the debug build)
# against the plane without a node, where kura-sim simulates the pods (marks them
# Running and Ready; no container runs) and the ingress controller (the shared
# class and the gateways' classes are kura-sim's). Installs the CRDs, the example
# instances as written (Auto/cloud, Dedicated/cloud, Shared/host) and the shared
# ingress class, runs the operator, and shows `kubectl get kurainstances` until every
# instance is Ready. The operator keeps running; Ctrl-C stops it.
# KURA_DEMO_EXIT=1 stops it once everything converged (used by the tests);
# KURA_METRICS_ADDR moves its /metrics (127.0.0.1:18080).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
state="${KURA_CP_STATE:-$repo/.control-plane}"
# On a node plane the instances' pods would really start, from images no
# registry here serves: they would never be Ready.
if [ -f "$state/node/enabled" ]; then
  echo "demo: this plane has a node: run scripts/dev.sh demo (the operator in its pod), or scripts/control-plane.sh down first" >&2
  exit 1
fi
scripts/control-plane.sh up
eval "$(scripts/control-plane.sh env)"
# The binary `scripts/dev.sh test` builds: after the tests, nothing to build.
scripts/dev.sh build
kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for=condition=Established crd/kurainstances.kura.dev crd/kuragateways.kura.dev --timeout=60s >/dev/null
kubectl create namespace kura-demo --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# No node, so no ingress controller: the shared class and the dedicated gateways'
# classes are given to the simulated one (kura-sim gives their Ingresses
# 127.0.0.1, where nothing answers), instead of Traefik's controller name.
kubectl create -f - >/dev/null 2>&1 <<YAML || true
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: kura-shared}
spec: {controller: kura.dev/sim-ingress}
YAML
# For the same reason every region turns the endpoint check off (it is on by
# default, and kura-sim's address answers nothing): added after each region's
# sharedIngressClass, a field every region has.
sed -e 's#controller: traefik.io/ingress-controller#controller: kura.dev/sim-ingress#' \
  -e 's#^\( *\)sharedIngressClass: .*#&\n\1endpointCheck: {enabled: false}#' \
  examples/config.yaml > "$state/demo-host-config.yaml"
kubectl apply -f examples/instances.yaml

kura-operator run --config "$state/demo-host-config.yaml" --metrics-addr "${KURA_METRICS_ADDR:-127.0.0.1:18080}" \
  --resync 5m >"$state/operator.log" 2>&1 &
operator=$!
trap 'kill $operator 2>/dev/null || true' EXIT
echo "operator running (pid $operator, log $state/operator.log)"

deadline=$((SECONDS + 120))
while :; do
  kubectl -n kura-demo get kurainstances
  ready=$(kubectl -n kura-demo get kurainstances -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Ready$' || true)
  total=$(kubectl -n kura-demo get kurainstances -o name | wc -l)
  if [ "$ready" -eq "$total" ]; then echo "all $total instances Ready"; break; fi
  kill -0 $operator 2>/dev/null || { echo "operator exited:"; tail -20 "$state/operator.log"; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "not converged in 120s"; exit 1; }
  sleep 2
  echo
done
[ "${KURA_DEMO_EXIT:-0}" = 1 ] && exit 0
echo "Ctrl-C to stop the operator. Try: kubectl annotate -n kura-demo kurainstance acme-eu kura.dev/reapply-at=\"\$(date -Is)\" --overwrite"
wait $operator
