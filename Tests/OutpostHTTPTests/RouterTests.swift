import Synchronization
import Testing
@testable import OutpostHTTP

@Suite("Router, errors and small parts")
struct RouterTests {
    static let ok: HTTPHandler = { _ in HTTPResponse() }

    func router() -> Router {
        var r = Router()
        r.add(.GET, "/healthz", handler: Self.ok)
        r.add(.POST, "/v1/spaces/{space}/push", bodyLimit: 100, handler: Self.ok)
        r.add(.PUT, "/v1/spaces/{space}/media/uploads/{uploadId}/chunks/{index}", handler: Self.ok)
        r.add(.GET, "/v1/spaces/{space}/media/uploads/{uploadId}", handler: Self.ok)
        r.add(.DELETE, "/v1/spaces/{space}/media/uploads/{uploadId}", handler: Self.ok)
        r.add(.POST, "/v1/spaces/{space}/media/uploads", handler: Self.ok)
        r.add(.GET, "/v1/spaces/{space}/media/{mediaId}", handler: Self.ok)
        r.add(.GET, "/", handler: Self.ok)
        return r
    }

    func found(_ m: RouteMatch) -> (String, [String: String])? {
        if case .found(let route, let p) = m { return (route.pattern, p) }
        return nil
    }

    func failure(_ m: RouteMatch) -> HTTPError? {
        if case .failed(let e) = m { return e }
        return nil
    }

    @Test func parametersAreDecoded() {
        let m = found(router().match(method: .PUT, path: "/v1/spaces/my%20space/media/uploads/u-1/chunks/3"))
        #expect(m?.0 == "/v1/spaces/{space}/media/uploads/{uploadId}/chunks/{index}")
        #expect(m?.1 == ["space": "my space", "uploadId": "u-1", "index": "3"])
    }

    @Test func literalBeatsParameter() {
        #expect(found(router().match(method: .POST, path: "/v1/spaces/a/media/uploads"))?.0 == "/v1/spaces/{space}/media/uploads")
        #expect(found(router().match(method: .GET, path: "/v1/spaces/a/media/abc"))?.0 == "/v1/spaces/{space}/media/{mediaId}")
        // "uploads" is the uploads resource, never a media id: its lack of GET is a 405 that
        // names its own methods, not a fall-through to /media/{mediaId}'s GET.
        let uploads = failure(router().match(method: .GET, path: "/v1/spaces/a/media/uploads"))
        #expect(uploads?.status == .methodNotAllowed)
        #expect(uploads?.headers["Allow"] == "POST")
        #expect(failure(router().match(method: .DELETE, path: "/v1/spaces/a/media/uploads"))?.headers["Allow"] == "POST")
        // A parameter is still tried where no pattern through the literal fits the path.
        var deep = Router()
        deep.add(.GET, "/a/b/c", handler: Self.ok)
        deep.add(.POST, "/a/{x}/d", handler: Self.ok)
        #expect(found(deep.match(method: .POST, path: "/a/b/d"))?.1 == ["x": "b"])
        #expect(failure(deep.match(method: .GET, path: "/a/b/d"))?.headers["Allow"] == "POST")
        #expect(found(router().match(method: .GET, path: "/"))?.0 == "/")
    }

    /// A pattern may end with `/`: `/admin/` is its own resource, beside `/admin` and the
    /// parameter under it (which never matches an empty segment).
    @Test func aPatternMayEndWithASlash() {
        var r = Router()
        r.add(.GET, "/admin", handler: Self.ok)
        r.add(.GET, "/admin/", handler: Self.ok)
        r.add(.GET, "/admin/{asset}", handler: Self.ok)
        #expect(found(r.match(method: .GET, path: "/admin"))?.0 == "/admin")
        #expect(found(r.match(method: .GET, path: "/admin/"))?.0 == "/admin/")
        #expect(found(r.match(method: .GET, path: "/admin/console.js"))?.1 == ["asset": "console.js"])
        #expect(failure(r.match(method: .GET, path: "/admin//"))?.status == .notFound)
    }

    @Test func unknownPathIs404() {
        #expect(failure(router().match(method: .GET, path: "/nope"))?.status == .notFound)
        #expect(failure(router().match(method: .GET, path: "/healthz/"))?.status == .notFound)
        #expect(failure(router().match(method: .GET, path: "/v1/spaces//push"))?.status == .notFound)
    }

    @Test func wrongMethodIs405WithAllow() {
        let e = failure(router().match(method: .POST, path: "/healthz"))
        #expect(e?.status == .methodNotAllowed)
        #expect(e?.code == "method_not_allowed")
        #expect(e?.headers["Allow"] == "GET, HEAD")
        let e2 = failure(router().match(method: .PATCH, path: "/v1/spaces/s/media/uploads/u"))
        #expect(e2?.headers["Allow"] == "DELETE, GET, HEAD")
    }

    @Test func headUsesGet() {
        #expect(found(router().match(method: .HEAD, path: "/healthz"))?.0 == "/healthz")
    }

    @Test(arguments: ["/v1/spaces/a%2Fb/push", "/v1/spaces/../push", "/v1/spaces/%2E%2E/push", "/v1/spaces/./push", "/v1/spaces/a%zz/push", "/v1/spaces/a%2/push", "/v1/spaces/%00/push", "/v1/spaces/%FF/push", "healthz"])
    func ambiguousSegmentsAre400(_ path: String) {
        #expect(failure(router().match(method: .POST, path: path))?.status == .badRequest)
    }

    @Test func queryParsing() {
        let head = HTTPRequestHead(method: .GET, target: "/p?since=a.1&limit=10&q=two+words&e=%E2%9C%93&flag&x=1&x=2&bad=%zz")
        #expect(head.path == "/p")
        #expect(head.query("since") == "a.1")
        #expect(head.query("limit") == "10")
        #expect(head.query("q") == "two words")
        #expect(head.query("e") == "✓")
        #expect(head.query("flag") == "")
        #expect(head.queryValues("x") == ["1", "2"])
        #expect(head.query("bad") == "%zz")
        #expect(head.query("missing") == nil)
    }

    @Test func errorEnvelope() {
        let e = HTTPError(.conflict, code: "upload_incomplete", message: "say \"hi\"\n",
                          details: ["missing": .ints([1, 2]), "names": .strings(["a", "b"]), "limit": 5, "field": "x"])
        #expect(String(decoding: e.jsonEnvelope(), as: UTF8.self)
            == #"{"error":{"code":"upload_incomplete","message":"say \"hi\"\n","details":{"field":"x","limit":5,"missing":[1,2],"names":["a","b"]}}}"#)
        let plain = HTTPError.notFound()
        #expect(String(decoding: plain.jsonEnvelope(), as: UTF8.self) == #"{"error":{"code":"not_found","message":"no such resource"}}"#)
        let response = HTTPError.unavailable(retryAfterSeconds: 7).response
        #expect(response.status.code == 503)
        #expect(response.headers["Retry-After"] == "7")
        #expect(response.headers["Content-Type"] == "application/json")
        #expect(HTTPError.unauthorized().response.headers["WWW-Authenticate"] == "Bearer")
        // A 503 built by hand still gets Retry-After.
        #expect(HTTPError(.serviceUnavailable, code: "unavailable", message: "x").response.headers["Retry-After"] == "1")
    }

    @Test func acceptEncoding() {
        #expect(acceptsGzip(["Accept-Encoding": "gzip"]))
        #expect(acceptsGzip(["Accept-Encoding": "br;q=1.0, gzip;q=0.8, *;q=0.1"]))
        #expect(!acceptsGzip(["Accept-Encoding": "gzip;q=0"]))
        #expect(!acceptsGzip(["Accept-Encoding": "gzip;q=0.000, *"]))
        #expect(acceptsGzip(["Accept-Encoding": "*"]))
        #expect(!acceptsGzip(["Accept-Encoding": "*;q=0"]))
        #expect(!acceptsGzip(["Accept-Encoding": "identity"]))
        #expect(!acceptsGzip([:]))
    }

    @Test func requestIDs() {
        #expect(isValidRequestID("abc-123_x.y:z"))
        #expect(isValidRequestID(String(repeating: "a", count: 128)))
        #expect(!isValidRequestID(String(repeating: "a", count: 129)))
        #expect(!isValidRequestID(""))
        #expect(!isValidRequestID("a b"))
        #expect(!isValidRequestID("a/b"))
        var gen = RequestIDGenerator()
        let a = gen.next(), b = gen.next()
        #expect(a != b && isValidRequestID(a) && isValidRequestID(b))
    }

    @Test func dateIsIMFFixdate() {
        var cache = DateCache()
        let line = String(decoding: cache.current(), as: UTF8.self)
        // "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        let pattern = #/^Date: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT\r\n$/#
        #expect(line.wholeMatch(of: pattern) != nil, "\(line.debugDescription)")
    }

    /// Regression: the hook used to sit in a Mutex as a bare closure, and every read
    /// wrapped it in one more reabstraction thunk until the stack overflowed (after some
    /// 15,000 requests).
    @Test func completionHookReadsDoNotAccumulate() {
        let server = HTTPServer(configuration: HTTPServerConfiguration(), router: Router())
        let count = Mutex(0)
        server.onRequestComplete = { _ in count.withLock { $0 += 1 } }
        let log = HTTPRequestLog(method: .GET, route: nil, status: 200, duration: .zero, requestID: "r", bytesIn: 0, bytesOut: 0, remoteAddress: "")
        for _ in 0..<100_000 {
            server.shared.completionHook()?.call(log)
            server.onRequestComplete?(log)
        }
        #expect(count.withLock { $0 } == 200_000)
    }

    @Test func headersAreCaseInsensitiveAndOrdered() {
        var h: HTTPHeaders = ["Content-Type": "a", "X-Multi": "1"]
        h.add(name: "x-multi", value: "2")
        #expect(h["content-TYPE"] == "a")
        #expect(h.values(name: "X-MULTI") == ["1", "2"])
        h.replaceOrAdd(name: "X-Multi", value: "3")
        #expect(h.values(name: "x-multi") == ["3"])
        h["Content-Type"] = nil
        #expect(!h.contains(name: "content-type"))
        #expect(Array(h.map(\.name)) == ["X-Multi"])
    }
}
