// outpost-server: serve, token, rotate-epoch (docs/protocol.md section 8), backup, restore, check, healthcheck. The commands live
// in OutpostServer.ServerApp so tests can run them in-process.
import Foundation
import OutpostServer

// Everything this process creates is its user's alone, whatever umask it was started with:
// the store, media and secrets are made private explicitly (DataDirectory), and this covers
// what libraries create on their own, such as Foundation's caches under $HOME, which in the
// image is the data volume (docs/security.md, "What the server keeps, and where").
umask(0o077)
exit(await ServerApp.main(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
