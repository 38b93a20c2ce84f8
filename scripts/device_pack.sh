#!/usr/bin/env bash
# scripts/device_pack.sh BUILD PACK [binaries...] - copies binaries built here,
# the shared libraries they need (glibc aside) and Open MPI's run-time tree
# into PACK, so that a bare machine of the same architecture (the device
# machine: CUDA but none of ordo's Debian packages) runs them:
#   PACK/build/<path>   each binary, at its path under BUILD (so scripts that
#                       take a build folder take PACK/build)
#   PACK/lib            the libraries (LD_LIBRARY_PATH)
#   PACK/root           Open MPI's files at their absolute paths (copy to /)
# On the machine: cp -a PACK/root/. / ; export LD_LIBRARY_PATH=$PWD/PACK/lib
set -euo pipefail
build=${1:?usage: device_pack.sh BUILD PACK [binaries relative to BUILD...]}
pack=${2:?usage: device_pack.sh BUILD PACK [binaries relative to BUILD...]}
shift 2
rm -rf "$pack"
mkdir -p "$pack/build" "$pack/lib" "$pack/root"
libs_of() {  # the non-glibc libraries a file loads, as resolved here
  ldd "$1" 2> /dev/null | awk '$3 ~ /^\// { print $3 }' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so' || true
}
deps=()
for b in "$@"; do
  [ -e "$build/$b" ] || { echo "device_pack.sh: $build/$b not built" >&2; exit 2; }
  mkdir -p "$pack/build/$(dirname "$b")"
  cp -a "$build/$b" "$pack/build/$b"
  mapfile -t -O "${#deps[@]}" deps < <(libs_of "$build/$b")
done
if command -v orterun > /dev/null; then
  # Open MPI loads its components at run time: its whole package tree, and
  # what those components load.
  while read -r f; do
    [ -f "$f" ] || continue
    mkdir -p "$pack/root$(dirname "$f")"
    cp -a "$f" "$pack/root$f"
    case "$f" in *.so*|*/bin/*) mapfile -t -O "${#deps[@]}" deps < <(libs_of "$f") ;; esac
  done < <(dpkg -L libopenmpi3 openmpi-bin openmpi-common | grep -Ev '/(doc|man|lintian)/')
  # The alternatives' links, made direct.
  ln -sf orterun "$pack/root/usr/bin/mpiexec"
  ln -sf orterun "$pack/root/usr/bin/mpirun"
  # Symbolic links of the package tree (library sonames).
  while read -r f; do
    [ -L "$f" ] && cp -a "$f" "$pack/root$f"
  done < <(dpkg -L libopenmpi3 | grep '\.so')
fi
for d in $(printf '%s\n' "${deps[@]}" | sort -u); do
  # A library of the CUDA toolkit is the machine's own.
  case "$d" in /usr/local/cuda*) continue ;; esac
  cp -L "$d" "$pack/lib/$(basename "$d")"
done
du -sh "$pack"
