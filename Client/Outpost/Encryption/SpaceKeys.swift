import Foundation
import OutpostCore
import OutpostCrypto

// The keys of end-to-end encrypted spaces (docs/encryption.md, "Keys").
//
// A space has a keyring: one or more 256-bit keys, each under a key id, and the id of the
// one new writes use. Old keys stay in the ring so that copies written under them still
// open after a rotation. A `KeyStore` keeps keyrings on the device; they never travel to
// the server. Moving a keyring to another device goes through `SpaceKeys.export`, which
// wraps it under a passphrase, and `SpaceKeys.import`.

/// One 256-bit space key and its id.
public struct SpaceKey: Sendable, Hashable {
    /// The key id: names the key in every record it encrypts (`"kid"` of the wire form).
    public let id: String
    /// The 32 key bytes.
    public let bytes: [UInt8]

    /// A key from its parts. The id is 1 to 64 characters of `[A-Za-z0-9_.-]`.
    public init(id: String, bytes: [UInt8]) throws {
        guard SpaceKey.isValidID(id) else { throw EncryptionError.invalidKeyring("key id \"\(id)\" is not 1 to 64 characters of [A-Za-z0-9_.-]") }
        guard bytes.count == AESGCM.keyByteCount else { throw EncryptionError.invalidKeyring("key \(id) is \(bytes.count) bytes, not 32") }
        self.id = id
        self.bytes = bytes
    }

    /// A new random key with a random id (`k-` and 16 hex digits).
    public static func generate() -> SpaceKey {
        // Force-try: the generated id and length are valid by construction.
        try! SpaceKey(id: "k-" + Hex.encode(SecureRandom.bytes(8)), bytes: SecureRandom.bytes(AESGCM.keyByteCount))
    }

    static func isValidID(_ id: String) -> Bool {
        (1...64).contains(id.utf8.count) && id.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x5F || c == 0x2E || c == 0x2D
        }
    }
}

/// The keys of one space: every key it has used, and the one new writes use.
public struct Keyring: Sendable, Hashable {
    /// The id of the key new writes use.
    public private(set) var current: String
    /// Every key, by id.
    public private(set) var keys: [String: SpaceKey]

    /// A keyring of one key.
    public init(_ key: SpaceKey) {
        current = key.id
        keys = [key.id: key]
    }

    /// A keyring of `keys` whose writes use `current`.
    public init(current: String, keys: [SpaceKey]) throws {
        var byId: [String: SpaceKey] = [:]
        for key in keys {
            guard byId.updateValue(key, forKey: key.id) == nil else { throw EncryptionError.invalidKeyring("key id \(key.id) appears twice") }
        }
        guard byId[current] != nil else { throw EncryptionError.invalidKeyring("the current key \(current) is not in the keyring") }
        self.current = current
        self.keys = byId
    }

    /// The key new writes use.
    public var currentKey: SpaceKey { keys[current]! }

    /// Adds a new random key and makes it current (rotation): new writes use it, copies
    /// under the old keys still open. Returns the new key.
    @discardableResult
    public mutating func rotate() -> SpaceKey {
        var key = SpaceKey.generate()
        while keys[key.id] != nil { key = SpaceKey.generate() }
        keys[key.id] = key
        current = key.id
        return key
    }

    /// The keyring with the keys of `other` added (for an import onto a device that has
    /// keys already); `other`'s current key becomes current. Two keys under one id that
    /// differ are refused: one of the two devices would misread the other's records.
    public func merging(_ other: Keyring) throws -> Keyring {
        var merged = self
        for (id, key) in other.keys {
            if let mine = merged.keys[id], mine != key { throw EncryptionError.invalidKeyring("key id \(id) names another key on this device") }
            merged.keys[id] = key
        }
        merged.current = other.current
        return merged
    }

    /// `{"current":"k1","keys":{"k1":"<base64url>"}}`, canonical.
    var json: JSONValue {
        .object(["current": .string(current),
                 "keys": .object(JSONObject(keys.values.sorted { $0.id < $1.id }.map { ($0.id, JSONValue.string(Base64.encodeURL($0.bytes))) }))])
    }

    init(json: JSONValue) throws {
        guard let current = json["current"]?.stringValue, case .object(let keys)? = json["keys"] else {
            throw EncryptionError.invalidKeyring("a keyring is {\"current\": id, \"keys\": {id: base64url}}")
        }
        try self.init(current: current, keys: keys.elements.map { id, value in
            guard let text = value.stringValue, let bytes = Base64.decodeURL(text) else { throw EncryptionError.invalidKeyring("key \(id) is not base64url") }
            return try SpaceKey(id: id, bytes: bytes)
        })
    }
}

/// Where a device keeps its keyrings. Implementations: `FileKeyStore` (a file of mode 0600)
/// everywhere, and `KeychainKeyStore` (Encryption/KeychainKeyStore.swift) on Apple
/// platforms.
public protocol KeyStore: Sendable {
    /// The keyring of `space`; nil when the device has none.
    func keyring(space: String) throws -> Keyring?
    /// Stores the keyring of `space`, replacing the one there.
    func save(_ keyring: Keyring, space: String) throws
}

/// Failures of end-to-end encryption. A record that fails to open is not one of them: it
/// goes to the quarantine with the reason (`OutpostStore.quarantinedRecords()`).
public enum EncryptionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The store is configured for encryption but the key store has no keyring for its space.
    case noKeyring(space: String)
    /// The store file was restored from a backup of another device (whose client id it
    /// had is given), and its space's keys did not come with it: they never leave the
    /// device they were made or imported on. Import them (`SpaceKeys.import`) from a
    /// device that has them; the store's queued edits wait meanwhile.
    case keysNotOnThisDevice(space: String, restoredFrom: String)
    /// The store file was written with encryption and is opened without it (or the reverse
    /// would push plaintext: see `OutpostStore.init`).
    case encryptionRequired(space: String)
    /// A keyring, key or key file is malformed.
    case invalidKeyring(String)
    /// The passphrase does not open the exported keyring (or the export was altered).
    case wrongPassphrase
    /// The export is for another space than the one it is imported into.
    case spaceMismatch(exported: String, wanted: String)
    /// The key file cannot be read or written, or is readable by others.
    case keyFile(String)

    public var description: String {
        switch self {
        case .noKeyring(let s): "there is no key for space \(s) on this device: create one (outpost key create) or import one (outpost key import)"
        case .keysNotOnThisDevice(let s, let from):
            "this store was restored from a backup of another device (client \(from)) and the keys of space \(s) are not on this device: import them from a device that has them (SpaceKeys.import, outpost key import); the store's queued edits are kept"
        case .encryptionRequired(let s): "the store of space \(s) is end-to-end encrypted: open it with Configuration.encryption set"
        case .invalidKeyring(let m): "invalid keyring: \(m)"
        case .wrongPassphrase: "wrong passphrase: it does not open this exported key (or the export was altered)"
        case .spaceMismatch(let e, let w): "the exported key is for space \(e), not \(w)"
        case .keyFile(let m): m
        }
    }
}

/// Keyrings in one JSON file of mode 0600 (`{"v":1,"spaces":{space: keyring}}`), written
/// whole to a temporary file of mode 0600, synced and renamed into place, and the directory
/// synced, so a crash or a power loss leaves the old file or the new one. A file that
/// others can read is refused, as ssh refuses a key file: its keys may already be known to
/// someone else.
public struct FileKeyStore: KeyStore {
    /// The file.
    public let path: String

    public init(path: String) {
        self.path = path
    }

    public func keyring(space: String) throws -> Keyring? {
        try read()[space]
    }

    public func save(_ keyring: Keyring, space: String) throws {
        var all = try read()
        all[space] = keyring
        let document = JSONValue.object(["v": 1, "spaces": .object(JSONObject(all.keys.sorted().map { ($0, all[$0]!.json) }))])
        do { try Platform.writeDurably(document.encoded(canonical: true), to: path, mode: 0o600) } catch {
            throw EncryptionError.keyFile("cannot write \(path): \(error)")
        }
    }

    private func read() throws -> [String: Keyring] {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return [:] }
            throw EncryptionError.keyFile("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & 0o077 == 0 else {
            throw EncryptionError.keyFile("the key file \(path) is readable by others (mode \(String(info.st_mode & 0o777, radix: 8))); chmod 600 it")
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw EncryptionError.keyFile("cannot read \(path)") }
        let document: JSONValue
        do { document = try JSONParser.parse([UInt8](data)) } catch { throw EncryptionError.keyFile("the key file \(path) is not JSON: \(error)") }
        guard document["v"]?.int64Value == 1, case .object(let spaces)? = document["spaces"] else {
            throw EncryptionError.keyFile("the key file \(path) is not an Outpost key file ({\"v\":1,\"spaces\":{…}})")
        }
        var out: [String: Keyring] = [:]
        for (space, ring) in spaces.elements { out[space] = try Keyring(json: ring) }
        return out
    }
}


/// How `SpaceKeys.export` derives the wrapping key from the passphrase. The export records
/// it, and `SpaceKeys.import` spends the same again.
public enum KeyDerivation: Sendable, Hashable {
    /// scrypt, N = 2^17, r = 8, p = 1: 128 MiB of memory (128 × r × N bytes) and about a
    /// second of one core, for the export and again for each import. The default. App
    /// extensions may be stopped for that memory (a widget or a share extension has far
    /// less): import in the app, and share the keyring with the extensions
    /// (`KeychainKeyStore.accessGroup`).
    case scrypt
    /// PBKDF2-HMAC-SHA256, 600,000 iterations: a few hundred bytes of memory and a similar
    /// time, for devices that cannot spare scrypt's memory.
    case pbkdf2SHA256
}

/// Creating, exporting, importing and rotating a space's keys in a `KeyStore`.
public enum SpaceKeys {
    /// Creates the first key of `space` in `keys`. Refuses when the device has a keyring for
    /// it already: replacing it would lose the keys of everything written so far.
    @discardableResult
    public static func create(space: String, in keys: any KeyStore) throws -> SpaceKey {
        guard try keys.keyring(space: space) == nil else { throw EncryptionError.invalidKeyring("space \(space) has keys on this device already (rotate them instead)") }
        let key = SpaceKey.generate()
        try keys.save(Keyring(key), space: space)
        return key
    }

    /// Adds a new current key to `space`'s keyring (see `Keyring.rotate`). Other devices
    /// need the new keyring (export and import it) to open what this one writes next.
    @discardableResult
    public static func rotate(space: String, in keys: any KeyStore) throws -> SpaceKey {
        guard var ring = try keys.keyring(space: space) else { throw EncryptionError.noKeyring(space: space) }
        let key = ring.rotate()
        try keys.save(ring, space: space)
        return key
    }

    /// The keyring of `space` wrapped under `passphrase`, as one line of text to move to
    /// another device: `{"outpost":"keyring","v":1,"space":…,"kdf":…,"salt":…,"nonce":…,
    /// "sealed":…,"ringNonce":…,"ring":…}`. A random 256-bit transport key seals the
    /// keyring (AES-256-GCM, `ring`); the transport key is wrapped under a key derived from
    /// the passphrase by scrypt (N = 2^17, r = 8, p = 1; or PBKDF2-HMAC-SHA256, 600,000
    /// iterations), then AES-256-GCM (`sealed`). Both have the space as additional data,
    /// so an export cannot be relabelled for another space.
    ///
    /// The key derivation runs on a thread of its own, never the caller's (it takes about a
    /// second, and scrypt 128 MiB: see `KeyDerivation`).
    public static func export(space: String, from keys: any KeyStore, passphrase: String, derivation: KeyDerivation = .scrypt) async throws -> String {
        try await MediaFiles.run(on: DispatchQueue(label: "outpost.keys.export")) {
            try exportNow(space: space, from: keys, passphrase: passphrase, derivation: derivation)
        }
    }

    private static func exportNow(space: String, from keys: any KeyStore, passphrase: String, derivation: KeyDerivation) throws -> String {
        let function = derivation == .scrypt ? PassphraseWrap.defaultScrypt : PassphraseWrap.defaultPBKDF2
        guard let ring = try keys.keyring(space: space) else { throw EncryptionError.noKeyring(space: space) }
        guard !passphrase.isEmpty else { throw EncryptionError.invalidKeyring("the passphrase is empty") }
        return try export(ring, space: space, passphrase: passphrase, function: function,
                          salt: SecureRandom.bytes(PassphraseWrap.saltByteCount), nonce: SecureRandom.bytes(AESGCM.nonceByteCount),
                          transport: SecureRandom.bytes(AESGCM.keyByteCount), ringNonce: SecureRandom.bytes(AESGCM.nonceByteCount))
    }

    /// The export of `ring` with every random input given: a function of its inputs, which
    /// the format's fixtures are made with (docs/encryption.md, "Formats").
    static func export(_ ring: Keyring, space: String, passphrase: String, function: PassphraseWrap.Function,
                       salt: [UInt8], nonce: [UInt8], transport: [UInt8], ringNonce: [UInt8]) throws -> String {
        let wrap = try PassphraseWrap.wrap(key: transport, passphrase: passphrase, context: context(space), function: function, salt: salt, nonce: nonce)
        let sealedRing = try AESGCM.seal(ring.json.encoded(canonical: true), key: transport, nonce: ringNonce, aad: context(space))
        let kdf: JSONValue
        switch wrap.function {
        case .scrypt(let n, let r, let p): kdf = .object(["name": "scrypt", "n": .number(JSONNumber(Int64(n))), "r": .number(JSONNumber(Int64(r))), "p": .number(JSONNumber(Int64(p)))])
        case .pbkdf2SHA256(let iterations): kdf = .object(["name": "pbkdf2-sha256", "iterations": .number(JSONNumber(Int64(iterations)))])
        }
        let document: JSONValue = .object(["outpost": "keyring", "v": 1, "space": .string(space), "kdf": kdf,
                                           "salt": .string(Base64.encodeURL(wrap.salt)), "nonce": .string(Base64.encodeURL(wrap.nonce)),
                                           "sealed": .string(Base64.encodeURL(wrap.sealed)),
                                           "ringNonce": .string(Base64.encodeURL(ringNonce)), "ring": .string(Base64.encodeURL(sealedRing))])
        return String(decoding: document.encoded(canonical: true), as: UTF8.self)
    }

    /// Opens an export made by `export` with `passphrase` and adds its keys to the device's
    /// keyring of its space (its current key becomes current). Returns the space.
    ///
    /// The key derivation runs on a thread of its own, never the caller's, and costs what
    /// the export's derivation names (`KeyDerivation`: 128 MiB for the default scrypt;
    /// parameters asking for more than 1 GiB are refused before any is spent).
    ///
    /// - Throws: `EncryptionError.wrongPassphrase` when the passphrase does not open it;
    ///   `spaceMismatch` when `space` is given and the export is for another.
    @discardableResult
    public static func `import`(_ exported: String, passphrase: String, into keys: any KeyStore, space wanted: String? = nil) async throws -> String {
        try await MediaFiles.run(on: DispatchQueue(label: "outpost.keys.import")) {
            try importNow(exported, passphrase: passphrase, into: keys, space: wanted)
        }
    }

    private static func importNow(_ exported: String, passphrase: String, into keys: any KeyStore, space wanted: String?) throws -> String {
        let document: JSONValue
        do { document = try JSONParser.parse(exported.trimmingCharacters(in: .whitespacesAndNewlines)) } catch {
            throw EncryptionError.invalidKeyring("the export is not JSON: \(error)")
        }
        func bytes(_ name: String) -> [UInt8]? { document[name]?.stringValue.flatMap(Base64.decodeURL) }
        guard document["outpost"]?.stringValue == "keyring", document["v"]?.int64Value == 1, let space = document["space"]?.stringValue,
              let salt = bytes("salt"), let nonce = bytes("nonce"), let sealed = bytes("sealed"), let ringNonce = bytes("ringNonce"),
              let sealedRing = bytes("ring"), let kdf = document["kdf"] else {
            throw EncryptionError.invalidKeyring("not an Outpost keyring export")
        }
        if let wanted, wanted != space { throw EncryptionError.spaceMismatch(exported: space, wanted: wanted) }
        let function: PassphraseWrap.Function
        switch kdf["name"]?.stringValue {
        case "scrypt":
            guard let n = kdf["n"]?.int64Value, let r = kdf["r"]?.int64Value, let p = kdf["p"]?.int64Value, n > 0, r > 0, p > 0 else {
                throw EncryptionError.invalidKeyring("the export's scrypt parameters are malformed")
            }
            function = .scrypt(n: UInt64(n), r: UInt64(r), p: UInt64(p))
        case "pbkdf2-sha256":
            guard let iterations = kdf["iterations"]?.int64Value, iterations > 0, iterations <= Int64(Int32.max) else {
                throw EncryptionError.invalidKeyring("the export's PBKDF2 parameters are malformed")
            }
            function = .pbkdf2SHA256(iterations: Int(iterations))
        default:
            throw EncryptionError.invalidKeyring("the export's key derivation \(kdf["name"]?.stringValue ?? "?") is not scrypt or pbkdf2-sha256")
        }
        let wrap = PassphraseWrap(function: function, salt: salt, nonce: nonce, sealed: sealed)
        let opened: [UInt8]
        do {
            let transport = try wrap.unwrap(passphrase: passphrase, context: context(space))
            opened = try AESGCM.open(sealedRing, key: transport, nonce: ringNonce, aad: context(space))
        } catch CryptoError.authenticationFailed {
            throw EncryptionError.wrongPassphrase
        } catch let error as CryptoError {
            throw EncryptionError.invalidKeyring("the export is refused: \(error)")
        }
        let imported: Keyring
        do { imported = try Keyring(json: try JSONParser.parse(opened)) } catch let e as EncryptionError { throw e } catch {
            throw EncryptionError.invalidKeyring("the export holds no keyring")
        }
        let ring = try keys.keyring(space: space).map { try $0.merging(imported) } ?? imported
        try keys.save(ring, space: space)
        return space
    }

    private static func context(_ space: String) -> [UInt8] {
        Array("outpost-keyring/1\u{0}\(space)".utf8)
    }
}
