import Foundation

// The store keeps times as milliseconds since 1970 (the wire's unit, and SQLite's
// integers); the public API shows them as `Date` and spans as `Duration`. These are the
// two conversions, one place each.

extension Date {
    /// The time `ms` milliseconds after 1970.
    init(milliseconds ms: Int64) {
        self.init(timeIntervalSince1970: Double(ms) / 1000)
    }

    /// Milliseconds since 1970, to the nearest: a time made by `init(milliseconds:)` gives
    /// back its milliseconds exactly (the division by 1000 is not exact in binary).
    var milliseconds: Int64 {
        Int64((timeIntervalSince1970 * 1000).rounded())
    }
}
