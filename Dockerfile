# onceq: one image, two binaries.
#   /usr/local/bin/onceq-worker    the worker daemon (default entrypoint)
#   /usr/local/bin/onceq-producer  the CLI; `onceq-producer serve` is the ingest API
# Configuration is ONCEQ_* environment variables only (--help lists them).
#
#   docker build -t ghcr.io/onceq/onceq:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg COMMIT="$(git rev-parse HEAD)" .
#
# VERSION and COMMIT are stamped into both binaries (--version,
# onceq_build_info): the context has no .git for Go to read them from.
#
# Builds with BuildKit and with the classic builder alike: no syntax parser
# directive (BuildKit would fetch that frontend from a registry), no
# BUILDPLATFORM platform flag and no cache mounts (the classic builder
# rejects both). It fetches nothing but its two base images. Without any
# registry, Dockerfile.scratch packs host-built static binaries instead
# (.ci/image).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first: this layer survives source edits. The workspace
# (go.work) builds the daemon with the library and pgledger from this tree.
COPY go.mod go.sum go.work go.work.sum ./
COPY dedup/go.mod dedup/go.sum dedup/
COPY pgledger/go.mod pgledger/go.sum pgledger/
RUN go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath -tags timetzdata -o /out/ \
      -ldflags="-s -w -X github.com/onceq/onceq/internal/version.version=${VERSION} -X github.com/onceq/onceq/internal/version.commit=${COMMIT}" \
      ./cmd/worker ./cmd/producer \
 && mkdir -p /out/data/outbox /out/data/scan

# static: no libc needed (CGO_ENABLED=0); :nonroot runs as 65532.
# Production should pin this by digest
# (gcr.io/distroless/static-debian12:nonroot@sha256:...) so a rebuild of the
# same commit cannot pick up a different base.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /usr/local/bin/onceq-worker
COPY --from=build /out/producer /usr/local/bin/onceq-producer
# Writable defaults for `docker run`; in Kubernetes the root filesystem is
# read-only and these paths are emptyDir mounts.
COPY --from=build --chown=65532:65532 /out/data /var/lib/onceq
WORKDIR /var/lib/onceq
# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
# 8080: worker admin (health, metrics, dashboard); 8081: ingest API.
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/onceq-worker"]
