# Multi-stage build: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/hookbridge ./cmd/hookbridge \
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
EXPOSE 8080 9090
ENTRYPOINT ["hookbridge"]
CMD ["serve"]
