#!/usr/bin/env bash
# Runs the README's test command (`make test`) while busy-loop processes hold every core,
# as a machine shared with other work does: the suite must pass anyway (nothing that
# answers a test may wait for the test process's cooperative pool). The busy loops are
# stopped by their own PIDs when the run ends, however it ends.
#
#   scripts/test-under-load.sh            # one busy loop per core (two on a 2-core machine)
#   LOAD_PROCESSES=4 scripts/test-under-load.sh
#   scripts/test-under-load.sh test ...   # other make targets or variables instead of `test`
set -euo pipefail
cd "$(dirname "$0")/.."

count=${LOAD_PROCESSES:-$(nproc)}
pids=()
stop_load() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
trap stop_load EXIT
trap 'exit 130' INT TERM

for _ in $(seq "$count"); do
    # A shell spinning on a builtin: a whole core, no I/O, nothing to clean up.
    bash -c 'while :; do :; done' &
    pids+=("$!")
done
echo "test-under-load: ${#pids[@]} busy loops (PIDs ${pids[*]}) hold the cores"

start=$(date +%s)
status=0
make "${@:-test}" || status=$?
echo "test-under-load: make ${*:-test} exited $status after $(( $(date +%s) - start )) s under load"
exit "$status"
