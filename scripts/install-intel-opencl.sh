#!/bin/sh
# Install Intel's OpenCL runtime for x86-64 CPUs from its PyPI wheels, beside PoCL, without
# touching the system: everything goes to PREFIX, and OCL_ICD_VENDORS=PREFIX/vendors shows
# both drivers (and any other driver in /etc/OpenCL/vendors). See --help and
# docs/user-guide.md ("A second CPU driver: Intel's OpenCL runtime").
#
# The versions and sha256 hashes below are pinned; the hashes are the ones PyPI publishes
# (https://pypi.org/pypi/NAME/json, "digests"). intel-opencl-rt's own metadata asks for
# tbb==2023.* and the licence-only package intel-cmplr-lic-rt; the libraries it needs
# (libimf, libsvml, libirng, libintlc) are in intel-cmplr-lib-rt, and its cl.cfg names
# CL_CONFIG_TBB_VERSION = 2023.2.0. tcmlib (asked for by tbb) is optional and not used.
set -u

me=install-intel-opencl.sh
RT_VERSION=2026.2.0
PLATFORM_TAG=manylinux_2_28_x86_64
NWHEELS=3

# wheel_spec N: W_NAME W_VER W_SHA W_FILE W_DATA W_MB (its size) of wheel N (1..NWHEELS)
wheel_spec() {
  case $1 in
    1) W_NAME=intel-opencl-rt    W_VER=$RT_VERSION W_MB=225
       W_SHA=6b6215a420598b4999ee01caca6d5cbe106aa4155c46c52377619c5aafce9f67 ;;
    2) W_NAME=intel-cmplr-lib-rt W_VER=2026.2.0   W_MB=41
       W_SHA=9f713083073a820d2496a6da8e8d4f3482aba6640f74521d25ea48dcebe72748 ;;
    3) W_NAME=tbb                W_VER=2023.2.0   W_MB=7
       W_SHA=7d80615b6e970f11671fa05b6eaa9483ac864fbfe525ac280271a78b37870b7c ;;
    *) echo "$me: internal error: no wheel $1" >&2; exit 70 ;;
  esac
  W_DATA=$(printf '%s' "$W_NAME" | tr - _)-$W_VER.data
  W_FILE=$(printf '%s' "$W_NAME" | tr - _)-$W_VER-py2.py3-none-$PLATFORM_TAG.whl
}

usage() {
  cat <<EOF
usage: sh $me [--download-only] [PREFIX]

Installs Intel's OpenCL CPU runtime $RT_VERSION (PyPI wheels intel-opencl-rt $RT_VERSION,
intel-cmplr-lib-rt 2026.2.0, tbb 2023.2.0; sha256-checked) into PREFIX:
  PREFIX/whl/          the wheels (kept, so that re-runs and repairs need no network)
  PREFIX/lib/          the runtime's libraries (not the wheels' own libOpenCL: the system
                       ICD loader stays in charge)
  PREFIX/vendors/      intel-cpu.icd, plus links to the .icd files of /etc/OpenCL/vendors
                       (PoCL, GPU drivers), so that OCL_ICD_VENDORS=PREFIX/vendors shows all
  PREFIX/env.sh        the exports to use it:  . PREFIX/env.sh
  PREFIX/share/doc/    the wheels' licence texts (Intel's EULA applies to the runtime)
then checks it with clinfo -l and a tiny kernel (python3 ctypes).

PREFIX: the argument, else \$INTEL_OPENCL_PREFIX, else /opt/intel-opencl. Needs Linux on
x86-64 with SSE4.2 (AVX, AVX2 and AVX-512 are used when there), glibc 2.28 or newer, the
OpenCL ICD loader (Debian: ocl-icd-libopencl1), and unzip or python3 to unpack. Running it
again with the same PREFIX checks the installation and repairs what is missing.

Environment:
  INTEL_OPENCL_PREFIX   default PREFIX
  INTEL_OPENCL_WHEELS   a directory holding the three wheels already (offline machines):
                        nothing is downloaded. Fill it on a machine with network with
                          INTEL_OPENCL_WHEELS=DIR sh $me --download-only
                        (or: python3 -m pip download --no-deps --only-binary=:all:
                         --platform $PLATFORM_TAG -d DIR intel-opencl-rt==$RT_VERSION
                         intel-cmplr-lib-rt==2026.2.0 tbb==2023.2.0)
  INTEL_OPENCL_KEEP_WHEELS=0   delete PREFIX/whl after a successful install (saves 270 MB)
  PYTHON                python interpreter for pip, unzipping and the check (python3)
  PIP_INDEX_URL etc.    pip's own settings (a mirror, a proxy) apply to the download

--download-only: only fetch and check the wheels (into \$INTEL_OPENCL_WHEELS, else
PREFIX/whl); no CPU checks, no install.
Uninstall: rm -rf PREFIX.
EOF
}

die() { echo "$me: error: $*" >&2; exit 1; }
warn() { echo "$me: warning: $*" >&2; }
say() { echo "== $*"; }

download_only=0
prefix_arg=
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --download-only) download_only=1 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$prefix_arg" ] || die "more than one PREFIX given ($prefix_arg, $1)"
       prefix_arg=$1 ;;
  esac
  shift
done
PREFIX=${prefix_arg:-${INTEL_OPENCL_PREFIX:-/opt/intel-opencl}}
PYTHON=${PYTHON:-python3}
WHEELS_GIVEN=${INTEL_OPENCL_WHEELS:-}
start_time=$(date +%s)

# ---- the machine ------------------------------------------------------------------------

check_machine() {
  os=$(uname -s)
  [ "$os" = Linux ] || die "Intel's OpenCL CPU runtime wheels are for Linux; this is $os"
  arch=$(uname -m)
  case $arch in
    x86_64|amd64) ;;
    *) die "this machine ($arch) cannot run Intel's OpenCL CPU runtime, which exists only for x86-64; use PoCL (Debian: pocl-opencl-icd)" ;;
  esac
  if [ -r /proc/cpuinfo ]; then
    flags=$(sed -n '/^flags[[:space:]]*:/{s/^[^:]*://p;q;}' /proc/cpuinfo)
    has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
    has sse4_2 || die "this CPU cannot run Intel's OpenCL CPU runtime: it needs SSE4.2 and /proc/cpuinfo has no sse4_2 flag (a virtual machine may hide it: check the hypervisor's CPU model); use PoCL (Debian: pocl-opencl-icd)"
    if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512cd; then isa=AVX-512
    elif has avx2; then isa=AVX2
    elif has avx; then isa=AVX
    else isa="SSE4.2 only (no AVX: it runs, slowly)"
    fi
    cpu=$(sed -n '/^model name[[:space:]]*:/{s/^[^:]*:[[:space:]]*//p;q;}' /proc/cpuinfo)
    say "CPU: ${cpu:-unknown}, x86-64 with $isa"
  else
    warn "cannot read /proc/cpuinfo: not checking for SSE4.2, which the runtime needs"
  fi
  libc=$(getconf GNU_LIBC_VERSION 2>/dev/null) ||
    die "no glibc found (getconf GNU_LIBC_VERSION failed): the wheels ($PLATFORM_TAG) need glibc 2.28 or newer (musl systems cannot run them)"
  v=${libc#glibc }
  maj=${v%%.*}; rest=${v#*.}; min=${rest%%.*}
  case $maj$min in *[!0-9]*|'') die "cannot parse the glibc version '$libc'" ;; esac
  if [ "$maj" -lt 2 ] || { [ "$maj" -eq 2 ] && [ "$min" -lt 28 ]; }; then
    die "glibc $v is too old: the wheels ($PLATFORM_TAG) need glibc 2.28 or newer"
  fi
  ldc=$(command -v ldconfig 2>/dev/null) || ldc=/sbin/ldconfig
  if [ -x "$ldc" ] && ! "$ldc" -p 2>/dev/null | grep -q 'libOpenCL\.so\.1 '; then
    warn "no OpenCL ICD loader (libOpenCL.so.1) in the linker cache: install it (Debian: ocl-icd-libopencl1) or programs will not find any driver"
  fi
}

# ---- helpers ----------------------------------------------------------------------------

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v "$PYTHON" >/dev/null 2>&1; then
    "$PYTHON" -c 'import hashlib,sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
print(h.hexdigest())' "$1"
  else
    die "need sha256sum (Debian: coreutils) or $PYTHON to check the wheels"
  fi
}

# unzip_to WHEEL DIR
unzip_to() {
  if command -v unzip >/dev/null 2>&1; then
    unzip -q -o "$1" -d "$2"
  elif command -v "$PYTHON" >/dev/null 2>&1; then
    "$PYTHON" -m zipfile -e "$1" "$2"
  else
    die "need unzip (Debian: unzip) or python3 (Debian: python3) to unpack the wheels (zip files)"
  fi
}

kib_of() { du -sk "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }

lock=
tmp_dirs=
cleanup() {
  for d in $tmp_dirs; do rm -rf "$d"; done
  [ -z "$lock" ] || rmdir "$lock" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' HUP INT TERM

# ---- PREFIX -----------------------------------------------------------------------------

case $PREFIX in
  /*) ;;
  '') die "empty PREFIX" ;;
  *) PREFIX=$(pwd)/$PREFIX ;;
esac
case $PREFIX in
  *[!A-Za-z0-9._/+@,=-]*) die "PREFIX '$PREFIX' has characters this script does not handle (spaces, quotes, ':', ...): choose a plain path" ;;
esac
PREFIX=$(printf '%s' "$PREFIX" | sed 's://*:/:g; s:/$::')
[ -n "$PREFIX" ] || die "PREFIX / is not allowed: choose a directory of its own, e.g. /opt/intel-opencl"

if [ "$download_only" -eq 1 ]; then
  WHL_DIR=${WHEELS_GIVEN:-$PREFIX/whl}
else
  check_machine
  WHL_DIR=${WHEELS_GIVEN:-$PREFIX/whl}
  if [ -e "$PREFIX/lib" ] && [ ! -f "$PREFIX/lib/libintelocl.so" ] &&
     [ -n "$(ls -A "$PREFIX/lib" 2>/dev/null)" ]; then
    die "$PREFIX/lib exists and does not hold Intel's OpenCL runtime: PREFIX must be a directory of its own (e.g. /opt/intel-opencl), not $PREFIX"
  fi
fi
if [ -n "$WHEELS_GIVEN" ] && [ "$download_only" -eq 0 ]; then
  [ -d "$WHEELS_GIVEN" ] || die "INTEL_OPENCL_WHEELS=$WHEELS_GIVEN is not a directory"
fi
if [ "$download_only" -eq 0 ]; then
  mkdir -p "$PREFIX" ||
    die "cannot create $PREFIX (not allowed? run as root, or give a PREFIX you can write, e.g. \$HOME/intel-opencl)"
  [ -w "$PREFIX" ] || die "cannot write to $PREFIX: run as its owner or root, or give another PREFIX"
  PREFIX=$(cd "$PREFIX" && pwd) || die "cannot enter $PREFIX"
  mkdir "$PREFIX/.install-lock" 2>/dev/null ||
    die "$PREFIX/.install-lock exists: another $me is running on this PREFIX (if not, remove that directory and run again)"
  lock=$PREFIX/.install-lock
  say "installing Intel's OpenCL CPU runtime $RT_VERSION into $PREFIX"
fi

# ---- wheels -----------------------------------------------------------------------------

STAMP=$PREFIX/lib/.intel-opencl-install
expected_stamp() {
  echo "layout 1"
  j=1
  while [ $j -le $NWHEELS ]; do
    wheel_spec $j; echo "$W_NAME $W_VER $W_SHA"; j=$((j + 1))
  done
}

# installed_ok: the stamp is this version's and every file it lists has its recorded size
installed_ok() {
  [ -f "$STAMP" ] && [ -f "$PREFIX/lib/libintelocl.so" ] || return 1
  [ "$(sed -n '/^file /!p' "$STAMP")" = "$(expected_stamp)" ] || return 1
  sed -n 's/^file //p' "$STAMP" | {
    while read -r size name; do
      [ -e "$PREFIX/lib/$name" ] ||
        { echo "$me: $PREFIX/lib/$name is missing: installing again"; exit 1; }
      [ "$(wc -c < "$PREFIX/lib/$name")" -eq "$size" ] ||
        { echo "$me: $PREFIX/lib/$name is not $size bytes long: installing again"; exit 1; }
    done
  } >&2
}

# check_wheel N: 0 when wheel N is in WHL_DIR with its pinned hash; a mismatch is an error
# in a directory the user gave, and is deleted (to be downloaded again) in our own
check_wheel() {
  wheel_spec "$1"
  f=$WHL_DIR/$W_FILE
  [ -f "$f" ] || return 1
  got=$(sha256_of "$f") || die "cannot compute the sha256 of $f"
  [ "$got" = "$W_SHA" ] && return 0
  if [ -n "$WHEELS_GIVEN" ] && [ "$download_only" -eq 0 ]; then
    die "$f has sha256 $got, not the pinned $W_SHA (PyPI's for $W_NAME $W_VER): a damaged or different file"
  fi
  warn "$f has sha256 $got, not the pinned $W_SHA: deleting it to download it again"
  rm -f "$f" || die "cannot delete $f"
  redownload=1
  return 1
}

need_wheels=1
if [ "$download_only" -eq 0 ] && installed_ok; then
  need_wheels=0
fi
if [ "$download_only" -eq 0 ] && [ "$need_wheels" -eq 1 ] &&
   ! command -v unzip >/dev/null 2>&1 && ! command -v "$PYTHON" >/dev/null 2>&1; then
  die "need unzip (Debian: unzip) or python3 (Debian: python3) to unpack the wheels (zip files)"
fi

missing=
redownload=0
have=0
i=1
while [ $i -le $NWHEELS ]; do
  if check_wheel $i; then
    say "have $W_FILE (sha256 checked)"
    have=$((have + 1))
  else
    missing="$missing $i"
  fi
  i=$((i + 1))
done
# Download what is missing when the install needs it, and to complete a kept PREFIX/whl
# (not one emptied by INTEL_OPENCL_KEEP_WHEELS=0) so that it can repair the next time.
fetch=0
if [ "$download_only" -eq 1 ] || [ "$need_wheels" -eq 1 ]; then
  fetch=1
elif [ -z "$WHEELS_GIVEN" ] && { [ "$have" -gt 0 ] || [ "$redownload" -eq 1 ]; }; then
  fetch=1
fi
if [ -n "$missing" ] && [ "$fetch" -eq 0 ]; then
  say "no wheels in $WHL_DIR: not needed, the libraries are installed"
elif [ -n "$missing" ]; then
  if [ -n "$WHEELS_GIVEN" ] && [ "$download_only" -eq 0 ]; then
    for i in $missing; do wheel_spec "$i"; echo "$me: missing: $WHEELS_GIVEN/$W_FILE" >&2; done
    die "INTEL_OPENCL_WHEELS=$WHEELS_GIVEN lacks the wheels above (fill it with --download-only on a machine with network)"
  fi
  command -v "$PYTHON" >/dev/null 2>&1 ||
    die "no $PYTHON to run pip: install python3 and python3-pip (Debian), or download the wheels elsewhere and set INTEL_OPENCL_WHEELS (see --help)"
  "$PYTHON" -m pip --version >/dev/null 2>&1 ||
    die "'$PYTHON -m pip' does not work: install the Debian package python3-pip (apt-get install python3-pip), or download the wheels elsewhere and set INTEL_OPENCL_WHEELS (see --help)"
  mkdir -p "$WHL_DIR" ||
    die "cannot create $WHL_DIR (not allowed? run as root, or give a PREFIX you can write, e.g. \$HOME/intel-opencl)"
  reqs=
  mb=0
  for i in $missing; do wheel_spec "$i"; reqs="$reqs $W_NAME==$W_VER"; mb=$((mb + W_MB)); done
  say "downloading$reqs ($mb MB) into $WHL_DIR"
  # shellcheck disable=SC2086
  "$PYTHON" -m pip download --no-deps --only-binary=:all: --platform "$PLATFORM_TAG" \
      --no-cache-dir --disable-pip-version-check -d "$WHL_DIR" $reqs </dev/null ||
    die "pip download of$reqs failed (network? a proxy needs https_proxy or PIP_INDEX_URL; see pip's message above)"
  for i in $missing; do
    wheel_spec "$i"
    [ -f "$WHL_DIR/$W_FILE" ] || die "pip did not leave $WHL_DIR/$W_FILE"
    check_wheel "$i" || die "the downloaded $W_FILE does not have the pinned sha256 $W_SHA (deleted; run again, and if it persists PyPI's file has changed)"
    say "downloaded $W_FILE (sha256 checked)"
  done
  missing=
fi

if [ "$download_only" -eq 1 ]; then
  say "the wheels are in $WHL_DIR; on the offline machine: INTEL_OPENCL_WHEELS=DIR sh $me [PREFIX]"
  exit 0
fi

# ---- unpack and gather the libraries ----------------------------------------------------

if [ "$need_wheels" -eq 0 ]; then
  say "$PREFIX/lib already holds this version (every file present, sizes checked): not unpacking"
else
  [ -z "$missing" ] || die "internal error: wheels missing after download"
  if [ -e "$STAMP" ] || [ -e "$PREFIX/lib" ]; then
    say "replacing $PREFIX/lib (another version, incomplete, or made by hand)"
  fi
  unpack=$PREFIX/.unpack.$$
  newlib=$PREFIX/.lib.new.$$
  oldlib=$PREFIX/.lib.old.$$
  tmp_dirs="$unpack $newlib $oldlib"
  rm -rf "$unpack" "$newlib" "$oldlib"
  mkdir "$unpack" "$newlib" || die "cannot create directories in $PREFIX"
  i=1
  while [ $i -le $NWHEELS ]; do
    wheel_spec $i
    say "unpacking $W_FILE"
    unzip_to "$WHL_DIR/$W_FILE" "$unpack" || die "unpacking $WHL_DIR/$W_FILE failed (disk full? damaged file?)"
    src=$unpack/$W_DATA/data/lib
    [ -d "$src" ] || die "$W_FILE has no $W_DATA/data/lib: not the expected wheel layout"
    cp -p "$src"/* "$newlib"/ || die "copying the libraries of $W_FILE to $newlib failed (disk full?)"
    if [ -d "$unpack/$W_DATA/data/share/doc" ]; then
      if ! mkdir -p "$PREFIX/share/doc/$W_NAME" ||
         ! cp -pR "$unpack/$W_DATA/data/share/doc/." "$PREFIX/share/doc/$W_NAME/"; then
        die "copying the licence texts of $W_FILE to $PREFIX/share/doc failed"
      fi
    fi
    lic=$unpack/${W_DATA%.data}.dist-info/LICENSE.txt
    if [ -f "$lic" ]; then
      if ! mkdir -p "$PREFIX/share/doc/$W_NAME" || ! cp -p "$lic" "$PREFIX/share/doc/$W_NAME/"; then
        die "copying LICENSE.txt of $W_FILE to $PREFIX/share/doc failed"
      fi
    fi
    i=$((i + 1))
  done
  rm -rf "$unpack"
  # The system's ICD loader dispatches to every driver; the wheel's own loader would not.
  rm -f "$newlib"/libOpenCL.so*
  for f in libintelocl.so libcommon_clang.so libtbb.so.12 libimf.so libsvml.so libirng.so \
           libintlc.so.5 cl.cfg; do
    [ -f "$newlib/$f" ] || die "the wheels did not provide $f"
  done
  # Zip files hold no symbolic links, so each library is there under every one of its names
  # (libcommon_clang.so is twice 200 MB): link each name to the longest identical one.
  if command -v cmp >/dev/null 2>&1; then
    for f in "$newlib"/*.so "$newlib"/*.so.*; do
      if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
      best=
      for g in "$f".*; do
        if [ ! -f "$g" ] || [ -L "$g" ] || ! cmp -s "$f" "$g"; then continue; fi
        [ ${#g} -gt ${#best} ] && best=$g
      done
      [ -z "$best" ] || ln -sf "${best##*/}" "$f" || die "cannot link $f to $best"
    done
  fi
  {
    expected_stamp
    for f in "$newlib"/*; do
      printf 'file %s %s\n' "$(wc -c < "$f")" "${f##*/}"
    done
  } > "$newlib/.intel-opencl-install" || die "cannot write $newlib/.intel-opencl-install"
  if [ -e "$PREFIX/lib" ]; then
    mv "$PREFIX/lib" "$oldlib" || die "cannot move the old $PREFIX/lib aside"
  fi
  mv "$newlib" "$PREFIX/lib" || die "cannot move $newlib to $PREFIX/lib"
  rm -rf "$oldlib"
  say "gathered the libraries in $PREFIX/lib"
fi

# ---- ICD files --------------------------------------------------------------------------

VENDORS=$PREFIX/vendors
mkdir -p "$VENDORS" || die "cannot create $VENDORS"
if ! printf '%s\n' "$PREFIX/lib/libintelocl.so" > "$VENDORS/.intel-cpu.icd.new" ||
   ! mv "$VENDORS/.intel-cpu.icd.new" "$VENDORS/intel-cpu.icd"; then
  die "cannot write $VENDORS/intel-cpu.icd"
fi
# OCL_ICD_VENDORS replaces /etc/OpenCL/vendors, so link the system's drivers in (PoCL, and a
# GPU driver where there is one), except another intel-cpu.icd; drop links gone stale.
for f in "$VENDORS"/*.icd; do
  [ -L "$f" ] && [ ! -e "$f" ] && { rm -f "$f" || die "cannot remove the stale link $f"; }
done
have_pocl=0
for f in /etc/OpenCL/vendors/*.icd; do
  [ -f "$f" ] || continue
  n=${f##*/}
  case $n in
    intel-cpu.icd)
      warn "$f (another Intel CPU runtime) is left out of $VENDORS"; continue ;;
    *pocl*) have_pocl=1 ;;
  esac
  if [ ! -L "$VENDORS/$n" ] || [ "$(readlink "$VENDORS/$n")" != "$f" ]; then
    ln -sf "$f" "$VENDORS/$n" || die "cannot link $f into $VENDORS"
  fi
done
[ "$have_pocl" -eq 1 ] ||
  warn "no PoCL in /etc/OpenCL/vendors (Debian: pocl-opencl-icd): OCL_ICD_VENDORS=$VENDORS will show Intel's runtime without PoCL"
icds=
for f in "$VENDORS"/*.icd; do [ -e "$f" ] && icds="$icds ${f##*/}"; done
say "ICD files in $VENDORS:$icds"

# ---- check ------------------------------------------------------------------------------

# missing_libs: names of libraries libintelocl.so needs that the dynamic linker cannot find
missing_libs() {
  command -v ldd >/dev/null 2>&1 || return 0
  (unset LD_LIBRARY_PATH; ldd "$PREFIX/lib/libintelocl.so" 2>&1) | sed -n 's/^[[:space:]]*\([^ ]*\) => not found.*/\1/p'
}

# run_check LDPATH: clinfo -l (when there is clinfo) and a tiny kernel through python3
# ctypes (when there is python3), with OCL_ICD_VENDORS=PREFIX/vendors and LD_LIBRARY_PATH
# set to LDPATH, or unset when LDPATH is empty. 0 when they found Intel's CPU device and
# the kernel gave the right numbers; 2 when there was nothing to check with.
run_check() {
  checked=0
  if command -v clinfo >/dev/null 2>&1; then
    checked=1
    out=$(
      if [ -n "$1" ]; then LD_LIBRARY_PATH=$1; export LD_LIBRARY_PATH; else unset LD_LIBRARY_PATH; fi
      OCL_ICD_VENDORS=$VENDORS clinfo -l 2>&1
    )
    printf '%s\n' "$out" | sed 's/^/    /'
    printf '%s\n' "$out" | awk '/Platform #[0-9]+: Intel\(R\) OpenCL$/ { p = 1; next }
        /Platform #/ { p = 0 }  p && /Device #/ { found = 1 }  END { exit !found }' ||
      { echo "    clinfo -l lists no device of the platform \"Intel(R) OpenCL\""; return 1; }
  fi
  if command -v "$PYTHON" >/dev/null 2>&1; then
    checked=1
    (
      if [ -n "$1" ]; then LD_LIBRARY_PATH=$1; export LD_LIBRARY_PATH; else unset LD_LIBRARY_PATH; fi
      OCL_ICD_VENDORS=$VENDORS "$PYTHON" - <<'EOF'
import ctypes as C, sys
def fail(msg):
    print("    tiny kernel check: " + msg); sys.exit(1)
try:
    cl = C.CDLL("libOpenCL.so.1")
except OSError as e:
    fail("cannot load the OpenCL ICD loader libOpenCL.so.1 (Debian: ocl-icd-libopencl1): %s" % e)
vp, u32, i32, sz = C.c_void_p, C.c_uint32, C.c_int32, C.c_size_t
for f in ("clCreateContext", "clCreateCommandQueue", "clCreateProgramWithSource",
          "clCreateKernel", "clCreateBuffer"):
    getattr(cl, f).restype = vp
n = u32()
e = cl.clGetPlatformIDs(u32(0), None, C.byref(n))
if e or not n.value: fail("no OpenCL platform (clGetPlatformIDs: %d)" % e)
plats = (vp * n.value)()
cl.clGetPlatformIDs(n, plats, None)
def text(fn, obj, what):
    buf = C.create_string_buffer(4096)
    fn(vp(obj), u32(what), sz(4096), buf, None)
    return buf.value.decode(errors="replace")
dev = vp()
for p in plats:
    if text(cl.clGetPlatformInfo, p, 0x0902) == "Intel(R) OpenCL":       # CL_PLATFORM_NAME
        nd = u32()
        if cl.clGetDeviceIDs(vp(p), C.c_uint64(2), u32(1), C.byref(dev), C.byref(nd)) == 0:  # CPU
            print("    tiny kernel check on: %s, %s" % (text(cl.clGetDeviceInfo, dev.value, 0x102B),
                                                   text(cl.clGetDeviceInfo, dev.value, 0x102D)))
            break
if not dev.value: fail("no platform \"Intel(R) OpenCL\" with a CPU device")
err = i32()
ctx = cl.clCreateContext(None, u32(1), C.byref(dev), None, None, C.byref(err))
if not ctx: fail("clCreateContext: %d" % err.value)
q = cl.clCreateCommandQueue(vp(ctx), dev, C.c_uint64(0), C.byref(err))
if not q: fail("clCreateCommandQueue: %d" % err.value)
src = C.c_char_p(b"kernel void k(global float *a) { size_t i = get_global_id(0);"
                 b" a[i] = sqrt(a[i]) * 2.0f + (float)i; }")
prog = cl.clCreateProgramWithSource(vp(ctx), u32(1), C.byref(src), None, C.byref(err))
if not prog: fail("clCreateProgramWithSource: %d" % err.value)
e = cl.clBuildProgram(vp(prog), u32(1), C.byref(dev), b"", None, None)
if e:
    log = C.create_string_buffer(65536)
    cl.clGetProgramBuildInfo(vp(prog), dev, u32(0x1183), sz(65536), log, None)
    fail("clBuildProgram: %d\n%s" % (e, log.value.decode(errors="replace")))
k = cl.clCreateKernel(vp(prog), b"k", C.byref(err))
if not k: fail("clCreateKernel: %d" % err.value)
N = 1024
host = (C.c_float * N)(*[float(i * i) for i in range(N)])
buf = cl.clCreateBuffer(vp(ctx), C.c_uint64(1 | 32), sz(4 * N), host, C.byref(err))
if not buf: fail("clCreateBuffer: %d" % err.value)
bufp = vp(buf)
e = cl.clSetKernelArg(vp(k), u32(0), sz(C.sizeof(vp)), C.byref(bufp))
if e: fail("clSetKernelArg: %d" % e)
gws = (sz * 1)(N)
e = cl.clEnqueueNDRangeKernel(vp(q), vp(k), u32(1), None, gws, None, u32(0), None, None)
if e: fail("clEnqueueNDRangeKernel: %d" % e)
out = (C.c_float * N)()
e = cl.clEnqueueReadBuffer(vp(q), bufp, u32(1), sz(0), sz(4 * N), out, u32(0), None, None)
if e: fail("clEnqueueReadBuffer: %d" % e)
bad = [i for i in range(N) if abs(out[i] - 3.0 * i) > 1e-3 * (1 + 3 * i)]
if bad: fail("wrong results, e.g. a[%d] = %g, not %g" % (bad[0], out[bad[0]], 3.0 * bad[0]))
print("    tiny kernel check: built and ran a kernel on %d work-items, results right" % N)
EOF
    ) || return 1
  fi
  [ "$checked" -eq 1 ] || return 2
  return 0
}

missing_l=$(missing_libs)
if [ -n "$missing_l" ]; then
  hint=
  for l in $missing_l; do
    case $l in
      libz.so.1) hint="$hint zlib1g" ;;
      libstdc++.so.6) hint="$hint libstdc++6" ;;
      libgcc_s.so.1) hint="$hint libgcc-s1" ;;
    esac
  done
  die "libintelocl.so needs libraries that are not installed: $(echo "$missing_l" | tr '\n' ' ')${hint:+(Debian:$hint)}"
fi

say "checking with OCL_ICD_VENDORS=$VENDORS and no LD_LIBRARY_PATH"
ldpath=
run_check ""
rc=$?
if [ "$rc" -eq 1 ]; then
  say "that failed; trying again with LD_LIBRARY_PATH=$PREFIX/lib"
  ldpath=$PREFIX/lib
  run_check "$ldpath" ||
    die "Intel's OpenCL runtime in $PREFIX does not work here (see above). CL_CONFIG_LOG_FILE=/tmp/intel-ocl.log may say more"
  warn "the runtime needs LD_LIBRARY_PATH=$PREFIX/lib here; env.sh sets it"
elif [ "$rc" -eq 2 ]; then
  warn "not checked at run time: neither clinfo (Debian: clinfo) nor $PYTHON is installed"
fi

{
  echo "# Intel's OpenCL CPU runtime $RT_VERSION in $PREFIX (made by $me)."
  echo "# Use:  . $PREFIX/env.sh   then for example  clinfo -l  or  clmoe-info"
  echo "export OCL_ICD_VENDORS=$VENDORS"
  if [ -n "$ldpath" ]; then
    # shellcheck disable=SC2016
    echo "export LD_LIBRARY_PATH=$ldpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  fi
} > "$PREFIX/.env.sh.new" || die "cannot write $PREFIX/.env.sh.new"
mv "$PREFIX/.env.sh.new" "$PREFIX/env.sh" || die "cannot write $PREFIX/env.sh"

if [ "${INTEL_OPENCL_KEEP_WHEELS:-1}" = 0 ] && [ -z "$WHEELS_GIVEN" ]; then
  rm -rf "$PREFIX/whl" && say "deleted $PREFIX/whl (INTEL_OPENCL_KEEP_WHEELS=0)"
fi

end_time=$(date +%s)
lib_mb=$(( $(kib_of "$PREFIX/lib") / 1024 ))
if [ -n "$WHEELS_GIVEN" ]; then
  whl_note="the wheels stay in $WHEELS_GIVEN"
elif [ -d "$PREFIX/whl" ]; then
  whl_note="$(( $(kib_of "$PREFIX/whl") / 1024 )) MB of wheels in $PREFIX/whl"
else
  whl_note="no wheels kept"
fi
echo
say "Intel's OpenCL CPU runtime $RT_VERSION is installed in $PREFIX ($lib_mb MB of libraries; $whl_note; $((end_time - start_time)) s)"
echo "To use it beside the system's drivers (PoCL), in each shell or job script:"
echo
echo "    export OCL_ICD_VENDORS=$VENDORS"
if [ -n "$ldpath" ]; then
  echo "    export LD_LIBRARY_PATH=$ldpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
else
  echo "    # no LD_LIBRARY_PATH needed: libintelocl.so finds its libraries through RUNPATH \$ORIGIN"
fi
echo
echo "or:  . $PREFIX/env.sh"
echo "Then clmoe picks it with --device intel or CLMOE_DEVICE=intel."
