// swift-tools-version:6.0
// Outpost: a self-hosted sync server and a Swift client SDK for offline-first apps.
//
// Layers (arrows point one way; see docs/architecture.md):
//   C system libraries  <- OutpostSQLite, OutpostPostgres, OutpostCrypto, OutpostSignatures, OutpostCompression
//   OutpostCore (wire types, no I/O) <- everything
//   OutpostSyncRules (the protocol's push and pull rules) <- OutpostServer, OutpostTesting; never the SDK
//   OutpostRules (the rules language: schemas and expressions) <- OutpostServer; never the SDK
//   OutpostHTTP (engine, knows bytes and HTTP only) <- OutpostServer <- outpost-server
//   Outpost (client SDK) <- outpost (CLI); never depends on the server.
//   OutpostTesting (InMemorySyncServer, for tests and previews) <- Outpost, OutpostSyncRules
//
// Tools version 6.0: the oldest with Swift 6 language mode (Xcode 16, docs/client.md,
// "Platforms and compilers"). The SDK's Apple platforms are the oldest that have the
// Synchronization module (Mutex, Atomic), which the SDK and the modules under it use.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
]

/// libcrypto, for Linux alone: on Apple platforms OutpostCrypto uses CryptoKit and
/// CommonCrypto (its Primitives/Apple.swift), and nothing else an app can link needs it.
let libcrypto: Target.Dependency = .target(name: "OutpostCCrypto", condition: .when(platforms: [.linux]))

let package = Package(
    name: "Outpost",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        // The libraries an app or another package links. The conformance suite and the
        // tests' support are targets, not products: the suite is offered as the
        // outpost-conformance command, and neither builds anywhere but Linux.
        .library(name: "OutpostCore", targets: ["OutpostCore"]),
        .library(name: "Outpost", targets: ["Outpost"]),
        // InMemorySyncServer, for an app's tests and SwiftUI previews: the protocol in process
        // with the server's own rules (OutpostSyncRules), which `Outpost` never links.
        .library(name: "OutpostTesting", targets: ["OutpostTesting"]),
        .executable(name: "outpost-server", targets: ["outpost-server"]),
        .executable(name: "outpost-bench", targets: ["outpost-bench"]),
        .executable(name: "outpost-conformance", targets: ["outpost-conformance"]),
        // The command-line client's binary is `outpost-cli` (installed as `outpost`): no two
        // products or targets may differ only in case, since on a case-insensitive volume
        // (a Mac's default) `Outpost` and `outpost` would share build folders and schemes.
        .executable(name: "outpost-cli", targets: ["OutpostCLI"]),
        .executable(name: "outpost-sim", targets: ["outpost-sim"]),
        // The SDK's client driver for `outpost-conformance client` (docs/conformance.md).
        .executable(name: "outpost-driver", targets: ["outpost-driver"]),
    ],
    targets: [
        // MARK: C at the edge
        .systemLibrary(
            name: "OutpostCSQLite", path: "Sources/OutpostCSQLite",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        // Linux only (see `libcrypto` above).
        .systemLibrary(
            name: "OutpostCCrypto", path: "Sources/OutpostCCrypto",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "OutpostCZlib", path: "Sources/OutpostCZlib",
            providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(
            name: "OutpostCLibPQ", path: "Sources/OutpostCLibPQ",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]),
        // epoll, eventfd, sendfile, accept4: Linux calls the Glibc module does not import.
        .systemLibrary(name: "OutpostCLinux", path: "Sources/OutpostCLinux"),

        // MARK: Shared building blocks
        .target(name: "OutpostCore", path: "Sources/OutpostCore", swiftSettings: swiftSettings),
        // The push and pull rules of docs/protocol.md sections 4 and 5, written once for the
        // server's stores and InMemorySyncServer (OutpostTesting). Portable; the SDK never
        // links it (Tests/PackageGraphTests).
        .target(name: "OutpostSyncRules", dependencies: ["OutpostCore"], path: "Sources/OutpostSyncRules", swiftSettings: swiftSettings),
        // The rules file's language (docs/rules.md): JSON Schema and rule expressions. The
        // server checks writes with it; the SDK never links it.
        .target(name: "OutpostRules", dependencies: ["OutpostCore"], path: "Sources/OutpostRules", swiftSettings: swiftSettings),
        .target(
            name: "OutpostSQLite", dependencies: ["OutpostCSQLite"], path: "Sources/OutpostSQLite",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostCrypto", dependencies: [libcrypto], path: "Sources/OutpostCrypto",
            swiftSettings: swiftSettings),
        // RS256 and ES256 keys built from JWKs, their signing side, and HMAC-SHA256: what the
        // server verifies tokens and signs webhooks with, and what the conformance suite and
        // the tests sign tokens with. Linux only; the SDK never signs or verifies.
        .target(
            name: "OutpostSignatures", dependencies: ["OutpostCrypto", libcrypto], path: "Sources/OutpostSignatures",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostPostgres", dependencies: ["OutpostCLibPQ"], path: "Sources/OutpostPostgres",
            swiftSettings: swiftSettings),
        // Child processes through posix_spawn (tests, benchmarks, conformance hooks).
        .target(
            name: "OutpostSubprocess", dependencies: ["OutpostCLinux"], path: "Sources/OutpostSubprocess",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostCompression", dependencies: ["OutpostCZlib"], path: "Sources/OutpostCompression",
            swiftSettings: swiftSettings),

        // MARK: Server
        .target(
            name: "OutpostHTTP", dependencies: ["OutpostCore", "OutpostCompression", "OutpostCLinux"], path: "Server/OutpostHTTP",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostServer",
            dependencies: ["OutpostCore", "OutpostSyncRules", "OutpostRules", "OutpostHTTP", "OutpostSQLite", "OutpostPostgres", "OutpostCrypto", "OutpostSignatures", "OutpostCLinux"],
            path: "Server/OutpostServer",
            // Compiled into the binary as bytes (PackageResources.console_js, console_css):
            // an installed binary has no resource bundle beside it on Linux.
            resources: [.embedInCode("Admin/console.js"), .embedInCode("Admin/console.css")],
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "outpost-server", dependencies: ["OutpostServer"], path: "Server/outpost-server",
            swiftSettings: swiftSettings),

        // MARK: Client (never depends on Server/ nor on OutpostSyncRules)
        .target(
            name: "Outpost",
            dependencies: ["OutpostCore", "OutpostSQLite", "OutpostCrypto", "OutpostCompression"],
            path: "Client/Outpost",
            // The privacy manifest Apple's App Store reads from the SDK's bundle.
            resources: [.copy("PrivacyInfo.xcprivacy")],
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "OutpostCLI", dependencies: ["Outpost"], path: "Client/outpost", swiftSettings: swiftSettings),
        // The SDK behind the client driver protocol (docs/conformance.md): JSON lines in and out.
        .executableTarget(
            name: "outpost-driver", dependencies: ["Outpost", "OutpostCore"], path: "Client/outpost-driver", swiftSettings: swiftSettings),
        // InMemorySyncServer: a product of its own, so that the server's rules stay out of an
        // app that links only `Outpost`. Portable (no Glibc, no libcrypto of its own).
        .target(
            name: "OutpostTesting", dependencies: ["Outpost", "OutpostCore", "OutpostCrypto", "OutpostSyncRules"], path: "Client/OutpostTesting",
            swiftSettings: swiftSettings),

        // MARK: Conformance suite (checks any server over HTTP: never depends on Server/)
        .target(
            name: "OutpostConformance", dependencies: ["OutpostCore", "OutpostCrypto", "OutpostSignatures", "OutpostSubprocess"], path: "Sources/OutpostConformance",
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "outpost-conformance", dependencies: ["OutpostConformance"], path: "Sources/outpost-conformance",
            swiftSettings: swiftSettings),

        // MARK: Simulation (the integrity harness: real client stores and the real server in process)
        .target(
            name: "OutpostSimulation",
            dependencies: ["Outpost", "OutpostServer", "OutpostHTTP", "OutpostCore", "OutpostSQLite", "OutpostPostgres"],
            path: "Sources/OutpostSimulation", swiftSettings: swiftSettings),
        .executableTarget(
            name: "outpost-sim", dependencies: ["OutpostSimulation", "OutpostServer"], path: "Sources/outpost-sim",
            swiftSettings: swiftSettings),

        // MARK: Benchmarks
        .executableTarget(
            name: "outpost-bench",
            dependencies: ["OutpostCore", "OutpostServer", "OutpostHTTP", "OutpostSQLite", "OutpostCrypto", "OutpostSignatures", libcrypto, "OutpostCLinux", "Outpost",
                           "OutpostSubprocess"],
            path: "Benchmarks/outpost-bench", swiftSettings: swiftSettings),

        // MARK: Tests
        // The tests' support that builds wherever the SDK does: temporary directories, polls
        // with deadlines, work off the cooperative pool, the test clock, the logs' trait.
        .target(name: "OutpostTestBasics", path: "Tests/OutpostTestBasics", swiftSettings: swiftSettings),
        // The rest, Linux only: real servers and PostgreSQL as processes, proxies, the raw
        // HTTP client, pinned tools. It re-exports OutpostTestBasics.
        .target(
            name: "OutpostTestSupport", dependencies: ["OutpostTestBasics", "OutpostSubprocess", "OutpostHTTP"], path: "Tests/OutpostTestSupport",
            swiftSettings: swiftSettings),
        // Deliberate bugs for the mutation tests, as decorators of a real server's parts;
        // only test targets link it.
        .target(
            name: "OutpostMutants", dependencies: ["OutpostServer", "OutpostHTTP", "OutpostCore", "OutpostSyncRules", "OutpostCrypto", "OutpostSignatures"], path: "Tests/OutpostMutants",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostCoreTests", dependencies: ["OutpostCore"], path: "Tests/OutpostCoreTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostRulesTests", dependencies: ["OutpostRules", "OutpostCore"], path: "Tests/OutpostRulesTests",
            swiftSettings: swiftSettings),
        .testTarget(
            // Portable: on a Mac the tests that need a real server, PostgreSQL, a proxy or a
            // child process are left out (each such file is `#if canImport(OutpostTestSupport)`),
            // and the store's, sync's (against InMemorySyncServer), queries', media's and
            // migrations' tests run (scripts/check-apple.sh; scripts/check-portable-tests.sh
            // builds them so on Linux).
            name: "OutpostTests", dependencies: ["Outpost", "OutpostTesting", "OutpostTestBasics", "OutpostTestSupport", "OutpostCompression", "OutpostCrypto", "OutpostSQLite"],
            path: "Tests/OutpostTests",
            // Store files made by earlier releases, opened by the migration tests.
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostSQLiteTests", dependencies: ["OutpostSQLite"], path: "Tests/OutpostSQLiteTests",
            swiftSettings: swiftSettings),
        // Portable: the primitives, scrypt and the formats, and the fixtures of
        // docs/encryption.md opened through the SDK. On Linux, libcrypto is the oracle the
        // pure-Swift parts are checked against (OutpostTests has Python open the fixtures).
        .testTarget(
            name: "OutpostCryptoTests",
            dependencies: ["OutpostCrypto", "OutpostCore", "Outpost", libcrypto, .target(name: "OutpostTestSupport", condition: .when(platforms: [.linux]))],
            path: "Tests/OutpostCryptoTests",
            // The formats' bytes (docs/encryption.md), made by FormatFixtureTests' generator.
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostSignaturesTests", dependencies: ["OutpostSignatures", "OutpostCrypto", "OutpostCore", "OutpostTestSupport"],
            path: "Tests/OutpostSignaturesTests", swiftSettings: swiftSettings),
        // Reads `swift package dump-package`: what the Outpost product links on Apple platforms.
        .testTarget(
            name: "PackageGraphTests", dependencies: ["OutpostTestSupport"], path: "Tests/PackageGraphTests",
            // The manifest as it was before the crypto seam, which the check must refuse.
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostCompressionTests", dependencies: ["OutpostCompression", "OutpostSubprocess"],
            path: "Tests/OutpostCompressionTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostHTTPTests", dependencies: ["OutpostHTTP", "OutpostCompression", "OutpostCore", "OutpostTestSupport"], path: "Tests/OutpostHTTPTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "ConformanceTests",
            // OutpostTesting: InMemorySyncServer, run through the suite behind an HTTP face;
            // OutpostSyncRules: the rule tables, run against every store.
            dependencies: ["OutpostConformance", "OutpostServer", "OutpostHTTP", "OutpostTestSupport", "OutpostCompression", "Outpost", "OutpostTesting",
                           "OutpostSyncRules", "OutpostMutants"],
            path: "Tests/ConformanceTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "SimulationTests",
            dependencies: ["OutpostSimulation", "Outpost", "OutpostServer", "OutpostCore", "OutpostTestSupport", "OutpostMutants"],
            path: "Tests/SimulationTests", swiftSettings: swiftSettings),
        // `outpost-conformance client` against the SDK's driver, and against mutated
        // drivers (Python relays in drivers/) that it must fail.
        .testTarget(
            name: "ClientConformanceTests", dependencies: ["OutpostConformance", "OutpostTestSupport"],
            path: "Tests/ClientConformanceTests", exclude: ["drivers"], swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostServerTests", dependencies: ["OutpostServer", "OutpostSyncRules", "OutpostHTTP", "OutpostPostgres", "OutpostSignatures", "OutpostTestSupport"],
            path: "Tests/OutpostServerTests",
            // The tus client script the tests run with tuspy (TusTests).
            exclude: ["tus"],
            swiftSettings: swiftSettings),
    ]
)

// The server, the conformance suite, the simulation, the benchmarks, the tests' support and
// the tests that use them need Linux: epoll, eventfd and glibc's posix_spawn extensions
// (OutpostCLinux), and libcrypto (OutpostCCrypto: the crypto seam chooses its primitives
// by platform, `os(Linux)`, never by whether the module can be imported). They are declared only where the manifest
// runs on Linux, so that on a Mac the package is the SDK, the modules under it, the
// `outpost` command and their portable tests, and `swift test` there builds
// (scripts/check-apple.sh). A target added above that depends on one of these belongs here.
let linuxOnly: Set<String> = [
    "OutpostCCrypto", "OutpostCLinux", "OutpostCLibPQ", "OutpostPostgres", "OutpostSubprocess", "OutpostSignatures",
    "OutpostHTTP", "OutpostServer", "outpost-server", "OutpostConformance", "outpost-conformance",
    "OutpostSimulation", "outpost-sim", "outpost-bench", "OutpostTestSupport", "OutpostMutants",
    "OutpostCompressionTests", "OutpostHTTPTests", "ConformanceTests", "SimulationTests", "ClientConformanceTests",
    "OutpostServerTests", "OutpostSignaturesTests", "PackageGraphTests",
]
#if !os(Linux)
package.targets.removeAll { linuxOnly.contains($0.name) }
package.products.removeAll { linuxOnly.contains($0.name) }
// A portable target may use a Linux-only one where it exists (OutpostCryptoTests runs its
// CPU-bound tests off the cooperative pool through OutpostTestSupport on Linux).
for target in package.targets {
    target.dependencies.removeAll { dependency in
        switch dependency {
        case .targetItem(let name, _), .byNameItem(let name, _): return linuxOnly.contains(name)
        default: return false
        }
    }
}
#endif
