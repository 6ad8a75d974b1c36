import Testing
import Synchronization
import OutpostCore
import OutpostTestSupport
@testable import OutpostServer

@Suite struct PageCoalescerTests {
    static let epoch = Epoch("E1")!
    static func page(_ n: Int) -> PageData {
        PageData(epoch: epoch, changesJSON: Array("[]".utf8), count: 0, lastSeq: nil, hasMore: false, head: Int64(n))
    }

    /// A read that waits until `open()` is called, counting how often it ran. A waiting
    /// read is a suspended continuation, resumed by `open()`.
    final class GatedRead: Sendable {
        private struct State {
            var reads = 0
            var open = false
            var waiting: [CheckedContinuation<Void, Never>] = []
        }
        private let state = Mutex(State())

        /// How many reads have started.
        var reads: Int { state.withLock { $0.reads } }

        func read() async throws -> PageData {
            let n = state.withLock { s -> Int in
                s.reads += 1
                return s.reads
            }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let open = state.withLock { s -> Bool in
                    if !s.open { s.waiting.append(c) }
                    return s.open
                }
                if open { c.resume() }
            }
            return PageCoalescerTests.page(n)
        }

        /// Lets every waiting read and every later one return.
        func open() {
            let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
                s.open = true
                defer { s.waiting = [] }
                return s.waiting
            }
            for c in waiting { c.resume() }
        }
    }

    @Test func identicalPullsAtOneKnownHeadShareOneRead() async throws {
        let coalescer = PageCoalescer()
        let gate = GatedRead()
        let request = PageRequest(space: "sp", afterSeq: 5, limit: 10, maxBytes: 1000, collections: nil)
        // Each pull is started, and has asked the coalescer (which joins a read or starts
        // one in its first step), before the next.
        func pull(_ request: PageRequest, knownHead: Int64?) async -> Task<PageData, any Error> {
            await startedThrowingTask { try await coalescer.page(request, knownHead: knownHead) { try await gate.read() } }
        }
        let a = await pull(request, knownHead: 7)
        let b = await pull(request, knownHead: 7)
        // Another head, another filter, or no known head: a read of its own.
        let c = await pull(request, knownHead: 8)
        let d = await pull(PageRequest(space: "sp", afterSeq: 5, limit: 10, maxBytes: 1000, collections: ["x"]), knownHead: 7)
        let e = await pull(request, knownHead: nil)
        // Every pull has arrived while the reads are held (a's read cannot end before the
        // gate opens): b joined it.
        #expect(coalescer.shared.value.load(ordering: .relaxed) == 1, "b joined a's read")
        gate.open()
        let (pa, pb) = (try await a.value, try await b.value)
        for other in [c, d, e] { _ = try await other.value }
        #expect(pa.head == pb.head)
        #expect(gate.reads == 4)
        // Once done, the next pull reads again.
        _ = try await coalescer.page(request, knownHead: 7) { try await gate.read() }
        #expect(gate.reads == 5)
        #expect(coalescer.shared.value.load(ordering: .relaxed) == 1)
    }
}
