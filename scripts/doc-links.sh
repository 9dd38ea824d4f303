#!/usr/bin/env bash
# `make lint`, after `cargo doc --no-deps`: every link in the crate's rendered docs leads
# somewhere. rustdoc warns of most broken intra-doc links, but renders some (a path to a
# re-exported crate, such as `crate::opencl3`) as a link to nothing, without a warning:
# this finds a link whose target is a Rust path left as it was written, or a page or file
# of the docs that does not exist. Web addresses are not fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
docs=${CARGO_TARGET_DIR:-target}/doc
python3 - "$docs" <<'PY'
import glob, html, os, re, sys
root = sys.argv[1]
crate = os.path.join(root, "cl_lifetime")
if not os.path.isdir(crate):
    sys.exit(f"doc-links: {crate} is missing: run cargo doc --no-deps first")
broken = []
pages = [p for p in glob.glob(os.path.join(crate, "**", "*.html"), recursive=True)]
for page in pages:
    text = open(page, encoding="utf-8").read()
    for m in re.finditer(r'<a [^>]*href="([^"]*)"', text):
        href = html.unescape(m.group(1))
        if href.startswith("#"):
            continue
        if "::" in href:
            broken.append((page, href))
            continue
        if re.match(r"[a-z][a-z0-9+.-]*:", href):
            continue
        path = href.split("#")[0].split("?")[0]
        if path and not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(page), path))):
            broken.append((page, href))
if broken:
    lines = [f"{os.path.relpath(p, root)}: {h}" for p, h in sorted(set(broken))]
    sys.exit("doc-links: links that lead nowhere:\n  " + "\n  ".join(lines))
print(f"doc-links: every link of {len(pages)} pages leads somewhere")
PY
