#!/usr/bin/env bash
# Installs Intel's OpenCL CPU runtime (a closed vendor driver) into .opencl/intel/ of this
# checkout, from its PyPI wheels, for `make test-all`: nothing outside the checkout changes.
#   .opencl/intel/lib/            the runtime's libraries (the wheels' own libOpenCL.so* removed,
#                                 so the system's ICD loader stays in charge)
#   .opencl/intel/vendors/intel.icd   the absolute path of libintelocl.so
# Use it with OCL_ICD_VENDORS=.opencl/intel/vendors LD_LIBRARY_PATH=.opencl/intel/lib.
# Idempotent; quiet when already installed; a clear message and exit 0 when pip is missing
# or the download fails (the Intel run of `make test-all` then says it did not run).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "setup-intel: $*" >&2; }

dest=$PWD/.opencl/intel
# The versions the suite was run against (driver 2026.22.10.0.01_160000).
wheels=(intel-opencl-rt==2026.2.0 intel-cmplr-lib-rt==2026.2.0 tbb==2023.2.0)
stamp=$dest/installed
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${wheels[*]}" ] && [ -e "$dest/lib/libintelocl.so" ]; then
  exit 0
fi

py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then
  say "python3 with pip not found: Intel's OpenCL CPU runtime is not installed (make test-all skips it)."
  say "  Debian/Ubuntu: apt-get install python3-pip, then run make setup-all again."
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say "downloading ${wheels[*]} (about 270 MB) from PyPI"
if ! "$py" -m pip download --no-deps -q -d "$tmp/wheels" "${wheels[@]}"; then
  say "download failed: Intel's OpenCL CPU runtime is not installed (make test-all skips it)."
  exit 0
fi
rm -rf "$dest"
mkdir -p "$dest/lib" "$dest/vendors"
# Each wheel's *.data/data/lib/ goes into one folder. Zip archives keep symbolic links as
# small files holding the target's name: they become links again.
"$py" - "$tmp/wheels" "$dest/lib" <<'EOF'
import os, sys, zipfile, glob, stat
src, out = sys.argv[1], sys.argv[2]
for whl in sorted(glob.glob(os.path.join(src, "*.whl"))):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if len(parts) < 4 or parts[1:3] != ["data", "lib"] or info.is_dir():
                continue
            rel = "/".join(parts[3:])
            path = os.path.join(out, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            mode = info.external_attr >> 16
            data = z.read(info)
            if stat.S_ISLNK(mode):
                if os.path.lexists(path):
                    os.remove(path)
                os.symlink(data.decode(), path)
                continue
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, 0o755)
# Links stored as plain files: a tiny file naming a sibling that exists.
for name in os.listdir(out):
    path = os.path.join(out, name)
    if os.path.islink(path) or os.path.getsize(path) > 255:
        continue
    try:
        target = open(path).read().strip()
    except UnicodeDecodeError:
        continue
    if target and "/" not in target and os.path.exists(os.path.join(out, target)):
        os.remove(path)
        os.symlink(target, path)
EOF
rm -f "$dest"/lib/libOpenCL.so*
if [ ! -e "$dest/lib/libintelocl.so" ]; then
  say "the wheels hold no libintelocl.so: Intel's OpenCL CPU runtime is not installed."
  rm -rf "$dest"
  exit 0
fi
echo "$dest/lib/libintelocl.so" >"$dest/vendors/intel.icd"
echo "${wheels[*]}" >"$stamp"
say "ok: Intel's OpenCL CPU runtime in .opencl/intel (OCL_ICD_VENDORS=.opencl/intel/vendors LD_LIBRARY_PATH=.opencl/intel/lib)"
