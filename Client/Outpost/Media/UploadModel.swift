import OutpostCore

/// The decisions of one upload run, as a value (docs/client.md, "Media"): where to ask the
/// server, which chunks to send, when to finalize, what a failed request means, when to
/// retry and when to give up. `MediaUploader.send` starts it (`start`), performs the step it
/// asks for (`Step.effect`, after reporting `Step.reports`) and feeds back what came of it
/// (`take`). It does no I/O and reads no clock: the store's backoff delay comes back as an
/// input, so its tests step it without a socket, a store or a sleep.
struct UploadModel: Sendable {
    /// What to do after a failed request.
    enum Next: Hashable, Sendable {
        /// The server forgot the upload (expired, aborted): init again.
        case initAgain
        /// Retry after the backoff.
        case retry(MediaError)
        /// Stop this call; the upload waits (401, 403, a confused server).
        case stop(MediaError)
        /// Fail for good.
        case fail(MediaError)
    }

    /// A change of the stored upload row.
    enum RowChange: Hashable, Sendable {
        /// Take the server's open upload: its id, chunk size and the chunks it holds.
        case adopt(UploadState)
        /// The chunks `indexes` are not held after all (finalize named them).
        case forgetChunks([Int])
        /// The server forgot the upload: a new init follows.
        case forgetServerUpload

        func apply(to row: inout UploadRow) {
            switch self {
            case .adopt(let state):
                row.uploadId = state.uploadId
                row.chunkSize = state.chunkSize
                row.setReceived(state.received.filter { $0 < state.chunkCount })
            case .forgetChunks(let named):
                var kept = row
                kept.received = []
                for i in 0..<row.chunkCount where row.has(i) && !named.contains(i) { kept.mark(i) }
                row = kept
            case .forgetServerUpload:
                row.forgetServerUpload()
            }
        }
    }

    /// What the shell does next. Each effect but `finish`, `fail` and `giveUp` is answered
    /// with one input.
    enum Effect: Hashable, Sendable {
        /// `GET` the upload the server knows; answered with `answered` or `failed`.
        case query(uploadId: String)
        /// Init; answered with `answered` or `failed`.
        case begin(UploadRequest)
        /// Store `change` to the row (a row that is gone ends the run); answered with `stored`.
        case update(RowChange)
        /// Send the chunks `indexes`, recording each acknowledgement; answered with `sent`
        /// (the row as stored after the last), `failed` or `broke`.
        case sendChunks([Int])
        /// Finalize the upload; answered with `finalized` or `failed`.
        case finalize(uploadId: String)
        /// Read the row again after a failed request (first ending the run if it was
        /// cancelled: a cancelled request is not a failure of the server); answered with
        /// `reloaded`.
        case reload
        /// Record `failure` with the upload; answered with `recorded` and the store's backoff.
        case recordFailure(MediaError)
        /// Sleep, then answer `waited`.
        case wait(milliseconds: Int64)
        /// The server holds the file: remove the row, report `complete`, return `media`.
        case finish(MediaInfo)
        /// Record `error` with the upload and throw it; `forgetServerUpload`: the server
        /// discarded its upload, so the row forgets it first (whether or not it is still
        /// stored).
        case fail(MediaError, forgetServerUpload: Bool = false)
        /// Throw `error`, already recorded.
        case giveUp(MediaError)
    }

    /// One step: the progress phases to report first (with the row as last stored), in
    /// order, then the effect.
    struct Step: Hashable, Sendable {
        var reports: [MediaProgress.Phase] = []
        var effect: Effect
    }

    /// What came of an effect.
    enum Input: Hashable, Sendable {
        /// The server answered a query or an init.
        case answered(UploadAnswer)
        /// The row change was stored; the row as it is now.
        case stored(UploadRow)
        /// The chunks were sent; the row as stored after the last acknowledgement.
        case sent(UploadRow)
        /// Finalize answered.
        case finalized(MediaInfo)
        /// A request failed.
        case failed(TransportError)
        /// A request failed on this side or against the protocol (a chunk unreadable, a
        /// receipt for another chunk).
        case broke(MediaError)
        /// The row as stored, read after a failed request.
        case reloaded(UploadRow)
        /// The failure was recorded; the store's backoff before the next try.
        case recorded(delayMs: Int64)
        /// The backoff passed.
        case waited
    }

    /// What the model waits for.
    private enum Awaiting: Hashable, Sendable {
        case start
        /// The answer of a query or an init.
        case answer
        /// The adoption of the server's upload `uploadId`, stored.
        case adopted(uploadId: String)
        /// The chunks sent, before finalizing `uploadId`.
        case sent(uploadId: String)
        /// Finalize's answer.
        case finalized(uploadId: String)
        /// The chunks finalize named, forgotten, to be sent again.
        case forgotChunks(uploadId: String, named: [Int])
        /// The row read again after `error`.
        case reloaded(TransportError)
        /// The server upload forgotten after `error` said it was gone.
        case forgotUpload(TransportError)
        /// The retryable `failure` recorded.
        case recorded(MediaError)
        /// The backoff.
        case waited
        /// A terminal effect was asked for.
        case done
    }

    /// Failures in a row without an acknowledged chunk or more; back to 0 when a failed
    /// request finds more chunks acknowledged than when the attempt began.
    private(set) var failures = 0
    /// Inits after the server forgot the upload.
    private(set) var initsAgain = 0
    /// Finalize answers of `upload_incomplete`.
    private(set) var incompleteRounds = 0
    /// The row as last stored.
    private(set) var row: UploadRow
    let maxAttempts: Int
    /// Chunks acknowledged when the current attempt began (its query or init).
    private var acknowledgedBefore = 0
    private var awaiting = Awaiting.start

    init(row: UploadRow, maxAttempts: Int) {
        self.row = row
        self.maxAttempts = maxAttempts
    }

    /// The first step: report `uploading`, then ask the server where the upload is.
    mutating func start() -> Step {
        precondition(awaiting == .start, "an upload model starts once")
        return attempt(reports: [.uploading])
    }

    /// Takes what came of the last effect; returns the next step.
    mutating func take(_ input: Input) -> Step {
        switch (awaiting, input) {
        case (.answer, .answered(.complete(let media))):
            return finish(media)
        case (.answer, .answered(.open(let state))):
            guard state.size == row.size, state.sha256 == row.sha256, state.chunkSize > 0,
                  state.chunkCount == UploadState.chunkCount(size: row.size, chunkSize: state.chunkSize) else {
                return fail(.protocolViolation("the server's upload \(state.uploadId) is not this file's (size \(state.size), chunk size \(state.chunkSize), \(state.chunkCount) chunks)"))
            }
            awaiting = .adopted(uploadId: state.uploadId)
            return Step(effect: .update(.adopt(state)))
        case (.adopted(let uploadId), .stored(let stored)):
            row = stored
            return send((0..<row.chunkCount).filter { !row.has($0) }, uploadId: uploadId)
        case (.sent(let uploadId), .sent(let stored)):
            row = stored
            return finalize(uploadId, reports: [.finalizing])
        case (.finalized, .finalized(let media)):
            return finish(media)
        case (.finalized(let uploadId), .failed(let error)) where error.errorCode == "upload_incomplete":
            // Bytes the server lost (a power failure) or a chunk whose receipt was lost:
            // send what it names.
            incompleteRounds += 1
            let named = Self.indexes(error, below: row.chunkCount)
            guard !named.isEmpty, incompleteRounds <= maxAttempts else {
                return fail(.protocolViolation("finalize keeps answering upload_incomplete (\(named.count) chunks named)"))
            }
            awaiting = .forgotChunks(uploadId: uploadId, named: named)
            return Step(effect: .update(.forgetChunks(named)))
        case (.forgotChunks(let uploadId, let named), .stored(let stored)):
            row = stored
            return send(named, uploadId: uploadId)
        case (.answer, .failed(let error)), (.sent, .failed(let error)), (.finalized, .failed(let error)):
            awaiting = .reloaded(error)
            return Step(effect: .reload)
        case (.answer, .broke(let error)), (.sent, .broke(let error)), (.finalized, .broke(let error)):
            // A protocol violation or an unreadable chunk: stop here; a later run asks the
            // server again.
            return fail(error)
        case (.reloaded(let error), .reloaded(let stored)):
            row = stored
            return failed(error)
        case (.forgotUpload(let error), .stored(let stored)):
            row = stored
            if initsAgain <= maxAttempts { return attempt(reports: [.uploading]) }
            return fail(.transport(error), reports: [.uploading])
        case (.recorded(let failure), .recorded(let delayMs)):
            if failures >= maxAttempts {
                awaiting = .done
                return Step(effect: .giveUp(failure))
            }
            awaiting = .waited
            return Step(effect: .wait(milliseconds: delayMs))
        case (.waited, .waited):
            return attempt(reports: [])
        default:
            preconditionFailure("the upload model was given \(input) while it waits for \(awaiting)")
        }
    }

    /// What to do after a failed request.
    static func classify(_ error: TransportError, row: UploadRow) -> Next {
        guard case .refused(let status, let envelope) = error else { return .retry(.transport(error)) }
        switch (status, envelope.code) {
        case (404, "upload_not_found"):
            return .initAgain
        case (422, "checksum_mismatch"):
            return .fail(.checksumMismatch(expected: envelope.details?["expected"]?.stringValue ?? row.sha256,
                                           actual: envelope.details?["actual"]?.stringValue))
        case (413, _):
            return .fail(.tooLarge(size: row.size, limit: envelope.details?["limit"]?.int64Value))
        case (422, "digest_mismatch"):
            return .retry(.transport(error))  // the chunk was damaged on the way
        case (401, _), (403, _):
            return .stop(.transport(error))
        case (422, "invalid_chunk_size"), (422, "invalid_chunk_index"), (400, "digest_required"):
            return .stop(.protocolViolation("the server refused a chunk: \(error)"))
        case (408, _), (429, _), (500..., _):
            return .retry(.transport(error))
        default:
            return .fail(.refused(error))
        }
    }

    /// The indexes `details.missing` of a `409 upload_incomplete` names, below `count`,
    /// sorted, each once.
    static func indexes(_ error: TransportError, below count: Int) -> [Int] {
        guard case .refused(_, let envelope) = error, case .array(let items)? = envelope.details?["missing"] else { return [] }
        return Array(Set(items.compactMap { $0.int64Value.map(Int.init) }.filter { $0 >= 0 && $0 < count })).sorted()
    }

    // MARK: - Steps

    /// An attempt: `GET` the upload the server knows, or init (which returns an open upload
    /// of the same file again, so an init whose answer was lost is not repeated as a new
    /// upload).
    private mutating func attempt(reports: [MediaProgress.Phase]) -> Step {
        acknowledgedBefore = row.acknowledged
        awaiting = .answer
        if let id = row.uploadId { return Step(reports: reports, effect: .query(uploadId: id)) }
        // A sealed file is announced without its type and name, which only the record that
        // refers to it tells.
        let request = row.sealing == nil
            ? UploadRequest(size: row.size, sha256: row.sha256, contentType: row.contentType, filename: row.filename)
            : UploadRequest(size: row.size, sha256: row.sha256, contentType: MediaUploader.sealedContentType, filename: nil)
        return Step(reports: reports, effect: .begin(request))
    }

    /// Sends `missing` (reporting `uploading` first), or finalizes at once when none is.
    private mutating func send(_ missing: [Int], uploadId: String) -> Step {
        if missing.isEmpty { return finalize(uploadId, reports: [.uploading, .finalizing]) }
        awaiting = .sent(uploadId: uploadId)
        return Step(reports: [.uploading], effect: .sendChunks(missing))
    }

    private mutating func finalize(_ uploadId: String, reports: [MediaProgress.Phase]) -> Step {
        awaiting = .finalized(uploadId: uploadId)
        return Step(reports: reports, effect: .finalize(uploadId: uploadId))
    }

    /// The server holds the file: checked to be this one.
    private mutating func finish(_ media: MediaInfo) -> Step {
        guard media.mediaId == row.sha256, media.size == row.size else {
            return fail(.protocolViolation("the server completed media \(media.mediaId) (\(media.size) bytes), not \(row.sha256) (\(row.size) bytes)"))
        }
        awaiting = .done
        return Step(effect: .finish(media))
    }

    /// A request failed with `error`; `row` was read again.
    private mutating func failed(_ error: TransportError) -> Step {
        if row.acknowledged > acknowledgedBefore { failures = 0 }
        switch Self.classify(error, row: row) {
        case .initAgain:
            initsAgain += 1
            awaiting = .forgotUpload(error)
            return Step(effect: .update(.forgetServerUpload))
        case .fail(let failure):
            // A checksum mismatch: the server discarded the upload, and the next attempt
            // starts from a new hash.
            if case .checksumMismatch = failure { return fail(failure, forgetServerUpload: true) }
            return fail(failure)
        case .stop(let failure):
            return fail(failure)
        case .retry(let failure):
            failures += 1
            awaiting = .recorded(failure)
            return Step(effect: .recordFailure(failure))
        }
    }

    private mutating func fail(_ error: MediaError, forgetServerUpload: Bool = false, reports: [MediaProgress.Phase] = []) -> Step {
        awaiting = .done
        return Step(reports: reports, effect: .fail(error, forgetServerUpload: forgetServerUpload))
    }
}
