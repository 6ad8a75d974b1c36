import Testing
@testable import OutpostServer

/// The webhook deliverer's decisions (`WebhookDeliveryModel`), stepped with instants of the
/// tests' own: no store, no socket, no clock. Each test plays the store and the receiver,
/// answering the steps the model asks for.
@Suite struct WebhookDeliveryModelTests {
    typealias Model = WebhookDeliveryModel
    typealias Step = WebhookDeliveryModel.Step

    /// A 10 s delivery timeout, and the lease the deliverer takes with it.
    static let timeoutMs: Int64 = 10_000
    static let leaseMs: Int64 = 30_000
    static let start: Int64 = 1_764_430_000_000
    static let accepted = WebhookHTTPClient.Answer.status(204)
    static let refused = WebhookHTTPClient.Answer.status(500)

    /// A model with a clock of its own: `now` moves only when a test moves it.
    struct Driver {
        var model = Model(leaseMs: WebhookDeliveryModelTests.leaseMs, timeoutMs: WebhookDeliveryModelTests.timeoutMs)
        var now = WebhookDeliveryModelTests.start

        mutating func next() -> Step { model.next(now: now) }

        /// Takes `input`, `after` ms after the last instant.
        mutating func take(_ input: Model.Input, after ms: Int64 = 0) {
            now += ms
            model.take(input, now: now)
        }

        /// Scans, finding `spaces`.
        mutating func scan(finding spaces: [String]) {
            #expect(next() == .scan)
            take(.scanned(spaces: spaces))
        }

        /// Reads the `index`th batch of `run` and sends it, expecting `beside` with it, and
        /// answers `answer` `ms` later.
        mutating func deliver(_ run: WebhookOutbox.Run, _ index: Int, beside: Model.Beside? = nil, answer: WebhookHTTPClient.Answer = accepted,
                              after ms: Int64 = 10, sourceLocation: SourceLocation = #_sourceLocation) {
            let batch = WebhookDeliveryModelTests.batch(run, index)
            #expect(next() == .read(run, index: index), sourceLocation: sourceLocation)
            take(.read(.batch(batch, body: WebhookDeliveryModelTests.body(batch))))
            #expect(next() == .send(batch, body: WebhookDeliveryModelTests.body(batch), beside: beside), sourceLocation: sourceLocation)
            take(.answered(answer), after: ms)
        }
    }

    /// A run of `space` whose batches end at the outbox ids `lasts` (one row each).
    static func run(_ space: String, _ lasts: ClosedRange<Int64>, failures: Int = 0) -> WebhookOutbox.Run {
        WebhookOutbox.Run(webhook: "hook", spaceID: 7, space: space,
                          batches: lasts.map { WebhookOutbox.Slot(after: $0 - 1, last: $0, deliveryID: "\(space)-\($0)") }, failures: failures)
    }

    /// The `index`th batch of `run`, as `WebhookOutbox.load` reads it.
    static func batch(_ run: WebhookOutbox.Run, _ index: Int) -> WebhookOutbox.Batch {
        let slot = run.batches[index]
        return WebhookOutbox.Batch(webhook: run.webhook, spaceID: run.spaceID, space: run.space, after: slot.after, last: slot.last,
                                   deliveryID: slot.deliveryID, failures: index == 0 ? run.failures : 0, changes: [])
    }

    static func body(_ batch: WebhookOutbox.Batch) -> [UInt8] { Array(batch.deliveryID.utf8) }

    // MARK: Spaces and scans

    /// The first step is a scan; the spaces it finds are due at once, earliest first, then
    /// by name; a space a claim finds idle is dropped. The next scan is a second away while
    /// anything was due at the scan, the backstop's 30 s away while nothing was.
    @Test func aScanMakesSpacesDueAndTheScanIntervalFollowsWhetherAnythingWaits() {
        var d = Driver()
        d.scan(finding: ["north", "east"])
        #expect(d.model.due == ["north": Self.start, "east": Self.start])
        #expect(d.next() == .claim(space: "east", recording: nil))
        d.take(.written(.recorded(.idle)), after: 5)
        #expect(d.next() == .claim(space: "north", recording: nil))
        d.take(.written(.recorded(.idle)), after: 5)
        #expect(d.model.due.isEmpty)
        #expect(d.next() == .wait(untilMs: Self.start + Model.busyScanIntervalMs))

        d.take(.rung(Doorbell.Rung()), after: Model.busyScanIntervalMs - 10)
        d.scan(finding: [])
        #expect(d.next() == .wait(untilMs: Self.start + Model.busyScanIntervalMs + Model.scanIntervalMs))
        // A scan that fails is followed by the next on the same schedule.
        d.take(.rung(Doorbell.Rung()), after: Model.scanIntervalMs)
        #expect(d.next() == .scan)
        d.take(.scanFailed, after: 3)
        #expect(d.next() == .wait(untilMs: d.now - 3 + Model.scanIntervalMs))
    }

    /// A space rung while the deliverer waits is delivered at once, before the next scan and
    /// before a space that waits for its retry; the next scan comes within a second. A ring
    /// for every space brings the scan forward.
    @Test func aRungSpaceGoesFirst() {
        var d = Driver()
        d.scan(finding: ["later"])
        #expect(d.next() == .claim(space: "later", recording: nil))
        d.take(.written(.recorded(.notBefore(Self.start + 20_000))), after: 5)
        #expect(d.model.due == ["later": Self.start + 20_000])
        #expect(d.next() == .wait(untilMs: Self.start + Model.busyScanIntervalMs))

        d.take(.rung(Doorbell.Rung(spaces: ["now"])), after: 100)
        #expect(d.model.due["now"] == d.now && d.model.scanAt == Self.start + Model.busyScanIntervalMs)
        #expect(d.next() == .claim(space: "now", recording: nil))
        d.take(.written(.recorded(.idle)), after: 5)
        #expect(d.next() == .wait(untilMs: Self.start + Model.busyScanIntervalMs))

        d.take(.rung(Doorbell.Rung(spaces: [], everything: true)), after: 10)
        #expect(d.next() == .scan)
    }

    // MARK: Runs and turns

    /// A space has `batchesPerTurn` batches sent in a row; then the last one delivered is
    /// recorded (nothing claimed), and the other spaces have their turn before it goes on.
    @Test func batchesPerTurnThenTheOtherSpacesGetTheirTurn() {
        var d = Driver()
        d.scan(finding: ["a", "b"])
        let long = Self.run("a", 1...20)
        #expect(d.next() == .claim(space: "a", recording: nil))
        d.take(.written(.recorded(.run(long))))
        for index in 0..<Model.batchesPerTurn { d.deliver(long, index) }
        #expect(d.next() == .record(Self.batch(long, Model.batchesPerTurn - 1)))
        let turnEnded = d.now
        d.take(.written(.recorded(nil)), after: 5)
        #expect(d.model.due["a"] == turnEnded)
        #expect(d.next() == .claim(space: "b", recording: nil))
        d.take(.written(.recorded(.idle)), after: 5)
        // "a" is due again: the wait ends at once, and the next pass begins with it.
        #expect(d.next() == .wait(untilMs: turnEnded))
        d.take(.rung(Doorbell.Rung()))
        #expect(d.next() == .claim(space: "a", recording: nil))
    }

    /// While a run's last batch is sent, one job records the batch before it and claims the
    /// space again; that claim begins with the batch on the wire, so once it is delivered the
    /// rest of that claim is the next run, and only what is left is recorded at the end.
    @Test func theNextClaimIsMadeBesideTheRunsLastBatch() {
        var d = Driver()
        d.scan(finding: ["a"])
        let first = Self.run("a", 1...2)
        #expect(d.next() == .claim(space: "a", recording: nil))
        d.take(.written(.recorded(.run(first))))
        d.deliver(first, 0)
        d.deliver(first, 1, beside: Model.Beside(space: "a", recording: Self.batch(first, 0)))
        #expect(d.next() == .collectBeside)
        // The claim made beside begins with the batch that was on the wire.
        var claimed = Self.run("a", 2...4)
        claimed.failures = 3
        d.take(.besideWritten(.recorded(.run(claimed))))
        var rest = Self.run("a", 3...4)
        rest.failures = 0
        d.deliver(rest, 0)
        d.deliver(rest, 1, beside: Model.Beside(space: "a", recording: Self.batch(rest, 0)))
        #expect(d.next() == .collectBeside)
        // Nothing was committed since: the claim beside is the batch on the wire alone, so the
        // run ends with one job recording it and claiming again.
        d.take(.besideWritten(.recorded(.run(Self.run("a", 4...4)))))
        #expect(d.next() == .claim(space: "a", recording: Self.batch(rest, 1)))
        d.take(.written(.recorded(.idle)))
        #expect(d.next() == .wait(untilMs: Self.start + Model.busyScanIntervalMs))
        #expect(d.model.due.isEmpty && d.model.turn == nil)
    }

    /// A failed delivery is recorded (after the job beside it, which renewed the lease) and
    /// the space waits until the retry the store set; each retry's batch carries its failures,
    /// so the store's backoff grows. A dead letter is passed, and the run goes on.
    @Test func aFailedDeliveryBacksOffAndTheBackoffGrows() {
        var d = Driver()
        d.scan(finding: ["a"])
        var waits: [Int64] = []
        for failures in 0..<3 {
            let run = Self.run("a", 1...1, failures: failures)
            #expect(d.next() == .claim(space: "a", recording: nil))
            d.take(.written(.recorded(.run(run))))
            d.deliver(run, 0, beside: Model.Beside(space: "a", recording: nil), answer: Self.refused)
            #expect(d.next() == .collectBeside)
            d.take(.besideWritten(.recorded(.run(run))))
            let batch = Self.batch(run, 0)
            #expect(batch.failures == failures)
            #expect(d.next() == .recordFailure(batch, body: Self.body(batch), answer: Self.refused))
            let delay = WebhookOutbox.retryDelay(failures: batch.failures + 1, firstMs: 1_000, capMs: WebhookSettings.maxRetryDelayMs, random: 0)
            d.take(.failureRecorded(.retry(at: d.now + delay)))
            #expect(d.model.due["a"] == d.now + delay && d.model.turn == nil)
            waits.append(delay)
            // Nothing is tried before the retry: the scans come and go.
            while d.now < d.model.due["a"]! {
                switch d.next() {
                case .scan: d.take(.scanned(spaces: ["a"]))
                case .wait(let until):
                    #expect(until <= d.model.due["a"]!)
                    d.take(.rung(Doorbell.Rung()), after: until - d.now)
                case let step: Issue.record("\(step) before the retry")
                }
            }
            if d.next() == .scan { d.take(.scanned(spaces: ["a"])) }
        }
        #expect(waits == [1_000, 2_000, 4_000])

        // At its last attempt the batch is a dead letter: the run goes on with the next.
        let run = Self.run("a", 1...2, failures: 9)
        #expect(d.next() == .claim(space: "a", recording: nil))
        d.take(.written(.recorded(.run(run))))
        d.deliver(run, 0, answer: Self.refused)
        #expect(d.next() == .recordFailure(Self.batch(run, 0), body: Self.body(Self.batch(run, 0)), answer: Self.refused))
        d.take(.failureRecorded(.deadLettered))
        #expect(d.model.turn?.leaseUntil == d.now + Self.leaseMs)
        #expect(d.next() == .read(run, index: 1))
    }

    /// The next batch of a run is sent only while the lease is sure to outlast its delivery
    /// (its timeout and `leaseMarginMs`); otherwise the run ends early: the batch delivered
    /// last is recorded and what is left claimed again, in one job, which renews the lease.
    @Test func aLeaseNearItsLapseEndsTheRunEarly() {
        var d = Driver()
        d.scan(finding: ["a"])
        let run = Self.run("a", 1...3)
        #expect(d.next() == .claim(space: "a", recording: nil))
        d.take(.written(.recorded(.run(run))))
        let claimedAt = d.now
        #expect(d.model.turn?.leaseUntil == claimedAt + Self.leaseMs)
        let lastSafe = Self.leaseMs - Self.timeoutMs - Model.leaseMarginMs

        var inTime = d
        inTime.deliver(run, 0, after: lastSafe)
        #expect(inTime.next() == .read(run, index: 1))

        d.deliver(run, 0, after: lastSafe + 1)
        #expect(d.next() == .claim(space: "a", recording: Self.batch(run, 0)))
        let rest = Self.run("a", 2...3)
        d.take(.written(.recorded(.run(rest))), after: 5)
        #expect(d.next() == .read(rest, index: 0))
        #expect(d.model.turn?.leaseUntil == claimedAt + lastSafe + 1 + Self.leaseMs)
    }

    /// A record refused (another server took the lease, and sends the batches itself) drops
    /// the run: nothing more is sent or recorded of it, and the space is tried again after a
    /// pause. So does a failure recorded too late, or a claim beside a failure found refused.
    @Test func aLostLeaseDropsTheRun() {
        func leaseLapsed() -> (Driver, WebhookOutbox.Run) {
            var d = Driver()
            d.scan(finding: ["a"])
            let run = Self.run("a", 1...3)
            #expect(d.next() == .claim(space: "a", recording: nil))
            d.take(.written(.recorded(.run(run))))
            return (d, run)
        }
        var (d, run) = leaseLapsed()
        d.deliver(run, 0, after: Self.leaseMs)
        let asked = d.now
        #expect(d.next() == .claim(space: "a", recording: Self.batch(run, 0)))
        d.take(.written(.refused), after: 5)
        #expect(d.model.turn == nil && d.model.unrecorded == nil)
        #expect(d.model.due["a"] == asked + Model.pauseMs)
        #expect(d.next() == .wait(untilMs: Self.start + Model.busyScanIntervalMs))

        (d, run) = leaseLapsed()
        d.deliver(run, 0)
        d.deliver(run, 1, answer: Self.refused)
        let failedAt = d.now
        #expect(d.next() == .recordFailure(Self.batch(run, 1), body: Self.body(Self.batch(run, 1)), answer: Self.refused))
        d.take(.failureRecorded(.leaseLost), after: 5)
        #expect(d.model.turn == nil && d.model.due["a"] == failedAt + Model.pauseMs)

        (d, run) = leaseLapsed()
        d.deliver(run, 0)
        d.deliver(run, 1)
        d.deliver(run, 2, beside: Model.Beside(space: "a", recording: Self.batch(run, 1)), answer: Self.refused)
        #expect(d.next() == .collectBeside)
        d.take(.besideWritten(.refused), after: 5)
        #expect(d.model.turn == nil && d.model.due["a"] == d.now - 5 + Model.pauseMs)
    }

    /// A claim that finds another server's lease (or a retry pending) leaves the space due
    /// when that ends; a claim or a job that fails, a second from then.
    @Test func aClaimThatIsNotTakenOrFailsLeavesTheSpaceForLater() {
        var d = Driver()
        d.scan(finding: ["held", "broken", "lost"])
        #expect(d.next() == .claim(space: "broken", recording: nil))
        d.take(.written(.claimFailed), after: 5)
        #expect(d.model.due["broken"] == d.now + Model.pauseMs)
        #expect(d.next() == .claim(space: "held", recording: nil))
        d.take(.written(.recorded(.notBefore(Self.start + 7_000))), after: 5)
        #expect(d.model.due["held"] == Self.start + 7_000)
        #expect(d.next() == .claim(space: "lost", recording: nil))
        d.take(.written(.failed), after: 5)
        #expect(d.model.due["lost"] == d.now + Model.pauseMs)
        #expect(d.next() == .wait(untilMs: Self.start + Model.busyScanIntervalMs))
    }

    /// A batch whose rows are gone ends the run: it is claimed again (the claim moves past
    /// it). One that cannot be read ends the turn, the batches delivered before it recorded.
    @Test func aBatchGoneOrUnreadableEndsTheRun() {
        var d = Driver()
        d.scan(finding: ["a"])
        let run = Self.run("a", 1...3)
        #expect(d.next() == .claim(space: "a", recording: nil))
        d.take(.written(.recorded(.run(run))))
        var unreadable = d
        #expect(d.next() == .read(run, index: 0))
        d.take(.read(.gone))
        #expect(d.next() == .claim(space: "a", recording: nil))

        unreadable.deliver(run, 0)
        #expect(unreadable.next() == .read(run, index: 1))
        unreadable.take(.read(.failed), after: 5)
        #expect(unreadable.next() == .record(Self.batch(run, 0)))
        let readFailed = unreadable.now
        unreadable.take(.written(.recorded(nil)), after: 5)
        #expect(unreadable.model.due["a"] == readFailed + Model.pauseMs)
    }

    /// When the deliverer stops, the batch delivered last and not recorded is what it records.
    @Test func theBatchDeliveredLastIsKnownUntilItIsRecorded() {
        var d = Driver()
        d.scan(finding: ["a"])
        let run = Self.run("a", 1...3)
        #expect(d.next() == .claim(space: "a", recording: nil))
        d.take(.written(.recorded(.run(run))))
        #expect(d.model.unrecorded == nil)
        d.deliver(run, 0)
        #expect(d.model.unrecorded == Self.batch(run, 0))
        d.deliver(run, 1)
        #expect(d.model.unrecorded == Self.batch(run, 1))
        // The job beside the last batch records it.
        d.deliver(run, 2, beside: Model.Beside(space: "a", recording: Self.batch(run, 1)), answer: Self.refused)
        #expect(d.model.unrecorded == nil)
        // A step asked for and not answered is asked for again.
        #expect(d.next() == .collectBeside && d.next() == .collectBeside)
    }

    // MARK: The lag

    /// The lag is measured at the scrape, from the oldest commit each space waits with: it
    /// grows with the scrape's time while nothing is delivered (a delivery held, a receiver
    /// down), whatever the deliverer does; a ring notes a commit in a space that had none
    /// waiting; a scan replaces what it read, keeping a ring since it began; a batch about to
    /// be sent gives its space's oldest; a space found idle is dropped.
    @Test func theLagGrowsWithTheScrapesTimeWhileCommitsWait() {
        let waiting = Waiting()
        #expect(waiting.lagSeconds(nowMs: Self.start) == 0)
        waiting.committed("north", at: Self.start)
        waiting.committed("north", at: Self.start + 500)
        #expect(waiting.lagSeconds(nowMs: Self.start + 1_000) == 1)
        #expect(waiting.lagSeconds(nowMs: Self.start + 61_000) == 61)

        waiting.committed("south", at: Self.start + 3_000)
        waiting.scanned([(space: "north", oldest: Self.start + 2_000)], startedAt: Self.start + 2_500)
        #expect(waiting.lagSeconds(nowMs: Self.start + 4_000) == 2)
        waiting.idle("north")
        #expect(waiting.lagSeconds(nowMs: Self.start + 4_000) == 1)
        waiting.oldest("south", Self.start + 3_500)
        #expect(waiting.lagSeconds(nowMs: Self.start + 4_000) == 0.5)
        waiting.idle("south")
        #expect(waiting.lagSeconds(nowMs: Self.start + 9_000) == 0)
        // A commit noted before a scan began is replaced by what the scan read.
        waiting.committed("east", at: Self.start + 9_000)
        waiting.scanned([], startedAt: Self.start + 9_500)
        #expect(waiting.lagSeconds(nowMs: Self.start + 10_000) == 0)
    }
}
