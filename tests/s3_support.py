"""A local S3-compatible server (moto's server mode) that a test starts itself, and the standard
AWS variables that point pyarrow, boto and every `hfsweep` subprocess at it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

BUCKET = "hfsweep-test"


@contextmanager
def local_s3() -> Iterator[dict[str, str]]:
    """Start moto on a free loopback port with one empty bucket; yields the AWS variables
    (also set in this process's environment while it runs)."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def s3_objects(prefix: str) -> list[str]:
    """Keys under `prefix` in the test bucket, as boto (not pyarrow) lists them."""
    import boto3

    pages = (
        boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    )
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))
