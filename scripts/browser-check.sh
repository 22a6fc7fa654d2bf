#!/usr/bin/env bash
# Opens a built memcal site in headless Chromium from disk (no server, no network) and checks
# it as a reader's browser sees it:
#   - index.html, runs.html (the sorting script) and every family page load without console
#     errors;
#   - every chart the index references is in the rendered DOM and its SVG file is non-empty;
#   - every page, at 1280 px and at 390 px wide, is no wider than its viewport; no table is
#     wider than its container or (at 1280 px) the viewport, and at 390 px none has content cut
#     off, stacked or not (each failure names the page and the table's caption); every chart it
#     shows has plotted marks inside its axes (scripts/browser-layout.html measures these);
#   - a screenshot of index.html is written to OUT_PNG (1280x2000), and one of every page at
#     1280 px and 390 px to OUT_PNG's folder, `<OUT_PNG name>-<page>-<width>.png`.
# Usage: scripts/browser-check.sh SITE_DIR OUT_PNG
# Installs Debian's chromium if it is missing (needs root and the Debian mirror).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 SITE_DIR OUT_PNG" >&2
    exit 2
fi
site=$(cd "$1" && pwd)
out_png=$(mkdir -p "$(dirname "$2")" && cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ -f "$site/index.html" ] || { echo "browser-check: $site/index.html not found" >&2; exit 2; }

if ! command -v chromium >/dev/null 2>&1; then
    echo "browser-check: installing chromium" >&2
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_chromium() {
    local profile
    profile=$(mktemp -d "$work/profile.XXXXXX")
    timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$profile" "$@"
}

fail=0
pages=(index.html)
[ -f "$site/runs.html" ] && pages+=(runs.html)
[ -f "$site/history.html" ] && pages+=(history.html)
[ -f "$site/fit.html" ] && pages+=(fit.html)
for p in "$site"/runs-*.html "$site"/family-*.html "$site"/did-not-fit.html "$site"/not-counted.html \
    "$site"/accelerate.html "$site"/known-misses.html "$site"/held-out-by-*.html "$site"/full-size-verdicts.html "$site"/strategies-by-family.html; do
    [ -f "$p" ] && pages+=("$(basename "$p")")
done

for page in "${pages[@]}"; do
    dom="$work/${page%.html}.dom.html"
    log="$work/${page%.html}.log"
    run_chromium --enable-logging=stderr --v=0 --virtual-time-budget=3000 \
        --dump-dom "file://$site/$page" >"$dom" 2>"$log" || true
    if [ ! -s "$dom" ]; then
        echo "browser-check: $page: chromium produced no DOM" >&2
        tail -n 20 "$log" >&2
        fail=1
        continue
    fi
    if grep -a "CONSOLE" "$log" | grep -aiE "error|uncaught|failed|refused" >"$work/errors"; then
        echo "browser-check: $page: console errors:" >&2
        cat "$work/errors" >&2
        fail=1
    fi
    if grep -aiE "net::ERR_|Not allowed to load local resource" "$log" >"$work/errors"; then
        echo "browser-check: $page: resources failed to load:" >&2
        cat "$work/errors" >&2
        fail=1
    fi
done

# Every chart the index references is in the DOM, and its file is a non-empty SVG.
charts_static=$(grep -oE 'src="charts/[^"]+\.svg"' "$site/index.html" | sort -u || true)
charts_dom=$(grep -oE 'src="charts/[^"]+\.svg"' "$work/index.dom.html" | sort -u || true)
if [ "$charts_static" != "$charts_dom" ]; then
    echo "browser-check: the rendered index is missing charts:" >&2
    diff <(echo "$charts_static") <(echo "$charts_dom") >&2 || true
    fail=1
fi
n=0
while read -r ref; do
    [ -n "$ref" ] || continue
    f=${ref#src=\"}
    f=${f%\"}
    if ! head -c 200 "$site/$f" 2>/dev/null | grep -q "<svg"; then
        echo "browser-check: $f is missing or not an SVG" >&2
        fail=1
    fi
    n=$((n + 1))
done <<<"$charts_static"
if ! grep -q "<main" "$work/index.dom.html"; then
    echo "browser-check: the rendered index has no <main>" >&2
    fail=1
fi

run_chromium --hide-scrollbars --window-size=1280,2000 --screenshot="$out_png" \
    "file://$site/index.html" >"$work/shot.log" 2>&1 || true
if [ ! -s "$out_png" ]; then
    echo "browser-check: no screenshot written" >&2
    tail -n 20 "$work/shot.log" >&2
    fail=1
fi

# Layout and charts, page by page, at both widths; and the screenshots.
layout="$(cd "$(dirname "$0")" && pwd)/browser-layout.html"
shots=$(dirname "$out_png")/$(basename "$out_png" .png)
checked=0
for page in "${pages[@]}"; do
    res="$work/${page%.html}.layout.txt"
    run_chromium --allow-file-access-from-files --virtual-time-budget=10000 \
        --dump-dom "file://$layout?page=file://$site/$page" 2>/dev/null |
        sed -n '/<pre id="result">/,/<\/pre>/p' >"$res" || true
    if ! grep -q "^DONE</pre>" "$res"; then
        echo "browser-check: $page: the layout check did not finish" >&2
        fail=1
        continue
    fi
    if grep -q "FAIL" "$res"; then
        echo "browser-check: $page:" >&2
        grep -E "FAIL|first too wide" "$res" | sed 's/^/  /' >&2
        fail=1
    fi
    for size in 1280,2000 390,2400; do
        png="$shots-${page%.html}-${size%,*}.png"
        run_chromium --hide-scrollbars --window-size="$size" --screenshot="$png" \
            "file://$site/$page" >"$work/shot.log" 2>&1 || true
        if [ ! -s "$png" ]; then
            echo "browser-check: $page: no screenshot at ${size%,*} px" >&2
            fail=1
        fi
    done
    checked=$((checked + 1))
done

if [ "$fail" -ne 0 ]; then
    echo "browser-check: FAILED" >&2
    exit 1
fi
echo "browser-check: ok: ${#pages[@]} pages without console errors, $n charts in the index DOM, $checked pages within 1280 and 390 px with no empty chart, screenshots $out_png and $shots-*.png"
