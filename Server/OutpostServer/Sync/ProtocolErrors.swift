import OutpostCore
import OutpostSyncRules
import OutpostHTTP

/// The protocol's errors as `HTTPError`s, by `ErrorCode`, so every handler answers a
/// given failure the same way (docs/protocol.md sections 2, 4, 5, 6).
extension HTTPError {
    init(_ status: HTTPStatus, _ code: ErrorCode, _ message: String, details: [String: HTTPErrorDetail] = [:], headers: HTTPHeaders = HTTPHeaders()) {
        self.init(status, code: code.rawValue, message: message, details: details, headers: headers)
    }

    /// A refusal of `PullRules`: its status, code, message and details.
    init(_ refusal: PullRules.Refusal) {
        var details: [String: HTTPErrorDetail] = [:]
        for (key, value) in refusal.details {
            if let n = value.int64Value { details[key] = .int(Int(n)) } else if let text = value.stringValue { details[key] = .string(text) }
        }
        self.init(HTTPStatus(code: PullRules.Refusal.status), refusal.code, refusal.message, details: details)
    }

    /// `400 invalid_json`.
    static func invalidJSON(_ error: JSONError) -> HTTPError {
        HTTPError(HTTPStatus(code: 400), .invalidJSON, "the body is not JSON: \(error)")
    }

    /// `422 invalid_request` with `details.field`.
    static func invalidRequest(_ error: WireError) -> HTTPError {
        var refused = HTTPError(HTTPStatus(code: 422), .invalidRequest, "\(error.field) \(error.message)", details: ["field": .string(error.field)])
        refused.kept = "\(error.keptField) \(error.message)"
        return refused
    }

    /// `422 invalid_request` for a query parameter.
    static func invalidQuery(_ field: String, _ message: String) -> HTTPError {
        invalidRequest(WireError(field: field, message: message))
    }

    /// `401 unauthorized` with `WWW-Authenticate: Bearer` (RFC 6750 section 3).
    static func unauthorizedToken(_ message: String, error: String? = "invalid_token") -> HTTPError {
        var headers = HTTPHeaders()
        headers.add(name: "WWW-Authenticate", value: error.map { "Bearer error=\"\($0)\"" } ?? "Bearer")
        return HTTPError(HTTPStatus(code: 401), .unauthorized, message, headers: headers)
    }

    /// `400 invalid_space` for a path whose space name breaks the rule of docs/protocol.md
    /// section 1. Spaces need no creation, so this is a mistake in the name, not a space
    /// that is missing; `details.space` is the name as given.
    static func invalidSpace(_ name: String?) -> HTTPError {
        let shown = String((name ?? "").prefix(80))
        return HTTPError(HTTPStatus(code: 400), .invalidSpace, Names.invalidSpaceMessage(shown), details: ["space": .string(shown)])
    }

    /// Runs a store call for a handler: an `HTTPError` passes through, and any other
    /// failure of the store or the disk (full, I/O error, closed) is logged as `logMessage`
    /// and answered `503 unavailable` with `Retry-After` and `message`, never a half-answer.
    /// The one rule of the sync, media and admin routes.
    static func fromStore<T: Sendable>(_ logMessage: String, _ message: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw fromStore(logMessage, message, error: error)
        }
    }

    /// `fromStore`'s rule for an error already caught.
    static func fromStore(_ logMessage: String, _ message: String, error: any Error) -> HTTPError {
        if let error = error as? HTTPError { return error }
        Log.error(logMessage, ["error": "\(error)"])
        return .unavailable(retryAfterSeconds: 1, message)
    }
}

extension HTTPRequestHead {
    /// The integer query parameter `name` (nil when absent): `422 invalid_request` when it
    /// is not an integer of at least `min`, or is over `max`. Digits too many for 64 bits
    /// are still an integer, clamped like any large value.
    func integerQuery(_ name: String, min: Int, max: Int? = nil) throws(HTTPError) -> Int? {
        guard let text = query(name) else { return nil }
        let isDigits = !text.isEmpty && text.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
        guard let v = Int(text) ?? (isDigits ? Int.max : nil), v >= min else { throw .invalidQuery(name, "must be an integer of at least \(min)") }
        if let max, v > max { throw .invalidQuery(name, "must be at most \(max)") }
        return v
    }
}

/// Parses a JSON request body, mapping a parse failure to `400 invalid_json`.
/// `maxDepth` counts from the body's root.
func parseJSONBody(_ body: [UInt8], maxDepth: Int = 64) throws(HTTPError) -> JSONValue {
    do {
        return try JSONParser(maxDepth: maxDepth).parse(body)
    } catch {
        throw .invalidJSON(error)
    }
}

/// Decodes a wire type from a request body: `400 invalid_json` or `422 invalid_request`.
func decodeBody<T: JSONWireType>(_ type: T.Type, _ body: [UInt8]) throws(HTTPError) -> T {
    let value = try parseJSONBody(body)
    do {
        return try T(json: value)
    } catch {
        throw .invalidRequest(error)
    }
}
