#!/usr/bin/env bash
# Sweeps scenarios over 5,000 new seeds each, with and without lock-delay,
# as SIMULATION.md's "Sweeps over new seed ranges" says: 10 runs of 500
# seeds per range, one seed at a time, so that a run cut short loses one
# run at most and the sweep resumes where it stopped.
#
#   tests/sweeps.sh DIR BINARY SCENARIO...
#
# DIR keeps the state: chunks/<scenario>.<with|without>.<k>.{out,done}
# and results.tsv (scenario, mode, first seed, exit status, seconds).
# BINARY is a copy of a release leasehold-sim, so that a rebuild does not
# change it halfway. Run it at low priority beside other work:
#   nice -n 19 tests/sweeps.sh /var/tmp/sweeps ./leasehold-sim-abc123 semaphore random
# Several drivers may share DIR and scenarios: each claims a run
# (chunks/<tag>.claim holds its process id) before it starts it, and a
# claim whose driver is gone is taken over.
set -uo pipefail
dir=$1 bin=$(realpath "$2"); shift 2
mkdir -p "$dir/chunks"
cd "$dir"
# Scenarios with no lock-delay of their own get 2 s in the range with it.
no_delay="lease-edges late-release lock-contention-no-delay election-no-delay cell-master-isolated cell5-master-isolated cell-restart-in-lease cell-slow-step-down"
for scenario in "$@"; do
  for mode in with without; do
    if [ "$mode" = with ]; then
      base=5000001 extra=()
      for n in $no_delay; do [ "$n" = "$scenario" ] && extra=(--lock-delay-ms 2000); done
    else
      base=6000001 extra=(--lock-delay-ms 0)
    fi
    for k in 0 1 2 3 4 5 6 7 8 9; do
      first=$((base + k * 500)) tag=$scenario.$mode.$k
      [ -f "chunks/$tag.done" ] && continue
      claim=chunks/$tag.claim
      if ! (set -o noclobber; echo $$ >"$claim") 2>/dev/null; then
        owner=$(cat "$claim" 2>/dev/null)
        [ -n "$owner" ] && [ "$owner" != $$ ] && kill -0 "$owner" 2>/dev/null && continue
        echo $$ >"$claim"
      fi
      started=$(date +%s)
      "$bin" sweep --scenario "$scenario" --seeds 500 --first-seed "$first" --jobs 1 "${extra[@]}" \
        >"chunks/$tag.out" 2>&1
      rc=$? took=$(( $(date +%s) - started ))
      echo "$rc $took" >"chunks/$tag.done"
      printf '%s\t%s\t%s\t%s\t%s\n' "$scenario" "$mode" "$first" "$rc" "$took" >>results.tsv
    done
  done
done
