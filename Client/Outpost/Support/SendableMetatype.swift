// `SendableMetatype` (SE-0470) arrived with Swift 6.2: from then on a generic function that
// sends `T.self` to another isolation domain says so, as `Configuration.validate` does.
// Before 6.2 the protocol does not exist and every metatype is Sendable, so the constraint
// is `Any` there: the same source builds with the Swift 6.0 and 6.1 compilers (Xcode 16.0
// to 16.4). The guard is swift-nio's (`NIOCoreSendableMetatype.swift`).
#if compiler(>=6.2)
@_documentation(visibility: internal)
public typealias OutpostSendableMetatype = SendableMetatype
#else
@_documentation(visibility: internal)
public typealias OutpostSendableMetatype = Any
#endif
