#!/usr/bin/env bash
# `make package-check`: packages the crate as crates.io would (`cargo package`), unpacks it,
# and builds and runs the README's example from it in a new crate that depends on the
# package alone: what a crate user gets must be enough for the README (its kernel is inline,
# and every file the package needs is in it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/target/package-check
rm -rf "$out"
mkdir -p "$out/user/src"
cargo package --no-verify --allow-dirty --offline -q -p cl-lifetime
crate=$(ls -t target/package/cl-lifetime-*.crate | head -1)
tar xzf "$crate" -C "$out"
unpacked=$(basename "$crate" .crate)
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
