/// Every error code of the protocol, in one place (docs/protocol.md sections 2, 4, 5, 6, 7).
/// The raw value is the `code` sent in the error envelope or in a rejected change.
public enum ErrorCode: String, Sendable, CaseIterable, Codable {
    // Section 2: common
    case badRequest = "bad_request"
    case invalidJSON = "invalid_json"
    case invalidRequest = "invalid_request"
    case unauthorized
    case forbidden
    case notFound = "not_found"
    /// `400`: the space name in the path breaks the naming rule (spaces need no creation,
    /// so a well-formed name is never "not found").
    case invalidSpace = "invalid_space"
    case methodNotAllowed = "method_not_allowed"
    case payloadTooLarge = "payload_too_large"
    case requestTimeout = "request_timeout"
    case unsupportedMediaType = "unsupported_media_type"
    case notImplemented = "not_implemented"
    case unavailable
    case internalError = "internal_error"
    // Section 4: push
    case tooManyChanges = "too_many_changes"
    case invalidChange = "invalid_change"
    case recordTooLarge = "record_too_large"
    case changeIdReused = "change_id_reused"
    case epochMismatch = "epoch_mismatch"
    /// A change's result: the write would take its space's records over the server's
    /// per-space limit of record bytes; `details.limit` and `details.used` (added without a
    /// version change).
    case recordQuotaExceeded = "record_quota_exceeded"
    /// A change's result: the rules want a later version of the app for writes to its
    /// collection than the push named (`appVersion`); `details.minimum` and
    /// `details.version` (docs/rules.md, "App versions"; added without a version change).
    case upgradeRequired = "upgrade_required"
    // Section 5: pull
    case epochChanged = "epoch_changed"
    case cursorAhead = "cursor_ahead"
    /// The cursor was made under another view of the space than the token's now (the
    /// rules or the token's claims changed): pull again from the start (docs/rules.md).
    case viewChanged = "view_changed"
    /// The cursor is before the space's history horizon: deletes it may not have seen were
    /// purged by compaction. Pull again from the start (docs/protocol.md section 5).
    case historyCompacted = "history_compacted"
    case invalidCursor = "invalid_cursor"
    // Section 6: media
    case digestRequired = "digest_required"
    case digestMismatch = "digest_mismatch"
    case invalidChunkIndex = "invalid_chunk_index"
    case invalidChunkSize = "invalid_chunk_size"
    case uploadNotFound = "upload_not_found"
    case uploadIncomplete = "upload_incomplete"
    case checksumMismatch = "checksum_mismatch"
    case mediaNotFound = "media_not_found"
    case rangeNotSatisfiable = "range_not_satisfiable"
    /// `413`: an upload would take its space's media (files and open uploads) over the
    /// server's per-space limit of media bytes; `details.limit` and `details.used` (added
    /// without a version change).
    case mediaQuotaExceeded = "media_quota_exceeded"
    // Section 6: tus uploads (docs/media.md, "tus")
    /// `412`: `Tus-Resumable` missing or another version than 1.0.0; `Tus-Version` lists ours.
    case unsupportedTusVersion = "unsupported_tus_version"
    /// `400`: a tus header (`Upload-Length`, `Upload-Offset`, `Upload-Metadata`,
    /// `Upload-Checksum`) missing where required or malformed; `details.header` names it.
    case invalidHeader = "invalid_header"
    /// `400`: `Upload-Checksum` names an algorithm other than those of `Tus-Checksum-Algorithm`.
    case unsupportedChecksumAlgorithm = "unsupported_checksum_algorithm"
    /// `409`: `Upload-Offset` is not the upload's offset; `details.offset` is.
    case offsetMismatch = "offset_mismatch"
    /// `410`: the tus upload expired (until the sweep removes it; then `404 upload_not_found`).
    case uploadExpired = "upload_expired"
    // Section 7: operations
    /// `404` from the admin console's record lookup: the space has no record by that
    /// collection and id (docs/protocol.md section 7).
    case recordNotFound = "record_not_found"
    // Section 7: operations
    /// `404`: no dead letter of that id (`/v1/admin/webhooks/dead-letters/{id}`).
    case deadLetterNotFound = "dead_letter_not_found"
    /// `409`: a dead letter's webhook is not configured on this server, so it cannot be
    /// replayed here.
    case webhookNotConfigured = "webhook_not_configured"
    /// `404`: the server has seen no device of that clientId in the space
    /// (`/v1/admin/spaces/{space}/devices/{clientId}`).
    case deviceNotFound = "device_not_found"
}
