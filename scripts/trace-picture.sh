#!/usr/bin/env bash
# `make trace-picture`: the traced pipeline's trace (`make trace`, target/trace/pipeline.json)
# drawn by the trace's viewer page (src/trace/view.html) in headless Chromium, to docs/trace.png. Installs
# Debian's chromium when it is missing (as `make setup` installs packages: root, or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
json=${TRACE_JSON:-${CARGO_TARGET_DIR:-target}/trace/pipeline.json}
out=${TRACE_PNG:-docs/trace.png}
[ -s "$json" ] || { echo "trace-picture: $json is missing; run make trace first" >&2; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo -n); fi
  echo "trace-picture: installing chromium" >&2
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends chromium </dev/null
  browser=$(command -v chromium)
fi

# The page with the trace in its `trace` script element ("</" escaped, so that no string
# in the JSON can end the element).
page=${CARGO_TARGET_DIR:-target}/trace/view.html
python3 - "$json" "$page" <<'PY'
import sys
json_text = open(sys.argv[1]).read().replace("</", "<\\/")
html = open("src/trace/view.html").read()
empty = '{"traceEvents":[]}</script>'
assert empty in html, "the viewer's trace element"
open(sys.argv[2], "w").write(html.replace(empty, json_text.strip() + "</script>", 1))
PY

mkdir -p "$(dirname "$out")"
# No sandbox: it needs user namespaces, which containers and CI runners often lack, and
# the page is our own file.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="${TRACE_SIZE:-1600,640}" --screenshot="$PWD/$out" "file://$PWD/$page" 2>/dev/null
echo "trace-picture: $out (from $json)"
