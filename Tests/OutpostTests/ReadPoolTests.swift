import Foundation
import OutpostCore
import OutpostTestBasics
import Synchronization
import Testing
@testable import Outpost

/// The app's reads run beside the store's actor on read-only connections (Store/
/// ReadPool.swift, docs/client.md "Reads beside the writer"): they never wait for a write
/// the actor is in the middle of, they see the last commit, and suspension and close
/// release their descriptors like the writer's.
@Suite("Reads beside the writer")
struct ReadPoolTests {
    /// A resolver that stops the store's actor inside the sync's write, until the test has
    /// read, for at most the test deadline.
    final class Gate: Sendable {
        let inside = DispatchSemaphore(value: 0)
        let readDone = DispatchSemaphore(value: 0)
        /// Whether the read came while the resolver waited (nil: never asked).
        let readInTime = Mutex<Bool?>(nil)

        var resolver: ConflictResolver {
            .custom(name: "wait-for-a-read") { [self] _ in
                inside.signal()
                let arrived = readDone.wait(timeout: .now() + .seconds(testDeadlineSeconds)) == .success
                readInTime.withLock { $0 = arrived }
                return .keepServer
            }
        }
    }

    @Test func aReadWhileTheStoreIsInsideAWriteSeesTheLastCommitAndDoesNotWait() async throws {
        try await withTemporaryDirectory { dir in
            let world = World()
            let gate = Gate()
            let phone = try world.device("phone", path: dir.appending("phone.sqlite"), resolver: gate.resolver)
            try await world.concurrentEdits(phone: phone, laptop: try world.device("laptop"))

            // The sync runs on a thread of its own: the resolver blocks that thread, with the
            // store's actor inside the write that settles the conflict.
            let writer = DedicatedThreadExecutor(name: "store-writer")
            defer { writer.stop() }
            let sync = Task(executorPreference: writer) { try await phone.sync() }
            try await blocking {
                guard gate.inside.wait(timeout: .now() + .seconds(testDeadlineSeconds)) == .success else {
                    throw NotReached("the resolver was not asked within \(testDeadlineSeconds) s")
                }
            }
            // Read on another thread while the actor is held. A read that needed the actor
            // would return only after the resolver gave up waiting for it.
            let (during, status) = try await offPool("reader") {
                (try await phone.data("todos", "t1"), try await phone.status())
            }
            gate.readDone.signal()
            let report = try await sync.value

            #expect(gate.readInTime.withLock { $0 } == true, "the read waited for the store's actor")
            #expect(during == todo("phone"), "the read saw the last commit: the local edit, not the write in progress")
            #expect(status.pending == 1, "the status read saw the queued edit")
            #expect(report.conflicts == 1)
            #expect(try await phone.data("todos", "t1") == todo("laptop"), "the read after the sync saw its commit")
            await phone.close()
        }
    }

    /// An actor standing for the main actor: it calls a read, and is asked something else
    /// while that read runs.
    actor Screen {
        /// Counts the todos in a read that waits inside its transaction for `gate.readDone`.
        func count(_ store: OutpostStore, _ gate: Gate) async throws -> Int {
            try await store.appRead { d in
                gate.inside.signal()
                let released = gate.readDone.wait(timeout: .now() + .seconds(testDeadlineSeconds)) == .success
                gate.readInTime.withLock { $0 = released }
                return try d.shown(collection: "todos").count
            }
        }
        func ping() {}
    }

    /// `suspend()` waits for a read in flight to end and its connection to close: no
    /// reader's descriptor (nor its WAL lock) stays on the file once the store is suspended.
    @Test func suspensionWaitsForAReadInFlightAndLeavesNoReaderOpen() async throws {
        try await withTemporaryDirectory { dir in
            let store = try OutpostStore(path: dir.appending("app.sqlite"), configuration: .init(space: "team"))
            try await store.put(todo("a"), in: "todos", id: "a")
            let started = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
            final class Events: Sendable { let list = Mutex<[String]>([]) }
            let events = Events()
            let read = Task {
                try await store.appRead { d in
                    started.signal()
                    _ = release.wait(timeout: .now() + .seconds(testDeadlineSeconds))
                    defer { events.list.withLock { $0.append("read") } }
                    return try d.shown(RecordKey(collection: "todos", id: "a"))?.key.id
                }
            }
            try await blocking { _ = started.wait(timeout: .now() + .seconds(testDeadlineSeconds)) }
            let suspension = Task {
                await store.suspend()
                events.list.withLock { $0.append("suspended") }
            }
            try await eventually("the suspension shuts the reads") { store.readers?.shutReason == .suspended }
            #expect(events.list.withLock { $0 }.isEmpty, "the suspension waits for the read")
            release.signal()
            #expect(try await read.value == "a", "the read in flight ends with its answer")
            await suspension.value
            #expect(events.list.withLock { $0 } == ["read", "suspended"])
            #expect(store.readers?.openCount == 0)
            #expect(await store.isSuspended)
            try await store.resume()
            #expect(try await store.record(in: "todos", id: "a") != nil, "reads open again after resume()")
            await store.close()
        }
    }

    @Test func aReadNeverHoldsItsCallersActor() async throws {
        try await withTemporaryDirectory { dir in
            let store = try World().device("phone", path: dir.appending("s.sqlite"))
            try await store.put(todo("a"), in: "todos", id: "t1")
            let screen = Screen(), gate = Gate()
            let read = Task { try await screen.count(store, gate) }
            try await blocking {
                guard gate.inside.wait(timeout: .now() + .seconds(testDeadlineSeconds)) == .success else {
                    throw NotReached("the read did not start within \(testDeadlineSeconds) s")
                }
            }
            // The read is inside its transaction. Its caller's actor answers at once: a read
            // that ran on that actor would hold it until the read gave up waiting.
            await screen.ping()
            gate.readDone.signal()
            #expect(try await read.value == 1)
            #expect(gate.readInTime.withLock { $0 } == true, "the read held its caller's actor")
            await store.close()
        }
    }

    @Test func aReadSeesEverySaveThatReturnedBeforeIt() async throws {
        try await withTemporaryDirectory { dir in
            let store = try World().device("phone", path: dir.appending("s.sqlite"))
            for n in 0..<50 {
                try await store.put(todo("v\(n)"), in: "todos", id: "t\(n % 5)")
                #expect(try await store.data("todos", "t\(n % 5)") == todo("v\(n)"))
                #expect(try await store.records(in: "todos").count == min(n + 1, 5))
            }
            #expect(try await store.status().pending == 5)
            #expect(store.readers!.openCount <= ReadPool.keptIdle)
            await store.close()
        }
    }

    #if os(Linux)
    /// The descriptors of this process open on `path` (the file itself, not its -wal/-shm).
    private func descriptors(on path: String) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == path }.count
    }

    @Test func suspendAndCloseReleaseTheReadersDescriptors() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("s.sqlite")
            let store = try World().device("phone", path: path)
            try await store.put(todo("a"), in: "todos", id: "t1")
            #expect(try await store.data("todos", "t1") == todo("a"))
            #expect(store.readers!.openCount == 1)
            #expect(descriptors(on: path) == 2, "the writer and one reader")

            await store.suspend()
            #expect(descriptors(on: path) == 0, "suspended: no descriptor on the file")
            await #expect(throws: OutpostError.suspended) { try await store.record(in: "todos", id: "t1") }
            await #expect(throws: OutpostError.suspended) { try await store.status() }

            try await store.resume()
            #expect(try await store.data("todos", "t1") == todo("a"))
            #expect(descriptors(on: path) == 2)

            await store.close()
            #expect(descriptors(on: path) == 0, "closed: no descriptor on the file")
            await #expect(throws: OutpostError.closed) { try await store.all(Todo.self, in: "todos") }
        }
    }
    #endif
}
