import Dispatch
import Foundation
import OutpostHTTP
#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 address as bytes (4 or 16), from a literal or a socket address.
struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    let bytes: [UInt8]

    init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// An address literal (`10.0.0.1`, `::1`, `[fe80::1]`); nil for a host name.
    init?(literal: String) {
        var text = literal
        if text.hasPrefix("[") && text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            self.bytes = withUnsafeBytes(of: v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            self.bytes = withUnsafeBytes(of: v6) { Array($0) }
            return
        }
        return nil
    }

    /// The address of an `AF_INET` or `AF_INET6` socket address; nil for another family.
    init?(_ address: UnsafePointer<sockaddr>) {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            bytes = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { a in withUnsafeBytes(of: a.pointee.sin_addr) { Array($0) } }
        case AF_INET6:
            bytes = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { a in withUnsafeBytes(of: a.pointee.sin6_addr) { Array($0) } }
        default:
            return nil
        }
    }

    var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        bytes.withUnsafeBytes { _ = inet_ntop(bytes.count == 4 ? AF_INET : AF_INET6, $0.baseAddress, &text, socklen_t(text.count)) }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The IPv4 address an IPv6 one stands for, where the bytes carry one: IPv4-mapped
    /// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated), NAT64 (`64:ff9b::/96`,
    /// RFC 6052) and 6to4 (`2002:AABB:CCDD::/48`, RFC 3056). A connection to one of these
    /// reaches that IPv4 host, so it is judged as that host.
    var embeddedIPv4: IPAddress? {
        guard bytes.count == 16 else { return nil }
        let b = bytes
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF { return IPAddress(bytes: Array(b[12..<16])) }
        if b[0..<12].allSatisfy({ $0 == 0 }) && !(b[12] == 0 && b[13] == 0 && b[14] == 0 && b[15] <= 1) { return IPAddress(bytes: Array(b[12..<16])) }
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && b[4..<12].allSatisfy({ $0 == 0 }) { return IPAddress(bytes: Array(b[12..<16])) }
        if b[0] == 0x20 && b[1] == 0x02 { return IPAddress(bytes: Array(b[2..<6])) }
        return nil
    }
}

/// Which addresses a webhook may be delivered to (docs/security.md, "Webhooks"). Unless the
/// operator allows them (`--webhook-allow-private true`), a receiver is refused when the
/// address connected to is loopback, private (RFC 1918, RFC 4193 unique local, the
/// deprecated IPv6 site-local), link-local, shared (RFC 6598, carrier-grade NAT),
/// unspecified, multicast, reserved or broadcast, or one of this server's own addresses.
/// So a webhook cannot reach what sits behind the server's network boundary, the server
/// included, whoever configures it and whatever its name resolves to.
struct ReceiverAddressPolicy: Sendable {
    /// Every address allowed (`--webhook-allow-private true`).
    var allowPrivate: Bool
    /// This host's interface addresses (nil: read with getifaddrs(3) at each check, so an
    /// address added after start counts too); tests give their own.
    var ownAddresses: Set<IPAddress>?

    init(allowPrivate: Bool, ownAddresses: Set<IPAddress>? = nil) {
        self.allowPrivate = allowPrivate
        self.ownAddresses = ownAddresses
    }

    /// Why a delivery to `address` is refused (the kind of address), or nil when it may go.
    func refusal(_ address: IPAddress) -> String? {
        if allowPrivate { return nil }
        if let kind = Self.kind(of: address) { return kind }
        let own = ownAddresses ?? Self.interfaceAddresses()
        if own.contains(address) || (address.embeddedIPv4.map(own.contains) ?? false) { return "one of this server's own addresses" }
        return nil
    }

    /// The kind of a special-purpose address, or nil for a public unicast one.
    static func kind(of address: IPAddress) -> String? {
        if let v4 = address.embeddedIPv4 { return kind(of: v4) }
        let b = address.bytes
        if b.count == 4 {
            switch (b[0], b[1]) {
            case (0, _): return "an unspecified address (0.0.0.0/8)"
            case (10, _), (172, 16...31), (192, 168): return "a private address (RFC 1918)"
            case (100, 64...127): return "a shared address (100.64.0.0/10, carrier-grade NAT)"
            case (127, _): return "a loopback address"
            case (169, 254): return "a link-local address"
            case (224...239, _): return "a multicast address"
            case (240...255, _): return "a reserved or broadcast address"
            default: return nil
            }
        }
        if b[0..<15].allSatisfy({ $0 == 0 }) {
            return b[15] == 1 ? "a loopback address" : (b[15] == 0 ? "an unspecified address" : nil)
        }
        if b[0] & 0xFE == 0xFC { return "a private address (unique local, RFC 4193)" }
        if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return "a link-local address" }
        if b[0] == 0xFE && b[1] & 0xC0 == 0xC0 { return "a private address (site-local)" }
        if b[0] == 0xFF { return "a multicast address" }
        return nil
    }

    /// The addresses of this host's interfaces.
    static func interfaceAddresses() -> Set<IPAddress> {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var found: Set<IPAddress> = []
        var next = list
        while let entry = next {
            if let address = entry.pointee.ifa_addr, let ip = IPAddress(UnsafePointer(address)) { found.insert(ip) }
            next = entry.pointee.ifa_next
        }
        return found
    }

    /// The refusal of a literal receiver host (checked when the settings are read), or nil
    /// for a host name or an address that may be used.
    func refusal(literalHost host: String) -> String? {
        IPAddress(literal: host).flatMap(refusal)
    }

    /// What resolving `host` gave: every address, or why there was none.
    enum Resolution: Sendable {
        case addresses([IPAddress])
        case failed(String)
    }

    /// Resolves `host` (blocking: call it off the concurrency pool).
    static func resolve(_ host: String, port: Int) -> Resolution {
        let result: UnsafeMutablePointer<addrinfo>
        do throws(HTTPClientFailure) { result = try HTTPClient.lookUp(host, port: port) } catch { return .failed(error.detail) }
        defer { freeaddrinfo(result) }
        var addresses: [IPAddress] = []
        var next: UnsafeMutablePointer<addrinfo>? = result
        while let info = next {
            if let address = info.pointee.ai_addr, let ip = IPAddress(UnsafePointer(address)) { addresses.append(ip) }
            next = info.pointee.ai_next
        }
        return .addresses(addresses)
    }

    /// For a receiver whose connection this process does not make itself (URLSession's, for
    /// `https://`): resolves `host` on a Dispatch thread and refuses it when any address it
    /// resolves to is refused, since the connection may use any of them. Nil: it may go.
    /// What this leaves open is written in docs/security.md ("Webhooks"): a name whose
    /// answer changes between this lookup and URLSession's own.
    func check(host: String, port: Int) async -> WebhookHTTPClient.NoAnswer? {
        if allowPrivate { return nil }
        let resolution = await withCheckedContinuation { (continuation: CheckedContinuation<Resolution, Never>) in
            DispatchQueue.global().async { continuation.resume(returning: Self.resolve(host, port: port)) }
        }
        switch resolution {
        case .failed(let why):
            return .init(.connectFailed, why)
        case .addresses(let addresses):
            for address in addresses {
                if let why = refusal(address) { return .init(.addressRefused, "\(host) resolves to \(address), \(why)") }
            }
            return addresses.isEmpty ? .init(.connectFailed, "\(host) resolves to no address") : nil
        }
    }
}
