#!/usr/bin/env bash
# Replays every reproducer in DIR through a harness (libFuzzer binary or the replay_main build):
#   tests/fuzz/replay.sh BUILD/fuzz/fuzz_npy tests/fuzz/regress/npy
# An empty or missing DIR passes (a libFuzzer binary given no file would start fuzzing).
set -euo pipefail
bin="$1"
dir="$2"
shopt -s nullglob
files=("$dir"/*)
if [ "${#files[@]}" -eq 0 ]; then
  echo "replay: no reproducers in $dir"
  exit 0
fi
# libFuzzer options (ignored by replay_main): the same limits as a campaign
exec "$bin" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=60 "${files[@]}"
