#!/usr/bin/env bash
# Runs `outpost-bench media` against the directory store and an S3 store in one run:
# starts a throwaway S3 store (OpenStack Swift's s3api, scripts/s3-test-server.py serve),
# passes its settings to the bench with boto3 (the venv scripts/install-deps.sh test makes)
# as the S3 ceiling, and stops the store by its PID. Extra arguments go to the bench
# (`--size-mb 64`, say). Needs the release build: swift build -c release (or OUTPOST_BENCH
# naming an outpost-bench built elsewhere, beside its outpost-server).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
boto3="$(ls -d "$root"/.build/tools/boto3-*/bin/python 2>/dev/null | head -1)"
[ -x "$boto3" ] || { echo "boto3 is not installed: run scripts/install-deps.sh test" >&2; exit 1; }
settings="$(mktemp)"
/usr/bin/python3 "$root/scripts/s3-test-server.py" serve --bucket outpost-bench > "$settings" &
store=$!
trap 'kill "$store" 2>/dev/null; wait "$store" 2>/dev/null; rm -f "$settings"' EXIT
for _ in $(seq 1 600); do
  grep -q '^S3_REGION=' "$settings" && break
  kill -0 "$store" 2>/dev/null || { cat "$settings" >&2; echo "the S3 store did not start" >&2; exit 1; }
  sleep 0.1
done
grep -q '^S3_REGION=' "$settings" || { echo "the S3 store did not start within 60 s" >&2; exit 1; }
endpoint="$(sed -n 's/^S3_ENDPOINT=//p' "$settings")"
export AWS_ACCESS_KEY_ID="$(sed -n 's/^S3_ACCESS_KEY=//p' "$settings")"
export AWS_SECRET_ACCESS_KEY="$(sed -n 's/^S3_SECRET_KEY=//p' "$settings")"
"${OUTPOST_BENCH:-$root/.build/release/outpost-bench}" media --s3-endpoint "$endpoint" --s3-bucket outpost-bench --boto3 "$boto3" "$@"
