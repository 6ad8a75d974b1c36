import Foundation
import OutpostCore
import OutpostCrypto
import OutpostSQLite
import OutpostTestBasics
#if canImport(OutpostTestSupport)
import OutpostTestSupport
#endif
import Testing
@testable import Outpost

/// End-to-end encrypted spaces (docs/encryption.md) against a real `outpost-server` child
/// and real SQLite files: what the server keeps, what a device does with a copy it cannot
/// open, keys moved between devices, rotation, sealed media, and clear fields under rules.
@Suite("End-to-end encrypted spaces", .offPoolWhileBlocking, .serialized, .serverLogs)
struct EncryptionTests {
    /// A passphrase export with PBKDF2 (quicker than scrypt in tests that are not about the
    /// derivation).
    static let quickWrap = KeyDerivation.pbkdf2SHA256

    #if canImport(OutpostTestSupport)
    final class World: Sendable {
        let dir: TemporaryDirectory
        let server: ServerProcess
        let token: String

        init(arguments: [String] = []) async throws {
            dir = try TemporaryDirectory(prefix: "outpost-e2e")
            let path = dir.appending("data")
            server = try await blocking { try ServerProcess(dataDirectory: path, arguments: arguments) }
            token = try server.token(spaces: ["team"])
        }

        deinit {
            server.stop()
            dir.remove()
        }

        func keys(_ name: String) -> FileKeyStore {
            FileKeyStore(path: dir.appending("\(name).keys"))
        }

        func device(_ name: String, keys: (any KeyStore)? = nil, token: String? = nil, clear: [String: Set<String>] = [:],
                    configure: (inout OutpostStore.Configuration) -> Void = { _ in }) throws -> OutpostStore {
            var c = OutpostStore.Configuration(space: "team")
            c.clientId = name
            c.durability = .normal
            c.randomSeed = 9
            c.encryption = .spaceKey(keys ?? self.keys(name), clearFields: clear)
            configure(&c)
            return try OutpostStore(path: dir.appending("\(name).sqlite"), configuration: c,
                                    transport: HTTPSyncTransport(baseURL: server.baseURL, token: token ?? self.token))
        }

        /// The records as the server sends them (sealed), by id.
        func serverRecords(token: String? = nil) async throws -> [String: RecordState] {
            let transport = HTTPSyncTransport(baseURL: server.baseURL, token: token ?? self.token)
            var out: [String: RecordState] = [:]
            var since: Version?
            while true {
                let page = try await transport.pull(PullQuery(since: since, limit: 1000), space: "team")
                for case .record(let r) in page.records { out[r.id] = r }
                since = page.next
                if !page.hasMore { return out }
            }
        }
    }
    #endif

    /// Every regular file under `path` that holds `marker`.
    static func files(under path: String, holding marker: String) throws -> [String] {
        let needle = Data(marker.utf8)
        var found: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: path)
        while let relative = enumerator?.nextObject() as? String {
            let full = path + "/" + relative
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            if let data = FileManager.default.contents(atPath: full), data.range(of: needle) != nil { found.append(relative) }
        }
        return found
    }

    #if canImport(OutpostTestSupport)
    // Off the pool: the default wrap's scrypt (three derivations of 128 MiB).
    @Test(.offPool, arguments: [false, true])
    func twoDevicesShareAKeyByPassphraseSyncAndMergeAndTheServerKeepsNoMarker(postgres: Bool) async throws {
        let database = postgres ? try await PostgresCluster.database(prefix: "e2e") : nil
        let world = try await World(arguments: ["--chunk-size", "65536"] + (database.map { ["--store", $0] } ?? []))
        // The phone makes the key; the laptop imports it (scrypt, the default wrap).
        let created = try SpaceKeys.create(space: "team", in: world.keys("phone"))
        let exported = try await SpaceKeys.export(space: "team", from: world.keys("phone"), passphrase: "correct horse battery staple")
        #expect(!exported.contains(Base64.encodeURL(created.bytes)))
        await #expect(throws: EncryptionError.wrongPassphrase) {
            try await SpaceKeys.import(exported, passphrase: "wrong horse", into: world.keys("laptop"))
        }
        #expect(try world.keys("laptop").keyring(space: "team") == nil, "a wrong passphrase imports nothing")
        #expect(try await SpaceKeys.import(exported, passphrase: "correct horse battery staple", into: world.keys("laptop")) == "team")
        #expect(try world.keys("laptop").keyring(space: "team")?.currentKey == created)

        let phone = try world.device("phone")
        let laptop = try world.device("laptop") { $0.resolver = .mergeFields(fallback: .lastWriteWins()) }
        for i in 0..<40 {
            try await phone.put(["title": .string("MARKER-TITLE-\(i)"), "note": .string("MARKER-NOTE-\(i)"), "n": .number(JSONNumber(Int64(i)))],
                                in: "notes", id: "n\(i)")
        }
        // A sealed media file beside the records.
        let photo = world.dir.url.appendingPathComponent("photo.jpg")
        let photoBytes = Data(String(repeating: "MARKER-PHOTO ", count: 20_000).utf8)
        try photoBytes.write(to: photo)
        let uploader = MediaUploader(store: phone, transport: HTTPMediaTransport(baseURL: world.server.baseURL, token: world.token))
        let reference = try await uploader.uploadReference(file: photo, contentType: "image/jpeg", filename: "MARKER-NAME.jpg")
        #expect(reference.size == Int64(photoBytes.count) && reference.contentType == "image/jpeg" && reference.encryption != nil)
        try await phone.save(["photo": reference], in: "photos", id: "p1")
        #expect(try await phone.sync().pushed == 41)
        #expect(try await laptop.sync().pulled == 41)
        #expect(try await laptop.data("notes", "n7") == ["title": "MARKER-TITLE-7", "note": "MARKER-NOTE-7", "n": 7])

        // Both edit n1, different fields: the merge runs on the opened copies.
        try await phone.put(["title": "MARKER-PHONE", "note": "MARKER-NOTE-1", "n": 1], in: "notes", id: "n1")
        try await laptop.put(["title": "MARKER-TITLE-1", "note": "MARKER-LAPTOP", "n": 1], in: "notes", id: "n1")
        try await phone.sync()
        let merged = try await laptop.sync()
        #expect(merged.conflicts == 1)
        try await phone.sync()
        #expect(try await phone.data("notes", "n1") == ["title": "MARKER-PHONE", "note": "MARKER-LAPTOP", "n": 1])
        #expect(try await laptop.data("notes", "n1") == ["title": "MARKER-PHONE", "note": "MARKER-LAPTOP", "n": 1])

        // The laptop opens the photo from its reference.
        let fetched = try #require(try await laptop.get([String: MediaReference].self, from: "photos", id: "p1")?["photo"])
        let copy = world.dir.url.appendingPathComponent("photo-copy.jpg")
        let laptopUploader = MediaUploader(store: laptop, transport: HTTPMediaTransport(baseURL: world.server.baseURL, token: world.token))
        try await laptopUploader.download(fetched, to: copy)
        #expect(try Data(contentsOf: copy) == photoBytes)

        // What the server keeps: every record is sealed, and no file of its data directory
        // (the SQLite store, its WAL, the media) holds a marker; the devices' own files do.
        let sealed = try await world.serverRecords()
        #expect(sealed.count == 41 && sealed.values.allSatisfy { $0.data?[RecordCipher.member] != nil && $0.data?.count == 1 })
        await phone.close()
        await laptop.close()
        #expect(world.server.stop() == 0)
        #expect(try Self.files(under: world.dir.appending("data"), holding: "MARKER").isEmpty)
        if let database {
            // A dump of the PostgreSQL database holds the records, sealed.
            let cluster = try await PostgresCluster.started()
            let name = String(database.split(separator: "/").last!.split(separator: "?").first!)
            let dump = try await blocking {
                try runToCompletion(cluster.tool("pg_dump"), ["-h", "127.0.0.1", "-p", String(cluster.port), "-U", cluster.user, name])
            }
            // Record data is bytea, which a plain dump writes as hex.
            func hex(_ text: String) -> String { Hex.encode(Array(text.utf8)) }
            #expect(dump.status == 0 && dump.output.contains(hex("{\"$e2e\":")), "the dump holds the sealed records: \(dump.output.suffix(300))")
            #expect(!dump.output.contains("MARKER") && !dump.output.contains(hex("MARKER")))
        }
        #expect(try Self.files(under: world.dir.path, holding: "MARKER-LAPTOP").contains { $0.hasPrefix("laptop.sqlite") }, "the scan finds what is there")
    }

    @Test func aTamperedCopyOnTheServerGoesToTheQuarantineAndAWrongKeyOpensNothing() async throws {
        let world = try await World()
        try SpaceKeys.create(space: "team", in: world.keys("phone"))
        try SpaceKeys.create(space: "team", in: world.keys("stranger"))
        let phone = try world.device("phone")
        try await phone.put(["title": "secret"], in: "notes", id: "a")
        try await phone.put(["title": "other"], in: "notes", id: "b")
        try await phone.sync()

        // A device with another key of its own opens nothing, and says why.
        let stranger = try world.device("stranger")
        let report = try await stranger.sync()
        #expect(report.quarantined == 2 && report.pulled == 0)
        #expect(try await stranger.records().isEmpty, "nothing unreadable is shown as data")
        let reasons = try await stranger.quarantinedRecords().map(\.reason)
        #expect(reasons.allSatisfy { $0.contains("end-to-end encryption") && $0.contains("which this device does not have") }, "\(reasons)")

        // The operator flips one character of a's ciphertext in the server's file.
        await phone.close()
        #expect(world.server.stop() == 0)
        let db = try Connection(path: world.dir.appending("data/outpost.sqlite"))
        let stored = try #require(try db.queryOne("SELECT data FROM records WHERE id = 'a'", []) { $0.blob(0) })
        var object = try #require(try JSONParser.parse(stored).objectValue)
        var envelope = try #require(object[RecordCipher.member]?.objectValue)
        var ct = Array(try #require(envelope["ct"]?.stringValue).utf8)
        ct[4] = ct[4] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        envelope["ct"] = .string(String(decoding: ct, as: UTF8.self))
        object[RecordCipher.member] = .object(envelope)
        try db.run("UPDATE records SET data = ? WHERE id = 'a'", [.blob(encodeObject(object))])
        db.close()
        try await blocking { try world.server.restart() }

        let fresh = try world.device("fresh", keys: world.keys("phone"))
        let pulled = try await fresh.sync()
        #expect(pulled.quarantined == 1 && pulled.pulled == 1)
        #expect(try await fresh.data("notes", "b") == ["title": "other"])
        #expect(try await fresh.record(in: "notes", id: "a") == nil)
        let quarantined = try #require(try await fresh.quarantinedRecords().first)
        #expect(quarantined.id == "a" && quarantined.reason.contains("does not authenticate"), "\(quarantined.reason)")
        await fresh.close()
        await stranger.close()
    }
    #endif

    @Test func aSealedCopyMovedToAnotherRecordOrRelabelledDoesNotOpen() throws {
        let ring = Keyring(SpaceKey.generate())
        let cipher = RecordCipher(space: "team", ring: ring, clearFields: ["jobs": ["assignee"]])
        let sealed = try cipher.seal(collection: "jobs", id: "j1", data: encodeObject(["title": "Fix", "assignee": "w1"]))
        #expect(sealed["assignee"] == "w1" && sealed["title"] == nil)
        #expect(try decodeObject(cipher.open(collection: "jobs", id: "j1", data: sealed)) == ["title": "Fix", "assignee": "w1"])
        func fails(_ collection: String, _ id: String, _ data: JSONObject, _ reason: String) {
            #expect(throws: RecordCipher.OpenFailure.self) { try cipher.open(collection: collection, id: id, data: data) }
            do { _ = try cipher.open(collection: collection, id: id, data: data) } catch { #expect(error.description.contains(reason), "\(error)") }
        }
        fails("jobs", "j2", sealed, "does not authenticate")
        var reassigned = sealed
        reassigned["assignee"] = "w2"
        fails("jobs", "j1", reassigned, "does not authenticate")
        var extra = sealed
        extra["title"] = "Forged"
        fails("jobs", "j1", extra, "is in clear")
        fails("jobs", "j1", ["title": "Plain"], "not end-to-end encrypted")
        // The additional data is the canonical JSON docs/protocol.md section 9 names.
        #expect(cipher.aad("jobs", "j\"1", "k-1", ["assignee": "w1", "a": 1])
                == JSONValue.array(["outpost-e2e", 1, "team", "jobs", "j\"1", "k-1", .object(["assignee": "w1", "a": 1])]).encoded(canonical: true))
        let other = RecordCipher(space: "elsewhere", ring: ring, clearFields: ["jobs": ["assignee"]])
        #expect(throws: RecordCipher.OpenFailure.self) { try other.open(collection: "jobs", id: "j1", data: sealed) }
    }

    #if canImport(OutpostTestSupport)
    @Test func rotationSealsNewWritesUnderANewKeyAndReencryptAllRewritesTheRest() async throws {
        let world = try await World()
        let first = try SpaceKeys.create(space: "team", in: world.keys("phone"))
        try await SpaceKeys.import(try await SpaceKeys.export(space: "team", from: world.keys("phone"), passphrase: "pw", derivation: Self.quickWrap),
                                   passphrase: "pw", into: world.keys("laptop"))
        let phone = try world.device("phone")
        let laptop = try world.device("laptop")
        for i in 0..<5 { try await phone.put(["i": .number(JSONNumber(Int64(i)))], in: "notes", id: "n\(i)") }
        try await phone.sync()
        try await laptop.sync()

        let second = try await phone.rotateKey()
        #expect(second != first.id && phone.currentKeyId == second)
        try await phone.put(["i": 99], in: "notes", id: "new")
        try await phone.sync()
        // The laptop lacks the new key until it imports the rotated keyring.
        #expect(try await laptop.sync().quarantined == 1)
        try await SpaceKeys.import(try await SpaceKeys.export(space: "team", from: world.keys("phone"), passphrase: "pw", derivation: Self.quickWrap),
                                   passphrase: "pw", into: world.keys("laptop"))
        try await laptop.reloadKeys()
        #expect(try await laptop.retryQuarantined() == 1)
        #expect(try await laptop.data("notes", "new") == ["i": 99])

        // The old copies are still under the first key; reencryptAll rewrites them.
        #expect(try await world.serverRecords().values.filter { $0.data?[RecordCipher.member]?["kid"]?.stringValue == first.id }.count == 5)
        #expect(try await phone.reencryptAll() == 6)
        #expect(try await phone.sync().pushed == 6)
        #expect(try await phone.read { d in try d.db.scalarInt("SELECT count(*) FROM sealed") } == 0, "settled changes keep no sealed form")
        let kids = Set(try await world.serverRecords().values.compactMap { $0.data?[RecordCipher.member]?["kid"]?.stringValue })
        #expect(kids == [second])
        #expect(try await laptop.sync().quarantined == 0)
        #expect(try await laptop.data("notes", "n3") == ["i": 3])
        await phone.close()
        await laptop.close()
    }
    #endif

    @Test func aStoreKeepsTheModeItWasMadeWithAndNeedsItsKeys() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-e2e-mode")
        defer { dir.remove() }
        let keys = FileKeyStore(path: dir.appending("keys"))
        var c = OutpostStore.Configuration(space: "team")
        c.encryption = .spaceKey(keys)
        #expect(throws: EncryptionError.noKeyring(space: "team")) { try OutpostStore(path: dir.appending("a.sqlite"), configuration: c) }
        try SpaceKeys.create(space: "team", in: keys)
        #expect(throws: EncryptionError.self) { try SpaceKeys.create(space: "team", in: keys) }
        let store = try OutpostStore(path: dir.appending("a.sqlite"), configuration: c)
        try await store.put(["t": "x"], in: "notes", id: "1")
        await store.close()
        #expect(throws: EncryptionError.encryptionRequired(space: "team")) {
            try OutpostStore(path: dir.appending("a.sqlite"), configuration: .init(space: "team"))
        }
        let plain = try OutpostStore(path: dir.appending("b.sqlite"), configuration: .init(space: "team"))
        await plain.close()
        #expect(throws: EncryptionError.encryptionRequired(space: "team")) { try OutpostStore(path: dir.appending("b.sqlite"), configuration: c) }
        // The key file is private, and one others can read is refused.
        var info = stat()
        #expect(stat(dir.appending("keys"), &info) == 0 && info.st_mode & 0o777 == 0o600)
        chmod(dir.appending("keys"), 0o644)
        #expect(throws: EncryptionError.self) { try keys.keyring(space: "team") }
    }

    @Test func theQueuedWireFormIsSealedWhenTheEditIsSavedAndSentAgainUnchanged() async throws {
        let dir = try TemporaryDirectory(prefix: "outpost-e2e-queue")
        defer { dir.remove() }
        let keys = FileKeyStore(path: dir.appending("keys"))
        try SpaceKeys.create(space: "team", in: keys)
        var c = OutpostStore.Configuration(space: "team")
        c.encryption = .spaceKey(keys)
        let store = try OutpostStore(path: dir.appending("a.sqlite"), configuration: c)
        try await store.put(["title": "QUEUED-MARKER"], in: "notes", id: "1")
        let sealed = try await store.read { d in try d.db.query("SELECT data FROM sealed", []) { $0.blob(0) } }
        #expect(sealed.count == 1 && !String(decoding: sealed[0], as: UTF8.self).contains("QUEUED-MARKER"))
        let first = try #require(try await store.wireOfHead(RecordKey(collection: "notes", id: "1")))
        let again = try await store.wireOfHead(RecordKey(collection: "notes", id: "1"))
        #expect(first.changeId == (try await store.pendingChanges().first?.changeId))
        #expect(first == again, "one change, one sealed form")
        #expect(first.data?[RecordCipher.member] != nil && first.data?["title"] == nil)
        // A newer edit absorbs the queued one as a new change, with its own sealed form.
        try await store.put(["title": "second"], in: "notes", id: "1")
        let second = try #require(try await store.wireOfHead(RecordKey(collection: "notes", id: "1")))
        #expect(second.changeId != first.changeId && second.data != first.data)
        #expect(try await store.read { d in try d.db.scalarInt("SELECT count(*) FROM sealed WHERE change_id = ?", [.text(second.changeId)]) } == 1)
        await store.close()
    }

    #if canImport(OutpostTestSupport)
    @Test func anEncryptedFileSurvivesAnInterruptedUploadAndResumesWithTheSameSealedBytes() async throws {
        let world = try await MediaWorld.make()
        let keys = FileKeyStore(path: world.dir.appending("keys"))
        try SpaceKeys.create(space: "team", in: keys)
        var c = OutpostStore.Configuration(space: "team")
        c.clientId = "phone"
        c.durability = .normal
        c.clock = world.clock.dates()
        c.backoff = .init(initial: .seconds(60), maximum: .seconds(120))
        c.encryption = .spaceKey(keys)
        let store = try OutpostStore(path: world.dir.appending("phone.sqlite"), configuration: c, transport: HTTPSyncTransport(baseURL: world.proxy.url, token: world.token))
        let uploader = world.uploader(store, attempts: 1)
        let size = 5 * MediaWorld.chunkSize - 10
        let (url, data) = try await world.file("video.mp4", size: size, seed: 8)
        await #expect(throws: MediaError.self) { try await uploader.upload(file: url, contentType: "video/mp4") }
        world.proxy.on("/chunks/2", .cutRequest(afterBodyBytes: 20_000))

        await #expect(throws: MediaError.self) { try await uploader.uploadReference(file: url, contentType: "video/mp4") }
        let pending = try #require(try await uploader.pendingUploads().first)
        #expect(pending.chunksAcknowledged == 2 && pending.contentType == "video/mp4")
        #expect(pending.size == SegmentedCipher.sealedLength(plainLength: Int64(size)), "the server is told the sealed size")
        #expect(pending.mediaId != sha256Hex(data))

        world.clock.advance(121_000)
        let mark = world.proxy.log.count
        let reference = try await uploader.uploadReference(file: url, contentType: "video/mp4")
        let sealedChunks = MediaWorld.chunkCount(Int(SegmentedCipher.sealedLength(plainLength: Int64(size))))
        #expect(world.proxy.chunkPuts(since: mark) == Array(2..<sealedChunks), "the same sealed bytes resume: only the missing chunks")
        #expect(reference.mediaId == pending.mediaId && reference.size == Int64(size) && reference.contentType == "video/mp4")
        #expect(try await uploader.pendingUploads().isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: world.dir.path).filter { !$0.hasPrefix("phone.sqlite") && $0 != "keys" }.sorted()
                == ["data", "video.mp4"], "no sealed copy is written beside the file or the store")

        // The bytes on the server are sealed; a download opens and checks them.
        let copy = world.dir.url.appendingPathComponent("copy.mp4")
        try await uploader.download(reference, to: copy)
        #expect(try await contents(of: copy) == data)
        let sealedCopy = world.dir.url.appendingPathComponent("sealed.bin")
        try await uploader.download(mediaId: reference.mediaId, to: sealedCopy)
        #expect(try await contents(of: sealedCopy) != data)
        // A reference that lies about the key's prefix opens nothing, and leaves nothing.
        var forged = reference
        forged.encryption?.prefix = Base64.encodeURL([UInt8](repeating: 1, count: SegmentedCipher.prefixByteCount))
        let bad = world.dir.url.appendingPathComponent("bad.mp4")
        await #expect(throws: MediaError.self) { try await uploader.download(forged, to: bad) }
        #expect(!FileManager.default.fileExists(atPath: bad.path))
        await store.close()
    }

    @Test func clearFieldsStillDriveAReadRule() async throws {
        let rules = #"""
        {"collections": {"jobs": {"read": "data.assignee == auth.sub || 'supervisor' in auth.roles", "write": "true"}},
         "default": {"read": "true", "write": "true"}}
        """#
        let dir = try TemporaryDirectory(prefix: "outpost-e2e-rules")
        let path = dir.appending("rules.json")
        try Data(rules.utf8).write(to: URL(fileURLWithPath: path))
        let world = try await World(arguments: ["--rules", path])
        defer { dir.remove() }
        try SpaceKeys.create(space: "team", in: world.keys("office"))
        let shared = world.keys("office")
        let boss = try world.server.token(sub: "boss", spaces: ["team"], claims: [#"roles=["supervisor"]"#])
        let office = try world.device("office", keys: shared, token: boss, clear: ["jobs": ["assignee"]])
        let w1 = try world.device("w1", keys: shared, token: try world.server.token(sub: "w1", spaces: ["team"]), clear: ["jobs": ["assignee"]])
        try await office.put(["title": "Fix pump", "assignee": "w1"], in: "jobs", id: "j1")
        try await office.put(["title": "Paint wall", "assignee": "w2"], in: "jobs", id: "j2")
        try await office.sync()
        try await w1.sync()
        #expect(try await w1.records(in: "jobs").map(\.id) == ["j1"])
        #expect(try await w1.data("jobs", "j1") == ["title": "Fix pump", "assignee": "w1"])
        let onServer = try #require(try await world.serverRecords(token: boss)["j1"]?.data)
        #expect(onServer["assignee"] == "w1" && onServer["title"] == nil)
        await office.close()
        await w1.close()
    }
    #endif
}

extension OutpostStore {
    /// The first unsettled edit of `key` as a push would carry it (before any sync, so
    /// without a base).
    func wireOfHead(_ key: RecordKey) throws -> Change? {
        try read { d in
            guard let head = try d.model(key)?.head else { return nil }
            let change = Change(changeId: head.changeId, collection: key.collection, id: key.id, op: head.body.deleted ? .delete : .put,
                                data: try head.body.data.map(decodeObject), baseVersion: nil, clientTime: head.clientTime)
            return try d.wire(change)
        }
    }
}
