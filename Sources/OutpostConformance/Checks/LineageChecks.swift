import Foundation
import OutpostCore

/// Sections 4 and 5, added in protocol 1.1: a re-offer keeps its history. A record state
/// names the earlier-history version it descends from (`lineage`) and, while nothing was
/// written on it since, the one it is (`sameAs`); `rotate-epoch` gives every record its own
/// version in the history that ends as both; a re-offer applies only over a state that is
/// an ancestor of the copy it carries, and keeps that copy's commit time. A server that
/// reports protocol 1.0 skips these checks.
enum LineageChecks {
    /// A commit time long before any check runs, so it cannot be mistaken for the server's.
    static let originalTime: Int64 = 1_700_000_000_123

    /// The server's info, or a skip when it does not report protocol 1.1 or later.
    static func requireLineage(_ c: CheckContext) async throws -> ServerInfo {
        let info = try await c.info()
        guard OutpostProtocol.keepsLineage(info.protocolRevision) else {
            throw CheckSkipped("the server reports protocol \(info.protocolRevision); re-offer lineage is a 1.1 rule")
        }
        return info
    }

    /// An epoch that sorts before `epoch` (one character shorter).
    static func earlierEpoch(_ epoch: Epoch) throws -> String {
        guard epoch.rawValue.count > 1 else { throw CheckSkipped("the epoch \(epoch) is one character long; no epoch sorts before it") }
        return String(epoch.rawValue.dropLast())
    }

    /// Pushes a re-offer of `id` and returns its result.
    static func reoffer(_ c: CheckContext, _ space: String, id: String, data: JSONObject, base: Version?, lineage: String,
                        updatedAt: Int64 = originalTime, clientId: String = "conformance-client") async throws -> PushResult {
        let change = ChangeJSON.put(c.unique("chg"), id: id, data: data, base: base?.text, lineage: (lineage, updatedAt))
        return try await c.push(space, [change], clientId: clientId).results[0]
    }

    /// `collection/id` as a full pull shows it now; fails when it is absent.
    static func pulled(_ c: CheckContext, _ space: String, _ id: String) async throws -> RecordState {
        guard let record = try await PushChecks.current(c, space, id: id) else { throw CheckFailure("pull does not list todos/\(id)") }
        return record
    }

    static func lineageText(_ record: RecordState?) -> String { record?.lineage?.text ?? "none" }
    static func sameAsText(_ record: RecordState?) -> String { record?.sameAs?.text ?? "none" }

    static let all: [Check] = [
        Check("info-protocol-version", section: "3", "GET /v1/info's protocolVersion, when present, is \"<protocol>.<minor>\" (1.0 servers leave it out)") { c in
            let json = try await c.get("/v1/info").json()
            guard let value = json["protocolVersion"] else { return c.note("absent: a 1.0 server") }
            guard let text = value.stringValue else { throw CheckFailure("protocolVersion is \(value), expected a string such as \"1.1\"") }
            let parts = text.split(separator: ".", omittingEmptySubsequences: false)
            let major = json["protocol"]?.int64Value.map(String.init) ?? "?"
            try expect(parts.count == 2 && parts[0] == major && Int(parts[1]) != nil,
                       "protocolVersion is \"\(text)\", expected \"\(major).<minor>\" to agree with protocol \(major)")
            c.note(text)
        },
        Check("reoffer-invalid-lineage-rejected", section: "4", "a re-offer whose lineage is not of an earlier epoch, is malformed or is forced is rejected invalid_change, and nothing is written") { c in
            let info = try await requireLineage(c)
            let space = c.newSpace()
            let earlier = try earlierEpoch(info.epoch)
            let later = PushChecks.otherEpochs(info.epoch)[1]
            var malformed = ChangeJSON.put(c.unique("chg"), id: "r4", data: ["v": 1], base: nil).objectValue!
            malformed["lineage"] = .object(["version": "not-a-version", "updatedAt": .number(JSONNumber(originalTime))])
            let cases: [(String, JSONValue)] = [
                ("lineage in the current epoch \(info.epoch)", ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil, lineage: ("\(info.epoch).1", originalTime))),
                ("lineage in the later epoch \(later)", ChangeJSON.put(c.unique("chg"), id: "r2", data: ["v": 1], base: nil, lineage: ("\(later).1", originalTime))),
                ("a forced re-offer", ChangeJSON.put(c.unique("chg"), id: "r3", data: ["v": 1], base: nil, force: true, lineage: ("\(earlier).1", originalTime))),
                ("lineage.version that is not a version", .object(malformed)),
                ("a delete with lineage in the current epoch", ChangeJSON.delete(c.unique("chg"), id: "r5", base: nil, lineage: ("\(info.epoch).1", originalTime))),
            ]
            for (what, change) in cases {
                try expectRejected(try await c.push(space, [change]).results[0], "invalid_change", what)
            }
            let records = try await c.pullAll(space).records
            try expect(records.isEmpty, "rejected re-offers wrote \(records.map(\.id))")
        },
        Check("reoffer-time-bounded-by-history", section: "4", "a re-offer whose lineage.updatedAt is after the server's history moved past its epoch (a time not yet come, for an epoch before the history), or before 1970, is rejected invalid_change with details.field lineage.updatedAt, and nothing is written") { c in
            let info = try await requireLineage(c)
            let space = c.newSpace()
            let earlier = try earlierEpoch(info.epoch)
            let hourFromNow = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
            let cases: [(String, String, Int64)] = [
                ("an invented epoch 0 at 2100-01-01", "0.5", 4_102_444_800_000),
                ("an earlier epoch an hour from now", "\(earlier).3", hourFromNow),
                ("an earlier epoch before 1970", "\(earlier).3", -1),
            ]
            for (index, (what, lineage, time)) in cases.enumerated() {
                let result = try await reoffer(c, space, id: "r\(index)", data: ["v": 1], base: nil, lineage: lineage, updatedAt: time)
                try expectRejected(result, "invalid_change", "a re-offer of \(what)")
                try expect(result.error?.details?["field"] == "lineage.updatedAt",
                           "a re-offer of \(what): details \(result.error?.details.map { JSONValue.object($0).description } ?? "absent"), expected field lineage.updatedAt")
            }
            let records = try await c.pullAll(space).records
            try expect(records.isEmpty, "refused re-offers wrote \(records.map { "\($0.id) updatedAt \($0.updatedAt)" })")
        },
        Check("reoffer-time-bounded-by-rotation", section: "4", "after rotate-epoch, a re-offer of the ended epoch applies with a commit time from before the rotation and is rejected invalid_change with one after it", requires: [.rotateEpoch]) { c in
            _ = try await requireLineage(c)
            let space = c.newSpace()
            let a1 = try await PushChecks.create(c, space, id: "a")
            let old = a1.epoch
            try await c.rotateEpoch()
            let epoch = try await c.info().epoch
            let base = Version(epoch: epoch, seq: a1.seq)
            let late = try await reoffer(c, space, id: "a", data: ["v": 2], base: base, lineage: a1.text,
                                         updatedAt: Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)
            try expectRejected(late, "invalid_change", "a re-offer of \(a1) stamped an hour after its epoch ended")
            _ = try expectApplied(try await reoffer(c, space, id: "a", data: ["v": 2], base: base, lineage: a1.text), "a re-offer of \(a1) stamped before its epoch ended")
            let a = try await pulled(c, space, "a")
            try expect(a.updatedAt == originalTime && a.lineage == Version(epoch: old, seq: a1.seq),
                       "a is \(a.version) updatedAt \(a.updatedAt) lineage \(lineageText(a)), expected updatedAt \(originalTime) lineage \(a1)")
        },
        Check("reoffer-without-state-creates-with-original-time", section: "4", "a re-offer with baseVersion null of a record the server lacks applies, stamped with its lineage and its original updatedAt; once it exists, a null base conflicts") { c in
            let info = try await requireLineage(c)
            let space = c.newSpace()
            let lineage = "\(try earlierEpoch(info.epoch)).3"
            let result = try await reoffer(c, space, id: "r1", data: ["v": 1], base: nil, lineage: lineage, clientId: "reoffering-device")
            let version = try expectApplied(result, "re-offer of a record the server lacks")
            try expect(version.epoch == info.epoch, "the re-offer got \(version), not a version of the current epoch \(info.epoch)")
            try expect(result.updatedAt == nil || result.updatedAt == originalTime,
                       "the applied re-offer answered updatedAt \(result.updatedAt!), expected its original commit time \(originalTime)")
            let record = try await pulled(c, space, "r1")
            try expect(record.version == version && record.data == ["v": 1], "pull shows \(record.version) \(record.data?.description ?? "no data"), expected \(version) {\"v\":1}")
            try expect(record.updatedAt == originalTime, "the re-offered record's updatedAt is \(record.updatedAt), expected its original commit time \(originalTime), not the arrival time")
            try expect(record.lineage?.text == lineage, "the re-offered record's lineage is \(lineageText(record)), expected \(lineage)")
            try expect(record.updatedBy == "reoffering-device", "updatedBy is \(record.updatedBy), expected the pushing clientId")
            let again = try await reoffer(c, space, id: "r1", data: ["v": 2], base: nil, lineage: lineage)
            let current = try expectConflict(again, "a second re-offer with baseVersion null of a record that now exists")
            try expect(current?.version == version && current?.lineage?.text == lineage,
                       "the conflict's current is \(current?.version.text ?? "absent") with lineage \(lineageText(current)), expected \(version) with lineage \(lineage)")
        },
        Check("reoffer-judged-by-current-lineage", section: "4", "a re-offer at the record's base applies only when the record's sameAs is of the same epoch and not after the re-offer's; otherwise conflict with current, nothing written") { c in
            let info = try await requireLineage(c)
            let space = c.newSpace()
            let earlier = try earlierEpoch(info.epoch)
            let other = earlier.count > 1 ? String(earlier.dropLast()) : "0"
            let seeded = try expectApplied(try await reoffer(c, space, id: "r1", data: ["v": 1], base: nil, lineage: "\(earlier).3"), "seeding r1 with lineage \(earlier).3")
            let fresh = try await PushChecks.create(c, space, id: "fresh")
            let refusals: [(String, String, Version, String)] = [
                ("r1", "an older copy (lineage \(earlier).2 under the record's \(earlier).3)", seeded, "\(earlier).2"),
                ("r1", "a copy of another history (lineage \(other).9 under \(earlier).3)", seeded, "\(other).9"),
                ("fresh", "a copy over a state written fresh in this epoch (no lineage)", fresh, "\(earlier).9"),
            ]
            for (id, what, base, lineage) in refusals {
                let current = try expectConflict(try await reoffer(c, space, id: id, data: ["v": 99], base: base, lineage: lineage), "re-offer of \(what)")
                try expect(current?.version == base, "the conflict for \(what) names current \(current?.version.text ?? "absent"), expected \(base)")
            }
            let r1 = try await pulled(c, space, "r1"), kept = try await pulled(c, space, "fresh")
            try expect(r1.version == seeded && r1.data == ["v": 1] && kept.version == fresh && kept.lineage == nil,
                       "refused re-offers changed the records: r1 \(r1.version) \(r1.data?.description ?? "") lineage \(lineageText(r1)), fresh \(kept.version) lineage \(lineageText(kept))")
            // The same lineage, and a later one, descend from what the record holds.
            let same = try expectApplied(try await reoffer(c, space, id: "r1", data: ["v": 3], base: seeded, lineage: "\(earlier).3"), "re-offer of lineage \(earlier).3 over \(earlier).3")
            let newer = try expectApplied(try await reoffer(c, space, id: "r1", data: ["v": 5], base: same, lineage: "\(earlier).5"), "re-offer of lineage \(earlier).5 over \(earlier).3")
            let stale = try expectConflict(try await reoffer(c, space, id: "r1", data: ["v": 4], base: seeded, lineage: "\(earlier).9"), "re-offer at a stale base")
            try expect(stale?.version == newer, "the conflict at a stale base names current \(stale?.version.text ?? "absent"), expected \(newer)")
            let after = try await pulled(c, space, "r1")
            try expect(after.version == newer && after.data == ["v": 5] && after.lineage?.text == "\(earlier).5" && after.sameAs?.text == "\(earlier).5",
                       "after the re-offers r1 is \(after.version) \(after.data?.description ?? "") lineage \(lineageText(after)) sameAs \(sameAsText(after)), expected \(newer) {\"v\":5} lineage and sameAs \(earlier).5")
        },
        Check("reoffer-over-plain-write-conflicts", section: "4", "a plain write on a re-offered state keeps its lineage and ends its sameAs; a re-offer of a later copy over it is a conflict with current, nothing written") { c in
            let info = try await requireLineage(c)
            let space = c.newSpace()
            let earlier = try earlierEpoch(info.epoch)
            // One device re-offers its copy earlier.5 of k0; another writes on it.
            let v1 = try expectApplied(try await reoffer(c, space, id: "k0", data: ["v": 5], base: nil, lineage: "\(earlier).5", clientId: "device-a"), "re-offer of k0's copy \(earlier).5")
            var k0 = try await pulled(c, space, "k0")
            try expect(k0.lineage?.text == "\(earlier).5" && k0.sameAs?.text == "\(earlier).5",
                       "the re-offered k0 has lineage \(lineageText(k0)) sameAs \(sameAsText(k0)), expected both \(earlier).5")
            let write = ChangeJSON.put(c.unique("chg"), id: "k0", data: ["v": "new history"], base: v1.text)
            let v2 = try expectApplied(try await c.push(space, [write], clientId: "device-b").results[0], "a plain put on the re-offered k0")
            k0 = try await pulled(c, space, "k0")
            try expect(k0.version == v2 && k0.lineage?.text == "\(earlier).5" && k0.sameAs == nil,
                       "after a plain put k0 is \(k0.version) with lineage \(lineageText(k0)) sameAs \(sameAsText(k0)), expected \(v2) with lineage \(earlier).5 and no sameAs")
            // A third device re-offers its acknowledged later delete at the current base: it
            // never saw the put, which it would replace.
            let delete = ChangeJSON.delete(c.unique("chg"), id: "k0", base: v2.text, lineage: ("\(earlier).8", originalTime))
            let current = try expectConflict(try await c.push(space, [delete], clientId: "device-c").results[0],
                                             "re-offer of a later delete \(earlier).8 over a put made since the re-offer of \(earlier).5")
            try expect(current?.version == v2 && current?.data == ["v": "new history"] && current?.lineage?.text == "\(earlier).5" && current?.sameAs == nil,
                       "the conflict's current is \(current?.version.text ?? "absent") with lineage \(lineageText(current)) sameAs \(sameAsText(current)), expected \(v2) with lineage \(earlier).5 and no sameAs")
            let after = try await pulled(c, space, "k0")
            try expect(after == k0, "the refused re-offer changed k0: \(after.version)\(after.deleted ? " deleted" : "")")
            // A delete and a create have no sameAs either.
            let v3 = try expectApplied(try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "k0", base: v2.text)]).results[0], "a plain delete of k0")
            k0 = try await pulled(c, space, "k0")
            try expect(k0.version == v3 && k0.lineage?.text == "\(earlier).5" && k0.sameAs == nil,
                       "after a plain delete k0 is \(k0.version) with lineage \(lineageText(k0)) sameAs \(sameAsText(k0)), expected \(v3) with lineage \(earlier).5 and no sameAs")
            _ = try await PushChecks.create(c, space, id: "new")
            let created = try await pulled(c, space, "new")
            try expect(created.sameAs == nil, "a record created in this epoch has sameAs \(sameAsText(created))")
        },
        Check("reoffer-replay-same-answer", section: "4", "a re-offer sent again answers replayed with the same version and its original updatedAt, however the record changed since") { c in
            let info = try await requireLineage(c)
            let space = c.newSpace()
            let change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil, lineage: ("\(try earlierEpoch(info.epoch)).4", originalTime))
            let first = try await c.push(space, [change]).results[0]
            let version = try expectApplied(first, "first re-offer")
            _ = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: version.text)]).results[0], "an edit after the re-offer")
            let replay = try await c.push(space, [change]).results[0]
            try expect(replay.status == .applied && replay.replayed && replay.version == version,
                       "the re-offer sent again: expected applied \(version) replayed, got \(describe(replay))")
            try expect(replay.updatedAt == first.updatedAt,
                       "the replay answered updatedAt \(replay.updatedAt.map(String.init) ?? "absent"), the first answer \(first.updatedAt.map(String.init) ?? "absent")")
        },
        Check("lineage-kept-by-plain-writes", section: "4", "a put or delete without lineage over a state keeps that state's lineage and gets the server's time; a create has none") { c in
            let info = try await requireLineage(c)
            let space = c.newSpace()
            let lineage = "\(try earlierEpoch(info.epoch)).7"
            let v1 = try expectApplied(try await reoffer(c, space, id: "r1", data: ["v": 1], base: nil, lineage: lineage), "seeding r1 with lineage \(lineage)")
            let put = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: v1.text)]).results[0]
            let v2 = try expectApplied(put, "a put over the re-offered state")
            var record = try await pulled(c, space, "r1")
            try expect(record.version == v2 && record.lineage?.text == lineage, "after a put r1 is \(record.version) with lineage \(lineageText(record)), expected \(v2) with \(lineage)")
            try expect(record.updatedAt != originalTime, "a plain put kept the re-offer's updatedAt \(originalTime) instead of the server's time")
            let v3 = try expectApplied(try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "r1", base: v2.text)]).results[0], "a delete")
            record = try await pulled(c, space, "r1")
            try expect(record.version == v3 && record.deleted && record.lineage?.text == lineage,
                       "after a delete r1 is \(record.version)\(record.deleted ? " deleted" : "") with lineage \(lineageText(record)), expected a tombstone \(v3) with \(lineage)")
            let v4 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 4], base: v3.text)]).results[0], "a put over the tombstone")
            record = try await pulled(c, space, "r1")
            try expect(record.version == v4 && record.lineage?.text == lineage, "after reviving r1 it is \(record.version) with lineage \(lineageText(record)), expected \(v4) with \(lineage)")
            _ = try await PushChecks.create(c, space, id: "new")
            let created = try await pulled(c, space, "new")
            try expect(created.lineage == nil, "a record created in this epoch has lineage \(lineageText(created))")
        },
        Check("rotate-epoch-gives-lineage-reoffers-judged", section: "5", "after rotate-epoch every record and tombstone has lineage <old epoch>.<its seq>; a re-offer of a later copy applies with its original time, an older one conflicts, a plain write keeps the lineage", requires: [.rotateEpoch]) { c in
            _ = try await requireLineage(c)
            let space = c.newSpace()
            let a1 = try await PushChecks.create(c, space, id: "a")
            let b1 = try await PushChecks.create(c, space, id: "b")
            let a2 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "a", data: ["v": 2], base: a1.text)]).results[0], "update of a")
            let b2 = try expectApplied(try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "b", base: b1.text)]).results[0], "delete of b")
            let c1 = try await PushChecks.create(c, space, id: "c")
            let old = a1.epoch
            try await c.rotateEpoch()
            let epoch = try await c.info().epoch
            let records = try await c.pullAll(space).records
            let expected: [String: Int64] = ["a": a2.seq, "b": b2.seq, "c": c1.seq]
            for (id, seq) in expected {
                guard let record = records.first(where: { $0.id == id }) else { throw CheckFailure("after the rotation pull does not list \(id)") }
                try expect(record.version == Version(epoch: epoch, seq: seq) && record.lineage == Version(epoch: old, seq: seq),
                           "after the rotation \(id) is \(record.version) with lineage \(lineageText(record)), expected \(epoch).\(seq) with lineage \(old).\(seq)")
            }
            // A device that held a's later copy (as after a restore that lost it) offers it.
            let later = Version(epoch: old, seq: c1.seq + 5)
            let result = try await reoffer(c, space, id: "a", data: ["v": 3], base: Version(epoch: epoch, seq: a2.seq), lineage: later.text)
            let a3 = try expectApplied(result, "re-offer of a's later copy \(later) over lineage \(old).\(a2.seq)")
            var a = try await pulled(c, space, "a")
            try expect(a.version == a3 && a.data == ["v": 3] && a.lineage == later && a.updatedAt == originalTime,
                       "after the re-offer a is \(a.version) \(a.data?.description ?? "") lineage \(lineageText(a)) updatedAt \(a.updatedAt), expected \(a3) {\"v\":3} lineage \(later) updatedAt \(originalTime)")
            // An older copy of c than the one the server kept.
            let conflict = try expectConflict(try await reoffer(c, space, id: "c", data: ["v": 0], base: Version(epoch: epoch, seq: c1.seq), lineage: "\(old).\(c1.seq - 1)"),
                                              "re-offer of c's older copy \(old).\(c1.seq - 1) over lineage \(old).\(c1.seq)")
            try expect(conflict?.lineage == Version(epoch: old, seq: c1.seq), "the conflict's current has lineage \(lineageText(conflict)), expected \(old).\(c1.seq)")
            let a4 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "a", data: ["v": 4], base: a3.text)]).results[0], "a plain put on a")
            a = try await pulled(c, space, "a")
            try expect(a.version == a4 && a.lineage == later, "after a plain put a is \(a.version) with lineage \(lineageText(a)), expected \(a4) with \(later)")
        },
        Check("rotate-epoch-gives-same-as", section: "5", "after rotate-epoch every record and tombstone has sameAs <old epoch>.<its seq>; a re-offer of a later copy over one untouched since applies, over one written since it conflicts with current", requires: [.rotateEpoch]) { c in
            _ = try await requireLineage(c)
            let space = c.newSpace()
            let u1 = try await PushChecks.create(c, space, id: "untouched")
            let e1 = try await PushChecks.create(c, space, id: "edited")
            let t1 = try await PushChecks.create(c, space, id: "tomb")
            let t2 = try expectApplied(try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "tomb", base: t1.text)]).results[0], "delete of tomb")
            let old = u1.epoch
            try await c.rotateEpoch()
            let epoch = try await c.info().epoch
            let records = try await c.pullAll(space).records
            for (id, seq) in [("untouched", u1.seq), ("edited", e1.seq), ("tomb", t2.seq)] {
                guard let record = records.first(where: { $0.id == id }) else { throw CheckFailure("after the rotation pull does not list \(id)") }
                try expect(record.sameAs == Version(epoch: old, seq: seq) && record.lineage == Version(epoch: old, seq: seq),
                           "after the rotation \(id) has lineage \(lineageText(record)) sameAs \(sameAsText(record)), expected both \(old).\(seq)")
            }
            // A plain write on a restored state ends its sameAs; a later copy of the earlier
            // history then conflicts instead of replacing that write.
            let e2 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "edited", data: ["v": "new history"], base: Version(epoch: epoch, seq: e1.seq).text)]).results[0],
                                       "a plain put on the restored edited")
            let later = Version(epoch: old, seq: t2.seq + 5)
            let current = try expectConflict(try await reoffer(c, space, id: "edited", data: ["v": 0], base: e2, lineage: later.text),
                                             "re-offer of edited's later copy \(later) over a put made since the rotation")
            try expect(current?.version == e2 && current?.lineage == Version(epoch: old, seq: e1.seq) && current?.sameAs == nil,
                       "the conflict's current is \(current?.version.text ?? "absent") with lineage \(lineageText(current)) sameAs \(sameAsText(current)), expected \(e2) with lineage \(old).\(e1.seq) and no sameAs")
            // Over the states nothing was written on since, a later copy applies.
            let u2 = try expectApplied(try await reoffer(c, space, id: "untouched", data: ["v": 3], base: Version(epoch: epoch, seq: u1.seq), lineage: later.text),
                                       "re-offer of untouched's later copy \(later)")
            _ = try expectApplied(try await reoffer(c, space, id: "tomb", data: ["v": 3], base: Version(epoch: epoch, seq: t2.seq), lineage: later.text),
                                  "re-offer of tomb's later copy \(later) over its tombstone")
            let untouched = try await pulled(c, space, "untouched")
            try expect(untouched.version == u2 && untouched.sameAs == later && untouched.lineage == later,
                       "after the re-offer untouched is \(untouched.version) with lineage \(lineageText(untouched)) sameAs \(sameAsText(untouched)), expected \(u2) with both \(later)")
        },
    ]
}
