import Foundation
import OutpostCore
import OutpostTestBasics
import Testing
@testable import Outpost
#if canImport(OutpostTestSupport)
import OutpostTestSupport

/// The encryption formats as other clients meet them: a key exported by this Linux build
/// of the `outpost` command imports through `SpaceKeys.import` (the path an app takes on
/// every platform), and a program in another language opens the format fixtures from
/// docs/encryption.md alone.
@Suite struct PortableFormatTests {
    static let fixtures = PinnedTools.root.appendingPathComponent("Tests/OutpostCryptoTests/Fixtures").path

    /// `outpost key export` (scrypt, the default) by the Linux CLI, then an import by the SDK
    /// into another key store: the same keyring, current key and all.
    @Test func aKeyExportedByTheCLIImportsThroughTheSDK() async throws {
        try await withTemporaryDirectory(prefix: "outpost-export") { dir in
            let cliKeys = dir.appending("cli.keys")
            let base = ["--store", dir.appending("cli.sqlite"), "--space", "survey", "--key-file", cliKeys]
            let environment = Subprocess.environment(adding: ["OUTPOST_KEY_PASSPHRASE": "a passphrase from the command line"]) {
                ["OUTPOST_STORE", "OUTPOST_SERVER", "OUTPOST_SPACE", "OUTPOST_TOKEN", "OUTPOST_KEY_FILE"].contains($0)
            }
            let outpost = BuildProducts.executable("outpost-cli")
            for command in [["key", "create"], ["key", "rotate"]] {
                let run = try await blocking { try Subprocess.run(outpost, base + command, environment: environment) }
                #expect(run.status == 0, "\(command): \(run.error)")
            }
            let export = try await blocking { try Subprocess.run(outpost, base + ["key", "export"], environment: environment) }
            #expect(export.status == 0, "\(export.error)")
            let document = try JSONParser.parse(Array(export.output.utf8))
            #expect(document["kdf"] == ["name": "scrypt", "n": 131072, "r": 8, "p": 1])

            let appKeys = FileKeyStore(path: dir.appending("app.keys"))
            let space = try await SpaceKeys.import(export.output, passphrase: "a passphrase from the command line", into: appKeys)
            #expect(space == "survey")
            let exported = try #require(try FileKeyStore(path: cliKeys).keyring(space: "survey"))
            #expect(exported.keys.count == 2)
            #expect(try appKeys.keyring(space: "survey") == exported)
        }
    }

    /// Tests/encryption-spec/open_fixtures.py, written from docs/encryption.md ("Formats"),
    /// opens the passphrase export, the sealed record and the sealed media stream, with
    /// Python's hashlib and PyPI's cryptography at the version scripts/install-deps.sh pins.
    @Test func pythonOpensTheFixturesFromTheSpec() async throws {
        let version = try PinnedTools.version("cryptography")
        let python = PinnedTools.venvPath("cryptography", version: version, "python")
        guard FileManager.default.isExecutableFile(atPath: python) else {
            Issue.record("\(python) is missing: scripts/install-deps.sh test installs cryptography \(version)")
            return
        }
        let script = PinnedTools.root.appendingPathComponent("Tests/encryption-spec/open_fixtures.py").path
        let run = try await blocking { try Subprocess.run(python, [script, Self.fixtures]) }
        #expect(run.status == 0, "\(run.output)\(run.error)")
        let lines = run.output.split(separator: "\n").map(String.init)
        for name in ["keyring-export.json", "sealed-record.json", "sealed-media.bin"] {
            #expect(lines.contains { $0.hasPrefix("\(name): ok") }, "\(name) did not open: \(run.output)\(run.error)")
        }
    }
}
#endif
