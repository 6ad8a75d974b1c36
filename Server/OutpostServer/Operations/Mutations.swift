/// Deliberate bugs, one at a time, for the conformance suite's mutation test: a suite
/// that cannot fail proves nothing, so `ConformanceTests` starts servers with each of
/// these switched on and expects at least one named check to catch it.
///
/// Only reachable through `@_spi(Mutants)`; `outpost-server` never sets one (there is no
/// flag or environment variable for it).
@_spi(Mutants)
public enum ServerMutation: String, Sendable, CaseIterable {
    /// Applied change ids are neither looked up nor remembered.
    case forgetIdempotency
    /// Seqs are not persisted with the write, so a restart hands out the newest seq again.
    case reuseSeqAfterRestart
    /// Pull pages ignore their byte budget.
    case pageOverBudget
    /// Tokens with `alg: none` are accepted without a signature.
    case acceptAlgNone
    /// A cursor of another epoch is read as if it were of the current one.
    case acceptForeignEpochCursor
    /// Tombstones are left out of pull pages.
    case dropTombstones
    /// A push's changes are applied last to first.
    case applyOutOfOrder
    /// `maxChangesPerPush` is not enforced.
    case ignoreMaxChangesPerPush
    /// The push route accepts bodies of any size (a 413 case answered 200).
    case ignoreBodyLimit
    /// Pages list records of every space, not just the requested one.
    case leakOtherSpaces
    /// A conflict reports the record's previous version as `current`.
    case staleCurrentOnConflict
    /// Finalize publishes an upload without checking the whole file's SHA-256.
    case skipWholeFileHash
    /// Pull treats a cursor beyond the head as the head instead of `cursor_ahead`.
    case acceptCursorAhead
    /// Conflicts are applied as if `force` were set.
    case ignoreBaseVersion
    /// A re-offer is applied as an edit, as a 1.0 server would: no descent check, no
    /// lineage kept, stamped with its arrival time.
    case reofferAsEdit
    /// A re-offer is admitted by the current state's lineage instead of its sameAs, so it
    /// replaces a write made since on a restored or re-offered state, one it never saw.
    case reofferJudgedByLineage
}
