#!/bin/sh
# Screenshots a report page with headless Chromium (Debian: apt-get install chromium),
# to look at what a reader sees: reports/screenshot.sh out/backup-workers [page.png]
set -eu
dir=${1:?usage: reports/screenshot.sh RESULT_DIR [OUT.png]}
out=${2:-$dir/page.png}
page=$(cd "$dir" && pwd)/index.html
[ -f "$page" ] || { echo "error: $page: no report page (run flowlab run or flowlab report first)" >&2; exit 1; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "error: no chromium on PATH (Debian: apt-get install chromium)" >&2; exit 1; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
  --screenshot="$out" --window-size=1400,2000 "file://$page" 2>/dev/null
echo "$out"
