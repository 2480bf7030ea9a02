#!/usr/bin/env bash
# The CLI uses only the public API: every source under tools/kiln includes, besides system headers,
# only <kiln/kiln.h> and the CLI's own headers (files under tools/kiln, no ".."), and calls no
# internal kiln__ function; CMake gives the kiln target no src/ include path, so the compiler
# enforces it and this check also catches relative paths into src/.
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
fails=0
while IFS= read -r f; do
  dir=$(dirname "$f")
  while IFS= read -r inc; do
    [ "$inc" = "kiln/kiln.h" ] && continue
    case "$inc" in *..*) ;; *) [ -f "$dir/$inc" ] && continue ;; esac
    echo "FAIL: $f includes \"$inc\", which is not kiln.h or a CLI header"
    fails=$((fails + 1))
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/p' "$f")
done < <(find tools/kiln -name '*.[ch]')
if grep -rnE 'kiln__[a-z]' tools/kiln --include='*.[ch]'; then echo "FAIL: the CLI calls internal kiln__ functions"; fails=$((fails + 1)); fi
if grep -A2 'add_executable(kiln ' CMakeLists.txt | grep -q 'CMAKE_SOURCE_DIR}/src'; then
  echo "FAIL: the kiln target has src/ in its include path"; fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "pass: the CLI includes only kiln.h and its own headers"
[ $fails -eq 0 ]
