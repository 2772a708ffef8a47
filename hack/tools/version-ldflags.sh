#!/usr/bin/env bash
# Prints the -ldflags that stamp a tool built from Go modules with its
# version, as the tool's own release build does, so that `kubectl version`
# and `helm version` answer. Run from the tool's folder (hack/tools/kube or
# hack/tools/helm), where go.mod pins the module.
#
# The module proxy does not say which git commit a version was tagged on, so
# the commit field carries the module's checksum (go.sum's h1: hash), which
# names the source as exactly.
#
#   usage: version-ldflags.sh kube|helm
set -euo pipefail

kind=${1:?usage: version-ldflags.sh kube|helm}
case "$kind" in
	kube) module=k8s.io/kubernetes ;;
	helm) module=helm.sh/helm/v3 ;;
	*) echo "version-ldflags.sh: unknown tool $kind" >&2; exit 2 ;;
esac

info=$(go mod download -json "$module")
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$info" | head -n 1; }
version=$(field Version)
sum=$(field Sum)
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
[ -n "$version" ] && [ -n "$sum" ] || { echo "version-ldflags.sh: no version for $module" >&2; exit 1; }

case "$kind" in
	kube)
		major=${version#v}; major=${major%%.*}
		minor=${version#v"$major".}; minor=${minor%%.*}
		for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
			printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitCommit=%s -X %s.gitTreeState=clean -X %s.buildDate=%s ' \
				"$pkg" "$version" "$pkg" "$major" "$pkg" "$minor" "$pkg" "$sum" "$pkg" "$pkg" "$built"
		done
		;;
	helm)
		pkg=helm.sh/helm/v3/internal/version
		printf -- '-X %s.version=%s -X %s.gitCommit=%s -X %s.gitTreeState=clean' "$pkg" "$version" "$pkg" "$sum" "$pkg"
		;;
esac
echo
