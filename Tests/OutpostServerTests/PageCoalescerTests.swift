import Testing
import Synchronization
import OutpostCore
@testable import OutpostServer

@Suite struct PageCoalescerTests {
    static let epoch = Epoch("E1")!
    static func page(_ n: Int) -> PageData {
        PageData(epoch: epoch, changesJSON: Array("[]".utf8), count: 0, lastSeq: nil, hasMore: false, head: Int64(n))
    }

    /// A read that waits until `release` opens, counting how often it ran.
    final class GatedRead: Sendable {
        let reads = Atomic<Int>(0)
        let open = Atomic<Bool>(false)
        func read() async throws -> PageData {
            let n = reads.add(1, ordering: .relaxed).newValue
            while !open.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(1)) }
            return PageCoalescerTests.page(n)
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
        try await Task.sleep(for: .milliseconds(50))
        gate.open.store(true, ordering: .relaxed)
        let (pa, pb, _, _, _) = try await (a, b, c, d, e)
        #expect(pa.head == pb.head)
        #expect(gate.reads.load(ordering: .relaxed) == 4)
        // Once done, the next pull reads again.
        _ = try await coalescer.page(request, knownHead: 7) { try await gate.read() }
        #expect(gate.reads.load(ordering: .relaxed) == 5)
    }
}
