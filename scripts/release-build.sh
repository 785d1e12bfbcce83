#!/usr/bin/env bash
# The release build, exactly as the Dockerfile's builder stage runs it
# (tests/release.rs checks that the two commands are the same string), so CI
# exercises the image's build step without a Docker engine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --locked --bin kura-operator
