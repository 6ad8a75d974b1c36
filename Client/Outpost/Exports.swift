import OutpostCore

// The types of `OutpostCore` that the SDK's public API uses, named here so that an app's
// `import Outpost` is the only import it needs (docs/client.md, "Public API"): a record's
// data (`JSONObject`, `JSONValue`, `JSONNumber`), a record's version and the server's
// epoch, a queued change's operation, and what the server says of itself and of a media
// file. The rest of `OutpostCore` (the wire's requests and pages) stays out of an app's
// sight; a custom `SyncTransport` imports `OutpostCore`. The server's push and pull rules are
// not there at all: they are `OutpostSyncRules`, which the SDK never links.

/// A record's data: a JSON object whose members keep their order and their numbers' text.
public typealias JSONObject = OutpostCore.JSONObject
/// A JSON value: null, a Boolean, a number (its text kept), a string, an array or an object.
public typealias JSONValue = OutpostCore.JSONValue
/// A JSON number as written (`JSONNumber(lexeme:)`), compared by value.
public typealias JSONNumber = OutpostCore.JSONNumber
/// A record's version: the server's history (`Epoch`) and the commit that wrote it.
public typealias Version = OutpostCore.Version
/// The server's history: a new one begins when a server is restored from a backup.
public typealias Epoch = OutpostCore.Epoch
/// What a queued change does: `put` or `delete`.
public typealias ChangeOp = OutpostCore.ChangeOp
/// A media file the server holds: its id, size, type and SHA-256.
public typealias MediaInfo = OutpostCore.MediaInfo
/// What a server says of itself (`GET /v1/info`): its protocol version and limits.
public typealias ServerInfo = OutpostCore.ServerInfo
/// What a resolver did with a conflict, as its resolved write told the server: `keepLocal`,
/// `write` (a merge) or `delete` (`RemoteDecision.outcome`).
public typealias ResolutionOutcome = OutpostCore.ResolutionMark.Outcome
