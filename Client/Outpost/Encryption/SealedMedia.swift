import Foundation
import OutpostCore
import OutpostCrypto
import Synchronization

// Media of an end-to-end encrypted store (docs/encryption.md, "Media").
//
// Every upload of an encrypted store sends its file sealed: `SegmentedCipher` (AES-256-GCM
// per 64 KiB segment, nonces from a random 7-byte prefix per file and the segment index,
// the last segment flagged). The sealed stream is a function of the file, the key and the
// prefix, so it is never stored: the uploader hashes it as it seals the file once (the
// hash the server verifies), and seals each chunk again from the file when the chunk is
// sent, so a resume after a crash sends the same bytes without a sealed copy on disk. The
// server verifies, resumes and deduplicates ciphertext. The upload row keeps the prefix,
// and a file whose content changed gets a new one: no two contents are ever sealed under
// one prefix. The reference a record keeps names the sealed stream (`mediaId` is its
// SHA-256) and carries what a reader needs to open it (key id, prefix, segment size) with
// the file's real size and content type; an encrypted record keeps all of that sealed. A
// download checks the sealed bytes' SHA-256 and opens them segment by segment as the
// pieces arrive: the file is never held whole in memory, and nothing is renamed into
// place unless every segment and the hash check out.

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

extension MediaUploader {
    /// The content type the server is told for a sealed file.
    static let sealedContentType = "application/octet-stream"

    /// The additional data of every segment of a file sealed in `space` under `kid`.
    static func mediaAAD(space: String, kid: String) -> [UInt8] {
        JSONValue.array(["outpost-e2e-media", 1, .string(space), .string(kid)]).encoded(canonical: true)
    }

    /// A new sealing for a file about to be hashed: the current key, a new random prefix.
    nonisolated func newSealing() throws -> Sealing? {
        guard let cipher = store.cipher else { return nil }
        return Sealing(kid: cipher.currentKeyId, prefix: SecureRandom.bytes(SegmentedCipher.prefixByteCount), segmentSize: SegmentedCipher.defaultSegmentSize)
    }

    /// The key bytes `sealing` names.
    nonisolated func key(for sealing: Sealing) throws -> [UInt8] {
        guard let key = store.cipher?.key(sealing.kid) else { throw MediaError.invalidArgument("this device has no key \(sealing.kid) to seal the file with") }
        return key
    }

    /// What reads the chunks of `row` from its file: the file's bytes, or its sealed stream.
    nonisolated func chunkSource(_ row: UploadRow, _ reader: ChunkReader) throws -> any ChunkSource {
        guard let sealing = row.sealing else { return reader }
        return SealedChunks(reader: reader, sealing: sealing, key: try key(for: sealing), aad: Self.mediaAAD(space: space, kid: sealing.kid),
                            plainSize: row.identity.size)
    }

    /// The reference a record keeps of an upload of an encrypted store.
    static func reference(_ row: UploadRow, mediaId: String) -> MediaReference {
        MediaReference(mediaId: mediaId, contentType: row.contentType, size: row.identity.size, filename: row.filename,
                       encryption: row.sealing.map { MediaEncryption(kid: $0.kid, prefix: Base64.encodeURL($0.prefix), segmentSize: $0.segmentSize) })
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

/// Where the uploader reads a chunk's bytes.
protocol ChunkSource: Sendable {
    /// `length` bytes at `offset` of what the server receives.
    func read(offset: Int64, length: Int) async throws -> Data
}

extension ChunkReader: ChunkSource {}

/// The sealed stream of a file, made again for each range asked for: the whole segments
/// the range touches are read from the file in one read and sealed
/// (`SegmentedCipher.sealSegments`), and the range is cut out of them.
struct SealedChunks: ChunkSource {
    let reader: ChunkReader
    let sealing: Sealing
    let key: [UInt8]
    let aad: [UInt8]
    let plainSize: Int64

    func read(offset: Int64, length: Int) async throws -> Data {
        let segment = Int64(sealing.segmentSize)
        let sealedSegment = segment + Int64(AESGCM.tagByteCount)
        let lastIndex = plainSize / segment
        let first = offset / sealedSegment
        let last = min(lastIndex, (offset + Int64(length) - 1) / sealedSegment)
        let plainStart = first * segment
        let plainEnd = min(plainSize, (last + 1) * segment)
        let plain = plainEnd > plainStart ? try await reader.read(offset: plainStart, length: Int(plainEnd - plainStart)) : Data()
        let context = try AESGCMKey(key)
        let sealed = try plain.withUnsafeBytes {
            try SegmentedCipher.sealSegments($0, firstIndex: UInt32(first), count: Int(last - first + 1), lastIndex: UInt32(lastIndex), key: context,
                                             prefix: sealing.prefix, aad: aad, segmentSize: sealing.segmentSize)
        }
        let start = Int(offset - first * sealedSegment)
        guard start + length <= sealed.count else { throw MediaError.protocolViolation("a chunk past the sealed stream's end was asked for") }
        return Data(sealed[start..<start + length])
    }
}

extension MediaFiles {
    /// The SHA-256 of the sealed stream of the file at `path` (see `hash(path:…)`: 1 MiB
    /// reads, the file checked unchanged, `FileChanged` after three changes), sealed as it
    /// is read and hashed on a second thread; the sealed bytes are not kept.
    static func hashSealed(path: String, sealing: Sealing, key: [UInt8], aad: [UInt8], progress: @escaping @Sendable (Int64) -> Void,
                           cancelled: @escaping @Sendable () -> Bool) async throws -> (FileIdentity, String) {
        try await run(on: DispatchQueue(label: "outpost.media.seal")) {
            for _ in 0..<3 {
                let (fd, before) = try openForReading(path)
                defer { close(fd) }
                let encryptor = try SegmentedCipher.Encryptor(key: key, prefix: sealing.prefix, aad: aad, segmentSize: sealing.segmentSize)
                let hashing = PieceHasher()
                var buffer = [UInt8](repeating: 0, count: 1 << 20)
                var total: Int64 = 0
                var failure: (any Error)?
                while true {
                    if cancelled() {
                        failure = CancellationError()
                        break
                    }
                    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if n < 0 {
                        if errno == EINTR { continue }
                        failure = MediaFiles.readFailure(path)
                        break
                    }
                    var sealed: [UInt8] = []
                    sealed.reserveCapacity(n + (n / sealing.segmentSize + 2) * AESGCM.tagByteCount)
                    do {
                        if n == 0 {
                            try encryptor.finish { sealed.append(contentsOf: $0) }
                        } else {
                            try buffer.withUnsafeBytes { try encryptor.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) { sealed.append(contentsOf: $0) } }
                        }
                    } catch {
                        failure = error
                        break
                    }
                    hashing.add(sealed)
                    if n == 0 { break }
                    total += Int64(n)
                    progress(total)
                }
                let digest = hashing.finish()
                if let failure { throw failure }
                var s = stat()
                guard fstat(fd, &s) == 0 else { throw MediaError.fileUnreadable(path: path, reason: errnoText()) }
                if FileIdentity(s) == before && total == before.size { return (before, digest) }
            }
            throw FileChanged()
        }
    }
}

/// SHA-256 of a stream of pieces, computed on a thread of its own: `add` hands a piece over
/// (waiting while two are queued, so memory stays at a few pieces), `finish` waits for the
/// last and returns the digest in hex. Used by one producer thread.
final class PieceHasher: Sendable {
    private let pieces = Mutex<[[UInt8]?]>([])
    private let ready = DispatchSemaphore(value: 0)
    private let room = DispatchSemaphore(value: 2)
    private let done = DispatchSemaphore(value: 0)
    private let digest = Mutex<String>("")

    init() {
        DispatchQueue(label: "outpost.media.seal-hash").async { [self] in
            var hasher = SHA256()
            while true {
                ready.wait()
                guard let piece = pieces.withLock({ $0.removeFirst() }) else { break }
                piece.withUnsafeBytes { hasher.update($0) }
                room.signal()
            }
            let hex = hexString(hasher.finalize())
            digest.withLock { $0 = hex }
            done.signal()
        }
    }

    func add(_ piece: [UInt8]) {
        room.wait()
        pieces.withLock { $0.append(piece) }
        ready.signal()
    }

    func finish() -> String {
        pieces.withLock { $0.append(nil) }
        ready.signal()
        done.wait()
        return digest.withLock { $0 }
    }
}
