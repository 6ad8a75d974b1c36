import Foundation
import OutpostTestSupport
import Testing

/// The Apple workflow (`.github/workflows/apple.yml`) cannot run here; what can be checked
/// is: it parses as YAML, every script it runs exists in the repository and is executable,
/// and the oldest Xcode it names is the one docs/client.md supports.
@Suite("The Apple workflow")
struct AppleWorkflowTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func theWorkflowParsesRunsScriptsThatExistAndNamesTheDocsXcode() async throws {
        let workflow = Self.root.appendingPathComponent(".github/workflows/apple.yml").path
        let text = try String(contentsOfFile: workflow, encoding: .utf8)
        // YAML, parsed by PyYAML (python3-yaml, installed by `make test`).
        let parsed = try await blocking {
            try Subprocess.run("python3", ["-c", "import sys, yaml, json; print(json.dumps(yaml.safe_load(open(sys.argv[1]))['jobs']['sdk']['strategy']['matrix']['xcode']))", workflow])
        }
        #expect(parsed.status == 0, "the workflow does not parse: \(parsed.error)")
        #expect(String(decoding: parsed.outputBytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) == #"["16.0", "latest"]"#)

        let scripts = text.components(separatedBy: .whitespacesAndNewlines).filter { $0.hasPrefix("scripts/") }
        #expect(!scripts.isEmpty, "the workflow runs no script of the repository")
        for script in Set(scripts) {
            let path = Self.root.appendingPathComponent(script).path
            #expect(FileManager.default.isExecutableFile(atPath: path), "\(script) is missing or not executable")
        }

        let docs = try String(contentsOf: Self.root.appendingPathComponent("docs/client.md"), encoding: .utf8)
        #expect(docs.contains("Xcode 16.0 or later"), "docs/client.md names another oldest Xcode than the workflow")
        #expect(docs.contains(".github/workflows/apple.yml"), "docs/client.md's \"What is verified where\" names the workflow")
    }
}
