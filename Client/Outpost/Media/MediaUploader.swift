import Foundation
import OutpostCore
import OutpostCrypto
import Synchronization

/// Uploads files to the server's media store and downloads them again (docs/protocol.md
/// section 6), keeping every unfinished upload in the offline store so that a crash or a
/// lost network costs only the chunks the server does not hold yet.
///
/// ```swift
/// let transport = HTTPSyncTransport(baseURL: url) { refresh in try await tokens.current(refresh: refresh) }
/// let store = try OutpostStore(path: "app.sqlite", configuration: .init(space: "team"), transport: transport)
/// let uploader = MediaUploader(store: store, transport: HTTPMediaTransport(sharing: transport))
///
/// let media = try await uploader.upload(file: photoURL, contentType: "image/jpeg")
/// try await store.save(Photo(caption: "Roof", image: MediaReference(media)), in: "photos", id: "p1")
/// ```
///
/// An upload: the file is hashed as a stream (1 MiB reads) → the upload is stored (path,
/// size, mtime, SHA-256, content type) → init (`200 complete`: done, nothing sent) → each
/// chunk the server lacks is read at its offset and sent with its `Content-Digest` (a few
/// at once, one chunk buffer each) and recorded when acknowledged → finalize (`409`: the
/// chunks it names are sent again; `404`: init again; `422 checksum_mismatch`: a permanent
/// failure) → the stored upload is removed and the server's `MediaInfo` returned.
///
/// Resuming (`resumeUploads()`, or `upload(file:)` of the same path again) asks the server
/// what it holds (`GET` of the upload: a chunk may have arrived without its answer) and
/// sends only the rest. A file whose size, mtime or inode changed since it was hashed is
/// hashed again and its upload starts over (`MediaProgress.restarts` says so).
///
/// Failures of the network or the server are retried with the store's jittered backoff
/// (`Configuration.backoff`, clock and random seed) up to `Options.maxAttempts` times in a
/// row without progress; then the call throws and the upload waits, with its attempts
/// and retry time, for `resumeUploads()`. Permanent failures (`MediaError.isPermanent`) mark
/// it failed.
///
/// One uploader per store: uploads of one path share one run (a second call joins it).
public actor MediaUploader {
    /// Settings.
    public struct Options: Sendable {
        /// Chunks sent at once by one upload, 1 to 4. Default 2. Each holds one chunk
        /// buffer, so memory stays at `maxConcurrentChunks × chunkSize`.
        public var maxConcurrentChunks = 2
        /// Failures in a row without progress before a call gives up (the upload stays
        /// waiting). Default 5.
        public var maxAttempts = 5
        /// How often an upload starts over because its file changed before a call gives up
        /// with `MediaError.fileChanged`. Default 3.
        public var maxRestarts = 3
        /// Bytes asked for per request by `download`. Default 4 MiB (memory held at once).
        public var downloadPieceBytes = 4 << 20
        /// The defaults.
        public init() {}
    }

    /// The store that keeps unfinished uploads.
    public nonisolated let store: OutpostStore
    /// How requests reach the server.
    public nonisolated let transport: any MediaTransport
    /// Settings.
    public nonisolated let options: Options

    private struct Run {
        var task: Task<CompletedUpload, any Error>
        var hub: ProgressHub
    }

    private var running: [String: Run] = [:]

    /// An uploader for `store`'s space through `transport`.
    public init(store: OutpostStore, transport: any MediaTransport, options: Options = Options()) {
        self.store = store
        self.transport = transport
        self.options = options
    }

    nonisolated var space: String { store.space }

    // MARK: - Public API

    /// Uploads the file at `file` (or resumes its earlier upload) and returns the server's
    /// description of it. See the type's documentation for the steps and failures.
    ///
    /// An end-to-end encrypted store uploads with `uploadReference(file:)` (or `start` and
    /// `MediaUpload.reference`), which give the reference with what a reader needs to open
    /// the file: the server's description is of the sealed bytes, so this call refuses.
    public func upload(file: URL, contentType: String, filename: String? = nil) async throws -> MediaInfo {
        guard !store.isEncrypted else {
            throw MediaError.invalidArgument("an end-to-end encrypted store uploads with uploadReference(file:), which gives the reference that opens the file")
        }
        return try await start(file: file, contentType: contentType, filename: filename).media
    }

    /// Uploads the file at `file` (or resumes its earlier upload) and returns the reference
    /// a record keeps. In an end-to-end encrypted store the file is sealed on the device as
    /// it is sent and only sealed bytes leave it (docs/encryption.md, "Media"); the
    /// reference then carries the file's real size and content type and how to open it.
    public func uploadReference(file: URL, contentType: String, filename: String? = nil) async throws -> MediaReference {
        try await start(file: file, contentType: contentType, filename: filename).reference
    }

    /// Starts (or joins) the upload of `file` and returns at once: its progress as an
    /// `AsyncStream` and its result. Throws only for invalid arguments.
    public func start(file: URL, contentType: String, filename: String? = nil) throws -> MediaUpload {
        try Self.validate(contentType: contentType, filename: filename)
        return begin(path: MediaFiles.absolutePath(file.path), contentType: contentType, filename: filename)
    }

    /// Hashes the file and stores its upload without touching the network, and returns the
    /// reference a record can hold at once (the media id is the file's SHA-256). The bytes
    /// go with the next `resumeUploads()` (or `upload(file:)`); until then other devices
    /// that download the reference get `MediaError.mediaNotFound`.
    public func enqueue(file: URL, contentType: String, filename: String? = nil) async throws -> MediaReference {
        try Self.validate(contentType: contentType, filename: filename)
        let path = MediaFiles.absolutePath(file.path)
        if running[path] == nil {
            let hub = ProgressHub()
            do {
                _ = try await prepare(path: path, contentType: contentType, filename: filename, hub: hub, restarts: 0, forceHash: false)
                // A server upload of an earlier content is left to expire: enqueue never
                // touches the network.
            } catch is FileChanged {
                throw MediaError.fileChanged(path: path)
            }
        }
        guard let row = try await store.uploadRow(path: path) else { throw CancellationError() }
        if row.sealing != nil { return Self.reference(row, mediaId: row.sha256) }
        return row.pending.reference
    }

    /// Continues every waiting upload whose retry time has come (all of them after a crash),
    /// one after the other, and returns the media of those that completed. The others keep
    /// their failure in `pendingUploads()`. Throws only when the store fails or the task is
    /// cancelled.
    @discardableResult
    public func resumeUploads() async throws -> [MediaInfo] {
        var completed: [MediaInfo] = []
        for row in try await store.uploadRows() where row.state == .waiting {
            guard await store.uploadIsDue(row.nextAttemptAt) || running[row.path] != nil else { continue }
            let upload = begin(path: row.path, contentType: row.contentType, filename: row.filename)
            do {
                completed.append(try await upload.media)
            } catch is MediaError {
                continue  // kept with the upload
            }
        }
        return completed
    }

    /// The uploads the store keeps (waiting or failed), oldest first.
    public func pendingUploads() async throws -> [PendingUpload] {
        try await store.uploadRows().map(\.pending)
    }

    /// Forgets the upload of `file`: stops it if it runs, removes it from the store and
    /// asks the server to drop what it holds (when reachable). Returns false when the store
    /// kept no upload of that path.
    @discardableResult
    public func discardUpload(file: URL) async throws -> Bool {
        let path = MediaFiles.absolutePath(file.path)
        if let run = running[path] {
            run.task.cancel()
            _ = await run.task.result
        }
        guard let row = try await store.uploadRow(path: path) else { return false }
        try await store.deleteUploadRow(row.number)
        if let id = row.uploadId { try? await transport.abort(id, space: space) }
        return true
    }

    /// Downloads the media `mediaId` to `destination`: the bytes go to a hidden file beside
    /// it (`Options.downloadPieceBytes` per request, retried with backoff), their SHA-256 is
    /// checked against `mediaId`, and only then is the file renamed into place (replacing
    /// what was there). A mismatch throws `MediaError.downloadCorrupt` and leaves nothing.
    public nonisolated func download(mediaId: String, to destination: URL) async throws {
        try await download(mediaId: mediaId, opener: nil, expectedSize: nil, to: destination)
    }

    /// Downloads the media a record refers to (see `download(mediaId:to:)`). A reference
    /// of an encrypted store's file is opened as it arrives, segment by segment; a segment
    /// that does not authenticate, a file cut short, or another size than the reference's
    /// throws `MediaError.downloadCorrupt` and leaves nothing.
    public nonisolated func download(_ reference: MediaReference, to destination: URL) async throws {
        let opener = try opener(for: reference)
        try await download(mediaId: reference.mediaId, opener: opener, expectedSize: opener == nil ? nil : reference.size, to: destination)
    }

    private nonisolated func download(mediaId: String, opener: SegmentedCipher.Decryptor?, expectedSize: Int64?, to destination: URL) async throws {
        guard Names.isValidMediaID(mediaId) else { throw MediaError.invalidArgument("\"\(mediaId)\" is not a media id (64 lowercase hex characters)") }
        let size = try await retryingDownload(mediaId) { [transport, space] in try await transport.mediaSize(mediaId, space: space) }
        // Compaction removes what a crash leaves in this directory.
        try? await store.noteDownloadDirectory(destination.deletingLastPathComponent().path)
        let file = try await DownloadFile.create(destination: destination.path, protection: store.configuration.fileProtection)
        do {
            var hasher = SHA256()
            var offset: Int64 = 0
            var written: Int64 = 0
            let piece = Int64(max(1, options.downloadPieceBytes))
            func opened(_ sealed: Data, finish: Bool) throws -> Data {
                guard let opener else { return sealed }
                var plain = Data()
                plain.reserveCapacity(sealed.count)
                do {
                    try sealed.withUnsafeBytes { try opener.update($0) { plain.append(contentsOf: $0) } }
                    if finish { try opener.finish { plain.append(contentsOf: $0) } }
                } catch {
                    throw MediaError.downloadCorrupt(mediaId: mediaId, actual: "a sealed segment that does not authenticate (\(error))")
                }
                return plain
            }
            while offset < size {
                let range = offset..<min(size, offset + piece)
                let bytes = try await retryingDownload(mediaId) { [transport, space] in try await transport.mediaBytes(mediaId, range: range, space: space) }
                bytes.withUnsafeBytes { hasher.update($0) }
                let plain = try opened(bytes, finish: range.upperBound == size)
                try await file.append(plain)
                written += Int64(plain.count)
                offset = range.upperBound
            }
            if size == 0, opener != nil {
                let plain = try opened(Data(), finish: true)
                try await file.append(plain)
                written += Int64(plain.count)
            }
            let actual = hexString(hasher.finalize())
            guard actual == mediaId else { throw MediaError.downloadCorrupt(mediaId: mediaId, actual: actual) }
            if let expectedSize, written != expectedSize {
                throw MediaError.downloadCorrupt(mediaId: mediaId, actual: "\(written) bytes opened, not the reference's \(expectedSize)")
            }
            try await file.commit()
        } catch {
            await file.discard()
            throw error
        }
    }

    // MARK: - Runs

    private static func validate(contentType: String, filename: String?) throws {
        guard UploadRequest.isValidContentType(contentType) else {
            throw MediaError.invalidArgument("\"\(contentType)\" is not a media type such as image/jpeg")
        }
        if let filename, filename.utf8.count > 255 { throw MediaError.invalidArgument("a filename is at most 255 bytes") }
    }

    /// The run of `path`, started when none is running.
    private func begin(path: String, contentType: String, filename: String?) -> MediaUpload {
        if let run = running[path] { return MediaUpload(path: path, progress: run.hub.subscribe(), task: run.task) }
        let hub = ProgressHub()
        let progress = hub.subscribe()
        let task = Task {
            defer { hub.finish() }
            do {
                let completed = try await self.perform(path: path, contentType: contentType, filename: filename, hub: hub)
                self.ended(path)
                return completed
            } catch {
                self.ended(path)
                throw error
            }
        }
        running[path] = Run(task: task, hub: hub)
        return MediaUpload(path: path, progress: progress, task: task)
    }

    private func ended(_ path: String) {
        running[path] = nil
    }

    /// One call's work on `path`: hash when needed, send, and start over (new hash) when
    /// the file changed under the upload.
    private nonisolated func perform(path: String, contentType: String, filename: String?, hub: ProgressHub) async throws -> CompletedUpload {
        var restarts = 0  // new contents found (reported in the progress)
        var changes = 0  // changes seen under this call's upload (bounded)
        var replaced = 0
        var forceHash = false
        while true {
            let prepared: Prepared
            do {
                prepared = try await prepare(path: path, contentType: contentType, filename: filename, hub: hub, restarts: restarts, forceHash: forceHash)
            } catch let error as MediaError {
                // The file is gone or unreadable: the stored upload (if any) says so.
                if let existing = try await store.uploadRow(path: path) { try await store.recordUploadFailure(existing.number, error) }
                throw error
            } catch is FileChanged {
                throw try await gaveUp(path)
            }
            if prepared.newContent { restarts += 1 }
            if let old = prepared.abandoned {
                // That upload will never be finalized: free the server's bytes now.
                try? await transport.abort(old, space: space)
            }
            do {
                return CompletedUpload(media: try await send(prepared.row, hub: hub, restarts: restarts), row: prepared.row)
            } catch is FileChanged {
                changes += 1
                forceHash = true
                if changes > options.maxRestarts { throw try await gaveUp(path) }
            } catch is UploadRowReplaced {
                // Another call (an `enqueue` of the path) stored a newer hash: continue with it.
                replaced += 1
                forceHash = false
                if replaced > options.maxRestarts { throw try await gaveUp(path) }
            }
        }
    }

    /// What `prepare` found.
    private struct Prepared {
        var row: UploadRow
        /// A server upload of the path's earlier content, replaced by this one.
        var abandoned: String?
        /// The path held other bytes when its upload was stored before (the upload starts over).
        var newContent: Bool
    }

    /// The row an upload run works on was replaced or removed by another call.
    private struct UploadRowReplaced: Error {}

    private nonisolated func gaveUp(_ path: String) async throws -> MediaError {
        let error = MediaError.fileChanged(path: path)
        if let existing = try await store.uploadRow(path: path) { try await store.recordUploadFailure(existing.number, error) }
        return error
    }

    /// The stored upload of `path` for the file as it is now: the stored one when the file
    /// is unchanged (same size, mtime and inode as when it was hashed), else a new one
    /// with the file hashed again. A new hash equal to the stored one keeps the server
    /// upload the store knew.
    private nonisolated func prepare(path: String, contentType: String, filename: String?, hub: ProgressHub, restarts: Int, forceHash: Bool) async throws -> Prepared {
        let existing = try await store.uploadRow(path: path)
        let identity = try await MediaFiles.run(on: DispatchQueue(label: "outpost.media.stat")) { try MediaFiles.identity(of: path) }
        if !forceHash, let row = existing, row.state == .waiting, row.identity == identity, (row.sealing != nil) == store.isEncrypted {
            hub.yield(MediaProgress(phase: .hashing, bytesHashed: row.size, bytesSent: row.bytesAcknowledged, totalBytes: row.size, restarts: restarts))
            guard row.uploadId == nil, row.contentType != contentType || row.filename != filename else {
                return Prepared(row: row, abandoned: nil, newContent: false)
            }
            // Not begun on the server yet: the latest content type and name count.
            let updated = try await store.updateUploadRow(row.number, durability: store.configuration.durability) {
                $0.contentType = contentType
                $0.filename = filename
            }
            return Prepared(row: updated ?? row, abandoned: nil, newContent: false)
        }
        let cancelled = CancelFlag()
        // An encrypted store's file is hashed as its sealed stream, under a new prefix.
        let sealing = try newSealing()
        let sealingKey = try sealing.map { try key(for: $0) }
        let space = self.space
        let (hashed, sha256) = try await withTaskCancellationHandler {
            let progress: @Sendable (Int64) -> Void = { bytes in
                hub.yield(MediaProgress(phase: .hashing, bytesHashed: bytes, bytesSent: 0, totalBytes: identity.size, restarts: restarts))
            }
            if let sealing, let sealingKey {
                return try await MediaFiles.hashSealed(path: path, sealing: sealing, key: sealingKey, aad: Self.mediaAAD(space: space, kid: sealing.kid),
                                                       progress: progress, cancelled: { cancelled.isSet })
            }
            return try await MediaFiles.hash(path: path, progress: progress, cancelled: { cancelled.isSet })
        } onCancel: {
            cancelled.set()
        }
        let now = await store.mediaNow()
        var row = UploadRow(number: 0, path: path, identity: hashed, sha256: sha256, contentType: contentType, filename: filename, uploadId: nil,
                            chunkSize: nil, received: [], state: .waiting, attempts: 0, nextAttemptAt: 0, lastError: nil, errorCode: nil,
                            createdAt: now, sealing: sealing)
        var prepared = Prepared(row: row, abandoned: nil, newContent: false)
        if let old = existing, old.state == .waiting, old.sha256 == sha256, old.size == hashed.size {
            // The same bytes (the file was touched, or copied back): its server upload holds.
            row.uploadId = old.uploadId
            row.chunkSize = old.chunkSize
            row.received = old.received
            row.createdAt = old.createdAt
            if old.uploadId != nil {
                row.contentType = old.contentType
                row.filename = old.filename
            }
        } else if let old = existing, old.state == .waiting {
            prepared.abandoned = old.uploadId
            prepared.newContent = true
        }
        prepared.row = try await store.replaceUploadRow(row)
        return prepared
    }

    /// Brings the server to hold the file of `initial`, from wherever it is: performs the
    /// steps of an `UploadModel`, which makes every decision.
    private nonisolated func send(_ initial: UploadRow, hub: ProgressHub, restarts: Int) async throws -> MediaInfo {
        var row = initial
        let reader = try chunkSource(row, try await ChunkReader.open(row.path, expected: row.identity))
        let number = row.number
        var model = UploadModel(row: row, maxAttempts: options.maxAttempts)
        var step = model.start()
        while true {
            for phase in step.reports {
                hub.yield(MediaProgress(phase: phase, bytesHashed: row.size, bytesSent: row.bytesAcknowledged, totalBytes: row.size, restarts: restarts))
            }
            let input: UploadModel.Input
            switch step.effect {
            case .query, .begin, .sendChunks, .finalize:
                input = try await request(step.effect, row: row, reader: reader, hub: hub, restarts: restarts)
                if case .sent(let sent) = input { row = sent }
            case .update(let change):
                row = try await stored(store.updateUploadRow(number) { change.apply(to: &$0) })
                input = .stored(row)
            case .reload:
                try Task.checkCancellation()  // a cancelled request is not a failure of the server
                row = try await stored(store.uploadRow(path: row.path).flatMap { $0.number == number ? $0 : nil })
                input = .reloaded(row)
            case .recordFailure(let failure):
                input = .recorded(delayMs: try await store.recordUploadFailure(number, failure))
            case .wait(let milliseconds):
                try await Task.sleep(for: .milliseconds(milliseconds))
                input = .waited
            case .finish(let media):
                try await store.deleteUploadRow(number)
                hub.yield(MediaProgress(phase: .complete, bytesHashed: row.size, bytesSent: row.size, totalBytes: row.size, restarts: restarts))
                return media
            case .fail(let error, let forgetServerUpload):
                if forgetServerUpload { try await store.updateUploadRow(number) { $0.forgetServerUpload() } }
                try await store.recordUploadFailure(number, error)
                throw error
            case .giveUp(let error):
                throw error
            }
            step = model.take(input)
        }
    }

    /// The row an update or a reload found. One that is gone was discarded
    /// (`discardUpload` cancels this run first) or replaced by another call's newer hash of
    /// the file.
    private nonisolated func stored(_ row: UploadRow?) throws -> UploadRow {
        guard let row else {
            try Task.checkCancellation()
            throw UploadRowReplaced()
        }
        return row
    }

    /// Performs a request `effect` of the model and returns what came of it: the answer, or
    /// the failure, which the model classifies.
    private nonisolated func request(_ effect: UploadModel.Effect, row: UploadRow, reader: any ChunkSource, hub: ProgressHub, restarts: Int) async throws -> UploadModel.Input {
        do {
            switch effect {
            case .query(let uploadId):
                try Task.checkCancellation()
                return .answered(try await transport.upload(uploadId, space: space))
            case .begin(let request):
                try Task.checkCancellation()
                return .answered(try await transport.beginUpload(request, space: space))
            case .sendChunks(let indexes):
                return .sent(try await sendChunks(indexes, of: row, reader: reader, hub: hub, restarts: restarts))
            case .finalize(let uploadId):
                return .finalized(try await transport.finalize(uploadId, space: space))
            default:
                preconditionFailure("\(effect) is not a request")
            }
        } catch let error as TransportError {
            return .failed(error)
        } catch let error as MediaError {
            return .broke(error)
        }
    }

    /// Sends the chunks `indexes`, at most `maxConcurrentChunks` at once, each read from the
    /// file at its offset when its turn comes; records each acknowledgement. Returns the row
    /// as stored after the last one.
    private nonisolated func sendChunks(_ indexes: [Int], of row: UploadRow, reader: any ChunkSource, hub: ProgressHub, restarts: Int) async throws -> UploadRow {
        guard let uploadId = row.uploadId, let chunkSize = row.chunkSize else { return row }
        let width = max(1, min(options.maxConcurrentChunks, 4))
        let (store, transport, space, number, size) = (self.store, self.transport, self.space, row.number, row.size)
        var latest = row
        try await withThrowingTaskGroup(of: UploadRow?.self) { group in
            var next = 0
            var inFlight = 0
            while true {
                // Fill the window: one chunk buffer per request in flight.
                while next < indexes.count && inFlight < width {
                    let index = indexes[next]
                    next += 1
                    inFlight += 1
                    group.addTask {
                        let offset = Int64(index) * Int64(chunkSize)
                        let bytes = try await reader.read(offset: offset, length: Int(min(Int64(chunkSize), size - offset)))
                        let digest = SHA256.hash(bytes)
                        let receipt = try await transport.putChunk(bytes, digest: digest, index: index, uploadId: uploadId, space: space)
                        guard receipt.index == index else {
                            throw MediaError.protocolViolation("chunk \(index) was answered as chunk \(receipt.index)")
                        }
                        return try await store.acknowledgeChunk(number, index: index)
                    }
                }
                // The first failure ends the group, which cancels the requests still in flight.
                guard let done = try await group.next() else { break }
                inFlight -= 1
                if let done, done.acknowledged > latest.acknowledged {
                    latest = done
                    hub.yield(MediaProgress(phase: .uploading, bytesHashed: size, bytesSent: done.bytesAcknowledged, totalBytes: size, restarts: restarts))
                }
            }
        }
        return latest
    }

    /// Runs one download request, retrying failures of the network or the server with the
    /// store's backoff, up to `maxAttempts` in a row.
    private nonisolated func retryingDownload<T: Sendable>(_ mediaId: String, _ request: @Sendable () async throws -> T) async throws -> T {
        var failures = 0
        while true {
            do {
                return try await request()
            } catch let error as TransportError {
                if case .refused(let status, let envelope) = error {
                    if status == 404 && (envelope.code == "media_not_found" || envelope.code == "not_found") { throw MediaError.mediaNotFound(mediaId: mediaId) }
                    if status < 500 && status != 408 && status != 429 {
                        throw status == 401 || status == 403 ? MediaError.transport(error) : MediaError.refused(error)
                    }
                }
                failures += 1
                if failures >= options.maxAttempts { throw MediaError.transport(error) }
                try await Task.sleep(for: .milliseconds(await store.mediaBackoffMs(attempt: failures)))
            }
        }
    }
}

/// One upload under way: its progress and its result.
public struct MediaUpload: Sendable {
    /// The file's absolute path.
    public let path: String
    /// Progress values, newest last (the newest 64 are buffered for a slow reader, so the
    /// final one is never lost); ends when the upload ends. A handle that joins a running
    /// upload starts with its latest value.
    public let progress: AsyncStream<MediaProgress>
    private let task: Task<CompletedUpload, any Error>

    init(path: String, progress: AsyncStream<MediaProgress>, task: Task<CompletedUpload, any Error>) {
        self.path = path
        self.progress = progress
        self.task = task
    }

    /// The server's description of the file, once it holds it.
    public var media: MediaInfo {
        get async throws { try await task.value.media }
    }

    /// The reference a record keeps of the file, once the server holds it (in an
    /// encrypted store, with what a reader needs to open it).
    public var reference: MediaReference {
        get async throws {
            let completed = try await task.value
            guard completed.row.sealing != nil else { return MediaReference(completed.media, filename: completed.row.filename) }
            return MediaUploader.reference(completed.row, mediaId: completed.media.mediaId)
        }
    }

    /// Stops the upload (for every caller waiting on it); it stays in the store and resumes
    /// with `resumeUploads()` or `upload(file:)`.
    public func cancel() { task.cancel() }
}

/// An upload the server completed, with the stored row it was made from.
struct CompletedUpload: Sendable {
    let media: MediaInfo
    let row: UploadRow
}

/// Fans one upload's progress out to every handle waiting on it.
final class ProgressHub: Sendable {
    private struct State {
        var subscribers: [UUID: AsyncStream<MediaProgress>.Continuation] = [:]
        var last: MediaProgress?
        var finished = false
    }

    private let state = Mutex(State())

    func subscribe() -> AsyncStream<MediaProgress> {
        let (stream, continuation) = AsyncStream.makeStream(of: MediaProgress.self, bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        let finished = state.withLock { s -> Bool in
            if let last = s.last { continuation.yield(last) }
            if !s.finished { s.subscribers[id] = continuation }
            return s.finished
        }
        if finished {
            continuation.finish()
        } else {
            continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) } }
        }
        return stream
    }

    /// Sends `value` to every subscriber (under the lock, so all see one order).
    func yield(_ value: MediaProgress) {
        state.withLock { s in
            s.last = value
            for continuation in s.subscribers.values { continuation.yield(value) }
        }
    }

    func finish() {
        let subscribers = state.withLock { s -> [AsyncStream<MediaProgress>.Continuation] in
            s.finished = true
            defer { s.subscribers.removeAll() }
            return Array(s.subscribers.values)
        }
        for continuation in subscribers { continuation.finish() }
    }
}

/// A cancellation flag a dispatch queue can poll.
final class CancelFlag: Sendable {
    private let value = Atomic(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
    func set() { value.store(true, ordering: .relaxed) }
}
