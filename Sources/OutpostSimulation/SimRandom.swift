import OutpostCore
import Synchronization

/// The one seeded generator every choice of a simulation run is drawn from (SplitMix64),
/// so a run replays exactly from its seed, with the draws a run needs.
public struct SimRandom: RandomNumberGenerator, Sendable {
    private var source: SplitMix64

    /// The generator's state.
    public var state: UInt64 { source.state }

    /// A generator seeded with `seed`.
    public init(seed: UInt64) {
        source = SplitMix64(seed: seed)
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        source.next()
    }

    /// A uniform integer in `0..<n` (`n` > 0).
    public mutating func below(_ n: Int) -> Int {
        precondition(n > 0, "below(\(n))")
        return Int(next() % UInt64(n))
    }

    /// A uniform integer in `range`.
    public mutating func int(in range: ClosedRange<Int64>) -> Int64 {
        range.lowerBound + Int64(next() % UInt64(range.upperBound - range.lowerBound + 1))
    }

    /// A uniform value in `0..<1`.
    public mutating func unit() -> Double {
        Double(next() >> 11) * (1.0 / Double(UInt64(1) << 53))
    }

    /// True with probability `p`.
    public mutating func chance(_ p: Double) -> Bool {
        unit() < p
    }

    /// One element of a non-empty array.
    public mutating func pick<T>(_ items: [T]) -> T {
        items[below(items.count)]
    }

    /// One of `choices`, drawn with the given weights (at least one positive).
    public mutating func weighted<T>(_ choices: [(T, Double)]) -> T {
        let total = choices.reduce(0) { $0 + max(0, $1.1) }
        precondition(total > 0, "weighted() needs a positive weight")
        var x = unit() * total
        for (value, weight) in choices where weight > 0 {
            if x < weight { return value }
            x -= weight
        }
        return choices.last { $0.1 > 0 }!.0
    }

    /// A seed for another generator, derived from this one's stream.
    public mutating func derive() -> UInt64 { next() }
}

/// The simulation's time: milliseconds since 1970, moved only by the simulation. Devices
/// read it through their own offset (a skewed clock); the server reads it as is.
public final class VirtualClock: Sendable {
    private let value: Atomic<Int64>

    /// A clock reading `start`.
    public init(start: Int64) {
        value = Atomic(start)
    }

    /// The current time.
    public var now: Int64 { value.load(ordering: .relaxed) }

    /// Moves the clock forward by `ms`.
    public func advance(_ ms: Int64) {
        precondition(ms >= 0, "virtual time only moves forward")
        value.wrappingAdd(ms, ordering: .relaxed)
    }
}

/// A device's clock offset, changed by the clock-skew fault while the store runs.
final class ClockOffset: Sendable {
    private let value = Atomic<Int64>(0)

    var ms: Int64 {
        get { value.load(ordering: .relaxed) }
        set { value.store(newValue, ordering: .relaxed) }
    }
}
