import Foundation
import OutpostCore

/// What the store knows of its device's clock against the server's (docs/client.md, "The
/// device's clock").
public struct ClockStatus: Sendable, Hashable {
    /// Why the device's clock is not to be trusted.
    public enum Anomaly: Sendable, Hashable {
        /// It differs from the server's by more than `threshold`.
        case offsetBeyondThreshold
        /// It went back between the last two measurements (set back by hand, or by a
        /// dead battery), by `jumpedBackwards`.
        case jumpedBackwards
    }

    /// The server's clock minus the device's; nil before the first sync that read the
    /// server's time.
    public var offset: Duration?
    /// How far `offset` may be off (half the round trip of the answer it came from, and the
    /// header's resolution).
    public var uncertainty: Duration?
    /// When it was measured, by the device's clock.
    public var measuredAt: Date?
    /// How far the device's clock went back between the last two measurements, when it did.
    public var jumpedBackwards: Duration?
    /// The offset beyond which the clock counts as wrong (`Configuration.clockThreshold`).
    public var threshold: Duration

    public var anomalies: Set<Anomaly> {
        var out: Set<Anomaly> = []
        if let offset, (offset < .zero ? .zero - offset : offset) > threshold + (uncertainty ?? .zero) { out.insert(.offsetBeyondThreshold) }
        if jumpedBackwards != nil { out.insert(.jumpedBackwards) }
        return out
    }

    /// True when there is an anomaly.
    public var isAnomalous: Bool { !anomalies.isEmpty }
}

extension OutpostStore {
    /// The device's clock against the server's, as the last syncs measured it.
    public func clockStatus() throws -> ClockStatus {
        try read { d in
            ClockStatus(offset: try d.meta(.clockOffset).flatMap { Int64($0) }.map(Duration.milliseconds),
                        uncertainty: try d.meta(.clockUncertainty).flatMap { Int64($0) }.map(Duration.milliseconds),
                        measuredAt: try d.meta(.clockMeasuredAt).flatMap { Int64($0) }.map(Date.init(milliseconds:)),
                        jumpedBackwards: try d.meta(.clockJumpedBack).flatMap { Int64($0) }.map(Duration.milliseconds),
                        threshold: configuration.clockThreshold)
        }
    }

    /// The time by the server's clock, as this device estimates it: the device's clock
    /// corrected by the measured offset (the device's own when none was measured yet).
    /// The device's edits carry it as their `clientTime`, so last-write-wins compares
    /// edits by one clock.
    func serverNow() -> Int64 {
        now() &+ (readings.clockOffset ?? 0)
    }

    /// Takes the transport's best reading of the server's clock since the last sync and
    /// stores the offset it gives; a rise of the offset by more than both measurements'
    /// uncertainty and a second is the device's clock going back.
    func measureClock(_ transport: any SyncTransport) {
        guard let reading = transport.takeServerClockReading(), life.hasDatabase else {
            readings.lastRoundTripMs = nil
            return
        }
        let (seconds, attoseconds) = (ContinuousClock.now - reading.receivedAt).components
        let deviceAtArrival = now() - (seconds * 1000 + attoseconds / 1_000_000_000_000_000)
        // The server wrote its time between the request's start and the arrival: take the
        // middle of that interval.
        let offset = reading.serverTimeMs + reading.roundTripMs / 2 - deviceAtArrival
        let uncertainty = reading.uncertaintyMs
        try? write(durability: .normal) { d in
            var jumped: Int64?
            if let previous = try d.meta(.clockOffset).flatMap({ Int64($0) }) {
                let previousUncertainty = try d.meta(.clockUncertainty).flatMap { Int64($0) } ?? 0
                let rise = offset - previous
                if rise > uncertainty + previousUncertainty + 1000 { jumped = rise }
            }
            try d.setMeta(.clockOffset, String(offset))
            try d.setMeta(.clockUncertainty, String(uncertainty))
            try d.setMeta(.clockMeasuredAt, String(deviceAtArrival))
            try d.setMeta(.clockJumpedBack, jumped.map { String($0) })
        }
        readings.clockOffset = offset
        readings.lastRoundTripMs = reading.roundTripMs
    }
}

/// The device-readings part of a store, owned by its actor and used only on it: the
/// server's clock minus the device's as last measured (what `serverNow()` corrects by), the
/// round trip of the last sync's best clock reading, and whether the telemetry outbox is
/// being sent (one sender at a time).
final class DeviceReadings {
    var clockOffset: Int64?
    var lastRoundTripMs: Int64?
    var sendingTelemetry = false

    init(clockOffset: Int64?) {
        self.clockOffset = clockOffset
    }
}
