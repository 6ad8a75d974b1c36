"""Uploads one file to an Outpost server's tus endpoint with tuspy, the standard Python tus
client, and prints what happened as one JSON line on standard output. TusTests runs it
with the venv's python that scripts/install-deps.sh test makes (.build/tools/tuspy-<version>).

The upload URL is kept in a tuspy URL store (--store), keyed by the file's fingerprint as
tuspy does it, so a second run with the same store resumes the upload from the server's
offset (tuspy HEADs the stored URL) instead of starting over.

    python tus_client.py --endpoint http://127.0.0.1:PORT/v1/spaces/s/tus --token JWT \
        --file PATH --chunk-size 65536 [--checksum] [--store PATH] [--stop-after N] \
        [--metadata KEY=VALUE ...]

Printed: {"status": "complete" | "stopped" | "failed", "url", "startOffset" (the offset the
run began at: 0, or the server's for a resumed upload), "offset" (after the run), "sent"
(body bytes this run's PATCHes carried, answered or not), "patches", "mediaId" (the
Outpost-Media-Id of the last answer), "httpStatus" and "error" when it failed}. Exit 0 when
complete or stopped as asked, 3 when tuspy failed.
"""

import argparse
import hashlib
import json
import sys

from tusclient import client
from tusclient.exceptions import TusCommunicationError, TusUploadFailed
from tusclient.storage.filestorage import FileStorage
from tusclient.uploader import Uploader


class SHA256Uploader(Uploader):
    """tuspy's uploader with its checksum algorithm set to SHA-256 (its default is SHA-1):
    the name and the hash function it sends in Upload-Checksum."""

    CHECKSUM_ALGORITHM_PAIR = ("sha256", hashlib.sha256)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--chunk-size", type=int, required=True)
    parser.add_argument("--checksum", action="store_true", help="send Upload-Checksum: sha256 with every PATCH")
    parser.add_argument("--store", help="tuspy URL store file: resume the upload it holds for this file")
    parser.add_argument("--stop-after", type=int, help="stop (exit 0) after this many PATCHes")
    parser.add_argument("--metadata", action="append", default=[], help="KEY=VALUE, sent in Upload-Metadata")
    args = parser.parse_args()

    metadata = dict(item.split("=", 1) for item in args.metadata)
    tus = client.TusClient(args.endpoint, headers={"Authorization": "Bearer " + args.token})
    result = {"status": "failed", "url": None, "startOffset": None, "offset": None, "sent": 0, "patches": 0, "mediaId": None}
    uploader = None
    try:
        options = {"file_path": args.file, "chunk_size": args.chunk_size, "metadata": metadata, "upload_checksum": args.checksum}
        if args.store:
            options.update(store_url=True, url_storage=FileStorage(args.store))
        uploader = SHA256Uploader(client=tus, **options)
        result["startOffset"] = uploader.offset
        size = uploader.get_file_size()
        if uploader.url is None:
            uploader.set_url(uploader.create_url())
            uploader.offset = 0
        result["url"] = uploader.url
        while uploader.offset < size:
            if args.stop_after is not None and result["patches"] >= args.stop_after:
                result["status"] = "stopped"
                break
            result["patches"] += 1
            result["sent"] += uploader.get_request_length()
            uploader.upload_chunk()
            result["mediaId"] = uploader.request.response_headers.get("outpost-media-id")
        else:
            result["status"] = "complete"
        result["offset"] = uploader.offset
    except (TusCommunicationError, TusUploadFailed) as error:
        result["httpStatus"] = error.status_code
        result["error"] = str(error)[:300]
        if uploader is not None:
            result["url"] = uploader.url
            result["offset"] = uploader.offset
        print(json.dumps(result))
        return 3
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
