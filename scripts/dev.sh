#!/usr/bin/env bash
# The two entry points of a fresh machine.
#
#   scripts/dev.sh demo   build everything, start the local control plane, install the
#                         CRDs and the examples, run the operator against them and
#                         print `kubectl get kurainstances` as they converge
#   scripts/dev.sh test   build everything, start the local control plane, run the
#                         checks (fmt, clippy, CRD drift) and the whole test suite
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cp=scripts/control-plane.sh

case "${1:-}" in
  test)
    $cp up
    eval "$($cp env)"
    cargo fmt --all -- --check
    cargo clippy --all-targets --locked -- -D warnings
    # The cluster tests mostly wait on the apiserver: run more of them at once than cores.
    RUST_TEST_THREADS=4 cargo test --locked --all-targets
    ;;
  demo)
    exec scripts/demo.sh
    ;;
  *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
