#!/usr/bin/env python3
"""Create (idempotently) and confirm a blob container in Azurite.

Stdlib only. Signs requests with SharedKey for Azurite's built-in development
account; the account name and key are public, documented constants that only
work against the emulator.

    azurite_container.py --endpoint http://127.0.0.1:10000 --container trellis-test

Exit status 0 when the container exists afterwards (created now or before).
"""
import argparse
import base64
import hashlib
import hmac
import sys
import urllib.error
import urllib.parse
import urllib.request
from email.utils import formatdate

DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
    "K1SZFPTOtr/KBHBeksoGMGw=="
)
API_VERSION = "2021-08-06"


def signed_request(endpoint, method, container, query):
    """Build a SharedKey-signed request for /<account>/<container>?<query>."""
    ms_headers = {
        "x-ms-date": formatdate(usegmt=True),
        "x-ms-version": API_VERSION,
    }
    # Emulator URLs are path-style (/<account>/<container>), so the canonical
    # resource names the account twice: once as the signer, once in the path.
    resource = f"/{DEV_ACCOUNT}/{DEV_ACCOUNT}/{container}"
    for key in sorted(query):
        resource += f"\n{key.lower()}:{query[key]}"
    # Content-Length is empty for a zero-length body. We send no Content-Type,
    # so that field is empty as well (urllib adds none without a body).
    standard = [
        method,  # VERB
        "",  # Content-Encoding
        "",  # Content-Language
        "",  # Content-Length
        "",  # Content-MD5
        "",  # Content-Type
        "",  # Date (x-ms-date is used instead)
        "",  # If-Modified-Since
        "",  # If-Match
        "",  # If-None-Match
        "",  # If-Unmodified-Since
        "",  # Range
    ]
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(ms_headers.items()))
    string_to_sign = "\n".join(standard) + "\n" + canonical_headers + resource
    digest = hmac.new(
        base64.b64decode(DEV_KEY), string_to_sign.encode("utf-8"), hashlib.sha256
    ).digest()
    headers = dict(ms_headers)
    headers["Authorization"] = f"SharedKey {DEV_ACCOUNT}:{base64.b64encode(digest).decode()}"
    url = f"{endpoint.rstrip('/')}/{DEV_ACCOUNT}/{urllib.parse.quote(container)}"
    url += "?" + urllib.parse.urlencode(query)
    return urllib.request.Request(url, method=method, headers=headers)


def send(request):
    """Return (status, body) without raising on HTTP errors."""
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:10000")
    parser.add_argument("--container", required=True)
    args = parser.parse_args()

    status, body = send(signed_request(args.endpoint, "PUT", args.container, {"restype": "container"}))
    if status == 201:
        print(f"created container {args.container}")
    elif status == 409:
        print(f"container {args.container} already exists")
    else:
        sys.exit(f"creating container {args.container}: HTTP {status} {body[:400]!r}")

    status, body = send(signed_request(args.endpoint, "GET", args.container, {"restype": "container"}))
    if status != 200:
        sys.exit(f"container {args.container} not readable afterwards: HTTP {status} {body[:400]!r}")


if __name__ == "__main__":
    main()
