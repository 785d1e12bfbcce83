#!/usr/bin/env bash
# The scale benchmark (crates/kura-bench): operator convergence against direct
# server-side apply on the local control plane, then a fleet-wide configuration
# change, an idle window and the memory and CPU time used, `kura-operator diff`,
# and a change paced by the fleet budget (maxUnavailable 10%). Writes
# docs/bench/scale-<date>-n<N>.json and prints a markdown section to fold into
# docs/benchmarks.md.
#
#   scripts/bench-scale.sh            N=1000
#   scripts/bench-scale.sh --quick    N=100
#   scripts/bench-scale.sh --shards-proof   replicas sharing a fleet (shards)
#   scripts/bench-scale.sh --references --abba   the operator beside the floor client, the
#                                     controller-runtime peer (hack/kura-peer) and the direct
#                                     client, A-B-B-A at 16, 32 and 64 in flight
#   scripts/bench-scale.sh --help     every option
#
# Uses the control plane of $KUBECONFIG when set (one someone else runs), else
# starts this checkout's (scripts/control-plane.sh up) and installs crds/.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
if [ -z "${KUBECONFIG:-}" ]; then
  scripts/control-plane.sh up
  eval "$(scripts/control-plane.sh env)"
  kubectl apply --server-side -f crds/ >/dev/null
fi
cargo build --release --locked -p kura-operator -p kura-bench
target="${CARGO_TARGET_DIR:-$repo/target}"
KURA_BENCH_COMMAND="scripts/bench-scale.sh${*:+ $*}" exec "$target/release/kura-bench" "$@"
