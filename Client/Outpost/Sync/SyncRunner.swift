import OutpostCore

/// The sync part's state, owned by the store's actor and used only on it: one sync at a
/// time (the gate), the task of the sync running now, the changes of the push request
/// awaiting its answer, what the running pull has received, the field kinds the server
/// declared, and the server's limits as last read. What a sync does next is the session's
/// (`SyncSession`); the store's `Sync/` extensions perform it with this state.
final class SyncRunner {
    /// One sync (or re-pull, epoch change, long-poll page) at a time.
    let gate = SyncGate()
    /// The task of the sync running now: `suspend()` cancels it when its caller is.
    var running: Task<SyncReport, any Error>?
    /// Changes in the push request now awaiting its answer.
    var inFlight: Set<String> = []
    /// Records the running sync's pull has received so far (for `SyncProgress`).
    var pulled = 0
    /// The field kinds the server declared in the last page pulled (meta `field_kinds`):
    /// what `.mergeFields` merges by (docs/client.md, "Field kinds").
    var fieldKinds: FieldKinds
    private var limits: (limits: Limits, fetchedAt: Int64)?

    init(fieldKinds: FieldKinds) {
        self.fieldKinds = fieldKinds
    }

    /// The limits read at most `lifetime` ms before `now` (never ones read "after" now, as
    /// when the device's clock went back); nil when they must be read again.
    func limits(now: Int64, lifetime: Int64) -> Limits? {
        guard let limits, now - limits.fetchedAt < lifetime, now >= limits.fetchedAt else { return nil }
        return limits.limits
    }

    /// Keeps the limits just read at `now`.
    func keep(_ limits: Limits, readAt now: Int64) {
        self.limits = (limits, now)
    }
}
