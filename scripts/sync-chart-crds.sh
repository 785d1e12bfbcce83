#!/usr/bin/env bash
# Copy the CRDs from crds/ (generated from the Rust types: the one source of
# truth) into the chart's files/crds/, which templates/crds.yaml renders.
# crates/kura-core's drift test and tests/cluster/operations/chart.rs fail when they differ.
#
#   scripts/sync-chart-crds.sh
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$repo/charts/kura-operator/files/crds"
mkdir -p "$dest"
# Remove CRDs the repo no longer has, so a deleted CRD leaves the chart too.
find "$dest" -maxdepth 1 -name '*.yaml' -delete
cp "$repo"/crds/*.yaml "$dest/"
echo "synced $(ls "$repo"/crds/*.yaml | wc -l) CRD(s) into ${dest#"$repo"/}"
