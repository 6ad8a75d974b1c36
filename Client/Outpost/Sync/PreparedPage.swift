import OutpostCore

/// A pulled record ready for storage: its data already encoded as the compact JSON bytes
/// the store keeps.
struct PreparedRecord: Sendable {
    let key: RecordKey
    let version: Version
    let body: Body
    let updatedAt: Int64
    let updatedBy: String
    let clientTime: Int64?
    let lineage: Version?
    let sameAs: Version?
    let resolved: Resolved?

    init(_ state: RecordState, body: Body? = nil) {
        key = RecordKey(collection: state.collection, id: state.id)
        version = state.version
        self.body = body ?? Body(state)
        updatedAt = state.updatedAt
        updatedBy = state.updatedBy
        clientTime = state.clientTime
        lineage = state.lineage
        sameAs = state.sameAs
        resolved = state.resolved
    }

    var copy: Copy {
        Copy(version: version, body: body, updatedAt: updatedAt, updatedBy: updatedBy, clientTime: clientTime, lineage: lineage, sameAs: sameAs,
             resolved: resolved)
    }
}

/// One element of a prepared page.
enum PreparedItem: Sendable {
    case record(PreparedRecord)
    /// Undecodable, not opened by an encrypted store's keys, or refused by the
    /// collection's validator.
    case quarantine(UndecodableRecord)
    /// Out of the token's view since this version (docs/rules.md).
    case revoked(RecordKey, Version)

    /// A pulled record as the store takes it: opened by `cipher` (an encrypted store's)
    /// and checked by its collection's validator, or quarantined with the reason.
    init(_ state: RecordState, validators: [String: @Sendable (JSONObject) throws -> Void], cipher: RecordCipher?) {
        func quarantine(_ reason: String) -> PreparedItem {
            .quarantine(UndecodableRecord(raw: state.json.encoded(), collection: state.collection, id: state.id, version: state.version.text, reason: reason))
        }
        var data = state.data
        var opened: Body?
        let check = validators[state.collection]
        if let cipher, let sealed = state.data, !state.deleted {
            do {
                let bytes = try cipher.open(collection: state.collection, id: state.id, data: sealed)
                // What opens was sealed by a holder of the key, from the compact JSON of an
                // object (RecordCipher.seal); it is parsed only when a validator needs it.
                if check != nil {
                    guard case .object(let object) = try? JSONParser.parse(bytes) else { throw RecordCipher.OpenFailure(description: "the opened content is not a JSON object") }
                    data = object
                } else if bytes.first != UInt8(ascii: "{") || bytes.last != UInt8(ascii: "}") {
                    throw RecordCipher.OpenFailure(description: "the opened content is not a JSON object")
                }
                opened = Body(data: bytes)
            } catch {
                self = quarantine("end-to-end encryption: \(error)")
                return
            }
        }
        if let check, let data, !state.deleted {
            do { try check(data) } catch {
                self = quarantine("the app cannot decode it: \(error)")
                return
            }
        }
        self = .record(PreparedRecord(state, body: opened))
    }
}

/// A pull page after decoding, encoding and validation, made where the page was fetched.
struct PreparedPage: Sendable {
    let epoch: Epoch
    let next: Version
    /// The view of `next`, on a server with rules.
    let view: String?
    let hasMore: Bool
    /// The space's newest seq when the page was read, if the server said.
    let head: Int64?
    /// The field kinds the server declares; nil: none.
    let fields: FieldKinds?
    let items: [PreparedItem]

    /// `cipher`: the store's, when it is end-to-end encrypted; a copy it cannot open goes to
    /// the quarantine with the reason.
    init(_ page: PulledPage, validators: [String: @Sendable (JSONObject) throws -> Void], cipher: RecordCipher? = nil) {
        epoch = page.epoch
        next = page.next
        view = page.view
        hasMore = page.hasMore
        head = page.head
        fields = page.fields
        var items: [PreparedItem] = []
        items.reserveCapacity(page.records.count)
        for element in page.records {
            switch element {
            case .undecodable(let bad):
                items.append(.quarantine(bad))
            case .revoked(let r):
                items.append(.revoked(RecordKey(collection: r.collection, id: r.id), r.version))
            case .record(let state):
                items.append(PreparedItem(state, validators: validators, cipher: cipher))
            }
        }
        self.items = items
    }
}
