#!/usr/bin/env bash
# `make package-check`: packages the crate as crates.io would (`cargo package`), unpacks it,
# and builds and runs the README's example from it in a new crate that depends on the
# package alone: what a crate user gets must be enough for the README (its kernel is inline,
# and every file the package needs is in it).
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir=$PWD/$target_dir ;; esac
out=$target_dir/package-check
rm -rf "$out"
mkdir -p "$out/user/src"
cargo package --no-verify --allow-dirty --offline -q -p cl-lifetime
crate=$(ls -t "$target_dir"/package/cl-lifetime-*.crate | head -1)
tar xzf "$crate" -C "$out"
unpacked=$(basename "$crate" .crate)
# Every file the README and the docs link to is in the package (rustdoc's `crate::` links
# and web addresses aside).
python3 - "$out/$unpacked" <<'PY'
import glob, os, re, sys
root = sys.argv[1]
docs = ["README.md", "BENCHMARKS.md", "docs/design.md"] + glob.glob("docs/guide/*.md") + glob.glob("docs/bench/*.md")
missing = []
for doc in docs:
    if not os.path.exists(os.path.join(root, doc)):
        missing.append(f"{doc} itself")
        continue
    for m in re.finditer(r"\]\(([^)#\s]+)", open(os.path.join(root, doc)).read()):
        target = m.group(1)
        if re.match(r"[a-z]+:", target) or target == "crate":
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(doc), target))
        if not os.path.exists(os.path.join(root, path)):
            missing.append(f"{doc} links to {target}")
if missing:
    sys.exit("package-check: not in the package:\n  " + "\n  ".join(missing))
print(f"package-check: every file linked from {len(docs)} documents is in the package")
PY
# The README's first Rust block, as the user's src/main.rs (rustdoc's hidden `# ` lines shown).
python3 - "$out/user/src/main.rs" <<'PY'
import re, sys
text = open("README.md").read()
block = re.search(r"```rust\n(.*?)```", text, re.S).group(1)
lines = [l[2:] if l.startswith("# ") else ("" if l == "#" else l) for l in block.splitlines()]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
cat >"$out/user/Cargo.toml" <<TOML
[package]
name = "readme-example"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
cl-lifetime = { path = "../$unpacked" }

[workspace]
TOML
echo "package-check: $(tar tzf "$crate" | wc -l) files in $(basename "$crate"); running the README's example from it"
CARGO_TARGET_DIR=$out/target cargo run --offline -q --manifest-path "$out/user/Cargo.toml"
echo "package-check: ok"
