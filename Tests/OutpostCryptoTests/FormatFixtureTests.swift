import Foundation
import OutpostCore
import Testing
@testable import Outpost
@testable import OutpostCrypto

/// The fixtures of docs/encryption.md's formats: a passphrase export of a keyring, a sealed
/// record and a sealed media stream with the reference a record keeps of it, made from the
/// fixed inputs below (every salt, nonce, key and prefix fixed, so every byte is) and
/// committed under Fixtures/. The tests open the committed bytes through the SDK's own
/// paths, the same on every platform, and check that the generator still makes exactly
/// them. Tests/encryption-spec/open_fixtures.py opens the same files from the spec alone.
///
/// To make them again after a deliberate change of a format (then the spec changes too):
/// `make crypto-fixtures` (OUTPOST_WRITE_CRYPTO_FIXTURES=1 and this suite's generator test).
enum CryptoFixtures {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    static func bytes(_ first: UInt8, _ count: Int) -> [UInt8] { (0..<count).map { first &+ UInt8($0) } }

    // MARK: The inputs

    static let passphrase = "correct horse battery staple"
    static let space = "field-team"
    /// A keyring of two keys, the newer current, as after one rotation.
    static let oldKey = try! SpaceKey(id: "k-0f1e2d3c4b5a6978", bytes: bytes(0x20, 32))
    static let key = try! SpaceKey(id: "k-0123456789abcdef", bytes: bytes(0x00, 32))
    static let keyring = try! Keyring(current: key.id, keys: [oldKey, key])
    static let salt = bytes(0xa0, 16), wrapNonce = bytes(0xb0, 12), transport = bytes(0xc0, 32), ringNonce = bytes(0xd0, 12)

    static let collection = "jobs", recordId = "0190f2b4-7c1e-7a3b-9d2f-5e8c1a0b3d47"
    static let clearFields: [String: Set<String>] = ["jobs": ["assignee"]]
    /// The record as the app saved it, compact JSON; `assignee` stays in clear.
    static let record = #"{"title":"Pump 7 inspection","assignee":"u1","notes":"Valve replaced; pressure holds at 4.2 bar.","done":true}"#
    static let recordNonce = bytes(0xe0, 12)

    /// 2 full segments and a short last one: bytes i mod 251.
    static let mediaPlaintext = (0..<(2 * SegmentedCipher.defaultSegmentSize + 1000)).map { UInt8($0 % 251) }
    static let mediaPrefix = bytes(0xf0, SegmentedCipher.prefixByteCount)
    static let mediaContentType = "image/jpeg", mediaFilename = "pump-7.jpg"

    // MARK: The generator

    /// Every fixture file's bytes, by name.
    static func generate() throws -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        func line(_ value: JSONValue) -> [UInt8] { value.encoded(canonical: true) + [0x0A] }

        // The export, as `outpost key export` prints it.
        let export = try SpaceKeys.export(keyring, space: space, passphrase: passphrase, function: PassphraseWrap.defaultScrypt,
                                          salt: salt, nonce: wrapNonce, transport: transport, ringNonce: ringNonce)
        files["keyring-export.json"] = Array(export.utf8) + [0x0A]

        // The record as a pull page carries it, with where it is.
        let cipher = RecordCipher(space: space, ring: keyring, clearFields: clearFields)
        let data = try cipher.seal(collection: collection, id: recordId, data: Array(record.utf8), nonce: recordNonce)
        files["sealed-record.json"] = line(.object(["space": .string(space), "collection": .string(collection), "id": .string(recordId),
                                                    "data": .object(data)]))

        // The sealed stream, and the reference a record keeps of it.
        let encryptor = try SegmentedCipher.Encryptor(key: key.bytes, prefix: mediaPrefix, aad: MediaUploader.mediaAAD(space: space, kid: key.id))
        var sealed: [UInt8] = []
        try mediaPlaintext.withUnsafeBytes { try encryptor.update($0) { sealed.append(contentsOf: $0) } }
        try encryptor.finish { sealed.append(contentsOf: $0) }
        files["sealed-media.bin"] = sealed
        files["media-reference.json"] = line(.object([
            "mediaId": .string(SHA256.hex(sealed)), "contentType": .string(mediaContentType), "size": .number(JSONNumber(Int64(mediaPlaintext.count))),
            "filename": .string(mediaFilename),
            "encryption": .object(["kid": .string(key.id), "prefix": .string(Base64.encodeURL(mediaPrefix)),
                                   "segmentSize": .number(JSONNumber(Int64(SegmentedCipher.defaultSegmentSize)))]),
        ]))

        // What a reader knows beforehand (the passphrase) and what it must find.
        files["inputs.json"] = line(.object([
            "passphrase": .string(passphrase),
            "keyring": .object(["space": .string(space), "current": .string(key.id),
                                "keys": .object(JSONObject([oldKey, key].map { ($0.id, JSONValue.string(Base64.encodeURL($0.bytes))) }))]),
            "record": .object(["clearFields": .array(clearFields[collection]!.sorted().map { .string($0) }),
                               "content": try JSONParser.parse(Array(record.utf8))]),
            "media": .object(["length": .number(JSONNumber(Int64(mediaPlaintext.count))), "byte": "i % 251",
                              "sha256": .string(SHA256.hex(mediaPlaintext))]),
        ]))
        return files
    }

    static func committed(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: directory.appendingPathComponent(name)))
    }
}

@Suite struct FormatFixtureTests {
    /// Every committed fixture is what the generator makes from the fixed inputs: the
    /// formats have not changed. With OUTPOST_WRITE_CRYPTO_FIXTURES=1 the generator writes
    /// them first.
    @Test func theGeneratorMakesTheCommittedBytes() throws {
        let files = try CryptoFixtures.generate()
        if ProcessInfo.processInfo.environment["OUTPOST_WRITE_CRYPTO_FIXTURES"] == "1" {
            try FileManager.default.createDirectory(at: CryptoFixtures.directory, withIntermediateDirectories: true)
            for (name, bytes) in files { try Data(bytes).write(to: CryptoFixtures.directory.appendingPathComponent(name)) }
        }
        for (name, bytes) in files.sorted(by: { $0.key < $1.key }) {
            let committed = try CryptoFixtures.committed(name)
            #expect(committed == bytes, "\(name): the generator makes \(bytes.count) bytes that differ from the committed \(committed.count)")
        }
    }

    /// The export opens through `SpaceKeys.import`, the path an app takes on any platform,
    /// into a key file, and holds the keyring it was made of.
    @Test func thePassphraseExportImports() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-fixture-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let keys = FileKeyStore(path: dir.appendingPathComponent("imported.keys").path)
        let text = String(decoding: try CryptoFixtures.committed("keyring-export.json"), as: UTF8.self)
        await #expect(throws: EncryptionError.wrongPassphrase) { try await SpaceKeys.import(text, passphrase: "Correct horse battery staple", into: keys) }
        #expect(try keys.keyring(space: CryptoFixtures.space) == nil)
        #expect(try await SpaceKeys.import(text, passphrase: CryptoFixtures.passphrase, into: keys) == CryptoFixtures.space)
        #expect(try keys.keyring(space: CryptoFixtures.space) == CryptoFixtures.keyring)
    }

    /// The sealed record opens through `RecordCipher`, as a pulled copy does, to the record
    /// the app saved; moved to another id it does not.
    @Test func theSealedRecordOpens() throws {
        let fixture = try JSONParser.parse(try CryptoFixtures.committed("sealed-record.json"))
        guard case .object(let data)? = fixture["data"], let space = fixture["space"]?.stringValue,
              let collection = fixture["collection"]?.stringValue, let id = fixture["id"]?.stringValue else {
            Issue.record("sealed-record.json is not {space, collection, id, data}")
            return
        }
        #expect(data["assignee"] == "u1", "the clear field travels in clear")
        let cipher = RecordCipher(space: space, ring: CryptoFixtures.keyring, clearFields: CryptoFixtures.clearFields)
        let opened = try cipher.open(collection: collection, id: id, data: data)
        #expect(try JSONParser.parse(opened) == JSONParser.parse(Array(CryptoFixtures.record.utf8)))
        #expect(throws: RecordCipher.OpenFailure.self) { try cipher.open(collection: collection, id: id + "x", data: data) }
    }

    /// The sealed stream is what its reference names (`mediaId` is its SHA-256) and opens,
    /// segment by segment as a download does, to the file's bytes.
    @Test func theSealedMediaStreamOpens() throws {
        let sealed = try CryptoFixtures.committed("sealed-media.bin")
        let reference = try JSONDecoder().decode(MediaReference.self, from: Data(try CryptoFixtures.committed("media-reference.json")))
        let encryption = try #require(reference.encryption)
        #expect(reference.mediaId == SHA256.hex(sealed))
        #expect(Int64(sealed.count) == SegmentedCipher.sealedLength(plainLength: reference.size, segmentSize: encryption.segmentSize))
        let key = try #require(CryptoFixtures.keyring.keys[encryption.kid])
        let decryptor = try SegmentedCipher.Decryptor(key: key.bytes, prefix: try #require(Base64.decodeURL(encryption.prefix)),
                                                      aad: MediaUploader.mediaAAD(space: CryptoFixtures.space, kid: encryption.kid),
                                                      segmentSize: encryption.segmentSize)
        var opened: [UInt8] = []
        // In pieces that do not line up with the segments, as a download's arrive.
        var offset = 0
        while offset < sealed.count {
            let end = min(sealed.count, offset + 50_000)
            try sealed[offset..<end].withUnsafeBytes { try decryptor.update($0) { opened.append(contentsOf: $0) } }
            offset = end
        }
        try decryptor.finish { opened.append(contentsOf: $0) }
        #expect(opened == CryptoFixtures.mediaPlaintext)
        #expect(Int64(opened.count) == reference.size && reference.contentType == CryptoFixtures.mediaContentType)
    }
}
