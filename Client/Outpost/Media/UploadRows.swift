import Foundation
import OutpostCore
import OutpostCrypto
import OutpostSQLite

/// How an upload of an end-to-end encrypted store seals its file (docs/encryption.md,
/// "Media"): the sealed stream is made from the file as it is read, never stored.
struct Sealing: Sendable, Hashable {
    var kid: String
    /// The random nonce prefix of this file's stream (7 bytes), new whenever its content
    /// is hashed anew, so that no two contents are ever sealed under one prefix.
    var prefix: [UInt8]
    var segmentSize: Int
}

/// One row of `media_uploads`: an upload the store keeps until the server holds the file.
struct UploadRow: Sendable, Hashable {
    var number: Int64
    /// The file's absolute path; one row per path. The row keeps it relative to the
    /// store's base directory when the file is inside it (`LocalDatabase.uploadKey`).
    var path: String
    /// The file as it was hashed.
    var identity: FileIdentity
    var sha256: String
    var contentType: String
    var filename: String?
    /// Set once an init answered.
    var uploadId: String?
    var chunkSize: Int?
    /// The chunks the server acknowledged, one bit per index.
    var received: [UInt8]
    var state: PendingUpload.State
    var attempts: Int
    var nextAttemptAt: Int64
    var lastError: String?
    var errorCode: String?
    var createdAt: Int64
    /// Set in an encrypted store: the server is sent the sealed stream, and `sha256` is
    /// its hash.
    var sealing: Sealing? = nil

    /// The bytes the server receives: the file's, or its sealed stream's.
    var size: Int64 { sealing.map { SegmentedCipher.sealedLength(plainLength: identity.size, segmentSize: $0.segmentSize) } ?? identity.size }

    var chunkCount: Int { chunkSize.map { UploadState.chunkCount(size: size, chunkSize: $0) } ?? 0 }

    func has(_ index: Int) -> Bool {
        let byte = index >> 3
        return byte < received.count && received[byte] & (1 << UInt8(index & 7)) != 0
    }

    mutating func mark(_ index: Int) {
        let byte = index >> 3
        if received.count <= byte { received += [UInt8](repeating: 0, count: byte + 1 - received.count) }
        received[byte] |= 1 << UInt8(index & 7)
    }

    mutating func setReceived(_ indexes: [Int]) {
        received = []
        for i in indexes where i >= 0 { mark(i) }
    }

    var acknowledged: Int { (0..<chunkCount).count(where: has) }

    /// Bytes of the acknowledged chunks.
    var bytesAcknowledged: Int64 {
        guard let chunkSize else { return 0 }
        var total: Int64 = 0
        for i in 0..<chunkCount where has(i) { total += min(Int64(chunkSize), size - Int64(i) * Int64(chunkSize)) }
        return total
    }

    /// Forgets the server side (a new init follows).
    mutating func forgetServerUpload() {
        uploadId = nil
        chunkSize = nil
        received = []
    }

    var pending: PendingUpload {
        PendingUpload(path: path, mediaId: sha256, size: size, contentType: contentType, filename: filename, uploadId: uploadId,
                      chunkSize: chunkSize, chunksAcknowledged: acknowledged, chunkCount: chunkCount, state: state, attempts: attempts,
                      nextAttemptAt: Date(milliseconds: nextAttemptAt), lastError: lastError, errorCode: errorCode)
    }
}

extension LocalDatabase {
    /// A `media_uploads` row, its columns named once.
    private enum UploadColumns {
        static let columns = RowColumns(["number", "path", "size", "modified_ns", "device", "inode", "sha256", "content_type", "filename", "upload_id",
                                         "chunk_size", "received", "state", "attempts", "next_attempt_at", "last_error", "error_code", "created_at",
                                         "seal_kid", "seal_prefix", "seal_segment"])
        static let number = columns.index("number"), path = columns.index("path"), size = columns.index("size")
        static let modifiedNs = columns.index("modified_ns"), device = columns.index("device"), inode = columns.index("inode")
        static let sha256 = columns.index("sha256"), contentType = columns.index("content_type"), filename = columns.index("filename")
        static let uploadId = columns.index("upload_id"), chunkSize = columns.index("chunk_size"), received = columns.index("received")
        static let state = columns.index("state"), attempts = columns.index("attempts"), nextAttemptAt = columns.index("next_attempt_at")
        static let lastError = columns.index("last_error"), errorCode = columns.index("error_code"), createdAt = columns.index("created_at")
        static let sealKid = columns.index("seal_kid"), sealPrefix = columns.index("seal_prefix"), sealSegment = columns.index("seal_segment")
        /// Every column but `number`, for a write.
        static let written = columns.names.filter { $0 != "number" }
        static let insertSQL = "INSERT INTO media_uploads(\(written.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: written.count).joined(separator: ", ")))"
        static let updateSQL = "UPDATE media_uploads SET \(written.map { "\($0) = ?" }.joined(separator: ", ")) WHERE number = ?"
    }

    private func readUpload(_ s: Statement) -> UploadRow {
        typealias U = UploadColumns
        return UploadRow(
            number: s.int64(U.number), path: uploadPath(s.text(U.path)),
            identity: FileIdentity(size: s.int64(U.size), modifiedNs: s.int64(U.modifiedNs), device: UInt64(bitPattern: s.int64(U.device)),
                                   inode: UInt64(bitPattern: s.int64(U.inode))),
            sha256: s.text(U.sha256), contentType: s.text(U.contentType), filename: s.optionalText(U.filename), uploadId: s.optionalText(U.uploadId),
            chunkSize: s.optionalInt64(U.chunkSize).map(Int.init), received: s.optionalBlob(U.received) ?? [],
            state: PendingUpload.State(rawValue: s.text(U.state)) ?? .waiting, attempts: s.int(U.attempts), nextAttemptAt: s.int64(U.nextAttemptAt),
            lastError: s.optionalText(U.lastError), errorCode: s.optionalText(U.errorCode), createdAt: s.int64(U.createdAt),
            sealing: s.optionalText(U.sealKid).map { Sealing(kid: $0, prefix: s.optionalBlob(U.sealPrefix) ?? [], segmentSize: s.int(U.sealSegment)) })
    }

    func upload(path: String) throws -> UploadRow? {
        try db.queryOne("SELECT \(UploadColumns.columns.list) FROM media_uploads WHERE path = ?", [.text(uploadKey(path))], readUpload)
    }

    func upload(number: Int64) throws -> UploadRow? {
        try db.queryOne("SELECT \(UploadColumns.columns.list) FROM media_uploads WHERE number = ?", [.integer(number)], readUpload)
    }

    func uploads() throws -> [UploadRow] {
        try db.query("SELECT \(UploadColumns.columns.list) FROM media_uploads ORDER BY number", [], readUpload)
    }

    // MARK: Paths relative to the base directory

    // An app's files live in its container, whose absolute path changes with every app
    // update on iOS (and with a move of the directory anywhere). A row keeps the path of a
    // file inside the base directory relative to it, so the upload finds its file again
    // wherever the container went; files elsewhere keep their absolute path.

    /// The key a row keeps for the file at the absolute `path`.
    func uploadKey(_ path: String) -> String {
        guard let base = baseDirectory, let relative = Self.relative(path, to: base) else { return path }
        return relative
    }

    /// The absolute path of a row's key.
    func uploadPath(_ key: String) -> String {
        guard !key.hasPrefix("/"), let base = baseDirectory else { return key }
        return base.hasSuffix("/") ? base + key : base + "/" + key
    }

    /// `path` relative to `base` when it lies inside it.
    static func relative(_ path: String, to base: String) -> String? {
        let prefix = base.hasSuffix("/") ? base : base + "/"
        guard path.hasPrefix(prefix), path.count > prefix.count else { return nil }
        return String(path.dropFirst(prefix.count))
    }

    /// Rows kept by an absolute path that lies under the base directory become relative.
    /// So does a row whose file is gone and whose path matches the base in every directory
    /// but one, with its file found at the same place under the base: the container an app
    /// update renamed, for rows written before the store had a base directory (or under
    /// an earlier one). Other absolute rows stay as they are.
    func rebaseUploads() throws {
        guard let base = baseDirectory else { return }
        let rows = try db.query("SELECT number, path FROM media_uploads WHERE path LIKE '/%'", []) { ($0.int64(0), $0.text(1)) }
        let baseParts = base.split(separator: "/")
        var moves: [(number: Int64, key: String)] = []
        for (number, path) in rows {
            if let relative = Self.relative(path, to: base) {
                moves.append((number, relative))
                continue
            }
            let parts = path.split(separator: "/")
            guard parts.count > baseParts.count,
                  zip(parts, baseParts).count(where: { $0 != $1 }) == 1,
                  !FileManager.default.fileExists(atPath: path) else { continue }
            let key = parts.dropFirst(baseParts.count).joined(separator: "/")
            if FileManager.default.fileExists(atPath: uploadPath(key)) { moves.append((number, key)) }
        }
        guard !moves.isEmpty else { return }
        try db.transaction {
            for move in moves {
                if try db.scalarInt("SELECT number FROM media_uploads WHERE path = ?", [.text(move.key)]) != nil {
                    // The file has a row under its relative path already, made later: the
                    // absolute one is an older upload of it.
                    try deleteUpload(number: move.number)
                } else {
                    try db.run("UPDATE media_uploads SET path = ? WHERE number = ?", [.text(move.key), .integer(move.number)])
                }
            }
        }
    }

    /// Inserts `row` (a new number) or, when `row.number` names a row, rewrites it.
    @discardableResult
    func save(_ row: UploadRow, insert: Bool) throws -> Int64 {
        typealias U = UploadColumns
        var r = U.columns.row()
        r[U.path] = .text(uploadKey(row.path))
        r[U.size] = .integer(row.identity.size)
        r[U.modifiedNs] = .integer(row.identity.modifiedNs)
        r[U.device] = .integer(Int64(bitPattern: row.identity.device))
        r[U.inode] = .integer(Int64(bitPattern: row.identity.inode))
        r[U.sha256] = .text(row.sha256)
        r[U.contentType] = .text(row.contentType)
        r[U.filename] = row.filename.map { .text($0) } ?? .null
        r[U.uploadId] = row.uploadId.map { .text($0) } ?? .null
        r[U.chunkSize] = row.chunkSize.map { .integer(Int64($0)) } ?? .null
        r[U.received] = .blob(row.received)
        r[U.state] = .text(row.state.rawValue)
        r[U.attempts] = .integer(Int64(row.attempts))
        r[U.nextAttemptAt] = .integer(row.nextAttemptAt)
        r[U.lastError] = row.lastError.map { .text($0) } ?? .null
        r[U.errorCode] = row.errorCode.map { .text($0) } ?? .null
        r[U.createdAt] = .integer(row.createdAt)
        r[U.sealKid] = row.sealing.map { .text($0.kid) } ?? .null
        r[U.sealPrefix] = row.sealing.map { .blob($0.prefix) } ?? .null
        r[U.sealSegment] = row.sealing.map { .integer(Int64($0.segmentSize)) } ?? .null
        // Every column but `number`, in the order of `written`.
        let values = r.values.indices.filter { $0 != Int(U.number) }.map { r.values[$0] }
        if insert {
            try db.run(U.insertSQL, values)
            return db.lastInsertRowID
        }
        try db.run(U.updateSQL, values + [.integer(row.number)])
        return row.number
    }

    func deleteUpload(number: Int64) throws {
        try db.run("DELETE FROM media_uploads WHERE number = ?", [.integer(number)])
    }
}

extension OutpostStore {
    // The media uploader's bookkeeping. Creating an upload commits with the configured
    // durability (like a save: a file the app handed over is not forgotten); progress
    // (acknowledged chunks, attempts) commits with NORMAL, since a lost acknowledgement is
    // only asked of the server again.

    func uploadRow(path: String) throws -> UploadRow? {
        try read { try $0.upload(path: path) }
    }

    func uploadRows() throws -> [UploadRow] {
        try read { try $0.uploads() }
    }

    /// Stores a freshly hashed upload for `row.path`, replacing any row of that path.
    /// Returns the row with its number.
    func replaceUploadRow(_ row: UploadRow) throws -> UploadRow {
        try write { d in
            var row = row
            if let old = try d.upload(path: row.path) { try d.deleteUpload(number: old.number) }
            row.number = try d.save(row, insert: true)
            return row
        }
    }

    /// Applies `change` to the row `number` and stores it; nil when the row is gone.
    @discardableResult
    func updateUploadRow(_ number: Int64, durability: Durability = .normal, _ change: @Sendable (inout UploadRow) -> Void) throws -> UploadRow? {
        try write(durability: durability) { d in
            guard var row = try d.upload(number: number) else { return nil }
            change(&row)
            try d.save(row, insert: false)
            return row
        }
    }

    /// Records an acknowledged chunk (and that the upload moves: its failures are forgotten).
    @discardableResult
    func acknowledgeChunk(_ number: Int64, index: Int) throws -> UploadRow? {
        try updateUploadRow(number) { row in
            row.mark(index)
            row.attempts = 0
            row.nextAttemptAt = 0
            row.lastError = nil
            row.errorCode = nil
        }
    }

    /// Records a failed attempt: permanent ones mark the row failed; others count an attempt
    /// and store its retry time (the store's jittered backoff). Returns the delay in ms.
    @discardableResult
    func recordUploadFailure(_ number: Int64, _ error: MediaError) throws -> Int64 {
        let attempts = (try read { try $0.upload(number: number) })?.attempts ?? 0
        let delay = error.isPermanent ? 0 : configuration.backoff.delayMs(attempt: attempts + 1, using: &rng)
        let time = now()
        try updateUploadRow(number) { row in
            row.lastError = error.description
            row.errorCode = error.code
            if error.isPermanent {
                row.state = .failed
            } else {
                row.attempts += 1
                row.nextAttemptAt = time + delay
            }
        }
        return delay
    }

    func deleteUploadRow(_ number: Int64) throws {
        try write(durability: .normal) { try $0.deleteUpload(number: number) }
    }

    /// The backoff of a failure that is not an upload's (a download piece), in ms.
    func mediaBackoffMs(attempt: Int) -> Int64 {
        configuration.backoff.delayMs(attempt: attempt, using: &rng)
    }

    /// Whether a stored retry time has come (or was stored before the clock was set back).
    func uploadIsDue(_ time: Int64) -> Bool {
        isDue(time, now: now())
    }

    /// The store's clock, for upload rows.
    func mediaNow() -> Int64 { now() }
}
