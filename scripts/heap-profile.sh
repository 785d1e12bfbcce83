#!/usr/bin/env bash
# Where the operator's heap goes at its peak: the scale benchmark
# (crates/kura-bench) with the operator run under heaptrack, then the peak
# grouped by what allocated it (scripts/heap-breakdown.py). Needs heaptrack.
#
#   scripts/heap-profile.sh --skip-budget            N=1000, as in docs/benchmarks.md
#   scripts/heap-profile.sh --quick --skip-budget    N=100
#
# The operator is built without its allocator (`--no-default-features`:
# heaptrack sees malloc only, not mimalloc), without LTO and with line tables,
# into target/heap. Its RSS and times under heaptrack are not the benchmark's:
# only the heap figures are kept. Other arguments go to kura-bench.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
command -v heaptrack >/dev/null || { echo "heap-profile: heaptrack is not installed" >&2; exit 1; }
CARGO_TARGET_DIR="$repo/target/heap" CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  cargo build --locked --release --no-default-features --bin kura-operator
out=$(mktemp -d /tmp/kura-heap.XXXXXX)
# `run` under heaptrack, one profile per process (the benchmark restarts the
# operator once); `render` and `diff` plain, their output is parsed.
cat > "$out/operator" <<WRAP
#!/bin/sh
if [ "\$1" = run ]; then
  exec heaptrack -o "$out/run-\$\$" "$repo/target/heap/release/kura-operator" "\$@"
fi
exec "$repo/target/heap/release/kura-operator" "\$@"
WRAP
chmod +x "$out/operator"
# heaptrack runs the operator as its child: kura-bench stops the wrapper's
# process, so the operators it started are stopped here, whatever happens.
trap 'pkill -TERM -f "^$repo/target/heap/release/kura-operator run" || true' EXIT
# The plane, the benchmark's build and its run are scripts/bench-scale.sh's.
scripts/bench-scale.sh --operator-bin "$out/operator" --json "$out/bench.json" "$@"
pkill -TERM -f "^$repo/target/heap/release/kura-operator run" || true
# heaptrack writes the profile as its child exits.
for _ in $(seq 1 30); do pgrep -f heaptrack_interpret >/dev/null || break; sleep 1; done
# The first process is the one that created and changed the fleet.
first=$(ls -tr "$out"/run-* | head -n 1)
echo "heap-profile: $first"
scripts/heap-breakdown.py "$first"
