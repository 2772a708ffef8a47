#!/usr/bin/env bash
# Makes Prometheus and promtool available for the alert rules' and the
# dashboard's tests (test/alerts): when promtool is not on PATH and this runs
# as root on Debian, installs Debian's prometheus package (both binaries; no
# server is started). Fast when they are there. Without them, those tests
# fail and say how to get them.
set -uo pipefail

command -v promtool >/dev/null && command -v prometheus >/dev/null && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "prometheus.sh: no promtool and not root on Debian: install Prometheus (promtool and prometheus on PATH) for test/alerts" >&2
	exit 0
fi
echo "prometheus.sh: installing Debian's prometheus"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }; then
	echo "prometheus.sh: installing prometheus failed: test/alerts will fail" >&2
fi
exit 0
