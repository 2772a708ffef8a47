# The images of simple-workflow: the manager (the default, last stage) and the
# example worker. Each is FROM scratch: one static binary, CA certificates,
# an /etc/passwd naming the numeric non-root user 65532, nothing else.
#
# This file only packages; the binaries are built beforehand by
# hack/image.sh (CGO_ENABLED=0, -trimpath, version stamped) into bin/image/,
# the one directory .dockerignore lets into the build context. So the same
# build runs under podman and docker, needs no registry and no network:
#
#   make image                           # both images, with podman
#   make image CONTAINER_ENGINE=docker   # the same, with docker
#
# By hand, from the repository root (docs/images.md):
#
#   make image-context
#   docker build --target manager -t ghcr.io/simple-workflow/manager:v0.1.0 .
#   docker build --target example-worker -t ghcr.io/simple-workflow/example-worker:v0.1.0 .
#
# make image passes VERSION, REVISION and CREATED as build arguments, for
# the OCI labels; the binaries carry the same version.

FROM scratch AS base
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED
# Both images inherit these; each stage adds its title and description.
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/simple-workflow/simple-workflow" \
      org.opencontainers.image.url="https://github.com/simple-workflow/simple-workflow" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY bin/image/etc/passwd bin/image/etc/group /etc/
COPY bin/image/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532

FROM base AS example-worker
LABEL org.opencontainers.image.title="simple-workflow example-worker" \
      org.opencontainers.image.description="Example worker serving the demo.* workflow types, built only from the simple-workflow Go SDK"
COPY bin/image/example-worker /example-worker
ENTRYPOINT ["/example-worker"]

FROM base AS manager
LABEL org.opencontainers.image.title="simple-workflow manager" \
      org.opencontainers.image.description="Kubernetes operator for durable asynchronous work on Postgres (WorkflowRun, WorkflowRegistry)"
COPY bin/image/manager /manager
ENTRYPOINT ["/manager"]
