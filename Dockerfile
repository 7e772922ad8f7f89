# syntax=docker/dockerfile:1
# The warmroute operator (manager) image: a static binary on distroless,
# running as an unprivileged numeric user, so that runAsNonRoot holds on
# any cluster and OpenShift's restricted-v2 may still assign its own UID.
#
#   make docker-build IMG=…            (this platform)
#   make docker-buildx IMG=…           (linux/amd64 and linux/arm64, pushed)

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace

# Modules first: the layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY api/ api/
COPY controllers/ controllers/
COPY webhooks/ webhooks/
COPY internal/ internal/
COPY cmd/ cmd/

# CGO off: a static binary that needs no libc in the final image.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="warmroute-operator" \
      org.opencontainers.image.description="Kubernetes operator that serves LLMs with vLLM behind a prefix-aware router" \
      org.opencontainers.image.source="https://github.com/warmroute/warmroute" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      name="warmroute-operator" \
      vendor="warmroute" \
      version="${VERSION}" \
      summary="warmroute operator" \
      description="Turns LLMEndpoint resources into vLLM Deployments behind a prefix-aware router."
WORKDIR /
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
