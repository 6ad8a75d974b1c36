import Foundation
import Testing

/// The SDK's privacy manifest (`Client/Outpost/PrivacyInfo.xcprivacy`, a resource of the
/// `Outpost` target) declares every category of Apple's required-reason APIs that the SDK's
/// sources call, with reasons Apple defines for that category, and nothing it does not call.
@Suite("The SDK's privacy manifest")
struct PrivacyManifestTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Apple's required-reason API categories: how a call shows in Swift source, and the
    /// reasons an SDK may give ("Describing use of required reason API").
    static let categories: [(name: String, calls: String, reasons: Set<String>)] = [
        ("NSPrivacyAccessedAPICategoryFileTimestamp",
         #"\b(f|l)?stat(at)?\(|getattrlist|\.(creation|modification)Date\b|fileModificationDate|(contentModification|creation)DateKey|NSFile(Creation|Modification)Date"#,
         ["DDA9.1", "C617.1", "3B52.1", "0A2A.1"]),
        ("NSPrivacyAccessedAPICategorySystemBootTime", #"systemUptime|mach_absolute_time"#, ["35F9.1", "8FFB.1", "3D61.1"]),
        ("NSPrivacyAccessedAPICategoryDiskSpace",
         #"volume(Available|Total)Capacity|NSFileSystem(Free)?Size|\.systemFreeSize|\.systemSize|\b(f)?statv?fs\("#,
         ["85F4.1", "E174.1", "7D9E.1", "B728.1"]),
        ("NSPrivacyAccessedAPICategoryActiveKeyboards", #"activeInputModes"#, ["3EC4.1", "54BD.1"]),
        ("NSPrivacyAccessedAPICategoryUserDefaults", #"\bUserDefaults\b|NSUserDefaults"#, ["CA92.1", "1C8F.1", "C56D.1", "AC6B.1"]),
    ]

    /// Every module of Swift source the `Outpost` product compiles into an app (the SDK and
    /// the modules under it; `PackageGraphTests` holds what it reaches): a required-reason
    /// call in any of them is the app's to declare.
    static let modules = ["Client/Outpost", "Sources/OutpostCore", "Sources/OutpostSQLite", "Sources/OutpostCrypto", "Sources/OutpostCompression"]

    @Test func theManifestDeclaresTheRequiredReasonAPIsTheSDKCallsAndOnlyThose() throws {
        let sdk = Self.root.appendingPathComponent("Client/Outpost")
        var used: [String: [String]] = [:]
        for module in Self.modules {
            let directory = Self.root.appendingPathComponent(module)
            #expect(FileManager.default.fileExists(atPath: directory.path), "\(module) is gone: update the list")
            let files = try #require(FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil))
            for case let file as URL in files where file.pathExtension == "swift" {
                let code = try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
                    .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
                for category in Self.categories where code.range(of: category.calls, options: .regularExpression) != nil {
                    used[category.name, default: []].append("\(module)/\(file.lastPathComponent)")
                }
            }
        }
        #expect(used["NSPrivacyAccessedAPICategoryFileTimestamp"] != nil, "the SDK stats files (MediaFiles.swift): the scan must see it")

        let data = try Data(contentsOf: sdk.appendingPathComponent("PrivacyInfo.xcprivacy"))
        let manifest = try #require(try PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any])
        #expect(manifest["NSPrivacyTracking"] as? Bool == false)
        #expect((manifest["NSPrivacyTrackingDomains"] as? [Any])?.isEmpty == true)
        let declared = try #require(manifest["NSPrivacyAccessedAPITypes"] as? [[String: Any]])
        var names: Set<String> = []
        for entry in declared {
            let name = try #require(entry["NSPrivacyAccessedAPIType"] as? String)
            let reasons = Set(try #require(entry["NSPrivacyAccessedAPITypeReasons"] as? [String]))
            let category = try #require(Self.categories.first { $0.name == name }, "\(name) is not a category Apple defines")
            #expect(!reasons.isEmpty && reasons.isSubset(of: category.reasons), "\(name): \(reasons) are not all reasons of that category")
            names.insert(name)
        }
        #expect(names == Set(used.keys), "declared \(names.sorted()), called \(used.mapValues { Set($0).sorted() })")
    }
}
