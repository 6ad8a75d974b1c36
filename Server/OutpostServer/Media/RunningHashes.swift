import OutpostCore
import OutpostCrypto
import Synchronization

/// The running SHA-256 of each open upload's in-order prefix, so that finalize (and tus
/// completion) reads nothing back to learn the file's digest (docs/media.md, "Hashing
/// once").
///
/// What "hashed once" means: every byte goes through the file's SHA-256 exactly once, on
/// the server, and never through it again at finalize. A chunk that arrives in order is
/// fed from the request's buffer right after its own digest was checked on that same
/// buffer (two digests, one read of the bytes from memory; SHA-256 has no way to share
/// work between a chunk's digest and the file's). A chunk that arrives before the prefix
/// reaches it is fed when the prefix does, read back from its file (the page cache,
/// written moments before). Bytes no running hash covers (an upload resumed after a
/// restart, say) are read once at finalize, as before.
///
/// The hashes live in this process's memory, never ahead of the bytes: a hash covers only
/// bytes written to the upload's file by this process, which the page cache holds for as
/// long as the process lives, and finalize fsyncs them before it publishes. Whatever ends
/// the process (a kill, a power loss) ends the hashes with it; the upload then finalizes
/// by reading its file, as before.
///
/// Only for a store one process owns (SQLite): there every write of a chunk goes through
/// `noteChunk` first, so two different bodies for one index are always seen and the hash
/// is dropped. With instances sharing a media directory another process may write a
/// chunk under a hash this one holds, so none is kept (`MediaStore.hashes` is nil).
final class RunningHashes: Sendable {
    /// One upload's hash.
    struct Entry: Sendable {
        /// SHA-256 of the file's first `hash.byteCount` bytes.
        var hash = ResumableSHA256()
        /// Chunked uploads: the digest of each chunk fed, by index (so `fed.count` chunks
        /// are in `hash`).
        var fed: [[UInt8]] = []
        /// Chunked uploads: the digest noted for each index before its bytes were written.
        var noted: [Int: [UInt8]] = [:]
        /// Chunks held past the prefix, waiting for it to reach them.
        var waiting: Set<Int> = []
        /// A request is feeding the hash: others leave their chunk in `waiting`.
        var busy = false
        /// Two bodies were written for one index: the hash is never used.
        var spoiled = false
    }

    private let entries = Mutex<[UploadID: Entry]>([:])

    /// Forgets an upload's hash (its file was removed, renamed or cut short).
    func drop(_ id: UploadID) {
        _ = entries.withLock { $0.removeValue(forKey: id) }
    }

    // MARK: Chunked uploads

    /// Called right before chunk `index`'s bytes are written by this process. When other
    /// bytes (another digest) were noted for that index, the file may end up holding bytes
    /// the hash did not see, whichever write lands last: the upload's hash is spoiled
    /// until finalize or a removal drops it, and finalize reads the file, as before.
    func noteChunk(_ id: UploadID, index: Int, digest: [UInt8]) {
        entries.withLock { entries in
            var entry = entries[id] ?? Entry()
            if let noted = entry.noted[index], noted != digest { entry.spoiled = true }
            entry.noted[index] = digest
            entries[id] = entry
        }
    }

    /// Called once this process wrote chunk `index` (noted first) and its receipt is
    /// committed: feeds it when the prefix is at it (from `bytes`, the buffer its digest
    /// was checked on), then every chunk this process holds that the prefix now reaches
    /// (read back by `readChunk`). When another request is feeding this upload's hash,
    /// the chunk waits and that request takes it along when it gets there.
    ///
    /// A chunk this process did not write (a resend of bytes already recorded) is never
    /// fed: its bytes on disk may not be those of its receipt (a power loss after the
    /// receipt's commit), and only finalize's read of the file can tell.
    func chunkHeld(_ id: UploadID, index: Int, bytes: [UInt8], digest: [UInt8], readChunk: (Int) async throws -> [UInt8]) async {
        guard var hash = claim(id, index: index, digest: digest) else { return }
        var next = index
        var body: [UInt8]? = bytes
        while true {
            do {
                let piece: [UInt8]
                if let body { piece = body } else { piece = try await readChunk(next) }
                piece.withUnsafeBytes { hash.update($0) }
            } catch {
                // Left for finalize, which reads what no hash covers.
                entries.withLock { entries in entries[id]?.busy = false }
                return
            }
            guard let following = advance(id, hash: hash, fedThrough: next) else { return }
            next = following
            body = nil
        }
    }

    /// Takes the hash to feed chunk `index` (whose bytes hash to `digest`) when the prefix
    /// is at it and nobody feeds it; otherwise leaves the chunk waiting and returns nil.
    /// A chunk whose digest is not the one last noted for its index spoils the hash: the
    /// file holds the bytes of whichever write landed last.
    private func claim(_ id: UploadID, index: Int, digest: [UInt8]) -> ResumableSHA256? {
        entries.withLock { entries in
            guard var entry = entries[id], !entry.spoiled else { return nil }
            defer { entries[id] = entry }
            guard entry.noted[index] == digest else {
                entry.spoiled = true
                return nil
            }
            guard !entry.busy, entry.fed.count == index else {
                if index >= entry.fed.count { entry.waiting.insert(index) }
                return nil
            }
            entry.busy = true
            return entry.hash
        }
    }

    /// Records that chunk `index` was fed; returns the next waiting chunk when the prefix
    /// has reached one (the caller goes on feeding), else releases the hash.
    private func advance(_ id: UploadID, hash: ResumableSHA256, fedThrough index: Int) -> Int? {
        entries.withLock { entries in
            guard var entry = entries[id], entry.busy, entry.fed.count == index, let digest = entry.noted[index] else {
                // Dropped meanwhile (a removal, a finalize): nothing to keep.
                return nil
            }
            entry.hash = hash
            entry.fed.append(digest)
            entry.waiting.remove(index)
            let next = index + 1
            entry.busy = entry.waiting.contains(next) && !entry.spoiled
            entries[id] = entry
            return entry.busy ? next : nil
        }
    }

    /// For finalize (under the upload's exclusive lock): the hash of the upload's first
    /// chunks, taken out, when it is not spoiled and each chunk it fed is the one
    /// `digests` (the recorded digests, by index) says is held; nil otherwise.
    func takePrefix(_ id: UploadID, digests: [[UInt8]]) -> ResumableSHA256? {
        guard let entry = entries.withLock({ $0.removeValue(forKey: id) }), !entry.spoiled, !entry.busy,
              entry.fed.count <= digests.count, Array(digests.prefix(entry.fed.count)) == entry.fed else { return nil }
        return entry.hash
    }

    // MARK: tus uploads

    /// Called once a tus append of `bytes` at `offset` is on disk and its offset committed:
    /// feeds them when the hash is at `offset` (a new upload's first append starts one).
    /// Appends of one upload run one at a time, under its exclusive lock.
    func appended(_ id: UploadID, offset: Int64, bytes: [UInt8]) {
        var entry = entries.withLock { entries -> Entry? in
            let existing = entries.removeValue(forKey: id)
            return offset == 0 ? Entry() : existing?.hash.byteCount == offset ? existing : nil
        }
        guard entry != nil else { return }
        bytes.withUnsafeBytes { entry!.hash.update($0) }
        entries.withLock { $0[id] = entry }
    }

    /// The hash of a tus upload's first bytes, when it covers exactly `length` of them.
    func whole(_ id: UploadID, length: Int64) -> ResumableSHA256? {
        entries.withLock { entries in
            guard let entry = entries[id], entry.hash.byteCount == length else { return nil }
            return entry.hash
        }
    }
}
