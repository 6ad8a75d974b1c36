// The one error type handlers throw, and the one place errors become responses.

import OutpostCore

/// A value in an error's `details` object.
public enum HTTPErrorDetail: Sendable, Hashable {
    /// A JSON integer, e.g. `details.limit`.
    case int(Int)
    /// A JSON string, e.g. `details.field`.
    case string(String)
    /// `true` or `false`.
    case bool(Bool)
    /// An array of integers, e.g. `details.missing` chunk indexes.
    case ints([Int])
    /// An array of strings.
    case strings([String])
}

extension HTTPErrorDetail: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral, ExpressibleByBooleanLiteral {
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

/// An error answered to the client with a status and the protocol's JSON error envelope
/// (docs/protocol.md section 2):
///
/// ```json
/// {"error": {"code": "payload_too_large", "message": "...", "details": {"limit": 8388608}}}
/// ```
///
/// Throw it from a handler or a pre-body check; the engine renders it in exactly one place
/// (`HTTPError.response`). Any other error thrown by a handler becomes `500 internal_error`.
///
/// ```swift
/// throw HTTPError(.conflict, code: "upload_incomplete", message: "chunks missing",
///                 details: ["missing": .ints([3, 4])])
/// throw HTTPError.unauthorized("token expired")   // adds WWW-Authenticate: Bearer
/// ```
public struct HTTPError: Error, Sendable, CustomStringConvertible {
    /// The response status.
    public var status: HTTPStatus
    /// A snake_case code a program can switch over.
    public var code: String
    /// A sentence for people.
    public var message: String
    /// Extra facts (`limit`, `field`, `missing`...); omitted from the JSON when empty.
    public var details: [String: HTTPErrorDetail]
    /// Headers sent with the error, such as `Allow`, `WWW-Authenticate`, `Retry-After`.
    public var headers: HTTPHeaders
    /// The message as the server keeps it (the admin's list of recent errors), when the
    /// message holds client text outside double quotes; nil keeps `message`. Either way
    /// every double-quoted part (where messages show what the client sent) is cut to `…`.
    public var kept: String?

    /// Creates an error.
    public init(
        _ status: HTTPStatus, code: String, message: String,
        details: [String: HTTPErrorDetail] = [:], headers: HTTPHeaders = HTTPHeaders()
    ) {
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    // MARK: The protocol's common errors (docs/protocol.md section 2)

    /// `400 bad_request`: malformed request line, header or framing.
    public static func badRequest(_ message: String = "malformed request") -> HTTPError {
        HTTPError(.badRequest, code: "bad_request", message: message)
    }
    /// `401 unauthorized` with `WWW-Authenticate: Bearer`.
    public static func unauthorized(_ message: String = "missing or invalid token") -> HTTPError {
        HTTPError(.unauthorized, code: "unauthorized", message: message, headers: ["WWW-Authenticate": "Bearer"])
    }
    /// `403 forbidden`.
    public static func forbidden(_ message: String = "access denied") -> HTTPError {
        HTTPError(.forbidden, code: "forbidden", message: message)
    }
    /// `404 not_found`.
    public static func notFound(_ message: String = "no such resource") -> HTTPError {
        HTTPError(.notFound, code: "not_found", message: message)
    }
    /// `405 method_not_allowed` with `Allow` listing `allowed`.
    public static func methodNotAllowed(allowed: [HTTPMethod]) -> HTTPError {
        HTTPError(
            .methodNotAllowed, code: "method_not_allowed", message: "method not allowed on this path",
            headers: ["Allow": allowed.map(\.rawValue).joined(separator: ", ")])
    }
    /// `408 request_timeout`: headers or body too slow.
    public static func requestTimeout(_ message: String = "request not received in time") -> HTTPError {
        HTTPError(.requestTimeout, code: "request_timeout", message: message)
    }
    /// `413 payload_too_large` with `details.limit` in bytes.
    public static func payloadTooLarge(limit: Int) -> HTTPError {
        HTTPError(
            .payloadTooLarge, code: "payload_too_large", message: "request body exceeds \(limit) bytes",
            details: ["limit": .int(limit)])
    }
    /// `414 uri_too_long`.
    public static func uriTooLong(limit: Int) -> HTTPError {
        HTTPError(.uriTooLong, code: "uri_too_long", message: "request line exceeds \(limit) bytes", details: ["limit": .int(limit)])
    }
    /// `415 unsupported_media_type`.
    public static func unsupportedMediaType(_ message: String) -> HTTPError {
        HTTPError(.unsupportedMediaType, code: "unsupported_media_type", message: message)
    }
    /// `431 header_fields_too_large`.
    public static func headersTooLarge(limit: Int) -> HTTPError {
        HTTPError(
            .requestHeaderFieldsTooLarge, code: "header_fields_too_large",
            message: "request headers exceed \(limit) bytes", details: ["limit": .int(limit)])
    }
    /// `500 internal_error`: a bug; the message never reveals the underlying error.
    public static func internalError() -> HTTPError {
        HTTPError(.internalServerError, code: "internal_error", message: "internal server error")
    }
    /// `501 not_implemented`.
    public static func notImplemented(_ message: String) -> HTTPError {
        HTTPError(.notImplemented, code: "not_implemented", message: message)
    }
    /// `503 unavailable` with `Retry-After` (seconds): overload or shutdown.
    public static func unavailable(retryAfterSeconds: Int = 1, _ message: String = "server unavailable, retry later") -> HTTPError {
        HTTPError(.serviceUnavailable, code: "unavailable", message: message, headers: ["Retry-After": String(retryAfterSeconds)])
    }
    /// `505 http_version_not_supported`.
    public static func versionNotSupported() -> HTTPError {
        HTTPError(.httpVersionNotSupported, code: "http_version_not_supported", message: "only HTTP/1.0 and HTTP/1.1 are supported")
    }

    // MARK: Rendering: the only place an error becomes bytes

    /// The error as a response: the JSON envelope, `Content-Type: application/json`, and
    /// the error's extra headers. Every error the engine sends goes through here.
    public var response: HTTPResponse {
        var headers = self.headers
        headers.replaceOrAdd(name: "Content-Type", value: "application/json")
        if status.code == 503 && !headers.contains(name: "Retry-After") {
            // docs/protocol.md section 2: a 503 always says when to come back.
            headers.add(name: "Retry-After", value: "1")
        }
        var response = HTTPResponse(status: status, headers: headers, body: .bytes(jsonEnvelope()))
        response.failure = HTTPFailure(code: code, message: Self.withoutQuotedText(kept ?? message))
        return response
    }

    /// `text` with what is between each pair of double quotes replaced by `…` (an unclosed
    /// quote runs to the end): a message's client text (a JSON member name, a token's
    /// `alg`) as the server keeps it, without the client's bytes.
    public static func withoutQuotedText(_ text: String) -> String {
        var out = ""
        var quoted = false
        for c in text {
            if c == "\"" {
                if quoted { out.append("…") }
                quoted.toggle()
                out.append(c)
            } else if !quoted {
                out.append(c)
            }
        }
        if quoted { out.append("…") }
        return out
    }

    /// `{"error":{"code":...,"message":...,"details":{...}}}`; detail keys sorted so the
    /// output is stable.
    public func jsonEnvelope() -> [UInt8] {
        var out: [UInt8] = []
        out.append(contentsOf: #"{"error":{"code":"#.utf8)
        JSONWriter.appendString(code, to: &out)
        out.append(contentsOf: #","message":"#.utf8)
        JSONWriter.appendString(message, to: &out)
        if !details.isEmpty {
            out.append(contentsOf: #","details":{"#.utf8)
            for (i, key) in details.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONWriter.appendKey(key, to: &out)
                switch details[key]! {
                case .int(let v): JSONWriter.appendInt(v, to: &out)
                case .bool(let v): JSONWriter.appendBool(v, to: &out)
                case .string(let v): JSONWriter.appendString(v, to: &out)
                case .ints(let vs): JSONWriter.append(.array(vs.map { .number(JSONNumber($0)) }), to: &out)
                case .strings(let vs): JSONWriter.append(.array(vs.map { .string($0) }), to: &out)
                }
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "}}".utf8)
        return out
    }
}
