import Foundation
import OutpostConformance
import OutpostTestSupport
import Testing

/// The whole conformance suite against an `outpost-server` child on the PostgreSQL store
/// (`--store postgres://…`, a fresh database of the test run's throwaway cluster): the
/// protocol does not depend on the backend.
@Suite(.offPoolWhileBlocking, .serialized, .serverLogs) struct PostgresConformanceTests {
    @Test func outpostServerOnPostgreSQLConformsToTheProtocol() async throws {
        let url = try await PostgresCluster.database(prefix: "conformance")
        try await withTemporaryDirectory(prefix: "outpost-conformance-pg") { directory in
            let child = try ServerProcess(dataDirectory: directory.path, arguments: ["--store", url, "--header-timeout", "1", "--body-timeout", "1"])
            defer { child.stop() }
            try await ConformanceSuiteTests.runEveryCheck(against: child, rotateEpoch: ["rotate-epoch", "--store", url])
        }
    }
}
