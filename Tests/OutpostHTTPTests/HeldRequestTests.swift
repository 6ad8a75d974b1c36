// Held requests (`HTTPHold`): a handler keeps its request open without a task, and other
// code answers it later, many at a time, from any thread.
import Foundation
import OutpostCompression
import OutpostTestSupport
import Synchronization
import Testing
@testable import OutpostHTTP

/// The requests a test's route holds, and those whose connection ended first: each
/// reported as the engine calls the hold's `start` or `gone`, so a test awaits them.
private final class Keeper: Sendable {
    let held = Watched<[HeldRequest]>([])
    let gone = Watched(0)

    func all() -> [HeldRequest] { held.value }

    /// Waits until `count` requests are held.
    func until(held count: Int) async throws {
        try await held.until("\(count) requests held") { $0.count >= count }
    }

    func routes(_ r: inout Router) {
        r.add(.GET, "/hold", inline: { [self] _ in
            HTTPResponse(hold: HTTPHold(start: { [self] h in held.update { $0.append(h) } },
                                        gone: { [self] _ in gone.add() }))
        })
        r.add(.GET, "/ping", inline: { _ in HTTPResponse(text: "pong") })
    }
}

/// Counts its deinitialization in `freed`: what a hold's `start` captured, freed or not.
private final class Canary: Sendable {
    let freed: Watched<Int>
    init(_ freed: Watched<Int>) { self.freed = freed }
    deinit { freed.add() }
}

@Suite struct HeldRequestTests {
    @Test func heldRequestsOnBothLoopsAreAnsweredTogetherFromAnotherThreadAndTheirConnectionsGoOn() async throws {
        let keeper = Keeper()
        try await withServer(routes: keeper.routes) { s in
            var clients: [TestClient] = []
            for _ in 0..<6 {
                let c = try await s.connect()
                try c.send(request("GET", "/hold"))
                clients.append(c)
            }
            try await keeper.until(held: 6)
            let body = Array(#"{"answer":1}"#.utf8)
            let answered = try await io { HeldRequest.answer(keeper.all(), with: HTTPResponse(json: body)) }
            #expect(answered == 6)
            var ids: Set<String> = []
            for c in clients {
                let r = try await io { try c.readResponse() }
                #expect(r.status == 200)
                #expect(r.body == body)
                #expect(r.header("Content-Type") == "application/json")
                ids.insert(r.header("X-Request-ID") ?? "")
                // Kept alive: the next request on the same connection is served.
                try c.send(request("GET", "/ping"))
                #expect(try await io { try c.readResponse() }.text == "pong")
                c.close()
            }
            #expect(ids.count == 6)
            // Answered once: a second answer does nothing.
            #expect(HeldRequest.answer(keeper.all(), with: HTTPResponse(json: body)) == 0)
            #expect(keeper.gone.value == 0)
        }
    }

    @Test func oneAnswerIsFramedForEachRequestAsItAsked() async throws {
        let keeper = Keeper()
        try await withServer(routes: keeper.routes) { s in
            let gzip = try await s.connect()
            try gzip.send(request("GET", "/hold", headers: [("Accept-Encoding", "gzip")]))
            let plain = try await s.connect()
            try plain.send(request("GET", "/hold"))
            let head = try await s.connect()
            try head.send(request("HEAD", "/hold"))
            try await keeper.until(held: 3)
            let body = Array(("{\"text\":\"" + String(repeating: "a", count: 4000) + "\"}").utf8)
            #expect(HeldRequest.answer(keeper.all(), with: HTTPResponse(json: body)) == 3)
            let zipped = try await io { try gzip.readResponse() }
            #expect(zipped.header("Content-Encoding") == "gzip")
            #expect(try Gzip.decompress(zipped.body, limit: 1 << 20) == body)
            let clear = try await io { try plain.readResponse() }
            #expect(clear.header("Content-Encoding") == nil)
            #expect(clear.body == body)
            let bodiless = try await io { try head.readResponse(head: true) }
            #expect(bodiless.status == 200)
            #expect(bodiless.header("Content-Length") == String(body.count))
            for c in [gzip, plain, head] { c.close() }
        }
    }

    @Test func aHeldRequestWhoseClientLeavesIsGoneAndItsAnswerDoesNothing() async throws {
        let keeper = Keeper()
        try await withServer(routes: keeper.routes) { s in
            let c = try await s.connect()
            try c.send(request("GET", "/hold"))
            try await keeper.until(held: 1)
            c.close()
            try await keeper.gone.until("its keeper told it is gone") { $0 == 1 }
            #expect(keeper.all()[0].answer(HTTPResponse(text: "late")) == false)
        }
    }

    /// A waiting request costs its connection's state and what `gone` needs, not what its
    /// hold's `start` captured: 100,000 waiting pulls are memory (docs/benchmarks.md, "A
    /// fleet"). Before, a held request kept `start` until its answer. (The handler's
    /// finished task, which the connection also let go of then, holds nothing a test can
    /// reach; the live-heap count in docs/benchmarks.md measured both.)
    @Test func whatTheHoldsStartCapturedIsFreedWhileTheRequestWaits() async throws {
        let keeper = Keeper()
        let freed = Watched(0)
        try await withServer(routes: { r in
            keeper.routes(&r)
            r.add(.GET, "/hold-async") { _ in
                let canary = Canary(freed)
                await Task.yield()
                return HTTPResponse(hold: HTTPHold(start: { h in
                    withExtendedLifetime(canary) { keeper.held.update { $0.append(h) } }
                }, gone: { _ in keeper.gone.add() }))
            }
        }) { s in
            let c = try await s.connect()
            try c.send(request("GET", "/hold-async"))
            try await keeper.until(held: 1)
            try await freed.until("what start captured freed while the request waits") { $0 == 1 }
            #expect(HeldRequest.answer(keeper.all(), with: HTTPResponse(text: "later")) == 1)
            let r = try await io { try c.readResponse() }
            #expect(r.status == 200)
            #expect(r.text == "later")
            c.close()
        }
    }
}
