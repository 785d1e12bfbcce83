# syntax=docker/dockerfile:1
# The operator image: a release build on the official Rust image, copied onto a
# distroless base (no shell, no package manager) that runs as nonroot 65532.
#
#   docker build -t kura-operator .

ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
# Exactly scripts/release-build.sh, which CI runs (tests/release.rs keeps them equal).
RUN cargo build --release --locked --bin kura-operator

# cc, not static: the binary links glibc and libgcc_s (bookworm, as the builder).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /src/target/release/kura-operator /kura-operator
# Numeric, so that runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/kura-operator", "run"]
