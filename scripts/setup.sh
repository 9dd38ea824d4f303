#!/usr/bin/env bash
# Makes a Debian/Ubuntu machine ready to build and test cl-lifetime: checks for a Rust
# toolchain and installs what is missing of an OpenCL ICD loader, its development files,
# PoCL (a CPU OpenCL platform; only when no platform is registered) and a C compiler (the
# linker Rust needs, and `make test`'s driver emulator): what `make demo` and `make test`
# need.
#   --all   also what `make test-all`, `make leakcheck` and CI use: Oclgrind and Mesa's
#           rusticl (two more OpenCL platforms), CLBlast, valgrind and clinfo with apt-get,
#           and Intel's OpenCL CPU runtime from PyPI into .opencl/intel of this checkout
#           (about 270 MB downloaded, 800 MB unpacked).
# Idempotent, never prompts, says what it installs, and is quiet when everything is there.
set -euo pipefail

say() { echo "setup: $*" >&2; }
all=0
case "${1:-}" in
  --all) all=1 ;;
  "") ;;
  *)
    say "unknown argument '$1' (use --all for what make test-all needs)"
    exit 2
    ;;
esac

# --- Rust toolchain (>= 1.85 for edition 2024); never downloaded here ---
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
need_rust() {
  say "$1"
  say "cl-lifetime needs a Rust toolchain >= 1.85 (edition 2024). Install it with rustup:"
  say "  curl https://sh.rustup.rs -sSf | sh"
  say "then open a new shell (or run: . \"\$HOME/.cargo/env\") and re-run this script."
  exit 1
}
command -v cargo >/dev/null 2>&1 || need_rust "cargo was not found on PATH or in \$HOME/.cargo/bin."
cargo_ver=$(cargo --version | awk '{print $2}')
IFS=. read -r major minor _ <<<"$cargo_ver"
if [ "${major:-0}" -lt 1 ] || { [ "$major" -eq 1 ] && [ "${minor:-0}" -lt 85 ]; }; then
  need_rust "found cargo $cargo_ver, which is too old."
fi

# --- OpenCL: ICD file, loader library, development symlink ---
# (ldconfig output is captured first: `ldconfig -p | grep -q` can fail under pipefail.)
ldcache=$( (command -v ldconfig >/dev/null && ldconfig -p || /sbin/ldconfig -p) 2>/dev/null || true)
exists_any() { local f; for f in "$@"; do [ -e "$f" ] && return 0; done; return 1; }

vendors_has_icd() {
  local v=${OCL_ICD_VENDORS:-}
  [ -n "$v" ] || return 1
  if [ -d "$v" ]; then exists_any "$v"/*.icd; else [ -f "$v" ] && [[ $v == *.icd ]]; fi
}
have_icd() { vendors_has_icd || exists_any /etc/OpenCL/vendors/*.icd; }
have_loader() {
  grep -q 'libOpenCL\.so\.1' <<<"$ldcache" ||
    exists_any /usr/lib/*/libOpenCL.so.1 /usr/lib64/libOpenCL.so.1 /usr/local/lib/libOpenCL.so.1
}
have_devlink() {
  grep -q 'libOpenCL\.so ' <<<"$ldcache" ||
    exists_any /usr/lib/*/libOpenCL.so /usr/lib64/libOpenCL.so /usr/local/lib/libOpenCL.so
}

pkgs=()
why=()
if ! have_loader || ! have_devlink; then
  pkgs+=(ocl-icd-libopencl1 ocl-icd-opencl-dev)
  why+=("the OpenCL ICD loader and its libOpenCL.so")
fi
if ! have_icd; then
  pkgs+=(pocl-opencl-icd)
  why+=("PoCL, a CPU OpenCL platform (none is registered)")
fi
# The linker Rust calls, and the compiler of `make test`'s driver emulator.
if ! command -v cc >/dev/null 2>&1; then
  pkgs+=(gcc libc6-dev)
  why+=("a C compiler (cargo links through cc)")
fi
if [ "$all" = 1 ] && command -v apt-get >/dev/null 2>&1; then
  # Oclgrind: an OpenCL 1.2 platform one test uses (registered only for the tests' child
  # processes, never system-wide), and the checked platform of `make test-all`.
  if [ ! -e /usr/lib/oclgrind/liboclgrind-rt-icd.so ]; then
    pkgs+=(oclgrind)
    why+=("Oclgrind (make test-all)")
  fi
  # Mesa's rusticl: the open-source OpenCL of AMD and Intel GPUs, with a CPU device
  # (RUSTICL_ENABLE=llvmpipe) that `make test-all` runs the suite on.
  if [ ! -e /etc/OpenCL/vendors/rusticl.icd ]; then
    pkgs+=(mesa-opencl-icd)
    why+=("Mesa's rusticl (make test-all)")
  fi
  # CLBlast: a library one test runs commands of through the raw-command entry point
  # (loaded at run time; without it that test says so and does not run).
  if ! exists_any /usr/lib/*/libclblast.so.1 /usr/lib64/libclblast.so.1 /usr/local/lib/libclblast.so.1; then
    pkgs+=(libclblast1)
    why+=("CLBlast (one test)")
  fi
  # Valgrind: `make leakcheck` runs the examples and the stress test under its memcheck.
  if ! command -v valgrind >/dev/null 2>&1; then
    pkgs+=(valgrind)
    why+=("valgrind (make leakcheck)")
  fi
  if ! command -v clinfo >/dev/null 2>&1; then
    pkgs+=(clinfo)
    why+=("clinfo (lists the platforms)")
  fi
  # pip fetches Intel's runtime below (a download only: nothing is installed with it).
  if ! python3 -m pip --version >/dev/null 2>&1; then
    pkgs+=(python3-pip)
    why+=("pip (downloads Intel's OpenCL CPU runtime)")
  fi
fi

if [ ${#pkgs[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    say "no usable OpenCL setup found, and apt-get is not available."
    say "Install an OpenCL ICD loader, its development files (libOpenCL.so) and PoCL, e.g.:"
    say "  Fedora: sudo dnf install ocl-icd-devel pocl"
    say "  Arch:   sudo pacman -S ocl-icd pocl"
    say "  macOS:  OpenCL is built in; nothing to install"
    exit 1
  fi
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    # Only let sudo ask for a password when someone is there to type it.
    if [ -t 0 ] && [ -z "${CI:-}" ]; then as_root=(sudo); else as_root=(sudo -n); fi
  else
    say "missing packages; run as root:"
    say "  apt-get update && apt-get install -y --no-install-recommends ${pkgs[*]}"
    exit 1
  fi
  say "installing with apt-get: ${pkgs[*]}"
  for w in "${why[@]}"; do say "  for $w"; done
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" </dev/null
  ldcache=$( (command -v ldconfig >/dev/null && ldconfig -p || /sbin/ldconfig -p) 2>/dev/null || true)
  if ! have_icd || ! have_loader || ! have_devlink; then
    say "OpenCL is still incomplete after installing; see the messages above."
    exit 1
  fi
fi

if [ -n "${OCL_ICD_VENDORS:-}" ] && ! vendors_has_icd; then
  say "warning: OCL_ICD_VENDORS=$OCL_ICD_VENDORS holds no .icd file; the ocl-icd loader"
  say "warning: searches only there, so no platform may be found (unset it to use /etc/OpenCL/vendors)."
fi

# --- Intel's OpenCL CPU runtime, into .opencl/intel of this checkout (for make test-all) ---
if [ "$all" = 1 ]; then
  bash "$(dirname "$0")/setup-intel.sh"
fi

# --- One-line summary ---
if command -v clinfo >/dev/null 2>&1; then
  # Each platform with its device count (rusticl lists none until RUSTICL_ENABLE names one).
  found=$(clinfo -l 2>/dev/null | awk '
    function flush() { if (name != "") out = out (out ? "; " : "") name " (" (d ? d " device" (d == 1 ? "" : "s") : "no device") ")" }
    /^Platform #/ { flush(); name = $0; sub(/^Platform #[0-9]+: */, "", name); d = 0; next }
    /Device #/    { d++ }
    END { flush(); if (out) printf "%s", out; else printf "no platform reported by clinfo" }') || true
else
  found="loader and ICD present (install clinfo to list platforms)"
fi
say "ok: cargo $cargo_ver; OpenCL: ${found:-unknown}"
