# Builds the manager (default target) and the example worker as static
# binaries on a distroless, non-root base.
#   docker build -t simple-workflow/manager .
#   docker build --target example-worker -t simple-workflow/example-worker .
FROM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
ENV CGO_ENABLED=0
RUN GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd \
 && GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/example-worker ./cmd/example-worker

FROM gcr.io/distroless/static:nonroot AS example-worker
WORKDIR /
COPY --from=build /out/example-worker /example-worker
USER 65532:65532
ENTRYPOINT ["/example-worker"]

FROM gcr.io/distroless/static:nonroot AS manager
WORKDIR /
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
