import OutpostCore
import OutpostCrypto
import OutpostHTTP

/// The header fields of tus 1.0.0 (https://tus.io/protocols/resumable-upload) as Outpost
/// reads and writes them: the core protocol and the creation, checksum, termination and
/// expiration extensions (docs/media.md, "tus"). Pure parsing, no I/O.
enum Tus {
    /// The one version spoken: `Tus-Resumable` and `Tus-Version`.
    static let version = "1.0.0"
    /// `Tus-Extension`: creation-with-upload, concatenation and creation-defer-length
    /// are not offered.
    static let extensions = "creation,termination,checksum,expiration"
    /// `Tus-Checksum-Algorithm`: SHA-256 is the hash the media store already trusts.
    static let checksumAlgorithm = "sha256"
    /// A PATCH body's media type (tus 1.0.0, section "PATCH").
    static let patchContentType = "application/offset+octet-stream"
    /// The content type of a file whose metadata names none.
    static let defaultContentType = "application/octet-stream"
    /// Longest `Upload-Metadata` kept (it is stored and sent back on every HEAD).
    static let maxMetadataBytes = 4096
    /// The field that names the media id once the upload is complete.
    static let mediaIDHeader = "Outpost-Media-Id"

    /// `Upload-Length` and `Upload-Offset`: a non-negative decimal integer (digits only, no
    /// leading zero, at most 2^53 - 1, the protocol's largest integer). Nil otherwise.
    static func parseSize(_ text: String) -> Int64? {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= 16, utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        if utf8.count > 1 && utf8.first == UInt8(ascii: "0") { return nil }
        guard let value = Int64(text), value <= (1 << 53) - 1 else { return nil }
        return value
    }

    /// A parsed `Upload-Metadata` field.
    struct Metadata: Equatable, Sendable {
        /// The field as sent, spaces around it trimmed (sent back on HEAD).
        var field: String
        /// Each key's decoded value (empty when the pair had none).
        var values: [String: [UInt8]]

        /// `filename` (or `name`, which some clients send), when it is UTF-8 text.
        var filename: String? {
            for key in ["filename", "name"] {
                if let bytes = values[key], !bytes.isEmpty { return String(validating: bytes, as: UTF8.self) }
            }
            return nil
        }

        /// `filetype` (or `contentType`), the first non-empty one; nil when neither.
        var contentType: String? {
            for key in ["filetype", "contentType"] {
                if let bytes = values[key], !bytes.isEmpty { return String(decoding: bytes, as: UTF8.self) }
            }
            return nil
        }
    }

    /// Parses `Upload-Metadata` (tus 1.0.0, "Upload-Metadata"): comma-separated pairs of a
    /// key (printable ASCII, not empty, no space or comma) and an optional value after one
    /// space, in padded canonical base64; keys unique. Nothing else is taken (no spaces
    /// around pairs), so openapi/outpost.yaml's pattern says exactly what is accepted. An
    /// empty field is no metadata. On failure, says what is wrong. The values used here are
    /// checked as the JSON init checks them: `filename` by `UploadRequest.filenameProblem`,
    /// `filetype`/`contentType` a media type.
    static func parseMetadata(_ raw: String) -> Result<Metadata, TusHeaderProblem> {
        let field = String(raw.trimmingSpacesAndTabs)
        guard field.utf8.count <= maxMetadataBytes else { return .failure(.init("is over \(maxMetadataBytes) bytes")) }
        guard field.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return .failure(.init("must be printable ASCII")) }
        var values: [String: [UInt8]] = [:]
        if !field.isEmpty {
            for pair in field.split(separator: ",", omittingEmptySubsequences: false) {
                let parts = pair.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
                let key = String(parts[0])
                guard !key.isEmpty else { return .failure(.init("has a pair without a key")) }
                guard values[key] == nil else { return .failure(.init("names the key \(key.prefix(40)) twice")) }
                if parts.count == 2 {
                    guard let bytes = Base64.decode(String(parts[1])) else {
                        return .failure(.init("has a value for \(key.prefix(40)) that is not padded base64"))
                    }
                    values[key] = bytes
                } else {
                    values[key] = []
                }
            }
        }
        let metadata = Metadata(field: field, values: values)
        for key in ["filename", "name"] {
            if let bytes = metadata.values[key], !bytes.isEmpty {
                guard let text = String(validating: bytes, as: UTF8.self) else {
                    return .failure(.init("has a \(key) that is not UTF-8 text"))
                }
                if let problem = UploadRequest.filenameProblem(text) { return .failure(.init("has a \(key) that \(problem)")) }
            }
        }
        if let type = metadata.contentType, !UploadRequest.isValidContentType(type) {
            return .failure(.init("has a filetype that is not a media type such as image/jpeg"))
        }
        return .success(metadata)
    }

    /// What an `Upload-Checksum` field says.
    enum Checksum: Equatable, Sendable {
        /// `sha256 <base64 of 32 bytes>`.
        case sha256([UInt8])
        /// An algorithm this server does not offer (answered `400 unsupported_checksum_algorithm`).
        case unsupported(String)
        /// Not `<algorithm> <base64>`, or a digest of the wrong length.
        case malformed(TusHeaderProblem)
    }

    /// Parses `Upload-Checksum` (tus 1.0.0, checksum extension): the algorithm's name, one
    /// space, the base64 digest of the PATCH body.
    static func parseChecksum(_ raw: String) -> Checksum {
        let field = raw.trimmingSpacesAndTabs
        let parts = field.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2 else { return .malformed(.init("must be an algorithm and a base64 digest, separated by a space")) }
        let algorithm = String(parts[0])
        guard algorithm.lowercased() == checksumAlgorithm else { return .unsupported(algorithm) }
        guard let digest = Base64.decode(String(parts[1])), digest.count == 32 else {
            return .malformed(.init("must hold the base64 of a 32-byte SHA-256"))
        }
        return .sha256(digest)
    }

    /// `Upload-Expires` (tus 1.0.0, expiration extension: an RFC 9110 date) for a time in
    /// ms since 1970, rounded down to the second.
    static func expires(_ ms: Int64) -> String {
        HTTPDate.imfFixdate(secondsSince1970: ms / 1000)
    }

}

/// Why a tus header field was refused, for the error's message.
struct TusHeaderProblem: Error, Equatable, Sendable {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

extension StringProtocol {
    /// Without the spaces and tabs around it.
    var trimmingSpacesAndTabs: Substring {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return s
    }
}
