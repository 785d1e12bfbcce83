#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, built from Go modules and cached.
#
#   scripts/control-plane.sh build    build (or reuse) etcd, kube-apiserver,
#                                     kube-controller-manager, kubectl, helm, kura-sim
#   scripts/control-plane.sh up       build if needed, start everything, wait for /readyz
#   scripts/control-plane.sh down     stop only the processes this script started
#   scripts/control-plane.sh status   what runs, with pids
#   scripts/control-plane.sh env      shell exports (eval "$(scripts/control-plane.sh env)"):
#                                     KUBECONFIG; kubectl, helm and this checkout's
#                                     kura-operator (target/debug) on PATH
#
# Everything listens on 127.0.0.1 only. Pods cannot run here (no kubelet, no
# container runtime): kura-sim plays the kubelet and an ingress controller, and
# says so (see hack/control-plane/k8s/sim).
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
  log "binaries ready in $cache/bin/current ($((SECONDS - start))s)"
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
    server: https://127.0.0.1:$api_port
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
  require_free_port etcd "$etcd_port"
  start etcd "$(bin etcd)" --name kura-local --data-dir "$state/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "kura-local=http://127.0.0.1:$etcd_peer_port" --log-level warn
  wait_for etcd "health" 60 curl -fsS "http://127.0.0.1:$etcd_port/health"

  start kube-apiserver "$(bin kube-apiserver)" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --endpoint-reconciler-type none \
    --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
    --client-ca-file "$state/pki/ca.crt" \
    --token-auth-file "$state/pki/tokens.csv" \
    --authorization-mode RBAC \
    --enable-admission-plugins NamespaceLifecycle,ServiceAccount,PodSecurity,DefaultStorageClass,ResourceQuota,ValidatingAdmissionPolicy \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$state/pki/sa.pub" \
    --service-account-signing-key-file "$state/pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --allow-privileged=true --profiling=false \
    --audit-policy-file "$state/audit-policy.yaml" --audit-log-path "$state/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 2 --audit-log-format json \
    --max-requests-inflight 800 --max-mutating-requests-inflight 400
  write_kubeconfig kura-admin "$state/kubeconfig"
  write_kubeconfig system:kube-controller-manager "$state/kcm.kubeconfig"
  wait_for kube-apiserver "/readyz" 120 "$(bin kubectl)" --kubeconfig "$state/kubeconfig" get --raw /readyz

  require_free_port kube-controller-manager "$kcm_port"
  start kube-controller-manager "$(bin kube-controller-manager)" \
    --kubeconfig "$state/kcm.kubeconfig" \
    --authentication-kubeconfig "$state/kcm.kubeconfig" --authorization-kubeconfig "$state/kcm.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$state/pki/sa.key" --root-ca-file "$state/pki/ca.crt" \
    --controllers '*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,-persistentvolume-attach-detach-controller' \
    --concurrent-deployment-syncs 10 --concurrent-statefulset-syncs 10 --concurrent-replicaset-syncs 10 \
    --concurrent-gc-syncs 20 --kube-api-qps 200 --kube-api-burst 400
  wait_for kube-controller-manager "/healthz" 60 curl -fsSk "https://127.0.0.1:$kcm_port/healthz"

  start kura-sim "$(bin kura-sim)" --kubeconfig "$state/kubeconfig"
  # The default ServiceAccount appears once the controller manager's controllers run.
  wait_for kube-controller-manager "default ServiceAccount" 60 \
    "$(bin kubectl)" --kubeconfig "$state/kubeconfig" -n default get serviceaccount default
  check_alive kura-sim
  log "up: KUBECONFIG=$state/kubeconfig (apiserver https://127.0.0.1:$api_port)"
}

cmd_down() {
  local name
  for name in kura-sim kube-controller-manager kube-apiserver etcd; do
    if pid_alive "$name"; then
      local pid; pid=$(cat "$state/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
      log "stopped $name (pid $pid)"
    fi
    rm -f "$state/$name.pid"
  done
}

cmd_status() {
  local name rc=0
  for name in etcd kube-apiserver kube-controller-manager kura-sim; do
    if pid_alive "$name"; then echo "$name running (pid $(cat "$state/$name.pid"))"; else echo "$name stopped"; rc=1; fi
  done
  return $rc
}

cmd_env() {
  local target="${CARGO_TARGET_DIR:-target}"
  case "$target" in /*) ;; *) target="$repo/$target" ;; esac
  echo "export KUBECONFIG=$state/kubeconfig"
  echo "export PATH=$cache/bin/current:$target/debug:\$PATH"
}

case "${1:-}" in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) echo "usage: $0 build|up|down|status|env" >&2; exit 2 ;;
esac
