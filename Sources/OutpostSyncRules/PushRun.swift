import OutpostCore

extension PushRules {
    /// One push as `apply` runs it: what it read before the first change, and what it has
    /// decided since, change by change (`take`), until the conflicts are reported and the
    /// writes stored (`reportConflicts`, `store`).
    struct Run {
        /// The record state a conflict reports: the stored one (read after the changes), or
        /// the write of an earlier change of the same push.
        enum ConflictCurrent { case stored(Key), written(Int) }

        let context: Context
        let judge: (any PushJudge)?
        /// The change ids already applied, and those this push applies.
        var applied: [String: Applied]
        /// Each record's head: stored, then after each write of the push.
        var heads: [Key: Head]
        /// What the judge sees of each record: its state before the push, then after each
        /// write of the push; and of a tombstone, the live copy it deleted (kept as a
        /// departure), by which the judge tells whether the token may read it.
        let before: [Key: RecordState]
        var judged: [Key: RecordState]
        var deletedCopies: [Key: JSONObject] = [:]
        /// The store's history of epochs, read once a push that holds a re-offer.
        var history: EpochHistory?
        /// The space's last seq and its records' bytes, after the writes so far.
        var head: Int64
        var used: Int64
        var results: [PushResult] = []
        var conflicts: [(result: Int, current: ConflictCurrent)] = []
        var writes: [Write] = []
        /// key -> index in `writes` of the newest write of this push to it.
        var written: [Key: Int] = [:]
        var remember: [Remember] = []

        /// Reads what the push's changes need: the ids already applied, the records' heads
        /// and, under rules, their states and the live copies their tombstones deleted.
        init<S: PushStorage>(_ inputs: [Input], context: Context, space: Space, storage: inout S, judge: (any PushJudge)?) throws {
            self.context = context
            self.judge = judge
            var keys: [Key] = []
            keys.reserveCapacity(inputs.count)
            var seen = Set<Key>(minimumCapacity: inputs.count)
            for input in inputs {
                let key = Key(collection: input.change.collection, id: input.change.id)
                if seen.insert(key).inserted { keys.append(key) }
            }
            applied = try storage.applied(inputs.map(\.change.changeId))
            heads = try storage.heads(keys)
            before = judge == nil ? [:] : try storage.currents(keys)
            judged = before
            if judge != nil {
                var tombstones: [Key: Int64] = [:]
                for (key, state) in before where state.deleted { tombstones[key] = state.version.seq }
                if !tombstones.isEmpty {
                    for (key, bytes) in try storage.deletedCopies(tombstones) {
                        if case .object(let copy) = try JSONParser.parse(bytes) { deletedCopies[key] = copy }
                    }
                }
            }
            head = space.head
            used = space.recordBytes
            results.reserveCapacity(inputs.count)
            writes.reserveCapacity(inputs.count)
            remember.reserveCapacity(inputs.count)
        }

        /// Decides one change, in the push's order: a replay, a refusal, a conflict, or a
        /// write at the space's next seq.
        mutating func take<S: PushStorage>(_ input: Input, storage: inout S) throws {
            let change = input.change
            let key = Key(collection: change.collection, id: change.id)
            if let replay = replayed(input) { return results.append(replay) }
            if let refusal = try refused(input, key: key, storage: &storage) { return results.append(refusal) }
            // 5. The base guard: a null base creates only where no state (live or
            //    tombstone) exists; a base applies only while the record is at its seq.
            //    A re-offer replaces a state only when that state is an ancestor of the
            //    copy it carries with nothing written on it since: its sameAs, not its
            //    lineage, which a plain write keeps (added in 1.1).
            let current = heads[key]
            if !change.force {
                let atBase: Bool
                switch (change.baseVersion, current) {
                case (nil, nil): atBase = true
                case (let base?, let c?): atBase = base.seq == c.seq
                default: atBase = false
                }
                let admitted = change.lineage.map { lineage in current.map { lineage.admits(current: $0.sameAs) } ?? true } ?? true
                if !atBase || !admitted {
                    conflicts.append((results.count, written[key].map { .written($0) } ?? .stored(key)))
                    return results.append(.conflict(change.changeId, current: nil))
                }
            }
            // 6. The space's limit: a write that would take its records over it is refused;
            //    one that frees bytes or keeps them (a delete, a smaller put) always applies,
            //    so a full space can be cleaned up.
            let data = change.op == .put ? input.data : nil
            let grows = PushRules.recordBytes(key, dataBytes: Int64(data?.count ?? 0)) - (current.map { PushRules.recordBytes(key, dataBytes: $0.dataBytes) } ?? 0)
            if let quota = context.recordQuota, grows > 0, used + grows > quota {
                return results.append(.rejected(change.changeId, .recordQuotaExceeded,
                                                "the space holds \(used) bytes of records and this write adds \(grows); the limit is \(quota)",
                                                details: ["limit": .number(JSONNumber(quota)), "used": .number(JSONNumber(used))]))
            }
            try write(input, key: key, data: data, grows: grows, replacing: current)
        }

        /// 1. Idempotency: an applied change id answers with its original result; the same
        /// id with other content is refused. A replay's updatedAt is the record's at that
        /// version: a re-offer's original commit time (its fingerprint covers it), else the
        /// time the push arrived.
        private func replayed(_ input: Input) -> PushResult? {
            let change = input.change
            guard let known = applied[change.changeId] else { return nil }
            if known.fingerprint == input.fingerprint {
                return .applied(change.changeId, version: known.version, replayed: true, updatedAt: change.lineage?.updatedAt ?? known.appliedAt)
            }
            return .rejected(change.changeId, .changeIdReused, "change id \(change.changeId) was already applied with other content")
        }

        /// Steps 2 to 4: a change refused before its base is looked at.
        private mutating func refused<S: PushStorage>(_ input: Input, key: Key, storage: inout S) throws -> PushResult? {
            let change = input.change
            // 2. A re-offer's commit time must be one its epoch could have had in the store's
            //    history: no device stamps a write with a time after that history moved past
            //    the epoch it names (docs/protocol.md section 4, "Re-offers", rule 3).
            if let lineage = change.lineage {
                if history == nil { history = try storage.epochHistory() }
                if let (field, message) = lineage.problem(in: history!) {
                    return .rejected(change.changeId, .invalidChange, message, details: ["field": .string(field)])
                }
            }
            // 3. A base version from another history cannot be judged: pull first.
            let epoch = context.epoch
            if !change.force, let base = change.baseVersion, base.epoch != epoch {
                return .rejected(change.changeId, .epochMismatch, "baseVersion names epoch \(base.epoch), the current epoch is \(epoch); pull first")
            }
            // 4. The rules of the server, on the state the change would replace.
            if let judge, let refusal = judge.judge(change, current: judged[key], deletedCopy: deletedCopies[key]) ?? input.refusal {
                return PushResult(changeId: change.changeId, status: .rejected, error: refusal)
            }
            return nil
        }

        /// 7. The write: the next seq of the space. A re-offer is the copy it carries
        /// (lineage and sameAs) with its original commit time; any other write keeps the
        /// lineage of the state it replaces and has no sameAs, as it writes what that copy
        /// never held.
        private mutating func write(_ input: Input, key: Key, data: [UInt8]?, grows: Int64, replacing current: Head?) throws {
            let change = input.change, epoch = context.epoch, now = context.now
            guard head < Version.maxSeq else { throw PushRulesError.seqsExhausted }
            head += 1
            used += grows
            let version = Version(epoch: epoch, seq: head)
            let updatedAt = change.lineage?.updatedAt ?? now
            let lineage = change.lineage?.version ?? current?.lineage
            // A resolved write keeps its mark beside the version of the state it replaces; one
            // that creates the record replaces nothing, so no device lost a write to it.
            let resolved = change.resolves.flatMap { mark in current.map { Resolved(over: Version(epoch: epoch, seq: $0.seq), mark: mark) } }
            let write = Write(key: key, seq: head, deleted: change.op == .delete, data: data,
                              updatedAt: updatedAt, updatedBy: context.clientId, subject: context.subject, clientTime: change.clientTime,
                              lineage: lineage, sameAs: change.lineage?.version, resolved: resolved)
            written[key] = writes.count
            writes.append(write)
            if judge != nil {
                if write.deleted, let replaced = judged[key], !replaced.deleted, let copy = replaced.data { deletedCopies[key] = copy }
                judged[key] = RecordState(collection: key.collection, id: key.id, version: version, deleted: write.deleted,
                                          data: write.deleted ? nil : change.data, updatedAt: updatedAt, updatedBy: context.clientId,
                                          clientTime: change.clientTime, lineage: lineage, sameAs: write.sameAs, resolved: resolved)
            }
            heads[key] = Head(seq: head, lineage: lineage, sameAs: write.sameAs, dataBytes: Int64(data?.count ?? 0))
            applied[change.changeId] = Applied(fingerprint: input.fingerprint, version: version, appliedAt: now)
            remember.append(Remember(changeId: change.changeId, fingerprint: input.fingerprint, seq: head, appliedAt: now))
            results.append(.applied(change.changeId, version: version, updatedAt: updatedAt))
        }

        /// A conflict reports the record as it was when its change was judged.
        mutating func reportConflicts<S: PushStorage>(storage: inout S) throws {
            guard !conflicts.isEmpty else { return }
            var storedKeys: [Key] = []
            for case (_, .stored(let key)) in conflicts where !storedKeys.contains(key) { storedKeys.append(key) }
            let stored = storedKeys.isEmpty ? [:] : try storage.currents(storedKeys)
            for (index, current) in conflicts {
                switch current {
                case .stored(let key): results[index].current = stored[key]
                case .written(let w): results[index].current = try writes[w].state(epoch: context.epoch)
                }
            }
        }

        /// Stores the newest write of each key (the earlier ones of this push are superseded
        /// within the same transaction, and a page lists each record once) with the space's
        /// counters; under rules, the departures and the view index with them.
        func store<S: PushStorage>(space: Space, storage: inout S) throws {
            guard !writes.isEmpty else { return }
            let newest = writes.enumerated().filter { written[$0.element.key] == $0.offset }.map(\.element)
            try storage.write(newest, remember: remember, space: space)
            guard let judge else { return }
            // The state a reader could have held before this push, against the one it can
            // read now: the states in between were never visible.
            var departures: [Departure] = []
            for w in newest {
                guard let old = before[w.key], !old.deleted, let oldData = old.data else { continue }
                if judge.departs(collection: w.key.collection, old: oldData, new: judged[w.key]?.data) {
                    departures.append(Departure(key: w.key, seq: w.seq, data: JSONValue.object(oldData).encoded()))
                }
            }
            if !departures.isEmpty { try storage.depart(departures) }
            // The view index follows every state: the replaced live state's keys go, the new
            // live state's come.
            var replaced: [IndexEntry] = []
            var entries: [IndexEntry] = []
            for w in newest {
                if let old = before[w.key], !old.deleted, let oldData = old.data {
                    for key in judge.indexKeys(collection: w.key.collection, data: oldData) {
                        replaced.append(IndexEntry(key: key, seq: old.version.seq, collection: w.key.collection))
                    }
                }
                guard !w.deleted else { continue }
                for key in judge.indexKeys(collection: w.key.collection, data: judged[w.key]?.data ?? [:]) {
                    entries.append(IndexEntry(key: key, seq: w.seq, collection: w.key.collection))
                }
            }
            if !replaced.isEmpty || !entries.isEmpty { try storage.reindex(removing: replaced, adding: entries) }
        }
    }
}
