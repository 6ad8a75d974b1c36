#!/usr/bin/env bash
# Builds the SDK's tests as a Mac declares them, on Linux: the package without the
# Linux-only test targets and test support (the manifest's `linuxOnly` list), so a portable
# test file that uses a Linux-only helper (a server process, PostgreSQL, a proxy, a child
# process) fails here, not first on a Mac. What a Mac has that Linux lacks (Darwin's
# calls) is checked only by scripts/check-apple.sh on a Mac.
#
#   scripts/check-portable-tests.sh          build them
#   scripts/check-portable-tests.sh --run    build them and run them
#
# It works on a copy of the files git tracks (as they are in the working tree) with a
# scratch build folder of its own, and removes both at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
work=$(mktemp -d "${TMPDIR:-/tmp}/outpost-portable.XXXXXX")
trap 'rm -rf "$work"' EXIT
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} sh -c 'test -e "{}" && cp --parents "{}" "$0"' "$work"
cat >> "$work/Package.swift" <<'SWIFT'

// scripts/check-portable-tests.sh: the test targets a Mac does not declare, and every
// dependency on them, as the `#if !os(Linux)` block above removes them there.
let macLacks = linuxOnly.filter { name in name == "OutpostTestSupport" || name == "OutpostMutants" || name.hasSuffix("Tests") }
package.targets.removeAll { macLacks.contains($0.name) }
for target in package.targets {
    target.dependencies.removeAll { dependency in
        switch dependency {
        case .targetItem(let name, _), .byNameItem(let name, _): return macLacks.contains(name)
        default: return false
        }
    }
}
SWIFT
cd "$work"
echo "== the test targets a Mac builds: $(swift package dump-package | python3 -c 'import json,sys; print(", ".join(t["name"] for t in json.load(sys.stdin)["targets"] if t["type"] == "test"))')"
swift build --build-tests
if [ "${1:-}" = "--run" ]; then
  swift test --skip-build --disable-xctest
fi
echo "check-portable-tests: the SDK's portable tests build without the Linux-only test support"
