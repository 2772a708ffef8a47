#!/usr/bin/env bash
# Makes podman able to build and run the images here (make image, the e2e
# spec "the manager and example worker images"): when podman or runc is
# missing and this runs as root on Debian, installs them; as root, writes the
# settings that work on these machines (docs/images.md) as a containers.conf
# drop-in. Idempotent and fast when everything is in place. Never fails the
# build: without a container engine, the image spec says why and is skipped.
set -uo pipefail

conf_dir=/etc/containers/containers.conf.d
conf=$conf_dir/50-simple-workflow.conf
# default_ulimits = []: podman otherwise raises RLIMIT_NOFILE in the
#   container above the hard limit a sandboxed root may set ("error setting
#   rlimit type 7: operation not permitted").
# runtime = "runc": crun fails on hybrid (v1 + v2) cgroup hierarchies ("crun:
#   cgroups in hybrid mode not supported, drop all controllers from cgroupv2").
# cgroup_manager = "cgroupfs", events_logger = "file": no systemd is PID 1.
want='# Written by hack/podman.sh (simple-workflow); see docs/images.md.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"'

missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)

if [ "$(id -u)" != 0 ]; then
	[ ${#missing[@]} -eq 0 ] || echo "podman.sh: ${missing[*]} missing and not root: the image e2e spec will be skipped" >&2
	exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
	if ! command -v apt-get >/dev/null; then
		echo "podman.sh: ${missing[*]} missing and no apt-get: the image e2e spec will be skipped" >&2
		exit 0
	fi
	echo "podman.sh: installing podman and runc"
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc >/dev/null; }; then
		echo "podman.sh: installing podman and runc failed: the image e2e spec will be skipped" >&2
		exit 0
	fi
fi

if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
	mkdir -p "$conf_dir" && printf '%s\n' "$want" >"$conf"
fi
if ! out=$(podman info 2>&1 >/dev/null); then
	echo "podman.sh: podman does not work here, the image e2e spec will be skipped: $out" >&2
fi
exit 0
