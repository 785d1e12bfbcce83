#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, built from Go modules and cached.
#
#   scripts/control-plane.sh build    build (or reuse) etcd, kube-apiserver,
#                                     kube-controller-manager, kubectl, helm, kura-sim
#   scripts/control-plane.sh prometheus   build (or reuse) Prometheus and promtool (not
#                                     part of `build`: the tests of the chart's alerts
#                                     and dashboard use them, the demo does not)
#   scripts/control-plane.sh kube-state-metrics   build (or reuse) kube-state-metrics (not
#                                     part of `build`: the test of the chart's per-instance
#                                     series runs it, tests/cluster/observability/kube_state_metrics.rs)
#   scripts/control-plane.sh kura-peer   build (or reuse) hack/kura-peer, the controller-runtime
#                                     peer kura-bench measures the operator against; prints
#                                     its directory
#   scripts/control-plane.sh apiserver 1.33|1.37   build (or reuse) kube-apiserver at that
#                                     minor (the version matrix of tests/cluster/platform/versions.rs)
#   scripts/control-plane.sh controller-manager 1.33|1.37   the same for kube-controller-manager
#   KURA_K8S_MINOR=1.33 scripts/control-plane.sh up   a plane whose kube-apiserver and
#                                     kube-controller-manager are of that minor (etcd,
#                                     kubectl and kura-sim stay): the version matrix's
#                                     reconcile tests
#   scripts/control-plane.sh up       build if needed, start everything, wait for /readyz
#   scripts/control-plane.sh up --node   the same plus a real node (or KURA_NODE=1): see below
#   scripts/control-plane.sh down     stop only the processes this script started
#   scripts/control-plane.sh status   what runs, with pids
#   scripts/control-plane.sh ingress  (re)install the node's ingress controller on a
#                                     running node plane (`up --node` does it)
#   scripts/control-plane.sh env      shell exports (eval "$(scripts/control-plane.sh env)"):
#                                     KUBECONFIG; kubectl, helm and this checkout's
#                                     kura-operator (target/debug) on PATH
#
# Everything listens on 127.0.0.1 only. Pods cannot run here (no kubelet, no
# container runtime): kura-sim plays the kubelet and an ingress controller, and
# says so (see hack/control-plane/k8s/sim).
#
# A node plane (`up --node`, or KURA_NODE=1; root only; one per machine, since
# the kubelet hard-codes host paths) adds a real node, built like the rest:
# kube-scheduler, kubelet and kube-proxy (hack/control-plane/node), containerd 2
# (hack/control-plane/containerd), the CNI plugins (hack/control-plane/cni), runc
# and iptables from Debian, and the images of scripts/images.sh (a pause image,
# the Kura stand-in). Pods then really run; kura-sim leaves pods on the node alone
# and still plays the ingress controller. The apiserver then listens on the pod
# bridge's address (pods reach it through the `kubernetes` Service), not on
# 127.0.0.1. Pod traffic stays on this machine: the bridge has no uplink and a
# guard rule drops anything forwarded from it to another interface. Every host
# change is journaled first, in $state/node/host-journal.jsonl, by
# hack/control-plane/hostjournal (a Go program with unit tests: `go test ./...`
# there), and `down` undoes exactly what it lists, last first, and only as far
# as it is still the node's (bridge, route, guard rule, sysctls, the KUBE-*
# chains and nftables tables that appeared after `up`, mounts, cgroups, the host
# directories the kubelet and containerd hard-code). The plane remembers that it
# has a node: `down` and `status` need no flag.
#   KURA_NODE_BRIDGE (kura0), KURA_NODE_POD_CIDR (10.217.0.0/24, the bridge takes
#   its .1), KURA_NODE_SERVICE_CIDR (10.218.0.0/16, the `kubernetes` Service its .1),
#   KURA_NODE_PORT_BASE (32200: kubelet +50, its healthz +48, kube-proxy healthz +56
#   and metrics +49, kube-scheduler +59), KURA_NODE_NAME (kura-node).
#
# Sizing for large fleets (the N=10,000 benchmark, docs/benchmarks.md):
#   KURA_ETCD_QUOTA_BYTES (8 GiB here, etcd's own default is 2 GiB: about 150,000
#   objects and their history of status writes between two compactions pass 2 GiB,
#   and etcd then refuses every write with "mvcc: database space exceeded");
#   KURA_AUDIT_MAXBACKUP (2): rotated 200 MB audit files kept; a benchmark phase
#   at N=10,000 writes more than 400 MB of audit lines, and counts requests from
#   them, so it needs more.
#   Spread a large fleet over namespaces (kura-bench --namespaces): with 10,000
#   Services in one namespace the controller manager's endpoints controllers
#   match every pod event against all of them, and rollouts crawl.
#
# KURA_AUDIT_READS (unset): set to 1 to audit lists and watches too (their
#   request URIs show the selectors a client asked for); off by default, as
#   every watch renewal would be a line.
#
# KURA_FEATURE_GATES (none): the apiserver's --feature-gates, e.g.
#   ShardedListAndWatch=true for the server-side sharded list and watch
#   (`shardSelector`, alpha and off by default in 1.36).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
modules="$repo/hack/control-plane"
cache="${KURA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kura-operator}"
state="${KURA_CP_STATE:-$repo/.control-plane}"
k8s_version=v1.36.3
etcd_port="${KURA_ETCD_PORT:-23790}"
etcd_peer_port="${KURA_ETCD_PEER_PORT:-23800}"
api_port="${KURA_API_PORT:-16443}"
kcm_port="${KURA_KCM_PORT:-20257}"
etcd_quota_bytes="${KURA_ETCD_QUOTA_BYTES:-8589934592}"
audit_maxbackup="${KURA_AUDIT_MAXBACKUP:-2}"
feature_gates="${KURA_FEATURE_GATES:-}"

# The node plane's settings (unused without a node).
node_bridge="${KURA_NODE_BRIDGE:-kura0}"
node_pod_cidr="${KURA_NODE_POD_CIDR:-10.217.0.0/24}"
node_service_cidr="${KURA_NODE_SERVICE_CIDR:-10.218.0.0/16}"
node_port_base="${KURA_NODE_PORT_BASE:-32200}"
node_name="${KURA_NODE_NAME:-kura-node}"
# The first address of a range (x.y.z.0/n -> x.y.z.1): the bridge's, the Service's.
first_ip() { local net=${1%/*}; echo "${net%.*}.$(( ${net##*.} + 1 ))"; }
node_ip=$(first_ip "$node_pod_cidr")
node_service_ip=$(first_ip "$node_service_cidr")
node_wanted() { [ "${KURA_NODE:-}" = 1 ] || [ -f "$state/node/enabled" ]; }
# Where clients reach the apiserver: loopback, or the bridge on a node plane.
api_host() { if node_wanted; then echo "$node_ip"; else echo 127.0.0.1; fi; }

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The cache key covers everything that decides the bytes of a binary.
module_key() {
  local dir=$1
  { go version; cat "$dir/go.mod" "$dir/go.sum"; find "$dir" -name '*.go' -print0 | sort -z | xargs -0 -r cat
    echo "$k8s_version"; sed -n '/^build_module()/,/^}/p' "$0"; } | sha256sum | cut -c1-16
}

bindir() { echo "$cache/bin/$1-$(module_key "$modules/$1")"; }

build_module() {
  local name=$1; shift
  local out; out=$(bindir "$name")
  if [ -f "$out/.complete" ]; then return 0; fi
  log "building $name into $out (cold builds take minutes)"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  local ldflags="-s -w"
  if [ "$name" = k8s ]; then
    local minor=${k8s_version#v1.}; minor=${minor%%.*}
    local v
    for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $v.gitVersion=$k8s_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    done
  fi
  (cd "$modules/$name" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" "$@")
  touch "$out.tmp/.complete"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

cmd_build() {
  local start=$SECONDS
  build_module etcd .
  build_module k8s k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl ./sim
  build_module helm helm.sh/helm/v3/cmd/helm
  mkdir -p "$cache/bin/current"
  local b
  for b in "$(bindir etcd)/etcd" "$(bindir k8s)"/{kube-apiserver,kube-controller-manager,kubectl,sim} "$(bindir helm)/helm"; do
    ln -sfn "$b" "$cache/bin/current/$(basename "$b" | sed 's/^sim$/kura-sim/')"
  done
  if node_wanted; then build_node; fi
  log "binaries ready in $cache/bin/current ($((SECONDS - start))s)"
}

# The node's modules are keyed like the others plus this function's own text; a
# separate builder, so that build_module (part of every key) stays unchanged and
# a plane without a node never rebuilds for the node's sake.
node_bindir() {
  echo "$cache/bin/$1-$( { module_key "$modules/$1"; sed -n '/^build_node_module()/,/^}/p' "$0"; } | sha256sum | cut -c1-16)"
}

build_node_module() {
  local name=$1 ldflags=$2; shift 2
  local out; out=$(node_bindir "$name")
  if [ -f "$out/.complete" ]; then return 0; fi
  log "building $name into $out (cold builds take minutes)"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  (cd "$modules/$name" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/" "$@")
  touch "$out.tmp/.complete"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

build_node() {
  local minor=${k8s_version#v1.}; minor=${minor%%.*}
  local v k8s_ldflags=""
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $v.gitVersion=$k8s_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  done
  build_node_module node "$k8s_ldflags" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kube-scheduler
  build_node_module containerd "-X github.com/containerd/containerd/v2/version.Version=v2.4.2" \
    github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
  build_node_module cni "" github.com/containernetworking/plugins/plugins/main/bridge \
    github.com/containernetworking/plugins/plugins/ipam/host-local \
    github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/meta/portmap
  build_node_module standin "" ./kura-standin ./pause ./ocitar
  build_node_module hostjournal "" .
  # The node's ingress controller (hack/control-plane/traefik): its version is
  # the one its wrapper module requires, so go.mod (part of the key) decides it.
  local traefik_version
  traefik_version=$(awk '$1 == "github.com/traefik/traefik/v3" {print $2}' "$modules/traefik/go.mod")
  build_node_module traefik "-X github.com/traefik/traefik/v3/pkg/version.Version=$traefik_version" \
    github.com/traefik/traefik/v3/cmd/traefik
  mkdir -p "$cache/bin/current"
  local b
  for b in "$(node_bindir node)"/{kubelet,kube-proxy,kube-scheduler} \
    "$(node_bindir containerd)"/{containerd,containerd-shim-runc-v2,ctr} "$(node_bindir standin)"/{kura-standin,pause,ocitar} \
    "$(node_bindir traefik)/traefik"; do
    ln -sfn "$b" "$cache/bin/current/$(basename "$b")"
  done
  # A directory, not single files: containerd looks for every plugin in it.
  ln -sfn "$(node_bindir cni)" "$cache/bin/current/cni"
}

# Tools the tests use beyond the plane: Prometheus and promtool
# (tests/cluster/observability/monitoring.rs: the unit tests of the chart's alerts, and a real
# Prometheus scraping the operator) and kube-apiserver at other minors
# (tests/cluster/platform/versions.rs). Keyed like the node's parts: the module's key,
# this builder's text, and the link flags and tags.
tool_bindir() {
  echo "$cache/bin/$1-$( { module_key "$modules/$1"; sed -n '/^build_tool_module()/,/^}/p' "$0"; echo "$2 $3"; } | sha256sum | cut -c1-16)"
}

build_tool_module() {
  local name=$1 ldflags=$2 tags=$3; shift 3
  local out; out=$(tool_bindir "$name" "$ldflags" "$tags")
  if [ -f "$out/.complete" ]; then return 0; fi
  log "building $name into $out (cold builds take minutes)"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  (cd "$modules/$name" && CGO_ENABLED=0 nice -n 19 go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out.tmp/" "$@")
  touch "$out.tmp/.complete"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# Prints the binaries' directory.
# Tags: remove_all_sd leaves the static, file and HTTP service discoveries (the
# tests use static targets); without builtinassets the web UI is not embedded
# (the tests read the HTTP API only).
build_prometheus() {
  local ldflags="-X github.com/prometheus/common/version.Version=3.16.0" tags=remove_all_sd
  build_tool_module prometheus "$ldflags" "$tags" \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
  mkdir -p "$cache/bin/current"
  local b dir; dir=$(tool_bindir prometheus "$ldflags" "$tags")
  for b in "$dir"/{prometheus,promtool}; do
    ln -sfn "$b" "$cache/bin/current/$(basename "$b")"
  done
  echo "$dir"
}

# kube-state-metrics (hack/control-plane/kube-state-metrics), the exporter of
# the chart's per-instance series (files/kube-state-metrics.yaml): the test
# tests/cluster/observability/kube_state_metrics.rs runs it against the plane. Prints its
# directory.
build_kube_state_metrics() {
  local ldflags="-X github.com/prometheus/common/version.Version=v2.18.0"
  build_tool_module kube-state-metrics "$ldflags" "" k8s.io/kube-state-metrics/v2
  mkdir -p "$cache/bin/current"
  local dir; dir=$(tool_bindir kube-state-metrics "$ldflags" "")
  ln -sfn "$dir/kube-state-metrics" "$cache/bin/current/kube-state-metrics"
  echo "$dir"
}

# kura-peer (hack/kura-peer), the controller-runtime peer of kura-bench's
# references (docs/benchmarks.md): keyed by its module and this builder's text,
# cached like the tools. Prints its directory.
kura_peer_dir() {
  echo "$cache/bin/kura-peer-$( { module_key "$repo/hack/kura-peer"; sed -n '/^build_kura_peer()/,/^}/p' "$0"; } | sha256sum | cut -c1-16)"
}

build_kura_peer() {
  local out; out=$(kura_peer_dir)
  if [ ! -f "$out/.complete" ]; then
    log "building kura-peer into $out"
    rm -rf "$out.tmp"; mkdir -p "$out.tmp"
    (cd "$repo/hack/kura-peer" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w" -o "$out.tmp/" .)
    touch "$out.tmp/.complete"
    rm -rf "$out"; mv "$out.tmp" "$out"
  fi
  echo "$out"
}

# kube-apiserver or kube-controller-manager at another minor
# (hack/control-plane/COMPONENT-v1.MINOR: the Kubernetes versions the CRDs and
# the core reconciles are checked on, tests/cluster/platform/versions.rs), cached like
# the rest; prints its directory. One module per component: the key of a tool
# does not name the packages built from it.
build_k8s_minor() {
  local component=$1 minor=$2 module="$1-v$2"
  [ -f "$modules/$module/go.mod" ] || die "no module $module (hack/control-plane/$module)"
  local version; version=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' "$modules/$module/go.mod")
  [ -n "$version" ] || die "$module/go.mod requires no k8s.io/kubernetes version"
  local v ldflags=""
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=${minor#1.} -X $v.gitTreeState=clean"
  done
  build_tool_module "$module" "$ldflags" "" "k8s.io/kubernetes/cmd/kube-$component"
  tool_bindir "$module" "$ldflags" ""
}

build_apiserver() { build_k8s_minor apiserver "$1"; }

# The plane's kube-apiserver and kube-controller-manager: the cached 1.36 ones,
# or those of KURA_K8S_MINOR.
k8s_minor="${KURA_K8S_MINOR:-}"
control_plane_bin() {
  local component=$1
  if [ -z "$k8s_minor" ]; then bin "kube-$component"; return; fi
  echo "$(build_k8s_minor "$component" "$k8s_minor")/kube-$component"
}

bin() { echo "$cache/bin/current/$1"; }

pki() {
  local d="$state/pki"
  [ -f "$d/.complete" ] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kura-local-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$d/apiserver.key" -out "$d/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' > "$d/san.ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 3650 -extfile "$d/san.ext" -out "$d/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  # Static tokens: the admin (system:masters) and the controller manager.
  printf '%s,kura-admin,kura-admin,"system:masters"\n' "$(openssl rand -hex 24)" > "$d/tokens.csv"
  printf '%s,system:kube-controller-manager,kcm,"system:masters"\n' "$(openssl rand -hex 24)" >> "$d/tokens.csv"
  touch "$d/.complete"
}

# Audit every mutating request (metadata only), so tests can count what the
# operator writes per namespace: "a converged, idle fleet costs zero writes".
audit_policy() {
  cat > "$state/audit-policy.yaml" <<AP
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
$(if [ "${KURA_AUDIT_READS:-}" = 1 ]; then printf -- '- level: Metadata\n  verbs: [list, watch]\n'; fi)
- level: None
AP
}

token_of() { grep ",$1," "$state/pki/tokens.csv" | cut -d, -f1; }

# Written aside and renamed into place: tests and operators read the kubeconfig
# while another `up` may be rewriting it, and must never see it half written.
write_kubeconfig() {
  local user=$1 out=$2
  cat > "$out.tmp.$$" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kura-local
  cluster:
    server: https://$(api_host):$api_port
    certificate-authority: $state/pki/ca.crt
users:
- name: $user
  user:
    token: $(token_of "$user")
contexts:
- name: kura-local
  context: {cluster: kura-local, user: $user}
current-context: kura-local
KC
  chmod 600 "$out.tmp.$$"
  mv -f "$out.tmp.$$" "$out"
}

# Alive, and not a zombie waiting for a reaper (a crashed component's parent is gone).
pid_alive() {
  [ -f "$state/$1.pid" ] || return 1
  local pid; pid=$(cat "$state/$1.pid")
  kill -0 "$pid" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

# Report a component that died, with the tail of its log, instead of hanging.
check_alive() {
  pid_alive "$1" && return 0
  log "$1 is not running; last lines of $state/$1.log:"
  tail -n 30 "$state/$1.log" >&2 || true
  return 1
}

start() {
  local name=$1; shift
  if pid_alive "$name"; then log "$name already running (pid $(cat "$state/$name.pid"))"; return 0; fi
  "$@" >"$state/$name.log" 2>&1 &
  echo $! > "$state/$name.pid"
}

# Before starting a component whose health check anyone listening on its port
# could answer (etcd's /health, the controller manager's /healthz): a port
# another process holds would make ours fail to bind while that other process
# passed the check, and this plane would run on another plane's etcd.
require_free_port() {
  local name=$1 port=$2
  pid_alive "$name" && return 0
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "$name: port $port on 127.0.0.1 is in use by another process (another control plane? choose other KURA_*_PORT values)"
  fi
}

wait_for() {
  local name=$1 what=$2 timeout=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    check_alive "$name" || exit 1
    [ $SECONDS -lt $deadline ] || { log "$name: $what not reached in ${timeout}s"; tail -n 30 "$state/$name.log" >&2; exit 1; }
    sleep 0.5
  done
}

cmd_up() {
  cmd_build
  mkdir -p "$state"
  pki
  audit_policy
  if node_wanted; then node_prepare; fi
  require_free_port etcd "$etcd_port"
  start etcd "$(bin etcd)" --name kura-local --data-dir "$state/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "kura-local=http://127.0.0.1:$etcd_peer_port" --log-level warn \
    --quota-backend-bytes "$etcd_quota_bytes"
  wait_for etcd "health" 60 curl -fsS "http://127.0.0.1:$etcd_port/health"

  # Without a node nothing outside this machine's loopback needs the apiserver.
  # With one, pods reach it through the `kubernetes` Service: it listens on the
  # bridge, the lease reconciler publishes that address as the Service's endpoint,
  # and it can reach the kubelet (logs, exec) with a client certificate.
  local net_args=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none
    --service-cluster-ip-range 10.96.0.0/16)
  if node_wanted; then
    net_args=(--bind-address "$node_ip" --advertise-address "$node_ip" --endpoint-reconciler-type lease
      --service-cluster-ip-range "$node_service_cidr" --kubelet-preferred-address-types InternalIP
      --kubelet-client-certificate "$state/pki/apiserver-kubelet.crt" --kubelet-client-key "$state/pki/apiserver-kubelet.key")
  fi
  local gate_args=()
  if [ -n "$feature_gates" ]; then gate_args=(--feature-gates "$feature_gates"); fi
  local apiserver_bin kcm_bin
  apiserver_bin=$(control_plane_bin apiserver)
  kcm_bin=$(control_plane_bin controller-manager)
  start kube-apiserver "$apiserver_bin" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --secure-port "$api_port" "${net_args[@]}" "${gate_args[@]}" \
    --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
    --client-ca-file "$state/pki/ca.crt" \
    --token-auth-file "$state/pki/tokens.csv" \
    --authorization-mode RBAC \
    --enable-admission-plugins NamespaceLifecycle,ServiceAccount,PodSecurity,DefaultStorageClass,ResourceQuota,ValidatingAdmissionPolicy \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$state/pki/sa.pub" \
    --service-account-signing-key-file "$state/pki/sa.key" \
    --allow-privileged=true --profiling=false \
    --audit-policy-file "$state/audit-policy.yaml" --audit-log-path "$state/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup "$audit_maxbackup" --audit-log-format json \
    --max-requests-inflight 800 --max-mutating-requests-inflight 400
  write_kubeconfig kura-admin "$state/kubeconfig"
  write_kubeconfig system:kube-controller-manager "$state/kcm.kubeconfig"
  wait_for kube-apiserver "/readyz" 120 "$(bin kubectl)" --kubeconfig "$state/kubeconfig" get --raw /readyz

  require_free_port kube-controller-manager "$kcm_port"
  # The node admission taints a registering node not-ready; only the node
  # lifecycle controller lifts it, so a node plane runs it.
  local controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,-persistentvolume-attach-detach-controller'
  if node_wanted; then controllers=${controllers/,-nodelifecycle/}; fi
  # 1.37 no longer has the cloud controllers: naming one is an error there.
  if [ -n "$k8s_minor" ] && [ "${k8s_minor#1.}" -ge 37 ]; then
    controllers=${controllers/,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller/}
  fi
  start kube-controller-manager "$kcm_bin" \
    --kubeconfig "$state/kcm.kubeconfig" \
    --authentication-kubeconfig "$state/kcm.kubeconfig" --authorization-kubeconfig "$state/kcm.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$state/pki/sa.key" --root-ca-file "$state/pki/ca.crt" \
    --controllers "$controllers" \
    --concurrent-deployment-syncs 10 --concurrent-statefulset-syncs 10 --concurrent-replicaset-syncs 10 \
    --concurrent-gc-syncs 20 --kube-api-qps 200 --kube-api-burst 400
  wait_for kube-controller-manager "/healthz" 60 curl -fsSk "https://127.0.0.1:$kcm_port/healthz"

  start kura-sim "$(bin kura-sim)" --kubeconfig "$state/kubeconfig"
  # The default ServiceAccount appears once the controller manager's controllers run.
  wait_for kube-controller-manager "default ServiceAccount" 60 \
    "$(bin kubectl)" --kubeconfig "$state/kubeconfig" -n default get serviceaccount default
  check_alive kura-sim
  if node_wanted; then node_up; fi
  log "up: KUBECONFIG=$state/kubeconfig (apiserver https://$(api_host):$api_port)"
}

stop_component() {
  local name=$1
  if pid_alive "$name"; then
    local pid; pid=$(cat "$state/$name.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$state/$name.pid"
}

cmd_down() {
  local name
  # The node first: its teardown still talks to containerd, and its pods to the apiserver.
  if [ -d "$state/node" ]; then node_down; fi
  for name in kura-sim kube-controller-manager kube-apiserver etcd; do
    stop_component "$name"
  done
}

cmd_status() {
  local name rc=0 names=(etcd kube-apiserver kube-controller-manager kura-sim)
  if [ -f "$state/node/enabled" ]; then names+=("${node_components[@]}"); fi
  for name in "${names[@]}"; do
    if pid_alive "$name"; then echo "$name running (pid $(cat "$state/$name.pid"))"; else echo "$name stopped"; rc=1; fi
  done
  if [ -f "$state/node/enabled" ]; then
    if ip link show "$node_bridge" >/dev/null 2>&1; then
      echo "node $node_name: bridge $node_bridge $node_ip, pods $node_pod_cidr, services $node_service_cidr"
      "$(bin kubectl)" --kubeconfig "$state/kubeconfig" get node "$node_name" --no-headers 2>/dev/null || true
    else
      echo "node $node_name: bridge $node_bridge absent"; rc=1
    fi
  fi
  return $rc
}

cmd_env() {
  local target="${CARGO_TARGET_DIR:-target}"
  case "$target" in /*) ;; *) target="$repo/$target" ;; esac
  echo "export KUBECONFIG=$state/kubeconfig"
  echo "export PATH=$cache/bin/current:$target/debug:\$PATH"
}

source "$repo/scripts/control-plane-node.sh"

verb=${1:-}
shift || true
apiserver_minor=""
for arg in "$@"; do
  case "$arg" in
    --node) export KURA_NODE=1 ;;
    1.[0-9]*) case "$verb" in apiserver|controller-manager) ;; *) echo "unknown argument: $arg" >&2; exit 2 ;; esac
      apiserver_minor=$arg ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done
case "$verb" in
  build) cmd_build ;;
  prometheus) build_prometheus ;;  # the directory, on stdout
  kube-state-metrics) build_kube_state_metrics ;;  # the directory, on stdout
  kura-peer) build_kura_peer ;;  # the directory, on stdout
  apiserver) build_apiserver "${apiserver_minor:?usage: $0 apiserver 1.33|1.37}" ;;
  controller-manager) build_k8s_minor controller-manager "${apiserver_minor:?usage: $0 controller-manager 1.33|1.37}" ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  ingress) [ -f "$state/node/enabled" ] || die "ingress: this plane has no node (up --node)"; node_ingress ;;
  *) echo "usage: $0 build|prometheus|kube-state-metrics|kura-peer|apiserver MINOR|controller-manager MINOR|up|down|status|env|ingress [--node]" >&2; exit 2 ;;
esac
