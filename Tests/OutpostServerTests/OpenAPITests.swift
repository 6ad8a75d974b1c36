import Foundation
import Testing
import OutpostCore
import OutpostHTTP
@testable import OutpostServer

/// `openapi/outpost.yaml` is kept true to the code: the same routes, the same error codes.
@Suite struct OpenAPITests {
    static var specText: String {
        get throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            return try String(contentsOf: root.appendingPathComponent("openapi/outpost.yaml"), encoding: .utf8)
        }
    }

    /// (METHOD, path) of every operation under `paths:`; a small reader for the layout the
    /// file keeps (two spaces before a path, four before a method).
    static func operations(_ text: String) -> Set<String> {
        var out: Set<String> = []
        var inPaths = false
        var path: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if !line.hasPrefix(" ") && !line.isEmpty {
                inPaths = line.hasPrefix("paths:")
                continue
            }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), !line.hasPrefix("   "), line.hasSuffix(":") {
                path = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    "), !line.hasPrefix("     "), let path {
                let key = line.dropFirst(4).split(separator: ":")[0]
                if ["get", "post", "put", "delete", "head", "patch", "options"].contains(String(key)) {
                    out.insert("\(key.uppercased()) \(path)")
                }
            }
        }
        return out
    }

    @Test func everyRouteIsDescribedAndEveryDescribedRouteExists() async throws {
        try await withServer { s in
            var code = Set(s.app.router.routes.map { "\($0.method.rawValue) \($0.pattern)" })
            // The engine answers HEAD wherever GET is routed (RFC 9110 section 9.3.2).
            for route in s.app.router.routes where route.method == .GET { code.insert("HEAD \(route.pattern)") }
            var spec = Self.operations(try Self.specText)
            for operation in spec where operation.hasPrefix("GET ") { spec.insert("HEAD " + operation.dropFirst(4)) }
            #expect(!spec.isEmpty)
            #expect(code.subtracting(spec).isEmpty, "routes missing from openapi/outpost.yaml: \(code.subtracting(spec).sorted())")
            #expect(spec.subtracting(code).isEmpty, "openapi/outpost.yaml describes routes the server lacks: \(spec.subtracting(code).sorted())")
        }
    }

    @Test func everyErrorCodeIsListed() throws {
        let text = try Self.specText
        for code in ErrorCode.allCases {
            #expect(text.contains("        - \(code.rawValue)\n"), "error code \(code.rawValue) is not in the ErrorCode enum of openapi/outpost.yaml")
        }
    }

    @Test func everySettingOfInfoIsDescribed() throws {
        let text = try Self.specText
        for field in Limits.fields { #expect(text.contains("        \(field.name): { type: integer, default: ")) }
    }
}
