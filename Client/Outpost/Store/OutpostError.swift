import OutpostCore
import OutpostSQLite

/// Every failure the SDK reports, so an app can switch over them.
///
/// Nothing local is lost by any of them: a failed sync leaves every queued change queued.
public enum OutpostError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Another `OutpostStore` (in this process or another) has the file open. One store per
    /// file: two writers would each believe they own the queue.
    case storeInUse(path: String)
    /// The store was closed; open it again.
    case closed
    /// The store is suspended (`suspend()`): its file and lock are released until
    /// `resume()`. Nothing was changed.
    case suspended
    /// The store was opened for reading only (`OutpostStore.reader`): it cannot save or
    /// sync. Nothing was changed.
    case readOnly
    /// A collection name or record id the protocol does not allow (docs/protocol.md section 1).
    case invalidName(String)
    /// The file belongs to another space than the configuration names.
    case spaceMismatch(stored: String, configured: String)
    /// The file was written by a newer SDK (its schema version is given).
    case schemaTooNew(Int)
    /// `sync()` was called on a store opened without a transport.
    case noTransport
    /// A record could not be decoded into the requested type.
    case decoding(collection: String, id: String, message: String)
    /// A value could not be encoded as a JSON object.
    case encoding(String)
    /// The two requests that must agree before a new epoch counts did not (docs/protocol.md
    /// section 5): the sync failed and changed nothing.
    case epochDisagreement(first: String, second: String)
    /// The server reported an epoch the store refuses: earlier than its own, or one it
    /// left before. The sync failed and changed nothing.
    case epochRefused(epoch: String, current: String?, reason: String)
    /// The server's history is behind the store's cursor in the same epoch (`cursor_ahead`):
    /// it lost writes without starting a new epoch. The sync failed and changed nothing.
    case cursorAhead(cursor: String, head: String?)
    /// The server answered with something that is not the protocol.
    case protocolViolation(String)
    /// The transport failed (see `TransportError`).
    case transport(TransportError)
    /// The local database failed.
    case storage(String)
    /// A query the store cannot run: a field it cannot name, a cursor of another query, a
    /// search in a collection that declares no searchable field. Nothing was read.
    case invalidQuery(String)
    /// Full-text search needs SQLite's FTS5, which the SQLite this process links lacks
    /// (`OutpostStore.isSearchAvailable`). Every other query works.
    case searchUnavailable

    /// A sentence for people.
    public var description: String {
        switch self {
        case .storeInUse(let path): "the store \(path) is already open (one store per file)"
        case .closed: "the store is closed"
        case .suspended: "the store is suspended: resume() it first"
        case .readOnly: "the store was opened for reading only"
        case .invalidName(let m): m
        case .spaceMismatch(let stored, let configured): "the store belongs to space \(stored), not \(configured)"
        case .schemaTooNew(let v): "the store file has schema version \(v), newer than this SDK understands"
        case .noTransport: "the store has no transport to sync with"
        case .decoding(let c, let id, let m): "cannot decode \(c)/\(id): \(m)"
        case .encoding(let m): "cannot encode the value: \(m)"
        case .epochDisagreement(let a, let b): "the server reported epoch \(a), then \(b); nothing was changed"
        case .epochRefused(let e, let current, let reason): "refused epoch \(e) (current \(current ?? "none")): \(reason)"
        case .cursorAhead(let cursor, let head): "the server's history ends at \(head ?? "?") before the store's cursor \(cursor); nothing was changed"
        case .protocolViolation(let m): "protocol violation: \(m)"
        case .transport(let e): e.description
        case .storage(let m): "storage: \(m)"
        case .invalidQuery(let m): "invalid query: \(m)"
        case .searchUnavailable: "full-text search needs SQLite's FTS5, which this platform's SQLite lacks"
        }
    }

    /// A short snake_case code, for `status().lastError` and the command-line client.
    public var code: String {
        switch self {
        case .storeInUse: "store_in_use"
        case .closed: "closed"
        case .suspended: "suspended"
        case .readOnly: "read_only"
        case .invalidName: "invalid_name"
        case .spaceMismatch: "space_mismatch"
        case .schemaTooNew: "schema_too_new"
        case .noTransport: "no_transport"
        case .decoding: "decoding"
        case .encoding: "encoding"
        case .epochDisagreement: "epoch_disagreement"
        case .epochRefused: "epoch_refused"
        case .cursorAhead: "cursor_ahead"
        case .protocolViolation: "protocol_violation"
        case .transport(let t): t.code
        case .storage: "storage"
        case .invalidQuery: "invalid_query"
        case .searchUnavailable: "search_unavailable"
        }
    }
}

/// Runs `body`, reporting a SQLite failure as `OutpostError.storage`: what every entry
/// point of the store throws for its file's errors.
func mappingSQLiteErrors<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let e as SQLiteError {
        throw OutpostError.storage(e.description)
    }
}
