import Foundation
import OutpostConformance
import OutpostTestSupport
import Testing

/// The whole conformance suite against an `outpost-server` child on the PostgreSQL store
/// (`--store postgres://…`, a fresh database of the test run's throwaway cluster): the
/// protocol does not depend on the backend.
@Suite(.serialized) struct PostgresConformanceTests {
    @Test func outpostServerOnPostgreSQLConformsToTheProtocol() async throws {
        let url = try PostgresCluster.shared.createDatabase(prefix: "conformance")
        try await withTemporaryDirectory(prefix: "outpost-conformance-pg") { directory in
            let child = try ServerProcess(dataDirectory: directory.path, arguments: ["--store", url, "--header-timeout", "1", "--body-timeout", "1"])
            defer { child.stop() }
            var configuration = Configuration(baseURL: child.baseURL.absoluteString, secret: child.secret)
            configuration.headerTimeout = .seconds(1)
            configuration.bodyTimeout = .seconds(1)
            configuration.restart = .closure("restart the outpost-server child") {
                try await blocking {
                    try child.restart()
                    return child.baseURL.absoluteString
                }
            }
            configuration.rotateEpoch = .closure("stop the child, outpost-server rotate-epoch --store, start it") {
                try await blocking {
                    child.stop()
                    let (status, output) = try ServerProcess.run(["rotate-epoch", "--store", url])
                    guard status == 0 else { throw ProcessFailure("rotate-epoch exited \(status): \(output)") }
                    try child.restart()
                    return child.baseURL.absoluteString
                }
            }
            let report = try await Conformance.run(configuration)
            for result in report.results where !result.passed {
                Issue.record("\(result.line)")
            }
            #expect(report.skippedCount == 0)
            #expect(report.results.count == Conformance.checks.count)
        }
    }
}
