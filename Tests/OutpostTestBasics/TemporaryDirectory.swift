import Foundation

/// A directory under the system's temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let url: URL
    public var path: String { url.path }

    public init(prefix: String = "outpost-test") throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    public func appending(_ component: String) -> String {
        url.appendingPathComponent(component).path
    }

    public func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}

/// Runs `body` with a fresh temporary directory and removes it afterwards, also when
/// `body` throws.
public func withTemporaryDirectory<T>(prefix: String = "outpost-test", _ body: (TemporaryDirectory) async throws -> T) async throws -> T {
    let dir = try TemporaryDirectory(prefix: prefix)
    do {
        let result = try await body(dir)
        dir.remove()
        return result
    } catch {
        dir.remove()
        throw error
    }
}
