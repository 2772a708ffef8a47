#!/usr/bin/env bash
# Builds the images of the manager and the example worker (see Dockerfile and
# docs/images.md) without any network access:
#
#   1. static binaries (CGO_ENABLED=0, -trimpath) stamped with the version
#      (-X main.version, -X main.revision) into bin/image/;
#   2. the build machine's CA certificates and an /etc/passwd and /etc/group
#      naming the user 65532 beside them;
#   3. `$CONTAINER_ENGINE build` of the Dockerfile's FROM scratch stages,
#      tagged $IMAGE_REGISTRY/manager:$VERSION and
#      $IMAGE_REGISTRY/example-worker:$VERSION.
#
# The version is the chart's appVersion (charts/simple-workflow/Chart.yaml),
# the tag the chart, config/manager and hack/demo use.
#
#   usage: hack/image.sh [context]   # context: only step 1 and 2
#   env:   CONTAINER_ENGINE (podman), IMAGE_REGISTRY (ghcr.io/simple-workflow),
#          VERSION (the chart's appVersion), GOARCH (the Go toolchain's)
set -euo pipefail
cd "$(dirname "$0")/.."

engine=${CONTAINER_ENGINE:-podman}
registry=${IMAGE_REGISTRY:-ghcr.io/simple-workflow}
version=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/simple-workflow/Chart.yaml)}
[ -n "$version" ] || { echo "image.sh: no appVersion in charts/simple-workflow/Chart.yaml" >&2; exit 1; }
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# The commit's time, not the build's: rebuilding a commit labels it alike.
created=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
arch=${GOARCH:-$(go env GOARCH)}
certs=${CA_CERTIFICATES:-/etc/ssl/certs/ca-certificates.crt}
ctx=bin/image

[ -s "$certs" ] || { echo "image.sh: no CA certificates at $certs (Debian: apt-get install ca-certificates)" >&2; exit 1; }

rm -rf "$ctx"
mkdir -p "$ctx/etc/ssl/certs"
ldflags="-s -w -X main.version=$version -X main.revision=$revision"
for bin in manager:./cmd example-worker:./cmd/example-worker; do
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$ctx/${bin%%:*}" "${bin#*:}"
done
cp "$certs" "$ctx/etc/ssl/certs/ca-certificates.crt"
cat >"$ctx/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin
PASSWD
cat >"$ctx/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
GROUP
chmod 0644 "$ctx/etc/passwd" "$ctx/etc/group" "$ctx/etc/ssl/certs/ca-certificates.crt"
chmod 0755 "$ctx/manager" "$ctx/example-worker"

[ "${1:-}" = context ] && exit 0

command -v "$engine" >/dev/null || {
	echo "image.sh: $engine not found; hack/podman.sh installs podman (Debian, as root), or set CONTAINER_ENGINE=docker" >&2
	exit 1
}
# --platform only for a cross build: the engine's default is the machine's.
platform=()
[ -z "${GOARCH:-}" ] || platform=(--platform "linux/$arch")
for target in manager example-worker; do
	"$engine" build "${platform[@]}" --target "$target" \
		--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
		-t "$registry/$target:$version" -f Dockerfile .
done
for target in manager example-worker; do
	"$engine" image inspect --format "{{.Id}} {{.Size}}" "$registry/$target:$version" |
		awk -v ref="$registry/$target:$version" '{ printf "%s %s %.1f MB\n", ref, substr($1, 1, 19), $2 / 1e6 }'
done
