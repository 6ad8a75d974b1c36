import Foundation
import OutpostTestSupport
import Testing

/// What the `Outpost` product links on iOS and macOS, read from the manifest itself
/// (`swift package dump-package`): following every target dependency whose condition lets
/// it onto the platform, the product may reach no system library but sqlite3 and zlib,
/// which every Apple SDK ships, and none of the server's rules (`OutpostSyncRules`, which
/// only `OutpostTesting` brings to an app's tests and previews). libcrypto, libpq and the Linux headers of OutpostCLinux do
/// not exist there, and an app that reached them would not build.
@Suite struct PackageGraphTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The libraries an Apple SDK has for an app to link.
    static let appleLibraries: Set<String> = ["sqlite3", "z"]

    @Test func theSDKReachesOnlySQLiteAndZlibOnApplePlatforms() async throws {
        let graph = try await PackageGraph.dump(packageAt: Self.root.path)
        for platform in ["ios", "macos"] {
            let reached = try graph.systemLibraries(reachedBy: "Outpost", on: platform, links: Self.currentLinks)
            #expect(Self.refused(reached).isEmpty, "on \(platform): \(Self.refused(reached).map(\.description).joined(separator: "; "))")
            #expect(Set(reached.map(\.target)) == ["OutpostCSQLite", "OutpostCZlib"], "on \(platform)")
            // And no other library an app can pick reaches more.
            for product in graph.libraryProducts where product != "Outpost" {
                let refused = Self.refused(try graph.systemLibraries(reachedBy: product, on: platform, links: Self.currentLinks))
                #expect(refused.isEmpty, "\(product) on \(platform): \(refused)")
            }
        }
        #expect(graph.libraryProducts == ["Outpost", "OutpostCore", "OutpostTesting"])
        // The walk honours conditions: on Linux the same product does reach libcrypto.
        let linux = try graph.systemLibraries(reachedBy: "Outpost", on: "linux", links: Self.currentLinks)
        #expect(linux.contains { $0.links.contains("crypto") }, "\(linux)")
    }

    /// No two targets or products have names that differ only in case: on a case-insensitive
    /// volume (a Mac's default) `Outpost` and `outpost` share `.build` folders, modules and
    /// Xcode schemes, and `swift build` fails there. The manifest of issue 31, with the
    /// library `Outpost` and the executable `outpost`, is refused.
    @Test func noTwoNamesDifferOnlyInCase() async throws {
        let graph = try await PackageGraph.dump(packageAt: Self.root.path)
        #expect(graph.namesDifferingOnlyInCase.isEmpty, "\(graph.namesDifferingOnlyInCase)")
        try await withTemporaryDirectory(prefix: "outpost-graph") { dir in
            try FileManager.default.copyItem(
                at: Self.root.appendingPathComponent("Tests/PackageGraphTests/Fixtures/Package-before-issue31.swift"),
                to: dir.url.appendingPathComponent("Package.swift"))
            let before = try await PackageGraph.dump(packageAt: dir.path)
            #expect(before.namesDifferingOnlyInCase.contains(["Outpost", "outpost"]), "\(before.namesDifferingOnlyInCase)")
        }
    }

    /// The rules language is the server's: no library an app can pick reaches it, on any
    /// platform, and the server does.
    @Test func theSDKDoesNotLinkTheRulesLanguage() async throws {
        let graph = try await PackageGraph.dump(packageAt: Self.root.path)
        for platform in ["ios", "macos", "linux"] {
            for product in graph.libraryProducts {
                let reached = try graph.targets(reachedBy: product, on: platform).map(\.target.name)
                #expect(!reached.contains("OutpostRules"), "\(product) on \(platform) reaches OutpostRules")
            }
        }
        #expect(try graph.targets(reachedBy: "outpost-server", on: "linux").contains { $0.target.name == "OutpostRules" })
    }

    /// The protocol's push and pull rules are the server's (`OutpostSyncRules`): the
    /// `Outpost` product an app links reaches neither them nor `OutpostTesting` (the
    /// in-memory server that runs them), on any platform, and neither does `OutpostCore`.
    /// `OutpostTesting` reaches the SDK and the rules, and the server reaches the rules.
    @Test func theSDKCarriesNoServerRule() async throws {
        let graph = try await PackageGraph.dump(packageAt: Self.root.path)
        for platform in ["ios", "macos", "linux"] {
            for product in ["Outpost", "OutpostCore"] {
                let reached = try Self.serverParts(reachedBy: product, in: graph, on: platform)
                #expect(reached.isEmpty, "\(product) on \(platform) reaches \(reached.map { $0.joined(separator: " -> ") })")
            }
            let testing = Set(try graph.targets(reachedBy: "OutpostTesting", on: platform).map(\.target.name))
            #expect(testing.isSuperset(of: ["OutpostTesting", "Outpost", "OutpostSyncRules"]), "OutpostTesting on \(platform) reaches \(testing.sorted())")
        }
        #expect(try graph.targets(reachedBy: "outpost-server", on: "linux").contains { $0.target.name == "OutpostSyncRules" })

        // The walk sees a dependency that would bring the rules in, however deep.
        var broken = graph
        broken.targets["OutpostCompression"]!.dependencies.append(.init(name: "OutpostSyncRules", platforms: ["ios"], isProduct: false))
        #expect(try Self.serverParts(reachedBy: "Outpost", in: broken, on: "ios") == [["Outpost", "OutpostCompression", "OutpostSyncRules"]])
        #expect(try Self.serverParts(reachedBy: "Outpost", in: broken, on: "macos").isEmpty)
    }

    /// The paths by which `product` reaches `OutpostSyncRules` or `OutpostTesting` on `platform`.
    static func serverParts(reachedBy product: String, in graph: PackageGraph, on platform: String) throws -> [[String]] {
        try graph.targets(reachedBy: product, on: platform).filter { ["OutpostSyncRules", "OutpostTesting"].contains($0.target.name) }.map(\.path)
    }

    /// The manifest as it was before the SDK's crypto had a seam (kept as a fixture): the
    /// check refuses it, naming libcrypto on both platforms.
    @Test func theManifestBeforeTheSeamFailsTheCheck() async throws {
        try await withTemporaryDirectory(prefix: "outpost-graph") { dir in
            try FileManager.default.copyItem(
                at: Self.root.appendingPathComponent("Tests/PackageGraphTests/Fixtures/Package-before-issue31.swift"),
                to: dir.url.appendingPathComponent("Package.swift"))
            let graph = try await PackageGraph.dump(packageAt: dir.path)
            // Its C modules had the names without the prefix; their module maps are today's.
            let links: (PackageGraph.Target) throws -> Set<String> = { target in
                try Self.links(ofModuleMapAt: Self.root.appendingPathComponent("Sources/Outpost\(target.name)/module.modulemap"))
            }
            for platform in ["ios", "macos"] {
                let refused = Self.refused(try graph.systemLibraries(reachedBy: "Outpost", on: platform, links: links))
                #expect(refused.map(\.target) == ["CCrypto"], "on \(platform): \(refused)")
                #expect(refused.first?.path == ["Outpost", "OutpostCrypto", "CCrypto"])
                // Its test-support and conformance products reached the Linux headers.
                for product in ["OutpostTestSupport", "OutpostConformance"] {
                    let linux = Self.refused(try graph.systemLibraries(reachedBy: product, on: platform, links: links))
                    #expect(linux.contains { $0.target == "CLinux" }, "\(product) on \(platform): \(linux)")
                }
            }
        }
    }

    /// The reached system libraries an Apple SDK lacks: any that links something else, or
    /// nothing (a module of the host's own headers, such as OutpostCLinux).
    static func refused(_ reached: [PackageGraph.Reached]) -> [PackageGraph.Reached] {
        reached.filter { !$0.links.isSubset(of: appleLibraries) || $0.links.isEmpty }
    }

    static func currentLinks(_ target: PackageGraph.Target) throws -> Set<String> {
        try links(ofModuleMapAt: root.appendingPathComponent(target.path).appendingPathComponent("module.modulemap"))
    }

    /// The libraries a module map's `link "name"` declarations name (frameworks are not
    /// libraries an SDK may lack).
    static func links(ofModuleMapAt url: URL) throws -> Set<String> {
        let text = try String(contentsOf: url, encoding: .utf8)
        var names: Set<String> = []
        for line in text.split(separator: "\n") {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count == 2, words[0] == "link", words[1].hasPrefix("\""), words[1].hasSuffix("\"") else { continue }
            names.insert(String(words[1].dropFirst().dropLast()))
        }
        return names
    }
}

/// The targets and products of `swift package dump-package`'s JSON, and the walk over them.
struct PackageGraph {
    struct Dependency {
        var name: String
        /// The platforms the dependency is limited to; nil: every platform.
        var platforms: Set<String>?
        /// A product of another package (this package has none; one would be refused).
        var isProduct: Bool
    }

    struct Target {
        var name: String
        var type: String
        var path: String
        var dependencies: [Dependency]
        /// `linkerSettings` `.linkedLibrary` names, with their platform conditions.
        var linkedLibraries: [(name: String, platforms: Set<String>?)]
    }

    /// A system library the product reaches: the target, the chain of targets that reaches
    /// it from the product, and what it links.
    struct Reached: CustomStringConvertible {
        var target: String
        var path: [String]
        var links: Set<String>
        var description: String {
            "\(path.joined(separator: " -> ")) links \(links.isEmpty ? "nothing (headers of the host's system)" : links.sorted().joined(separator: ", "))"
        }
    }

    var targets: [String: Target]
    var products: [String: [String]]
    /// The names of the library products, sorted.
    var libraryProducts: [String]

    /// Runs `swift package dump-package` on the package at `directory`, with a scratch
    /// directory of its own so that it never waits for the build directory's lock.
    static func dump(packageAt directory: String) async throws -> PackageGraph {
        try await withTemporaryDirectory(prefix: "outpost-dump") { scratch in
            let result = try await blocking {
                try Subprocess.run("swift", ["package", "--package-path", directory, "--scratch-path", scratch.path, "dump-package"])
            }
            guard result.status == 0 else { throw ProcessFailure("swift package dump-package failed (\(result.status)): \(result.error)") }
            return try PackageGraph(json: Data(result.outputBytes))
        }
    }

    /// Names (of targets, and of products) that differ only in case, each group sorted.
    var namesDifferingOnlyInCase: Set<[String]> {
        var out: Set<[String]> = []
        for names in [Array(targets.keys), Array(products.keys)] {
            for (_, group) in Dictionary(grouping: names, by: { $0.lowercased() }) where Set(group).count > 1 { out.insert(Set(group).sorted()) }
        }
        return out
    }

    init(json: Data) throws {
        guard let root = try JSONSerialization.jsonObject(with: json) as? [String: Any],
              let targetList = root["targets"] as? [[String: Any]], let productList = root["products"] as? [[String: Any]] else {
            throw ProcessFailure("dump-package printed no targets and products")
        }
        func platforms(_ condition: Any?) -> Set<String>? {
            guard let condition = condition as? [String: Any], let names = condition["platformNames"] as? [String], !names.isEmpty else { return nil }
            return Set(names)
        }
        var targets: [String: Target] = [:]
        for entry in targetList {
            guard let name = entry["name"] as? String, let type = entry["type"] as? String else { throw ProcessFailure("a target without a name or type") }
            var dependencies: [Dependency] = []
            for dependency in entry["dependencies"] as? [[String: Any]] ?? [] {
                for (kind, value) in dependency {
                    guard let fields = value as? [Any], let first = fields.first as? String else { throw ProcessFailure("dependency \(dependency) of \(name)") }
                    switch kind {
                    case "byName", "target": dependencies.append(Dependency(name: first, platforms: platforms(fields.count > 1 ? fields[1] : nil), isProduct: false))
                    case "product": dependencies.append(Dependency(name: first, platforms: platforms(fields.last), isProduct: true))
                    default: throw ProcessFailure("a dependency of kind \(kind) in \(name)")
                    }
                }
            }
            var libraries: [(String, Set<String>?)] = []
            for setting in entry["settings"] as? [[String: Any]] ?? [] {
                guard let kind = setting["kind"] as? [String: Any], let library = kind["linkedLibrary"] as? [String: Any],
                      let libraryName = library["_0"] as? String else { continue }
                libraries.append((libraryName, platforms(setting["condition"])))
            }
            targets[name] = Target(name: name, type: type, path: entry["path"] as? String ?? "Sources/\(name)",
                                   dependencies: dependencies, linkedLibraries: libraries)
        }
        var products: [String: [String]] = [:]
        var libraries: [String] = []
        for entry in productList {
            guard let name = entry["name"] as? String, let names = entry["targets"] as? [String] else { continue }
            products[name] = names
            if let type = entry["type"] as? [String: Any], type["library"] != nil { libraries.append(name) }
        }
        self.targets = targets
        self.products = products
        libraryProducts = libraries.sorted()
    }

    /// Every system library `product` reaches on `platform` (a name of
    /// `condition.platformNames`), through target dependencies whose condition admits the
    /// platform, and every library a reached target links by `linkedLibrary`. `links`
    /// tells what a system library target links (its module map).
    func systemLibraries(reachedBy product: String, on platform: String, links: (Target) throws -> Set<String>) throws -> [Reached] {
        var reached: [Reached] = []
        for (target, path) in try targets(reachedBy: product, on: platform) {
            if target.type == "system" {
                reached.append(Reached(target: target.name, path: path, links: try links(target)))
            }
            for library in target.linkedLibraries where library.platforms?.contains(platform) ?? true {
                reached.append(Reached(target: target.name, path: path, links: [library.name]))
            }
        }
        return reached.sorted { $0.target < $1.target }
    }

    /// Every target `product` reaches on `platform`, each with the path it was first
    /// reached by, through target dependencies whose condition admits the platform.
    func targets(reachedBy product: String, on platform: String) throws -> [(target: Target, path: [String])] {
        guard let roots = products[product] else { throw ProcessFailure("no product \(product)") }
        var reached: [(target: Target, path: [String])] = []
        var seen: Set<String> = []
        var queue: [(String, [String])] = roots.map { ($0, product == $0 ? [$0] : [product, $0]) }
        while !queue.isEmpty {
            let (name, path) = queue.removeFirst()
            guard seen.insert(name).inserted else { continue }
            guard let target = targets[name] else { throw ProcessFailure("\(path.joined(separator: " -> ")): no such target") }
            reached.append((target, path))
            for dependency in target.dependencies where dependency.platforms?.contains(platform) ?? true {
                guard !dependency.isProduct else { throw ProcessFailure("\(path.joined(separator: " -> ")) uses product \(dependency.name) of another package") }
                queue.append((dependency.name, path + [dependency.name]))
            }
        }
        return reached
    }
}
