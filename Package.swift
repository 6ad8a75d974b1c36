// swift-tools-version:6.0
// Outpost: a self-hosted sync server and a Swift client SDK for offline-first apps.
//
// Layers (arrows point one way; see docs/architecture.md):
//   C system libraries  <- OutpostSQLite, OutpostPostgres, OutpostCrypto, OutpostCompression
//   OutpostCore (wire types, no I/O) <- everything
//   OutpostHTTP (engine, knows bytes and HTTP only) <- OutpostServer <- outpost-server
//   Outpost (client SDK) <- outpost (CLI); never depends on the server.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
]

let package = Package(
    name: "Outpost",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .library(name: "OutpostCore", targets: ["OutpostCore"]),
        .library(name: "OutpostTestSupport", targets: ["OutpostTestSupport"]),
        .library(name: "OutpostConformance", targets: ["OutpostConformance"]),
        .library(name: "Outpost", targets: ["Outpost"]),
        .executable(name: "outpost-server", targets: ["outpost-server"]),
        .executable(name: "outpost-bench", targets: ["outpost-bench"]),
        .executable(name: "outpost-conformance", targets: ["outpost-conformance"]),
        .executable(name: "outpost", targets: ["outpost"]),
        .executable(name: "outpost-sim", targets: ["outpost-sim"]),
    ],
    targets: [
        // MARK: C at the edge
        .systemLibrary(
            name: "CSQLite", path: "Sources/CSQLite",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        .systemLibrary(
            name: "CCrypto", path: "Sources/CCrypto",
            providers: [.apt(["libssl-dev"]), .brew(["openssl"])]),
        .systemLibrary(
            name: "CZlib", path: "Sources/CZlib",
            providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(
            name: "CLibPQ", path: "Sources/CLibPQ",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]),
        // epoll, eventfd, sendfile, accept4: Linux calls the Glibc module does not import.
        .systemLibrary(name: "CLinux", path: "Sources/CLinux"),

        // MARK: Shared building blocks
        .target(name: "OutpostCore", path: "Sources/OutpostCore", swiftSettings: swiftSettings),
        .target(
            name: "OutpostSQLite", dependencies: ["CSQLite"], path: "Sources/OutpostSQLite",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostCrypto", dependencies: ["CCrypto"], path: "Sources/OutpostCrypto",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostPostgres", dependencies: ["CLibPQ"], path: "Sources/OutpostPostgres",
            swiftSettings: swiftSettings),
        // Child processes through posix_spawn (tests, benchmarks, conformance hooks).
        .target(
            name: "OutpostSubprocess", dependencies: ["CLinux"], path: "Sources/OutpostSubprocess",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostCompression", dependencies: ["CZlib"], path: "Sources/OutpostCompression",
            swiftSettings: swiftSettings),

        // MARK: Server
        .target(
            name: "OutpostHTTP", dependencies: ["OutpostCompression", "CLinux"], path: "Server/OutpostHTTP",
            swiftSettings: swiftSettings),
        .target(
            name: "OutpostServer",
            dependencies: ["OutpostCore", "OutpostHTTP", "OutpostSQLite", "OutpostPostgres", "OutpostCrypto", "CLinux"],
            path: "Server/OutpostServer", swiftSettings: swiftSettings),
        .executableTarget(
            name: "outpost-server", dependencies: ["OutpostServer"], path: "Server/outpost-server",
            swiftSettings: swiftSettings),

        // MARK: Client (never depends on Server/)
        .target(
            name: "Outpost",
            dependencies: ["OutpostCore", "OutpostSQLite", "OutpostCrypto", "OutpostCompression"],
            path: "Client/Outpost",
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "outpost", dependencies: ["Outpost"], path: "Client/outpost", swiftSettings: swiftSettings),

        // MARK: Conformance suite (checks any server over HTTP: never depends on Server/)
        .target(
            name: "OutpostConformance", dependencies: ["OutpostCore", "OutpostCrypto", "OutpostSubprocess"], path: "Sources/OutpostConformance",
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
            dependencies: ["OutpostCore", "OutpostServer", "OutpostHTTP", "OutpostSQLite", "OutpostCrypto", "CLinux", "Outpost", "OutpostSubprocess"],
            path: "Benchmarks/outpost-bench", swiftSettings: swiftSettings),

        // MARK: Tests
        .target(
            name: "OutpostTestSupport", dependencies: ["OutpostSubprocess"], path: "Tests/OutpostTestSupport",
            swiftSettings: swiftSettings),
        // Deliberate bugs for the mutation tests, as decorators of a real server's parts;
        // only test targets link it.
        .target(
            name: "OutpostMutants", dependencies: ["OutpostServer", "OutpostHTTP", "OutpostCore", "OutpostCrypto"], path: "Tests/OutpostMutants",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostCoreTests", dependencies: ["OutpostCore"], path: "Tests/OutpostCoreTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostTests", dependencies: ["Outpost", "OutpostTestSupport", "OutpostCompression", "OutpostCrypto", "OutpostSQLite"], path: "Tests/OutpostTests",
            // Store files made by earlier releases, opened by the migration tests.
            exclude: ["Fixtures"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostSQLiteTests", dependencies: ["OutpostSQLite"], path: "Tests/OutpostSQLiteTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostCryptoTests", dependencies: ["OutpostCrypto", "OutpostCore", "OutpostTestSupport"], path: "Tests/OutpostCryptoTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostCompressionTests", dependencies: ["OutpostCompression", "OutpostSubprocess"],
            path: "Tests/OutpostCompressionTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostHTTPTests", dependencies: ["OutpostHTTP", "OutpostCompression", "OutpostCore", "OutpostTestSupport"], path: "Tests/OutpostHTTPTests",
            swiftSettings: swiftSettings),
        .testTarget(
            name: "ConformanceTests",
            // Outpost: the SDK's InMemorySyncServer, run through the suite behind an HTTP face.
            dependencies: ["OutpostConformance", "OutpostServer", "OutpostHTTP", "OutpostTestSupport", "OutpostCompression", "Outpost", "OutpostMutants"],
            path: "Tests/ConformanceTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "SimulationTests",
            dependencies: ["OutpostSimulation", "Outpost", "OutpostServer", "OutpostCore", "OutpostTestSupport", "OutpostMutants"],
            path: "Tests/SimulationTests", swiftSettings: swiftSettings),
        .testTarget(
            name: "OutpostServerTests", dependencies: ["OutpostServer", "OutpostHTTP", "OutpostPostgres", "OutpostTestSupport"], path: "Tests/OutpostServerTests",
            // The tus client script the tests run with tuspy (TusTests).
            exclude: ["tus"],
            swiftSettings: swiftSettings),
    ]
)
