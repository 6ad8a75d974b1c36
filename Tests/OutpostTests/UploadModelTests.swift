import Foundation
import OutpostCore
import Testing
@testable import Outpost

/// The uploader's decisions, stepped without a socket, a store, a file or a sleep
/// (`UploadModel`): where it asks the server, which chunks it sends, what each failure of a
/// request means, how long it retries and when it gives up.
@Suite("The media uploader as a model")
struct UploadModelTests {
    typealias Model = UploadModel
    static let sha = String(repeating: "ab", count: 32)
    static let maxAttempts = 3

    /// A 10-byte file: three chunks of 4 bytes once the server names the chunk size.
    static func row(uploadId: String? = nil, received: [Int] = [], sealed: Bool = false) -> UploadRow {
        var row = UploadRow(number: 7, path: "/tmp/photo.jpg", identity: FileIdentity(size: 10, modifiedNs: 1, device: 1, inode: 1),
                            sha256: sha, contentType: "image/jpeg", filename: "photo.jpg", uploadId: uploadId,
                            chunkSize: uploadId == nil ? nil : 4, received: [], state: .waiting, attempts: 0, nextAttemptAt: 0,
                            lastError: nil, errorCode: nil, createdAt: 0)
        row.setReceived(received)
        if sealed { row.sealing = Sealing(kid: "k1", prefix: [UInt8](repeating: 1, count: 7), segmentSize: 4) }
        return row
    }

    static func state(_ id: String = "u1", for row: UploadRow = row(), received: [Int] = [], chunkSize: Int = 4) -> UploadState {
        UploadState(uploadId: id, size: row.size, sha256: row.sha256, chunkSize: chunkSize,
                    chunkCount: UploadState.chunkCount(size: row.size, chunkSize: chunkSize), received: received, expiresAt: 0)
    }

    static func media(size: Int64 = 10, sha256: String = sha) -> MediaInfo {
        MediaInfo(mediaId: sha256, sha256: sha256, size: size, contentType: "image/jpeg", url: "/m", createdAt: 0)
    }

    static func refused(_ status: Int, _ code: String, _ details: JSONObject? = nil) -> TransportError {
        .refused(status: status, ErrorEnvelope(code: code, message: code, details: details))
    }

    static func incomplete(_ missing: [Int]) -> TransportError {
        refused(409, "upload_incomplete", ["missing": .array(missing.map { .number(JSONNumber(Int64($0))) })])
    }

    /// The model with a stand-in for the store: row changes are applied to `stored`.
    struct Driver {
        var model: Model
        var stored: UploadRow

        init(_ row: UploadRow = UploadModelTests.row()) {
            model = Model(row: row, maxAttempts: UploadModelTests.maxAttempts)
            stored = row
        }

        /// Feeds `input`; an update it asks for is stored and fed back, as the shell does.
        mutating func take(_ input: Model.Input) -> Model.Step {
            var step = model.take(input)
            while case .update(let change) = step.effect {
                change.apply(to: &stored)
                step = model.take(.stored(stored))
            }
            return step
        }

        /// The server's open upload answered, its received chunks adopted.
        mutating func opened(received: [Int] = []) -> Model.Step {
            _ = model.start()
            return take(.answered(.open(UploadModelTests.state(for: stored, received: received))))
        }

        /// The chunks `indexes` acknowledged.
        mutating func sent(_ indexes: [Int]) -> Model.Step {
            for i in indexes { stored.mark(i) }
            return take(.sent(stored))
        }

        /// A request failed with `error`: the row is read again, as stored.
        mutating func failed(_ error: TransportError) -> Model.Step {
            let step = take(.failed(error))
            guard step.effect == .reload else { return step }
            return take(.reloaded(stored))
        }
    }

    // MARK: - The way through

    @Test func aNewUploadInitsThenSendsTheMissingChunksThenFinalizes() {
        let row = Self.row()
        var d = Driver(row)
        #expect(d.model.start() == Model.Step(reports: [.uploading], effect: .begin(UploadRequest(size: 10, sha256: Self.sha, contentType: "image/jpeg", filename: "photo.jpg"))))
        let state = Self.state(received: [1])
        #expect(d.model.take(.answered(.open(state))) == Model.Step(effect: .update(.adopt(state))))
        Model.RowChange.adopt(state).apply(to: &d.stored)
        #expect(d.stored.uploadId == "u1" && d.stored.chunkSize == 4 && d.stored.acknowledged == 1)
        #expect(d.model.take(.stored(d.stored)) == Model.Step(reports: [.uploading], effect: .sendChunks([0, 2])))
        #expect(d.sent([0, 2]) == Model.Step(reports: [.finalizing], effect: .finalize(uploadId: "u1")))
        #expect(d.take(.finalized(Self.media())) == Model.Step(effect: .finish(Self.media())))
        #expect(d.model.failures == 0 && d.model.initsAgain == 0 && d.model.incompleteRounds == 0)
    }

    @Test func aServerHoldingEveryChunkIsFinalizedAtOnce() {
        var d = Driver()
        #expect(d.opened(received: [0, 1, 2]) == Model.Step(reports: [.uploading, .finalizing], effect: .finalize(uploadId: "u1")))
    }

    @Test func anInitAnsweredCompleteFinishesWithNothingSent() {
        var d = Driver()
        _ = d.model.start()
        #expect(d.take(.answered(.complete(Self.media()))) == Model.Step(effect: .finish(Self.media())))
    }

    @Test func aSealedFileIsAnnouncedWithoutItsTypeAndName() {
        var model = Model(row: Self.row(sealed: true), maxAttempts: Self.maxAttempts)
        guard case .begin(let request) = model.start().effect else {
            Issue.record("no init")
            return
        }
        #expect(request.contentType == MediaUploader.sealedContentType && request.filename == nil)
        #expect(request.size == Self.row(sealed: true).size && request.sha256 == Self.sha)
    }

    @Test func aKnownUploadIsAskedForWithGet() {
        var d = Driver(Self.row(uploadId: "u9", received: [0]))
        #expect(d.model.start() == Model.Step(reports: [.uploading], effect: .query(uploadId: "u9")))
        // The server's `received` counts, not the stored bitmap: it lacks chunk 0 after all.
        let state = Self.state("u9", received: [2])
        #expect(d.take(.answered(.open(state))) == Model.Step(reports: [.uploading], effect: .sendChunks([0, 1])))
    }

    // MARK: - Answers that are not this file's

    @Test func anOpenUploadOfAnotherFileIsAProtocolViolation() {
        for state in [UploadState(uploadId: "u1", size: 10, sha256: Self.sha, chunkSize: 0, chunkCount: 0, received: [], expiresAt: 0),
                      UploadState(uploadId: "u1", size: 11, sha256: Self.sha, chunkSize: 4, chunkCount: 3, received: [], expiresAt: 0),
                      UploadState(uploadId: "u1", size: 10, sha256: String(repeating: "cd", count: 32), chunkSize: 4, chunkCount: 3, received: [], expiresAt: 0),
                      UploadState(uploadId: "u1", size: 10, sha256: Self.sha, chunkSize: 4, chunkCount: 4, received: [], expiresAt: 0)] {
            var model = Model(row: Self.row(), maxAttempts: Self.maxAttempts)
            _ = model.start()
            let step = model.take(.answered(.open(state)))
            guard case .fail(.protocolViolation, forgetServerUpload: false) = step.effect else {
                Issue.record("\(state) gave \(step)")
                continue
            }
        }
    }

    @Test func mediaCompletedForAnotherFileIsAProtocolViolation() {
        var d = Driver()
        _ = d.model.start()
        #expect(Self.isProtocolViolation(d.take(.answered(.complete(Self.media(size: 11))))))
        var e = Driver()
        _ = e.opened(received: [0, 1, 2])
        #expect(Self.isProtocolViolation(e.take(.finalized(Self.media(sha256: String(repeating: "cd", count: 32))))))
    }

    @Test func aChunkThatCannotBeReadOrAReceiptForAnotherChunkStopsTheCall() {
        var d = Driver()
        _ = d.opened()
        let error = MediaError.protocolViolation("chunk 0 was answered as chunk 1")
        #expect(d.take(.broke(error)) == Model.Step(effect: .fail(error)))
    }

    // MARK: - Failed requests

    @Test func anUploadTheServerForgotIsInitAgainBoundedByMaxAttempts() {
        let gone = Self.refused(404, "upload_not_found")
        var d = Driver(Self.row(uploadId: "u1", received: [0]))
        _ = d.model.start()
        #expect(d.take(.failed(gone)) == Model.Step(effect: .reload))
        #expect(d.model.take(.reloaded(d.stored)) == Model.Step(effect: .update(.forgetServerUpload)))
        d.stored.forgetServerUpload()
        let initAgain = Model.Step(reports: [.uploading], effect: .begin(UploadRequest(size: 10, sha256: Self.sha, contentType: "image/jpeg", filename: "photo.jpg")))
        #expect(d.model.take(.stored(d.stored)) == initAgain)
        for _ in 2...Self.maxAttempts {
            #expect(d.failed(gone) == initAgain)
        }
        #expect(d.failed(gone) == Model.Step(reports: [.uploading], effect: .fail(.transport(gone))))
        #expect(d.stored.uploadId == nil && d.model.initsAgain == Self.maxAttempts + 1)
    }

    @Test func aChecksumMismatchFailsForGoodAndForgetsTheServerUpload() {
        var d = Driver()
        _ = d.opened(received: [0, 1, 2])
        let mismatch = Self.refused(422, "checksum_mismatch", ["actual": "ff"])
        #expect(d.failed(mismatch) == Model.Step(effect: .fail(.checksumMismatch(expected: Self.sha, actual: "ff"), forgetServerUpload: true)))
        #expect(Model.classify(Self.refused(422, "checksum_mismatch", ["expected": "ee"]), row: Self.row())
                == .fail(.checksumMismatch(expected: "ee", actual: nil)))
    }

    @Test func aFileTooLargeFailsForGood() {
        var d = Driver()
        _ = d.model.start()
        #expect(d.failed(Self.refused(413, "payload_too_large", ["limit": 8])) == Model.Step(effect: .fail(.tooLarge(size: 10, limit: 8))))
        #expect(Model.classify(Self.refused(413, "payload_too_large"), row: Self.row()) == .fail(.tooLarge(size: 10, limit: nil)))
    }

    @Test func unauthorizedOrForbiddenStopsTheCallAndTheUploadWaits() {
        for status in [401, 403] {
            let error = Self.refused(status, "unauthorized")
            var d = Driver()
            _ = d.opened()
            let step = d.failed(error)
            #expect(step == Model.Step(effect: .fail(.transport(error))))
            #expect(MediaError.transport(error).isPermanent == false)
        }
    }

    @Test func chunkRefusalsAreProtocolViolationsAndOtherRefusalsPermanent() {
        for (status, code) in [(422, "invalid_chunk_size"), (422, "invalid_chunk_index"), (400, "digest_required")] {
            guard case .stop(.protocolViolation) = Model.classify(Self.refused(status, code), row: Self.row()) else {
                Issue.record("\(status) \(code) is not a protocol violation")
                continue
            }
        }
        let invalid = Self.refused(400, "invalid_content_type")
        #expect(Model.classify(invalid, row: Self.row()) == .fail(.refused(invalid)))
        // upload_incomplete is finalize's answer: from a chunk it is a refusal like any other.
        var d = Driver()
        _ = d.opened()
        let fromChunk = Self.incomplete([0])
        #expect(d.failed(fromChunk) == Model.Step(effect: .fail(.refused(fromChunk))))
    }

    @Test func serverAndNetworkFailuresAreRetriedWithTheStoresDelay() {
        let retried: [TransportError] = [Self.refused(500, "internal"), Self.refused(503, "unavailable"), Self.refused(408, "timeout"),
                                         Self.refused(429, "rate_limited"), Self.refused(422, "digest_mismatch"),
                                         .noAnswer("reset"), .notSent("offline"), .badAnswer(status: 502, "html"), .answerTooLarge(limit: 1)]
        for error in retried {
            #expect(Model.classify(error, row: Self.row()) == .retry(.transport(error)))
            var d = Driver()
            _ = d.opened()
            #expect(d.failed(error) == Model.Step(effect: .recordFailure(.transport(error))))
            #expect(d.take(.recorded(delayMs: 1234)) == Model.Step(effect: .wait(milliseconds: 1234)))
            #expect(d.take(.waited) == Model.Step(effect: .query(uploadId: "u1")), "the next attempt asks the server again")
            #expect(d.model.failures == 1)
        }
    }

    @Test func retriesGiveUpAfterMaxAttemptsInARowWithoutProgress() {
        let down = TransportError.noAnswer("timeout")
        var d = Driver()
        _ = d.model.start()
        for attempt in 1..<Self.maxAttempts {
            #expect(d.failed(down) == Model.Step(effect: .recordFailure(.transport(down))))
            #expect(d.take(.recorded(delayMs: Int64(attempt) * 100)) == Model.Step(effect: .wait(milliseconds: Int64(attempt) * 100)))
            guard case .begin = d.take(.waited).effect else {
                Issue.record("attempt \(attempt) does not init again")
                return
            }
        }
        #expect(d.failed(down) == Model.Step(effect: .recordFailure(.transport(down))))
        #expect(d.take(.recorded(delayMs: 900)) == Model.Step(effect: .giveUp(.transport(down))), "recorded, then thrown")
        #expect(d.model.failures == Self.maxAttempts)
    }

    @Test func failuresStartOverWhenMoreChunksWereAcknowledged() {
        let down = TransportError.noAnswer("reset")
        var d = Driver()
        _ = d.opened()
        // Failures without progress count up…
        for attempt in 1..<Self.maxAttempts {
            _ = d.failed(down)
            _ = d.take(.recorded(delayMs: 10))
            #expect(d.take(.waited).effect == .query(uploadId: "u1"))
            #expect(d.take(.answered(.open(Self.state(for: d.stored)))).effect == .sendChunks([0, 1, 2]))
            #expect(d.model.failures == attempt)
        }
        // …and a failure after a chunk was acknowledged in this attempt counts as the first.
        d.stored.mark(0)
        #expect(d.failed(down) == Model.Step(effect: .recordFailure(.transport(down))))
        #expect(d.model.failures == 1)
        #expect(d.take(.recorded(delayMs: 10)) == Model.Step(effect: .wait(milliseconds: 10)))
        // A failure with no more chunks than the attempt began with counts on.
        #expect(d.take(.waited).effect == .query(uploadId: "u1"))
        _ = d.failed(down)
        #expect(d.model.failures == 2)
    }

    // MARK: - Finalize's upload_incomplete

    @Test func finalizeNamingMissingChunksSendsThemAgainThenFinalizes() {
        var d = Driver()
        _ = d.opened()
        #expect(d.sent([0, 1, 2]).effect == .finalize(uploadId: "u1"))
        // Named chunks the file does not have are left out, each is sent once.
        #expect(d.model.take(.failed(Self.incomplete([2, 0, 2, 99, -1]))) == Model.Step(effect: .update(.forgetChunks([0, 2]))))
        Model.RowChange.forgetChunks([0, 2]).apply(to: &d.stored)
        #expect(d.stored.acknowledged == 1 && d.stored.has(1))
        #expect(d.model.take(.stored(d.stored)) == Model.Step(reports: [.uploading], effect: .sendChunks([0, 2])))
        #expect(d.sent([0, 2]) == Model.Step(reports: [.finalizing], effect: .finalize(uploadId: "u1")))
        #expect(d.take(.finalized(Self.media())) == Model.Step(effect: .finish(Self.media())))
        #expect(d.model.incompleteRounds == 1)
    }

    @Test func finalizeKeepsAnsweringIncompleteIsAProtocolViolationAfterMaxAttemptsRounds() {
        var d = Driver()
        _ = d.opened(received: [0, 1, 2])
        for _ in 1...Self.maxAttempts {
            #expect(d.take(.failed(Self.incomplete([1]))) == Model.Step(reports: [.uploading], effect: .sendChunks([1])))
            #expect(d.sent([1]).effect == .finalize(uploadId: "u1"))
        }
        #expect(Self.isProtocolViolation(d.take(.failed(Self.incomplete([1])))))
        #expect(d.model.failures == 0, "no request failed")
    }

    @Test func finalizeIncompleteNamingNoChunkIsAProtocolViolation() {
        var d = Driver()
        _ = d.opened(received: [0, 1, 2])
        #expect(Self.isProtocolViolation(d.take(.failed(Self.incomplete([])))))
        var e = Driver()
        _ = e.opened(received: [0, 1, 2])
        #expect(Self.isProtocolViolation(e.take(.failed(Self.incomplete([3, 7])))))
    }

    // MARK: - Row changes

    @Test func adoptingKeepsOnlyTheServersChunksOfThisFile() {
        var row = Self.row(uploadId: "old", received: [0, 1, 2])
        Model.RowChange.adopt(Self.state("u2", received: [2, 5])).apply(to: &row)
        #expect(row.uploadId == "u2" && row.chunkSize == 4)
        #expect((0..<row.chunkCount).filter(row.has) == [2] && !row.has(5))
        Model.RowChange.forgetServerUpload.apply(to: &row)
        #expect(row.uploadId == nil && row.chunkSize == nil && row.received.isEmpty)
    }

    static func isProtocolViolation(_ step: Model.Step) -> Bool {
        if case .fail(.protocolViolation, forgetServerUpload: false) = step.effect, step.reports.isEmpty { return true }
        return false
    }
}
