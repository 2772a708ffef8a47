#!/usr/bin/env bash
# Makes a headless browser available for the console's browser spec (e2e
# "the web console"): when no Chromium is on PATH and this runs as root on
# Debian, installs Debian's chromium. Fast when it is there. Never fails the
# build: without a browser, the spec says why and is skipped.
set -uo pipefail

for b in chromium chromium-browser google-chrome; do
	command -v "$b" >/dev/null && exit 0
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "chromium.sh: no Chromium and not root on Debian: the console's browser spec will be skipped" >&2
	exit 0
fi
echo "chromium.sh: installing chromium"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
	echo "chromium.sh: installing chromium failed: the console's browser spec will be skipped" >&2
fi
exit 0
