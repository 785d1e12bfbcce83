#!/usr/bin/env bash
# The two entry points of a fresh machine.
#
#   scripts/dev.sh demo   build everything, start the local control plane with a real
#                         node (root), install the operator's image with the Helm chart,
#                         the CRDs and the examples, and wait until the instances' pods
#                         run and are Ready (scripts/demo.sh; KURA_DEMO_NODE=0: without a
#                         node or root, the operator as a host process, pods simulated)
#   scripts/dev.sh test   build everything, start the local control plane, run the
#                         checks (fmt, clippy, CRD drift) and the whole test suite;
#                         then stop the plane if this run started it
#                         (KURA_KEEP_PLANE=1 keeps it running); refuses a plane
#                         with a node (the demo's): stop that one first
#   scripts/dev.sh build  build target/debug/kura-operator as the tests build it
#                         (extra arguments go to cargo)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cp=scripts/control-plane.sh

# Says what became of the control plane after the tests, and stops it if this
# run started it (unless KURA_KEEP_PLANE=1).
after_tests() {
  local started=$1 down="scripts/control-plane.sh down"
  if [ -n "${KURA_CP_STATE:-}" ]; then down="KURA_CP_STATE=$KURA_CP_STATE $down"; fi
  if [ "$started" = 1 ] && [ "${KURA_KEEP_PLANE:-0}" != 1 ]; then
    $cp down
    echo "dev.sh: stopped the control plane this run started (KURA_KEEP_PLANE=1 keeps it running)" >&2
  else
    echo "dev.sh: the control plane is still running; stop it with: $down" >&2
  fi
}

case "${1:-}" in
  build)
    shift
    # With a test target in the same build, cargo unifies the dev-dependencies'
    # features into the shared dependencies exactly as `cargo test` does, so this
    # is the very binary the tests build and run: after `test`, nothing to build.
    # (`--bin kura-operator` alone is another build of every crate that differs.)
    cargo build --locked --bin kura-operator --test startup "$@"
    ;;
  test)
    # The demo's plane has a node: the suite runs on a plane without one, and
    # its node tests start a node of their own (one per machine).
    if [ -f "${KURA_CP_STATE:-$repo/.control-plane}/node/enabled" ]; then
      down="scripts/control-plane.sh down"
      if [ -n "${KURA_CP_STATE:-}" ]; then down="KURA_CP_STATE=$KURA_CP_STATE $down"; fi
      echo "dev.sh: the control plane runs with a node (scripts/dev.sh demo's); the tests need it without one, and start a node of their own: stop it first with: $down" >&2
      exit 1
    fi
    started=1
    if $cp status >/dev/null 2>&1; then started=0; fi
    trap 'after_tests $started' EXIT
    $cp up
    eval "$($cp env)"
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --locked -- -D warnings
    go test -C hack/control-plane/hostjournal ./...  # the node's host journal and its undo
    go test -C hack/kstatus ./...  # the kstatus reader of tests/cluster/observability/health.rs
    go test -C hack/fluxhealth ./...  # Flux's CEL reader with the chart's healthCheckExprs
    # Argo CD's health checks run with Debian's Lua 5.1 (tests/cluster/observability/health.rs).
    if ! command -v lua5.1 >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 >/dev/null; } \
        || { echo "dev.sh: the tests need lua5.1: apt-get install lua5.1 failed" >&2; exit 1; }
    fi
    $cp prometheus  # promtool and Prometheus for tests/cluster/observability/monitoring.rs (cached)
    $cp kube-state-metrics  # for tests/cluster/observability/kube_state_metrics.rs (cached)
    # The cluster tests mostly wait on the apiserver: run more of them at once than cores.
    # The node's tests (and the README's, which runs the demo on the node) take
    # turns on the one node a machine has (NODE_LOCK): in the same run as the
    # rest, every test thread could end up waiting for that turn. So they run
    # beside the rest, one at a time, in a second run of the same build, its
    # lines prefixed with "[node] ". Both runs select every package (the
    # same feature resolution as the build: nothing is built twice); the
    # benchmarks' harness takes no test filters, so they run once on their
    # own afterwards (each benchmark once, as a test).
    cargo test --locked --workspace --all-targets --no-run
    RUST_TEST_THREADS=1 cargo test --locked --workspace --tests --no-fail-fast -- platform::node:: platform::readme:: \
      > >(sed -u 's/^/[node] /') 2>&1 &
    node_pid=$!
    rest=0
    RUST_TEST_THREADS=4 cargo test --locked --workspace --tests --no-fail-fast -- \
      --skip platform::node:: --skip platform::readme:: || rest=$?
    node=0; wait "$node_pid" || node=$?
    benches=0; cargo test --locked --workspace --bench '*' || benches=$?
    if [ "$rest" != 0 ] || [ "$node" != 0 ] || [ "$benches" != 0 ]; then
      echo "dev.sh: tests failed (exit codes: platform::node:: and platform::readme:: $node, the rest $rest, the benchmarks $benches)" >&2
      exit 1
    fi
    ;;
  demo)
    exec scripts/demo.sh
    ;;
  *) echo "usage: $0 demo|test|build" >&2; exit 2 ;;
esac
