import Foundation
import OutpostCore
import OutpostCrypto
@testable import OutpostHTTP
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// The admin console (docs/operating.md, "Admin console"): its routes over a real socket on
/// each store, the headers it is served with, the tokens it issues, the ring of recent
/// errors, and the console itself driven in headless Chromium by Selenium
/// (`Tests/admin-console/console_test.py`) against an `outpost-server` child.
@Suite(.offPoolWhileBlocking, .serverLogs) struct AdminConsoleTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    // MARK: Routes

    @Test(arguments: Store.allCases) func anAdminBrowsesASpacesCollectionsRecordsAndMediaByPage(store: Store) async throws {
        let url = store == .postgres ? try await PostgresCluster.database(prefix: "console") : nil
        try await withServer(configure: { if let url { $0.store = url } }) { s in
            let ids = ["a01", "a02", "a03", "a04", "a05", "a06", "a07", "b01", "b02"]
            let made = try PushResponse.decode(try await s.push("field", ids.enumerated().map { i, id in
                put("c\(i)", id, ["n": .number(JSONNumber(i)), "label": .string("record \(id)")], collection: "inspections")
            } + [put("s1", "site-1", collection: "sites"), put("n1", "note-1", collection: "notes")]).body)
            #expect(made.results.allSatisfy { $0.status == .applied })
            let deleted = Change(changeId: "d1", collection: "inspections", id: "a05", op: .delete, data: nil, baseVersion: made.results[4].version, clientTime: 1)
            #expect(try PushResponse.decode(try await s.push("field", [deleted]).body).results.map(\.status) == [.applied])
            let big = JSONValue.string(String(repeating: "x", count: 2000))
            #expect(try await s.push("field", (0..<3).map { put("big\($0)", "big-\($0)", ["blob": big], collection: "big") }).status == 200)
            #expect(try await s.push("other", [put("o1", "o1")]).status == 200)
            let admin = s.token(spaces: [], admin: true)
            func get(_ path: String) async throws -> JSONValue {
                let r = try await s.request("GET", path, token: admin)
                guard r.status == 200 else { throw ProcessFailure("GET \(path) answered \(r.status): \(r.text)") }
                // The console's own routes are never cached; the spaces list is not one of them.
                if !path.hasPrefix("/v1/admin/spaces?") && path != "/v1/admin/spaces" {
                    #expect(r.header("Cache-Control") == "no-store", "GET \(path)")
                }
                return try json(r)
            }

            // Collections, a page at a time.
            let first = try await get("/v1/admin/spaces/field/collections?limit=2")
            #expect(first["collections"]?.arrayValue?.map { $0["name"] } == ["big", "inspections"] && first["next"] == "inspections")
            let rest = try await get("/v1/admin/spaces/field/collections?after=inspections")
            #expect(rest["collections"]?.arrayValue?.map { $0["name"] } == ["notes", "sites"] && rest["next"] == .null)
            #expect(try await get("/v1/admin/spaces/nobody/collections")["collections"] == [])

            // Records in id order, by cursor, tombstones included, until `next` is null.
            var seen: [String] = []
            var after = ""
            var pages = 0
            while true {
                let page = try await get("/v1/admin/spaces/field/collections/inspections/records?limit=3&after=\(after)")
                let records = page["records"]?.arrayValue ?? []
                #expect(page["epoch"]?.stringValue == s.epoch.rawValue)
                seen += records.compactMap { $0["id"]?.stringValue }
                pages += 1
                guard let next = page["next"]?.stringValue else { break }
                #expect(records.count == 3 && next == seen.last)
                after = next
            }
            #expect(seen == ids && pages == 3)
            let page = try await get("/v1/admin/spaces/field/collections/inspections/records")
            let a05 = page["records"]?.arrayValue?.first { $0["id"] == "a05" }
            #expect(a05?["deleted"] == true && a05?["data"] == nil)
            let a02 = page["records"]?.arrayValue?.first { $0["id"] == "a02" }
            #expect(a02?["data"]?["label"] == "record a02" && a02?["version"]?.stringValue == "\(s.epoch.rawValue).2" && a02?["updatedBy"] == "test-client")
            // By id prefix, paged the same way.
            let prefixed = try await get("/v1/admin/spaces/field/collections/inspections/records?prefix=a0&limit=4")
            #expect(prefixed["records"]?.arrayValue?.map { $0["id"] } == ["a01", "a02", "a03", "a04"] && prefixed["next"] == "a04")
            let more = try await get("/v1/admin/spaces/field/collections/inspections/records?prefix=a0&limit=4&after=a04")
            #expect(more["records"]?.arrayValue?.map { $0["id"] } == ["a05", "a06", "a07"] && more["next"] == .null)
            #expect(try await get("/v1/admin/spaces/field/collections/inspections/records?prefix=b")["records"]?.arrayValue?.count == 2)
            #expect(try await get("/v1/admin/spaces/field/collections/inspections/records?prefix=zz")["records"] == [])
            // The byte budget: at least one record a page, and never a second past the budget.
            let one = try await get("/v1/admin/spaces/field/collections/big/records?maxBytes=1024")
            #expect(one["records"]?.arrayValue?.count == 1 && one["next"] == "big-0")
            let two = try await get("/v1/admin/spaces/field/collections/big/records?maxBytes=5000")
            #expect(two["records"]?.arrayValue?.count == 2 && two["next"] == "big-1")

            // One record, its tombstone, and one that does not exist.
            let record = try await get("/v1/admin/spaces/field/collections/inspections/record?id=a03")
            #expect(record["id"] == "a03" && record["collection"] == "inspections" && record["data"]?["n"] == 2)
            #expect(record["updatedAt"]?.int64Value ?? 0 > 1_700_000_000_000 && record["clientTime"] == 1_764_430_000_000)
            #expect(try await get("/v1/admin/spaces/field/collections/inspections/record?id=a05")["deleted"] == true)
            let missing = try await s.request("GET", "/v1/admin/spaces/field/collections/inspections/record?id=zz", token: admin)
            #expect(missing.status == 404 && errorCode(missing) == "record_not_found")

            // Bad input: a clear error, before any read.
            for (path, status, field) in [
                ("/v1/admin/spaces/field/collections/inspections/record", 422, "id"),
                ("/v1/admin/spaces/field/collections/inspections/record?id=a%01", 422, "id"),
                ("/v1/admin/spaces/field/collections/inspections/records?prefix=\(String(repeating: "p", count: 257))", 422, "prefix"),
                ("/v1/admin/spaces/field/collections/inspections/records?limit=501", 422, "limit"),
                ("/v1/admin/spaces/field/collections/inspections/records?maxBytes=10", 422, "maxBytes"),
                ("/v1/admin/spaces/field/collections/-bad/records", 422, "collection"),
                ("/v1/admin/spaces/field/collections?after=-x", 422, "after"),
                ("/v1/admin/spaces/field/media?after=nothex", 422, "after"),
            ] {
                let r = try await s.request("GET", path, token: admin)
                let details = try? ErrorEnvelope.decode(r.body).details
                #expect(r.status == status && details?["field"] == .string(field), "\(path): \(r.status) \(r.text)")
            }
            let badSpace = try await s.request("GET", "/v1/admin/spaces/-x/collections", token: admin)
            #expect(badSpace.status == 400 && errorCode(badSpace) == "invalid_space")

            // Media: a page of files by id, their bytes for an admin token, and each space's usage.
            let media = MediaClient(port: s.port, token: s.token(spaces: ["field"]))
            let image = TestPNG.make(width: 12, height: 8, seed: 1)
            let text = Array("plain text, not an image".utf8)
            let imageID = try await Self.upload(media, "field", image, contentType: "image/png", filename: "pump.png")
            let textID = try await Self.upload(media, "field", text, contentType: "text/plain", filename: nil)
            let files = try await get("/v1/admin/spaces/field/media?limit=1")
            let ordered = [imageID, textID].sorted()
            #expect(files["media"]?.arrayValue?.map { $0["mediaId"] } == [.string(ordered[0])] && files["next"] == .string(ordered[0]))
            let all = try await get("/v1/admin/spaces/field/media")
            let png = all["media"]?.arrayValue?.first { $0["mediaId"] == .string(imageID) }
            #expect(png?["filename"] == "pump.png" && png?["contentType"] == "image/png" && png?["size"] == .number(JSONNumber(image.count)))
            #expect(all["media"]?.arrayValue?.first { $0["mediaId"] == .string(textID) }?["filename"] == .null)
            let bytes = try await s.request("GET", "/v1/admin/spaces/field/media/\(imageID)", token: admin)
            #expect(bytes.status == 200 && bytes.body == image && bytes.header("Content-Type") == "image/png")
            #expect(bytes.header("Content-Security-Policy") == "default-src 'none'; sandbox" && bytes.header("X-Content-Type-Options") == "nosniff")
            let head = try await s.request("HEAD", "/v1/admin/spaces/field/media/\(imageID)", token: admin)
            #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == String(image.count))
            let absent = try await s.request("GET", "/v1/admin/spaces/other/media/\(imageID)", token: admin)
            #expect(absent.status == 404 && errorCode(absent) == "media_not_found")
            let spaces = try await get("/v1/admin/spaces")["spaces"]?.arrayValue ?? []
            let field = spaces.first { $0["name"] == "field" }
            #expect(field?["mediaFiles"] == 2 && field?["mediaBytes"] == .number(JSONNumber(image.count + text.count)))
            #expect(field?["records"] == 13 && field?["tombstones"] == 1)
            #expect(spaces.first { $0["name"] == "other" }?["mediaBytes"] == 0)

            // Every admin route wants an admin token: 401 without one, 403 for a space's token.
            let reader = s.token(spaces: ["*"], scope: .read)
            for path in ["/v1/admin/status", "/v1/admin/errors", "/v1/admin/spaces/field/collections",
                         "/v1/admin/spaces/field/collections/inspections/records", "/v1/admin/spaces/field/collections/inspections/record?id=a01",
                         "/v1/admin/spaces/field/media", "/v1/admin/spaces/field/media/\(imageID)"] {
                #expect(try await s.request("GET", path, token: nil).status == 401, "\(path)")
                #expect(try await s.request("GET", path, token: reader).status == 403, "\(path)")
            }
            #expect(try await s.request("POST", "/v1/admin/tokens", token: reader, body: Array(#"{"sub":"x","space":"field"}"#.utf8)).status == 403)
        }
    }

    /// Init, one chunk (the files are small), finalize; the media id.
    static func upload(_ media: MediaClient, _ space: String, _ file: [UInt8], contentType: String, filename: String?) async throws -> String {
        let started = try await media.begin(space, size: file.count, sha256: SHA256.hex(file), contentType: contentType, filename: filename)
        let upload = try UploadState.decode(started.body)
        #expect(started.status == 201 && upload.chunkCount == 1, "\(started.text)")
        #expect(try await media.chunk(space, upload.uploadId, 0, file).status == 200)
        let done = try await media.finalize(space, upload.uploadId)
        #expect(done.status == 200, "\(done.text)")
        return try UploadComplete.decode(done.body).media.mediaId
    }

    @Test func aPrefixRangeHoldsExactlyTheIdsThatStartWithIt() {
        let cases: [(String, String?)] = [("a0", "a1"), ("ab", "ac"), ("z", "{"), ("\u{D7FF}", "\u{E000}"), ("x\u{10FFFF}", "y"), ("\u{10FFFF}", nil)]
        for (prefix, upper) in cases {
            let bounds = RecordBrowser.prefixBounds(prefix)
            #expect(bounds.lower == prefix && bounds.upper == upper, "\(prefix)")
        }
        // Bytewise, as both stores compare ids: every id with the prefix is inside, the others outside.
        let ids = ["a", "a0", "a0z", "a0\u{10FFFF}", "a1", "a/", "b", "a0\u{E9}"]
        let (lower, upper) = RecordBrowser.prefixBounds("a0")
        let inside = ids.filter { Array($0.utf8).lexicographicallyPrecedes(Array(upper!.utf8)) && !Array($0.utf8).lexicographicallyPrecedes(Array(lower.utf8)) }
        #expect(Set(inside) == Set(ids.filter { $0.hasPrefix("a0") }))
    }

    // MARK: Serving the console

    @Test func theConsoleIsServedWithStrictHeadersAndCachedByVersion() async throws {
        try await withServer { s in
            let page = try await s.request("GET", "/admin", token: nil)
            #expect(page.status == 200 && page.header("Content-Type") == "text/html; charset=utf-8")
            let csp = try #require(page.header("Content-Security-Policy"))
            for directive in ["default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "img-src 'self' blob:", "connect-src 'self'"] {
                #expect(csp.contains(directive), "\(csp)")
            }
            #expect(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"))
            #expect(page.header("X-Content-Type-Options") == "nosniff" && page.header("Referrer-Policy") == "no-referrer")
            #expect(page.header("X-Frame-Options") == "DENY" && page.header("Cache-Control") == "no-cache")
            // No inline script: every <script> names a file, and no element carries an event handler.
            let html = page.text
            #expect(html.components(separatedBy: "<script").count == 2 && html.contains(#"<script src="\#(ConsoleAssets.script.url)" defer></script>"#))
            #expect(!html.contains(" onclick") && !html.contains(" onload") && !html.contains("style="))
            // The script served is the source tree's console.js, compiled into the binary.
            let source = try Data(contentsOf: Self.root.appendingPathComponent("Server/OutpostServer/Admin/console.js"))
            #expect(ConsoleAssets.script.bytes == Array(source))
            // Each asset by its versioned URL is immutable; by any other URL it is revalidated.
            for asset in [ConsoleAssets.script, ConsoleAssets.style, ConsoleAssets.icon] {
                #expect(html.contains(asset.url), "the page does not name \(asset.url)")
                let versioned = try await s.request("GET", asset.url, token: nil)
                #expect(versioned.status == 200 && versioned.body == asset.bytes && versioned.header("Content-Type") == asset.contentType)
                #expect(versioned.header("Cache-Control") == "public, max-age=31536000, immutable" && versioned.header("Content-Security-Policy") == csp)
                let stale = try await s.request("GET", "/admin/\(asset.name)?v=0000", token: nil)
                #expect(stale.status == 200 && stale.header("Cache-Control") == "no-cache")
                let etag = try #require(versioned.header("ETag"))
                #expect(etag == "W/\"\(asset.digest)\"")
                let again = try await s.request("GET", asset.url, token: nil, headers: [("If-None-Match", etag)])
                #expect(again.status == 304 && again.body.isEmpty && again.header("ETag") == etag)
            }
            let missing = try await s.request("GET", "/admin/secrets.txt", token: nil)
            #expect(missing.status == 404 && errorCode(missing) == "not_found")
            #expect(try await s.request("POST", "/admin", token: nil).status == 405)
        }
    }

    /// `/admin/` is not a file of the console: it is sent to the console's page.
    @Test func theConsoleWithATrailingSlashIsRedirectedToItsPage() async throws {
        try await withServer { s in
            let slash = try await s.request("GET", "/admin/", token: nil)
            #expect(slash.status == 301 && slash.header("Location") == "/admin")
            #expect(slash.header("Content-Security-Policy") == ConsoleAssets.contentSecurityPolicy)
            let query = try await s.request("GET", "/admin/?space=s1", token: nil)
            #expect(query.status == 301 && query.header("Location") == "/admin?space=s1")
            #expect(try await s.request("HEAD", "/admin/", token: nil).status == 301)
        }
    }

    // MARK: Tokens

    @Test func aTokenIssuedForASpaceReadsOnlyThatSpaceAndItsLifeIsBounded() async throws {
        try await withServer { s in
            #expect(try await s.push("field", [put("c1", "r1")]).status == 200)
            let admin = s.token(sub: "ops", spaces: [], admin: true)
            func issue(_ body: String) async throws -> TestResponse {
                try await s.request("POST", "/v1/admin/tokens", token: admin, body: Array(body.utf8))
            }
            let before = Int64(Date().timeIntervalSince1970 * 1000)
            let issued = try await issue(#"{"sub":"field-worker","space":"field","scope":"read","ttlSeconds":600}"#)
            let after = Int64(Date().timeIntervalSince1970 * 1000)
            #expect(issued.status == 201 && issued.header("Cache-Control") == "no-store", "\(issued.text)")
            let answer = try json(issued)
            let token = try #require(answer["token"]?.stringValue)
            #expect(answer["sub"] == "field-worker" && answer["spaces"] == ["field"] && answer["scope"] == "read")
            let expiresAt = try #require(answer["expiresAt"]?.int64Value)
            // Ten minutes from when the server issued it (in whole seconds), however long the
            // request took.
            #expect(expiresAt >= before - 1000 + 600_000 && expiresAt <= after + 600_000, "\(before) \(expiresAt) \(after)")
            // It reads its space, not another, never writes (read scope), and is no admin token.
            #expect(try await s.pull("field", token: token).status == 200)
            #expect(try await s.pull("other", token: token).status == 403)
            #expect(try await s.push("field", [put("c2", "r2")], token: token).status == 403)
            #expect(try await s.request("GET", "/v1/admin/status", token: token).status == 403)
            let claims = try s.authority.verify(token, now: Int64(Date().timeIntervalSince1970))
            #expect(claims.sub == "field-worker" && claims.spaces == ["field"] && claims.scope == .read && !claims.admin)
            // The defaults: read scope, one hour.
            let plain = try json(try await issue(#"{"sub":"x","space":"field"}"#))
            #expect(plain["scope"] == "read" && (plain["expiresAt"]?.int64Value ?? 0) >= before - 1000 + 3_600_000)
            let writer = try json(try await issue(#"{"sub":"x","space":"field","scope":"write","ttlSeconds":60}"#))
            #expect(try await s.push("field", [put("c3", "r3")], token: writer["token"]?.stringValue).status == 200)

            // Refused, with the field named: nothing is issued.
            for (body, field) in [
                (#"{"sub":"x","space":"field","ttlSeconds":59}"#, "ttlSeconds"),
                (#"{"sub":"x","space":"field","ttlSeconds":2592001}"#, "ttlSeconds"),
                (#"{"sub":"x","space":"field","ttlSeconds":null}"#, "ttlSeconds"),
                (#"{"sub":"x","space":"field","ttlSeconds":"600"}"#, "ttlSeconds"),
                (#"{"sub":"x","space":"field","scope":"admin"}"#, "scope"),
                (#"{"sub":"x","space":"field","scope":null}"#, "scope"),
                (#"{"sub":"x","space":"-bad"}"#, "space"),
                (#"{"sub":"x","space":"team*"}"#, "space"),
                (#"{"sub":"","space":"field"}"#, "sub"),
                (#"{"sub":"a\u0000b","space":"field"}"#, "sub"),
                (#"{"sub":"ann\u001b[2J","space":"field"}"#, "sub"),
                (#"{"space":"field"}"#, "sub"),
                (#"["x"]"#, "body"),
            ] {
                let r = try await issue(body)
                let details = try? ErrorEnvelope.decode(r.body).details
                #expect(r.status == 422 && details?["field"] == .string(field), "\(body): \(r.status) \(r.text)")
            }
            #expect(try await issue("{").status == 400)
            #expect(try await s.request("POST", "/v1/admin/tokens", token: nil, body: Array(#"{"sub":"x","space":"field"}"#.utf8)).status == 401)
            #expect(try await s.request("POST", "/v1/admin/tokens", token: admin, body: Array(repeating: UInt8(ascii: " "), count: 5000)).status == 413)
            #expect(s.app.metrics.render().contains(#"outpost_admin_tokens_issued_total{scope="read"} 2"#))
        }
    }

    // MARK: Recent errors

    @Test func theRingKeepsTheNewestErrorAnswersUpToItsCapacity() {
        let ring = RecentErrors(capacity: 3)
        func log(_ status: Int, _ code: String?, route: String? = "/r") -> HTTPRequestLog {
            var log = HTTPRequestLog(method: .GET, route: route, status: status, duration: .zero, requestID: "id-\(status)", bytesIn: 0, bytesOut: 0, remoteAddress: "")
            log.failure = code.map { HTTPFailure(code: $0, message: "m \($0) " + String(repeating: "y", count: 400)) }
            return log
        }
        ring.record(log(200, nil), at: 1)
        ring.record(log(404, "not_found", route: nil), at: 2)
        #expect(ring.latest(10).map(\.status) == [404] && ring.latest(10)[0].route == nil)
        for (i, status) in [401, 403, 422, 503].enumerated() { ring.record(log(status, "e\(status)"), at: Int64(10 + i)) }
        #expect(ring.latest(10).map(\.status) == [503, 422, 403])
        #expect(ring.latest(2).map(\.at) == [13, 12])
        let message = ring.latest(1)[0].message
        #expect(message.count == RecentErrors.maxMessageCharacters && message.hasSuffix("…") && message.hasPrefix("m e503"))
    }

    @Test func errorAnswersAreListedNewestFirstWithoutTheirRequestsData() async throws {
        try await withServer { s in
            let admin = s.token(spaces: [], admin: true)
            let secretToken = s.token(spaces: ["a"], scope: .read) + "tampered"
            // An answer joins the ring once the engine has written it, just after the client can
            // read it: each request waits for the one before it to be recorded (the engine's
            // completion hook, which records it, has run), so that the ring's order is the
            // requests' order.
            let failing: [(path: String, token: String?, status: Int)] = [
                ("/v1/spaces/a/pull", secretToken, 401),
                ("/v1/spaces/b/pull", s.token(spaces: ["a"]), 403),
                ("/v1/spaces/%3Cimg%20src%3Dx%3E/pull", admin, 400),
                ("/nowhere?secret=hunter2", nil, 404),
            ]
            for (i, request) in failing.enumerated() {
                #expect(try await s.request("GET", request.path, token: request.token).status == request.status)
                try await s.completed.until("error answer \(i + 1) recorded") { $0 >= i + 1 }
                #expect(s.app.errors.latest(10).count == i + 1)
            }
            #expect(try await s.push("a", [put("c1", "r1", ["pin": "1234"])]).status == 200)
            let r = try await s.request("GET", "/v1/admin/errors?limit=3", token: admin)
            #expect(r.status == 200)
            let answer = try json(r)
            let errors = answer["errors"]?.arrayValue ?? []
            #expect(errors.map { $0["status"] } == [404, 400, 403] && answer["capacity"] == 200)
            #expect(errors[0]["route"] == .null && errors[0]["code"] == "not_found" && errors[0]["method"] == "GET")
            #expect(errors[1]["route"] == "/v1/spaces/{space}/pull" && errors[1]["code"] == "invalid_space")
            #expect(errors[1]["message"]?.stringValue?.hasPrefix(#""…" is not a space name"#) == true, "\(errors[1])")
            #expect(errors[1]["message"]?.stringValue?.contains("<img") == false, "the path's text is the client's, not kept")
            let all = try await s.request("GET", "/v1/admin/errors", token: admin)
            let listed = try json(all)["errors"]?.arrayValue ?? []
            #expect(listed.count == 4 && listed[3]["status"] == 401 && listed[3]["code"] == "unauthorized")
            #expect(listed.allSatisfy { ($0["at"]?.int64Value ?? 0) > 1_700_000_000_000 && $0["requestId"]?.stringValue?.isEmpty == false })
            // Neither the token, the query nor any record's data is kept.
            #expect(!all.text.contains("tampered") && !all.text.contains("hunter2") && !all.text.contains("1234") && !all.text.contains("eyJ"))
            #expect(try await s.request("GET", "/v1/admin/errors?limit=201", token: admin).status == 422)
        }
    }

    /// An error the client's bytes caused keeps its kind and place, never those bytes: a
    /// duplicate member's name, a `collectionVersions` member, a token header's `alg`; the
    /// client's own answer still names them.
    @Test func errorsKeepTheKindAndPlaceNotTheClientsBytes() async throws {
        try await withServer { s in
            let admin = s.token(spaces: [], admin: true), writer = s.token(spaces: ["a"])
            let header = Base64.encodeURL(Array(#"{"alg":"sneaky-alg-xyz","typ":"JWT"}"#.utf8))
            let forged = header + "." + Base64.encodeURL(Array(#"{"sub":"x"}"#.utf8)) + ".c2ln"
            let requests: [(body: String?, token: String, status: Int, answerHolds: String)] = [
                (#"{"clientId":"c","password-hunter2":1,"password-hunter2":2,"changes":[]}"#, writer, 400, "password-hunter2"),
                (#"{"clientId":"c","changes":[],"collectionVersions":{"secret member!":1}}"#, writer, 422, "secret member!"),
                (nil, forged, 401, "sneaky-alg-xyz"),
            ]
            for (i, r) in requests.enumerated() {
                let answer = r.body == nil ? try await s.request("GET", "/v1/spaces/a/pull", token: r.token)
                    : try await s.request("POST", "/v1/spaces/a/push", token: r.token, body: Array(r.body!.utf8))
                #expect(answer.status == r.status && answer.text.contains(r.answerHolds), "\(answer.status) \(answer.text)")
                try await s.completed.until("error answer \(i + 1) recorded") { $0 >= i + 1 }
            }
            let listed = try await s.request("GET", "/v1/admin/errors", token: admin)
            let messages = (try json(listed)["errors"]?.arrayValue ?? []).compactMap { $0["message"]?.stringValue }
            #expect(messages.count == 3, "\(listed.text)")
            for secret in ["hunter2", "secret member", "sneaky"] { #expect(!listed.text.contains(secret), "\(secret) kept: \(listed.text)") }
            #expect(messages.contains { $0.contains(#"duplicate key "…""#) }, "\(messages)")
            #expect(messages.contains { $0.hasPrefix("collectionVersions.… is not a collection name") }, "\(messages)")
            #expect(messages.contains { $0.hasPrefix(#"token algorithm "…" is not accepted"#) }, "\(messages)")
        }
    }

    /// `outpost-server token` refuses a control character in any claim it would sign, as
    /// `POST /v1/admin/tokens` does (`Claims.claimWithControlCharacter`).
    @Test func theTokenCommandRefusesControlCharactersInClaims() throws {
        let environment = ["OUTPOST_JWT_SECRET": String(repeating: "k", count: 32)]
        for arguments in [["--sub", "a\u{0}b", "--space", "s"], ["--sub", "a", "--space", "s", "--claim", "team=north\u{7}"],
                          ["--sub", "a", "--space", "s", "--claim", #"roles=["ok","x\u0085"]"#]] {
            #expect(throws: AdminCommands.Usage.self, "\(arguments)") { try AdminCommands.token(arguments: arguments, environment: environment) }
        }
        #expect(try !AdminCommands.token(arguments: ["--sub", "ann", "--space", "s", "--claim", "team=north"], environment: environment).isEmpty)
    }

    @Test func statusGivesTheEpochStoreVersionAndUptime() async throws {
        try await withServer { s in
            let r = try await s.request("GET", "/v1/admin/status", token: s.token(spaces: [], admin: true))
            let status = try json(r)
            #expect(r.status == 200 && status["epoch"]?.stringValue == s.epoch.rawValue && status["store"] == "sqlite")
            #expect(status["server"]?.stringValue == "outpost/\(OutpostProtocol.productVersion)" && status["protocolVersion"]?.stringValue == OutpostProtocol.revision)
            let started = try #require(status["startedAt"]?.int64Value), now = try #require(status["now"]?.int64Value)
            #expect(started <= now && (status["uptimeSeconds"]?.int64Value ?? -1) >= 0)
        }
    }

    // MARK: In a browser

    /// The venv's Python with Selenium, and Debian's chromium and chromedriver: all three
    /// are a failure when missing, never a skip (`scripts/install-deps.sh test` installs them).
    static func browserTools() throws -> (python: String, chromium: String, driver: String) {
        let version = try PinnedTools.version("selenium")
        let python = PinnedTools.venvPath("selenium", version: version, "python")
        var missing: [String] = []
        if !FileManager.default.isExecutableFile(atPath: python) { missing.append("Selenium \(version) (a venv at \(python))") }
        for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] where !FileManager.default.isExecutableFile(atPath: tool) { missing.append(tool) }
        guard missing.isEmpty else {
            throw ProcessFailure("not installed: \(missing.joined(separator: ", ")); run scripts/install-deps.sh test")
        }
        return (python, "/usr/bin/chromium", "/usr/bin/chromedriver")
    }

    /// A realistic space for the console to show: inspections of a field team (more than a
    /// page of them), sites and work orders, a note whose data and id are markup meant to
    /// run, images (one named as markup), devices that reported, and another space.
    struct Fixture {
        static let space = "field-ops"
        static let otherSpace = "depot-north"
        static let trafficSpace = "dispatch"
        static let inspections = 60
        static let knownID = "insp-2026-0042"
        static let deviceClient = "phone-okafor"
        static let knownValue = "Valve V3 replaced; pressure back to 4.2 bar"
        static let scriptPayload = "<script>window.__pwned = 'script'; document.title = 'pwned';</script>"
        static let imagePayload = #"<img src=x onerror="window.__pwned='img';document.title='pwned'">"#
        static let sites = ["Pump station 7", "Reservoir Hill", "North intake", "Treatment works B", "Booster 12", "Depot yard"]
        static let inspectors = ["A. Okafor", "M. Lindqvist", "R. Tanaka", "S. Haddad", "J. Moreau"]
        static let statuses = ["passed", "passed", "passed", "needs follow-up", "passed", "failed"]
        /// An inspector reads the inspections of their own site; a supervisor reads all;
        /// the loader and inspectors write them. Every other collection is open.
        static let readRule = "data.site == auth.site || 'supervisor' in auth.roles"
        static let rules = """
            {"collections": {"inspections": {
               "read": "\(readRule)",
               "write": [{"rule": "auth.sub == 'loader' || 'inspector' in auth.roles", "reason": "only inspectors record inspections"}],
               "schema": {"type": "object", "required": ["site", "status"]}}},
             "default": {"read": "true", "write": "true"}}
            """
    }

    @Test func theConsoleWorksInABrowser() async throws {
        let tools = try Self.browserTools()
        let artifacts = Self.root.appendingPathComponent(".build/test-artifacts/admin-console")
        try? FileManager.default.removeItem(at: artifacts)
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let (ended, output) = try await withTemporaryDirectory(prefix: "outpost-console") { dir in
            let server = try await blocking { try ServerProcess(dataDirectory: dir.appending("data")) }
            // A second server, under a rules file, for the Access page: the same fixture, and
            // rules to explain. (The overview's long-poll checks are of the first, whose pulls
            // wait in the shared long-poll hub; a pull under rules waits on its own.)
            let rules = dir.appending("rules.json")
            try Data(Fixture.rules.utf8).write(to: URL(fileURLWithPath: rules))
            let ruled: ServerProcess
            do { ruled = try await blocking { try ServerProcess(dataDirectory: dir.appending("ruled"), arguments: ["--rules", rules]) } } catch {
                _ = try await blocking { server.stop() }
                throw error
            }
            // Stopped by their PIDs off the cooperative pool, whether the run passed or threw.
            let run: Result<(Subprocess.Termination?, String), any Error>
            do { run = .success(try await Self.runBrowser(server, ruled: ruled, in: dir, tools: tools, artifacts: artifacts)) } catch { run = .failure(error) }
            _ = try await blocking { server.stop() }
            _ = try await blocking { ruled.stop() }
            return try run.get()
        }
        let shots = output.split(separator: "\n").filter { $0.hasPrefix("screenshot: ") }.map { String($0.dropFirst("screenshot: ".count)) }
        for shot in shots { print("admin console screenshot: \(shot)") }
        #expect(ended == .exited(0), "the console's browser test failed (\(ended.map { "\($0)" } ?? "no exit within 600 s")):\n\(output)")
        for page in ["signin", "overview", "spaces", "records", "records-xss", "media", "devices", "access-explain", "access-view", "device", "tokens"] {
            let path = artifacts.appendingPathComponent("\(page).png").path
            #expect(shots.contains(path) && FileManager.default.fileExists(atPath: path), "no screenshot of \(page) at \(path)")
        }
    }

    /// Seeds `server`, writes the fixture and runs the Selenium script to its end; its exit
    /// (nil when it had to be stopped) and everything it printed.
    static func runBrowser(_ server: ServerProcess, ruled: ServerProcess, in dir: TemporaryDirectory, tools: (python: String, chromium: String, driver: String),
                           artifacts: URL) async throws -> (Subprocess.Termination?, String) {
        let admin = try await blocking { try server.token(sub: "ops-lead", spaces: [], admin: true) }
        let writer = try await blocking { try server.token(sub: "loader", spaces: [Fixture.space, Fixture.otherSpace, Fixture.trafficSpace], scope: "write") }
        let media = try await Self.seed(server, token: writer)
        // Both servers have the same secret: the tokens hold for both.
        _ = try await Self.seed(ruled, token: writer)
        // A device of an inspector of Pump station 7 that pulled part of the space under its
        // view and reported, for the Device page of the server under rules.
        let inspector = try await blocking { try ruled.token(sub: "a.okafor", spaces: [Fixture.space], scope: "read", claims: ["site=Pump station 7"]) }
        try await Self.seedDevice(ruled, token: inspector)
        let fixture = JSONValue.object([
            "url": .string(server.baseURL.absoluteString), "adminToken": .string(admin), "writeToken": .string(writer),
            "space": .string(Fixture.space), "otherSpace": .string(Fixture.otherSpace), "trafficSpace": .string(Fixture.trafficSpace),
            "collection": "inspections", "inspections": .number(JSONNumber(Fixture.inspections)),
            "knownId": .string(Fixture.knownID), "knownValue": .string(Fixture.knownValue),
            "xssCollection": "notes", "xssId": .string(Fixture.imagePayload),
            "scriptPayload": .string(Fixture.scriptPayload), "imagePayload": .string(Fixture.imagePayload),
            "image": .object(["mediaId": .string(media.imageID), "filename": "site-7-valve.png", "width": 160, "height": 100]),
            "device": "tablet-ops-3",
            "deviceClient": .string(Fixture.deviceClient), "deviceSite": "Pump station 7",
            // The known inspection is of Pump station 7: an inspector of Reservoir Hill does not read it.
            "rulesUrl": .string(ruled.baseURL.absoluteString),
            "explain": .object(["subject": "m.lindqvist", "claims": .object(["site": "Reservoir Hill", "roles": ["inspector"]]),
                                "readRule": .string(Fixture.readRule.replacingOccurrences(of: "'", with: "\"")),
                                "compared": #""Pump station 7" == "Reservoir Hill""#]),
            // An inspector of Pump station 7 sees its 10 inspections, the 6 sites, 12 work orders and 2 notes.
            "viewer": .object(["subject": "a.okafor", "claims": .object(["site": "Pump station 7"]), "records": 30]),
            "artifacts": .string(artifacts.path), "chromium": .string(tools.chromium), "chromedriver": .string(tools.driver),
            "profile": .string(dir.appending("chromium-profile")),
        ])
        let fixturePath = dir.appending("fixture.json")
        try Data(fixture.encoded()).write(to: URL(fileURLWithPath: fixturePath))
        let script = Self.root.appendingPathComponent("Tests/admin-console/console_test.py").path
        return try await blocking { () throws -> (Subprocess.Termination?, String) in
            let run = try Subprocess(tools.python, ["-u", script, fixturePath], workingDirectory: dir.path, output: .capture, errorToOutput: true)
            // Each wait of the script has its own deadline; this one only ends a run that hangs.
            let ended = run.wait(timeout: 600)
            if ended == nil { run.stop(grace: 10) }
            run.waitForStreams()
            return (ended, run.outputText())
        }
    }

    /// A device that pulls 20 records of its view naming itself (`X-Outpost-Client-Id`), so
    /// its cursor is behind the head, and reports two syncs: one that failed, and one after
    /// which it holds pending, quarantined and held edits.
    static func seedDevice(_ server: ServerProcess, token: String) async throws {
        let headers = [("Authorization", "Bearer \(token)"), ("X-Outpost-Client-Id", Fixture.deviceClient)]
        let pulled = try await httpRequestAsync(port: server.port, "GET", "/v1/spaces/\(Fixture.space)/pull?limit=20", headers: headers)
        guard pulled.status == 200 else { throw ProcessFailure("the device's pull answered \(pulled.status): \(pulled.text)") }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var failed = TelemetryEntry(startedAt: now - 3_600_000, durationMs: 30_000)
        failed.lastError = "no_answer"
        failed.queueDepth = 2
        var newest = TelemetryEntry(startedAt: now - 60_000, durationMs: 420)
        newest.pulled = 20
        newest.queueDepth = 3
        newest.rejected = 1
        newest.appVersion = 4
        newest.quarantined = 1
        newest.upgradeRequired = 2
        newest.roundTripMs = 31
        newest.clockOffsetMs = -180
        let batch = TelemetryBatch(clientId: Fixture.deviceClient, sdkVersion: "outpost-swift/0.1.0", syncs: [failed, newest])
        let reported = try await httpRequestAsync(port: server.port, "POST", "/v1/spaces/\(Fixture.space)/telemetry",
                                                  headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")], body: batch.encoded())
        guard reported.status == 202 else { throw ProcessFailure("the device's report answered \(reported.status): \(reported.text)") }
    }

    /// Pushes the fixture's records, uploads its images and reports its devices, over HTTP.
    static func seed(_ server: ServerProcess, token: String) async throws -> (imageID: String, xssImageID: String) {
        let port = server.port
        func send(_ method: String, _ path: String, _ body: [UInt8], headers: [(String, String)] = [("Content-Type", "application/json")]) async throws -> TestResponse {
            let r = try await httpRequestAsync(port: port, method, path, headers: headers + [("Authorization", "Bearer \(token)")], body: body)
            guard (200..<300).contains(r.status) else { throw ProcessFailure("\(method) \(path) answered \(r.status): \(r.text)") }
            return r
        }
        func push(_ space: String, _ changes: [Change]) async throws {
            let r = try await send("POST", "/v1/spaces/\(space)/push", PushRequest(clientId: "tablet-ops-3", changes: changes).encoded())
            let results = try PushResponse.decode(r.body).results
            guard results.allSatisfy({ $0.status == .applied }) else { throw ProcessFailure("a fixture push was not applied: \(r.text)") }
        }
        let day: Int64 = 86_400_000
        let start: Int64 = 1_796_000_000_000
        var changes: [Change] = []
        for n in 1...Fixture.inspections {
            let id = String(format: "insp-2026-%04d", n)
            let site = Fixture.sites[n % Fixture.sites.count]
            var data: JSONObject = [
                "site": .string(site), "inspector": .string(Fixture.inspectors[n % Fixture.inspectors.count]),
                "status": .string(Fixture.statuses[n % Fixture.statuses.count]),
                "pressureBar": .number(JSONNumber(Double(38 + (n * 7) % 12) / 10)),
                "checkedAt": .number(JSONNumber(start + Int64(n) * day / 3)),
                "checklist": .array([.string("valves"), .string("seals"), .string("gauges")]),
            ]
            if id == Fixture.knownID {
                data["site"] = "Pump station 7"
                data["notes"] = .string(Fixture.knownValue)
                data["photos"] = .array([.string("site-7-valve.png")])
                data["followUp"] = .bool(false)
            }
            changes.append(Change(changeId: "seed-\(id)", collection: "inspections", id: id, op: .put, data: data, baseVersion: nil,
                                  clientTime: start + Int64(n) * day / 3))
        }
        for (i, site) in Fixture.sites.enumerated() {
            changes.append(put("seed-site-\(i)", "site-\(i + 1)", ["name": .string(site), "region": .string(i < 3 ? "north" : "south"), "active": .bool(i != 5)], collection: "sites"))
        }
        for n in 1...12 {
            changes.append(put("seed-wo-\(n)", String(format: "wo-%03d", n), ["title": .string("Work order \(n)"), "priority": .number(JSONNumber(n % 3 + 1)), "open": .bool(n % 4 != 0)], collection: "work-orders"))
        }
        // Data and an id meant to run as markup, which the console must show as text.
        changes.append(put("seed-xss", Fixture.imagePayload, ["title": .string(Fixture.scriptPayload), "body": .string(Fixture.imagePayload)], collection: "notes"))
        changes.append(put("seed-note", "note-1", ["title": "Shift handover", "body": "Reservoir Hill gate code changed."], collection: "notes"))
        try await push(Fixture.space, changes)
        try await push(Fixture.otherSpace, (1...5).map { put("seed-d\($0)", "bay-\($0)", ["bay": .number(JSONNumber($0)), "stock": .number(JSONNumber($0 * 14))], collection: "bays") })

        func upload(_ file: [UInt8], filename: String) async throws -> String {
            let request = UploadRequest(size: Int64(file.count), sha256: SHA256.hex(file), contentType: "image/png", filename: filename)
            let started = try UploadState.decode(try await send("POST", "/v1/spaces/\(Fixture.space)/media/uploads", request.encoded()).body)
            for (index, piece) in chunked(file, started.chunkSize).enumerated() {
                _ = try await send("PUT", "/v1/spaces/\(Fixture.space)/media/uploads/\(started.uploadId)/chunks/\(index)", piece,
                                   headers: [("Content-Type", "application/octet-stream"), ("Content-Digest", contentDigest(piece))])
            }
            let done = try await send("POST", "/v1/spaces/\(Fixture.space)/media/uploads/\(started.uploadId)/finalize", [])
            return try UploadComplete.decode(done.body).media.mediaId
        }
        let imageID = try await upload(TestPNG.make(width: 160, height: 100, seed: 7), filename: "site-7-valve.png")
        let xssImageID = try await upload(TestPNG.make(width: 64, height: 64, seed: 3), filename: Fixture.imagePayload + ".png")

        for (client, pending, error) in [("tablet-ops-3", 0, nil), ("phone-7f3a", 2, "no_answer"), ("laptop-hq", 0, nil)] as [(String, Int64, String?)] {
            var entry = TelemetryEntry(startedAt: Int64(Date().timeIntervalSince1970 * 1000) - 60_000, durationMs: 180)
            entry.pushed = 3
            entry.pulled = 12
            entry.queueDepth = pending
            entry.lastError = error
            entry.roundTripMs = 24
            entry.clockOffsetMs = client == "phone-7f3a" ? -420 : 12
            // Conflicts per space: field-ops's devices report 5, of which their resolvers decided 4.
            entry.conflicts = client == "phone-7f3a" ? 4 : client == "tablet-ops-3" ? 1 : 0
            entry.resolved = client == "phone-7f3a" ? 3 : client == "tablet-ops-3" ? 1 : 0
            _ = try await send("POST", "/v1/spaces/\(Fixture.space)/telemetry", TelemetryBatch(clientId: client, sdkVersion: "outpost-swift/0.1.0", syncs: [entry]).encoded())
        }
        // An error answer whose message holds markup: the overview's list must show it as text.
        let refused = try await httpRequestAsync(port: port, "GET", "/v1/spaces/\(Fixture.imagePayload.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)/pull",
                                                 headers: [("Authorization", "Bearer \(token)")])
        guard refused.status == 400 else { throw ProcessFailure("a pull of a markup space name answered \(refused.status)") }
        return (imageID, xssImageID)
    }
}

/// Minimal PNG files for the media tests: 8-bit RGB, one IDAT of stored (uncompressed)
/// deflate blocks, so no compressor is needed (RFC 1950, RFC 1951, PNG section 11).
enum TestPNG {
    /// A `width` × `height` image of gradients and a few bands, different for each seed.
    static func make(width: Int, height: Int, seed: Int) -> [UInt8] {
        var raw: [UInt8] = []
        raw.reserveCapacity(height * (1 + width * 3))
        for y in 0..<height {
            raw.append(0)  // filter: none
            for x in 0..<width {
                let band = ((x / 16) + (y / 16) + seed) % 5 == 0
                raw += [UInt8((x * 255) / max(1, width - 1)), UInt8((y * 255) / max(1, height - 1)),
                        band ? 240 : UInt8((seed * 40 + 90) % 256)]
            }
        }
        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        png += chunk("IHDR", be32(width) + be32(height) + [8, 2, 0, 0, 0])
        png += chunk("IDAT", zlibStored(raw))
        png += chunk("IEND", [])
        return png
    }

    static func be32(_ v: Int) -> [UInt8] { [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }

    static func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
        let body = Array(type.utf8) + data
        return be32(data.count) + body + be32(Int(crc32(body)))
    }

    static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]
        var offset = 0
        repeat {
            let n = min(65_535, data.count - offset)
            let last: UInt8 = offset + n == data.count ? 1 : 0
            out += [last, UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8((~n >> 8) & 0xFF)]
            out += data[offset..<offset + n]
            offset += n
        } while offset < data.count
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in data {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        return out + be32(Int(b << 16 | a))
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
}
