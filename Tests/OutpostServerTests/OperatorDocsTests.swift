import Foundation
import Testing
import OutpostCore
@testable import OutpostServer

/// The operator documentation held to the code: every setting in docs/deploying.md's table
/// with its flag and default, every metric and command in docs/operating.md, every route
/// of openapi/outpost.yaml in docs/protocol.md, and no `OUTPOST_*` variable anywhere that
/// the server does not read.
@Suite struct OperatorDocsTests {
    static func read(_ relativePath: String) throws -> String {
        try DockerfileTests.read(relativePath)
    }

    /// The variables the server reads that are no setting of `Settings.options` (no flag).
    static let environmentOnly = ["OUTPOST_JWT_SECRET", "OUTPOST_JWT_PREVIOUS_SECRETS", "OUTPOST_WEBHOOK_SECRET", "OUTPOST_LOG_FILE"]

    /// Every environment variable the server reads.
    static var knownVariables: Set<String> {
        Set(Settings.options.map(\.env)).union(environmentOnly)
    }

    /// The default a setting's help text states (`(default 8080; …)` → `8080`), if it states one.
    static func documentedDefault(_ help: String) -> String? {
        guard let range = help.range(of: "(default ") else { return nil }
        let rest = help[range.upperBound...]
        let value = rest.prefix { ![";", ",", ")", ":", " "].contains($0) }
        return value.isEmpty ? nil : String(value)
    }

    /// Every `OUTPOST_…` name in `text`.
    static func variables(in text: String) -> Set<String> {
        var out: Set<String> = []
        var rest = Substring(text)
        while let start = rest.range(of: "OUTPOST_") {
            let name = rest[start.lowerBound...].prefix { $0.isUppercase || $0.isNumber || $0 == "_" }
            if name.count > "OUTPOST_".count { out.insert(String(name)) }
            rest = rest[start.upperBound...]
        }
        return out
    }

    @Test func deployingListsEverySettingWithItsFlagAndDefault() throws {
        let text = try Self.read("docs/deploying.md")
        let rows = text.split(separator: "\n").filter { $0.hasPrefix("| `OUTPOST_") }
        for option in Settings.options {
            let row = rows.first { $0.hasPrefix("| `\(option.env)` |") }
            #expect(row != nil, "docs/deploying.md has no table row for \(option.env)")
            guard let row else { continue }
            #expect(row.contains("`\(option.flag)`"), "the row of \(option.env) does not name \(option.flag)")
            if let value = Self.documentedDefault(option.help) {
                #expect(row.contains("`\(value)`"), "the row of \(option.env) does not give its default \(value)")
            }
        }
        for name in Self.environmentOnly {
            #expect(rows.contains { $0.hasPrefix("| `\(name)` |") }, "docs/deploying.md has no table row for \(name)")
        }
        #expect(rows.count == Settings.options.count + Self.environmentOnly.count, "the settings table has rows for variables the server does not read")
        #expect(Self.documentedDefault("TCP port (default 8080; 0 picks a free one)") == "8080")
        #expect(Self.documentedDefault("full (default: an applied change survives)") == nil)
    }

    /// The build packages, from their one list in scripts/install-deps.sh.
    static func buildPackages() throws -> [String] {
        let script = try read("scripts/install-deps.sh")
        let line = try #require(script.split(separator: "\n").first { $0.hasPrefix("packages=(") })
        return line.dropFirst("packages=(".count).prefix { $0 != ")" }.split(separator: " ").map(String.init)
    }

    /// Every place that names the build packages names exactly the script's list: the
    /// deploying guide, the README, and the image's build stage.
    @Test func theBuildPackagesAreOneListNamedAlikeEverywhere() throws {
        let packages = try Self.buildPackages()
        #expect(packages.count >= 4 && packages.contains("libpq-dev"), "\(packages)")
        let expected = packages.joined(separator: " ")
        for file in ["docs/deploying.md", "README.md"] {
            // Markdown wraps lines: compare the text with every run of whitespace as one space.
            let text = try Self.read(file).split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
            #expect(text.contains(expected), "\(file) does not name the build packages \(expected)")
            for name in text.split(separator: " ").map({ $0.trimmingCharacters(in: CharacterSet(charactersIn: "`(),;.")) }) where name.hasSuffix("-dev") {
                #expect(packages.contains(name), "\(file) names the build package \(name), which scripts/install-deps.sh does not install")
            }
        }
        let dockerfile = try Self.read("docker/Dockerfile")
        #expect(dockerfile.contains("install -y --no-install-recommends \(expected) "), "docker/Dockerfile's build stage does not install \(expected)")
    }

    @Test func noDocumentOrImageNamesAVariableTheServerDoesNotRead() throws {
        for file in ["docs/deploying.md", "docs/operating.md", "docker/Dockerfile", "docker/compose.yaml", "README.md"] {
            let unknown = Self.variables(in: try Self.read(file)).subtracting(Self.knownVariables)
            #expect(unknown.isEmpty, "\(file) names variables outpost-server does not read: \(unknown.sorted())")
        }
    }

    @Test func operatingListsEveryMetricAndEveryCommand() async throws {
        let text = try Self.read("docs/operating.md")
        try await withServer { server in
            let names = server.app.metrics.render().split(separator: "\n").compactMap { line -> String? in
                guard line.hasPrefix("# TYPE ") else { return nil }
                return line.split(separator: " ").dropFirst(2).first.map(String.init)
            }
            #expect(names.count >= 15)
            for name in names { #expect(text.contains("| `\(name)` |"), "docs/operating.md does not describe the metric \(name)") }
        }
        for command in ["serve", "token", "backup", "restore", "check", "rotate-epoch", "healthcheck"] {
            #expect(text.contains("`outpost-server \(command)"), "docs/operating.md does not describe outpost-server \(command)")
            #expect(ServerApp.usage.contains("  \(command) "), "the usage text does not list \(command)")
        }
    }

    @Test func protocolDocumentNamesEveryRouteOfTheOpenAPIDescription() throws {
        let text = try Self.read("docs/protocol.md")
        let lines = text.split(separator: "\n").map(String.init)
        let operations = OpenAPITests.operations(try OpenAPITests.specText)
        #expect(operations.count >= 10)
        for operation in operations {
            let parts = operation.split(separator: " ", maxSplits: 1).map(String.init)
            let (method, path) = (parts[0], parts[1])
            // The path must appear whole (not as the start of a longer path), on a line that
            // also names the method.
            let found = lines.contains { line in
                guard line.contains(method) else { return false }
                var rest = Substring(line)
                while let range = rest.range(of: path) {
                    let next = rest[range.upperBound...].first
                    if next == nil || !(next!.isLetter || next!.isNumber || next == "/" || next == "{" || next == "_") { return true }
                    rest = rest[range.upperBound...]
                }
                return false
            }
            #expect(found, "docs/protocol.md does not describe \(operation) from openapi/outpost.yaml")
        }
    }

    @Test func theReadmeLinksTheOperatorDocs() throws {
        let text = try Self.read("README.md")
        #expect(text.contains("## Deploying") && text.contains("docs/deploying.md"))
        #expect(text.contains("## Operating") && text.contains("docs/operating.md"))
    }
}
