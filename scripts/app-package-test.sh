#!/usr/bin/env bash
# Builds and runs a small app package outside the repository against this checkout, with
# the dependency lines the README shows (its "package-lines" block), exactly as written:
# - the path form: the checkout's tracked files copied into a folder named `outpost`
#   beside the app, built and run (the app imports only `Outpost`, and its build compiles
#   none of the server's rules: no OutpostSyncRules, no OutpostTesting); then the app's test
#   target, with the README's `OutpostTesting` line, built and run against InMemorySyncServer;
# - the URL form: the same manifest with the README's URL line, loaded by SwiftPM
#   (`swift package dump-package` checks that `package:` names the dependency the URL
#   declares, the check that fails with "unknown package" when it does not).
# Run by `make test`; it takes a debug build of the SDK, a few minutes on two cores.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/outpost-app-package.XXXXXX)
trap 'rm -rf "$work"' EXIT

block=$(awk '/<!-- package-lines/{found=1; next} found && /^```swift/{inside=1; next} inside && /^```/{exit} inside{print}' "$repo/README.md")
url_line=$(grep -E '^\s*\.package\(url:' <<<"$block" | sed -E 's/^\s+//')
path_line=$(grep -E '^\s*//\s*\.package\(path:' <<<"$block" | sed -E 's#^\s*//\s*##')
target_line=$(grep -E '\.product\(name: "Outpost"' <<<"$block" | sed -E 's/^\s+//')
test_line=$(grep -E '\.product\(name: "OutpostTesting"' <<<"$block" | sed -E 's/^\s+//')
for v in url_line path_line target_line test_line; do
  [[ -n "${!v}" ]] || { echo "app-package-test: README's package-lines block has no ${v%_line} line" >&2; exit 1; }
done

# The checkout as a user has it: tracked files, in a folder named outpost.
mkdir -p "$work/outpost"
(cd "$repo" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$work/outpost"

manifest() {  # $1: the dependency line
  cat <<MANIFEST
// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "App",
    platforms: [.macOS(.v15), .iOS(.v18)],
    dependencies: [
        $1
    ],
    targets: [
        $target_line
        $test_line
    ]
)
MANIFEST
}

mkdir -p "$work/App/Sources/App"
manifest "$path_line" > "$work/App/Package.swift"
cat > "$work/App/Sources/App/main.swift" <<'SWIFT'
import Foundation
import Outpost

// Only `import Outpost`: the types an app meets in the public API are visible with it.
struct Inspection: Codable, Sendable {
    var title: String
    var status: String
    var priority: Int
}

let path = CommandLine.arguments[1]
let store = try OutpostStore(path: path, configuration: .init(space: "field"))
let inspections = store.collection("inspections", of: Inspection.self)
try await store.transaction { tx in
    for i in 0..<20 { try tx.save(Inspection(title: "Pump \(i)", status: i % 2 == 0 ? "open" : "done", priority: i % 5), id: "i\(i)", in: inspections) }
}
let raw: JSONObject = ["title": .string("raw"), "priority": .number(JSONNumber(3))]
let stored: StoredRecord = try await store.put(raw, in: "notes", id: "n1")
let data: JSONObject? = stored.data
let value: JSONValue? = data?["title"]
let version: Version? = stored.version
let open = try await inspections.filter { $0.status == "open" && $0.priority >= 2 }.sorted(by: .descending("priority")).fetch()
print("app: \(open.count) open, first \(open.first?.id ?? "-"), note \(value.map { "\($0)" } ?? "-"), version \(version.map { "\($0)" } ?? "none")")
await store.close()
SWIFT

# The app's tests, with the README's OutpostTesting line: two devices on InMemorySyncServer
# (built below, after the app alone).
mkdir -p "$work/App/Tests/AppTests"
cat > "$work/App/Tests/AppTests/AppTests.swift" <<'SWIFT'
import Outpost
import OutpostTesting
import Testing

@Test func aSaveReachesTheOtherDevice() async throws {
    let server = InMemorySyncServer()
    let phone = try OutpostStore.inMemory(configuration: .init(space: "team"), transport: server.transport(device: "phone"))
    let laptop = try OutpostStore.inMemory(configuration: .init(space: "team"), transport: server.transport(device: "laptop"))
    try await phone.put(["title": "Buy milk"], in: "todos", id: "t1")
    try await phone.sync()
    try await laptop.sync()
    #expect(try await laptop.record(in: "todos", id: "t1")?.data?["title"] == "Buy milk")
    #expect(server.records(space: "team").count == 1)
}
SWIFT
echo "app-package-test: building an app against $work/outpost with: $path_line"
swift build --package-path "$work/App" 2>&1 | tail -n 3
out=$("$work/App/.build/debug/App" "$work/app.sqlite")
echo "$out"
[[ "$out" == 'app: 6 open, first i4, note "raw", version none' ]] || { echo "app-package-test: unexpected output" >&2; exit 1; }
# The app's build compiled the SDK and none of the server's rules. (SwiftPM makes a
# `<module>.build` folder for every target of the graph; a compiled module has objects in it
# and a `.swiftmodule`.)
compiled() {  # $1: a module; prints what its compilation left, nothing when it was not compiled
  find "$work/App/.build/debug" -maxdepth 2 -name "$1.swiftmodule"
  [[ ! -d "$work/App/.build/debug/$1.build" ]] || find "$work/App/.build/debug/$1.build" -name '*.o'
}
[[ -n "$(compiled Outpost)" ]] || { echo "app-package-test: Outpost looks uncompiled: the check below would prove nothing" >&2; exit 1; }
for module in OutpostSyncRules OutpostTesting OutpostRules OutpostServer; do
  [[ -z "$(compiled "$module")" ]] || { echo "app-package-test: building the app compiled $module" >&2; exit 1; }
done

echo "app-package-test: building the app's tests with: $test_line"
swift build --package-path "$work/App" --build-tests 2>&1 | tail -n 3
swift test --package-path "$work/App" --skip-build --disable-xctest 2>&1 | tail -n 3 | tee "$work/test.log"
grep -q "Test run with 1 test.* passed" "$work/test.log" || { echo "app-package-test: the app's test did not pass" >&2; exit 1; }

# The URL form: the same app, the README's URL line. Loading the manifest checks the names.
mkdir -p "$work/AppURL/Sources/App"
manifest "$url_line" > "$work/AppURL/Package.swift"
cp "$work/App/Sources/App/main.swift" "$work/AppURL/Sources/App/"
cp -R "$work/App/Tests" "$work/AppURL/"
swift package --package-path "$work/AppURL" dump-package > "$work/url.json"
grep -q '"identity" : "outpost"\|"outpost"' "$work/url.json" || { echo "app-package-test: the URL line does not declare outpost" >&2; exit 1; }
# A wrong package name is refused at the same step, so the check above can fail.
sed 's/package: "outpost"/package: "Outpost-Missing"/' "$work/AppURL/Package.swift" > "$work/wrong.swift" && mv "$work/wrong.swift" "$work/AppURL/Package.swift"
if swift package --package-path "$work/AppURL" dump-package > /dev/null 2>&1; then
  echo "app-package-test: a wrong package name was not refused: the URL check proves nothing" >&2; exit 1
fi
echo "app-package-test: the README's dependency lines work (path: the app built and ran without the server's rules, its tests with OutpostTesting passed; URL: names checked)"
