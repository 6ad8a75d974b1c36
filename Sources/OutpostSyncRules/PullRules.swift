import OutpostCore

/// The pull rules of docs/protocol.md section 5, once, for every server: the SQLite and
/// PostgreSQL stores behind `SyncService` and `InMemorySyncServer` (`OutpostTesting`) call
/// them, and differ only in how they read rows (each hands its rows to `Page` one by one).
/// Like the push rules, they are the server's: the SDK never links this module.
///
/// A pull is judged in this order:
/// 1. `start`: the cursor names the server's epoch (`409 epoch_changed`);
/// 2. `checkView`: the cursor was made under the view it is read with (`409 view_changed`);
/// 3. the page is read, with the space's head and history horizon in the same snapshot;
/// 4. `checkHead`: the cursor is not beyond the head (`409 cursor_ahead`), and
///    `checkHorizon`: not before the horizon (`409 history_compacted`);
/// 5. the answer is `envelope` around the page's `changes`.
public enum PullRules {
    /// A pull the rules refuse: always `409`, with the code, message and details of the
    /// protocol's error envelope. The caller renders it (the server as an `HTTPError`, the
    /// in-memory server as a refused transport call).
    public struct Refusal: Error, Hashable, Sendable {
        public var code: ErrorCode
        public var message: String
        public var details: JSONObject

        /// Every refusal of a pull's cursor is `409 Conflict`.
        public static let status = 409

        /// The error envelope of the answer.
        public var envelope: ErrorEnvelope {
            ErrorEnvelope(code: code.rawValue, message: message, details: details.isEmpty ? nil : details)
        }
    }

    /// Where a pull of a server at `epoch` starts: its `since`, or the start of the epoch
    /// without one. A cursor of another epoch is of a history the server no longer serves:
    /// `epoch_changed`, and the client pulls again from the start of `epoch`.
    public static func start(_ since: Version?, epoch: Epoch) throws(Refusal) -> Version {
        let since = since ?? .start(of: epoch)
        guard since.epoch == epoch else {
            throw Refusal(code: .epochChanged, message: "the server's history is now epoch \(epoch); pull again from its start",
                          details: ["epoch": .string(epoch.rawValue)])
        }
        return since
    }

    /// A cursor past the start holds the records of the view it was made under
    /// (docs/rules.md): read under another view (`view`; nil for a server without rules),
    /// it is `view_changed`, and the client pulls again from the start. A cursor at the
    /// start holds nothing, whatever view it names.
    public static func checkView(_ since: Version, sinceView: String?, view: String?) throws(Refusal) {
        guard since.seq > 0, sinceView != view else { return }
        throw Refusal(code: .viewChanged, message: "the cursor was made under another view of the space; pull again from the start",
                      details: view.map { ["view": .string($0)] } ?? [:])
    }

    /// A cursor beyond the space's newest seq `head` names a history this server never
    /// had (a restore that kept its epoch): `cursor_ahead`.
    public static func checkHead(_ since: Version, head: Int64) throws(Refusal) {
        guard since.seq > head else { return }
        throw Refusal(code: .cursorAhead, message: "since is beyond the space's newest version \(since.epoch).\(head)",
                      details: ["epoch": .string(since.epoch.rawValue), "head": .number(JSONNumber(head))])
    }

    /// A cursor before the space's history horizon may have missed a delete whose tombstone
    /// compaction purged: `history_compacted`, and the client pulls again from the start
    /// (which is whole). A cursor at the start, or at or after the horizon, missed nothing.
    public static func checkHorizon(_ since: Version, horizon: Int64) throws(Refusal) {
        guard since.seq > 0, since.seq < horizon else { return }
        throw Refusal(code: .historyCompacted,
                      message: "deletes after this cursor were purged by compaction (the history is whole from \(since.epoch).\(horizon)); pull again from the start",
                      details: ["epoch": .string(since.epoch.rawValue), "horizon": .string(Version(epoch: since.epoch, seq: horizon).text)])
    }

    /// The checks of a page read with the space's `head` and `horizon`: `checkHead`, then
    /// `checkHorizon`.
    public static func check(_ since: Version, head: Int64, horizon: Int64) throws(Refusal) {
        try checkHead(since, head: head)
        try checkHorizon(since, horizon: horizon)
    }

    /// `{"epoch":…,"changes":[…],"next":…,"hasMore":…,"head":…}` around a page's encoded
    /// `changes` (`Page.finish`); `head` is the space's newest seq in the snapshot the page
    /// was read from. `fields`: the rules' field kinds (`FieldKinds`, encoded), sent in
    /// every page under rules (docs/protocol.md section 5), absent otherwise.
    public static func envelope(epoch: Epoch, changes: [UInt8], next: Cursor, hasMore: Bool, head: Int64, fields: [UInt8]? = nil) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(changes.count + 160 + (fields?.count ?? 0))
        out.append(contentsOf: #"{"epoch":""#.utf8)
        out.append(contentsOf: epoch.rawValue.utf8)
        out.append(contentsOf: #"","changes":"#.utf8)
        out.append(contentsOf: changes)
        out.append(contentsOf: #","next":""#.utf8)
        out.append(contentsOf: next.text.utf8)
        out.append(contentsOf: hasMore ? #"","hasMore":true,"head":"#.utf8 : #"","hasMore":false,"head":"#.utf8)
        JSONWriter.appendInt(head, to: &out)
        if let fields {
            out.append(contentsOf: #","fields":"#.utf8)
            out.append(contentsOf: fields)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// A page's `changes` array as it is written: entries in seq order, at most `limit` of
    /// them, and at most `maxBytes` bytes of the whole encoded array, except that the first
    /// entry always goes in, so a record larger than the budget still moves the cursor.
    ///
    /// A store reads one row more than `limit` (so the page knows whether more follow) and
    /// hands each to `add` until it answers false:
    ///
    /// ```swift
    /// var page = PullRules.Page(limit: 100, maxBytes: 1 << 20)
    /// while let row = try rows.next(), page.add(seq: row.seq, { row.encode(into: &$0) }) {}
    /// let changes = page.finish()
    /// ```
    public struct Page: Sendable {
        /// The most entries.
        public let limit: Int
        /// The most bytes of the encoded array, brackets included.
        public let maxBytes: Int
        /// `[` and the entries so far.
        public private(set) var json: [UInt8]
        /// Entries in the page.
        public private(set) var count = 0
        /// The seq of the last record decided (sent, or passed over by a pull under rules);
        /// nil while none is. A caller may move it past records it knows need no entry.
        public var lastSeq: Int64?
        /// True when a record after the page exists (one was left out, or the caller knows
        /// of one).
        public var hasMore = false

        public init(limit: Int, maxBytes: Int) {
            self.limit = limit
            self.maxBytes = maxBytes
            json = [UInt8(ascii: "[")]
            json.reserveCapacity(min(maxBytes, 1 << 20))
        }

        /// Adds the entry of the record at `seq`, written into the array by `write`. When
        /// the page is full (it holds `limit` entries, or the entry would take the array
        /// over `maxBytes`) the entry is left out, `hasMore` is set, and the answer is false:
        /// the caller stops.
        public mutating func add(seq: Int64, _ write: (inout [UInt8]) throws -> Void) rethrows -> Bool {
            guard count < limit else {
                hasMore = true
                return false
            }
            let mark = json.count
            if count > 0 { json.append(UInt8(ascii: ",")) }
            try write(&json)
            // The budget counts the whole array, with its closing bracket.
            if count > 0 && json.count + 1 > maxBytes {
                json.removeSubrange(mark...)
                hasMore = true
                return false
            }
            count += 1
            lastSeq = seq
            return true
        }

        /// Passes over the record at `seq` with no entry (a pull under rules: a record the
        /// device never held in its view): the cursor moves past it. False, with `hasMore`,
        /// when the page is full, as `add`.
        public mutating func pass(seq: Int64) -> Bool {
            guard count < limit else {
                hasMore = true
                return false
            }
            lastSeq = seq
            return true
        }

        /// The encoded array, `[…]`.
        public mutating func finish() -> [UInt8] {
            json.append(UInt8(ascii: "]"))
            return json
        }
    }
}
