// Where a request's code runs: on the event loop that owns its connection (its task
// executor), never on Swift's cooperative pool, so the server answers while other work
// holds every pool thread. The hop test writes down, for Swift 6.3, what follows a task's
// executor preference (SE-0417) and what does not.
import Dispatch
import Foundation
import Glibc
import OutpostTestSupport
import Synchronization
import Testing
@testable import OutpostHTTP

/// A default actor: under a task executor preference its methods run on that executor.
private actor Tally {
    var count = 0
    func bump(on thread: pthread_t) -> Bool {
        count += 1
        return pthread_equal(pthread_self(), thread) != 0
    }
}

/// The thread a request's steps ran on, each compared with the one its handler started on.
private func hopRoutes(_ r: inout Router) {
    r.add(.POST, "/hops", preBody: { _, _ in
        // The pre-body check is a task of its own, on the same loop.
        guard HTTPServer.currentEventLoop != nil else { throw HTTPError.internalError() }
    }) { _ in
        let start = pthread_self()
        var steps: [String: Bool] = [:]
        func here() -> Bool { pthread_equal(pthread_self(), start) != 0 }
        steps["handler starts on a loop"] = HTTPServer.currentEventLoop != nil
        let tally = Tally()
        steps["default actor's method"] = await tally.bump(on: start)
        steps["after the actor"] = here()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread { c.resume() }
        }
        steps["continuation resumed on another thread"] = here()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async { c.resume() }
        }
        steps["continuation resumed on Dispatch"] = here()
        try await Task.sleep(for: .milliseconds(1))
        steps["after Task.sleep"] = here()
        async let child = pthread_equal(pthread_self(), start) != 0
        steps["async let child"] = await child
        steps["task group child"] = await withTaskGroup(of: Bool.self) { group in
            group.addTask { pthread_equal(pthread_self(), start) != 0 }
            return await group.next()!
        }
        steps["Task with the loop's preference"] = await Task(executorPreference: HTTPServer.currentEventLoop) {
            pthread_equal(pthread_self(), start) != 0
        }.value
        let lines = steps.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return HTTPResponse(text: lines.joined(separator: "\n"))
    }
    // Not inherited (SE-0417): an unstructured task runs on the global pool.
    r.add(.GET, "/unstructured") { _ in
        HTTPResponse(text: await Task { HTTPServer.currentEventLoop == nil ? "pool" : "loop" }.value)
    }
}

@Suite("Request executors", .timeLimit(.minutes(3)))
struct ExecutorTests {
    @Test func everyHopOfAHandlerStaysOnItsLoopThread() async throws {
        try await withServer(routes: hopRoutes) { s in
            let r = try await s.exchange(request("POST", "/hops", body: []))
            #expect(r.status == 200, "\(r.text)")
            let steps = r.text.split(separator: "\n").map(String.init)
            #expect(steps.count == 9)
            for step in steps { #expect(step.hasSuffix("=true"), "\(step)") }
            #expect(try await s.exchange(request("GET", "/unstructured")).text == "pool")
        }
    }

    /// What a suite of CPU-bound tests does to the pool, done on purpose: every pool thread
    /// is held while a client on a thread of its own sends requests whose handlers hop
    /// through actors, continuations and sleeps. They are answered; with the handlers on
    /// the pool, nothing was answered until the pool came back.
    @Test func theServerAnswersWhileEveryPoolThreadIsHeld() async throws {
        try await withServer(routes: { r in
            hopRoutes(&r)
            r.add(.GET, "/hello/{name}") { req in HTTPResponse(text: "hello \(req.parameter("name")!)") }
        }) { s in
            let port = s.port
            let (hello, hops) = try await whilePoolIsHeld {
                let c = try TestClient.connect(port: port)
                defer { c.close() }
                try c.send(request("GET", "/hello/pool"))
                let hello = try c.readResponse()
                try c.send(request("POST", "/hops", body: []))
                return (hello, try c.readResponse())
            }
            #expect(hello.text == "hello pool")
            #expect(hops.status == 200)
            #expect(!hops.text.contains("=false"), "\(hops.text)")
        }
    }
}
