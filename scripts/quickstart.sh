#!/bin/sh
# clmoe quick start, part 1 of 2 (README): on Debian 12 / Ubuntu as root, install the
# packages that are missing, build clmoe in ./build, and run the main job on the default
# OpenCL device (a GPU if there is one, else PoCL on the CPU).
# Part 2 is scripts/check.sh (the whole test suite).
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)

packages="build-essential autoconf automake libtool pkg-config opencl-headers ocl-icd-opencl-dev \
pocl-opencl-icd libclblast-dev libhwloc-dev libpcre2-dev libopenmpi-dev openmpi-bin libcunit1-dev help2man"
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

echo "== the main job: train the demo model, then generate text from it"
# The demo preset (9.4M parameters, 896 experts per MoE layer) learns from the licence texts
# every Debian system ships (/usr/share/common-licenses, about 300 KB), for at most
# $CLMOE_DEMO_SECONDS seconds (default 150) on the default device, then writes a checkpoint
# and prints text it generates.
./apps/clmoe-info 2> /dev/null | grep '^Chosen'
cat /usr/share/common-licenses/* > demo-text.txt
# (--overwrite: a second quick start trains afresh; exit 75 says the time limit stopped the
# run with a checkpoint, which `clmoe-train --resume demo-run` would continue)
rc=0
./apps/clmoe-train --preset demo --data demo-text.txt --out demo-run --overwrite \
  --time-limit "${CLMOE_DEMO_SECONDS:-150}" --sample 0 || rc=$?
[ $rc -eq 0 ] || [ $rc -eq 75 ] || { echo "quickstart: clmoe-train failed (exit $rc)" >&2; exit 1; }
echo "== generating from the trained model (prompt: 'The Licensee ')"
printf 'The Licensee '
./apps/clmoe-generate --ckpt demo-run/checkpoint.safetensors --prompt "The Licensee " -n 300 \
  --temperature 0.8 --top-k 40 --seed 1
echo "== quickstart done: the apps are in $root/build/apps ('make install' puts them in /usr/local/bin);"
echo "   the model is in $root/build/demo-run (metrics.csv, checkpoint.safetensors)"
