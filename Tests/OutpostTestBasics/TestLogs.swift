import Foundation
import Synchronization
import Testing

/// Where the servers that tests start write their logs: one file each, in one directory per
/// test process (`$OUTPOST_TEST_LOGS`, else `outpost-test-logs/PID` under the system's
/// temporary directory). A passing test shows none of it; the `.serverLogs` trait adds the
/// logs of the servers a failing test started to each of its issues.
public enum TestLogs {
    private static let files = Mutex<[(test: Test.ID?, path: String)]>([])

    /// The directory of this test process's logs.
    public static let directory: String = {
        let base = ProcessInfo.processInfo.environment["OUTPOST_TEST_LOGS"]
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("outpost-test-logs").path
        let path = base + "/\(getpid())"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }()

    /// A new, empty log file named after `name`, kept for the test running now.
    public static func newFile(named name: String) -> String {
        let path = directory + "/\(name)-\(UUID().uuidString.prefix(8)).log"
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        files.withLock { $0.append((Test.current?.id, path)) }
        return path
    }

    /// The last `lines` lines of the log at `path`.
    public static func tail(of path: String, lines: Int = 40) -> String {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        let kept = text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines)
        return kept.isEmpty || text.isEmpty ? "(empty)" : kept.joined(separator: "\n")
    }

    /// The tails of the logs of the servers test `id` started, each under its path.
    public static func tails(for id: Test.ID) -> String? {
        let paths = files.withLock { $0.filter { $0.test == id }.map(\.path) }
        guard !paths.isEmpty else { return nil }
        return paths.map { "--- \($0)\n\(tail(of: $0))" }.joined(separator: "\n")
    }
}

extension Trait where Self == IssueHandlingTrait {
    /// Adds the logs of the servers a test started to each issue it records, so a failing
    /// test shows them and a passing one prints nothing.
    public static var serverLogs: Self {
        .compactMapIssues { issue in
            // A suite's trait also reaches its tests' issues: add the logs once.
            let prefix = "server logs:\n"
            guard !issue.comments.contains(where: { $0.rawValue.hasPrefix(prefix) }),
                  let id = Test.current?.id, let logs = TestLogs.tails(for: id) else { return issue }
            var issue = issue
            issue.comments.append(Comment(rawValue: prefix + logs))
            return issue
        }
    }
}
