// Value types shared by requests and responses: method, version, status, headers.

/// An HTTP request method (RFC 9110 section 9). Methods are case-sensitive tokens; any
/// token the parser accepts can be represented, the constants name the common ones.
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The method token as sent, e.g. `"GET"`.
    public let rawValue: String
    /// Wraps a method token. The engine only creates methods from valid tokens.
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// `GET`
    public static let GET = HTTPMethod(rawValue: "GET")
    /// `HEAD`: answered like `GET` without a body (RFC 9110 section 9.3.2).
    public static let HEAD = HTTPMethod(rawValue: "HEAD")
    /// `POST`
    public static let POST = HTTPMethod(rawValue: "POST")
    /// `PUT`
    public static let PUT = HTTPMethod(rawValue: "PUT")
    /// `DELETE`
    public static let DELETE = HTTPMethod(rawValue: "DELETE")
    /// `PATCH`
    public static let PATCH = HTTPMethod(rawValue: "PATCH")
    /// `OPTIONS`
    public static let OPTIONS = HTTPMethod(rawValue: "OPTIONS")
}

/// The HTTP version of a request: 1.0 or 1.1 (RFC 9112 section 2.3).
public struct HTTPVersion: Hashable, Sendable, CustomStringConvertible {
    /// Major version digit.
    public let major: Int
    /// Minor version digit.
    public let minor: Int
    /// Creates a version.
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }
    /// HTTP/1.0: connections close after each response unless the client asks for keep-alive.
    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    /// HTTP/1.1: persistent connections by default.
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    /// `HTTP/1.1`
    public var description: String { "HTTP/\(major).\(minor)" }
}

/// A response status: a three-digit code and its reason phrase.
public struct HTTPStatus: Hashable, Sendable, CustomStringConvertible {
    /// The status code, 100...999.
    public let code: Int
    /// The reason phrase sent on the status line (RFC 9112 section 4; clients ignore it).
    public let reason: String

    /// Creates a status; pass a reason for codes without a standard one.
    public init(code: Int, reason: String? = nil) {
        precondition((100...999).contains(code), "HTTP status code out of range: \(code)")
        self.code = code
        self.reason = reason ?? HTTPStatus.standardReason(code)
    }

    public var description: String { "\(code) \(reason)" }

    /// Two statuses are equal when their codes are (the reason phrase is informative only).
    public static func == (lhs: HTTPStatus, rhs: HTTPStatus) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// True for 1xx, 204 and 304, which never carry content (RFC 9110 sections 6.4.1, 15.3.5, 15.4.5).
    public var forbidsBody: Bool { code < 200 || code == 204 || code == 304 }

    /// `100 Continue`
    public static let `continue` = HTTPStatus(code: 100)
    /// `200 OK`
    public static let ok = HTTPStatus(code: 200)
    /// `201 Created`
    public static let created = HTTPStatus(code: 201)
    /// `202 Accepted`
    public static let accepted = HTTPStatus(code: 202)
    /// `204 No Content`
    public static let noContent = HTTPStatus(code: 204)
    /// `206 Partial Content`
    public static let partialContent = HTTPStatus(code: 206)
    /// `301 Moved Permanently`
    public static let movedPermanently = HTTPStatus(code: 301)
    /// `302 Found`
    public static let found = HTTPStatus(code: 302)
    /// `304 Not Modified`
    public static let notModified = HTTPStatus(code: 304)
    /// `400 Bad Request`
    public static let badRequest = HTTPStatus(code: 400)
    /// `401 Unauthorized`
    public static let unauthorized = HTTPStatus(code: 401)
    /// `403 Forbidden`
    public static let forbidden = HTTPStatus(code: 403)
    /// `404 Not Found`
    public static let notFound = HTTPStatus(code: 404)
    /// `405 Method Not Allowed`
    public static let methodNotAllowed = HTTPStatus(code: 405)
    /// `408 Request Timeout`
    public static let requestTimeout = HTTPStatus(code: 408)
    /// `409 Conflict`
    public static let conflict = HTTPStatus(code: 409)
    /// `410 Gone`
    public static let gone = HTTPStatus(code: 410)
    /// `411 Length Required`
    public static let lengthRequired = HTTPStatus(code: 411)
    /// `412 Precondition Failed`
    public static let preconditionFailed = HTTPStatus(code: 412)
    /// `413 Content Too Large`
    public static let payloadTooLarge = HTTPStatus(code: 413)
    /// `414 URI Too Long`
    public static let uriTooLong = HTTPStatus(code: 414)
    /// `415 Unsupported Media Type`
    public static let unsupportedMediaType = HTTPStatus(code: 415)
    /// `416 Range Not Satisfiable`
    public static let rangeNotSatisfiable = HTTPStatus(code: 416)
    /// `417 Expectation Failed`
    public static let expectationFailed = HTTPStatus(code: 417)
    /// `422 Unprocessable Content`
    public static let unprocessableContent = HTTPStatus(code: 422)
    /// `429 Too Many Requests`
    public static let tooManyRequests = HTTPStatus(code: 429)
    /// `431 Request Header Fields Too Large`
    public static let requestHeaderFieldsTooLarge = HTTPStatus(code: 431)
    /// `500 Internal Server Error`
    public static let internalServerError = HTTPStatus(code: 500)
    /// `501 Not Implemented`
    public static let notImplemented = HTTPStatus(code: 501)
    /// `503 Service Unavailable`
    public static let serviceUnavailable = HTTPStatus(code: 503)
    /// `505 HTTP Version Not Supported`
    public static let httpVersionNotSupported = HTTPStatus(code: 505)

    static func standardReason(_ code: Int) -> String {
        switch code {
        case 100: "Continue"
        case 101: "Switching Protocols"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 303: "See Other"
        case 304: "Not Modified"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 411: "Length Required"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 416: "Range Not Satisfiable"
        case 417: "Expectation Failed"
        case 422: "Unprocessable Content"
        case 428: "Precondition Required"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        default: "Status \(code)"
        }
    }
}

/// An ordered list of header fields with case-insensitive lookup (RFC 9110 section 5.1:
/// field names are case-insensitive; order matters only among fields of the same name).
///
/// ```swift
/// var headers: HTTPHeaders = ["Content-Type": "application/json"]
/// headers.add(name: "Cache-Control", value: "no-store")
/// headers["content-type"]   // "application/json"
/// ```
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral, Equatable, CustomStringConvertible {
    /// One header field as received or as to be sent.
    public typealias Field = (name: String, value: String)

    private var storage: [(name: String, value: String)]

    /// An empty header list.
    public init() { storage = [] }

    /// A header list from fields in order.
    public init(_ fields: [(String, String)]) {
        storage = fields.map { (name: $0.0, value: $0.1) }
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        storage = elements.map { (name: $0.0, value: $0.1) }
    }

    /// The number of fields (a name sent twice counts twice).
    public var count: Int { storage.count }
    /// True when there are no fields.
    public var isEmpty: Bool { storage.isEmpty }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        storage.makeIterator()
    }

    /// Appends a field, keeping any others of the same name.
    public mutating func add(name: String, value: String) {
        storage.append((name: name, value: value))
    }

    /// Removes every field named `name`, then appends one with `value`.
    public mutating func replaceOrAdd(name: String, value: String) {
        remove(name: name)
        storage.append((name: name, value: value))
    }

    /// Removes every field named `name` (any case).
    public mutating func remove(name: String) {
        storage.removeAll { HTTPHeaders.equalsIgnoringCase($0.name, name) }
    }

    /// The value of the first field named `name`, or nil. Setting replaces every field of
    /// that name; setting nil removes them.
    public subscript(name: String) -> String? {
        get { first(name: name) }
        set {
            if let newValue { replaceOrAdd(name: name, value: newValue) } else { remove(name: name) }
        }
    }

    /// The value of the first field named `name`.
    public func first(name: String) -> String? {
        for field in storage where HTTPHeaders.equalsIgnoringCase(field.name, name) { return field.value }
        return nil
    }

    /// The values of every field named `name`, in order.
    public func values(name: String) -> [String] {
        storage.filter { HTTPHeaders.equalsIgnoringCase($0.name, name) }.map(\.value)
    }

    /// True when a field named `name` is present.
    public func contains(name: String) -> Bool { first(name: name) != nil }

    /// The comma-separated list elements of every field named `name` (RFC 9110 section
    /// 5.6.1), trimmed, empty elements dropped. Used for `Connection`, `Transfer-Encoding`.
    public func tokens(name: String) -> [Substring] {
        var out: [Substring] = []
        for value in values(name: name) {
            for part in value.split(separator: ",") {
                let trimmed = part.trimmingOWS()
                if !trimmed.isEmpty { out.append(trimmed) }
            }
        }
        return out
    }

    /// True when the list header `name` contains `token` (case-insensitive).
    public func containsToken(_ token: String, in name: String) -> Bool {
        tokens(name: name).contains { HTTPHeaders.equalsIgnoringCase($0, token) }
    }

    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.storage.count == rhs.storage.count
            && zip(lhs.storage, rhs.storage).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    public var description: String {
        storage.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }

    /// ASCII case-insensitive comparison without allocating (header names are ASCII tokens).
    static func equalsIgnoringCase<A: StringProtocol, B: StringProtocol>(_ a: A, _ b: B) -> Bool {
        let x = a.utf8, y = b.utf8
        guard x.count == y.count else { return false }
        for (c1, c2) in zip(x, y) where c1 != c2 {
            if asciiLower(c1) != asciiLower(c2) { return false }
        }
        return true
    }
}

@inline(__always) func asciiLower(_ c: UInt8) -> UInt8 {
    (c >= 0x41 && c <= 0x5A) ? c | 0x20 : c
}

extension StringProtocol {
    /// Drops leading and trailing optional whitespace (SP / HTAB, RFC 9110 section 5.6.3).
    func trimmingOWS() -> Substring {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return s
    }
}
