# shellcheck shell=bash
# The real node of scripts/control-plane.sh (`up --node`), sourced by it: see the
# header there. Bash orchestrates (build, certificates, start, stop); every change
# to the host is made, or observed before the node's processes make it, by
# hack/control-plane/hostjournal, which appends it to $state/node/host-journal.jsonl
# first, and `node_down` has it undo exactly what the journal lists, last first,
# so that `down` leaves the machine as it was even after a failed or interrupted
# `up`, and touches nothing that is not the node's (see Undo in
# hack/control-plane/hostjournal/undo.go for what that means for each kind).

node_components=(kube-proxy kubelet containerd kube-scheduler)
node_dir() { echo "$state/node"; }
ctr_sock() { echo "$(node_dir)/containerd/containerd.sock"; }
node_port() { echo $((node_port_base + $1)); }

# Host paths the kubelet, containerd, the shims and CNI write to whatever their
# configuration says: journaled if they do not exist before the first `up
# --node`; `down` then removes what the node left in them, and keeps (and
# reports) anything else.
node_host_dirs=(/var/lib/kubelet /var/log/containers /var/log/pods /usr/libexec/kubernetes /var/lib/cni
  /run/containerd /opt/containerd /etc/cni /opt/cni /run/nri /var/run/nri /etc/kubernetes /run/kubernetes)
# Kernel settings the node needs, set (and journaled) by `up` before its
# processes start: the values the kubelet sets itself (setupKernelTunables in
# pkg/kubelet/cm, so that it finds them set and changes nothing), IP forwarding
# (the bridge plugin's isGateway turns it on at the first pod) and bridged
# traffic through iptables (kube-proxy's Services between pods of one bridge).
# `down` restores each only if it still has the value `up` set. kube-proxy's
# own sysctls (route_localnet, conntrack) are left unchanged by its configuration.
node_sysctls=(net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1
  kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000)

# hack/control-plane/hostjournal on this plane's journal (built on first use, so
# that `down` works from a cache that lost it).
host_journal() {
  local hj; hj="$(node_bindir hostjournal)/hostjournal"
  [ -x "$hj" ] || build_node_module hostjournal "" . >&2
  "$hj" -journal "$(node_dir)/host-journal.jsonl" "$@"
}

node_requirements() {
  [ "$(id -u)" = 0 ] || die "a node needs root (network, mounts, cgroups)"
  local missing=()
  command -v runc >/dev/null || missing+=(runc)
  command -v iptables >/dev/null || missing+=(iptables)
  # To remove the nftables tables iptables-nft creates (and only when empty).
  command -v nft >/dev/null || missing+=(nftables)
  if [ ${#missing[@]} -gt 0 ]; then
    # Debian packages, as the rest of the machine's tools: no binary downloads.
    log "installing ${missing[*]} (apt-get)"
    # A fresh machine may have no package lists yet: update once, then retry.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } \
      || die "a node needs ${missing[*]}: apt-get install ${missing[*]} failed"
  fi
  local ours=0
  if host_journal has bridge "$node_bridge"; then ours=1; fi
  ip link show "$node_bridge" >/dev/null 2>&1 && [ $ours = 0 ] \
    && die "bridge $node_bridge exists and is not this plane's (another node plane? set KURA_NODE_BRIDGE)"
  if [ $ours = 0 ]; then
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
  # What the node's processes will change on their own, as it is before they
  # start (a later `up` of the same plane journals nothing again): the host
  # directories that do not exist yet (and mounts under them; the kubelet
  # hard-codes its device plugin socket's path), mounts under the
  # node's state, the pod cgroups, the nftables tables that iptables-nft
  # creates when first asked about them (so journaled before any iptables
  # listing), and the iptables chains: the KUBE-* chains that appear later are
  # kube-proxy's and the kubelet's, which `up` starts.
  host_journal dirs -owned "$state" -made /var/lib/kubelet/device-plugins/kubelet.sock "${node_host_dirs[@]}"
  host_journal mounts "$(node_dir)"
  host_journal cgroups /sys/fs/cgroup kubepods
  host_journal nft-tables ip/filter ip/nat ip/mangle ip/raw ip6/filter ip6/nat ip6/mangle ip6/raw
  host_journal iptables-chains KUBE- filter nat mangle raw
  host_journal sysctl "${node_sysctls[@]}"
  node_network
  node_pki
}

node_network() {
  # No uplink: nothing but the pods' veths ever joins this bridge.
  host_journal bridge "$node_bridge" "$node_ip/${node_pod_cidr#*/}"
  # Service addresses go to the bridge (kube-proxy rewrites them there), never
  # out through the default route.
  host_journal route "$node_service_cidr" "$node_bridge"
  # The guard: whatever a pod sends that would leave through another interface is dropped.
  host_journal iptables-rule ip mangle FORWARD -i "$node_bridge" ! -o "$node_bridge" -j DROP
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
  # serving certificate must name both, or TLS fails. A plane first started
  # without a node keeps its `kubernetes` Service at the first address of the
  # node-less range (10.96.0.1, see cmd_up) after `up --node`: the apiserver
  # does not renumber an existing Service, so that address is named too.
  local sans="subjectAltName=IP:127.0.0.1,IP:$node_ip,IP:$node_service_ip,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
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
    --root-dir "$n/kubelet" --cert-dir "$n/kubelet/pki" --hostname-override "$node_name" --node-ip "$node_ip"
  start kube-proxy "$(bin kube-proxy)" --config "$n/kube-proxy.yaml"
  wait_for kube-scheduler "/healthz" 60 curl -fsSk "https://127.0.0.1:$(node_port 59)/healthz"
  wait_for kubelet "node $node_name Ready" 120 $kubectl wait --for=condition=Ready "node/$node_name" --timeout=2s
  wait_for kube-proxy "/healthz" 60 curl -fsS "http://127.0.0.1:$(node_port 56)/healthz"
  # Lifted by the node lifecycle controller once the node is Ready; pods wait for it.
  wait_for kube-controller-manager "no not-ready taint on $node_name" 60 \
    bash -c "! $kubectl get node $node_name -o jsonpath='{.spec.taints[*].key}' | grep -q not-ready"
  log "node $node_name Ready (bridge $node_bridge $node_ip, pods $node_pod_cidr, services $node_service_cidr)"
  node_ingress
}

# The node's ingress controller: Traefik (hack/control-plane/traefik, image
# from scripts/images.sh) in a pod, serving the regions' shared IngressClass
# `kura-shared` (controller traefik.io/ingress-controller, and no other class:
# dedicated gateways run their own) and publishing the node's address in the
# status of the Ingresses it serves. A bare-metal ingress controller: it binds
# :80 and :443 on the node's address (host network), as a host-network
# region's controller does, so that nothing else on the node can bind them.
# Also `scripts/control-plane.sh ingress`, on a node plane that runs already.
node_ingress() {
  local kubectl; kubectl="$(bin kubectl) --kubeconfig $state/kubeconfig"
  KURA_CP_STATE="$state" "$repo/scripts/images.sh" traefik --import >/dev/null
  local image version
  version=$(awk '$1 == "github.com/traefik/traefik/v3" {print $2}' "$modules/traefik/go.mod")
  image="kura.local/traefik:$version"
  # A class's controller cannot change: kura-shared left by an earlier demo
  # (kura-sim's, kura.dev/sim-ingress) is replaced, and said so.
  local was
  was=$($kubectl get ingressclass kura-shared -o jsonpath='{.spec.controller}' 2>/dev/null || true)
  if [ -n "$was" ] && [ "$was" != traefik.io/ingress-controller ]; then
    log "IngressClass kura-shared had controller $was: replaced by traefik.io/ingress-controller"
    $kubectl delete ingressclass kura-shared >/dev/null
  fi
  $kubectl apply --server-side --force-conflicts -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: kura-ingress
  labels:
    # Host network and :80/:443: the privileged profile, in this namespace only.
    pod-security.kubernetes.io/enforce: privileged
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: traefik, namespace: kura-ingress}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kura-ingress-traefik}
rules:
- apiGroups: [""]
  resources: [services, secrets, nodes]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses, ingressclasses]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses/status]
  verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kura-ingress-traefik}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kura-ingress-traefik}
subjects:
- {kind: ServiceAccount, name: traefik, namespace: kura-ingress}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: kura-shared}
spec:
  controller: traefik.io/ingress-controller
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: traefik
  namespace: kura-ingress
  labels: {app.kubernetes.io/name: traefik, app.kubernetes.io/part-of: kura-node}
spec:
  replicas: 1
  # One node, fixed host ports: the old pod must go before the new one can bind.
  strategy: {type: Recreate}
  selector:
    matchLabels: {app.kubernetes.io/name: traefik}
  template:
    metadata:
      labels: {app.kubernetes.io/name: traefik, app.kubernetes.io/part-of: kura-node}
    spec:
      serviceAccountName: traefik
      hostNetwork: true
      containers:
      - name: traefik
        image: $image
        imagePullPolicy: Never
        env:
        - name: HOST_IP
          valueFrom: {fieldRef: {fieldPath: status.hostIP}}
        args:
        - --global.checknewversion=false
        - --global.sendanonymoususage=false
        - --log.nocolor=true
        - --entrypoints.web.address=\$(HOST_IP):80
        - --entrypoints.websecure.address=\$(HOST_IP):443
        - --entrypoints.traefik.address=\$(HOST_IP):$(node_port 57)
        - --ping=true
        - --providers.kubernetesingress=true
        # The apiserver on the node's address (in its certificate), not through
        # the kubernetes Service: a plane first started without a node keeps
        # that Service's address from the range it had then.
        - --providers.kubernetesingress.endpoint=https://\$(HOST_IP):$api_port
        - --providers.kubernetesingress.ingressclass=kura-shared
        - --providers.kubernetesingress.ingressendpoint.ip=\$(HOST_IP)
        ports:
        - {name: web, containerPort: 80}
        - {name: websecure, containerPort: 443}
        - {name: ping, containerPort: $(node_port 57)}
        readinessProbe:
          httpGet: {path: /ping, port: ping}
          periodSeconds: 2
        securityContext:
          # Root only to bind :80 and :443, with no capability but that one.
          runAsUser: 0
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
YAML
  wait_for kubelet "the ingress controller (kura-ingress/traefik) Ready" 120 \
    $kubectl -n kura-ingress rollout status deployment/traefik --timeout=2s
  log "ingress controller Traefik $version serves IngressClass kura-shared on $node_ip:80 and :443"
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

node_down() {
  local n; n=$(node_dir)
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
    # Their ids, for the undo: what is named after them in a host directory
    # (CNI result caches, runc state, shim sockets) is the node's.
    if [ -f "$n/host-journal.jsonl" ]; then
      # shellcheck disable=SC2046
      host_journal containers "$(ctr_sock)" $("${c[@]}" containers ls -q 2>/dev/null) || true
    fi
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
  # Every host change, last first: the guard rule, the route, the bridge (with
  # the pods' veths), the sysctls, the node's iptables chains and nftables
  # tables, pod cgroups, mounts (network namespaces, container root filesystems,
  # pod volumes, the kubelet's bind mount of its root directory), directories.
  local undone="host changes undone"
  if [ -f "$n/host-journal.jsonl" ]; then
    host_journal undo || undone="host changes undone, except those reported above"
  elif [ -f "$n/journal" ]; then
    undone="host changes NOT undone: $n/journal is the journal of an older scripts/control-plane-node.sh"
  fi
  # The state (images, container root filesystems) goes; what is still mounted
  # under it is detached first, so that rm -rf cannot reach through a mount.
  local m
  for m in $(mounts_under "$n"); do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$n"
  log "node $node_name removed; $undone"
}
