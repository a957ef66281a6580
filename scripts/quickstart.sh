#!/bin/sh
# clmoe quick start, part 1 of 2 (README): on Debian 12 / Ubuntu as root, install the
# packages that are missing, build clmoe in ./build, and run the main job on the default
# OpenCL device (a GPU if there is one, else PoCL on the CPU).
# Part 2 is scripts/check.sh (the whole test suite).
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)

packages="build-essential autoconf automake libtool pkg-config opencl-headers ocl-icd-opencl-dev \
pocl-opencl-icd libclblast-dev libhwloc-dev libopenmpi-dev openmpi-bin libcunit1-dev"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "quickstart: missing packages:$missing" >&2
    echo "quickstart: run as root (or: sudo apt-get install$missing)" >&2
    exit 1
  fi
  echo "== installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing
fi

echo "== building clmoe in $root/build"
[ -x configure ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure
make -j"$(nproc)"

echo "== the main job"
# What the foundation can do today: list the devices and the choice, run the GEMM
# conformance checks on every device, and time a small GEMM. (Later: a short training
# run on the demo preset, then text generation from it.)
./apps/clmoe-info
./apps/clmoe-xcheck --op gemm --quiet
./apps/clmoe-bench gemm --sizes 256,512 --reps 3
echo "== quickstart done: the apps are in $root/build/apps ('make install' puts them in /usr/local/bin)"
