import OutpostHTTP

/// The fields every media answer carries, so that a file a device uploaded never runs as a
/// page of the server's origin, the origin the admin console and its token live on
/// (docs/security.md, "Media served to browsers"). The engine adds
/// `X-Content-Type-Options: nosniff` to every answer, so a browser never reads a script or a
/// page out of a body labelled otherwise.
///
/// - `Content-Security-Policy: default-src 'none'; sandbox`: opened anyway, a file gets an
///   opaque origin, no script, no form, no plugin, and loads nothing.
/// - `Content-Disposition: inline` only for media types a browser shows without running
///   anything (`inlineTypes`); every other type is `attachment`, a download.
enum ServedMedia {
    /// Raster images, audio and video: what a browser decodes and shows, never runs.
    ///
    /// Left out on purpose, and so downloaded:
    /// - `image/svg+xml`: an SVG opened as a document is XML that runs its `<script>` and
    ///   event handlers (an `<img>` would not run them, but a link to the file would).
    /// - `application/pdf`: browsers' PDF viewers run the JavaScript and forms a PDF may
    ///   carry, and Chrome refuses to show a PDF in a sandboxed document at all, so inline
    ///   would be both the riskier and the broken choice.
    /// - `text/html`, `application/xhtml+xml`, XML of any kind, and `text/plain`: pages,
    ///   or text a browser would render in a frame of the origin.
    static let inlineTypes: Set<String> = [
        "image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp", "image/heic", "image/heif",
        "audio/mpeg", "audio/mp4", "audio/aac", "audio/ogg", "audio/wav", "audio/webm", "audio/flac",
        "video/mp4", "video/webm", "video/ogg", "video/quicktime",
    ]

    /// The sandbox of every media answer.
    static let contentSecurityPolicy = "default-src 'none'; sandbox"

    /// True when a file of `contentType` (its `type/subtype`, parameters and case aside) is
    /// shown inline.
    static func isInline(_ contentType: String) -> Bool {
        let essence = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0]
        return inlineTypes.contains(essence.trimmingSpacesAndTabs.lowercased())
    }

    /// Adds the fields for a file of `contentType` to `headers`.
    static func addHeaders(contentType: String, to headers: inout HTTPHeaders) {
        headers.replaceOrAdd(name: "Content-Security-Policy", value: contentSecurityPolicy)
        headers.replaceOrAdd(name: "Content-Disposition", value: isInline(contentType) ? "inline" : "attachment")
    }
}
