import Foundation
import OutpostCore
import OutpostCrypto
import OutpostHTTP
import OutpostServer
import OutpostSignatures
import Synchronization

/// Deliberate bugs, one at a time, for the mutation tests: a suite that cannot fail proves
/// nothing, so `ConformanceTests` runs servers with each of these switched on and expects
/// at least one named check to catch it, and `SimulationTests` expects the harness to.
///
/// The bugs live here, in a module only tests link: each wraps a part of a real server
/// (its store, its token verifier, a route) and the production code holds no trace of
/// them. `parts(secret:)` wraps the parts `OutpostApplication` builds, `routes(of:)` the
/// routes it registered.
public enum ServerMutation: String, Sendable, CaseIterable {
    /// Applied change ids are neither looked up nor remembered.
    case forgetIdempotency
    /// Seqs are not persisted with the write, so a restart hands out the newest seq again.
    case reuseSeqAfterRestart
    /// Pull pages ignore their byte budget.
    case pageOverBudget
    /// Tokens with `alg: none` are accepted without a signature.
    case acceptAlgNone
    /// A cursor of another epoch is read as if it were of the current one.
    case acceptForeignEpochCursor
    /// Tombstones are left out of pull pages.
    case dropTombstones
    /// A push's changes are applied last to first.
    case applyOutOfOrder
    /// `maxChangesPerPush` is not enforced.
    case ignoreMaxChangesPerPush
    /// The push route accepts bodies of any size (a 413 case answered 200).
    case ignoreBodyLimit
    /// Pages list records of every space, not just the requested one.
    case leakOtherSpaces
    /// A conflict reports the record's previous version as `current`.
    case staleCurrentOnConflict
    /// Finalize publishes an upload without checking the whole file's SHA-256.
    case skipWholeFileHash
    /// Pull treats a cursor beyond the head as the head instead of `cursor_ahead`.
    case acceptCursorAhead
    /// Conflicts are applied as if `force` were set.
    case ignoreBaseVersion
    /// A re-offer is applied as an edit, as a 1.0 server would: no descent check, no
    /// lineage kept, stamped with its arrival time.
    case reofferAsEdit
    /// A re-offer is admitted by the current state's lineage instead of its sameAs, so it
    /// replaces a write made since on a restored or re-offered state, one it never saw.
    case reofferJudgedByLineage

    /// True when the bug is in the store, so that it applies to any `SyncStore`.
    public var isInStore: Bool {
        switch self {
        case .forgetIdempotency, .reuseSeqAfterRestart, .pageOverBudget, .dropTombstones, .applyOutOfOrder, .leakOtherSpaces,
             .staleCurrentOnConflict, .ignoreBaseVersion, .reofferAsEdit, .reofferJudgedByLineage: true
        default: false
        }
    }

    /// The application's parts with this bug: its store wrapped by `MutantSyncStore`, or
    /// its token verifier by one that accepts unsigned tokens (re-signing them with
    /// `secret`, the server's, so that the real verifier reads their claims).
    public func parts(secret: [UInt8]) -> OutpostApplication.Parts {
        var parts = OutpostApplication.Parts()
        if isInStore { parts.store = { MutantSyncStore(base: $0, mutation: self) } }
        if self == .acceptAlgNone { parts.tokens = { AcceptAlgNone(base: $0, secret: secret) } }
        return parts
    }

    /// The application's routes with this bug, for the bugs of the HTTP handlers.
    public func routes(of app: OutpostApplication) -> Router {
        var router = app.router
        let store = app.store
        let push = "/v1/spaces/{space}/push", pull = "/v1/spaces/{space}/pull"
        switch self {
        case .ignoreBodyLimit:
            router.wrap(.POST, push, bodyLimit: 1 << 30) { request, next in try await next(request) }
        case .ignoreMaxChangesPerPush:
            let limit = app.settings.limits.maxChangesPerPush
            router.wrap(.POST, push) { request, next in try await Self.pushInSlices(request, of: limit, next) }
        case .acceptForeignEpochCursor:
            router.wrap(.GET, pull) { request, next in
                var request = request
                if let since = request.query("since").flatMap(Version.init), since.epoch != store.epoch {
                    request.setQuery("since", Version(epoch: store.epoch, seq: since.seq).text)
                }
                return try await next(request)
            }
        case .acceptCursorAhead:
            router.wrap(.GET, pull) { request, next in
                var request = request
                if let since = request.query("since").flatMap(Version.init), let space = request.parameter("space"),
                   since.epoch == store.epoch, case let head = try await store.head(space: space), since.seq > head {
                    request.setQuery("since", Version(epoch: store.epoch, seq: head).text)
                }
                return try await next(request)
            }
        case .skipWholeFileHash:
            // What a server that never hashed the whole file answers: the upload published
            // under the hash it declared, which the wrapped init remembers.
            let uploads = "/v1/spaces/{space}/media/uploads"
            let declared = Mutex<[String: UploadState]>([:])
            router.wrap(.POST, uploads) { request, next in
                let answer = try await next(request)
                if case .bytes(let body) = answer.body, let upload = try? UploadState.decode(body) {
                    declared.withLock { $0[upload.uploadId] = upload }
                }
                return answer
            }
            router.wrap(.POST, uploads + "/{uploadId}/finalize") { request, next in
                do {
                    return try await next(request)
                } catch let error as HTTPError where error.code == "checksum_mismatch" {
                    guard let upload = declared.withLock({ $0[request.parameter("uploadId") ?? ""] }) else { throw error }
                    let media = MediaInfo(mediaId: upload.sha256, sha256: upload.sha256, size: upload.size, contentType: "application/octet-stream",
                                          url: "/v1/spaces/\(request.parameter("space") ?? "")/media/\(upload.sha256)",
                                          createdAt: Int64(Date().timeIntervalSince1970 * 1000))
                    return HTTPResponse(json: UploadComplete(media: media).encoded())
                }
            }
        default:
            break
        }
        return router
    }

    /// A push of more than `limit` changes applied as several pushes of at most `limit`,
    /// answered as one.
    static func pushInSlices(_ request: HTTPRequest, of limit: Int, _ next: HTTPHandler) async throws -> HTTPResponse {
        guard case .object(var body) = try JSONParser.parse(request.body), case .array(let changes)? = body["changes"], changes.count > limit else {
            return try await next(request)
        }
        var results: [JSONValue] = []
        var epoch: JSONValue = .null
        for start in stride(from: 0, to: changes.count, by: limit) {
            body["changes"] = .array(Array(changes[start..<min(start + limit, changes.count)]))
            var slice = request
            slice.body = JSONValue.object(body).encoded()
            let answer = try await next(slice)
            guard case .bytes(let bytes) = answer.body, case .object(let o) = try JSONParser.parse(bytes), case .array(let r)? = o["results"] else {
                return answer
            }
            epoch = o["epoch"] ?? .null
            results += r
        }
        return HTTPResponse(json: JSONValue.object(["epoch": epoch, "results": .array(results)]).encoded())
    }
}

extension HTTPRequest {
    /// Sets the query value `name` (replacing the first one, or adding it).
    mutating func setQuery(_ name: String, _ value: String) {
        if let i = head.query.firstIndex(where: { $0.name == name }) {
            head.query[i].value = value
        } else {
            head.query.append(HTTPQueryItem(name: name, value: value))
        }
    }
}

/// A token verifier that accepts `alg: none`: such a token is signed with the server's
/// secret and handed to the real verifier, which then reads its claims.
struct AcceptAlgNone: TokenVerifier {
    let base: any TokenVerifier
    let secret: [UInt8]

    func verify(_ token: String, now: Int64) async throws(TokenError) -> Claims {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Base64.decodeURL(String(parts[0])), case .object(let o)? = try? JSONParser.parse(header),
              o["alg"] == .string("none") else {
            return try await base.verify(token, now: now)
        }
        let signingInput = Base64.encodeURL(JSONValue.object(["alg": "HS256", "typ": "JWT"]).encoded()) + "." + parts[1]
        let signature = HMACSHA256.authenticate(Array(signingInput.utf8), key: secret)
        return try await base.verify(signingInput + "." + Base64.encodeURL(signature), now: now)
    }
}
