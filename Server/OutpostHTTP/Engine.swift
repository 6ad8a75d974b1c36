// The HTTP/1.1 engine. See docs/architecture.md.
