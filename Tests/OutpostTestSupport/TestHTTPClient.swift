import Foundation
@_exported import struct OutpostHTTP.HTTPClientResponse
@_exported import class OutpostHTTP.HTTPClient
import OutpostHTTP
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An answer as the test client read it.
public typealias TestResponse = HTTPClientResponse

/// The engine's blocking HTTP/1.1 client on one TCP connection (`HTTPClient`), for tests
/// that must control the bytes on the wire (keep-alive, pipelining, partial sends,
/// malformed input).
public typealias TestHTTPClient = HTTPClient

extension HTTPClient {
    /// Connects to 127.0.0.1:`port`; a read waits at most the test deadline.
    public convenience init(port: Int) throws {
        try self.init(host: "127.0.0.1", port: port, timeout: Double(testDeadlineSeconds))
    }
}

/// One request on a fresh connection.
public func httpRequest(port: Int, _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Double = Double(testDeadlineSeconds)) throws -> TestResponse {
    let client = try TestHTTPClient(port: port, timeout: timeout)
    return try client.request(method, target, headers: headers + [("Connection", "close")], body: body)
}

/// One request on a fresh connection, from async code (see `blocking`).
public func httpRequestAsync(port: Int, _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Double = Double(testDeadlineSeconds)) async throws -> TestResponse {
    try await blocking { try httpRequest(port: port, method, target, headers: headers, body: body, timeout: timeout) }
}
