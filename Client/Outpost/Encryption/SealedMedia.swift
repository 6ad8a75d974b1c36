import Foundation
import OutpostCore
import OutpostCrypto

// Media of an end-to-end encrypted store (docs/encryption.md, "Media").
//
// A file is sealed on the device before it is uploaded: `SegmentedCipher` (AES-256-GCM per
// 64 KiB segment, nonces from a random 7-byte prefix per file and the segment index, the
// last segment flagged) writes a sealed copy beside the store, and that copy is what the
// uploader hashes, sends, resumes and finalizes: the server verifies and deduplicates
// ciphertext. The sealed copy is kept until the upload completes, so a resume after a crash
// sends the same bytes; it is then removed. The reference a record keeps names the sealed
// file (`mediaId` is its SHA-256) and carries what a reader needs to open it (key id,
// prefix, segment size) with the file's real size and content type; an encrypted record
// keeps all of that sealed. A download checks the ciphertext's SHA-256 and opens it
// segment by segment as the pieces arrive: the file is never held whole in memory, and
// nothing is renamed into place unless every segment and the hash check out.

/// How a media file was sealed: what a `MediaReference` of an encrypted store carries.
public struct MediaEncryption: Codable, Sendable, Hashable {
    /// The id of the space key the file was sealed under.
    public var kid: String
    /// The file's random nonce prefix (7 bytes, base64url).
    public var prefix: String
    /// The plaintext bytes per segment.
    public var segmentSize: Int

    public init(kid: String, prefix: String, segmentSize: Int) {
        self.kid = kid
        self.prefix = prefix
        self.segmentSize = segmentSize
    }
}

/// One row of `sealed_media`: the sealed copy of a file the app handed over, kept until
/// its upload completes.
struct SealedMediaRow: Sendable, Hashable {
    /// The app's file (absolute path).
    var source: String
    /// The source as it was sealed.
    var identity: FileIdentity
    /// The sealed copy.
    var sealedPath: String
    var encryption: MediaEncryption
    var contentType: String
    var filename: String?
}

extension LocalDatabase {
    static let sealedMediaSchema = """
        CREATE TABLE sealed_media(
            source TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            modified_ns INTEGER NOT NULL,
            device INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            sealed_path TEXT NOT NULL UNIQUE,
            kid TEXT NOT NULL,
            prefix TEXT NOT NULL,
            segment_size INTEGER NOT NULL,
            content_type TEXT NOT NULL,
            filename TEXT) WITHOUT ROWID;
        """

    private static let sealedMediaColumns = "source, size, modified_ns, device, inode, sealed_path, kid, prefix, segment_size, content_type, filename"

    func sealedMedia(where column: String, _ value: String) throws -> SealedMediaRow? {
        try db.queryOne("SELECT \(Self.sealedMediaColumns) FROM sealed_media WHERE \(column) = ?", [.text(value)]) { s in
            SealedMediaRow(source: s.text(0),
                           identity: FileIdentity(size: s.int64(1), modifiedNs: s.int64(2), device: UInt64(bitPattern: s.int64(3)), inode: UInt64(bitPattern: s.int64(4))),
                           sealedPath: s.text(5), encryption: MediaEncryption(kid: s.text(6), prefix: s.text(7), segmentSize: s.int(8)),
                           contentType: s.text(9), filename: s.optionalText(10))
        }
    }

    func saveSealedMedia(_ row: SealedMediaRow) throws {
        try db.run("INSERT OR REPLACE INTO sealed_media(\(Self.sealedMediaColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            .text(row.source), .integer(row.identity.size), .integer(row.identity.modifiedNs), .integer(Int64(bitPattern: row.identity.device)),
            .integer(Int64(bitPattern: row.identity.inode)), .text(row.sealedPath), .text(row.encryption.kid), .text(row.encryption.prefix),
            .integer(Int64(row.encryption.segmentSize)), .text(row.contentType), row.filename.map { .text($0) } ?? .null,
        ])
    }

    func deleteSealedMedia(source: String) throws {
        try db.run("DELETE FROM sealed_media WHERE source = ?", [.text(source)])
    }
}

extension OutpostStore {
    func sealedMedia(source: String) throws -> SealedMediaRow? {
        try read { try $0.sealedMedia(where: "source", source) }
    }

    func sealedMedia(sealedPath: String) throws -> SealedMediaRow? {
        try read { try $0.sealedMedia(where: "sealed_path", sealedPath) }
    }

    func saveSealedMedia(_ row: SealedMediaRow) throws {
        try write { try $0.saveSealedMedia(row) }
    }

    /// Forgets the sealed copy of `source` and removes its file.
    func forgetSealedMedia(source: String) throws {
        guard let row = try sealedMedia(source: source) else { return }
        try write { try $0.deleteSealedMedia(source: source) }
        unlink(row.sealedPath)
    }
}

extension MediaUploader {
    /// The sealed copy of `path` to upload in its place: the one kept from an earlier call
    /// when the file is unchanged (so an interrupted upload resumes with the same bytes),
    /// else a new one (replacing, and abandoning the upload of, an older copy).
    nonisolated func sealedCopy(of path: String, contentType: String, filename: String?) async throws -> SealedMediaRow {
        guard let cipher = store.cipher else { throw MediaError.invalidArgument("the store is not end-to-end encrypted") }
        let identity = try await MediaFiles.run(on: DispatchQueue(label: "outpost.media.stat")) { try MediaFiles.identity(of: path) }
        if let kept = try await store.sealedMedia(source: path) {
            if kept.identity == identity, FileManager.default.fileExists(atPath: kept.sealedPath) {
                if kept.contentType != contentType || kept.filename != filename {
                    var updated = kept
                    updated.contentType = contentType
                    updated.filename = filename
                    try await store.saveSealedMedia(updated)
                    return updated
                }
                return kept
            }
            try await discardSealedUpload(kept)
        }
        let kid = cipher.currentKeyId
        guard let key = cipher.key(kid) else { throw EncryptionError.noKeyring(space: store.space) }
        let prefix = SecureRandom.bytes(SegmentedCipher.prefixByteCount)
        let directory = store.sealedMediaDirectory
        let sealedPath = directory + "/" + Hex.encode(SecureRandom.bytes(16)) + ".sealed"
        let aad = Self.mediaAAD(space: space, kid: kid)
        let sealing = try await MediaFiles.run(on: DispatchQueue(label: "outpost.media.seal")) {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            return try Self.seal(path, to: sealedPath, key: key, prefix: prefix, aad: aad)
        }
        guard sealing.source == identity else {
            unlink(sealedPath)
            throw MediaError.fileChanged(path: path)
        }
        let row = SealedMediaRow(source: path, identity: identity, sealedPath: sealedPath,
                                 encryption: MediaEncryption(kid: kid, prefix: Base64.encodeURL(prefix), segmentSize: SegmentedCipher.defaultSegmentSize),
                                 contentType: contentType, filename: filename)
        try await store.saveSealedMedia(row)
        // The sealed bytes were hashed as they were written: the upload is stored with
        // that hash, so the uploader does not read the copy again to hash it.
        _ = try await store.replaceUploadRow(UploadRow(
            number: 0, path: sealedPath, identity: sealing.sealed, sha256: sealing.sha256, contentType: Self.sealedContentType, filename: nil,
            uploadId: nil, chunkSize: nil, received: [], state: .waiting, attempts: 0, nextAttemptAt: 0, lastError: nil, errorCode: nil,
            createdAt: await store.mediaNow()))
        return row
    }

    /// Drops a sealed copy that will not be uploaded: its stored upload, the server's
    /// bytes of it (when reachable), the file and the row.
    nonisolated func discardSealedUpload(_ row: SealedMediaRow) async throws {
        if let upload = try await store.uploadRow(path: row.sealedPath) {
            try await store.deleteUploadRow(upload.number)
            if let id = upload.uploadId { try? await transport.abort(id, space: space) }
        }
        try await store.forgetSealedMedia(source: row.source)
    }

    /// The additional data of every segment of a file sealed in `space` under `kid`.
    static func mediaAAD(space: String, kid: String) -> [UInt8] {
        JSONValue.array(["outpost-e2e-media", 1, .string(space), .string(kid)]).encoded(canonical: true)
    }

    /// Seals the file at `source` into a new file at `destination` (mode 0600) in 1 MiB
    /// reads. Returns the source's identity (its identity before the read, or another one
    /// when it changed while it was read: the caller then starts over), the sealed file's
    /// identity, and the SHA-256 of the sealed bytes.
    private static func seal(_ source: String, to destination: String, key: [UInt8], prefix: [UInt8], aad: [UInt8]) throws
        -> (source: FileIdentity, sealed: FileIdentity, sha256: String) {
        let (input, _) = try MediaFiles.openForReading(source)
        defer { close(input) }
        let output = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw MediaError.destinationUnwritable(path: destination, reason: MediaFiles.errnoText()) }
        var ok = false
        defer {
            close(output)
            if !ok { unlink(destination) }
        }
        let encryptor = try SegmentedCipher.Encryptor(key: key, prefix: prefix, aad: aad)
        var hasher = StreamingSHA256()
        // The sealed segments of one read, hashed and written before the next read.
        var sealed: [UInt8] = []
        sealed.reserveCapacity((1 << 20) + (1 << 20) / SegmentedCipher.defaultSegmentSize * 16 + 32)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw MediaError.fileUnreadable(path: source, reason: MediaFiles.errnoText())
            }
            if n == 0 { break }
            try buffer.withUnsafeBytes { try encryptor.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) { sealed.append(contentsOf: $0) } }
            sealed.withUnsafeBytes { hasher.update($0) }
            try writeAll(output, sealed, path: destination)
            sealed.removeAll(keepingCapacity: true)
        }
        try encryptor.finish { sealed.append(contentsOf: $0) }
        sealed.withUnsafeBytes { hasher.update($0) }
        try writeAll(output, sealed, path: destination)
        guard fsync(output) == 0 else { throw MediaError.destinationUnwritable(path: destination, reason: MediaFiles.errnoText()) }
        var s = stat()
        guard fstat(input, &s) == 0 else { throw MediaError.fileUnreadable(path: source, reason: MediaFiles.errnoText()) }
        var written = stat()
        guard fstat(output, &written) == 0 else { throw MediaError.destinationUnwritable(path: destination, reason: MediaFiles.errnoText()) }
        ok = true
        return (FileIdentity(s), FileIdentity(written), hexString(hasher.finalize()))
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        try bytes.withUnsafeBytes { bytes in
            var done = 0
            while done < bytes.count {
                let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw MediaError.destinationUnwritable(path: path, reason: MediaFiles.errnoText())
                }
                done += n
            }
        }
    }

    /// The reference a record keeps of an upload of an encrypted store.
    static func reference(_ sealed: SealedMediaRow, mediaId: String) -> MediaReference {
        MediaReference(mediaId: mediaId, contentType: sealed.contentType, size: sealed.identity.size, filename: sealed.filename, encryption: sealed.encryption)
    }

    /// Opens the sealed bytes of `reference` as they are downloaded; see `download(_:to:)`.
    nonisolated func opener(for reference: MediaReference) throws -> SegmentedCipher.Decryptor? {
        guard let encryption = reference.encryption else { return nil }
        guard let cipher = store.cipher else {
            throw MediaError.invalidArgument("the media is end-to-end encrypted and this store has no keys (Configuration.encryption)")
        }
        guard let key = cipher.key(encryption.kid) else {
            throw MediaError.invalidArgument("the media is sealed under key \(encryption.kid), which this device does not have (import the space's keys)")
        }
        guard let prefix = Base64.decodeURL(encryption.prefix), prefix.count == SegmentedCipher.prefixByteCount,
              encryption.segmentSize > 0, encryption.segmentSize <= 1 << 24 else {
            throw MediaError.invalidArgument("the media reference's encryption fields are malformed")
        }
        return try SegmentedCipher.Decryptor(key: key, prefix: prefix, aad: Self.mediaAAD(space: space, kid: encryption.kid), segmentSize: encryption.segmentSize)
    }
}
