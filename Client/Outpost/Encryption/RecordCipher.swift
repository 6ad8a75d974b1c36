import OutpostCore
import OutpostCrypto
import Synchronization

/// Seals the data of puts and opens pulled copies in an end-to-end encrypted space
/// (docs/encryption.md, "Records").
///
/// The wire form of a sealed record's data is an object:
///
/// ```
/// {"$e2e": {"v": 1, "kid": "k-…", "nonce": "<12 bytes, base64url>", "ct": "<base64url>"},
///  "assignee": "u1"}                       ← the collection's clear fields, if any
/// ```
///
/// `ct` is AES-256-GCM of the record's JSON without its clear fields, under the key `kid`
/// names, with a random 96-bit nonce. The additional data is the canonical JSON of
/// `["outpost-e2e", 1, space, collection, id, kid, {clear fields}]`, so a sealed copy
/// cannot be moved to another space or record, relabelled with another key id, or shown
/// with other clear values than the ones it was sealed with.
///
/// Shared by the store actor (sealing) and the pull's page preparation (opening, off the
/// actor): the key contexts sit behind a lock.
final class RecordCipher: Sendable {
    /// The member that holds the sealed part.
    static let member = "$e2e"

    let space: String
    /// Per collection, the fields left in clear beside the sealed part.
    let clearFields: [String: Set<String>]
    private let state: Mutex<State>

    private struct State: ~Copyable {
        var ring: Keyring
        /// One reusable AES-GCM context per key id.
        var contexts: [String: AESGCMKey] = [:]

        init(ring: Keyring) {
            self.ring = ring
        }

        mutating func context(_ id: String) throws -> AESGCMKey? {
            if let context = contexts[id] { return context }
            guard let key = ring.keys[id] else { return nil }
            let context = try AESGCMKey(key.bytes)
            contexts[id] = context
            return context
        }
    }

    /// `["outpost-e2e",1,"<space>",`
    private let aadPrefix: [UInt8]

    init(space: String, ring: Keyring, clearFields: [String: Set<String>]) {
        self.space = space
        var prefix = Array("[\"outpost-e2e\",1,".utf8)
        JSONWriter.appendString(space, to: &prefix)
        prefix.append(UInt8(ascii: ","))
        aadPrefix = prefix
        self.clearFields = clearFields
        state = Mutex(State(ring: ring))
    }

    /// The id of the key new writes use.
    var currentKeyId: String { state.withLock { $0.ring.current } }

    /// The bytes of key `id`, when the keyring has it (for sealing and opening media).
    func key(_ id: String) -> [UInt8]? {
        state.withLock { $0.ring.keys[id]?.bytes }
    }

    /// Replaces the keyring (after a rotation or an import).
    func use(_ ring: Keyring) {
        state.withLock { $0 = State(ring: ring) }
    }

    /// Why a copy did not open; the quarantine shows `description`.
    struct OpenFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// The wire data of a put whose content is `data` (compact JSON of an object), sealed
    /// under `nonce` (random; given only to make the format's fixtures).
    func seal(collection: String, id: String, data: [UInt8], nonce: [UInt8] = SecureRandom.bytes(AESGCM.nonceByteCount)) throws -> JSONObject {
        let clear = clearFields[collection] ?? []
        var plaintext = data
        var clearPart = JSONObject()
        if !clear.isEmpty {
            guard case .object(let object) = try JSONParser.parse(data) else { throw OutpostError.encoding("a record is a JSON object") }
            var sealedPart = JSONObject()
            for (key, value) in object.elements {
                if clear.contains(key) { clearPart[key] = value } else { sealedPart[key] = value }
            }
            plaintext = encodeObject(sealedPart)
        }
        let (kid, sealed) = try state.withLock { s -> (String, [UInt8]) in
            let kid = s.ring.current
            guard let context = try s.context(kid) else { throw EncryptionError.noKeyring(space: space) }
            return (kid, try context.seal(plaintext, nonce: nonce, aad: aad(collection, id, kid, clearPart)))
        }
        var wire = clearPart
        wire[Self.member] = .object(["v": 1, "kid": .string(kid), "nonce": .string(Base64.encodeURL(nonce)), "ct": .string(Base64.encodeURL(sealed))])
        return wire
    }

    /// The content of a pulled copy's wire `data`, as compact JSON; throws `OpenFailure`
    /// with a reason the app can read when it is not a sealed copy this device can open.
    func open(collection: String, id: String, data: JSONObject) throws(OpenFailure) -> [UInt8] {
        guard case .object(let envelope)? = data[Self.member] else {
            throw OpenFailure(description: "not end-to-end encrypted, in a space that is: written by a device without the space key, or by the server")
        }
        guard envelope["v"]?.int64Value == 1 else { throw OpenFailure(description: "sealed with an unknown version \(envelope["v"].map { String(decoding: $0.encoded(), as: UTF8.self) } ?? "(none)")") }
        guard let kid = envelope["kid"]?.stringValue, let nonce = envelope["nonce"]?.stringValue.flatMap(Base64.decodeURL),
              let ct = envelope["ct"]?.stringValue.flatMap(Base64.decodeURL), nonce.count == AESGCM.nonceByteCount else {
            throw OpenFailure(description: "the sealed part is malformed (kid, nonce of 12 bytes and ct are required)")
        }
        var clearPart = JSONObject()
        if data.count > 1 {
            clearPart = data
            clearPart[Self.member] = nil
            let allowed = clearFields[collection] ?? []
            if let stray = clearPart.keys.first(where: { !allowed.contains($0) }) {
                throw OpenFailure(description: "field \"\(stray)\" is in clear but this app keeps it sealed in \(collection)")
            }
        }
        let opened: [UInt8]
        do {
            opened = try state.withLock { s -> [UInt8] in
                guard let context = try s.context(kid) else { throw OpenFailure(description: "sealed under key \(kid), which this device does not have (import the space's keys)") }
                return try context.open(ct, nonce: nonce, aad: aad(collection, id, kid, clearPart))
            }
        } catch let failure as OpenFailure {
            throw failure
        } catch CryptoError.authenticationFailed {
            throw OpenFailure(description: "does not authenticate under key \(kid): altered on the server or on the way, moved from another record, or another key under the same id")
        } catch {
            throw OpenFailure(description: "cannot open: \(error)")
        }
        if clearPart.isEmpty { return opened }
        guard case .object(var object) = try? JSONParser.parse(opened) else { throw OpenFailure(description: "the opened content is not a JSON object") }
        for (key, value) in clearPart.elements { object[key] = value }
        return encodeObject(object)
    }

    /// The canonical JSON of `["outpost-e2e", 1, space, collection, id, kid, {clear}]`,
    /// written directly (it is made for every record sealed or opened).
    func aad(_ collection: String, _ id: String, _ kid: String, _ clear: JSONObject) -> [UInt8] {
        var bytes = aadPrefix
        bytes.reserveCapacity(bytes.count + collection.utf8.count + id.utf8.count + kid.utf8.count + 16)
        JSONWriter.appendString(collection, to: &bytes)
        bytes.append(UInt8(ascii: ","))
        JSONWriter.appendString(id, to: &bytes)
        bytes.append(UInt8(ascii: ","))
        JSONWriter.appendString(kid, to: &bytes)
        bytes.append(UInt8(ascii: ","))
        JSONWriter.append(clear, to: &bytes, canonical: true)
        bytes.append(UInt8(ascii: "]"))
        return bytes
    }
}
