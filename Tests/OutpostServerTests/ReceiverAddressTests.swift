import Foundation
import Testing
@testable import OutpostServer

/// Which webhook receiver addresses are refused (`ReceiverAddressPolicy`), and the settings
/// that refuse a literal one at start unless `--webhook-allow-private` is set.
@Suite struct ReceiverAddressTests {
    static func ip(_ text: String) -> IPAddress {
        guard let ip = IPAddress(literal: text) else { fatalError("not an address: \(text)") }
        return ip
    }

    @Test func specialPurposeAddressesAreRefusedAndPublicOnesAllowed() {
        let refused = [
            "0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.1.1",
            "100.64.0.1", "100.127.255.254", "127.0.0.1", "127.8.9.10", "169.254.169.254", "224.0.0.1", "239.1.2.3",
            "240.0.0.1", "255.255.255.255",
            "::", "::1", "fc00::1", "fd12:3456::1", "fe80::1", "febf::1", "fec0::1", "ff02::1",
            // IPv6 forms that reach an IPv4 host are judged as that host.
            "::ffff:127.0.0.1", "::ffff:10.1.2.3", "::10.1.2.3", "64:ff9b::a9fe:a9fe", "2002:c0a8:0101::1",
        ]
        let allowed = [
            "1.1.1.1", "8.8.8.8", "93.184.216.34", "172.15.255.255", "172.32.0.1", "100.63.255.255", "100.128.0.1",
            "169.253.1.1", "192.169.0.1", "223.255.255.255",
            "2606:4700:4700::1111", "2001:db8::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:0808:0808::1",
        ]
        let own = ReceiverAddressPolicy(allowPrivate: false, ownAddresses: [])
        for text in refused {
            #expect(own.refusal(Self.ip(text)) != nil, "\(text) is allowed")
            #expect(ReceiverAddressPolicy(allowPrivate: true, ownAddresses: []).refusal(Self.ip(text)) == nil, "\(text) with the flag")
        }
        for text in allowed {
            #expect(own.refusal(Self.ip(text)) == nil, "\(text) is refused: \(own.refusal(Self.ip(text)) ?? "")")
        }
        #expect(own.refusal(Self.ip("169.254.169.254"))?.contains("link-local") == true)
        #expect(own.refusal(Self.ip("fd00::1"))?.contains("RFC 4193") == true)
    }

    /// The server's own addresses are refused even when public, in both IPv6 forms of an
    /// IPv4 one; and the host's real interface addresses are what is read by default.
    @Test func theServersOwnAddressesAreRefused() {
        let policy = ReceiverAddressPolicy(allowPrivate: false, ownAddresses: [Self.ip("203.0.113.9"), Self.ip("2001:db8::9")])
        #expect(policy.refusal(Self.ip("203.0.113.9")) == "one of this server's own addresses")
        #expect(policy.refusal(Self.ip("::ffff:203.0.113.9")) == "one of this server's own addresses")
        #expect(policy.refusal(Self.ip("2001:db8::9")) == "one of this server's own addresses")
        #expect(policy.refusal(Self.ip("203.0.113.10")) == nil)
        let interfaces = ReceiverAddressPolicy.interfaceAddresses()
        #expect(interfaces.contains(Self.ip("127.0.0.1")), "\(interfaces)")
        for address in interfaces {
            #expect(ReceiverAddressPolicy(allowPrivate: false).refusal(address) != nil, "\(address)")
        }
    }

    static func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Settings {
        try Settings.parse(arguments: arguments, environment: environment)
    }

    /// A URL that names a refused address is refused at start, with a message that names
    /// the flag; `--webhook-allow-private true` (or its variable) lets it through. A host
    /// name is checked at each delivery instead (WebhookTests).
    @Test func aLiteralRefusedAddressIsRefusedAtStart() throws {
        for url in ["http://user:pw@127.0.0.1:9/h?token=abc", "http://10.1.2.3/h", "https://169.254.169.254/latest", "http://[::1]:8080/",
                    "http://[fd00::5]/", "http://[::ffff:192.168.0.1]/", "http://0.0.0.0:80/", "http://224.0.0.1/"] {
            do {
                _ = try Self.parse(["--webhook", url])
                Issue.record("\(url) was accepted")
            } catch let error as Settings.Invalid {
                #expect(error.description.contains("--webhook-allow-private true"), "\(error)")
                // The message names the receiver without what may be secret in its URL.
                #expect(!error.description.contains("token=abc") && !error.description.contains("pw@"), "\(error)")
            }
            #expect(try Self.parse(["--webhook", url, "--webhook-allow-private", "true"]).webhooks.allowPrivate)
            #expect(try Self.parse(["--webhook", url], ["OUTPOST_WEBHOOK_ALLOW_PRIVATE": "true"]).webhooks.targets.count == 1)
        }
        #expect(try Self.parse(["--webhook", "https://93.184.216.34/h", "--webhook", "https://hooks.example.com/h"]).webhooks.targets.count == 2)
        #expect(try Self.parse([]).webhooks.allowPrivate == false)
        #expect(throws: Settings.Invalid.self) { try Self.parse(["--webhook-allow-private", "maybe"]) }
    }
}
