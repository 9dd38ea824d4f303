#!/usr/bin/env bash
# Makes a Debian/Ubuntu machine ready to build and test cl-lifetime: checks
# for a Rust toolchain and installs an OpenCL ICD loader, its development
# files and PoCL (a CPU OpenCL platform) when they are missing.
# Idempotent, never prompts, and quiet when everything is already there.
set -euo pipefail

say() { echo "setup: $*" >&2; }

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
if ! have_loader || ! have_devlink; then pkgs+=(ocl-icd-libopencl1 ocl-icd-opencl-dev); fi
if ! have_icd; then pkgs+=(pocl-opencl-icd); fi
# Oclgrind: an OpenCL 1.2 platform the tests use (registered only for their child
# processes, never system-wide).
if [ ! -e /usr/lib/oclgrind/liboclgrind-rt-icd.so ] && command -v apt-get >/dev/null 2>&1; then
  pkgs+=(oclgrind)
fi
# Mesa's rusticl: the open-source OpenCL of AMD and Intel GPUs, with a CPU device
# (RUSTICL_ENABLE=llvmpipe) that `make test-all` runs the suite on.
if [ ! -e /etc/OpenCL/vendors/rusticl.icd ] && command -v apt-get >/dev/null 2>&1; then
  pkgs+=(mesa-opencl-icd)
fi
# CLBlast: a library the tests run commands of through the raw-command entry point
# (loaded at run time; the tests that need it say so and skip where it is absent).
if ! exists_any /usr/lib/*/libclblast.so.1 /usr/lib64/libclblast.so.1 /usr/local/lib/libclblast.so.1 &&
  command -v apt-get >/dev/null 2>&1; then
  pkgs+=(libclblast1)
fi
# Valgrind: `make leakcheck` runs the examples and the stress test under its memcheck.
if ! command -v valgrind >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  pkgs+=(valgrind)
fi
if [ ${#pkgs[@]} -gt 0 ] && ! command -v cc >/dev/null 2>&1; then pkgs+=(gcc libc6-dev); fi
if [ ${#pkgs[@]} -gt 0 ] && ! command -v clinfo >/dev/null 2>&1; then pkgs+=(clinfo); fi

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
  say "installing: ${pkgs[*]}"
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
bash "$(dirname "$0")/setup-intel.sh"

# --- One-line summary ---
if command -v clinfo >/dev/null 2>&1; then
  found=$(clinfo -l 2>/dev/null | awk '
    /^Platform #/ { sub(/^Platform #[0-9]+: */, ""); p = p (p ? "; " : "") $0; next }
    /Device #/    { d++ }
    END { if (p) printf "%s (%d device%s)", p, d, d == 1 ? "" : "s"; else printf "no platform reported by clinfo" }') || true
else
  found="loader and ICD present (install clinfo to list platforms)"
fi
say "ok: cargo $cargo_ver; OpenCL: ${found:-unknown}"
