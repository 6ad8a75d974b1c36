import Foundation
import OutpostCore
import OutpostCrypto

/// One device's stores for several spaces: a field worker assigned to several
/// organisations (docs/client.md, "Many spaces").
///
/// Each space has its own store file, `<directory>/<space>.sqlite`: one file per space keeps
/// a space's history, queue, epoch and encryption apart, and lets one be detached, backed
/// up or removed without touching the others. `sync()` syncs the attached spaces in turn;
/// each store's own sync gate is the lock of its space, so a scheduler's sync of one space
/// and this call's never run at once. A failure in one space (refused, offline, a store
/// that cannot open) never stops the others: the report is per space.
///
/// ```swift
/// let client = OutpostClient(directory: appSupport, baseURL: url, token: { _ in tokens.current })
/// try await client.attach(spaces: OutpostClient.spaces(inToken: tokens.current))
/// for line in await client.sync() { print(line.space, line.outcome) }
/// let store = try await client.store(for: "acme")
/// ```
///
/// A space that leaves the list (`attach` without it) is detached: its store is closed and
/// no longer synced, and its file stays, with any unsent edits readable through
/// `detachedStore(for:)`. Nothing is ever deleted by this type; `remove(space:)` does that
/// when the app asks, and refuses while edits are unsent.
public actor OutpostClient {
    /// What one space's sync did.
    public struct SpaceReport: Sendable {
        public enum Outcome: Sendable {
            case synced(SyncReport)
            case failed(any Error)
        }

        public let space: String
        public let outcome: Outcome

        /// True when the space synced.
        public var succeeded: Bool {
            if case .synced = outcome { return true }
            return false
        }
    }

    /// The directory of the store files.
    public nonisolated let directory: String
    private let makeTransport: @Sendable (String) -> (any SyncTransport)?
    private let configure: @Sendable (inout OutpostStore.Configuration) -> Void
    private var stores: [String: OutpostStore] = [:]
    private var attached: [String] = []

    /// A client whose stores live in `directory` and sync through `transport(space)`;
    /// `configure` adjusts each store's configuration (its resolver, encryption, ...).
    public init(directory: String, transport: @escaping @Sendable (_ space: String) -> (any SyncTransport)?,
                configure: @escaping @Sendable (inout OutpostStore.Configuration) -> Void = { _ in }) {
        self.directory = directory
        self.makeTransport = transport
        self.configure = configure
    }

    /// A client over HTTP: one `HTTPSyncTransport` per space, sharing `token`.
    public init(directory: String, baseURL: URL, token: @escaping @Sendable (_ refresh: Bool) async throws -> String?,
                configure: @escaping @Sendable (inout OutpostStore.Configuration) -> Void = { _ in }) {
        self.init(directory: directory, transport: { _ in HTTPSyncTransport(baseURL: baseURL, token: token) }, configure: configure)
    }

    /// The spaces a token's `spaces` claim names, read without checking the signature (the
    /// server checks it). Entries with a wildcard (`*`, `team-*`) name no space to open and
    /// are left out: the app lists those spaces itself.
    public static func spaces(inToken token: String) -> [String] {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64.decodeURL(String(parts[1])),
              case .array(let list)? = (try? JSONParser.parse(payload))?["spaces"] else { return [] }
        var seen = Set<String>()
        return list.compactMap(\.stringValue).filter { !$0.contains("*") && Names.isValidSpace($0) && seen.insert($0).inserted }
    }

    /// The store file of `space`.
    public nonisolated func path(for space: String) -> String {
        (directory as NSString).appendingPathComponent("\(space).sqlite")
    }

    /// Makes `spaces` the attached ones, in that order: stores open on first use (by
    /// `sync()` or `store(for:)`); a space no longer listed is detached (its store closed,
    /// its file kept). Throws for a name that is not a space.
    public func attach(spaces: [String]) async throws {
        for space in spaces where !Names.isValidSpace(space) { throw OutpostError.invalidName("invalid space name \"\(space)\"") }
        var seen = Set<String>()
        let wanted = spaces.filter { seen.insert($0).inserted }
        for (space, store) in stores where !seen.contains(space) {
            await store.close()
            stores[space] = nil
        }
        attached = wanted
    }

    /// The attached spaces, in sync order.
    public var spaces: [String] { attached }

    /// Spaces with a store file in the directory that are not attached, with their unsent
    /// edits' count (nil when the file cannot be read).
    public func detached() async -> [(space: String, pending: Int?)] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var out: [(String, Int?)] = []
        for file in files.sorted() where file.hasSuffix(".sqlite") {
            let space = String(file.dropLast(".sqlite".count))
            guard Names.isValidSpace(space), !attached.contains(space) else { continue }
            let pending: Int? = try? await withStore(space) { try await $0.status().pending }
            out.append((space, pending))
        }
        return out
    }

    /// The store of an attached space, opened when it is not yet.
    public func store(for space: String) throws -> OutpostStore {
        guard attached.contains(space) else { throw OutpostError.invalidName("space \(space) is not attached") }
        if let store = stores[space] { return store }
        let store = try open(space, transport: makeTransport(space))
        stores[space] = store
        return store
    }

    /// Runs `body` on the store of a detached space, opened without a transport (nothing is
    /// sent), then closes it: the app reads, exports or discards what it holds.
    public func withStore<T: Sendable>(_ space: String, _ body: (OutpostStore) async throws -> T) async throws -> T {
        guard !attached.contains(space) else { return try await body(try store(for: space)) }
        guard FileManager.default.fileExists(atPath: path(for: space)) else { throw OutpostError.invalidName("space \(space) has no store here") }
        let store = try open(space, transport: nil)
        do {
            let value = try await body(store)
            await store.close()
            return value
        } catch {
            await store.close()
            throw error
        }
    }

    /// Removes a detached space's store file. Refuses while it holds unsent edits (they
    /// would be lost), unless `discardingUnsent`.
    public func remove(space: String, discardingUnsent: Bool = false) async throws {
        guard !attached.contains(space) else { throw OutpostError.invalidName("space \(space) is attached: detach it first") }
        let pending = try await withStore(space) { try await $0.status().pending }
        guard pending == 0 || discardingUnsent else {
            throw OutpostError.storage("space \(space) holds \(pending) unsent edits; remove(space:discardingUnsent: true) discards them")
        }
        for suffix in ["", "-wal", "-shm", "-device"] { try? FileManager.default.removeItem(atPath: path(for: space) + suffix) }
    }

    /// Syncs every attached space in turn and reports each. Never throws: a space that
    /// fails is reported failed and the next one syncs.
    public func sync() async -> [SpaceReport] {
        var reports: [SpaceReport] = []
        for space in attached {
            do {
                let report = try await store(for: space).sync()
                reports.append(SpaceReport(space: space, outcome: .synced(report)))
            } catch {
                reports.append(SpaceReport(space: space, outcome: .failed(error)))
            }
        }
        return reports
    }

    /// Closes every open store.
    public func close() async {
        for store in stores.values { await store.close() }
        stores = [:]
    }

    private func open(_ space: String, transport: (any SyncTransport)?) throws -> OutpostStore {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = OutpostStore.Configuration(space: space)
        configure(&configuration)
        configuration.space = space
        return try OutpostStore(path: path(for: space), configuration: configuration, transport: transport)
    }
}
