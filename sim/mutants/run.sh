#!/usr/bin/env bash
# Each patch here breaks one rule the simulation's checkers hold the agents
# to (its first line says which floe-sim run finds it). For each: apply it,
# build, run, expect a failure, revert. Prints what each run ended with.
#   sim/mutants/run.sh                 every patch
#   sim/mutants/run.sh stale-end-txn   one
set -uo pipefail
cd "$(dirname "$0")/../.."
patches=("$@")
[ ${#patches[@]} -eq 0 ] && patches=($(ls sim/mutants/*.patch | xargs -n1 basename | sed 's/\.patch$//'))
status=0
for name in "${patches[@]}"; do
    patch="sim/mutants/$name.patch"
    args=$(head -1 "$patch" | sed 's/^floe-sim: //')
    git apply "$patch" || { echo "$name: does not apply"; status=1; continue; }
    if cargo build --release -q -p floe-sim; then
        ended=$(target/release/floe-sim $args 2>&1 | grep -E "^seed .* failed|passed" | tail -1)
    else
        ended="does not build"
    fi
    git apply -R "$patch"
    case "$ended" in
        *failed*) echo "$name: found ($ended)" ;;
        *) echo "$name: NOT FOUND ($ended)"; status=1 ;;
    esac
done
exit $status
