"""Opens the encryption formats' fixtures from docs/encryption.md ("Formats") alone.

Written from the spec, not from the Swift code: what a web or Android client of an
end-to-end encrypted space would have to do. Python's hashlib gives scrypt and PBKDF2;
PyPI's `cryptography` gives AES-256-GCM. EncryptionSpecTests runs it with the pinned venv
of scripts/install-deps.sh:

    python open_fixtures.py Tests/OutpostCryptoTests/Fixtures

It prints one `ok` line per format and exits 0, or names what did not open and exits 1.
"""
import base64
import hashlib
import json
import os
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class FormatError(Exception):
    pass


def b64url(text):
    """base64url (RFC 4648 section 5), written without padding."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def canonical(value):
    """Canonical JSON: UTF-8, no whitespace, members sorted at every level."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")


def gcm_open(key, nonce, sealed, aad):
    """AES-256-GCM: sealed is the ciphertext followed by the 16-byte tag."""
    if len(key) != 32 or len(nonce) != 12 or len(sealed) < 16:
        raise FormatError("AES-256-GCM needs a 32-byte key, a 12-byte nonce and a 16-byte tag")
    return AESGCM(key).decrypt(nonce, sealed, aad)


def open_keyring_export(text, passphrase):
    """The keyring of a passphrase export: (space, {"current": kid, "keys": {kid: bytes}})."""
    export = json.loads(text)
    if export.get("outpost") != "keyring" or export.get("v") != 1:
        raise FormatError("not an Outpost keyring export of version 1")
    space = export["space"]
    context = b"outpost-keyring/1\x00" + space.encode("utf-8")
    salt, kdf = b64url(export["salt"]), export["kdf"]
    password = passphrase.encode("utf-8")  # as given, not normalized
    if kdf["name"] == "scrypt":
        n, r, p = kdf["n"], kdf["r"], kdf["p"]
        if n < 2 ** 17 or n & (n - 1) or r < 8 or p < 1 or 128 * r * n > 2 ** 30 or n * r * p > 2 ** 26:
            raise FormatError("scrypt parameters outside the accepted range")
        # hashlib counts 128·r·(N + p) bytes plus its own; 2^17 · 8 needs 128 MiB.
        wrapping = hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=128 * r * (n + p) + 2 ** 24, dklen=32)
    elif kdf["name"] == "pbkdf2-sha256":
        c = kdf["iterations"]
        if not 600_000 <= c <= 60_000_000:
            raise FormatError("PBKDF2 iterations outside the accepted range")
        wrapping = hashlib.pbkdf2_hmac("sha256", password, salt, c, dklen=32)
    else:
        raise FormatError("unknown key derivation " + repr(kdf["name"]))
    transport = gcm_open(wrapping, b64url(export["nonce"]), b64url(export["sealed"]), context)
    ring = json.loads(gcm_open(transport, b64url(export["ringNonce"]), b64url(export["ring"]), context))
    keys = {kid: b64url(key) for kid, key in ring["keys"].items()}
    if ring["current"] not in keys or any(len(k) != 32 for k in keys.values()):
        raise FormatError("the keyring's current key is missing or a key is not 32 bytes")
    return space, {"current": ring["current"], "keys": keys}


def open_record(space, collection, record_id, data, keys, clear_fields):
    """The record a sealed record's wire data holds."""
    envelope = data["$e2e"]
    if envelope.get("v") != 1:
        raise FormatError("sealed record of an unknown version")
    kid = envelope["kid"]
    clear = {name: value for name, value in data.items() if name != "$e2e"}
    if set(clear) - set(clear_fields):
        raise FormatError("a field in clear that the app keeps sealed")
    aad = canonical(["outpost-e2e", 1, space, collection, record_id, kid, clear])
    record = json.loads(gcm_open(keys[kid], b64url(envelope["nonce"]), b64url(envelope["ct"]), aad))
    record.update(clear)
    return record


def open_media(sealed, reference, space, keys):
    """The file a sealed media stream holds, checked against the reference a record keeps."""
    if hashlib.sha256(sealed).hexdigest() != reference["mediaId"]:
        raise FormatError("the sealed bytes are not the ones mediaId names")
    encryption = reference["encryption"]
    kid, prefix, size = encryption["kid"], b64url(encryption["prefix"]), encryption["segmentSize"]
    if len(prefix) != 7 or not 1 <= size <= 2 ** 24:
        raise FormatError("the reference's prefix or segment size is malformed")
    aad = canonical(["outpost-e2e-media", 1, space, kid])
    whole = size + 16
    # Every segment but the last is whole; the last is shorter (16 to size + 15 bytes).
    count = len(sealed) // whole + 1
    if len(sealed) - (count - 1) * whole < 16:
        raise FormatError("the stream ends without its last segment")
    plain = bytearray()
    for index in range(count):
        last = index == count - 1
        nonce = prefix + index.to_bytes(4, "big") + (b"\x01" if last else b"\x00")
        plain += gcm_open(keys[kid], nonce, sealed[index * whole:(index + 1) * whole], aad)
    if len(plain) != reference["size"]:
        raise FormatError("the opened file is not the reference's size")
    return bytes(plain)


def main(directory):
    def read(name):
        with open(os.path.join(directory, name), "rb") as f:
            return f.read()

    inputs = json.loads(read("inputs.json"))
    expected_ring = inputs["keyring"]

    space, ring = open_keyring_export(read("keyring-export.json").decode("utf-8"), inputs["passphrase"])
    try:
        open_keyring_export(read("keyring-export.json").decode("utf-8"), inputs["passphrase"] + " ")
        raise FormatError("a wrong passphrase opened the export")
    except InvalidTag:
        pass
    if space != expected_ring["space"] or ring["current"] != expected_ring["current"] \
            or ring["keys"] != {kid: b64url(key) for kid, key in expected_ring["keys"].items()}:
        raise FormatError("the export holds another keyring than inputs.json's")
    print("keyring-export.json: ok (%d keys, current %s)" % (len(ring["keys"]), ring["current"]))

    fixture = json.loads(read("sealed-record.json"))
    record = open_record(fixture["space"], fixture["collection"], fixture["id"], fixture["data"], ring["keys"],
                         inputs["record"]["clearFields"])
    if record != inputs["record"]["content"]:
        raise FormatError("the record opened to %r" % record)
    try:
        open_record(fixture["space"], fixture["collection"], fixture["id"] + "x", fixture["data"], ring["keys"],
                    inputs["record"]["clearFields"])
        raise FormatError("the record opened under another id")
    except InvalidTag:
        pass
    print("sealed-record.json: ok")

    media = inputs["media"]
    plain = open_media(read("sealed-media.bin"), json.loads(read("media-reference.json")), space, ring["keys"])
    if plain != bytes(i % 251 for i in range(media["length"])) or hashlib.sha256(plain).hexdigest() != media["sha256"]:
        raise FormatError("the media opened to other bytes")
    print("sealed-media.bin: ok (%d bytes)" % len(plain))


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except (FormatError, InvalidTag, KeyError, ValueError) as error:
        print("failed: %s: %s" % (type(error).__name__, error), file=sys.stderr)
        sys.exit(1)
