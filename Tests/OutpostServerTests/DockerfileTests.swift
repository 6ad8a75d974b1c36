import Foundation
import Testing
import OutpostTestSupport
@testable import OutpostServer

/// `docker/Dockerfile` read as text and held to the code, in the Swift suite, without a
/// container engine. What it reads is only what the file says: that the image really
/// starts, runs as that user, holds no toolchain and passes its health check is
/// scripts/container-test.sh's to check (it builds the image with podman and runs it, after
/// the suite in `make test`).
///
/// The runtime stage's package list is compared with what `ldd` says the `outpost-server`
/// built beside the tests (and a release build, when there is one) loads, each library
/// mapped to its Debian package with `dpkg -S`: a package that nothing needs any more, or a
/// new library whose package is missing, fails here in seconds. The binary in the image is
/// another build (`--static-swift-stdlib`, in the build stage); container-test.sh runs it.
///
/// What it cannot see: a library opened with dlopen(3) at run time (none today), and a
/// package whose name differs in the image's Debian release from this machine's (both are
/// Debian 12 here).
@Suite struct DockerfileTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func read(_ relativePath: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(relativePath), encoding: .utf8)
    }

    // MARK: Reading the Dockerfile

    /// One stage: its base image (ARG defaults substituted), its name, its instructions
    /// (continuation lines joined, comments dropped) and its `# extra: PACKAGE: why` lines.
    struct Stage {
        var base: String
        var name: String?
        var instructions: [String] = []
        var extras: [String: String] = [:]

        /// The instructions with keyword `keyword` (upper case), without the keyword.
        func all(_ keyword: String) -> [String] {
            instructions.compactMap { line in
                let parts = line.split(separator: " ", maxSplits: 1)
                guard parts.first.map(String.init)?.uppercased() == keyword else { return nil }
                return parts.count > 1 ? String(parts[1]) : ""
            }
        }

        /// The packages of every `apt-get install` in the stage's `RUN` instructions.
        var aptPackages: [String] {
            var packages: [String] = []
            for run in all("RUN") {
                let commands = run.replacingOccurrences(of: "&&", with: "\n").replacingOccurrences(of: ";", with: "\n").replacingOccurrences(of: "||", with: "\n")
                for command in commands.split(separator: "\n") {
                    let words = command.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
                    guard let apt = words.firstIndex(where: { $0 == "apt-get" || $0 == "apt" }),
                          let install = words[apt...].firstIndex(of: "install") else { continue }
                    packages += words[(install + 1)...].filter { !$0.hasPrefix("-") }
                }
            }
            return packages
        }
    }

    static func stages(_ text: String) -> [Stage] {
        var args: [String: String] = [:]
        var stages: [Stage] = []
        var logical: [String] = []
        var pending = ""
        var extras: [(Int, String, String)] = []
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#") {
                let comment = line.dropFirst().trimmingCharacters(in: .whitespaces)
                if comment.hasPrefix("extra:") {
                    let rest = comment.dropFirst("extra:".count).split(separator: ":", maxSplits: 1)
                    if let package = rest.first {
                        extras.append((logical.count, package.trimmingCharacters(in: .whitespaces), rest.count > 1 ? rest[1].trimmingCharacters(in: .whitespaces) : ""))
                    }
                }
                continue
            }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
                continue
            }
            let whole = (pending + line).trimmingCharacters(in: .whitespaces)
            pending = ""
            if !whole.isEmpty { logical.append(whole) }
        }
        var extraIndex = 0
        for (index, line) in logical.enumerated() {
            while extraIndex < extras.count, extras[extraIndex].0 <= index, !stages.isEmpty {
                stages[stages.count - 1].extras[extras[extraIndex].1] = extras[extraIndex].2
                extraIndex += 1
            }
            let words = line.split(separator: " ").map(String.init)
            switch words.first?.uppercased() {
            case "ARG" where stages.isEmpty:
                let pair = words[1].split(separator: "=", maxSplits: 1)
                if pair.count == 2 { args[String(pair[0])] = String(pair[1]) }
            case "FROM":
                var base = words[1]
                for (k, v) in args { base = base.replacingOccurrences(of: "${\(k)}", with: v).replacingOccurrences(of: "$\(k)", with: v) }
                let name = words.count >= 4 && words[2].uppercased() == "AS" ? words[3] : nil
                stages.append(Stage(base: base, name: name))
            default:
                if !stages.isEmpty { stages[stages.count - 1].instructions.append(line) }
            }
        }
        while extraIndex < extras.count, !stages.isEmpty {
            stages[stages.count - 1].extras[extras[extraIndex].1] = extras[extraIndex].2
            extraIndex += 1
        }
        return stages
    }

    // MARK: What the binary loads

    /// Runs a tool and returns its standard output (and its status).
    static func tool(_ path: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        try runToCompletion(path, arguments, environment: ["LC_ALL": "C"])
    }

    /// One line of `ldd`: the library's name and where it resolved (nil: not found).
    struct Library: Hashable {
        var name: String
        var path: String?
    }

    static func ldd(_ binary: String) throws -> [Library] {
        let (status, output) = try tool("/usr/bin/ldd", [binary])
        guard status == 0 else { throw ProcessFailure("ldd \(binary) exited \(status): \(output)") }
        var libraries: [Library] = []
        for line in output.split(separator: "\n") {
            let text = line.trimmingCharacters(in: .whitespaces)
            if let arrow = text.range(of: " => ") {
                let name = String(text[..<arrow.lowerBound])
                let target = text[arrow.upperBound...]
                if target.hasPrefix("not found") {
                    libraries.append(Library(name: name, path: nil))
                } else if let path = target.split(separator: " ").first, path.hasPrefix("/") {
                    libraries.append(Library(name: name, path: String(path)))
                }
            } else if text.hasPrefix("/"), let path = text.split(separator: " ").first {
                libraries.append(Library(name: (String(path) as NSString).lastPathComponent, path: String(path)))
            }
            // linux-vdso.so.1 has no file: the kernel provides it.
        }
        return libraries
    }

    /// True for the Swift runtime and Foundation: a debug build loads them from the
    /// toolchain, the image's `--static-swift-stdlib` build has them inside the binary.
    static func isSwiftRuntime(_ library: Library, toolchainDirectory: String?) -> Bool {
        if let toolchainDirectory, let path = library.path, path.hasPrefix(toolchainDirectory + "/") { return true }
        let prefixes = ["libswift", "libFoundation", "lib_Foundation", "libCoreFoundation", "lib_CF", "libdispatch", "libBlocksRuntime", "libXCTest", "libTesting", "lib_Testing"]
        return prefixes.contains { library.name.hasPrefix($0) }
    }

    /// Packages every Debian image has (priority required): glibc and libgcc.
    static let basePackages: Set<String> = ["libc6", "libgcc-s1"]

    /// The Debian package that owns `path`, trying the path as `ldd` printed it, resolved,
    /// and with and without `/usr` (Debian 12 merged `/lib` into `/usr/lib`, while dpkg
    /// remembers the path each package shipped).
    static func debianPackage(of path: String) throws -> String? {
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        var candidates: [String] = []
        for p in [path, resolved] {
            candidates.append(p)
            candidates.append(p.hasPrefix("/usr/") ? String(p.dropFirst(4)) : "/usr" + p)
        }
        for candidate in candidates {
            let (status, output) = try tool("/usr/bin/dpkg", ["-S", candidate])
            guard status == 0 else { continue }
            for line in output.split(separator: "\n") {
                guard let colon = line.range(of: ": /") else { continue }
                let owners = line[..<colon.lowerBound].split(separator: ",")
                guard let first = owners.first else { continue }
                return first.split(separator: ":").first.map { $0.trimmingCharacters(in: .whitespaces) }
            }
        }
        return nil
    }

    /// `packages` and every package they depend on, as installed here (`Depends` and
    /// `Pre-Depends`, the first of each set of alternatives): what `apt-get install`
    /// brings into the image with them.
    static func dependencyClosure(of packages: Set<String>) throws -> Set<String> {
        var closure = packages
        var frontier = Array(packages)
        while !frontier.isEmpty {
            let (_, output) = try tool("/usr/bin/dpkg-query", ["-W", "-f=${Package}\t${Depends}, ${Pre-Depends}\n"] + frontier)
            frontier = []
            for line in output.split(separator: "\n") {
                let fields = line.split(separator: "\t", maxSplits: 1)
                guard fields.count == 2 else { continue }
                for dependency in fields[1].split(separator: ",") {
                    let first = dependency.split(separator: "|").first ?? ""
                    guard let name = first.split(separator: " ").first?.split(separator: ":").first.map(String.init), !name.isEmpty else { continue }
                    if closure.insert(name).inserted { frontier.append(name) }
                }
            }
        }
        return closure
    }

    /// The binaries to compare: the one next to the tests, and a release build when there
    /// is one (`OUTPOST_RELEASE_BINARY`, else `.build/release/outpost-server`).
    static var binaries: [String] {
        var out = [BuildProducts.executable("outpost-server")]
        let release = ProcessInfo.processInfo.environment["OUTPOST_RELEASE_BINARY"]
            ?? root.appendingPathComponent(".build/release/outpost-server").path
        if FileManager.default.isExecutableFile(atPath: release) { out.append(release) }
        return out.filter { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static var hasTools: Bool {
        ["/usr/bin/ldd", "/usr/bin/dpkg", "/usr/bin/dpkg-query"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    }

    // MARK: Tests

    @Test(.enabled(if: DockerfileTests.hasTools, "needs ldd and dpkg (Debian)"))
    func theRuntimeStageInstallsExactlyThePackagesOfTheLibrariesTheBinaryLoads() async throws {
        let stages = Self.stages(try Self.read("docker/Dockerfile"))
        let runtime = try #require(stages.last)
        #expect(runtime.name == "runtime")
        let listed = Set(runtime.aptPackages)
        #expect(!listed.isEmpty, "the runtime stage installs no packages")
        let binaries = Self.binaries
        #expect(!binaries.isEmpty, "no outpost-server binary next to the tests")
        // ldd and dpkg block: off the concurrency pool. Problems come back as text and are
        // recorded here, in the test's own task.
        let (needed, problems): ([String: Set<String>], [String]) = try await blocking {
            var needed: [String: Set<String>] = [:]
            var problems: [String] = []
            for binary in binaries {
                let libraries = try Self.ldd(binary)
                if !libraries.contains(where: { $0.name.hasPrefix("libc.so") }) { problems.append("ldd \(binary) listed no libc: \(libraries)") }
                let toolchain = libraries.first { $0.name == "libswiftCore.so" }?.path.map { ($0 as NSString).deletingLastPathComponent }
                for library in libraries where !Self.isSwiftRuntime(library, toolchainDirectory: toolchain) {
                    guard let path = library.path else {
                        problems.append("ldd \(binary): \(library.name) not found")
                        continue
                    }
                    guard let package = try Self.debianPackage(of: path) else {
                        problems.append("\(path) (loaded by \(binary)) belongs to no Debian package: the image cannot install it")
                        continue
                    }
                    needed[package, default: []].insert(library.name)
                }
            }
            return (needed, problems)
        }
        for problem in problems { Issue.record(Comment(rawValue: problem)) }
        // A library is provided when its package is listed, or comes with a listed one:
        // ldd lists libraries of libraries too, and apt installs dependencies itself.
        let provided = try await blocking { try Self.dependencyClosure(of: listed) }
        for (package, libraries) in needed.sorted(by: { $0.key < $1.key }) where !Self.basePackages.contains(package) {
            #expect(provided.contains(package), "outpost-server loads \(libraries.sorted().joined(separator: ", ")) from Debian package \(package), which the runtime stage of docker/Dockerfile does not install (nor any package it installs depends on it)")
        }
        for package in listed.sorted() where needed[package] == nil {
            #expect(runtime.extras[package] != nil, "docker/Dockerfile installs \(package) in the runtime image, but outpost-server loads no library of it; remove it, or explain it on a line \"# extra: \(package): why\"")
        }
        for (package, why) in runtime.extras {
            #expect(!why.isEmpty, "the extra package \(package) needs a reason")
            #expect(listed.contains(package), "\"# extra: \(package)\" names a package the stage does not install")
        }
        // Sanity: the mapping found what this server is known to load.
        for package in ["libsqlite3-0", "libssl3", "zlib1g"] { #expect(needed[package] != nil, "ldd did not report \(package)'s library") }
    }

    @Test func theBuildStageMatchesThePackageAndTheToolchain() throws {
        let stages = Self.stages(try Self.read("docker/Dockerfile"))
        let build = try #require(stages.first)
        #expect(build.name == "build")
        // Every apt provider of a system library target, so `swift build` finds the headers.
        let manifest = try Self.read("Package.swift")
        var providers: [String] = []
        var rest = Substring(manifest)
        while let start = rest.range(of: ".apt([") {
            let end = rest[start.upperBound...].firstIndex(of: "]")!
            providers += rest[start.upperBound..<end].split(separator: ",").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " \"")) }
            rest = rest[end...]
        }
        #expect(providers.count >= 3)
        for package in providers { #expect(build.aptPackages.contains(package), "the build stage does not install \(package), a provider in Package.swift") }
        let runs = build.all("RUN").joined(separator: "\n")
        #expect(runs.contains("swift build -c release --product outpost-server --static-swift-stdlib"))
        // The image is built with the toolchain the repository is developed with, on the
        // runtime stage's Debian release.
        #if compiler(>=6.4)
        let expected = "swift:6.4-bookworm"
        #elseif compiler(>=6.3)
        let expected = "swift:6.3-bookworm"
        #else
        let expected = "swift:6.2-bookworm"
        #endif
        #expect(build.base == expected, "the build stage uses \(build.base); this toolchain matches \(expected)")
        #expect(stages.last?.base == "debian:bookworm-slim")
    }

    @Test func theRuntimeStageNamesAnUnprivilegedUserItsVolumePortAndHealthcheck() throws {
        let runtime = try #require(Self.stages(try Self.read("docker/Dockerfile")).last)
        let user = try #require(runtime.all("USER").last)
        #expect(!["root", "0", "0:0"].contains(user) && !user.hasPrefix("0:"), "the Dockerfile's USER is \(user)")
        #expect(runtime.all("VOLUME").contains("/data"))
        #expect(runtime.all("EXPOSE").contains("8080"))
        let env = runtime.all("ENV").joined(separator: " ")
        for setting in ["OUTPOST_HOST=0.0.0.0", "OUTPOST_PORT=8080", "OUTPOST_DATA=/data"] { #expect(env.contains(setting)) }
        let healthcheck = try #require(runtime.all("HEALTHCHECK").last)
        #expect(healthcheck.contains(#"["outpost-server", "healthcheck""#), "HEALTHCHECK: \(healthcheck)")
        #expect(runtime.all("ENTRYPOINT") == [#"["outpost-server"]"#])
        #expect(runtime.all("CMD") == [#"["serve"]"#])
        #expect(HealthCheckCommand.defaultURL(environment: ["OUTPOST_HOST": "0.0.0.0", "OUTPOST_PORT": "8080"]) == "http://127.0.0.1:8080/readyz")
        let ignored = try Self.read(".dockerignore").split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        for path in [".build", ".git"] { #expect(ignored.contains(path), ".dockerignore should leave out \(path)") }
    }

    @Test func theDockerfileReaderFindsPackagesAndExtras() {
        let text = """
            ARG BASE=debian:bookworm-slim
            FROM swift:6.3-bookworm AS build
            RUN apt-get update && apt-get install -y libfoo-dev
            FROM ${BASE} AS runtime
            # extra: ca-certificates: TLS roots for outgoing webhooks
            RUN apt-get -q update \\
             && apt-get -q install -y --no-install-recommends libfoo1 \\
                  ca-certificates \\
             && rm -rf /var/lib/apt/lists/*
            USER 10001
            """
        let stages = Self.stages(text)
        #expect(stages.map(\.name) == ["build", "runtime"])
        #expect(stages[1].base == "debian:bookworm-slim")
        #expect(stages[0].aptPackages == ["libfoo-dev"])
        #expect(stages[1].aptPackages == ["libfoo1", "ca-certificates"])
        #expect(stages[1].extras == ["ca-certificates": "TLS roots for outgoing webhooks"])
        #expect(stages[1].all("USER") == ["10001"])
    }
}
