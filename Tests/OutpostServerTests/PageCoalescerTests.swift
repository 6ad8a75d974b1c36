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
        async let a = coalescer.page(request, knownHead: 7) { try await gate.read() }
        async let b = coalescer.page(request, knownHead: 7) { try await gate.read() }
        // Another head, another filter, or no known head: a read of its own.
        async let c = coalescer.page(request, knownHead: 8) { try await gate.read() }
        async let d = coalescer.page(PageRequest(space: "sp", afterSeq: 5, limit: 10, maxBytes: 1000, collections: ["x"]), knownHead: 7) { try await gate.read() }
        async let e = coalescer.page(request, knownHead: nil) { try await gate.read() }
        // Every pull has arrived while the reads are held: four reads started, and one of
        // a and b joined the other's read.
        try await eventually("four reads started and one pull joined a read") { gate.reads == 4 && coalescer.shared.value.load(ordering: .relaxed) == 1 }
        gate.open()
        let (pa, pb, _, _, _) = try await (a, b, c, d, e)
        #expect(pa.head == pb.head)
        #expect(gate.reads == 4)
        // Once done, the next pull reads again.
        _ = try await coalescer.page(request, knownHead: 7) { try await gate.read() }
        #expect(gate.reads == 5)
        #expect(coalescer.shared.value.load(ordering: .relaxed) == 1)
    }
}
