import Testing
@testable import OutpostCore

@Suite struct NamesTests {
    @Test func spaces() {
        for ok in ["a", "A9", "team.alpha-1_x", String(repeating: "a", count: 64)] { #expect(Names.isValidSpace(ok), "\(ok)") }
        for bad in ["", "_a", ".a", "-a", "a/b", "a b", "é", String(repeating: "a", count: 65)] { #expect(!Names.isValidSpace(bad), "\(bad)") }
    }

    @Test func collections() {
        for ok in ["todos", "_private", "a.b-c_d", String(repeating: "z", count: 64)] { #expect(Names.isValidCollection(ok), "\(ok)") }
        for bad in ["", ".x", "-x", "a/b", "a:b", String(repeating: "z", count: 65)] { #expect(!Names.isValidCollection(bad), "\(bad)") }
    }

    @Test func recordIDs() {
        #expect(Names.isValidRecordID("a1b2-uuid"))
        #expect(Names.isValidRecordID("ünïcødé/with spaces"))
        #expect(Names.isValidRecordID(String(repeating: "x", count: 256)))
        #expect(!Names.isValidRecordID(String(repeating: "x", count: 257)))
        #expect(!Names.isValidRecordID(String(repeating: "é", count: 129)))  // 258 bytes
        #expect(!Names.isValidRecordID(""))
        #expect(!Names.isValidRecordID("tab\there"))
        #expect(!Names.isValidRecordID("nul\u{0}"))
        #expect(!Names.isValidRecordID("del\u{7F}"))
        #expect(!Names.isValidRecordID("c1\u{85}"))
    }

    @Test func changeIDs() {
        #expect(Names.isValidChangeID("8c1d-4e:5.f_6"))
        #expect(Names.isValidChangeID(String(repeating: "a", count: 128)))
        #expect(!Names.isValidChangeID(String(repeating: "a", count: 129)))
        #expect(!Names.isValidChangeID(""))
        #expect(!Names.isValidChangeID("a b"))
        #expect(!Names.isValidChangeID("a/b"))
    }

    @Test func mediaIDs() {
        #expect(Names.isValidMediaID(String(repeating: "ab", count: 32)))
        #expect(!Names.isValidMediaID(String(repeating: "AB", count: 32)))
        #expect(!Names.isValidMediaID("../" + String(repeating: "a", count: 61)))
    }
}

@Suite struct EpochTests {
    @Test func validation() {
        #expect(Epoch("01JDQ7ZK3M8X4N2B6C9V0T5R1W") != nil)
        #expect(Epoch("a") != nil)
        #expect(Epoch("") == nil)
        #expect(Epoch("has.dot") == nil)
        #expect(Epoch(String(repeating: "a", count: 65)) == nil)
    }

    @Test func orderIsLengthThenBytes() {
        #expect(Epoch("Z")! < Epoch("00")!)
        #expect(Epoch("AB")! < Epoch("AC")!)
        #expect(Epoch("Ab")! > Epoch("AB")!)   // lowercase sorts after uppercase bytewise
        #expect(!(Epoch("AB")! < Epoch("AB")!))
    }

    @Test func generatedEpochsSortByTimeAndAfterThePrevious() {
        var rng = SystemRandomNumberGenerator()
        let a = Epoch.generate(nowMs: 1_764_430_000_000, after: nil, using: &rng)
        let b = Epoch.generate(nowMs: 1_764_430_000_001, after: a, using: &rng)
        #expect(a.rawValue.count == 26)
        #expect(a < b)
        // A clock that went backwards still yields a later epoch.
        let c = Epoch.generate(nowMs: 1_000, after: b, using: &rng)
        #expect(b < c)
        // Even after the longest possible epoch.
        let longest = Epoch(String(repeating: "z", count: 63) + "y")!
        #expect(longest < Epoch.generate(nowMs: 0, after: longest, using: &rng))
        #expect(Epoch("Zz")! < Epoch.successor(of: Epoch("Zz")!, using: &rng))
    }
}

@Suite struct VersionTests {
    @Test func parseAndPrint() throws {
        let v = try #require(Version("01JDQ7ZK3M8X4N2B6C9V0T5R1W.42"))
        #expect(v.epoch.rawValue == "01JDQ7ZK3M8X4N2B6C9V0T5R1W")
        #expect(v.seq == 42)
        #expect(v.text == "01JDQ7ZK3M8X4N2B6C9V0T5R1W.42")
        #expect(Version("E.0")?.seq == 0)
        #expect(Version("E.9007199254740991")?.seq == Version.maxSeq)
    }

    @Test func rejectsWhatIsNotAVersion() {
        for bad in ["", "E", "E.", ".5", "E.-1", "E.+1", "E.01", "E.1.2x", "E.9007199254740992", "E.99999999999999999999", "E E.1", "E.1 "] {
            #expect(Version(bad) == nil, "\(bad)")
        }
    }
}

@Suite struct LimitsTests {
    @Test func pageBudgetIsClamped() {
        let l = Limits()
        #expect(l.pageByteBudget(requested: nil) == l.pageBytes)
        #expect(l.pageByteBudget(requested: 1) == l.maxRecordBytes + 16_384)
        #expect(l.pageByteBudget(requested: 1 << 40) == l.pageBytes)
        #expect(l.pageByteBudget(requested: 500_000) == 500_000)
        #expect(l.pageLimit(requested: nil) == 1000)
        #expect(l.pageLimit(requested: 0) == 1)
        #expect(l.pageLimit(requested: 1_000_000) == l.maxPageLimit)
    }
}

@Suite struct PushDecodingTests {
    func decode(_ text: String, max: Int = 500) throws(PushDecodeError) -> (String, [DecodedChange]) {
        let value = try! JSONParser.parse(Array(text.utf8))
        let r = try PushRequest.decodeForServer(value, maxChanges: max)
        return (r.clientId, r.changes)
    }

    @Test func validChanges() throws {
        let (client, changes) = try decode("""
            {"clientId":"phone-1","extra":1,"changes":[
              {"changeId":"c1","collection":"todos","id":"a","op":"put","data":{"t":"x"},"baseVersion":null,"clientTime":5},
              {"changeId":"c2","collection":"todos","id":"a","op":"delete","baseVersion":"E.3","force":true}]}
            """)
        #expect(client == "phone-1")
        guard case .valid(let c1) = changes[0], case .valid(let c2) = changes[1] else { Issue.record("not valid"); return }
        #expect(c1.data == ["t": "x"])
        #expect(c1.baseVersion == nil)
        #expect(c1.clientTime == 5)
        #expect(c2.op == .delete && c2.force && c2.baseVersion == Version("E.3"))
    }

    @Test func perChangeFaultsRejectOnlyThatChange() throws {
        let cases: [String] = [
            #"{"changeId":"x","collection":".bad","id":"a","op":"put","data":{},"baseVersion":null}"#,
            #"{"changeId":"x","collection":"c","id":"","op":"put","data":{},"baseVersion":null}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"upsert","data":{},"baseVersion":null}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"put","baseVersion":null}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"put","data":[1],"baseVersion":null}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"delete","data":{},"baseVersion":null}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"put","data":{}}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"put","data":{},"baseVersion":"nope"}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"put","data":{},"baseVersion":"E.0"}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"put","data":{},"baseVersion":null,"force":"yes"}"#,
            #"{"changeId":"x","collection":"c","id":"a","op":"put","data":{},"baseVersion":null,"clientTime":1.5}"#,
        ]
        for c in cases {
            let (_, changes) = try decode(#"{"clientId":"p","changes":[\#(c)]}"#)
            guard case .invalid(let id, _) = changes[0] else { Issue.record("accepted: \(c)"); continue }
            #expect(id == "x")
        }
    }

    @Test func wholeRequestFaultsNameTheField() {
        let cases: [(String, String)] = [
            (#"[]"#, "body"),
            (#"{"changes":[]}"#, "clientId"),
            (#"{"clientId":"a b","changes":[]}"#, "clientId"),
            (#"{"clientId":"p"}"#, "changes"),
            (#"{"clientId":"p","changes":{}}"#, "changes"),
            (#"{"clientId":"p","changes":[1]}"#, "changes[0]"),
            (#"{"clientId":"p","changes":[{"collection":"c"}]}"#, "changes[0].changeId"),
        ]
        for (body, field) in cases {
            do {
                _ = try decode(body)
                Issue.record("accepted \(body)")
            } catch {
                #expect(error == .wire(WireError(field: field, message: error.wireMessage)), "\(body)")
            }
        }
    }

    @Test func tooManyChangesIsCountedBeforeDecoding() {
        let body = #"{"clientId":"p","changes":[1,2,3]}"#
        #expect(throws: PushDecodeError.tooManyChanges(count: 3, limit: 2)) { try decode(body, max: 2) }
    }

    @Test func fingerprintIgnoresKeyOrderAndClientTime() {
        let a = Change(changeId: "c", collection: "t", id: "1", op: .put, data: ["a": 1, "b": 2], baseVersion: nil, clientTime: 1)
        let b = Change(changeId: "c", collection: "t", id: "1", op: .put, data: ["b": 2, "a": 1], baseVersion: nil, clientTime: 99)
        #expect(a.fingerprintMaterial() == b.fingerprintMaterial())
        var c = a
        c.data = ["a": 1, "b": 3]
        #expect(a.fingerprintMaterial() != c.fingerprintMaterial())
        var d = a
        d.force = true
        #expect(a.fingerprintMaterial() != d.fingerprintMaterial())
        // The hand-written material is exactly the canonical JSON of the six fields.
        for change in [a, c, d, Change(changeId: "x", collection: "t\"q", id: "é\n", op: .delete, data: nil, baseVersion: Version("E.4"))] {
            let object: JSONObject = [
                "baseVersion": change.baseVersion.map { .string($0.text) } ?? .null,
                "collection": .string(change.collection),
                "data": change.data.map { .object($0) } ?? .null,
                "force": .bool(change.force),
                "id": .string(change.id),
                "op": .string(change.op.rawValue),
            ]
            #expect(change.fingerprintMaterial() == JSONValue.object(object).encoded(canonical: true))
        }
    }
}

extension PushDecodeError {
    var wireMessage: String {
        if case .wire(let w) = self { return w.message }
        return ""
    }
}

@Suite struct WireRoundTripTests {
    @Test func pushResponse() throws {
        let e = Epoch("01JDQ7ZK3M8X4N2B6C9V0T5R1W")!
        let current = RecordState(collection: "todos", id: "c3", version: Version(epoch: e, seq: 20), deleted: false, data: ["title": "Buy oat milk"], updatedAt: 1, updatedBy: "laptop", clientTime: 2)
        let r = PushResponse(epoch: e, results: [
            .applied("a", version: Version(epoch: e, seq: 18)),
            .applied("b", version: Version(epoch: e, seq: 5), replayed: true),
            .conflict("c", current: current),
            .conflict("d", current: nil),
            .rejected("e", .recordTooLarge, "too big"),
        ])
        #expect(try PushResponse.decode(r.encoded()) == r)
        #expect(r.encoded() == r.json.encoded())
    }

    @Test func pullPageAndTombstone() throws {
        let e = Epoch("E1")!
        let page = PullPage(epoch: e, changes: [
            RecordState(collection: "t", id: "1", version: Version(epoch: e, seq: 1), deleted: true, data: nil, updatedAt: 3, updatedBy: "p", clientTime: nil),
        ], next: Version(epoch: e, seq: 1), hasMore: false)
        let bytes = page.encoded()
        #expect(!String(decoding: bytes, as: UTF8.self).contains("\"data\""))
        #expect(try PullPage.decode(bytes) == page)
    }

    @Test func serverInfo() throws {
        let info = ServerInfo(epoch: Epoch("E1")!, limits: Limits())
        let text = String(decoding: info.encoded(), as: UTF8.self)
        #expect(text.contains(#""maxChangesPerPush":500"#))
        #expect(try ServerInfo.decode(info.encoded()) == info)
    }

    @Test func errorEnvelope() throws {
        let e = ErrorEnvelope(code: "payload_too_large", message: "too big", details: ["limit": 10])
        #expect(String(decoding: e.encoded(), as: UTF8.self) == #"{"error":{"code":"payload_too_large","message":"too big","details":{"limit":10}}}"#)
        #expect(try ErrorEnvelope.decode(e.encoded()) == e)
    }

    @Test func mediaTypes() throws {
        let u = UploadRequest(size: 10, sha256: String(repeating: "a", count: 64), contentType: "image/jpeg", filename: "x.jpg")
        #expect(try UploadRequest.decode(u.encoded()) == u)
        #expect(throws: WireError.self) { try UploadRequest.decode(Array(#"{"size":-1,"sha256":"x","contentType":"a/b"}"#.utf8)) }
        #expect(!UploadRequest.isValidContentType("text/plain\r\nX: y"))
        #expect(UploadRequest.isValidContentType("text/plain; charset=utf-8"))
        #expect(UploadRequest.isValidContentType(" image/png ;"))
        // Once a trap that stopped the server (a `;` alone split into no pieces), and a
        // leading `;` that let `;a/b` through as a Content-Type.
        for bad in [";", ";;", " ;", ";a/b", ";;a/b", "", "a/b/c", "a /b", "/b", "a/", "ab"] {
            #expect(!UploadRequest.isValidContentType(bad), "\(bad)")
        }
        #expect(UploadState.chunkCount(size: 0, chunkSize: 10) == 0)
        #expect(UploadState.chunkCount(size: 10, chunkSize: 10) == 1)
        #expect(UploadState.chunkCount(size: 11, chunkSize: 10) == 2)
    }
}
