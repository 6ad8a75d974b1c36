import Foundation

/// Where media bytes live (`--media-store`), and the bucket's settings when that is S3
/// (docs/operating.md, "Settings"; docs/media.md, "Media in S3"). The names are those that
/// operators of S3 tools expect; credentials come from `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, or from a file readable by its owner
/// only (`--s3-credentials-file`), never from a flag's value on the command line.
public struct MediaStoreSettings: Sendable {
    /// `directory` (the default: `--media-dir`) or `s3`.
    public var kind = "directory"
    public var endpoint: String?
    public var bucket: String?
    public var prefix = ""
    public var region = "us-east-1"
    /// Path-style addressing (`host/bucket/key`), what MinIO, Ceph and OpenStack Swift
    /// expect; false for virtual-hosted style (`bucket.host/key`).
    public var pathStyle = true
    /// Seconds a presigned download URL lasts; 0 (the default) serves downloads through the
    /// server. At most 900.
    public var presignedDownloadSeconds = 0
    /// A file of `AWS_ACCESS_KEY_ID=…` lines (mode 0600), read at start.
    public var credentialsFile: String?
    /// The credentials the environment gave (`AWS_*`).
    var environmentCredentials: S3Credentials?

    public init() {}

    /// The chunk size with media in S3 unless `--chunk-size` says otherwise: S3's smallest
    /// part but the last, so every chunk but the last can be a part as it is.
    public static let s3ChunkSize = 5 << 20

    static let options: [Settings.Option] = [
        Settings.Option(flag: "--media-store", env: "OUTPOST_MEDIA_STORE", help: "where media bytes live: directory (default; --media-dir) or s3 (--s3-endpoint, --s3-bucket; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or --s3-credentials-file)") { s, v in
            guard v == "directory" || v == "s3" else { throw Settings.Invalid(description: "--media-store must be directory or s3, not \"\(v)\"") }
            s.mediaStore.kind = v
        },
        Settings.Option(flag: "--s3-endpoint", env: "OUTPOST_S3_ENDPOINT", help: "the S3 store's URL, http://host:port (https is not supported by this build)") { s, v in
            s.mediaStore.endpoint = v
        },
        Settings.Option(flag: "--s3-bucket", env: "OUTPOST_S3_BUCKET", help: "the bucket that holds media (it must exist)") { s, v in
            s.mediaStore.bucket = v
        },
        Settings.Option(flag: "--s3-prefix", env: "OUTPOST_S3_PREFIX", help: "a prefix for every key the server writes, such as outpost/; none when unset") { s, v in
            s.mediaStore.prefix = v
        },
        Settings.Option(flag: "--s3-region", env: "OUTPOST_S3_REGION", help: "the region requests are signed for (default us-east-1)") { s, v in
            guard !v.isEmpty else { throw Settings.Invalid(description: "--s3-region must not be empty") }
            s.mediaStore.region = v
        },
        Settings.Option(flag: "--s3-path-style", env: "OUTPOST_S3_PATH_STYLE", help: "true (default): the bucket in the path, as MinIO, Ceph and Swift expect; false: in the host name") { s, v in
            s.mediaStore.pathStyle = try Settings.bool("--s3-path-style", v)
        },
        Settings.Option(flag: "--s3-presigned-downloads", env: "OUTPOST_S3_PRESIGNED_DOWNLOADS", help: "0 (default): downloads stream through the server; N (1 to 900): a download is answered 302 to a presigned URL of the object valid N seconds, for a CDN in front of the bucket") { s, v in
            s.mediaStore.presignedDownloadSeconds = try Settings.int("--s3-presigned-downloads", v, in: 0...900)
        },
        Settings.Option(flag: "--s3-credentials-file", env: "OUTPOST_S3_CREDENTIALS_FILE", help: "a file (mode 0600) of AWS_ACCESS_KEY_ID=, AWS_SECRET_ACCESS_KEY= and optionally AWS_SESSION_TOKEN= lines; else those environment variables") { s, v in
            s.mediaStore.credentialsFile = v.isEmpty ? nil : v
        },
    ]

    /// The flags of these settings (operator commands accept them as `serve` does).
    static var flags: [String] { options.map(\.flag) }

    /// Reads `AWS_*` from the environment.
    mutating func readEnvironment(_ environment: [String: String]) {
        environmentCredentials = Self.credentials(from: environment)
    }

    static func credentials(from values: [String: String]) -> S3Credentials? {
        guard let id = values["AWS_ACCESS_KEY_ID"], !id.isEmpty, let secret = values["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else { return nil }
        let token = values["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        return S3Credentials(accessKeyId: id, secretAccessKey: secret, sessionToken: token)
    }

    /// Checks what can be checked without the network: an S3 store needs an endpoint, a
    /// bucket and one source of credentials.
    func validate() throws {
        guard kind == "s3" else { return }
        guard let endpoint, !endpoint.isEmpty else { throw Settings.Invalid(description: "--media-store s3 needs --s3-endpoint (OUTPOST_S3_ENDPOINT)") }
        guard let bucket, !bucket.isEmpty else { throw Settings.Invalid(description: "--media-store s3 needs --s3-bucket (OUTPOST_S3_BUCKET)") }
        guard environmentCredentials != nil || credentialsFile != nil else {
            throw Settings.Invalid(description: "--media-store s3 needs credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or --s3-credentials-file")
        }
        do {
            let location = try S3Location(endpoint: endpoint, bucket: bucket, prefix: prefix, region: region, pathStyle: pathStyle)
            guard location.scheme == "http" else {
                throw Settings.Invalid(description: "--s3-endpoint \(endpoint): https is not supported by this build; reach the store over http on a private network, or through a local TLS proxy")
            }
        } catch let failure as S3Failure {
            throw Settings.Invalid(description: failure.detail)
        }
        guard prefix.isEmpty || (prefix.hasSuffix("/") && !prefix.hasPrefix("/") && !prefix.contains("//")) else {
            throw Settings.Invalid(description: "--s3-prefix must end with / and not start with one (outpost/, say)")
        }
    }

    /// The bucket's settings, with the credentials read (the file's, when one is named),
    /// or nil for the media directory.
    public func s3() throws -> S3MediaSettings? {
        guard kind == "s3", let endpoint, let bucket else { return nil }
        let location = try S3Location(endpoint: endpoint, bucket: bucket, prefix: prefix, region: region, pathStyle: pathStyle)
        let credentials: S3Credentials
        if let credentialsFile {
            credentials = try Self.readCredentials(credentialsFile)
        } else if let environmentCredentials {
            credentials = environmentCredentials
        } else {
            throw Settings.Invalid(description: "--media-store s3 needs credentials")
        }
        var settings = S3MediaSettings(location: location, credentials: credentials)
        settings.presignedDownloadSeconds = presignedDownloadSeconds
        return settings
    }

    /// Reads `NAME=value` lines (blank lines and `#` comments skipped), refusing a file
    /// that others may read.
    static func readCredentials(_ path: String) throws -> S3Credentials {
        var info = stat()
        guard stat(path, &info) == 0 else { throw Settings.Invalid(description: "cannot read the S3 credentials file \(path): \(String(cString: strerror(errno)))") }
        guard info.st_mode & 0o077 == 0 else { throw Settings.Invalid(description: "\(path) must be readable by its owner only (chmod 600)") }
        guard info.st_size <= 64 << 10, let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw Settings.Invalid(description: "the S3 credentials file \(path) is not a small UTF-8 text file")
        }
        var values: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty, !trimmed.hasPrefix("#"), let eq = trimmed.firstIndex(of: "=") else { continue }
            values[String(trimmed[..<eq]).trimmingCharacters(in: .whitespaces)] = String(trimmed[trimmed.index(after: eq)...]).trimmingCharacters(in: .whitespaces)
        }
        guard let credentials = credentials(from: values) else {
            throw Settings.Invalid(description: "the S3 credentials file \(path) needs AWS_ACCESS_KEY_ID= and AWS_SECRET_ACCESS_KEY= lines")
        }
        return credentials
    }
}
