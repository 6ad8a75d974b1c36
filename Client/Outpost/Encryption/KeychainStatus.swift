/// What the keychain's answers mean for `KeychainKeyStore`, kept apart from the Security
/// framework's calls (Apple-only) so that Linux tests them: the status codes it meets
/// (`OSStatus` values, from Security's SecBase.h), the step a save takes after each
/// answer, and the error a failure becomes, with the two an app meets most named plainly.
enum KeychainStatus: Sendable, Hashable {
    case success
    case itemNotFound
    /// The device has been locked since it started (`errSecInteractionNotAllowed`).
    case interactionNotAllowed
    /// The app lacks the access group's entitlement (`errSecMissingEntitlement`).
    case missingEntitlement
    /// Any other code, with the framework's message for it when it has one.
    case other(Int32, message: String?)

    init(_ code: Int32, message: String? = nil) {
        switch code {
        case 0: self = .success
        case -25300: self = .itemNotFound
        case -25308: self = .interactionNotAllowed
        case -34018: self = .missingEntitlement
        default: self = .other(code, message: message)
        }
    }

    /// What a save does after the keychain answered its update: done, add the item (there
    /// was none), or fail.
    enum SaveStep: Equatable {
        case done
        case add
        case fail(EncryptionError)
    }

    /// The step after an update (`SecItemUpdate`) of the keyring's item.
    func afterUpdate() -> SaveStep {
        switch self {
        case .success: .done
        case .itemNotFound: .add
        default: .fail(error("write"))
        }
    }

    /// The step after adding the item (`SecItemAdd`).
    func afterAdd() -> SaveStep {
        self == .success ? .done : .fail(error("write"))
    }

    /// The error of a failed `operation` ("read", "write").
    func error(_ operation: String) -> EncryptionError {
        let reason: String, code: Int32
        switch self {
        case .success: return .keyFile("keychain \(operation) failed: no error")
        case .itemNotFound: (reason, code) = ("the item is not there", -25300)
        case .interactionNotAllowed:
            (reason, code) = ("the device has been locked since it started: the keys can be read after its first unlock", -25308)
        case .missingEntitlement:
            (reason, code) = ("the app is not entitled to this keychain access group (or, on macOS, to the data protection keychain)", -34018)
        case .other(let c, let message): (reason, code) = (message ?? "OSStatus \(c)", c)
        }
        return .keyFile("keychain \(operation) failed: \(reason) (OSStatus \(code))")
    }
}
