#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, from the project's own
# builds: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a
# kubelet on containerd (runc, a CNI bridge) and kube-proxy in iptables mode.
# Nothing is fetched from a registry: images are imported into containerd
# (`hack/localnode.sh import IMAGE...`), and the pod sandbox is a local image.
#
#   hack/localnode.sh up        build what is missing, start the node, wait
#                               until it is Ready; prints the KUBECONFIG path
#   hack/localnode.sh down      stop every process it started and remove
#                               what it made (containers, mounts, the bridge,
#                               kube-proxy's rules, its directory), and put
#                               back the sysctls the kubelet changes
#   hack/localnode.sh import IMAGE...
#                               copy podman images into the node's containerd
#   hack/localnode.sh status    what runs, and the node
#
# Needs root, Debian's containerd, runc, containernetworking-plugins,
# iptables and conntrack (installed with apt-get when missing), podman for
# the sandbox image, and cgroup v1 or v2. The settings this machine needs and
# why are in docs/localnode.md.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
K8S_VERSION=${KUBERNETES_VERSION:-v1.37.2}
BIN=${LOCALNODE_BIN:-$ROOT/bin/k8s/$K8S_VERSION}
DIR=${LOCALNODE_DIR:-/tmp/simple-workflow-localnode}
NODE=${LOCALNODE_NAME:-localnode}
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
POD_CIDR=10.244.0.0/24
ETCD_PORT=${LOCALNODE_ETCD_PORT:-12379}
API_PORT=${LOCALNODE_API_PORT:-6443}
SANDBOX_IMAGE=localhost/simple-workflow-pause:local
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy"

log() { printf 'localnode: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (containers, mounts, iptables)"

node_ip() {
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1)
  [ -n "$ip" ] || ip=$(hostname -I | awk '{print $1}')
  [ -n "$ip" ] || die "no IPv4 address for the node (the API server may not listen on loopback only)"
  echo "$ip"
}

ensure_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v openssl >/dev/null || missing+=(openssl)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian's ${missing[*]}"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

ensure_binaries() {
  local c missing=()
  for c in kube-apiserver kubectl etcd; do [ -x "$BIN/$c" ] || missing+=("$c"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "building ${missing[*]} (make envtest)"
    make -C "$ROOT" envtest >&2
  fi
  for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do
    if [ ! -x "$BIN/$c" ]; then
      log "building $c from k8s.io/kubernetes $K8S_VERSION (minutes the first time)"
      (cd "$ROOT/hack/tools/kube" && go build -ldflags "$(../version-ldflags.sh kube)" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c")
    fi
  done
}

# --- certificates ----------------------------------------------------------

cert() { # name subject [san]
  local name=$1 subj=$2 san=${3:-}
  local ext="$DIR/pki/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$ext"
  openssl req -newkey rsa:2048 -nodes -keyout "$DIR/pki/$name.key" -subj "$subj" \
    -out "$DIR/pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$DIR/pki/$name.csr" -CA "$DIR/pki/ca.crt" -CAkey "$DIR/pki/ca.key" \
    -CAcreateserial -days 30 -extfile "$ext" -out "$DIR/pki/$name.crt" 2>/dev/null
}

make_pki() {
  local ip=$1
  mkdir -p "$DIR/pki"
  [ -f "$DIR/pki/ca.crt" ] && return
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$DIR/pki/ca.key" -out "$DIR/pki/ca.crt" \
    -days 30 -subj "/CN=localnode-ca" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$DIR/pki/front-proxy-ca.key" \
    -out "$DIR/pki/front-proxy-ca.crt" -days 30 -subj "/CN=localnode-front-proxy-ca" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "IP:$SERVICE_IP,IP:$ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
  cert admin "/O=system:masters/CN=localnode-admin"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE" "IP:$ip,DNS:$NODE"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kube-proxy "/CN=system:kube-proxy"
  openssl genrsa -out "$DIR/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$DIR/pki/sa.key" -pubout -out "$DIR/pki/sa.pub" 2>/dev/null
}

kubeconfig() { # name server
  local name=$1 server=$2
  cat >"$DIR/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: localnode
  cluster:
    server: $server
    certificate-authority: $DIR/pki/ca.crt
users:
- name: $name
  user:
    client-certificate: $DIR/pki/$name.crt
    client-key: $DIR/pki/$name.key
contexts:
- name: localnode
  context: {cluster: localnode, user: $name}
current-context: localnode
EOF
}

# --- configuration ---------------------------------------------------------

write_configs() {
  local ip=$1
  mkdir -p "$DIR/cni/net.d" "$DIR/containerd" "$DIR/kubelet" "$DIR/logs" "$DIR/runc"
  cat >"$DIR/cni/net.d/10-localnode.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "localnode",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$DIR/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
  # restrict_oom_score_adj: CAP_SYS_RESOURCE is not in this machine's
  # bounding set, so runc may not lower oom_score_adj below 0.
  cat >"$DIR/containerd.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$DIR/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "$DIR/runc"
      SystemdCgroup = false
EOF
  local cgroupv1=true
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && cgroupv1=false
  cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$DIR/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
failSwapOn: false
address: $ip
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  [ "$cgroupv1" = true ] || sed -i '/^failCgroupV1/d' "$DIR/kubelet.yaml"
  local proxy="$DIR/kube-proxy.yaml"
  local want
  want=$(cat <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: $ip
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
clientConnection: {kubeconfig: $DIR/kube-proxy.kubeconfig}
conntrack: {maxPerCore: 0}
iptables: {localhostNodePorts: false}
EOF
)
  # kube-proxy exits when its configuration file changes: write it only
  # when its content does.
  if [ ! -f "$proxy" ] || [ "$(cat "$proxy")" != "$want" ]; then echo "$want" >"$proxy"; fi
}

# --- processes -------------------------------------------------------------

start() { # name command...
  local name=$1; shift
  if [ -f "$DIR/$name.pid" ] && kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null; then return; fi
  "$@" >"$DIR/logs/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

wait_for() { # what seconds command...
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then die "$what not ready after ${secs}s (logs in $DIR/logs)"; fi
    sleep 0.3
  done
}

kc() { "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" "$@"; }

save_sysctls() {
  [ -f "$DIR/sysctls" ] && return
  local k
  for k in vm/overcommit_memory kernel/panic kernel/panic_on_oops net/ipv4/ip_forward; do
    echo "$k $(cat /proc/sys/$k)" >>"$DIR/sysctls"
  done
}

restore_sysctls() {
  [ -f "$DIR/sysctls" ] || return 0
  local k v
  while read -r k v; do echo "$v" >"/proc/sys/$k" 2>/dev/null || true; done <"$DIR/sysctls"
}

ctr_() { ctr --address "$DIR/containerd.sock" -n k8s.io "$@"; }

sandbox_image() {
  if ctr_ images ls -q 2>/dev/null | grep -qx "$SANDBOX_IMAGE"; then return; fi
  command -v podman >/dev/null || "$ROOT/hack/podman.sh" >&2
  local ctx="$DIR/pause-build"
  mkdir -p "$ctx"
  (cd "$ROOT" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$ctx/pause" ./hack/localnode/pause)
  printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile"
  podman build -q -t "$SANDBOX_IMAGE" "$ctx" >/dev/null
  import_images "$SANDBOX_IMAGE"
}

import_images() {
  local img tar="$DIR/image.tar"
  for img in "$@"; do
    podman save --format docker-archive -o "$tar" "$img" >/dev/null
    ctr_ images import --no-unpack=false "$tar" >/dev/null
    rm -f "$tar"
    log "imported $img"
  done
}

up() {
  ensure_packages
  ensure_binaries
  local ip
  ip=$(node_ip)
  mkdir -p "$DIR"
  save_sysctls
  echo 1 >/proc/sys/net/ipv4/ip_forward
  make_pki "$ip"
  kubeconfig admin "https://127.0.0.1:$API_PORT"
  kubeconfig controller-manager "https://127.0.0.1:$API_PORT"
  kubeconfig scheduler "https://127.0.0.1:$API_PORT"
  kubeconfig kubelet "https://$ip:$API_PORT"
  kubeconfig kube-proxy "https://$ip:$API_PORT"
  write_configs "$ip"
  local t0=$SECONDS

  start etcd "$BIN/etcd" --data-dir "$DIR/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls http://127.0.0.1:12380 \
    --initial-advertise-peer-urls http://127.0.0.1:12380 --initial-cluster default=http://127.0.0.1:12380 \
    --unsafe-no-fsync
  # The API server listens on the node's address: the kubernetes Service's
  # endpoint may not be a loopback address, and pods reach it through it.
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --advertise-address "$ip" --secure-port "$API_PORT" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --authorization-mode Node,RBAC --client-ca-file "$DIR/pki/ca.crt" \
    --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
    --kubelet-client-certificate "$DIR/pki/admin.crt" --kubelet-client-key "$DIR/pki/admin.key" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --service-account-key-file "$DIR/pki/sa.pub" --service-account-signing-key-file "$DIR/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --requestheader-client-ca-file "$DIR/pki/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group --requestheader-extra-headers-prefix X-Remote-Extra-
  wait_for "kube-apiserver" 60 kc get --raw /readyz
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$DIR/pki/sa.key" --root-ca-file "$DIR/pki/ca.crt" \
    --cluster-signing-cert-file "$DIR/pki/ca.crt" --cluster-signing-key-file "$DIR/pki/ca.key" \
    --requestheader-client-ca-file "$DIR/pki/front-proxy-ca.crt"
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/scheduler.kubeconfig" --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
  start containerd containerd --config "$DIR/containerd.toml"
  wait_for "containerd" 30 ctr_ version
  sandbox_image
  start kubelet "$BIN/kubelet" --config "$DIR/kubelet.yaml" --kubeconfig "$DIR/kubelet.kubeconfig" \
    --hostname-override "$NODE" --node-ip "$ip" --root-dir "$DIR/kubelet"
  start kube-proxy "$BIN/kube-proxy" --config "$DIR/kube-proxy.yaml"
  wait_for "the node" 120 sh -c "'$BIN/kubectl' --kubeconfig '$DIR/admin.kubeconfig' get node '$NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  wait_for "the default ServiceAccount" 60 kc get serviceaccount default
  log "node $NODE Ready at $ip after $((SECONDS - t0))s; KUBECONFIG=$DIR/admin.kubeconfig"
  echo "$DIR/admin.kubeconfig"
}

stop_pid() {
  local name=$1 pid
  [ -f "$DIR/$name.pid" ] || return 0
  pid=$(cat "$DIR/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/$name.pid"
}

# remove_rules takes out of one iptables table what this node put there:
# the chains of the kubelet and kube-proxy (KUBE-*), the bridge plugin's
# per-pod chains (the targets of rules commented with this network's name)
# and every rule that jumps to one of them. Other rules (podman's, for
# one) are kept. The table is rewritten in one iptables-restore.
remove_rules() {
  local save=$1 restore=$2 table=$3 dump
  dump=$("$save" -t "$table" 2>/dev/null) || return 0
  printf '%s\n' "$dump" | awk '
    /^-A / && /name: \\"localnode\\"/ { for (i = 1; i < NF; i++) if ($i == "-j") ours[$(i + 1)] = 1 }
    { lines[NR] = $0 }
    END {
      for (n = 1; n <= NR; n++) {
        l = lines[n]; split(l, f, " ")
        if (l ~ /^:/) { c = substr(f[1], 2); if (c ~ /^KUBE-/ || (c in ours)) continue }
        if (l ~ /^-A /) {
          if (f[2] ~ /^KUBE-/ || (f[2] in ours)) continue
          drop = 0
          for (i = 1; i < length(f); i++) if (f[i] == "-j" && (f[i + 1] ~ /^KUBE-/ || (f[i + 1] in ours))) drop = 1
          if (drop) continue
        }
        print l
      }
    }' | "$restore" -T "$table" 2>/dev/null || log "could not clean the $table table with $restore"
}

down() {
  [ -d "$DIR" ] || { log "nothing to stop ($DIR does not exist)"; return 0; }
  # Pods first, while the kubelet and containerd can still stop them.
  if [ -f "$DIR/kubelet.pid" ] && kill -0 "$(cat "$DIR/kubelet.pid")" 2>/dev/null; then
    kc delete namespace --all --wait=false >/dev/null 2>&1 || true
  fi
  stop_pid kube-proxy
  stop_pid kubelet
  if [ -S "$DIR/containerd.sock" ]; then
    local c
    for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
    sleep 0.5
    for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true; done
    for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$c" >/dev/null 2>&1 || true; done
  fi
  stop_pid containerd
  # The shims of this containerd only (their -address names its socket).
  pkill -9 -f "containerd-shim.*-address $DIR/containerd.sock" 2>/dev/null || true
  stop_pid kube-scheduler
  stop_pid kube-controller-manager
  stop_pid kube-apiserver
  stop_pid etcd
  # kube-proxy's rules, the bridge, network namespaces and mounts left behind.
  if [ -x "$BIN/kube-proxy" ]; then "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  local ipt table
  for ipt in iptables ip6tables; do
    command -v "$ipt-save" >/dev/null || continue
    for table in nat filter mangle; do remove_rules "$ipt-save" "$ipt-restore" "$table"; done
  done
  local veth
  for veth in $(ip -o link show master cni0 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link delete "$veth" 2>/dev/null || true
  done
  ip link delete cni0 2>/dev/null || true
  local m
  for m in $(awk -v d="$DIR" '$2 ~ "^"d {print $2}' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
  for m in $(awk '$2 ~ "^/run/netns/cni-" {print $2}' /proc/mounts); do umount -l "$m" 2>/dev/null || true; done
  rm -f /run/netns/cni-* 2>/dev/null || true
  restore_sysctls
  rm -rf "$DIR"
  log "stopped; $DIR removed"
}

status() {
  local c
  for c in $COMPONENTS; do
    if [ -f "$DIR/$c.pid" ] && kill -0 "$(cat "$DIR/$c.pid")" 2>/dev/null; then
      echo "$c running (pid $(cat "$DIR/$c.pid"))"
    else
      echo "$c stopped"
    fi
  done
  [ -f "$DIR/admin.kubeconfig" ] && kc get nodes -o wide 2>/dev/null || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  import) shift; [ $# -gt 0 ] || die "usage: $0 import IMAGE..."; import_images "$@" ;;
  status) status ;;
  *) die "usage: $0 up|down|import IMAGE...|status" ;;
esac
