/// The webhook deliverer's decisions, as a value (docs/architecture.md, "Webhooks"): which
/// spaces are due and when, when to scan every space, and in the space whose turn it is,
/// the run of claimed batches: when to claim, read, send and record, when to end a run
/// early, when to back off, what to do when a record is refused. `WebhookDeliverer.run`
/// feeds it what happened (`take`) and performs the step it asks for (`next`): a database
/// job, a delivery, a wait on the doorbell. It reads no clock and waits on none: every
/// instant (ms since 1970) is passed in, so its tests step it with instants of their own.
///
/// The spaces with commits due are kept each with the time it may be tried again (a
/// retry's backoff, another server's lease). A pass delivers the spaces due, earliest
/// first, one turn each; between passes the deliverer waits on its doorbell until the next
/// space is due or the next scan of every space: every `busyScanIntervalMs` while anything
/// is due, every `scanIntervalMs` otherwise, as a backstop. A space rung is due at once.
///
/// A turn delivers one space: run after run of batches (`WebhookOutbox.claim`), batch after
/// batch, until nothing is left, a delivery fails, or `batchesPerTurn` batches were sent or
/// claims made. Delivered batches are not written down one by one: the last one delivered
/// is recorded with the next write. While the run's last batch is sent, the next claim is
/// made beside it (recording the batch before it), and it begins with that batch, claimed
/// already: once it is delivered, the rest of that claim is the next run. So on SQLite,
/// where the jobs queue behind the pushes' commits, the writer's turn is taken while a
/// batch is on the wire, and a fast receiver waits for no commit but its own. A run is
/// ended early (recorded, and what is left of it claimed again) when the lease might lapse
/// during the next delivery. A record refused (another server took the lease) or a job that
/// failed ends the turn, and the space is tried again after `pauseMs`.
struct WebhookDeliveryModel: Sendable {
    /// Batches of one space delivered (or claims made) in a row before the other spaces get
    /// their turn.
    static let batchesPerTurn = 16
    /// What a lease must have left beyond a delivery's timeout for the next batch of a run
    /// to be sent before anything is written (which renews it).
    static let leaseMarginMs: Int64 = 5_000
    /// The backstop: how often every space is looked at while nothing is known to wait.
    static let scanIntervalMs: Int64 = 30_000
    /// How often the spaces are looked at, and the lag measured, while something waits.
    static let busyScanIntervalMs: Int64 = 1_000
    /// How long a space waits after a job failed or its lease was lost.
    static let pauseMs: Int64 = 1_000

    /// What happened.
    enum Input: Sendable, Equatable {
        /// The scan (`Step.scan`) found commits the webhook has not had in `spaces`.
        case scanned(spaces: [String])
        /// The scan failed.
        case scanFailed
        /// The wait (`Step.wait`) ended with what rang meanwhile.
        case rung(Doorbell.Rung)
        /// The job of a `Step.claim` or `Step.record` ended so.
        case written(Written)
        /// The batch a `Step.read` asked for.
        case read(Read)
        /// The receiver's answer to a `Step.send`.
        case answered(WebhookHTTPClient.Answer)
        /// The job started beside a send (`Step.send`'s `beside`) ended so.
        case besideWritten(Written)
        /// How a `Step.recordFailure` was recorded; nil when its job failed.
        case failureRecorded(WebhookOutbox.Failure?)
    }

    /// How a job that records a delivered batch and claims the space ended.
    enum Written: Sendable, Equatable {
        /// The job failed: nothing it was to write was written.
        case failed
        /// The batch was not recorded: another server took the lease (it sends the batch itself).
        case refused
        /// The batch was recorded (when there was one) and the claim failed.
        case claimFailed
        /// The batch was recorded (when there was one), and the claim's answer (nil: none was asked).
        case recorded(WebhookOutbox.Claim?)
    }

    /// What a `Step.read` found.
    enum Read: Sendable, Equatable {
        /// The batch's rows, and the body they are sent as.
        case batch(WebhookOutbox.Batch, body: [UInt8])
        /// The rows are gone (pruned while the webhook was forgotten): the next claim moves past them.
        case gone
        /// The batch could not be read or encoded.
        case failed
    }

    /// The job started beside a send: `recording` recorded (when set), then `space` claimed.
    struct Beside: Sendable, Equatable {
        var space: String
        var recording: WebhookOutbox.Batch?
    }

    /// What to do next; each step but the last is answered by one input.
    enum Step: Sendable, Equatable {
        /// Read which spaces have commits the webhook has not had (`WebhookOutbox.pending`);
        /// then `.scanned` or `.scanFailed`.
        case scan
        /// Wait on the doorbell until `untilMs`; then `.rung`.
        case wait(untilMs: Int64)
        /// One job: record `recording` as delivered (when set), then claim `space`; then `.written`.
        case claim(space: String, recording: WebhookOutbox.Batch?)
        /// One job: record `batch` as delivered; then `.written`.
        case record(WebhookOutbox.Batch)
        /// Read the `index`th batch of `run` and encode its body; then `.read`.
        case read(WebhookOutbox.Run, index: Int)
        /// Send `batch` as `body`; then `.answered`. With `beside`, start that job at the same
        /// time: `.collectBeside` waits for it.
        case send(WebhookOutbox.Batch, body: [UInt8], beside: Beside?)
        /// Wait for the job started beside the send; then `.besideWritten`.
        case collectBeside
        /// One job: record the failed delivery of `batch` (`WebhookOutbox.failed`); then `.failureRecorded`.
        case recordFailure(WebhookOutbox.Batch, body: [UInt8], answer: WebhookHTTPClient.Answer)
    }

    /// How long a claim keeps other servers off a space (`WebhookDeliverer.leaseMs`).
    let leaseMs: Int64
    /// The longest a delivery may take.
    let timeoutMs: Int64
    /// The spaces with commits due, each with the time it may be tried again.
    private(set) var due: [String: Int64] = [:]
    /// When every space is scanned next.
    private(set) var scanAt: Int64 = 0
    /// The space whose turn it is.
    private(set) var turn: Turn?
    private var phase = Phase.top
    /// The step asked for and not answered yet: `next` asks for it again.
    private var awaiting: Step?

    private enum Phase: Sendable {
        /// Between passes: scan, if it is time, then begin a pass.
        case top
        /// The scan asked for at this time runs.
        case scanning(at: Int64)
        /// The spaces of this pass that have not had their turn, in order.
        case passing([String])
        /// Waiting on the doorbell.
        case waiting
    }

    init(leaseMs: Int64, timeoutMs: Int64) {
        self.leaseMs = leaseMs
        self.timeoutMs = timeoutMs
    }

    /// The batch delivered last and not recorded yet, in the space whose turn it is: what
    /// is recorded when the deliverer stops.
    var unrecorded: WebhookOutbox.Batch? { turn?.unrecorded }

    /// The next step at `now`.
    mutating func next(now: Int64) -> Step {
        if let awaiting { return awaiting }
        let step = decide(now: now)
        awaiting = step
        return step
    }

    private mutating func decide(now: Int64) -> Step {
        while true {
            if var current = turn {
                switch current.next(now: now, leaseMs: leaseMs, timeoutMs: timeoutMs) {
                case .effect(let step):
                    turn = current
                    return step
                case .done(let at):
                    turn = nil
                    due[current.space] = at
                }
                continue
            }
            switch phase {
            case .top:
                if now >= scanAt {
                    phase = .scanning(at: now)
                    return .scan
                }
                beginPass(at: now)
            case .passing(var spaces):
                guard !spaces.isEmpty else {
                    phase = .waiting
                    return .wait(untilMs: min(due.values.min() ?? .max, scanAt))
                }
                turn = Turn(space: spaces.removeFirst())
                phase = .passing(spaces)
            case .scanning:
                return .scan
            case .waiting:
                return .wait(untilMs: min(due.values.min() ?? .max, scanAt))
            }
        }
    }

    /// The spaces due at `now`, earliest first (then by name), each to have a turn.
    private mutating func beginPass(at now: Int64) {
        let spaces = due.filter { $0.value <= now }.sorted { ($0.value, $0.key) < ($1.value, $1.key) }.map(\.key)
        phase = .passing(spaces)
    }

    /// Takes what happened at `now`, in answer to the step asked for last; an input that
    /// answers no step asked for is ignored.
    mutating func take(_ input: Input, now: Int64) {
        switch (phase, input) {
        case (.scanning(let at), .scanned(let spaces)):
            for space in spaces where due[space] == nil { due[space] = at }
            scanned(at: at)
        case (.scanning(let at), .scanFailed):
            scanned(at: at)
        case (.waiting, .rung(let rung)):
            for space in rung.spaces where due[space] == nil { due[space] = now }
            if rung.everything { scanAt = now }
            if !due.isEmpty { scanAt = min(scanAt, now + Self.busyScanIntervalMs) }
            phase = .top
        default:
            guard var current = turn, current.take(input, now: now, leaseMs: leaseMs) else { return }
            if let at = current.finished {
                turn = nil
                due[current.space] = at
            } else {
                turn = current
            }
        }
        awaiting = nil
    }

    /// The scan begun at `at` ended: the next is due in a second while a space is due, else
    /// after the backstop's interval; the spaces due at `at` have their turn.
    private mutating func scanned(at: Int64) {
        scanAt = at + (due.isEmpty ? Self.scanIntervalMs : Self.busyScanIntervalMs)
        beginPass(at: at)
    }
}

extension WebhookDeliveryModel {
    /// One space's turn: runs of claimed batches, until the space is left for later.
    struct Turn: Sendable {
        let space: String
        /// Runs begun (claims made or taken) in this turn.
        private(set) var runs = 0
        /// Batches sent in this turn.
        private(set) var sent = 0
        /// The batch delivered last and not recorded yet.
        private(set) var unrecorded: WebhookOutbox.Batch?
        /// A claim's answer taken before the run it begins: by the job that recorded the end
        /// of a run, or beside a run's last batch.
        private var ahead: Ahead?
        /// When the claim of the run was made.
        private var claimedAt: Int64 = 0
        /// The run being sent, and the index of its next batch.
        private(set) var run: WebhookOutbox.Run?
        private(set) var index = 0
        /// The lease is ours until then, as far as the deliverer knows: each write renews it.
        private(set) var leaseUntil: Int64 = 0
        /// When set, the turn ends once the delivered batches are recorded, and the space is
        /// due again then.
        private var endTurn: Int64?
        /// When the job beside the run's last batch was started; nil when none runs.
        private var besideAt: Int64?
        private var stage = Stage.begin

        private enum Ahead: Sendable {
            case claim(WebhookOutbox.Claim)
            case failed
        }

        private enum Stage: Sendable {
            /// A run begins: with the claim taken ahead, or a claim.
            case begin
            /// The claim beginning a run runs (asked for at `claimedAt`).
            case claiming
            /// The run's next batch is read, unless the run ends.
            case batches
            case reading
            case toSend(WebhookOutbox.Batch, [UInt8])
            case sending(WebhookOutbox.Batch, [UInt8])
            /// A delivery failed at `at`; the job beside it is collected before its failure is recorded.
            case toCollectForFailure(WebhookOutbox.Batch, [UInt8], WebhookHTTPClient.Answer, at: Int64)
            case collectingForFailure(WebhookOutbox.Batch, [UInt8], WebhookHTTPClient.Answer, at: Int64)
            case toRecordFailure(WebhookOutbox.Batch, [UInt8], WebhookHTTPClient.Answer, at: Int64)
            case recordingFailure(at: Int64)
            /// The run ended: the job beside its last batch is collected, then the delivered
            /// batches recorded and the next run claimed.
            case ending
            case collecting
            case writingEnd(at: Int64)
            /// The turn's last runs were made: the batch delivered last is recorded (asked at `at`).
            case recordingLast(at: Int64)
            /// The space is due again then; nil: nothing waits in it.
            case done(Int64?)
        }

        enum Next: Sendable, Equatable {
            case effect(Step)
            /// The turn is over: the space is due again then (nil: nothing waits in it).
            case done(Int64?)
        }

        init(space: String) {
            self.space = space
        }

        /// When the turn is over, when the space is due again (nil inside: nothing waits in it).
        var finished: Int64?? {
            if case .done(let at) = stage { return .some(at) }
            return nil
        }

        /// The turn's next step at `now`.
        mutating func next(now: Int64, leaseMs: Int64, timeoutMs: Int64) -> Next {
            while true {
                switch stage {
                case .begin:
                    if let step = begin(now: now, leaseMs: leaseMs) { return step }
                case .batches:
                    guard let run, index < run.batches.count,
                          now + timeoutMs + WebhookDeliveryModel.leaseMarginMs <= leaseUntil else {
                        stage = .ending
                        continue
                    }
                    stage = .reading
                    return .effect(.read(run, index: index))
                case .toSend(let batch, let body):
                    var beside: Beside?
                    if index == (run?.batches.count ?? 0) - 1 && sent + 1 < WebhookDeliveryModel.batchesPerTurn {
                        beside = Beside(space: space, recording: unrecorded)
                        unrecorded = nil
                        besideAt = now
                    }
                    stage = .sending(batch, body)
                    return .effect(.send(batch, body: body, beside: beside))
                case .toCollectForFailure(let batch, let body, let answer, let at):
                    stage = .collectingForFailure(batch, body, answer, at: at)
                    return .effect(.collectBeside)
                case .toRecordFailure(let batch, let body, let answer, let at):
                    stage = .recordingFailure(at: at)
                    return .effect(.recordFailure(batch, body: body, answer: answer))
                case .ending:
                    return end(now: now)
                case .done(let at):
                    return .done(at)
                case .claiming, .reading, .sending, .collectingForFailure, .recordingFailure, .collecting, .writingEnd, .recordingLast:
                    // A step waits for its answer: `WebhookDeliveryModel.next` asks for that step
                    // again without coming here. Were it to, the space is left for later.
                    return .done(now + WebhookDeliveryModel.pauseMs)
                }
            }
        }

        /// A run begins: after `batchesPerTurn` runs the turn ends (recording the batch
        /// delivered last); else the claim taken ahead is used, or a claim asked for. Nil
        /// when the stage moved on without a step.
        private mutating func begin(now: Int64, leaseMs: Int64) -> Next? {
            guard runs < WebhookDeliveryModel.batchesPerTurn else {
                // Whatever was delivered last is recorded before the other spaces' turn.
                guard let delivered = unrecorded else { return finish(now) }
                stage = .recordingLast(at: now)
                return .effect(.record(delivered))
            }
            runs += 1
            switch ahead {
            case .claim(let claim)?:
                ahead = nil
                begin(claim, leaseMs: leaseMs)
                return nil
            case .failed?:
                ahead = nil
                return finish(now + WebhookDeliveryModel.pauseMs)
            case nil:
                claimedAt = now
                stage = .claiming
                return .effect(.claim(space: space, recording: unrecorded))
            }
        }

        /// The run ended (sent, cut short, or the lease about to lapse): the job beside its
        /// last batch is collected; then the batch delivered last is recorded and, unless the
        /// turn ends, the space claimed again, in one job.
        private mutating func end(now: Int64) -> Next {
            if besideAt != nil {
                stage = .collecting
                return .effect(.collectBeside)
            }
            let another = endTurn == nil
            guard let delivered = unrecorded else {
                guard another else { return finish(endTurn) }
                stage = .writingEnd(at: now)
                return .effect(.claim(space: space, recording: nil))
            }
            stage = .writingEnd(at: now)
            return .effect(another ? .claim(space: space, recording: delivered) : .record(delivered))
        }

        private mutating func finish(_ at: Int64?) -> Next {
            stage = .done(at)
            return .done(at)
        }

        /// Acts on a claim's answer: a run is sent; otherwise the turn ends.
        private mutating func begin(_ claim: WebhookOutbox.Claim, leaseMs: Int64) {
            switch claim {
            case .idle:
                stage = .done(nil)
            case .notBefore(let at):
                stage = .done(at)
            case .run(let r):
                run = r
                index = 0
                endTurn = nil
                besideAt = nil
                leaseUntil = claimedAt + leaseMs
                stage = .batches
            }
        }

        /// Takes what happened at `now`; false when it answers no step asked for.
        mutating func take(_ input: Input, now: Int64, leaseMs: Int64) -> Bool {
            switch (stage, input) {
            case (.claiming, .written(let written)):
                claimed(written, now: now, leaseMs: leaseMs)
            case (.reading, .read(let read)):
                switch read {
                case .batch(let batch, let body): stage = .toSend(batch, body)
                case .gone: stage = .ending
                case .failed:
                    endTurn = now + WebhookDeliveryModel.pauseMs
                    stage = .ending
                }
            case (.sending(let batch, let body), .answered(let answer)):
                answered(answer, batch: batch, body: body, now: now)
            case (.collectingForFailure(let batch, let body, let answer, let at), .besideWritten(let written)):
                // The failure is recorded after the claim made beside it (which renewed the
                // lease), unless that claim found the lease lost.
                besideAt = nil
                stage = written == .refused ? .done(at + WebhookDeliveryModel.pauseMs) : .toRecordFailure(batch, body, answer, at: at)
            case (.recordingFailure(let at), .failureRecorded(let failure)):
                failureRecorded(failure, at: at, leaseMs: leaseMs)
            case (.collecting, .besideWritten(let written)):
                collected(written, now: now)
            case (.writingEnd(let at), .written(let written)):
                wroteEnd(written, at: at, now: now)
            case (.recordingLast(let at), .written(let written)):
                switch written {
                case .recorded, .claimFailed: stage = .done(now)
                case .failed, .refused: stage = .done(at + WebhookDeliveryModel.pauseMs)
                }
            default:
                return false
            }
            return true
        }

        /// The claim beginning a run answered.
        private mutating func claimed(_ written: Written, now: Int64, leaseMs: Int64) {
            switch written {
            case .failed, .claimFailed, .recorded(nil):
                stage = .done(now + WebhookDeliveryModel.pauseMs)
            case .refused:
                stage = .done(claimedAt + WebhookDeliveryModel.pauseMs)
            case .recorded(let claim?):
                unrecorded = nil
                begin(claim, leaseMs: leaseMs)
            }
        }

        /// The receiver answered the batch sent: the run goes on, or the failure is recorded.
        private mutating func answered(_ answer: WebhookHTTPClient.Answer, batch: WebhookOutbox.Batch, body: [UInt8], now: Int64) {
            sent += 1
            guard answer.delivered else {
                stage = besideAt != nil ? .toCollectForFailure(batch, body, answer, at: now) : .toRecordFailure(batch, body, answer, at: now)
                return
            }
            unrecorded = batch
            passBatch(at: now)
        }

        /// The failure of a delivery at `at` was recorded (with the batches delivered before
        /// it): a retry waits; a dead letter is passed and the run goes on.
        private mutating func failureRecorded(_ failure: WebhookOutbox.Failure?, at: Int64, leaseMs: Int64) {
            switch failure {
            case nil, .leaseLost?:
                stage = .done(at + WebhookDeliveryModel.pauseMs)
            case .retry(let retryAt)?:
                unrecorded = nil
                stage = .done(retryAt)
            case .deadLettered?:
                unrecorded = nil
                leaseUntil = at + leaseMs
                passBatch(at: at)
            }
        }

        /// The run moves past the batch just sent (delivered, or a dead letter): to the next
        /// batch, or at `batchesPerTurn` batches, at `at`, to the turn's end.
        private mutating func passBatch(at: Int64) {
            index += 1
            if sent >= WebhookDeliveryModel.batchesPerTurn {
                endTurn = at
                stage = .ending
            } else {
                stage = .batches
            }
        }

        /// The claim made beside the run's last batch answered: it begins with that batch,
        /// claimed already, so once that batch was delivered the rest of it is the next run.
        private mutating func collected(_ written: Written, now: Int64) {
            let at = besideAt ?? now
            besideAt = nil
            switch written {
            case .refused:
                stage = .done(now + WebhookDeliveryModel.pauseMs)
            case .recorded(.run(var next)?):
                if endTurn == nil, index == run?.batches.count, let delivered = unrecorded, let first = next.batches.first,
                   first.last == delivered.last && first.deliveryID == delivered.deliveryID && next.batches.count > 1 {
                    next.batches.removeFirst()
                    next.failures = 0
                    ahead = .claim(.run(next))
                    claimedAt = at
                    stage = .begin
                } else {
                    stage = .ending
                }
            case .recorded, .claimFailed, .failed:
                // What it was to record is recorded with the next write.
                stage = .ending
            }
        }

        /// The job that ended a run (asked for at `at`) answered: its claim, when it made one,
        /// begins the next run.
        private mutating func wroteEnd(_ written: Written, at: Int64, now: Int64) {
            switch written {
            case .failed, .refused:
                stage = .done(at + WebhookDeliveryModel.pauseMs)
                return
            case .claimFailed:
                ahead = .failed
            case .recorded(let claim):
                ahead = claim.map { .claim($0) }
            }
            unrecorded = nil
            claimedAt = at
            if let endTurn {
                stage = .done(endTurn)
            } else {
                stage = .begin
            }
        }
    }
}
