# Sourced by the app tests (test_apps.sh, test_op.sh): the apps, a temporary folder,
# pass/fail counting and `expect`. CLMOE_APPS_DIR points at the built apps.
apps=${CLMOE_APPS_DIR:-../apps}
info="$apps/clmoe-info"
tmp=$(mktemp -d /tmp/clmoe-apps.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }

# expect NAME STATUS PATTERN -- command...: exit status and a pattern in stdout+stderr.
expect() {
  name=$1 want=$2 pattern=$3
  shift 4
  "$@" > "$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$name: exit $got, expected $want"; sed 's/^/    /' "$tmp/out" | tail -15; return
  fi
  if [ -n "$pattern" ] && ! grep -q -- "$pattern" "$tmp/out"; then
    fail "$name: output lacks '$pattern'"; sed 's/^/    /' "$tmp/out" | tail -15; return
  fi
  pass "$name"
}

# No OpenCL device at all: skip (77) like the CUnit suites.
skip_without_device() {
  if ! "$info" --no-probe > /dev/null 2>&1 && "$info" --no-probe 2>&1 | grep -q "CLMOE_ERR_NO_DEVICE"; then
    echo "SKIP: no OpenCL device"; exit 77
  fi
}
