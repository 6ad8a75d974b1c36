import OutpostCore
import OutpostHTTP

extension SyncService {
    /// The sync routes (docs/protocol.md sections 4 and 5).
    public func register(_ router: inout Router) {
        router.add(.POST, "/v1/spaces/{space}/push", bodyLimit: limits.maxRequestBytes,
                   preBody: { [self] head, parameters in try await authorizePush(head, parameters) },
                   handler: { [self] request in try await push(request) })
        router.add(.GET, "/v1/spaces/{space}/pull", bodyLimit: 0,
                   preBody: { [self] head, parameters in try await authorizePull(head, parameters) },
                   handler: { [self] request in try await pull(request) })
    }
}
