#!/usr/bin/env bash
# The CLI uses only the public API: tools/kiln/*.c (the kiln executable's sources) include no
# header but their own (cli.h, in tools/kiln) and <kiln/kiln.h> / system headers; CMake gives the
# kiln target no src/ include path, so the compiler enforces it and this check catches relative paths.
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' tools/kiln/*.c tools/kiln/*.h | grep -vE '#[[:space:]]*include[[:space:]]*"(cli\.h|kiln/kiln\.h)"')
if [ -n "$bad" ]; then echo "FAIL: private includes in the CLI:"; echo "$bad"; exit 1; fi
if grep -nE 'kiln__[a-z]' tools/kiln/*.c tools/kiln/*.h; then echo "FAIL: the CLI calls internal kiln__ functions"; exit 1; fi
grep -A2 'add_executable(kiln ' CMakeLists.txt | grep -q 'CMAKE_SOURCE_DIR}/src' && { echo "FAIL: kiln target has src/ in its include path"; exit 1; }
echo "pass: the CLI includes only cli.h and kiln.h"
