#!/usr/bin/env python3
"""Uploads a file to an S3 bucket with boto3's managed multipart upload (parts of 8 MiB,
THREADS at once) and prints `seconds S`, the upload's own time: the ceiling that
`outpost-bench media --boto3` compares the server's S3 media store with. Credentials come
from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; the object is removed afterwards.
"""
import argparse
import time

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.client import Config

parser = argparse.ArgumentParser()
parser.add_argument("--endpoint", required=True)
parser.add_argument("--bucket", required=True)
parser.add_argument("--key", required=True)
parser.add_argument("--file", required=True)
parser.add_argument("--threads", type=int, default=4)
args = parser.parse_args()

client = boto3.client("s3", endpoint_url=args.endpoint, region_name="us-east-1",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
transfer = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=args.threads)
start = time.monotonic()
client.upload_file(args.file, args.bucket, args.key, Config=transfer)
elapsed = time.monotonic() - start
client.delete_object(Bucket=args.bucket, Key=args.key)
print(f"seconds {elapsed:.3f}")
