import Foundation
import OutpostCore
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Synchronization
import Testing
@testable import Outpost

/// An app's life on iOS, on the portable paths Linux runs (docs/client.md, "An app's life on
/// iOS"): suspension releases the store's file and lock, readers in other processes, a
/// store that opens in a directory not made yet, durable renames, the cancellable sync
/// gate, and a store restored from another device's backup.
@Suite("An app's life: suspension, readers, restores, durability", .serialized, .serverLogs)
struct AppLifeTests {
    #if canImport(OutpostTestSupport)
    /// The `outpost` command-line client on the store's file: a second process.
    static func outpost(_ arguments: [String], environment: [String: String] = [:]) async throws -> CLITests.Run {
        try await blocking { try CLITests.outpost(arguments, environment: environment) }
    }

    @Test func aSuspendedStoreLetsAnotherProcessTakeTheFileAndResumesWhereItWas() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("s.sqlite")
            let world = World()
            let store = try world.device("phone", path: path)
            try await store.put(todo("first"), in: "todos", id: "t1")

            // Held: another process cannot write, and reads alongside.
            let refused = try await Self.outpost(["--store", path, "put", "todos", "t2", #"{"title":"from the extension"}"#])
            #expect(refused.status == 1 && refused.stderr.contains("already open"), "\(refused.stderr)")
            let listed = try await Self.outpost(["--store", path, "list", "todos"])
            #expect(listed.status == 0 && listed.lines.map { $0["id"] } == ["t1"], "\(listed.stdout) \(listed.stderr)")

            await store.suspend()
            #expect(await store.isSuspended)
            await #expect(throws: OutpostError.suspended) { try await store.put(todo("x"), in: "todos", id: "t9") }
            await #expect(throws: OutpostError.suspended) { try await store.sync() }
            let written = try await Self.outpost(["--store", path, "put", "todos", "t2", #"{"title":"from the extension"}"#])
            #expect(written.status == 0, "the lock is free while the store is suspended: \(written.stderr)")

            try await store.resume()
            #expect(try await store.data("todos", "t2") == ["title": "from the extension"], "what the other process wrote")
            try await store.put(todo("after"), in: "todos", id: "t3")
            #expect(try await store.sync().pushed == 3)
            #expect(world.serverData("todos", "t2") == ["title": "from the extension"])
            let again = try await Self.outpost(["--store", path, "put", "todos", "t4", "{}"])
            #expect(again.status == 1, "resumed: the lock is held again")

            // A store of this process opened while it is suspended (an extension in the same
            // process): the suspended one cannot resume until that one is closed.
            await store.suspend()
            let other = try world.device("phone", path: path)
            #expect(try await other.data("todos", "t3") == todo("after"))
            await #expect(throws: OutpostError.storeInUse(path: path)) { try await store.resume() }
            #expect(await store.isSuspended)
            await other.close()
            try await store.resume()
            #expect(try await store.records(in: "todos").count == 3)
            await store.close()
            await #expect(throws: OutpostError.closed) { try await store.resume() }

            // Reopened after a suspension and a close: the file is whole.
            let reopened = try world.device("phone", path: path)
            #expect(try await reopened.records(in: "todos").map(\.id) == ["t1", "t2", "t3"])
            #expect(try await reopened.pendingChanges().isEmpty)
            await reopened.close()
        }
    }
    #endif

    @Test func aSuspensionWaitsForTheRunningSyncAndItsCancellationCancelsTheSync() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("s.sqlite")
            let world = World()
            let store = try world.device("phone", path: path)
            try await store.put(todo("kept"), in: "todos", id: "t1")
            world.server.inject(.hang, on: .push, times: 2)

            // A resume() while the suspension waits calls it off: the store stays open.
            var sync = try await hungSync(store)
            var suspension = try await waitingForTheGate(store) { await store.suspend() }
            try await store.resume()
            sync.cancel()
            _ = try await ended(sync, "the cancelled sync")
            _ = try await ended(suspension, "the suspension called off")
            #expect(await store.isSuspended == false)
            #expect(throws: OutpostError.storeInUse(path: path)) { try world.device("phone", path: path) }

            // Cancelling the suspension's task (a background task's time is up) cancels the
            // sync, and the store suspends without waiting for its answer.
            sync = try await hungSync(store)
            suspension = try await waitingForTheGate(store) { await store.suspend() }
            suspension.cancel()
            _ = try await ended(suspension, "the cancelled suspension")
            #expect(await store.isSuspended)
            let cancelled = try await ended(sync, "the sync the suspension cancelled")
            #expect(throws: (any Error).self) { try cancelled.get() }
            let other = try world.device("phone", path: path)
            #expect(try await other.pendingChanges().map(\.id) == ["t1"], "the change is kept, in doubt")
            await other.close()
            await store.close()
        }
    }

    @Test func aCancelledSyncWaitingForTheGateLeavesAtOnce() async throws {
        let world = World()
        let store = try world.device("phone")
        try await store.put(todo("x"), in: "todos", id: "t1")
        world.server.inject(.hang, on: .push)
        let foreground = try await hungSync(store)
        let background = try await waitingForTheGate(store) { try await store.sync() }
        background.cancel()
        let outcome = try await ended(background, "the cancelled sync, while the other holds the gate")
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(await store.inspectSync { $0.gate.waiting } == 0)
        #expect(await store.inspectSync { $0.running != nil }, "the foreground sync still runs")
        foreground.cancel()
        _ = try await ended(foreground, "the cancelled foreground sync")
        #expect(try await store.sync().pushed == 1, "the gate is free again")
    }

    @Test func theLifecycleSuspendsInTheBackgroundUnlessBackgroundWorkHoldsTheStore() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("s.sqlite")
            let world = World()
            let store = try world.device("phone", path: path)
            let lifecycle = StoreLifecycle(store: store)
            try await store.put(todo("a"), in: "todos", id: "t1")

            await lifecycle.enteredBackground()
            #expect(await store.isSuspended)
            let extensionStore = try world.device("phone", path: path)
            await extensionStore.close()

            // A background task's sync: the store is open for it, suspended after it.
            let report = try await lifecycle.whileOpen { store in
                #expect(await store.isSuspended == false)
                return try await store.sync()
            }
            #expect(report.pushed == 1)
            #expect(await store.isSuspended)

            // Back to the foreground while a suspension waits for a sync: it stays open.
            try await lifecycle.enteringForeground()
            #expect(await store.isSuspended == false)
            try await store.put(todo("b"), in: "todos", id: "t2")
            world.server.inject(.hang, on: .push)
            let sync = try await hungSync(store)
            let background = try await waitingForTheGate(store) { await lifecycle.enteredBackground() }
            try await lifecycle.enteringForeground()
            sync.cancel()
            _ = try await ended(sync, "the cancelled sync")
            _ = try await ended(background, "the suspension called off")
            #expect(await store.isSuspended == false)
            #expect(try await store.sync().pushed == 1)
            await store.close()
        }
    }

    @Test func theLifecycleStopsTheSchedulerWhileSuspendedAndStartsItAfresh() async throws {
        let world = World()
        try await withTemporaryDirectory { dir in
            let store = try world.device("phone", path: dir.appending("s.sqlite"))
            var options = SyncScheduler.Options()
            options.interval = .seconds(3600)
            options.longPoll = nil
            let scheduler = SyncScheduler(store: store, options: options, conditions: AlwaysReachableConditions())
            let lifecycle = StoreLifecycle(store: store, scheduler: scheduler)
            let log = SchedulerEventLog(scheduler)
            await scheduler.start()
            try await log.until("the first sync at start") { $0.count == 1 }
            await lifecycle.enteredBackground()
            #expect(await store.isSuspended)
            try await lifecycle.enteringForeground()
            // Started afresh, it syncs at once; a loop left running would wait an hour.
            try await log.until("the sync of the new start") { $0.count == 2 }
            #expect(log.seen == [.synced(pushed: 0), .synced(pushed: 0)])
            await scheduler.stop()
            await store.close()
        }
    }

    #if canImport(OutpostTestSupport)
    @Test func aReaderInAnotherProcessOrThisOneReadsWhileTheAppHoldsTheStore() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.appending("s.sqlite")
            let world = World()
            let app = try world.device("phone", path: path)
            try await app.put(todo("one"), in: "todos", id: "t1")
            let reader = try OutpostStore.reader(path: path, configuration: world.configuration("phone"))
            #expect(reader.clientId == "phone")
            #expect(try await reader.data("todos", "t1") == todo("one"))
            try await app.put(todo("two"), in: "todos", id: "t2")
            #expect(try await reader.records(in: "todos").count == 2, "the app's later write")
            #expect(try await reader.status().pending == 2)
            await #expect(throws: OutpostError.readOnly) { try await reader.put(todo("x"), in: "todos", id: "t3") }
            await #expect(throws: OutpostError.readOnly) { try await reader.sync() }

            // The app suspended (its connection closed): the reader still opens the file.
            await app.suspend()
            let later = try OutpostStore.reader(path: path, configuration: world.configuration("phone"))
            #expect(try await later.records(in: "todos").count == 2)
            await later.close()
            await reader.close()
            #expect(throws: OutpostError.spaceMismatch(stored: "team", configured: "other")) {
                try OutpostStore.reader(path: path, configuration: .init(space: "other"))
            }
            #expect(throws: OutpostError.self) { try OutpostStore.reader(path: dir.appending("absent.sqlite"), configuration: .init(space: "team")) }
            try await app.resume()
            await app.close()
            let status = try await Self.outpost(["--store", path, "status"])
            #expect(status.status == 0 && status.json?["pending"] == 2, "\(status.stdout) \(status.stderr)")
        }
    }
    #endif

    @Test func aStoreOpensInADirectoryThatDoesNotExistYet() async throws {
        try await withTemporaryDirectory { dir in
            // Application Support does not exist at an app's first launch.
            let path = dir.appending("Library/Application Support/Outpost/s.sqlite")
            var configuration = World().configuration("phone")
            #expect(configuration.fileProtection == .completeUntilFirstUserAuthentication, "the default lets a locked phone sync")
            configuration.fileProtection = .complete
            let store = try OutpostStore(path: path, configuration: configuration)
            try await store.put(todo("x"), in: "todos", id: "t1")
            await store.close()
            #expect(FileManager.default.fileExists(atPath: path))
        }
    }

    @Test func fullDurabilityAsksForFullFsyncAndCheckpointsAlwaysDo() async throws {
        try await withTemporaryDirectory { dir in
            var configuration = World().configuration("phone")
            configuration.durability = .full
            let store = try OutpostStore(path: dir.appending("full.sqlite"), configuration: configuration)
            #expect(try await store.pragma("fullfsync") == 1)
            #expect(try await store.pragma("checkpoint_fullfsync") == 1)
            #expect(try await store.pragma("synchronous") == 2)
            // The sync's own bookkeeping commits with NORMAL, without the drive flush.
            try await store.useDurability(.normal)
            #expect(try await store.pragma("fullfsync") == 0)
            #expect(try await store.pragma("checkpoint_fullfsync") == 1)
            try await store.useDurability(.full)
            #expect(try await store.pragma("fullfsync") == 1)
            await store.close()
            configuration.durability = .normal
            let normal = try OutpostStore(path: dir.appending("normal.sqlite"), configuration: configuration)
            #expect(try await normal.pragma("fullfsync") == 0)
            #expect(try await normal.pragma("checkpoint_fullfsync") == 1)
            await normal.close()
        }
    }

    #if canImport(OutpostTestSupport)
    /// The key file is written to a temporary file, synced, renamed over the old one, and
    /// then its directory is synced (a rename is an entry of the directory, which POSIX
    /// leaves to the directory's own sync): seen from outside with strace.
    @Test func theKeyFileIsRenamedIntoPlaceAndItsDirectorySynced() async throws {
        try await withTemporaryDirectory { dir in
            let keys = dir.appending("team.keys"), trace = dir.appending("trace")
            let run = try await blocking {
                try Subprocess.run("/usr/bin/strace", ["-f", "-qq", "-e", "trace=openat,rename,renameat,renameat2,fsync,fdatasync", "-o", trace,
                                                        BuildProducts.executable("outpost-cli"), "--key-file", keys, "--space", "team", "key", "create"])
            }
            #expect(run.status == 0, "\(run.output) \(run.error)")
            let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").map(String.init)
            let renamed = try #require(lines.firstIndex { $0.contains("rename") && $0.contains("\"\(keys)\"") && $0.hasSuffix("= 0") },
                                       "no rename onto the key file in:\n\(lines.joined(separator: "\n"))")
            let after = lines[renamed...]
            let opened = try #require(after.first { $0.contains("openat(") && $0.contains("\"\(dir.path)\"") && $0.contains("O_DIRECTORY") },
                                      "the directory was not opened after the rename:\n\(after.joined(separator: "\n"))")
            let fd = try #require(opened.split(separator: "=").last?.trimmingCharacters(in: .whitespaces))
            #expect(after.contains { $0.contains("fsync(\(fd))") && $0.hasSuffix("= 0") }, "the directory was not synced:\n\(after.joined(separator: "\n"))")
            // The temporary file was synced before the rename.
            #expect(lines[..<renamed].contains { $0.contains("fsync(") && $0.hasSuffix("= 0") })
        }
    }
    #endif

    @Test func plainHTTPRefusedByAppTransportSecuritySaysSo() {
        let error = TransportError.classifying(URLError(.appTransportSecurityRequiresSecureConnection))
        guard case .notSent(let message) = error else {
            Issue.record("\(error) is not notSent: nothing left the device")
            return
        }
        #expect(message.contains("App Transport Security") && message.contains("NSAppTransportSecurity"), "\(message)")
    }

    /// The form URLSession gives a request to the LAN that local network privacy refused
    /// (an offline-looking error whose underlying error's path says why).
    @Test func aServerOnTheLANTheUserHasNotAllowedSaysSo() {
        let path = NSError(domain: "kCFErrorDomainCFNetwork", code: -1020, userInfo: ["_NSURLErrorNWPathKey": "unsatisfied (Local network prohibited), interface: en0[802.11], ipv4"])
        let error = TransportError.classifying(URLError(.dataNotAllowed, userInfo: [NSUnderlyingErrorKey: path]))
        guard case .notSent(let message) = error else {
            Issue.record("\(error) is not notSent")
            return
        }
        #expect(message.contains("local network") && message.contains("NSLocalNetworkUsageDescription"), "\(message)")
        #expect(TransportError.classifying(URLError(.dataNotAllowed)) == .notSent(URLError(.dataNotAllowed).localizedDescription), "offline stays offline")
    }
}

extension OutpostStore {
    /// Reads the sync part's state on the store's actor.
    func inspectSync<T: Sendable>(_ body: (SyncRunner) -> T) -> T { body(syncRun) }
}

/// A sync of `store` whose push hangs (the test injected `.hang`), once it holds the gate:
/// the store tells a sync's start (`syncActivity()`) from the sync's own task, which runs
/// only once the sync holds the gate.
func hungSync(_ store: OutpostStore, fileID: String = #fileID, line: Int = #line) async throws -> Task<SyncReport, any Error> {
    let activity = StreamLog(await store.syncActivity())
    let sync = Task { try await store.sync() }
    try await activity.until("the sync is under way", fileID: fileID, line: line) { $0.contains(.started) }
    return sync
}

/// `body` run in a task of its own, once it waits for the sync gate (behind a hung sync).
func waitingForTheGate<T: Sendable>(_ store: OutpostStore, fileID: String = #fileID, line: Int = #line,
                                    _ body: @escaping @Sendable () async throws -> T) async throws -> Task<T, any Error> {
    let waiting = await store.inspectSync { $0.gate.waiting }
    let task = Task { try await body() }
    try await eventually("it waits for the gate", fileID: fileID, line: line) { await store.inspectSync { $0.gate.waiting } == waiting + 1 }
    return task
}

/// How `task` ended, once it has; `NotReached` when it has not within the tests' deadline,
/// so that a task that waits for ever fails the test instead of hanging it.
func ended<T: Sendable, Failure: Error>(_ task: Task<T, Failure>, _ what: String, fileID: String = #fileID, line: Int = #line) async throws -> Result<T, Failure> {
    let outcome = Watched<Result<T, Failure>?>(nil)
    Task {
        let result = await task.result
        outcome.update { $0 = result }
    }
    return try await outcome.until("\(what) ended", fileID: fileID, line: line) { $0 != nil }!
}

extension OutpostStore {
    /// A pragma's value on the store's connection.
    func pragma(_ name: String) throws -> Int64? {
        try read { try $0.db.scalarInt("PRAGMA \(name)") }
    }

    /// The durability of the next commits (as a sync's bookkeeping sets it).
    func useDurability(_ durability: Durability) throws {
        try read { try $0.use(durability) }
    }
}

/// Key export and import, whose scrypt takes 128 MiB and about a second, never run on the
/// caller's executor (the main actor, or an actor of the app).
@Suite("An app's life: key export and import off the caller's thread")
struct KeyTransferThreadTests {
    /// The app's actor that exports and imports.
    actor Caller {
        func export(_ keys: any KeyStore) async throws -> String {
            try await SpaceKeys.export(space: "team", from: keys, passphrase: "pw", derivation: .pbkdf2SHA256)
        }

        func `import`(_ exported: String, into keys: any KeyStore) async throws -> String {
            try await SpaceKeys.import(exported, passphrase: "pw", into: keys)
        }

        func ping() -> Bool { true }
    }

    /// A key store whose reads and writes wait until the test opens it, as a slow key
    /// derivation would hold its thread.
    final class GatedKeyStore: KeyStore {
        let inner: FileKeyStore
        private let gate = DispatchSemaphore(value: 0)
        /// Reads and writes waiting at the gate now.
        let waiters = Watched(0)

        init(_ inner: FileKeyStore) { self.inner = inner }

        func open() { gate.signal() }

        private func pass() {
            waiters.update { $0 += 1 }
            gate.wait()
            waiters.update { $0 -= 1 }
        }

        func keyring(space: String) throws -> Keyring? {
            pass()
            return try inner.keyring(space: space)
        }

        func save(_ keyring: Keyring, space: String) throws {
            try inner.save(keyring, space: space)
        }
    }

    @Test func exportAndImportLeaveTheCallersExecutorFree() async throws {
        try await withTemporaryDirectory { dir in
            let caller = Caller()
            let phone = FileKeyStore(path: dir.appending("phone.keys"))
            try SpaceKeys.create(space: "team", in: phone)
            let gatedPhone = GatedKeyStore(phone)
            let export = Task { try await caller.export(gatedPhone) }
            try await gatedPhone.waiters.until("the export is under way") { $0 == 1 }
            let ping = Task { await caller.ping() }
            #expect(try await ended(ping, "a call to the caller's actor while the export works").get())
            gatedPhone.open()
            let exported = try await ended(export, "the export").get()

            let laptop = GatedKeyStore(FileKeyStore(path: dir.appending("laptop.keys")))
            let imported = Task { try await caller.import(exported, into: laptop) }
            try await laptop.waiters.until("the import is under way") { $0 == 1 }
            #expect(try await ended(Task { await caller.ping() }, "a call to the caller's actor while the import works").get())
            laptop.open()
            #expect(try await ended(imported, "the import").get() == "team")
            #expect(try laptop.inner.keyring(space: "team") == phone.keyring(space: "team"))
        }
    }
}

/// Uploads keyed by a path relative to the app's container, and a store restored from a
/// backup onto another device.
@Suite("An app's life: container moves and restores", .serialized, .serverLogs)
struct ContainerAndRestoreTests {
    #if canImport(OutpostTestSupport)
    /// An app update moves the whole container: the first run's upload (its chunks 0 and 1
    /// acknowledged) resumes in the second from where it was. With no base directory in
    /// the first run (an earlier SDK), the row kept the absolute path and is rebased when
    /// the store opens.
    @Test(arguments: [true, false])
    func anUploadResumesAfterTheAppsContainerMoved(baseDirectoryInTheFirstRun: Bool) async throws {
        let world = try await MediaWorld.make()
        let before = world.dir.url.appendingPathComponent("Containers/Data/Application/1A2B")
        let after = world.dir.url.appendingPathComponent("Containers/Data/Application/9F8E")
        func store(in container: URL, base: Bool) throws -> OutpostStore {
            var c = OutpostStore.Configuration(space: world.space)
            c.clientId = "phone"
            c.durability = .normal
            c.randomSeed = 5
            c.clock = world.clock.dates()
            c.backoff = .init(initial: .seconds(60), maximum: .seconds(120))
            if base { c.baseDirectory = container }
            return try OutpostStore(path: container.appendingPathComponent("Library/Application Support/app.sqlite").path, configuration: c,
                                    transport: HTTPSyncTransport(baseURL: world.proxy.url, token: world.token))
        }
        let size = 5 * MediaWorld.chunkSize - 10
        let data = mediaBytes(size, seed: 21)
        let photo = before.appendingPathComponent("Documents/photo.jpg")
        try await blocking {
            try FileManager.default.createDirectory(at: photo.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: photo)
        }
        world.proxy.on("/chunks/2", .cutRequest(afterBodyBytes: 20_000))
        var app = try store(in: before, base: baseDirectoryInTheFirstRun)
        await #expect(throws: MediaError.self) { try await world.uploader(app, attempts: 1).upload(file: photo, contentType: "image/jpeg") }
        #expect(try await world.uploader(app).pendingUploads().first?.chunksAcknowledged == 2)
        await app.close()

        try await blocking { try FileManager.default.moveItem(at: before, to: after) }
        app = try store(in: after, base: true)
        let uploader = world.uploader(app)
        let pending = try #require(try await uploader.pendingUploads().first)
        #expect(pending.path == after.appendingPathComponent("Documents/photo.jpg").path)
        #expect(try await app.uploadKeys() == ["Documents/photo.jpg"], "kept relative to the container")
        world.clock.advance(121_000)
        let mark = world.proxy.log.count
        let media = try #require(try await uploader.resumeUploads().first)
        #expect(media.mediaId == sha256Hex(data))
        #expect(world.proxy.chunkPuts(since: mark) == [2, 3, 4], "only the chunks the server lacked")
        #expect(try await uploader.pendingUploads().isEmpty)
        await app.close()
    }
    #endif

    /// Files outside the base directory keep their absolute path; an absolute row is rebased
    /// only when its file is gone and found again at the same place under the base.
    @Test func onlyUploadsInsideTheBaseDirectoryAreKeptRelativeToIt() async throws {
        try await withTemporaryDirectory { dir in
            let container = dir.url.appendingPathComponent("app/C1"), elsewhere = dir.url.appendingPathComponent("app/shared")
            for (folder, name) in [(container, "in.bin"), (elsewhere, "out.bin")] {
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                try Data("bytes of \(name)".utf8).write(to: folder.appendingPathComponent(name))
            }
            var configuration = World().configuration("phone")
            configuration.baseDirectory = container
            let path = container.appendingPathComponent("s.sqlite").path
            var store = try OutpostStore(path: path, configuration: configuration)
            let uploader = MediaUploader(store: store, transport: HTTPMediaTransport(baseURL: URL(string: "http://127.0.0.1:9")!, token: "unused"))
            _ = try await uploader.enqueue(file: container.appendingPathComponent("in.bin"), contentType: "application/octet-stream")
            _ = try await uploader.enqueue(file: elsewhere.appendingPathComponent("out.bin"), contentType: "application/octet-stream")
            #expect(try await store.uploadKeys() == ["in.bin", elsewhere.appendingPathComponent("out.bin").path])
            await store.close()
            // `shared` differs from `C1` in one directory, but its file is still there: kept.
            store = try OutpostStore(path: path, configuration: configuration)
            #expect(try await store.uploadKeys() == ["in.bin", elsewhere.appendingPathComponent("out.bin").path])
            #expect(try await MediaUploader(store: store, transport: uploader.transport).pendingUploads().map(\.path)
                    == [container.appendingPathComponent("in.bin").path, elsewhere.appendingPathComponent("out.bin").path])
            await store.close()
        }
    }

    /// A backup restored onto another device brings the store file but not the marker
    /// beside it (kept out of backups) nor the keys (they never leave a device).
    @Test func aStoreRestoredOntoAnotherDeviceTakesANewClientIdAndSaysItsKeysAreMissing() async throws {
        try await withTemporaryDirectory { dir in
            let world = World()
            let phoneDir = dir.appending("phone"), newDir = dir.appending("new-phone")
            for d in [phoneDir, newDir] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
            let phoneKeys = FileKeyStore(path: phoneDir + "/keys"), newKeys = FileKeyStore(path: newDir + "/keys")
            try SpaceKeys.create(space: "team", in: phoneKeys)
            func open(_ directory: String, _ keys: FileKeyStore) throws -> OutpostStore {
                try world.device("phone", path: directory + "/s.sqlite") { $0.encryption = .spaceKey(keys) }
            }
            let phone = try open(phoneDir, phoneKeys)
            try await phone.put(todo("synced"), in: "todos", id: "t1")
            try await phone.sync()
            try await phone.put(todo("queued"), in: "todos", id: "t2")
            await phone.close()
            #expect(FileManager.default.fileExists(atPath: phoneDir + "/s.sqlite-device"))

            for name in try FileManager.default.contentsOfDirectory(atPath: phoneDir)
            where name.hasPrefix("s.sqlite") && !name.hasSuffix("-device") && !name.hasSuffix("-lock") {
                try FileManager.default.copyItem(atPath: phoneDir + "/" + name, toPath: newDir + "/" + name)
            }
            #expect(throws: EncryptionError.keysNotOnThisDevice(space: "team", restoredFrom: "phone")) { try open(newDir, newKeys) }
            let exported = try await SpaceKeys.export(space: "team", from: phoneKeys, passphrase: "pw", derivation: .pbkdf2SHA256)
            try await SpaceKeys.import(exported, passphrase: "pw", into: newKeys)

            let restored = try open(newDir, newKeys)
            #expect(restored.clientId != "phone" && restored.restoredFrom == "phone")
            #expect(try await restored.status().restoredFrom == "phone")
            #expect(try await restored.data("todos", "t1") == todo("synced"))
            #expect(try await restored.pendingChanges().map(\.id) == ["t2"], "the queued edit came with the file")
            #expect(try await restored.sync().pushed == 1)
            #expect(world.server.record(space: "team", collection: "todos", id: "t2")?.updatedBy == restored.clientId)
            await restored.close()
            let reopened = try open(newDir, newKeys)
            #expect(reopened.clientId == restored.clientId, "bound to the new device now: no second change")
            await reopened.close()

            let original = try open(phoneDir, phoneKeys)
            #expect(original.clientId == "phone" && original.restoredFrom == nil)
            await original.close()
        }
    }
}

extension OutpostStore {
    /// The paths the upload rows keep, in order.
    func uploadKeys() throws -> [String] {
        try read { try $0.db.query("SELECT path FROM media_uploads ORDER BY number", []) { $0.text(0) } }
    }
}

/// A cold launch for a background task, before the app reported any move: the store must
/// end suspended after the task, never open while the app is suspended.
@Suite("Background launches")
struct BackgroundLaunchTests {
    @Test func aTaskLaunchedInTheBackgroundLeavesTheStoreSuspendedWithoutAnyReport() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-background-launch")
        defer { dir.remove() }
        let world = World()
        let store = try world.device("phone", path: dir.appending("phone.sqlite"))
        try await store.put(todo("a"), in: "todos", id: "a")
        let lifecycle = StoreLifecycle(store: store)
        let report = try await lifecycle.whileOpen(launchedIn: .background) { try await $0.sync() }
        #expect(report.pushed == 1)
        #expect(await store.isSuspended, "the task's work done, the store is suspended again")
        // The app comes to the foreground: reported, the store opens.
        try await lifecycle.enteringForeground()
        #expect(await store.isSuspended == false)
        // A report wins over a later launch's state: in the foreground, a task leaves it open.
        _ = try await lifecycle.whileOpen(launchedIn: .background) { try await $0.sync() }
        #expect(await store.isSuspended == false)
        await store.close()
    }

    @Test func theAppStateIsAskedAtEveryEntryUntilTheAppReports() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-background-launch")
        defer { dir.remove() }
        let world = World()
        let store = try world.device("phone", path: dir.appending("phone.sqlite"))
        let lifecycle = StoreLifecycle(store: store, appState: { .background })
        _ = try await lifecycle.whileOpen { try await $0.sync() }
        #expect(await store.isSuspended, "no report: the app's state, asked, is the background")
        try await lifecycle.enteringForeground()
        _ = try await lifecycle.whileOpen { try await $0.sync() }
        #expect(await store.isSuspended == false, "reported in the foreground")
        await store.close()
    }
}

/// The rules of a background task's run (`BackgroundTaskRun`, what `BackgroundSync` does
/// with `BGTaskScheduler`'s task): completed exactly once, true when the work returned,
/// false when it threw or the time ran out; the expiration cancels the work and waits for it.
@Suite("Background task runs")
struct BackgroundTaskRunTests {
    final class Completions: Sendable {
        let list = Mutex<[Bool]>([])
        let signal = DispatchSemaphore(value: 0)
        func record(_ success: Bool) {
            list.withLock { $0.append(success) }
            signal.signal()
        }
        func waitForOne() async throws {
            try await blocking { [signal] in _ = signal.wait(timeout: .now() + .seconds(testDeadlineSeconds)) }
        }
    }

    struct Failed: Error {}

    @Test func aRunIsCompletedOnceWithTheWorksOutcome() async throws {
        let succeeded = Completions()
        _ = BackgroundTaskRun(complete: succeeded.record) {}
        try await succeeded.waitForOne()
        #expect(succeeded.list.withLock { $0 } == [true])

        let failed = Completions()
        _ = BackgroundTaskRun(complete: failed.record) { throw Failed() }
        try await failed.waitForOne()
        #expect(failed.list.withLock { $0 } == [false])
    }

    @Test func anExpirationCancelsTheWorkWaitsForItAndCompletesOnceWithFalse() async throws {
        let completions = Completions()
        let entered = DispatchSemaphore(value: 0)
        let sawCancellation = Mutex(false)
        let run = BackgroundTaskRun(complete: completions.record) {
            entered.signal()
            // A sync waiting for the network until it is cancelled.
            while !Task.isCancelled { await Task.yield() }
            sawCancellation.withLock { $0 = true }
            throw CancellationError()
        }
        try await blocking { _ = entered.wait(timeout: .now() + .seconds(testDeadlineSeconds)) }
        try await blocking { run.expire(grace: .seconds(testDeadlineSeconds)) }
        #expect(sawCancellation.withLock { $0 }, "the work saw the cancellation before the expiration returned")
        #expect(completions.list.withLock { $0 } == [false], "completed once, with false")
        run.expire()
        #expect(completions.list.withLock { $0 } == [false], "a second expiration completes nothing")
    }
}
