#!/usr/bin/env python3
"""Checks, one by one, the S3 features Outpost's media store needs against a running S3
store, and prints `ok` or `FAIL` with what was seen for each: SigV4 header signing with a
hex payload hash and with UNSIGNED-PAYLOAD, path-style bucket URLs, multipart uploads
(create, upload part, list parts, complete, abort), ranged GET, HEAD, ListObjectsV2 and
presigned GET URLs. Exits 1 when a check failed.

Run it with boto3 from the venv scripts/install-deps.sh test makes, against the store
scripts/s3-test-server.py serve starts (it prints the settings this reads):

  scripts/s3-test-server.py serve &      # prints S3_ENDPOINT=... and the rest
  .build/tools/boto3-<version>/bin/python scripts/s3-smoke.py --endpoint http://127.0.0.1:PORT

The raw requests are signed here (`sign`, the SigV4 algorithm with only the standard
library) so that the x-amz-content-sha256 each one sends is chosen, not boto3's; boto3
checks that a standard client works with the store as configured for Outpost.
"""
import argparse
import datetime
import hashlib
import hmac
import random
import sys
import urllib.error
import urllib.parse
import urllib.request

import boto3
from botocore.client import Config
from botocore.exceptions import ClientError

MiB = 1024 * 1024
results = []


def check(name, body):
    """Runs one check; records and prints whether it held and what it saw."""
    try:
        detail = body()
        results.append((name, True))
        print('ok   %s: %s' % (name, detail))
    except Exception as error:  # a failed check is reported, and the others still run
        results.append((name, False))
        print('FAIL %s: %s: %s' % (name, type(error).__name__, str(error)[:400]))


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def sign(method, url, region, access_key, secret_key, payload_hash, headers=None):
    """The headers of a SigV4-signed (header, not query) request for `url`, with
    `payload_hash` as its x-amz-content-sha256: a hex SHA-256 or UNSIGNED-PAYLOAD."""
    parts = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime('%Y%m%dT%H%M%SZ')
    day = amz_date[:8]
    headers = dict(headers or {})
    headers.update({'host': parts.netloc, 'x-amz-date': amz_date, 'x-amz-content-sha256': payload_hash})
    names = sorted(h.lower() for h in headers)
    canonical_headers = ''.join('%s:%s\n' % (n, ' '.join(str(headers[next(h for h in headers if h.lower() == n)]).split())) for n in names)
    query = sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    canonical_query = '&'.join('%s=%s' % (urllib.parse.quote(k, safe='-_.~'), urllib.parse.quote(v, safe='-_.~')) for k, v in query)
    canonical = '\n'.join([method, urllib.parse.quote(parts.path or '/', safe='/-_.~'), canonical_query,
                           canonical_headers, ';'.join(names), payload_hash])
    scope = '%s/%s/s3/aws4_request' % (day, region)
    to_sign = '\n'.join(['AWS4-HMAC-SHA256', amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ('AWS4' + secret_key).encode()
    for part in (day, region, 's3', 'aws4_request'):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers['Authorization'] = 'AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s' % (
        access_key, scope, ';'.join(names), signature)
    del headers['host']
    return headers


def raw(method, url, headers, body=None):
    """Sends one request; returns (status, headers, body) for any status."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--endpoint', required=True)
    parser.add_argument('--access-key', default='test:tester')
    parser.add_argument('--secret-key', default='testing')
    parser.add_argument('--region', default='us-east-1')
    parser.add_argument('--bucket', default='outpost-smoke')
    args = parser.parse_args()
    endpoint, region, bucket = args.endpoint.rstrip('/'), args.region, args.bucket
    keys = (args.access_key, args.secret_key)
    rng = random.Random(20261207)  # fixed seed: the same bytes every run

    # Path-style URLs (http://host/bucket/key), SigV4; checksums only where an operation
    # requires them, as Outpost's own client will send them (the default of boto3 1.36 and
    # later, CRC32 trailers in aws-chunked bodies, is checked on its own below).
    def client(**extra):
        return boto3.client('s3', endpoint_url=endpoint, region_name=region, aws_access_key_id=keys[0], aws_secret_access_key=keys[1],
                            config=Config(signature_version='s3v4', s3={'addressing_style': 'path'}, retries={'max_attempts': 1}, **extra))
    s3 = client(request_checksum_calculation='when_required', response_checksum_validation='when_required')

    def create_and_list():
        try:
            s3.create_bucket(Bucket=bucket)
        except ClientError as error:
            expect(error.response['Error']['Code'] in ('BucketAlreadyOwnedByYou', 'BucketAlreadyExists'), error)
        names = [b['Name'] for b in s3.list_buckets()['Buckets']]
        expect(bucket in names, names)
        return 'CreateBucket, then ListBuckets shows %s' % names
    check('path-style CreateBucket and ListBuckets', create_and_list)

    small = bytes(rng.getrandbits(8) for _ in range(1000))

    def put_hex():
        url = '%s/%s/raw-hex' % (endpoint, bucket)
        status, _, text = raw('PUT', url, sign('PUT', url, region, *keys, hashlib.sha256(small).hexdigest()), small)
        expect(status == 200, (status, text[:300]))
        status, _, got = raw('GET', url, sign('GET', url, region, *keys, hashlib.sha256(b'').hexdigest()))
        expect(status == 200 and got == small, (status, len(got)))
        return 'PUT and GET signed in the Authorization header with a hex x-amz-content-sha256: 200, same bytes'
    check('SigV4 header signing, hex payload hash', put_hex)

    def put_unsigned():
        url = '%s/%s/raw-unsigned' % (endpoint, bucket)
        status, _, text = raw('PUT', url, sign('PUT', url, region, *keys, 'UNSIGNED-PAYLOAD'), small)
        expect(status == 200, (status, text[:300]))
        status, _, got = raw('GET', url, sign('GET', url, region, *keys, 'UNSIGNED-PAYLOAD'))
        expect(status == 200 and got == small, (status, len(got)))
        return 'PUT and GET with x-amz-content-sha256: UNSIGNED-PAYLOAD: 200, same bytes'
    check('SigV4 header signing, UNSIGNED-PAYLOAD', put_unsigned)

    def wrong_hash():
        url = '%s/%s/raw-wrong' % (endpoint, bucket)
        status, _, text = raw('PUT', url, sign('PUT', url, region, *keys, hashlib.sha256(b'other bytes').hexdigest()), small)
        expect(status == 400, (status, text[:300]))
        return 'a body that does not match its x-amz-content-sha256 is refused: %d %s' % (status, text[:160])
    check('payload hash verified by the store', wrong_hash)

    def bad_signature():
        url = '%s/%s/raw-hex' % (endpoint, bucket)
        headers = sign('GET', url, region, keys[0], 'not-the-secret', 'UNSIGNED-PAYLOAD')
        status, _, text = raw('GET', url, headers)
        expect(status == 403 and b'SignatureDoesNotMatch' in text, (status, text[:300]))
        return 'a wrong secret answers 403 SignatureDoesNotMatch'
    check('SigV4 signature checked', bad_signature)

    def head():
        answer = s3.head_object(Bucket=bucket, Key='raw-hex')
        expect(answer['ContentLength'] == len(small), answer)
        expect(answer['ETag'].strip('"') == hashlib.md5(small).hexdigest(), answer['ETag'])
        missing = None
        try:
            s3.head_object(Bucket=bucket, Key='no-such-key')
        except ClientError as error:
            missing = error.response['ResponseMetadata']['HTTPStatusCode']
        expect(missing == 404, missing)
        return 'HeadObject: ContentLength %d, ETag the MD5; a missing key 404' % answer['ContentLength']
    check('HEAD', head)

    def ranged():
        first = s3.get_object(Bucket=bucket, Key='raw-hex', Range='bytes=0-9')
        expect(first['Body'].read() == small[:10] and first['ContentRange'] == 'bytes 0-9/%d' % len(small), first['ContentRange'])
        expect(first['ResponseMetadata']['HTTPStatusCode'] == 206, first['ResponseMetadata']['HTTPStatusCode'])
        suffix = s3.get_object(Bucket=bucket, Key='raw-hex', Range='bytes=-5')['Body'].read()
        expect(suffix == small[-5:], suffix)
        middle = s3.get_object(Bucket=bucket, Key='raw-hex', Range='bytes=500-')['Body'].read()
        expect(middle == small[500:], len(middle))
        return "206 with Content-Range '%s'; suffix (bytes=-5) and open (bytes=500-) ranges right" % first['ContentRange']
    check('ranged GET', ranged)

    parts = [bytes(rng.getrandbits(8) for _ in range(5 * MiB)), bytes(rng.getrandbits(8) for _ in range(5 * MiB)),
             bytes(rng.getrandbits(8) for _ in range(1024))]
    whole = b''.join(parts)

    def multipart():
        upload = s3.create_multipart_upload(Bucket=bucket, Key='big', ContentType='application/octet-stream')['UploadId']
        etags = []
        for number, part in enumerate(parts, 1):
            etags.append(s3.upload_part(Bucket=bucket, Key='big', UploadId=upload, PartNumber=number, Body=part)['ETag'])
        listed = s3.list_parts(Bucket=bucket, Key='big', UploadId=upload)['Parts']
        expect([(p['PartNumber'], p['Size'], p['ETag']) for p in listed] == [(n, len(p), e) for n, (p, e) in enumerate(zip(parts, etags), 1)], listed)
        uploads = [u['UploadId'] for u in s3.list_multipart_uploads(Bucket=bucket).get('Uploads', [])]
        expect(upload in uploads, uploads)
        done = s3.complete_multipart_upload(Bucket=bucket, Key='big', UploadId=upload,
                                            MultipartUpload={'Parts': [{'PartNumber': n, 'ETag': e} for n, e in enumerate(etags, 1)]})
        expected_etag = '%s-3' % hashlib.md5(b''.join(bytes.fromhex(e.strip('"')) for e in etags)).hexdigest()
        expect(done['ETag'].strip('"') == expected_etag, (done['ETag'], expected_etag))
        got = s3.get_object(Bucket=bucket, Key='big')['Body'].read()
        expect(got == whole, len(got))
        head = s3.head_object(Bucket=bucket, Key='big')
        expect(head['ContentLength'] == len(whole), head['ContentLength'])
        across = s3.get_object(Bucket=bucket, Key='big', Range='bytes=%d-%d' % (5 * MiB - 3, 5 * MiB + 2))['Body'].read()
        expect(across == whole[5 * MiB - 3:5 * MiB + 3], len(across))
        return ('create, 3 parts (5 MiB, 5 MiB, 1 KiB), ListParts (numbers, sizes, ETags), ListMultipartUploads, '
                'complete: ETag %s (S3\'s MD5-of-MD5s-N), GET %d bytes equal, a range across parts 1-2 right' % (done['ETag'], len(got)))
    check('multipart upload', multipart)

    def abort():
        upload = s3.create_multipart_upload(Bucket=bucket, Key='aborted')['UploadId']
        s3.upload_part(Bucket=bucket, Key='aborted', UploadId=upload, PartNumber=1, Body=parts[0])
        s3.abort_multipart_upload(Bucket=bucket, Key='aborted', UploadId=upload)
        gone = None
        try:
            s3.list_parts(Bucket=bucket, Key='aborted', UploadId=upload)
        except ClientError as error:
            gone = error.response['Error']['Code']
        expect(gone == 'NoSuchUpload', gone)
        uploads = [u['UploadId'] for u in s3.list_multipart_uploads(Bucket=bucket).get('Uploads', [])]
        expect(upload not in uploads, uploads)
        return 'AbortMultipartUpload: ListParts then answers NoSuchUpload; not in ListMultipartUploads'
    check('multipart abort', abort)

    def small_part():
        upload = s3.create_multipart_upload(Bucket=bucket, Key='small-parts')['UploadId']
        etags = [s3.upload_part(Bucket=bucket, Key='small-parts', UploadId=upload, PartNumber=n, Body=b'x' * 1024)['ETag'] for n in (1, 2)]
        code = None
        try:
            s3.complete_multipart_upload(Bucket=bucket, Key='small-parts', UploadId=upload,
                                         MultipartUpload={'Parts': [{'PartNumber': n, 'ETag': e} for n, e in enumerate(etags, 1)]})
        except ClientError as error:
            code = error.response['Error']['Code']
        s3.abort_multipart_upload(Bucket=bucket, Key='small-parts', UploadId=upload)
        expect(code == 'EntityTooSmall', code)
        return 'a part under 5 MiB before the last: complete answers EntityTooSmall, as S3 does'
    check('multipart minimum part size', small_part)

    def list_v2():
        for n in range(5):
            s3.put_object(Bucket=bucket, Key='list/%d' % n, Body=b'%d' % n)
        first = s3.list_objects_v2(Bucket=bucket, Prefix='list/', MaxKeys=2)
        expect([o['Key'] for o in first['Contents']] == ['list/0', 'list/1'] and first['IsTruncated'], first.get('Contents'))
        rest = s3.list_objects_v2(Bucket=bucket, Prefix='list/', ContinuationToken=first['NextContinuationToken'])
        expect([o['Key'] for o in rest['Contents']] == ['list/2', 'list/3', 'list/4'] and not rest['IsTruncated'], rest.get('Contents'))
        folders = s3.list_objects_v2(Bucket=bucket, Delimiter='/')
        expect([p['Prefix'] for p in folders.get('CommonPrefixes', [])] == ['list/'], folders.get('CommonPrefixes'))
        sizes = {o['Key']: o['Size'] for o in s3.list_objects_v2(Bucket=bucket)['Contents']}
        expect(sizes.get('big') == len(whole), sizes.get('big'))
        return 'prefix, MaxKeys with NextContinuationToken, delimiter; sizes right (big: %d)' % sizes['big']
    check('ListObjectsV2', list_v2)

    def presigned():
        url = s3.generate_presigned_url('get_object', Params={'Bucket': bucket, 'Key': 'raw-hex'}, ExpiresIn=300)
        expect('X-Amz-Signature=' in url and '/%s/raw-hex' % bucket in url, url)
        status, _, got = raw('GET', url, {})
        expect(status == 200 and got == small, (status, got[:200]))
        status, _, text = raw('GET', url.replace('X-Amz-Signature=', 'X-Amz-Signature=0'), {})
        expect(status == 403, (status, text[:200]))
        ranged_status, _, part = raw('GET', url, {'Range': 'bytes=0-3'})
        expect(ranged_status == 206 and part == small[:4], (ranged_status, part))
        return 'presigned GET (query SigV4, X-Amz-Expires=300): 200 and the bytes, a Range header on it 206; a changed signature 403'
    check('presigned GET URL', presigned)

    def presigned_put():
        url = s3.generate_presigned_url('put_object', Params={'Bucket': bucket, 'Key': 'presigned-put'}, ExpiresIn=300)
        status, _, text = raw('PUT', url, {}, b'put by url')
        expect(status == 200, (status, text[:300]))
        expect(s3.get_object(Bucket=bucket, Key='presigned-put')['Body'].read() == b'put by url', 'body')
        return 'presigned PUT: 200, the object readable'
    check('presigned PUT URL (extra)', presigned_put)

    def delete():
        s3.delete_object(Bucket=bucket, Key='raw-unsigned')
        missing = None
        try:
            s3.head_object(Bucket=bucket, Key='raw-unsigned')
        except ClientError as error:
            missing = error.response['ResponseMetadata']['HTTPStatusCode']
        expect(missing == 404, missing)
        return 'DeleteObject, then HEAD 404'
    check('DeleteObject (extra)', delete)

    def default_checksums():
        # boto3's defaults since 1.36: a CRC32 of every PutObject and UploadPart body (over
        # HTTPS an aws-chunked body with the CRC32 as trailer; over HTTP, as here, the
        # payload is signed and the CRC32 sent as a header). Recorded as sent.
        modern = client()
        sent = {}
        modern.meta.events.register('before-send.s3.PutObject', lambda request, **_: sent.update(request.headers))
        modern.put_object(Bucket=bucket, Key='default-checksums', Body=small)
        got = modern.get_object(Bucket=bucket, Key='default-checksums')['Body'].read()
        expect(got == small, (len(got), got[:80]))
        shown = {k: v for k, v in sent.items() if k.lower().startswith(('x-amz-checksum', 'x-amz-content', 'content-encoding', 'x-amz-trailer'))}
        return "PutObject with boto3's default checksum settings stores the bytes; it sent %s" % shown
    check("boto3's default checksums (extra, not needed by Outpost)", default_checksums)

    failed = [name for name, held in results if not held]
    print('%d checks, %d failed%s' % (len(results), len(failed), (': ' + ', '.join(failed)) if failed else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
