# shellcheck shell=bash
# The real node of scripts/control-plane.sh (`up --node`), sourced by it: see the
# header there. Every change to the host is appended to $state/node/journal before
# it is made, and `node_down` undoes what the journal lists, so that `down` leaves
# the machine as it was even after a failed or interrupted `up`.

node_components=(kube-proxy kubelet containerd kube-scheduler)
node_dir() { echo "$state/node"; }
ctr_sock() { echo "$(node_dir)/containerd/containerd.sock"; }
node_port() { echo $((node_port_base + $1)); }

# Host paths the kubelet, containerd, the shims and CNI write to whatever their
# configuration says: removed by `down`
# if, and only if, they did not exist before the first `up --node`.
node_host_dirs=(/var/lib/kubelet /var/log/containers /var/log/pods /usr/libexec/kubernetes /var/lib/cni
  /run/containerd /opt/containerd /etc/cni /opt/cni /run/nri /var/run/nri /etc/kubernetes /run/kubernetes)
# Kernel settings the bridge plugin, the kubelet or kube-proxy may change.
node_sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait)

journal() {
  local j; j="$(node_dir)/journal"
  grep -qxF -- "$*" "$j" 2>/dev/null || echo "$*" >> "$j"
}
journaled() { grep -qxF -- "$*" "$(node_dir)/journal" 2>/dev/null; }

node_requirements() {
  [ "$(id -u)" = 0 ] || die "a node needs root (network, mounts, cgroups)"
  local missing=()
  command -v runc >/dev/null || missing+=(runc)
  command -v iptables >/dev/null || missing+=(iptables)
  if [ ${#missing[@]} -gt 0 ]; then
    # Debian packages, as the rest of the machine's tools: no binary downloads.
    log "installing ${missing[*]} (apt-get)"
    # A fresh machine may have no package lists yet: update once, then retry.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } \
      || die "a node needs ${missing[*]}: apt-get install ${missing[*]} failed"
  fi
  ip link show "$node_bridge" >/dev/null 2>&1 && ! journaled "link $node_bridge" \
    && die "bridge $node_bridge exists and is not this plane's (another node plane? set KURA_NODE_BRIDGE)"
  if ! journaled "link $node_bridge"; then
    local used
    used=$(ip -4 route show | awk -v a="${node_pod_cidr%/*}" -v b="${node_service_cidr%/*}" '$1 ~ "^("a"|"b")" {print}')
    [ -z "$used" ] || die "$node_pod_cidr or $node_service_cidr is already routed here ($used): set KURA_NODE_POD_CIDR/KURA_NODE_SERVICE_CIDR"
  fi
}

# Before the apiserver starts: it listens on the bridge.
node_prepare() {
  if pid_alive kube-apiserver && [ ! -f "$(node_dir)/enabled" ]; then
    die "this plane runs without a node: run down first, then up --node"
  fi
  node_requirements
  mkdir -p "$(node_dir)"
  touch "$(node_dir)/enabled"
  local d
  if ! journaled "snapshot"; then
    for d in "${node_host_dirs[@]}"; do
      [ -e "$d" ] || [ -L "$d" ] || journal "dir $d"
    done
    local k v
    for k in "${node_sysctls[@]}"; do
      v=$(sysctl -n "$k" 2>/dev/null) && journal "sysctl $k $v"
    done
    # The kubelet creates its pod cgroups in every hierarchy; remember which exist.
    find /sys/fs/cgroup -maxdepth 3 -type d -name 'kubepods*' > "$(node_dir)/cgroups-before" 2>/dev/null || true
    # iptables-nft creates the nftables tables it is first asked about; the ones
    # not there before are removed by `down` once empty.
    if command -v nft >/dev/null; then
      local t
      for t in "ip filter" "ip nat" "ip mangle" "ip raw" "ip6 filter" "ip6 nat" "ip6 mangle" "ip6 raw"; do
        nft list table $t >/dev/null 2>&1 || journal "nft-table $t"
      done
    fi
    journal "snapshot"
  fi
  node_network
  node_pki
}

node_network() {
  # No uplink: nothing but the pods' veths ever joins this bridge.
  if ! ip link show "$node_bridge" >/dev/null 2>&1; then
    journal "link $node_bridge"
    ip link add "$node_bridge" type bridge
  fi
  ip addr replace "$node_ip/${node_pod_cidr#*/}" dev "$node_bridge"
  ip link set "$node_bridge" up
  # Service addresses go to the bridge (kube-proxy rewrites them there), never
  # out through the default route.
  journal "route $node_service_cidr"
  ip route replace "$node_service_cidr" dev "$node_bridge"
  # The guard: whatever a pod sends that would leave through another interface is dropped.
  local guard=(FORWARD -i "$node_bridge" ! -o "$node_bridge" -j DROP)
  journal "guard ${guard[*]}"
  iptables -t mangle -C "${guard[@]}" 2>/dev/null || iptables -t mangle -I "${guard[@]}"
  journal "kube-chains"
}

# Client certificates signed by the plane's CA, for the node's components.
node_cert() {
  local name=$1 subject=$2 ext=${3:-}
  local d="$state/pki"
  [ -f "$d/$name.crt" ] && return 0
  openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null
  if [ -n "$ext" ]; then
    printf '%s\n' "$ext" > "$d/$name.ext"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
      -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null
  else
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
      -out "$d/$name.crt" 2>/dev/null
  fi
}

node_pki() {
  local d="$state/pki"
  # In-cluster clients dial the Service IP, host clients the bridge address: the
  # serving certificate must name both, or TLS fails.
  local sans="subjectAltName=IP:127.0.0.1,IP:$node_ip,IP:$node_service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  if [ "$(cat "$d/node-san.ext" 2>/dev/null)" != "$sans" ]; then
    printf '%s\n' "$sans" > "$d/node-san.ext"
    openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
      -days 3650 -extfile "$d/node-san.ext" -out "$d/apiserver.crt" 2>/dev/null
  fi
  node_cert node "/O=system:nodes/CN=system:node:$node_name"
  node_cert kube-proxy "/CN=system:kube-proxy"
  node_cert kube-scheduler "/CN=system:kube-scheduler"
  node_cert apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client"
}

node_kubeconfig() {
  local name=$1 out=$2
  cat > "$out.tmp.$$" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kura-local
  cluster:
    server: https://$node_ip:$api_port
    certificate-authority: $state/pki/ca.crt
users:
- name: $name
  user:
    client-certificate: $state/pki/$name.crt
    client-key: $state/pki/$name.key
contexts:
- name: kura-local
  context: {cluster: kura-local, user: $name}
current-context: kura-local
KC
  chmod 600 "$out.tmp.$$"
  mv -f "$out.tmp.$$" "$out"
}

node_containerd_config() {
  local n; n=$(node_dir)
  cat > "$n/containerd.toml" <<TOML
version = 3
root = '$n/containerd/root'
state = '$n/containerd/state'
imports = []
[grpc]
  address = '$(ctr_sock)'
[ttrpc]
  address = '$(ctr_sock).ttrpc'
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      # No registry is reachable: the sandbox image is imported (scripts/images.sh).
      sandbox = 'kura.local/pause:1'
  [plugins.'io.containerd.cri.v1.runtime']
    # This VM lacks CAP_SYS_RESOURCE: runc could not lower oom_score_adj to the
    # kubelet's -998 for sandboxes and every sandbox would fail to start.
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_unprivileged_ports = false
    enable_unprivileged_icmp = false
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '$(command -v runc)'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['$cache/bin/current/cni']
      conf_dir = '$n/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
  [plugins.'io.containerd.internal.v1.opt']
    path = '$n/containerd/opt'
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = '$n/containerd/image-verifier'
TOML
  mkdir -p "$n/cni/net.d" "$n/cni/ipam"
  # ipMasq off: pod traffic is never NATed off the machine. Hairpin: a pod can
  # reach itself through its Service.
  cat > "$n/cni/net.d/10-kura.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "kura",
  "plugins": [
    {"type": "bridge", "bridge": "$node_bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$n/cni/ipam", "ranges": [[{"subnet": "$node_pod_cidr", "gateway": "$node_ip"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

node_kubelet_config() {
  local n; n=$(node_dir)
  mkdir -p "$n/manifests" "$n/pod-logs" "$n/volume-plugins"
  cat > "$n/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $(node_port 50)
healthzBindAddress: 127.0.0.1
healthzPort: $(node_port 48)
readOnlyPort: 0
containerRuntimeEndpoint: unix://$(ctr_sock)
cgroupDriver: cgroupfs
# This machine has cgroup v1 hierarchies: accepted, with a deprecation warning.
failCgroupV1: false
failSwapOn: false
# No cluster DNS here; pods get no resolv.conf from the host either.
resolvConf: ""
staticPodPath: $n/manifests
podLogsDir: $n/pod-logs
volumePluginDir: $n/volume-plugins
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $state/pki/ca.crt}
authorization:
  mode: Webhook
# Imported images must never be collected: nothing could pull them back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "2%", imagefs.available: "2%"}
YAML
  cat > "$n/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $n/kube-proxy.kubeconfig}
hostnameOverride: $node_name
clusterCIDR: $node_pod_cidr
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:$(node_port 56)
metricsBindAddress: 127.0.0.1:$(node_port 49)
nodePortAddresses: ["$node_ip/32"]
# These keep kube-proxy from changing sysctls (route_localnet, conntrack sizes and timeouts).
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

node_up() {
  local n kubectl; n=$(node_dir); kubectl="$(bin kubectl) --kubeconfig $state/kubeconfig"
  # No Node authorizer here (RBAC only): nodes get the system:node role through their group.
  $kubectl create clusterrolebinding kura-nodes --clusterrole system:node --group system:nodes \
    --dry-run=client -o yaml | $kubectl apply -f - >/dev/null
  node_kubeconfig node "$n/kubelet.kubeconfig"
  node_kubeconfig kube-proxy "$n/kube-proxy.kubeconfig"
  node_kubeconfig kube-scheduler "$n/kube-scheduler.kubeconfig"

  # Every fixed port of the node, before anything starts: a port taken by
  # another process (an ephemeral port of some client, if the base was put in
  # the ephemeral range) is named here, not found as a health check that never
  # answers.
  require_free_port kube-scheduler "$(node_port 59)"
  require_free_port kubelet "$(node_port 50)"
  require_free_port kubelet "$(node_port 48)"
  require_free_port kube-proxy "$(node_port 56)"
  require_free_port kube-proxy "$(node_port 49)"
  start kube-scheduler "$(bin kube-scheduler)" --kubeconfig "$n/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$n/kube-scheduler.kubeconfig" --authorization-kubeconfig "$n/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(node_port 59)" --leader-elect=false

  node_containerd_config
  mkdir -p "$n/containerd"
  # The shim is found on PATH, next to containerd.
  start containerd env PATH="$cache/bin/current:$PATH" "$(bin containerd)" --config "$n/containerd.toml"
  wait_for containerd "its socket" 60 "$(bin ctr)" --address "$(ctr_sock)" version
  KURA_CP_STATE="$state" "$repo/scripts/images.sh" standin --import >/dev/null

  node_kubelet_config
  start kubelet "$(bin kubelet)" --config "$n/kubelet.yaml" --kubeconfig "$n/kubelet.kubeconfig" \
    --root-dir "$n/kubelet" --hostname-override "$node_name" --node-ip "$node_ip"
  start kube-proxy "$(bin kube-proxy)" --config "$n/kube-proxy.yaml"
  wait_for kube-scheduler "/healthz" 60 curl -fsSk "https://127.0.0.1:$(node_port 59)/healthz"
  wait_for kubelet "node $node_name Ready" 120 $kubectl wait --for=condition=Ready "node/$node_name" --timeout=2s
  wait_for kube-proxy "/healthz" 60 curl -fsS "http://127.0.0.1:$(node_port 56)/healthz"
  # Lifted by the node lifecycle controller once the node is Ready; pods wait for it.
  wait_for kube-controller-manager "no not-ready taint on $node_name" 60 \
    bash -c "! $kubectl get node $node_name -o jsonpath='{.spec.taints[*].key}' | grep -q not-ready"
  log "node $node_name Ready (bridge $node_bridge $node_ip, pods $node_pod_cidr, services $node_service_cidr)"
}

# Mount points at or under one of the given paths, deepest first.
mounts_under() {
  local p
  awk '{print $5}' /proc/self/mountinfo | while read -r m; do
    for p in "$@"; do
      case "$m" in "$p"|"$p"/*) echo "$m"; break ;; esac
    done
  done | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-
}

# Rules referring to KUBE-* chains (and the chains): what kube-proxy and the
# kubelet create. Plain iptables, so it works whether or not kube-proxy can run.
remove_kube_chains() {
  local cmd=$1 table rule chain
  for table in filter nat mangle raw; do
    # Rules in built-in chains that jump to KUBE-* chains (the chains' own rules go with -F).
    { $cmd -t "$table" -S 2>/dev/null || true; } | awk '$1 == "-A" && $2 !~ /^KUBE-/ && / -j KUBE-/' \
      | while read -r rule; do
          # shellcheck disable=SC2086
          eval "$cmd -t $table ${rule/-A /-D }" 2>/dev/null || true
        done
    for chain in $($cmd -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      $cmd -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $($cmd -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      $cmd -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}

node_down() {
  local n j; n=$(node_dir); j="$n/journal"
  stop_component kube-proxy
  stop_component kubelet
  # Its Node object goes too (once its kubelet cannot register it again): left
  # registered in etcd, it would make kura-sim leave every pod of a later plane
  # without a node on this state to a kubelet that no longer runs.
  if pid_alive kube-apiserver; then
    "$(bin kubectl)" --kubeconfig "$state/kubeconfig" delete node "$node_name" --ignore-not-found --wait=false \
      >/dev/null 2>&1 || log "could not delete node $node_name"
  fi
  # Stop every container (pods and sandboxes) while containerd still runs, so
  # that the shims clean up their mounts and exit.
  if pid_alive containerd; then
    local c=("$(bin ctr)" --address "$(ctr_sock)" -n k8s.io) id
    for id in $("${c[@]}" tasks ls -q 2>/dev/null); do "${c[@]}" tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $("${c[@]}" tasks ls -q 2>/dev/null); do
      for _ in $(seq 1 20); do "${c[@]}" tasks delete "$id" >/dev/null 2>&1 && break; sleep 0.25; done
    done
  fi
  stop_component containerd
  stop_component kube-scheduler
  # Shims this plane's containerd started that are still there, and their containers.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $(ctr_sock)( |$)" || true); do
    pkill -9 -P "$pid" 2>/dev/null || true
    kill -9 "$pid" 2>/dev/null || true
  done
  # Mounts: network namespaces, container root filesystems, pod volumes, the
  # kubelet's bind mount of its root directory.
  local m dirs=("$n")
  while read -r line; do dirs+=("${line#dir }"); done < <(grep '^dir ' "$j" 2>/dev/null || true)
  for _ in 1 2 3; do
    for m in $(mounts_under "${dirs[@]}"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  # The pods' veths, then the bridge (its address and the Service route go with it).
  if journaled "link $node_bridge" && ip link show "$node_bridge" >/dev/null 2>&1; then
    for m in $(ip -o link show master "$node_bridge" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link del "$m" 2>/dev/null || true
    done
    ip link del "$node_bridge"
    log "removed bridge $node_bridge"
  fi
  if journaled "route $node_service_cidr"; then ip route del "$node_service_cidr" 2>/dev/null || true; fi
  local guard; guard=$(grep '^guard ' "$j" 2>/dev/null | head -n1 | cut -d' ' -f2-)
  if [ -n "$guard" ]; then
    # shellcheck disable=SC2086
    while iptables -t mangle -C $guard 2>/dev/null; do iptables -t mangle -D $guard; done
  fi
  if journaled "kube-chains"; then
    remove_kube_chains iptables
    command -v ip6tables >/dev/null && remove_kube_chains ip6tables
  fi
  local family table
  while read -r _ family table; do
    # Only when empty: a rule in it is someone else's.
    local cmd=iptables; [ "$family" = ip6 ] && cmd=ip6tables
    if ! $cmd -t "$table" -S 2>/dev/null | grep -qE '^-(A|N) '; then
      nft delete table "$family" "$table" 2>/dev/null || true
    fi
  done < <(grep '^nft-table ' "$j" 2>/dev/null || true)
  local k v
  while read -r _ k v; do
    [ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] || sysctl -q -w "$k=$v" >/dev/null 2>&1 || log "could not restore $k=$v"
  done < <(grep '^sysctl ' "$j" 2>/dev/null || true)
  # Pod cgroups: every kubepods tree that was not there before, leaves first.
  local cg
  for cg in $(find /sys/fs/cgroup -maxdepth 3 -type d -name 'kubepods*' 2>/dev/null); do
    grep -qxF "$cg" "$n/cgroups-before" 2>/dev/null && continue
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [ -d "$cg" ] && log "could not remove cgroup $cg"
  done
  while read -r _ m; do rm -rf "$m"; done < <(grep '^dir ' "$j" 2>/dev/null || true)
  # The state (images, container root filesystems) goes; the journal has been undone.
  for m in $(mounts_under "$n"); do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$n"
  log "node $node_name removed; host changes undone"
}
