import OutpostCore

// The queue's insert side: a change gets its changeId here, when it is queued, never when
// it is sent (a retry must carry the id the server may already know).
//
// Coalescing, per record (changes of one record always keep their order):
// - The record's newest entry not sent yet (`pending`, or `failed`: an attempt the server
//   did not apply) absorbs a new edit: put+put is the latest put, delete+put a put,
//   put+delete a delete. The merged change gets a new changeId (its content changed), keeps
//   the queue position of the first (so a parent created before a child is still sent
//   first), its base version (the last server version the edits started from), its
//   attempts and its retry time.
// - A put then a delete of a record the server never saw (no server version, never sent,
//   an edit of the app, queued since the store last re-pulled a history) cancel out: nothing
//   is queued and the local row goes away. A record an older history held may lack a server
//   copy after a re-pull; its delete must reach the server as a tombstone, or another device
//   that still holds it would offer it again. (Found by outpost-sim, seed 797.)
// - An entry that was sent (in flight or in doubt) is never changed, and neither is a copy
//   queued to be offered again to a new history (it may be an acknowledged write the new
//   history lost): the edit becomes a new entry behind it, which waits for its answer and is
//   then sent against the version the answer names. (Found by outpost-sim, seed 3430.)

extension OutpostStore {
    /// Writes the local edit `body` of `key` and its queue entry in one transaction.
    /// Returns the record's row, or nil when the edit cancelled a never-sent create.
    func enqueue(_ key: RecordKey, body: Body) throws -> RecordRow? {
        let time = now()
        let changeId = Identifiers.changeID(nowMs: time, using: &rng)
        return try write { d in
            var row = try d.record(key)
            let entries = try d.entries(for: key)
            // A copy queued to be offered again to a new history is not merged with an edit:
            // the edit goes behind it, so an edit the server rejects leaves the copy.
            if let last = entries.last, last.state == .pending || last.state == .failed, last.origin == .local {
                let queuedSinceRePull = last.position > Int64(try d.meta("rebased_through") ?? "0") ?? 0
                if body.deleted, entries.count == 1, last.baseVersion == nil, last.attempts == 0, last.origin == .local, row?.server == nil,
                   queuedSinceRePull {
                    try d.deleteEntry(position: last.position)
                    try d.deleteRecord(key)
                    return nil
                }
                var merged = last
                merged.changeId = changeId
                merged.op = body.deleted ? .delete : .put
                merged.data = body.data
                merged.clientTime = time
                merged.origin = .local
                merged.originUpdatedAt = nil
                try d.update(merged)
            } else {
                // Behind an unsettled entry the edit descends from that entry's content, so it
                // takes the same base: provisional, the answer sets it (an applied answer its
                // version; a rejection leaves the base the chain started from). The device's
                // server copy may be newer than anything the app showed (a re-pull behind a
                // create, seed 24407).
                let base = entries.last.map { $0.baseVersion } ?? row?.server?.version
                let entry = QueueEntry(
                    position: 0, changeId: changeId, key: key, op: body.deleted ? .delete : .put, data: body.data,
                    baseVersion: base, clientTime: time, state: .pending, attempts: 0, nextAttemptAt: 0,
                    lastError: nil, errorCode: nil, origin: .local, originUpdatedAt: nil, createdAt: time)
                try d.insert(entry)
            }
            if row == nil {
                row = RecordRow(key: key, view: body, pending: true, server: nil, epochCheck: false)
            } else {
                row!.view = body
                row!.pending = true
            }
            try d.write(row!)
            return row
        }
    }
}
