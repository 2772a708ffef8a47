#!/usr/bin/env bash
# Builds the kubectl workflow plugin's release archives and its krew
# manifest with their real sha256 (see docs/kubectl-plugin.md):
#
#   dist/krew/kubectl-workflow_<version>_<os>_<arch>.tar.gz   linux and darwin, amd64 and arm64
#   dist/krew/workflow.yaml   plugins/krew/workflow.yaml with the version, URIs and sha256 filled in
#
# Upload the archives to the GitHub release <version>, commit the manifest
# as plugins/krew/workflow.yaml, and send it to krew-index.
#
#   usage: hack/krew-release.sh [version]   # default: the chart's appVersion
set -euo pipefail
cd "$(dirname "$0")/.."
# Reproducible archives need GNU tar's --sort and --mtime (on macOS: gtar).
tar=tar
command -v gtar >/dev/null && tar=gtar
"$tar" --version 2>/dev/null | grep -q 'GNU tar' || {
	echo "krew-release.sh: needs GNU tar (--sort, --mtime); install it (macOS: brew install gnu-tar)" >&2
	exit 1
}

version=${1:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/simple-workflow/Chart.yaml)}
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "krew-release.sh: version $version is not vX.Y.Z" >&2; exit 1; }
template=plugins/krew/workflow.yaml
old=$(sed -n 's/^  version: *//p' "$template")
out=dist/krew
mkdir -p "$out"
# The commit's time, so that rebuilding a commit gives the same archives.
mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)

sums=()
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${platform%/*} arch=${platform#*/}
	dir=$(mktemp -d)
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$dir/kubectl-workflow" ./cmd/kubectl-workflow
	archive=$out/kubectl-workflow_${version}_${os}_${arch}.tar.gz
	"$tar" -C "$dir" --sort=name --mtime="@$mtime" --owner=0 --group=0 --numeric-owner -cf - kubectl-workflow | gzip -n -9 > "$archive"
	rm -rf "$dir"
	sums+=("${os}_${arch}=$(sha256sum "$archive" | cut -d' ' -f1)")
done

# Each platform's sha256 line follows its uri line, which ends in
# _<os>_<arch>.tar.gz.
sed "s/$old/$version/g" "$template" | awk -v sums="${sums[*]}" '
	BEGIN { n = split(sums, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); sum[p[1]] = p[2] } }
	/^ *uri: / { match($0, /_[a-z]+_[a-z0-9]+\.tar\.gz$/); key = substr($0, RSTART + 1, RLENGTH - 8) }
	/^ *sha256: / { if (!(key in sum)) { print "no archive for " key > "/dev/stderr"; exit 1 }
		sub(/"[0-9a-f]*"/, "\"" sum[key] "\""); key = "" }
	{ print }' > "$out/workflow.yaml"
echo "wrote $out/workflow.yaml and its archives for $version"
