import Foundation
import OutpostCore
import OutpostCrypto
import OutpostTestSupport
import Testing
@testable import OutpostServer

/// What a browser gets from a media download (docs/security.md, "Media served to
/// browsers"), and the file names the server refuses, over real sockets and a real SQLite
/// store (the answer's fields and the name's check do not depend on the store).
@Suite struct MediaBrowserSafetyTests {
    /// Every value of the field `name` in the answer, in order.
    static func values(_ response: TestResponse, _ name: String) -> [String] {
        response.headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }

    /// Every media answer (200, HEAD, 206, 304, 416) is sandboxed and never sniffed, and
    /// only raster images, audio and video are inline: a page, an SVG, a PDF, XHTML and
    /// text are attachments. The admin console's route answers the same.
    @Test func mediaIsSandboxedAndOnlyInertTypesAreShownInline() async throws {
        try await withMediaServer { server in
            let client = server.client()
            let cases: [(type: String, disposition: String)] = [
                ("text/html", "attachment"), ("image/svg+xml", "attachment"), ("application/pdf", "attachment"),
                ("application/xhtml+xml", "attachment"), ("text/xml", "attachment"), ("text/plain; charset=utf-8", "attachment"),
                ("application/octet-stream", "attachment"),
                ("image/png", "inline"), ("IMAGE/JPEG; q=1", "inline"), ("image/webp", "inline"), ("video/mp4", "inline"),
                ("audio/mpeg", "inline"),
            ]
            for (index, item) in cases.enumerated() {
                let file = Array("<html><script>alert(\(index))</script></html>".utf8)
                let media = try await client.upload("sp", file, contentType: item.type).complete.media
                let etag = "\"\(media.mediaId)\""
                let requests: [(String, [(String, String)], Int)] = [
                    ("GET", [], 200), ("HEAD", [], 200), ("GET", [("Range", "bytes=0-3")], 206),
                    ("GET", [("If-None-Match", etag)], 304), ("GET", [("Range", "bytes=9999-")], 416),
                ]
                for (method, headers, status) in requests {
                    let r = try await client.download("sp", media.mediaId, method: method, headers: headers)
                    let what = "\(item.type) \(method) \(headers)"
                    #expect(r.status == status, "\(what)")
                    #expect(r.header("Content-Security-Policy") == "default-src 'none'; sandbox", "\(what)")
                    #expect(r.header("Content-Disposition") == item.disposition, "\(what)")
                    #expect(Self.values(r, "X-Content-Type-Options") == ["nosniff"], "\(what)")
                }
            }
        }
    }

    /// The same through the whole application: the admin console's media route, and a
    /// JSON answer and an error of the sync routes, carry the fields too.
    @Test func theConsoleRouteAndJSONAnswersCarryTheFields() async throws {
        try await withServer { server in
            let token = server.token(spaces: ["sp"])
            let media = MediaClient(port: server.port, token: token)
            let file = Array("<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>".utf8)
            let uploaded = try await media.upload("sp", file, contentType: "image/svg+xml").complete.media
            let admin = server.token(sub: "ops", spaces: [], admin: true)
            let viaConsole = try await server.request("GET", "/v1/admin/spaces/sp/media/\(uploaded.mediaId)", token: admin)
            #expect(viaConsole.status == 200)
            #expect(viaConsole.header("Content-Disposition") == "attachment")
            #expect(viaConsole.header("Content-Security-Policy") == "default-src 'none'; sandbox")
            #expect(Self.values(viaConsole, "X-Content-Type-Options") == ["nosniff"])

            let pull = try await server.pull("sp")
            let refused = try await server.pull("sp", token: "not-a-token")
            #expect(pull.status == 200 && refused.status == 401)
            for r in [pull, refused] {
                #expect(Self.values(r, "X-Content-Type-Options") == ["nosniff"], "\(r.status)")
            }
        }
    }

    /// A name with NUL, another control character, a line separator or a bidirectional
    /// override is refused in the envelope (`422 invalid_request`, `details.field`), by the
    /// JSON init and by tus's `Upload-Metadata` (`400 invalid_header`); ordinary names,
    /// accents and emoji included, are kept.
    @Test func fileNamesWithControlCharactersAreRefused() async throws {
        try await withMediaServer { server in
            let client = server.client()
            let tus = TusRaw(port: server.port, token: server.token(["sp"]))
            let bad = ["a\u{0}.jpg", "line\nbreak.png", "tab\t.txt", "bell\u{7}", "del\u{7F}", "c1\u{85}.txt", "sep\u{2028}.txt",
                       "photo\u{202E}gpj.exe", "iso\u{2066}late"]
            for (index, name) in bad.enumerated() {
                let file = mediaBytes(100, seed: UInt64(100 + index))
                let r = try await client.begin("sp", size: file.count, sha256: SHA256.hex(file), filename: name)
                #expect(r.status == 422, "\(name.debugDescription): \(r.text)")
                #expect(mediaErrorCode(r) == "invalid_request")
                #expect(mediaErrorDetails(r)?["field"]?.stringValue == "filename")
                let viaTus = try await tus.create("sp", length: 5, metadata: "filename \(Base64.encode(Array(name.utf8)))")
                #expect(viaTus.status == 400 && mediaErrorCode(viaTus) == "invalid_header", "\(name.debugDescription): \(viaTus.text)")
                #expect(mediaErrorDetails(viaTus)?["header"] == "Upload-Metadata")
            }
            for (index, name) in ["photo.jpg", "ünï côde.txt", "report (final) 2.pdf", "🙂.png"].enumerated() {
                let file = mediaBytes(100, seed: UInt64(200 + index))
                let r = try await client.begin("sp", size: file.count, sha256: SHA256.hex(file), filename: name)
                #expect(r.status == 201, "\(name): \(r.text)")
                let viaTus = try await tus.create("sp", length: 5, metadata: "filename \(Base64.encode(Array(name.utf8)))")
                #expect(viaTus.status == 201, "\(name): \(viaTus.text)")
            }
        }
    }

    /// The inline list, by `type/subtype` whatever the case and parameters.
    @Test func inlineTypesAreMatchedByTheirEssence() {
        #expect(ServedMedia.isInline("image/png"))
        #expect(ServedMedia.isInline(" Image/PNG ; name=x"))
        #expect(!ServedMedia.isInline("image/svg+xml"))
        #expect(!ServedMedia.isInline("image/png+xml"))
        #expect(!ServedMedia.isInline("text/html; charset=utf-8"))
        #expect(!ServedMedia.isInline("application/pdf"))
    }
}
