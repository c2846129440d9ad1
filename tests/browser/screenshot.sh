#!/usr/bin/env bash
# Screenshot of an HTML report in headless Chromium (Debian's `chromium`), to look at what a
# person sees. Offline by construction: networking features that phone home are disabled,
# and the report itself references nothing outside the file.
#
# Usage: tests/browser/screenshot.sh REPORT.html OUT.png [WIDTH,HEIGHT]
# Exits 0 with a note on stderr (and writes nothing) when /usr/bin/chromium is absent, so
# callers can run it anywhere; .ci/run installs chromium first.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 REPORT.html OUT.png [WIDTH,HEIGHT]" >&2
    exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1400,2000}
chromium=${CHROMIUM:-/usr/bin/chromium}

if [ ! -x "$chromium" ]; then
    echo "screenshot.sh: $chromium not found; skipping the browser check (apt-get install -y chromium)" >&2
    exit 0
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
rm -f "$out"
# --screenshot writes OUT and exits; a timeout guards against a browser that hangs.
timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$profile" --screenshot="$out" --window-size="$size" \
    "file://$report" >"$profile/chromium.log" 2>&1 || {
    echo "screenshot.sh: chromium failed:" >&2
    cat "$profile/chromium.log" >&2
    exit 1
}
if [ ! -s "$out" ]; then
    echo "screenshot.sh: chromium wrote no screenshot:" >&2
    cat "$profile/chromium.log" >&2
    exit 1
fi
echo "screenshot.sh: wrote $out"
