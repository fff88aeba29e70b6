# syntax=docker/dockerfile:1
#
# redq container image: the `redq` binary and CA certificates on Debian slim,
# running as an unprivileged user.
#
#   docker build -t redq .
#   docker run --rm -p 50051:50051 -p 9090:9090 \
#     -e REDQ_REDIS_URL=redis://my-redis:6379 redq
#
# Every `redq serve` setting is a REDQ_* environment variable (README,
# "Configuration"). The build stage uses the same Rust major version as the
# project's toolchain; protos are compiled by protox, so no protoc is needed.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Sources only (see .dockerignore): manifests, build script, protos, code.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
# The registry and target caches survive between builds (BuildKit); the
# binary is copied out of the cached target dir so it lands in the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked \
    && install -D -m 0755 target/release/redq /out/redq

FROM debian:bookworm-slim
# CA certificates for rediss:// URLs; nothing else. Not pinned to a version
# (DL3008): bookworm's ca-certificates moves with security updates and an
# exact pin stops building as soon as the archive drops the old version.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 redq \
    && useradd --system --uid 10001 --gid redq --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin redq
COPY --from=build /out/redq /usr/local/bin/redq
# Listen on every interface inside the container (also `serve`'s built-in
# defaults; set explicitly so the image does not depend on them).
ENV REDQ_LISTEN=0.0.0.0:50051 \
    REDQ_METRICS_LISTEN=0.0.0.0:9090
# Numeric uid so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 10001:10001
# 50051: gRPC (QueueService, AdminService, health, reflection);
# 9090: HTTP /metrics, /healthz, /readyz.
EXPOSE 50051 9090
ENTRYPOINT ["redq"]
CMD ["serve"]
