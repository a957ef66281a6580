#!/bin/sh
# The installed API: every header of include/clmoe/ compiles alone, in C and in C++, with
# warnings as errors; libclmoe.so exports exactly the functions the headers declare with
# CLMOE_API (all named clmoe_..., none clmoe__...), and nothing unprefixed. Run by make
# check (CC, CXX, OPENCL_CFLAGS, MPI_CFLAGS, CLMOE_SRCDIR and CLMOE_LIB_DIR come from it).
set -u
. "$(dirname "$0")/apps_common.sh"
src=${CLMOE_SRCDIR:?CLMOE_SRCDIR: the source tree}
inc="$src/include"
cc=${CC:-cc} cxx=${CXX:-c++}

# 1. Each header alone, as the first include of a C11 and of a C++11 file.
for h in "$inc"/clmoe/*.h; do
  name=$(basename "$h")
  extra= extra_cxx=
  if [ "$name" = dist_mpi.h ]; then
    # installed only in MPI builds, where mpi.h is found through MPI_CFLAGS; C++ programs
    # use MPI's C API (the deprecated C++ bindings draw warnings of their own)
    [ "${CLMOE_HAVE_MPI:-0}" = 1 ] || { pass "dist_mpi.h: not installed in this build (no MPI)"; continue; }
    extra=${MPI_CFLAGS:-} extra_cxx="-DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1"
  fi
  printf '#include "clmoe/%s"\nint clmoe_api_test_unused;\n' "$name" > "$tmp/h.c"
  cp "$tmp/h.c" "$tmp/h.cpp"
  if $cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$inc" ${OPENCL_CFLAGS:-} $extra \
       "$tmp/h.c" > "$tmp/out" 2>&1; then pass "$name compiles alone in C"
  else fail "$name does not compile alone in C"; sed 's/^/    /' "$tmp/out" | head -20; fi
  if $cxx -std=c++11 -Wall -Wextra -Werror -fsyntax-only -I"$inc" ${OPENCL_CFLAGS:-} $extra $extra_cxx \
       "$tmp/h.cpp" > "$tmp/out" 2>&1; then pass "$name compiles alone in C++"
  else fail "$name does not compile alone in C++"; sed 's/^/    /' "$tmp/out" | head -20; fi
done

# 2. The functions the headers declare public: the name before the first "(" of every
#    line that starts a CLMOE_API declaration.
grep -h '^ *CLMOE_API ' "$inc"/clmoe/*.h > "$tmp/decl"
sed -n 's/^ *CLMOE_API [^(]*[^A-Za-z0-9_]\(clmoe_[A-Za-z0-9_]*\) *(.*/\1/p' "$tmp/decl" | sort -u > "$tmp/declared"
if [ "$(wc -l < "$tmp/decl")" -ne "$(wc -l < "$tmp/declared")" ] || [ ! -s "$tmp/declared" ]; then
  fail "every CLMOE_API line names one function clmoe_...( ($(wc -l < "$tmp/decl") lines, $(wc -l < "$tmp/declared") names)"
  sed -n '/clmoe_[A-Za-z0-9_]* *(/!p' "$tmp/decl" | head -5 | sed 's/^/    /'
else
  pass "$(wc -l < "$tmp/declared") public functions declared with CLMOE_API"
fi
if grep -n 'clmoe__' "$tmp/declared" > "$tmp/out"; then
  fail "an internal (clmoe__) function is declared public"; sed 's/^/    /' "$tmp/out"
fi

# 3. What libclmoe.so exports: defined dynamic symbols (functions and data).
so=${CLMOE_LIB_DIR:-../lib/.libs}/libclmoe.so
if [ ! -f "$so" ]; then
  pass "no shared library in this build (--disable-shared): nothing exported to compare"
elif ! command -v nm > /dev/null 2>&1; then
  fail "nm is needed to read $so's exported symbols (Debian: binutils)"
else
  nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVWGSi]$/ {print $3}' | sed 's/@.*//' | sort -u > "$tmp/exported"
  if grep -v '^clmoe_[a-z]' "$tmp/exported" > "$tmp/out"; then
    fail "libclmoe.so exports symbols outside the API ($(wc -l < "$tmp/out")):"; head -20 "$tmp/out" | sed 's/^/    /'
  else
    pass "libclmoe.so exports only clmoe_ names ($(wc -l < "$tmp/exported"))"
  fi
  comm -23 "$tmp/declared" "$tmp/exported" > "$tmp/missing"
  comm -13 "$tmp/declared" "$tmp/exported" > "$tmp/extra"
  if [ -s "$tmp/missing" ]; then
    fail "declared CLMOE_API but not exported (not defined in the library?):"; sed 's/^/    /' "$tmp/missing"
  else pass "every declared function is exported"; fi
  if [ -s "$tmp/extra" ]; then
    fail "exported but declared in no installed header:"; sed 's/^/    /' "$tmp/extra"
  else pass "every exported symbol is declared"; fi
fi

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all API checks passed"
