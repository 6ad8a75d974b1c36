"""What schemathesis needs to run openapi/outpost.yaml that its configuration cannot say
(loaded by Tests/OutpostServerTests/SchemathesisTests.swift through SCHEMATHESIS_HOOKS)."""

import schemathesis

# A tus PATCH body (docs/media.md, "tus") is raw bytes under the media type tus 1.0.0
# gives it; schemathesis sends them as it sends application/octet-stream.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")
