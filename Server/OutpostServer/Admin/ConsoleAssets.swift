import OutpostCrypto
import OutpostHTTP

/// One file of the admin console, compiled into the binary: the script is `Admin/console.js`,
/// embedded by SwiftPM (`.embedInCode`), the page, style and icon are Swift strings. A
/// bundled resource would be a file beside the executable on Linux, which an installed
/// binary may lack.
struct ConsoleAsset: Sendable {
    let name: String
    let contentType: String
    let bytes: [UInt8]
    /// The SHA-256 of the bytes, in hex: the `ETag`, and the `v` of the URLs the page
    /// names the asset by, so a new server's assets have new URLs.
    let digest: String

    init(name: String, contentType: String, bytes: [UInt8]) {
        self.name = name
        self.contentType = contentType
        self.bytes = bytes
        digest = SHA256.hex(bytes)
    }

    init(name: String, contentType: String, text: String) {
        self.init(name: name, contentType: contentType, bytes: Array(text.utf8))
    }

    /// The asset's URL with its version.
    var url: String { "/admin/\(name)?v=\(digest.prefix(16))" }
}

/// The admin console's page and assets, and how they are served: static, with no inline
/// script and a strict Content-Security-Policy (docs/operating.md, "Admin console").
enum ConsoleAssets {
    static let style = ConsoleAsset(name: "console.css", contentType: "text/css; charset=utf-8", bytes: PackageResources.console_css)
    static let script = ConsoleAsset(name: "console.js", contentType: "text/javascript; charset=utf-8", bytes: PackageResources.console_js)
    static let icon = ConsoleAsset(name: "icon.svg", contentType: "image/svg+xml", text: ConsolePage.icon)
    /// `GET /admin`: it names the other assets by their versioned URLs.
    static let page = ConsoleAsset(name: "index.html", contentType: "text/html; charset=utf-8",
                                   text: ConsolePage.html(style: style.url, script: script.url, icon: icon.url))

    /// The assets under `/admin/{asset}`.
    static func named(_ name: String) -> ConsoleAsset? {
        [style, script, icon].first { $0.name == name }
    }

    /// Scripts and styles only from the server's own files (no inline script or style,
    /// no `eval`), images from itself and from the blob URLs of media previews, requests
    /// only to itself, and never inside a frame.
    static let contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
        + "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// The headers of every console answer.
    static var securityHeaders: HTTPHeaders {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Security-Policy", value: contentSecurityPolicy)
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        headers.add(name: "X-Frame-Options", value: "DENY")
        headers.add(name: "Referrer-Policy", value: "no-referrer")
        headers.add(name: "Cross-Origin-Opener-Policy", value: "same-origin")
        headers.add(name: "Cross-Origin-Resource-Policy", value: "same-origin")
        return headers
    }

    /// `301` to `/admin`, with the query `head` came with.
    static func redirectToPage(_ head: HTTPRequestHead) -> HTTPResponse {
        var headers = securityHeaders
        let query = head.target.firstIndex(of: "?").map { String(head.target[$0...]) } ?? ""
        headers.add(name: "Location", value: "/admin" + query)
        headers.add(name: "Cache-Control", value: "no-cache")
        return HTTPResponse(status: .movedPermanently, headers: headers)
    }

    /// The asset for `head`: `304` when `If-None-Match` names its `ETag`. The page is
    /// revalidated on every load (`no-cache`); an asset asked for by its versioned URL is
    /// kept for a year (`immutable`), since a new server names new bytes by a new URL,
    /// and by any other URL it is revalidated too.
    static func response(_ asset: ConsoleAsset, _ head: HTTPRequestHead) -> HTTPResponse {
        var headers = securityHeaders
        // Weak: the engine may send the bytes gzip-encoded under the same tag.
        let opaque = "\"\(asset.digest)\""
        headers.add(name: "ETag", value: "W/" + opaque)
        let versioned = asset.name != page.name && head.query("v") == String(asset.digest.prefix(16))
        headers.add(name: "Cache-Control", value: versioned ? "public, max-age=31536000, immutable" : "no-cache")
        let noneMatch = head.headers.values(name: "If-None-Match")
        if !noneMatch.isEmpty, EntityTags.noneMatchSatisfied(noneMatch.joined(separator: ","), etag: opaque) {
            return HTTPResponse(status: .notModified, headers: headers)
        }
        headers.add(name: "Content-Type", value: asset.contentType)
        return HTTPResponse(status: .ok, headers: headers, body: .bytes(asset.bytes))
    }
}
