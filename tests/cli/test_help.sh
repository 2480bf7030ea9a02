#!/usr/bin/env bash
# Every command listed by `kiln --help` answers --help and -h with its usage on stdout, nothing on
# stderr, and exit status 0; an unknown option still fails with the usage on stderr.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"

"$KILN" --help > "$T/top.txt" 2> "$T/err.txt" && [ ! -s "$T/err.txt" ] && ok "kiln --help" || bad "kiln --help"
cmds=$(sed -n '/^commands:/,$p' "$T/top.txt" | grep -oE '^  [a-z][a-z-]*' | tr -d ' ')
[ "$(echo "$cmds" | wc -w)" -ge 7 ] && ok "commands listed: $(echo $cmds)" || bad "commands listed: '$cmds'"
for c in $cmds; do
  for h in --help -h; do
    "$KILN" "$c" $h > "$T/out.txt" 2> "$T/err.txt"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "usage: kiln $c" "$T/out.txt" && [ ! -s "$T/err.txt" ]; then
      ok "kiln $c $h"
    else
      bad "kiln $c $h (rc=$rc): $(head -c 300 "$T/out.txt") / $(head -c 300 "$T/err.txt")"
    fi
  done
done
"$KILN" build --no-such-option > "$T/out.txt" 2> "$T/err.txt"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && [ ! -s "$T/out.txt" ] && ok "unknown option fails on stderr" || bad "unknown option (rc=$rc)"
finish
