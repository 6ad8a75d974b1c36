import Foundation
import OutpostSubprocess

/// The PyPI tools the tests run (schemathesis, tuspy, Selenium, cryptography): each pinned
/// in one place, a `<tool>_version=` line of scripts/install-deps.sh, which installs it into
/// a venv of its own at `.build/tools/<tool>-<version>`. A tool that is missing is a failure, never a
/// skip: `make test` installs them.
public enum PinnedTools {
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The version `<tool>_version=` in scripts/install-deps.sh names.
    public static func version(_ tool: String) throws -> String {
        let script = try String(contentsOf: root.appendingPathComponent("scripts/install-deps.sh"), encoding: .utf8)
        let prefix = "\(tool)_version="
        guard let line = script.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }).first(where: { $0.hasPrefix(prefix) }) else {
            throw ProcessFailure("scripts/install-deps.sh has no \(prefix) line")
        }
        return String(line.dropFirst(prefix.count))
    }

    /// The path of `executable` in the tool's venv (`bin/python`, say).
    public static func venvPath(_ tool: String, version: String, _ executable: String) -> String {
        root.appendingPathComponent(".build/tools/\(tool)-\(version)/bin/\(executable)").path
    }
}
