import OutpostCore

/// Section 4: push.
enum PushChecks {
    /// A record whose compact JSON encoding is exactly `bytes` long: `{"p":"xxx…"}`.
    static func padded(_ bytes: Int) -> JSONObject {
        precondition(bytes >= 8)
        return ["p": .string(String(repeating: "x", count: bytes - 8))]
    }

    /// Pushes one put of a new record and returns its version.
    static func create(_ c: CheckContext, _ space: String, id: String, data: JSONObject = ["v": 1], collection: String = "todos") async throws -> Version {
        let reply = try await c.push(space, [ChangeJSON.put(c.unique("chg"), collection: collection, id: id, data: data, base: nil)])
        return try expectApplied(reply.results[0], "creating \(collection)/\(id)")
    }

    /// The record `collection/id` as a full pull shows it now.
    static func current(_ c: CheckContext, _ space: String, id: String, collection: String = "todos") async throws -> RecordState? {
        try await c.pullAll(space).records.first { $0.collection == collection && $0.id == id }
    }

    static let all: [Check] = [
        Check("push-applied-with-version", section: "4", "a put of a new record with baseVersion null is applied with a version in the current epoch") { c in
            let space = c.newSpace()
            let info = try await c.info()
            let reply = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: c.unique("rec"), data: ["title": "Buy milk"], base: nil)])
            let version = try expectApplied(reply.results[0], "put of a new record")
            try expect(version.epoch == info.epoch, "applied version \(version) is not in the current epoch \(info.epoch)")
            try expect(reply.epoch == info.epoch, "push answer's epoch \(reply.epoch) is not the current epoch \(info.epoch)")
            try expect(version.seq > 0, "version \(version) has seq 0")
            try expect(reply.rawResults[0]["replayed"]?.boolValue != true, "a first application is marked replayed")
        },
        Check("push-applied-in-array-order", section: "4", "changes are applied in array order: versions increase along the array, and a later change sees an earlier one") { c in
            let space = c.newSpace()
            let ids = (0..<6).map { "rec-\($0)" }
            var changes = ids.map { ChangeJSON.put(c.unique("chg"), id: $0, data: ["n": .number(JSONNumber(Int64($0.count)))], base: nil) }
            // The last change deletes the first record believing it absent: applied in
            // order, the put came first and this must conflict.
            changes.append(ChangeJSON.delete(c.unique("chg"), id: ids[0], base: nil))
            let reply = try await c.push(space, changes)
            var previous: Version?
            for (i, result) in reply.results.prefix(6).enumerated() {
                let version = try expectApplied(result, "change \(i)")
                if let previous {
                    try expect(version.seq > previous.seq, "change \(i) got \(version) after change \(i - 1) got \(previous): the changes were not applied in array order")
                }
                previous = version
            }
            try expectConflict(reply.results[6], "a delete (base null) of the record a put earlier in the same push created")
        },
        Check("push-changes-independent", section: "4", "one bad change does not stop the others: applied, rejected, applied, conflict in one push") { c in
            let space = c.newSpace()
            let existing = try await create(c, space, id: "exists")
            _ = existing
            let changes = [
                ChangeJSON.put(c.unique("chg"), id: "a", data: ["v": 1], base: nil),
                ChangeJSON.put(c.unique("chg"), collection: "bad/collection", id: "b", data: ["v": 1], base: nil),
                ChangeJSON.put(c.unique("chg"), id: "c", data: ["v": 1], base: nil),
                ChangeJSON.put(c.unique("chg"), id: "exists", data: ["v": 2], base: nil),
                ChangeJSON.put(c.unique("chg"), id: "d", data: ["v": 1], base: nil),
            ]
            let reply = try await c.push(space, changes)
            _ = try expectApplied(reply.results[0], "change 0 (valid)")
            try expectRejected(reply.results[1], "invalid_change", "change 1 (bad collection)")
            _ = try expectApplied(reply.results[2], "change 2 (valid, after a rejected one)")
            try expectConflict(reply.results[3], "change 3 (null base on an existing record)")
            _ = try expectApplied(reply.results[4], "change 4 (valid, after a conflict)")
            let records = try await c.pullAll(space).records
            try expect(Set(records.map(\.id)) == ["exists", "a", "c", "d"], "after the push the space holds \(records.map(\.id).sorted()), expected a, c, d and exists")
        },
        Check("push-invalid-change-rejected", section: "4", "bad collection, id, op, or missing/extra data is rejected invalid_change, and nothing is written") { c in
            let space = c.newSpace()
            func change(_ fields: JSONObject) -> JSONValue {
                var o: JSONObject = ["changeId": .string(c.unique("chg")), "collection": "todos", "id": "r1", "op": "put", "data": ["v": 1], "baseVersion": nil]
                for (k, v) in fields { o[k] = v }
                return .object(o)
            }
            let cases: [(String, JSONValue)] = [
                ("collection with a slash", change(["collection": "a/b"])),
                ("empty collection", change(["collection": ""])),
                ("collection starting with a dot", change(["collection": ".todos"])),
                ("collection of 65 characters", change(["collection": .string(String(repeating: "c", count: 65))])),
                ("empty id", change(["id": ""])),
                ("id with a control character", change(["id": "a\u{01}b"])),
                ("id of 257 bytes", change(["id": .string(String(repeating: "i", count: 257))])),
                ("op upsert", change(["op": "upsert"])),
                ("put without data", { var o = change([:]).objectValue!; o["data"] = nil; return .object(o) }()),
                ("put with an array as data", change(["data": [1, 2]])),
                ("put with a string as data", change(["data": "text"])),
                ("delete with data", change(["op": "delete"])),
            ]
            let reply = try await c.push(space, cases.map(\.1))
            for (i, (what, _)) in cases.enumerated() {
                try expectRejected(reply.results[i], "invalid_change", what)
                try expect(reply.results[i].error?.message.isEmpty == false, "\(what): rejected without a message")
            }
            let pulled = try await c.pull(space)
            try expect(pulled.page.changes.isEmpty, "rejected changes wrote \(pulled.page.changes.count) record(s)")
        },
        Check("push-record-too-large", section: "4", "data encoded over maxRecordBytes is rejected record_too_large; exactly maxRecordBytes is applied") { c in
            let info = try await c.info()
            let limit = info.limits.maxRecordBytes
            guard limit + 4096 <= info.limits.maxRequestBytes else { throw CheckSkipped("maxRecordBytes \(limit) too close to maxRequestBytes") }
            let space = c.newSpace()
            let atLimit = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "fits", data: padded(limit), base: nil)])
            _ = try expectApplied(atLimit.results[0], "data of exactly maxRecordBytes (\(limit)) bytes")
            let over = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "big", data: padded(limit + 1), base: nil)])
            try expectRejected(over.results[0], "record_too_large", "data of maxRecordBytes + 1 (\(limit + 1)) bytes")
        },
        Check("push-too-many-changes-413", section: "4", "more than maxChangesPerPush changes is 413 too_many_changes with details.limit; exactly the limit is accepted") { c in
            let info = try await c.info()
            let limit = info.limits.maxChangesPerPush
            let space = c.newSpace()
            func changes(_ n: Int) -> [JSONValue] {
                (0..<n).map { ChangeJSON.put("chg-\($0)-" + CheckContext.randomToken(6), id: "r\($0)", data: [:], base: nil) }
            }
            let overBody = JSONValue.object(["clientId": "c", "changes": .array(changes(limit + 1))]).encoded()
            guard overBody.count <= info.limits.maxRequestBytes else {
                throw CheckSkipped("\(limit + 1) changes do not fit in maxRequestBytes \(info.limits.maxRequestBytes)")
            }
            let over = try await c.send("POST", CheckContext.spacePath(space, "push"), headers: [("Content-Type", "application/json")],
                                        body: overBody, token: c.writeToken(space))
            let details = try expectError(over, 413, "too_many_changes", "push of maxChangesPerPush + 1 (\(limit + 1)) changes")
            try expect(detailInt(details, "limit") == Int64(limit), "too_many_changes details.limit is \(details["limit"]?.description ?? "absent"), expected \(limit)")
            let pulled = try await c.pull(space)
            try expect(pulled.page.changes.isEmpty, "a push refused with 413 wrote \(pulled.page.changes.count) record(s)")
            let atLimit = try await c.push(space, changes(limit))
            for (i, result) in atLimit.results.enumerated() { _ = try expectApplied(result, "change \(i) of a push of exactly maxChangesPerPush") }
        },
        Check("push-body-over-limit-413", section: "2", "a push body over maxRequestBytes is 413 payload_too_large with details.limit, answered from Content-Length before the body is sent") { c in
            let info = try await c.info()
            let limit = info.limits.maxRequestBytes
            let space = c.newSpace()
            let connection = try await c.connect()
            defer { connection.close() }
            try await connection.send(c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                                     headers: [("Content-Type", "application/json"), ("Content-Length", String(limit + 1))],
                                                     token: c.writeToken(space)))
            let early: RawResponse
            do {
                early = try await connection.response(timeout: .seconds(3))
            } catch let error as ConnectionError where error.timedOut {
                // No early answer: send the body and see what the server makes of it.
                var body = Array(#"{"clientId":"c","changes":[],"pad":""#.utf8)
                body += [UInt8](repeating: UInt8(ascii: "x"), count: limit + 1 - body.count - 2)
                body += Array(#""}"#.utf8)
                try? await connection.send(body)
                let late = try? await connection.response(timeout: .seconds(10))
                throw CheckFailure("a push with Content-Length maxRequestBytes + 1 (\(limit + 1)) got no answer before its body; after the body: \(late.map { "\($0.summary)" } ?? "nothing")")
            }
            let details = try expectError(early, 413, "payload_too_large", "push with Content-Length maxRequestBytes + 1")
            try expect(detailInt(details, "limit") == Int64(limit), "payload_too_large details.limit is \(details["limit"]?.description ?? "absent"), expected \(limit)")
        },
        Check("push-chunked-body-over-limit-413", section: "2", "a chunked push body that grows over maxRequestBytes is 413 payload_too_large") { c in
            let info = try await c.info()
            let limit = info.limits.maxRequestBytes
            let space = c.newSpace()
            let connection = try await c.connect()
            defer { connection.close() }
            try await connection.send(c.requestBytes("POST", CheckContext.spacePath(space, "push"),
                                                     headers: [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")],
                                                     token: c.writeToken(space)))
            var body = Array(#"{"clientId":"c","changes":[],"pad":""#.utf8)
            body += [UInt8](repeating: UInt8(ascii: "x"), count: limit + 64 - body.count)
            body += Array(#""}"#.utf8)
            var wire: [UInt8] = []
            var offset = 0
            while offset < body.count {
                let n = min(256 * 1024, body.count - offset)
                wire += Array((String(n, radix: 16) + "\r\n").utf8) + body[offset..<(offset + n)] + [0x0D, 0x0A]
                offset += n
            }
            wire += Array("0\r\n\r\n".utf8)
            // The server may answer and stop reading part way; that is allowed.
            try? await connection.send(wire, timeout: .seconds(20))
            let response = try await connection.response(timeout: .seconds(20))
            let details = try expectError(response, 413, "payload_too_large", "chunked push body of \(body.count) bytes (limit \(limit))")
            try expect(detailInt(details, "limit") == Int64(limit), "payload_too_large details.limit is \(details["limit"]?.description ?? "absent"), expected \(limit)")
        },
        Check("push-invalid-json-400", section: "2", "a push body that is not JSON is 400 invalid_json") { c in
            let space = c.newSpace()
            for (body, what) in [(Array(#"{"clientId": "c", "changes": ["#.utf8), "truncated JSON"), (Array("clientId=c".utf8), "a form body"),
                                 ([0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D], "invalid UTF-8"), ([], "an empty body")] {
                let response = try await c.send("POST", CheckContext.spacePath(space, "push"), headers: [("Content-Type", "application/json")],
                                                body: body, token: c.writeToken(space))
                try expectError(response, 400, "invalid_json", "push with \(what)")
            }
        },
        Check("push-invalid-request-422", section: "2", "a push without a required field or with a wrong type is 422 invalid_request with details.field naming it") { c in
            let space = c.newSpace()
            let cases: [(JSONValue, String, String)] = [
                (["changes": []], "clientId", "no clientId"),
                (["clientId": 7, "changes": []], "clientId", "a number as clientId"),
                (["clientId": "c"], "changes", "no changes"),
                (["clientId": "c", "changes": "all"], "changes", "a string as changes"),
                (["clientId": "has space", "changes": []], "clientId", "a clientId with a space"),
            ]
            for (body, field, what) in cases {
                let response = try await c.postJSON(CheckContext.spacePath(space, "push"), body, token: c.writeToken(space))
                let details = try expectError(response, 422, "invalid_request", "push with \(what)")
                let named = details["field"]?.stringValue ?? ""
                try expect(named == field || named.hasSuffix("." + field), "push with \(what): details.field is \"\(named)\", expected \(field)")
            }
            let array = try await c.postJSON(CheckContext.spacePath(space, "push"), [1, 2], token: c.writeToken(space))
            try expectError(array, 422, "invalid_request", "push whose body is a JSON array")
        },
        Check("push-unknown-fields-ignored", section: "2", "unknown JSON fields in a push and in a change are ignored") { c in
            let space = c.newSpace()
            var change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil).objectValue!
            change["futureField"] = ["nested": true]
            let reply = try await c.push(space, [.object(change)], extra: [("futureTopLevel", 42)])
            _ = try expectApplied(reply.results[0], "a change with an unknown field")
        },
        Check("push-null-base-on-existing-conflict", section: "4", "baseVersion null on an existing record is a conflict whose current is the record as it is") { c in
            let space = c.newSpace()
            let reply1 = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["title": "first"], base: nil, clientTime: 1_764_430_000_000)],
                                          clientId: "device-a")
            let v1 = try expectApplied(reply1.results[0], "first put")
            let reply2 = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["title": "second"], base: nil)], clientId: "device-b")
            guard let current = try expectConflict(reply2.results[0], "put with baseVersion null on an existing record") else {
                throw CheckFailure("conflict without current; expected the record at \(v1)")
            }
            try expect(current.collection == "todos" && current.id == "r1", "current names \(current.collection)/\(current.id), expected todos/r1")
            try expect(current.version == v1, "current.version is \(current.version), expected \(v1)")
            try expect(!current.deleted && current.data == ["title": "first"], "current.data is \(current.data?.description ?? "absent"), expected {\"title\":\"first\"}")
            try expect(current.updatedBy == "device-a", "current.updatedBy is \(current.updatedBy), expected device-a")
            try expect(current.clientTime == 1_764_430_000_000, "current.clientTime is \(current.clientTime.map(String.init) ?? "absent"), expected 1764430000000")
            let stored = try await PushChecks.current(c, space, id: "r1")
            try expect(stored?.data == ["title": "first"], "a conflicting change was written: the record is now \(stored?.data?.description ?? "absent")")
        },
        Check("push-null-base-on-tombstone-conflict", section: "4", "baseVersion null on a deleted record (tombstone) is a conflict whose current is the tombstone") { c in
            let space = c.newSpace()
            let v1 = try await create(c, space, id: "r1")
            let deleted = try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "r1", base: v1.text)])
            let v2 = try expectApplied(deleted.results[0], "delete with the right base")
            let reply = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: nil)])
            guard let current = try expectConflict(reply.results[0], "put with baseVersion null on a tombstone") else {
                throw CheckFailure("conflict without current; expected the tombstone at \(v2)")
            }
            try expect(current.deleted && current.version == v2, "current is \(current.version) deleted=\(current.deleted), expected the tombstone \(v2)")
            let raw = reply.rawResults[0]["current"]?.objectValue
            try expect(raw?["data"] == nil || raw?["data"]?.isNull == true, "a tombstone's current carries data: \(raw?.description ?? "")")
        },
        Check("push-stale-base-conflict-current-is-latest", section: "4", "a stale baseVersion is a conflict whose current is the latest version and data, and nothing is written") { c in
            let space = c.newSpace()
            let v1 = try await create(c, space, id: "r1", data: ["n": 1])
            let second = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["n": 2], base: v1.text)])
            let v2 = try expectApplied(second.results[0], "update with the right base")
            let third = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["n": 3], base: v2.text)])
            let v3 = try expectApplied(third.results[0], "second update with the right base")
            let stale = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["n": 99], base: v1.text)])
            guard let current = try expectConflict(stale.results[0], "put with the stale base \(v1)") else {
                throw CheckFailure("conflict without current; expected the record at \(v3)")
            }
            try expect(current.version == v3, "current.version is \(current.version), expected the latest \(v3)")
            try expect(current.data == ["n": 3], "current.data is \(current.data?.description ?? "absent"), expected {\"n\":3}")
            let staleDelete = try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "r1", base: v1.text)])
            try expectConflict(staleDelete.results[0], "delete with the stale base \(v1)")
            let stored = try await PushChecks.current(c, space, id: "r1")
            try expect(stored?.version == v3 && stored?.data == ["n": 3], "after conflicts the record is \(stored.map { "\($0.version) \($0.data?.description ?? "deleted")" } ?? "absent"), expected \(v3) {\"n\":3}")
        },
        Check("push-base-on-missing-record-conflict", section: "4", "a baseVersion for a record that does not exist is a conflict with no current record") { c in
            let space = c.newSpace()
            let info = try await c.info()
            _ = try await create(c, space, id: "other")
            let reply = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "never-written", data: ["v": 1], base: "\(info.epoch).1")])
            let current = try expectConflict(reply.results[0], "put with a base version for a record that does not exist")
            try expect(current == nil, "current is \(current.map { "\($0.collection)/\($0.id)" } ?? ""), expected none (null or absent)")
        },
        Check("push-update-and-delete-with-right-base", section: "4", "a put or delete whose baseVersion is the current version is applied with a later version") { c in
            let space = c.newSpace()
            let v1 = try await create(c, space, id: "r1")
            let update = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: v1.text)])
            let v2 = try expectApplied(update.results[0], "put with the current version as base")
            try expect(v2.seq > v1.seq, "update got \(v2), not later than \(v1)")
            let delete = try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "r1", base: v2.text)])
            let v3 = try expectApplied(delete.results[0], "delete with the current version as base")
            try expect(v3.seq > v2.seq, "delete got \(v3), not later than \(v2)")
            let again = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 4], base: v3.text)])
            _ = try expectApplied(again.results[0], "put over a tombstone with the tombstone's version as base")
        },
        Check("push-delete-unknown-record-with-null-base", section: "4", "a delete with baseVersion null of a record that never existed is applied (a tombstone)") { c in
            let space = c.newSpace()
            let reply = try await c.push(space, [ChangeJSON.delete(c.unique("chg"), id: "ghost", base: nil)])
            let version = try expectApplied(reply.results[0], "delete with null base of an unknown record")
            let stored = try await PushChecks.current(c, space, id: "ghost")
            try expect(stored?.deleted == true && stored?.version == version, "pull shows \(stored.map { "\($0.version) deleted=\($0.deleted)" } ?? "nothing"), expected the tombstone \(version)")
        },
        Check("push-force-skips-base-check", section: "4", "force: true applies a change whatever its baseVersion") { c in
            let space = c.newSpace()
            let v1 = try await create(c, space, id: "r1")
            let v2 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: v1.text)]).results[0], "update")
            let stale = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 3], base: v1.text, force: true)])
            let v3 = try expectApplied(stale.results[0], "forced put with a stale base")
            try expect(v3.seq > v2.seq, "forced put got \(v3), not later than \(v2)")
            let null = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 4], base: nil, force: true)])
            _ = try expectApplied(null.results[0], "forced put with a null base on an existing record")
            let stored = try await PushChecks.current(c, space, id: "r1")
            try expect(stored?.data == ["v": 4], "after forced puts the record is \(stored?.data?.description ?? "absent"), expected {\"v\":4}")
        },
        Check("push-resolution-kept-with-the-state-it-wrote", section: "4",
              "a resolved write (resolves) over a state is kept with it as resolved {over, resolver, outcome} in pulls and conflict answers; a plain write clears it, a create keeps none, a malformed one is rejected invalid_change") { c in
            let space = c.newSpace()
            let v1 = try await create(c, space, id: "r1")
            let mark: JSONValue = .object(["resolver": "mergeFields(lastWriteWins)", "outcome": "write"])
            func resolved(_ change: JSONValue, _ mark: JSONValue) -> JSONValue {
                guard case .object(var o) = change else { return change }
                o["resolves"] = mark
                return .object(o)
            }
            let put = resolved(ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: v1.text), mark)
            let v2 = try expectApplied(try await c.push(space, [put], clientId: "resolving-device").results[0], "a resolved write over r1")
            let expected = Resolved(over: v1, mark: ResolutionMark(resolver: "mergeFields(lastWriteWins)", outcome: .write))
            var record = try await LineageChecks.pulled(c, space, "r1")
            try expect(record.version == v2 && record.resolved == expected,
                       "a pull shows r1 at \(record.version) with resolved \(record.resolved.map { "\($0.json)" } ?? "absent"), expected \(v2) with \(expected.json)")
            let stale = try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 3], base: v1.text)]).results[0]
            let current = try expectConflict(stale, "a put on the version the resolution replaced")
            try expect(current?.resolved == expected, "the conflict's current has resolved \(current?.resolved.map { "\($0.json)" } ?? "absent"), expected \(expected.json)")
            for bad: JSONValue in [.string("write"), .object(["resolver": "", "outcome": "write"]), .object(["resolver": "x", "outcome": "bogus"]),
                                   .object(["resolver": .string(String(repeating: "r", count: 129)), "outcome": "write"])] {
                let result = try await c.push(space, [resolved(ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 9], base: v2.text), bad)]).results[0]
                try expectRejected(result, "invalid_change", "a resolved write whose resolves is \(bad)")
            }
            record = try await LineageChecks.pulled(c, space, "r1")
            try expect(record.version == v2, "after refused resolutions r1 is \(record.version), expected \(v2)")
            _ = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 4], base: v2.text)]).results[0], "a plain put")
            record = try await LineageChecks.pulled(c, space, "r1")
            try expect(record.resolved == nil, "a plain put over a resolved state left resolved \(record.resolved.map { "\($0.json)" } ?? "")")
            let create = resolved(ChangeJSON.put(c.unique("chg"), id: "r2", data: ["v": 1], base: nil), mark)
            _ = try expectApplied(try await c.push(space, [create]).results[0], "a resolved write that creates r2")
            let created = try await LineageChecks.pulled(c, space, "r2")
            try expect(created.resolved == nil, "a resolved write that created r2 replaced nothing, but r2 has resolved \(created.resolved.map { "\($0.json)" } ?? "")")
        },
        Check("push-replay-returns-original-version", section: "4", "a change applied before is not applied again: the original version and updatedAt with replayed: true, however the record changed since") { c in
            let space = c.newSpace()
            let changeId = c.unique("chg")
            let original = ChangeJSON.put(changeId, id: "r1", data: ["v": 1], base: nil, clientTime: 1_764_430_000_000)
            let first = try await c.push(space, [original]).results[0]
            let v1 = try expectApplied(first, "first push")
            let v2 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: v1.text)]).results[0], "a later update")
            let replay = try await c.push(space, [original])
            let result = replay.results[0]
            try expect(result.status == .applied && result.version == v1 && result.replayed,
                       "resending the applied change: expected applied \(v1) with replayed: true, got \(describe(result))")
            // updatedAt is optional, but a server that gave it gives the original's again:
            // a client orders copies by it.
            try expect(first.updatedAt == nil || result.updatedAt == first.updatedAt,
                       "the replay answered updatedAt \(result.updatedAt.map(String.init) ?? "absent"), the first answer \(first.updatedAt!)")
            try expect(replay.rawResults[0]["replayed"]?.boolValue == true, "replayed must be the JSON value true")
            // clientTime is not part of a change's content (section 4's fingerprint).
            let retimed = try await c.push(space, [ChangeJSON.put(changeId, id: "r1", data: ["v": 1], base: nil, clientTime: 1_764_430_999_999)])
            try expect(retimed.results[0].status == .applied && retimed.results[0].version == v1 && retimed.results[0].replayed,
                       "resending the applied change with another clientTime: expected applied \(v1) replayed, got \(describe(retimed.results[0]))")
            let stored = try await PushChecks.current(c, space, id: "r1")
            try expect(stored?.version == v2 && stored?.data == ["v": 2], "the replay changed the record to \(stored.map { "\($0.version) \($0.data?.description ?? "deleted")" } ?? "nothing"); expected it to stay at \(v2)")
        },
        Check("push-replay-within-one-push", section: "4", "the same change twice in one push is applied once; the second result is the first's version with replayed: true") { c in
            let space = c.newSpace()
            let change = ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 1], base: nil)
            let reply = try await c.push(space, [change, change])
            let v1 = try expectApplied(reply.results[0], "first copy")
            let second = reply.results[1]
            try expect(second.status == .applied && second.version == v1 && second.replayed,
                       "second copy of the same change: expected applied \(v1) replayed, got \(describe(second))")
        },
        Check("push-change-id-reused-rejected", section: "4", "an applied changeId sent with other content is rejected change_id_reused") { c in
            let space = c.newSpace()
            let changeId = c.unique("chg")
            _ = try expectApplied(try await c.push(space, [ChangeJSON.put(changeId, id: "r1", data: ["v": 1], base: nil)]).results[0], "first push")
            let variants: [(JSONValue, String)] = [
                (ChangeJSON.put(changeId, id: "r1", data: ["v": 2], base: nil), "other data"),
                (ChangeJSON.put(changeId, id: "r2", data: ["v": 1], base: nil), "another id"),
                (ChangeJSON.put(changeId, collection: "notes", id: "r1", data: ["v": 1], base: nil), "another collection"),
                (ChangeJSON.delete(changeId, id: "r1", base: nil), "another op"),
                (ChangeJSON.put(changeId, id: "r1", data: ["v": 1], base: nil, force: true), "force added"),
            ]
            for (change, what) in variants {
                let reply = try await c.push(space, [change])
                try expectRejected(reply.results[0], "change_id_reused", "the applied changeId with \(what)")
            }
            let records = try await c.pullAll(space).records
            try expect(records.count == 1 && records[0].data == ["v": 1], "reused change ids wrote records: \(records.map { "\($0.id) \($0.data?.description ?? "deleted")" })")
        },
        Check("push-conflicts-not-remembered", section: "4", "a conflict is not remembered: its changeId may later be applied, and a retry is judged again") { c in
            let space = c.newSpace()
            let v1 = try await create(c, space, id: "r1", data: ["v": 1])
            let v2 = try expectApplied(try await c.push(space, [ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: v1.text)]).results[0], "update")
            let changeId = c.unique("chg")
            try expectConflict(try await c.push(space, [ChangeJSON.put(changeId, id: "r1", data: ["v": 3], base: v1.text)]).results[0], "stale put")
            try expectConflict(try await c.push(space, [ChangeJSON.put(changeId, id: "r1", data: ["v": 3], base: v1.text)]).results[0], "the same stale put again")
            let fixed = try await c.push(space, [ChangeJSON.put(changeId, id: "r1", data: ["v": 3], base: v2.text)])
            let v3 = try expectApplied(fixed.results[0], "the conflicting changeId, resolved onto \(v2)")
            try expect(!fixed.results[0].replayed, "a first application after a conflict is marked replayed")
            let rejectedId = c.unique("chg")
            try expectRejected(try await c.push(space, [ChangeJSON.put(rejectedId, collection: "bad/name", id: "r1", data: [:], base: nil)]).results[0],
                               "invalid_change", "invalid change")
            _ = try expectApplied(try await c.push(space, [ChangeJSON.put(rejectedId, id: "r2", data: [:], base: nil)]).results[0],
                                  "the rejected changeId reused for a valid change")
            _ = v3
        },
        Check("push-epoch-mismatch-rejected", section: "4", "a baseVersion naming another epoch is rejected epoch_mismatch") { c in
            let space = c.newSpace()
            let info = try await c.info()
            let v1 = try await create(c, space, id: "r1")
            for other in otherEpochs(info.epoch) {
                let reply = try await c.push(space, [
                    ChangeJSON.put(c.unique("chg"), id: "r1", data: ["v": 2], base: "\(other).\(v1.seq)"),
                    ChangeJSON.put(c.unique("chg"), id: "new", data: ["v": 2], base: "\(other).1"),
                ])
                try expectRejected(reply.results[0], "epoch_mismatch", "put with base \(other).\(v1.seq) (epoch is \(info.epoch))")
                try expectRejected(reply.results[1], "epoch_mismatch", "put of a new record with base \(other).1")
            }
        },
        Check("push-concurrent-versions-unique", section: "4", "concurrent pushers to one space all get applied, distinct versions, and a pull lists every record once in seq order") { c in
            let space = c.newSpace()
            let info = try await c.info()
            let writers = 8, pushes = 6, perPush = 4
            let versions = try await withThrowingTaskGroup(of: [Version].self) { group in
                for w in 0..<writers {
                    group.addTask {
                        var mine: [Version] = []
                        for p in 0..<pushes {
                            let changes = (0..<perPush).map { ChangeJSON.put(c.unique("chg"), id: "w\(w)-p\(p)-\($0)", data: ["w": .number(JSONNumber(Int64(w)))], base: nil) }
                            let reply = try await c.push(space, changes, clientId: "writer-\(w)")
                            for (i, r) in reply.results.enumerated() { mine.append(try expectApplied(r, "writer \(w) push \(p) change \(i)")) }
                        }
                        return mine
                    }
                }
                var all: [Version] = []
                for try await v in group { all += v }
                return all
            }
            try expect(versions.allSatisfy { $0.epoch == info.epoch }, "some versions are not in the current epoch")
            try expect(Set(versions.map(\.seq)).count == versions.count, "\(versions.count) applied changes got only \(Set(versions.map(\.seq)).count) distinct versions")
            let records = try await c.pullAll(space).records
            try expect(records.count == writers * pushes * perPush, "pull lists \(records.count) records, expected \(writers * pushes * perPush)")
            try expect(zip(records, records.dropFirst()).allSatisfy { $0.version.seq < $1.version.seq }, "pull is not in strictly increasing seq order")
            try expect(Set(records.map(\.version)) == Set(versions), "the versions pulled differ from the versions the pushes were given")
        },
    ]

    /// Epochs other than `epoch` that are valid: one earlier, one later, one of another length.
    static func otherEpochs(_ epoch: Epoch) -> [String] {
        let text = epoch.rawValue
        var out: [String] = []
        let earlier = text.count > 1 ? String(text.dropLast()) : "0"
        out.append(earlier == text ? "0" : earlier)
        out.append(text.count < 64 ? text + "Z" : String(text.dropLast()) + (text.last == "z" ? "y" : "z"))
        out.append(text == "0000000000000000000000000A" ? "0000000000000000000000000B" : "0000000000000000000000000A")
        return out
    }
}
