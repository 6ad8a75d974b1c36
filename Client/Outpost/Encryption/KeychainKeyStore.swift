// Apple platforms only: the Security framework's keychain. Never compiled in this
// repository (docs/client.md, "Platforms"); the rules it keeps (a keyring per space, as
// JSON) are `KeyStore`'s, which `FileKeyStore` runs on Linux.
#if canImport(Security)
import Foundation
import OutpostCore
import Security

/// Keyrings in the keychain: one generic password item per space (service
/// `dev.outpost.keyring`, account = the space).
///
/// - Readable from the device's first unlock after it starts until it shuts down, so a
///   background sync of a locked phone can open an encrypted store
///   (`kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly`).
/// - Never leaves the device: not synced through iCloud Keychain
///   (`kSecAttrSynchronizable` false) and, being `ThisDeviceOnly`, not restored from a
///   backup onto another device; a store restored there says so
///   (`EncryptionError.keysNotOnThisDevice`) until its keys are imported.
/// - On macOS, in the data protection keychain (`kSecUseDataProtectionKeychain`), the one
///   iOS uses, with the same access rules, rather than the login keychain, whose items
///   prompt the user and ignore the accessibility class. That keychain needs the app to be
///   signed with an application identifier (any app from Xcode is); a command-line tool
///   without one gets `errSecMissingEntitlement` and should use `FileKeyStore`.
/// - `accessGroup` shares the items with the app's extensions: a keychain access group
///   (`$(AppIdentifierPrefix)com.example.shared`) or an App Group id, listed in the
///   entitlements of the app and of each extension. nil: the app's default group, which an
///   extension cannot read.
public struct KeychainKeyStore: KeyStore {
    /// The items' service name.
    public let service: String
    /// The keychain access group the items are in, or nil for the app's default one.
    public let accessGroup: String?

    public init(service: String = "dev.outpost.keyring", accessGroup: String? = nil) {
        self.service = service
        self.accessGroup = accessGroup
    }

    public func keyring(space: String) throws -> Keyring? {
        var query = item(space)
        query[kSecReturnData as String] = true
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        var result: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &result)
        let answer = Self.status(status)
        if answer == .itemNotFound { return nil }
        guard answer == .success, let data = result as? Data else { throw answer.error("read") }
        do { return try Keyring(json: try JSONParser.parse([UInt8](data))) } catch let e as EncryptionError { throw e } catch {
            throw EncryptionError.invalidKeyring("the keychain item of \(space) is not a keyring")
        }
    }

    public func save(_ keyring: Keyring, space: String) throws {
        let data = Data(keyring.json.encoded(canonical: true))
        // The accessibility class is set on update too: an item an earlier SDK (or another
        // app of the group) wrote with another class takes this one, so the keys are
        // readable after the first unlock, as a background sync needs.
        let changes: [String: Any] = [kSecValueData as String: data,
                                      kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly]
        switch Self.status(SecItemUpdate(item(space) as CFDictionary, changes as CFDictionary)).afterUpdate() {
        case .done: return
        case .fail(let error): throw error
        case .add:
            var added = item(space)
            added[kSecValueData as String] = data
            added[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
            if case .fail(let error) = Self.status(SecItemAdd(added as CFDictionary, nil)).afterAdd() { throw error }
        }
    }

    /// The attributes that name the item of `space` (a query, and the base of a new item).
    private func item(_ space: String) -> [String: Any] {
        var item: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: space,
            kSecAttrSynchronizable as String: false,
            kSecUseDataProtectionKeychain as String: true,
        ]
        if let accessGroup { item[kSecAttrAccessGroup as String] = accessGroup }
        return item
    }

    /// The answer's meaning (`KeychainStatus`, portable), with Security's message for it.
    private static func status(_ code: OSStatus) -> KeychainStatus {
        KeychainStatus(code, message: SecCopyErrorMessageString(code, nil) as String?)
    }
}
#endif
