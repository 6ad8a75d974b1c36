import Outpost
import OutpostTesting
import OutpostConformance
import OutpostCore
import Testing

/// The SDK's `InMemorySyncServer` held to the protocol by the conformance suite, over a
/// real socket (`InMemoryHTTPFace`), on the categories it implements.
@Suite(.serialized) struct InMemoryConformanceTests {
    /// The in-memory server implements sync: push, pull, long polls, epochs (a restart keeps
    /// its memory; `rotateEpoch()` gives a new epoch) and the lineage rules of protocol 1.1.
    /// Not run: operations (`/healthz`, `/metrics`, admin routes), media, and HTTP, which it
    /// does not implement; and auth, because tokens are verified by the face with the real
    /// server's `Authorizer`, so those checks would test the real server again.
    static let categories: Set<Check.Category> = [.push, .pull, .lifecycle, .lineage]

    /// Checks of those categories that reach only the HTTP engine: a push body over
    /// `maxRequestBytes` is refused from its Content-Length, or while a chunked body is
    /// read, before any handler (and so the in-memory server) sees it.
    static let engineChecks = ["push-body-over-limit-413", "push-chunked-body-over-limit-413"]

    /// Every check of `categories` but `engineChecks` runs and passes: none skipped for a
    /// missing requirement, none failed.
    @Test func inMemoryServerConformsToTheProtocol() async throws {
        let face = try InMemoryHTTPFace(server: InMemorySyncServer(limits: InProcessServer.testLimits))
        let report: Report
        do {
            report = try await Conformance.run(face.configuration(), categories: Self.categories, skip: Self.engineChecks)
        } catch {
            await face.stop()
            throw error
        }
        await face.stop()
        for result in report.results where !result.passed && !Self.engineChecks.contains(result.name) {
            Issue.record("\(result.line)")
        }
        let selected = Conformance.checks.filter { $0.category.map(Self.categories.contains) == true }
        #expect(report.results.map(\.name) == selected.map(\.name))
        #expect(report.results.filter(\.skipped).map(\.name).sorted() == Self.engineChecks.sorted())
        #expect(report.passedCount == selected.count - Self.engineChecks.count)
        // The run cannot pass by running nothing: push, pull, lifecycle and lineage hold 59
        // checks today.
        #expect(report.passedCount >= 55)
    }

    /// A space name that breaks the rule of section 1 is refused `400 invalid_space` by the
    /// in-memory server's pull as by its push, as the real server refuses both. Asked of the
    /// server's own API, the one SDK tests reach: over HTTP the face checks the name first,
    /// as the real server does, so a bad name never gets to the in-memory server.
    @Test func invalidSpaceRefusedByPullAndPush() async throws {
        let server = InMemorySyncServer()
        let push = PushRequest(clientId: "device", changes: [Change(changeId: "c1", collection: "todos", id: "r1", op: .put, data: ["v": 1], baseVersion: nil)])
        let calls: [(String, @Sendable () async throws -> Void)] = [
            ("pull", { _ = try await server.pull(PullQuery(), space: "bad/space") }),
            ("push", { _ = try await server.push(push, space: "bad/space") }),
        ]
        for (what, call) in calls {
            do {
                try await call()
                Issue.record("a \(what) to space bad/space was answered, not refused")
            } catch let error as TransportError {
                guard case .refused(400, let envelope) = error else {
                    Issue.record("a \(what) to space bad/space: expected 400 invalid_space, got \(error)")
                    continue
                }
                #expect(envelope.code == "invalid_space" && envelope.details?["space"]?.stringValue == "bad/space", "\(what): \(envelope)")
            }
        }
        #expect(server.records(space: "bad/space").isEmpty)
    }
}
