import Testing
@testable import Outpost

/// The keychain's answers as `KeychainKeyStore` reads them (`KeychainStatus`, portable; the
/// Security calls are Apple-only): the steps of a save and the errors a failure becomes.
@Suite("Keychain answers")
struct KeychainStatusTests {
    @Test func aSaveUpdatesAddsWhenTheItemIsMissingAndFailsOtherwise() {
        #expect(KeychainStatus(0).afterUpdate() == .done)
        #expect(KeychainStatus(-25300).afterUpdate() == .add, "no item yet: it is added")
        #expect(KeychainStatus(0).afterAdd() == .done)
        guard case .fail(let locked) = KeychainStatus(-25308).afterUpdate() else { Issue.record("a locked device must fail the save"); return }
        #expect(locked.description.contains("locked since it started") && locked.description.contains("-25308"))
        guard case .fail(let entitlement) = KeychainStatus(-34018).afterAdd() else { Issue.record("a missing entitlement must fail the add"); return }
        #expect(entitlement.description.contains("not entitled"))
        guard case .fail(let other) = KeychainStatus(-25299, message: "The specified item already exists in the keychain.").afterAdd() else {
            Issue.record("a duplicate must fail the add"); return
        }
        #expect(other.description == EncryptionError.keyFile("keychain write failed: The specified item already exists in the keychain. (OSStatus -25299)").description)
        #expect(KeychainStatus(-1).error("read").description.contains("OSStatus -1"))
    }
}
