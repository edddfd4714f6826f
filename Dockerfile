# Multi-stage build: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/hookbridge ./cmd/hookbridge

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hookbridge /usr/local/bin/hookbridge
ENV HOOKBRIDGE_DATA_DIR=/var/lib/hookbridge
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["hookbridge"]
CMD ["serve"]
