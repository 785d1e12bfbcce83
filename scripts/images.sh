#!/usr/bin/env bash
# Container images without a Docker engine or a registry: OCI image layouts
# written by hack/control-plane/standin/ocitar, imported into the containerd of a
# node plane (scripts/control-plane.sh up --node) with `ctr -n k8s.io images import`.
#
#   scripts/images.sh operator [--import]   kura.local/kura-operator:<version> from the
#                                           release binary (scripts/release-build.sh)
#   scripts/images.sh standin [--import]    kura.local/pause:1 (the pinned sandbox image)
#                                           and kura.local/kura-standin:1, a stand-in for
#                                           Kura serving what its probes check
#   scripts/images.sh traefik [--import]    kura.local/traefik:<version>, the Traefik v3
#                                           ingress controller built from its Go module
#                                           (hack/control-plane/traefik): the node's
#                                           shared ingress controller and the dedicated
#                                           gateways' image
#
# Tars are written to $KURA_IMAGES_DIR (target/images). --import loads them into
# the containerd of the plane in $KURA_CP_STATE (.control-plane), as
# scripts/control-plane.sh does for the stand-in when a node starts.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${KURA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kura-operator}"
state="${KURA_CP_STATE:-$repo/.control-plane}"
out="${KURA_IMAGES_DIR:-$repo/target/images}"
tools="$cache/bin/current"

# The operator image: the same as the Dockerfile's final stage (tests/images.rs
# keeps these three equal to its COPY destination, USER and ENTRYPOINT).
operator_binary=/kura-operator
operator_user=65532:65532
operator_entrypoint='["/kura-operator", "run"]'

log() { printf 'images: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

ensure_tools() {
  [ -x "$tools/ocitar" ] && [ -x "$tools/kura-standin" ] && [ -x "$tools/pause" ] && [ -x "$tools/traefik" ] \
    || KURA_NODE=1 "$repo/scripts/control-plane.sh" build >/dev/null
}

import() {
  local tar=$1 sock="$state/node/containerd/containerd.sock"
  [ -S "$sock" ] || die "no containerd at $sock: start a node plane (scripts/control-plane.sh up --node)"
  "$tools/ctr" --address "$sock" -n k8s.io images import "$tar" >/dev/null
  log "imported $tar"
}

operator_image() {
  local bin="${CARGO_TARGET_DIR:-$repo/target}/release/kura-operator"
  [ -x "$bin" ] || die "$bin is missing: run scripts/release-build.sh"
  local version; version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)
  # The binary links glibc and libgcc_s (as the Dockerfile's distroless cc base
  # provides them): take the ones it resolves to on this Debian 12 machine, the
  # same release as that base. No shell, no package manager, nothing else.
  local files=("$bin=$operator_binary:0755") lib
  for lib in $(ldd "$bin" | awk '/=> \//{print $3} /^[ \t]*\/.*ld-linux/{print $1}'); do
    files+=("$(readlink -f "$lib")=$lib:0755")
  done
  mkdir -p "$out"
  "$tools/ocitar" -o "$out/kura-operator.tar" -name "kura.local/kura-operator:$version" \
    -user "$operator_user" -entrypoint "$operator_entrypoint" "${files[@]}" >/dev/null
  echo "$out/kura-operator.tar"
}

standin_images() {
  mkdir -p "$out"
  "$tools/ocitar" -o "$out/pause.tar" -name kura.local/pause:1 -user 65535:65535 -entrypoint '["/pause"]' \
    "$(readlink -f "$tools/pause")=/pause:0755" >/dev/null
  "$tools/ocitar" -o "$out/kura-standin.tar" -name kura.local/kura-standin:1 -user 65532:65532 \
    -entrypoint '["/kura-standin"]' "$(readlink -f "$tools/kura-standin")=/kura-standin:0755" >/dev/null
  echo "$out/pause.tar"
  echo "$out/kura-standin.tar"
}

# The version is the one its wrapper module requires (the binary says the same:
# `traefik version`).
traefik_version() {
  awk '$1 == "github.com/traefik/traefik/v3" {print $2}' "$repo/hack/control-plane/traefik/go.mod"
}

# Traefik is a static Go binary: nothing else goes into the layer. Its user is
# the pod's to choose (the node's shared controller binds :80 and :443 on the
# node, see scripts/control-plane-node.sh); the image says nobody.
traefik_image() {
  mkdir -p "$out"
  "$tools/ocitar" -o "$out/traefik.tar" -name "kura.local/traefik:$(traefik_version)" -user 65532:65532 \
    -entrypoint '["/traefik"]' "$(readlink -f "$tools/traefik")=/traefik:0755" >/dev/null
  echo "$out/traefik.tar"
}

what=${1:-}
do_import=false
[ "${2:-}" = --import ] && do_import=true
ensure_tools
case "$what" in
  operator) tars=$(operator_image) ;;
  standin) tars=$(standin_images) ;;
  traefik) tars=$(traefik_image) ;;
  *) echo "usage: $0 operator|standin|traefik [--import]" >&2; exit 2 ;;
esac
for t in $tars; do
  echo "$t"
  if $do_import; then import "$t"; fi
done
