import Foundation
import OutpostTestBasics
import Testing

/// `Watched`, what the tests await instead of polling: a wait ends on the change that
/// meets it, at once when already met, and with `NotReached` or the cancellation otherwise.
@Suite("Watched: a state a test awaits")
struct WatchedTests {
    @Test func aWaitEndsOnTheChangeThatMeetsItFromAnotherThread() async throws {
        let count = Watched(0)
        let thread = Thread { for _ in 0..<3 { count.update { $0 += 1 } } }
        thread.start()
        #expect(try await count.until("three changes") { $0 == 3 } == 3)
        #expect(try await count.until("already met") { $0 >= 1 } == 3, "a met condition returns at once")
    }

    @Test func aWaitNotMetThrowsNotReachedNamingWhatItAwaited() async {
        let count = Watched(0)
        do {
            try await count.until("a change that never comes", within: .milliseconds(1)) { $0 == 1 }
            Issue.record("the wait ended without its change")
        } catch let error as NotReached {
            #expect(error.description.contains("a change that never comes"), "\(error)")
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test func aCancelledWaitThrowsCancellation() async {
        let count = Watched(0)
        let wait = Task { try await count.until("a change that never comes") { $0 == 1 } }
        wait.cancel()
        await #expect(throws: CancellationError.self) { try await wait.value }
    }
}
