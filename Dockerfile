# Multi-stage build: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# `hookbridge version` names the build: HOOKBRIDGE_VERSION and
# HOOKBRIDGE_COMMIT (docker build --build-arg HOOKBRIDGE_COMMIT=$(git
# rev-parse HEAD)), else the commit of a .git in the build context, else
# none, stamped with -ldflags -X.
ARG HOOKBRIDGE_VERSION=""
ARG HOOKBRIDGE_COMMIT=""
RUN commit="${HOOKBRIDGE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}" \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w \
      -X github.com/hookbridge/hookbridge/cli.stampedVersion=${HOOKBRIDGE_VERSION} \
      -X github.com/hookbridge/hookbridge/cli.stampedCommit=${commit}" \
      -o /out/hookbridge ./cmd/hookbridge \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hookbridge /usr/local/bin/hookbridge
# The embedded JetStream store (used when no NATS URL is set) must be
# writable by the non-root user.
COPY --from=build --chown=65532:65532 /out/data /var/lib/hookbridge
ENV HOOKBRIDGE_DATA_DIR=/var/lib/hookbridge \
    HOOKBRIDGE_HTTP_ADDR=0.0.0.0:8080
USER nonroot:nonroot
# 8080: webhooks, /healthz, /readyz (and /metrics unless metrics_addr is
# set); 9090: the conventional metrics_addr (HOOKBRIDGE_METRICS_ADDR).
# The admin API and console listen only with HOOKBRIDGE_ADMIN_TOKEN set,
# on HOOKBRIDGE_ADMIN_ADDR (default 127.0.0.1:8081, inside the container;
# set 0.0.0.0:8081 and publish it on a private address to reach it).
EXPOSE 8080 9090
# The image has no shell or curl: the binary asks its own /readyz on
# http_addr (a 0.0.0.0 host is asked on 127.0.0.1) and exits 0 or 1.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["hookbridge", "healthcheck"]
ENTRYPOINT ["hookbridge"]
CMD ["serve"]
