import OutpostCore

/// How a server judges a re-offer's lineage (docs/protocol.md section 4, "Re-offers"): the
/// rules `PushRules.check` and `PushRules.apply` hold a change with a `lineage` to. The SDK
/// only sends lineages (`Lineage` itself is a wire type of `OutpostCore`); judging them is
/// the server's, so it lives here, beside the push rules.
extension Lineage {
    /// Why a server whose epoch is `serverEpoch` rejects `change`'s lineage with
    /// `invalid_change` (docs/protocol.md section 4, added in 1.1), or nil when it is acceptable
    /// or absent: a re-offer carries a copy of an earlier history, so its version must name
    /// an epoch before the current one, and it cannot skip the descent check with `force`.
    public static func problem(of change: Change, serverEpoch: Epoch) -> String? {
        guard let lineage = change.lineage else { return nil }
        if change.force { return "a re-offer (lineage) cannot be forced" }
        guard lineage.version.epoch < serverEpoch else {
            return "lineage.version names epoch \(lineage.version.epoch), which is not earlier than the current epoch \(serverEpoch)"
        }
        return nil
    }

    /// How much later than the end of its epoch a lineage's commit time may be (5 minutes):
    /// the clocks of the servers that wrote a history, and of the one that ended it, may
    /// differ by that much.
    public static let clockAllowance: Int64 = 300_000

    /// Why a store whose history of epochs is `history` refuses this lineage
    /// (`invalid_change`, docs/protocol.md section 4, "Re-offers", rule 3): the field at fault and
    /// the reason; nil when that history could have committed this copy at this time. Its
    /// commit time is no later than the history moved past its epoch
    /// (`EpochHistory.movedPast`), with `clockAllowance`, and not before 1970. (That its
    /// epoch is earlier than the current one is `problem(of:serverEpoch:)`'s rule.)
    public func problem(in history: PushRules.EpochHistory) -> (field: String, message: String)? {
        guard updatedAt >= 0 else { return ("lineage.updatedAt", "lineage.updatedAt \(updatedAt) is before 1970") }
        let latest = history.movedPast(version.epoch)
        guard updatedAt <= latest + Self.clockAllowance else {
            return ("lineage.updatedAt", "lineage.updatedAt \(updatedAt) is after this server's history moved past epoch \(version.epoch) (at \(latest)): "
                + "no commit of that epoch is so late")
        }
        return nil
    }

    /// True when a re-offer of this copy may replace a current state whose `sameAs` is
    /// `current` (docs/protocol.md section 4, added in 1.1): the current state is this copy or an
    /// ancestor of it in the same earlier history, with nothing written on it since. A state
    /// written in the later history (fresh, or on a restored state: its lineage is kept but
    /// its `sameAs` is not) holds writes the re-offer never saw.
    public func admits(current: Version?) -> Bool {
        guard let current else { return false }
        return current.epoch == version.epoch && current.seq <= version.seq
    }
}
