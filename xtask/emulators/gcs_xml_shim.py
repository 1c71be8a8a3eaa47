#!/usr/bin/env python3
"""GCS XML-API front for fake-gcs-server (stdlib only).

object_store's GCS client speaks the GCS *XML* API. fake-gcs-server serves
the XML reads (GET / HEAD / Range / DELETE / `?list-type=2`) but not XML
writes, so this shim translates those into fake-gcs-server JSON API calls:

  PUT  /b/o                          -> JSON multipart upload
  PUT  /b/o + x-goog-copy-source     -> JSON copyTo
  POST /b/o?uploads                  -> multipart upload kept in this process
  PUT  /b/o?partNumber=N&uploadId=U  -> part stored here
  POST /b/o?uploadId=U               -> parts joined, uploaded as one object
  DELETE /b/o?uploadId=U             -> parts dropped
  GET  /b?list-type=2&start-after=K  -> upstream list, entries <= K removed

Preconditions: `x-goog-if-generation-match: G` on a write or copy is checked
here, under a per-object lock that every write through this shim takes, so a
check and its write are atomic for all clients of the shim: G == 0 means
"must not exist", any other G means "current generation must be G"; a failed
check answers 412 PreconditionFailed, as GCS does. The header is also passed
on to fake-gcs-server as `ifGenerationMatch`, and a 412 from upstream is
passed back. Conditional reads (If-Match, If-None-Match, If-Modified-Since,
If-Unmodified-Since on GET / HEAD), which fake-gcs-server ignores, are
evaluated here against the upstream ETag / Last-Modified (412 / 304).
Everything else is proxied unchanged.

Run fake-gcs-server with `-public-host <its host:port>`: its XML routes only
match that Host header, and the shim always sends it.

    gcs_xml_shim.py --listen 127.0.0.1:4443 --upstream 127.0.0.1:4444
"""
import argparse
import hashlib
import http.client
import http.server
import json
import re
import sys
import threading
import urllib.parse
import uuid
import xml.etree.ElementTree as ElementTree
from email.utils import parsedate_to_datetime
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import unescape as xml_unescape

# First path segments that belong to fake-gcs-server's own JSON API routes.
JSON_API_ROOTS = {"", "storage", "upload", "download", "batch", "_internal"}

# Not forwarded either way: connection-level headers, and lengths we recompute.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}

# XML request header -> JSON object resource field.
METADATA_HEADERS = {
    "content-type": "contentType",
    "cache-control": "cacheControl",
    "content-disposition": "contentDisposition",
    "content-encoding": "contentEncoding",
    "content-language": "contentLanguage",
    "x-goog-storage-class": "storageClass",
}
USER_META_PREFIX = "x-goog-meta-"


class Shim:
    """State shared by all request threads."""

    def __init__(self, upstream_host, upstream_port, verbose):
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.verbose = verbose
        self.uploads = {}  # upload id -> {"headers": {...}, "parts": {n: bytes}}
        self.uploads_lock = threading.Lock()
        self.object_locks = [threading.Lock() for _ in range(64)]

    def object_lock(self, bucket, name):
        digest = hashlib.blake2b(f"{bucket}/{name}".encode(), digest_size=4).digest()
        return self.object_locks[int.from_bytes(digest, "big") % len(self.object_locks)]

    def call(self, method, target, body=b"", headers=None):
        """One upstream request on a fresh loopback connection."""
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
        try:
            conn.request(method, target, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()


def quote(text):
    return urllib.parse.quote(text, safe="")


class IncompleteBody(Exception):
    """The client closed its connection before the body's announced end."""


def guarded(method):
    """Answer 400 to a body cut short and 502 when a handler fails, instead of dropping the
    connection."""

    def run(self):
        try:
            return method(self)
        except IncompleteBody as err:
            self.close_connection = True
            try:
                self.respond_error(400, "IncompleteBody", str(err))
            except OSError:
                pass
            return None
        except Exception as err:  # noqa: BLE001 - reported to the client
            self.log_error("%s %s failed: %r", self.command, self.path, err)
            self.close_connection = True
            try:
                self.respond_error(502, "ShimError", repr(err))
            except OSError:
                pass
            return None

    return run


def error_xml(code, message):
    return (
        "<?xml version='1.0' encoding='UTF-8'?>"
        f"<Error><Code>{code}</Code><Message>{xml_escape(message)}</Message></Error>"
    ).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without this, small responses wait for a delayed ACK (~40 ms each).
    disable_nagle_algorithm = True
    shim = None  # set in main()

    def log_request(self, code="-", size="-"):
        # Access log only with --verbose; errors always reach stderr (the log).
        if self.shim.verbose:
            super().log_request(code, size)

    # ------------------------------------------------------------ plumbing

    def read_body(self):
        """The whole request body; IncompleteBody when the client closes before its end (a
        client that died mid-upload), so that a short body is never stored, as on GCS."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline()
                if not size_line.endswith(b"\n"):
                    raise IncompleteBody("the connection closed inside a chunked body")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Skip trailers up to the blank line.
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunk = self.rfile.read(size)
                if len(chunk) < size:
                    raise IncompleteBody("the connection closed inside a chunk")
                chunks.append(chunk)
                self.rfile.readline()  # CRLF after each chunk
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            raise IncompleteBody(f"{len(body)} of {length} body bytes before the connection closed")
        return body

    def lower_headers(self):
        return {k.lower(): v for k, v in self.headers.items()}

    def respond(self, status, headers=(), body=b"", head_length=None):
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in HOP_BY_HOP and name.lower() not in ("date", "server"):
                self.send_header(name, value)
        if status not in (204, 304) and status >= 200:
            length = head_length if head_length is not None else len(body)
            self.send_header("Content-Length", str(length))
        self.end_headers()
        if body and self.command != "HEAD" and status not in (204, 304):
            self.wfile.write(body)

    def respond_error(self, status, code, message):
        self.respond(status, [("Content-Type", "application/xml")], error_xml(code, message))

    def proxy(self, body):
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        status, resp_headers, data = self.shim.call(self.command, self.path, body, headers)
        if self.command in ("GET", "HEAD") and status in (200, 206) and self.object_target():
            refused = read_precondition(self.headers, resp_headers)
            if refused is not None:
                return self.refuse_read(refused, resp_headers)
        head_length = None
        if self.command == "HEAD":
            # A HEAD answer's Content-Length is the object size: keep it.
            head_length = next(
                (v for k, v in resp_headers if k.lower() == "content-length"), "0"
            )
        self.respond(status, resp_headers, data, head_length)

    def refuse_read(self, status, resp_headers):
        if status == 304:
            kept = [(k, v) for k, v in resp_headers if k.lower() in ("etag", "last-modified")]
            return self.respond(304, kept)
        self.respond_error(412, "PreconditionFailed", "read precondition did not hold")

    def object_target(self):
        """(bucket, object name, query dict) for /bucket/object URLs, else None."""
        parts = urllib.parse.urlsplit(self.path)
        bucket, _, name = parts.path.lstrip("/").partition("/")
        if bucket in JSON_API_ROOTS or not name:
            return None
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        return urllib.parse.unquote(bucket), urllib.parse.unquote(name), query

    # ---------------------------------------------------------- upstream ops

    def current_generation(self, bucket, name):
        """The object's generation as a string, or None if it does not exist."""
        status, _, data = self.shim.call("GET", f"/storage/v1/b/{quote(bucket)}/o/{quote(name)}")
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"metadata lookup for {bucket}/{name}: HTTP {status} {data[:200]!r}")
        return str(json.loads(data).get("generation", ""))

    def precondition_failed(self, bucket, name, if_generation):
        """Message if x-goog-if-generation-match does not hold, else None."""
        if if_generation is None:
            return None
        current = self.current_generation(bucket, name)
        if if_generation.strip() == "0":
            if current is not None:
                return f"{name} exists (generation {current}); ifGenerationMatch=0"
            return None
        if current is None:
            return f"{name} does not exist; ifGenerationMatch={if_generation}"
        if current != if_generation.strip():
            return f"{name} is at generation {current}; ifGenerationMatch={if_generation}"
        return None

    def upload(self, bucket, name, data, headers, if_generation):
        resource = {"name": name}
        for header, field in METADATA_HEADERS.items():
            if headers.get(header):
                resource[field] = headers[header]
        resource.setdefault("contentType", "application/octet-stream")
        user_meta = {
            k[len(USER_META_PREFIX):]: v for k, v in headers.items() if k.startswith(USER_META_PREFIX)
        }
        if user_meta:
            resource["metadata"] = user_meta
        boundary = "trellis-shim-" + uuid.uuid4().hex
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps(resource).encode(),
                f"\r\n--{boundary}\r\nContent-Type: {resource['contentType']}\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        target = f"/upload/storage/v1/b/{quote(bucket)}/o?uploadType=multipart&name={quote(name)}"
        if if_generation is not None:
            target += f"&ifGenerationMatch={quote(if_generation.strip())}"
        return self.shim.call(
            "POST", target, body, {"Content-Type": f"multipart/related; boundary={boundary}"}
        )

    def reply_with_object(self, status, headers, data, xml_body=b""):
        """Turn a JSON object resource answer into an XML-API answer."""
        if status == 412:
            return self.respond_error(412, "PreconditionFailed", data.decode("utf-8", "replace"))
        if status // 100 != 2:
            passed = [(k, v) for k, v in headers if k.lower() == "content-type"]
            return self.respond(status, passed, data)
        obj = json.loads(data)
        out = [
            ("ETag", xml_etag(obj)),
            ("x-goog-generation", str(obj.get("generation", ""))),
            ("x-goog-metageneration", str(obj.get("metageneration", "1"))),
            ("Content-Type", "application/xml"),
        ]
        if obj.get("md5Hash"):
            out.append(("x-goog-hash", f"md5={obj['md5Hash']}"))
        self.respond(200, out, xml_body)

    # ----------------------------------------------------------------- verbs

    @guarded
    def do_PUT(self):
        body = self.read_body()
        target = self.object_target()
        if target is None:
            return self.proxy(body)
        bucket, name, query = target
        headers = self.lower_headers()

        if "uploadId" in query and "partNumber" in query:
            return self.put_part(query["uploadId"][0], query["partNumber"][0], body)

        if_generation = headers.get("x-goog-if-generation-match")
        with self.shim.object_lock(bucket, name):
            failed = self.precondition_failed(bucket, name, if_generation)
            if failed:
                return self.respond_error(412, "PreconditionFailed", failed)
            source = headers.get("x-goog-copy-source")
            if source:
                return self.copy(source, bucket, name)
            status, resp_headers, data = self.upload(bucket, name, body, headers, if_generation)
        self.reply_with_object(status, resp_headers, data)

    def copy(self, source, bucket, name):
        # object_store sends "<bucket>/<percent-encoded object>"; a leading
        # slash is allowed by GCS too.
        src_bucket, _, src_name = source.lstrip("/").partition("/")
        src_bucket, src_name = urllib.parse.unquote(src_bucket), urllib.parse.unquote(src_name)
        if not src_bucket or not src_name:
            return self.respond_error(400, "InvalidArgument", f"bad x-goog-copy-source {source!r}")
        status, headers, data = self.shim.call(
            "POST",
            f"/storage/v1/b/{quote(src_bucket)}/o/{quote(src_name)}"
            f"/copyTo/b/{quote(bucket)}/o/{quote(name)}",
        )
        if status // 100 == 2:
            obj = json.loads(data)
            result = (
                "<?xml version='1.0' encoding='UTF-8'?><CopyObjectResult>"
                f"<LastModified>{xml_escape(str(obj.get('updated', '')))}</LastModified>"
                f"<ETag>{xml_escape(xml_etag(obj))}</ETag></CopyObjectResult>"
            ).encode()
            return self.reply_with_object(status, headers, data, result)
        self.reply_with_object(status, headers, data)

    def put_part(self, upload_id, part_number, body):
        try:
            number = int(part_number)
        except ValueError:
            return self.respond_error(400, "InvalidArgument", f"partNumber {part_number!r}")
        with self.shim.uploads_lock:
            upload = self.shim.uploads.get(upload_id)
            if upload is None:
                return self.respond_error(404, "NoSuchUpload", upload_id)
            upload["parts"][number] = body
        self.respond(200, [("ETag", f'"{hashlib.md5(body).hexdigest()}"')])

    @guarded
    def do_POST(self):
        body = self.read_body()
        target = self.object_target()
        if target is None:
            return self.proxy(body)
        bucket, name, query = target
        if "uploads" in query:
            upload_id = uuid.uuid4().hex
            with self.shim.uploads_lock:
                self.shim.uploads[upload_id] = {"headers": self.lower_headers(), "parts": {}}
            result = (
                "<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult>"
                f"<Bucket>{xml_escape(bucket)}</Bucket><Key>{xml_escape(name)}</Key>"
                f"<UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>"
            ).encode()
            return self.respond(200, [("Content-Type", "application/xml")], result)
        if "uploadId" in query:
            return self.complete_upload(bucket, name, query["uploadId"][0], body)
        self.proxy(body)

    def complete_upload(self, bucket, name, upload_id, body):
        try:
            order = [
                int(el.text)
                for el in ElementTree.fromstring(body).iter()
                if el.tag.rsplit("}", 1)[-1] == "PartNumber"
            ]
        except (ElementTree.ParseError, TypeError, ValueError) as err:
            return self.respond_error(400, "MalformedXML", str(err))
        with self.shim.uploads_lock:
            upload = self.shim.uploads.pop(upload_id, None)
        if upload is None:
            return self.respond_error(404, "NoSuchUpload", upload_id)
        missing = [n for n in order if n not in upload["parts"]]
        if missing:
            return self.respond_error(400, "InvalidPart", f"parts {missing} were never uploaded")
        data = b"".join(upload["parts"][n] for n in order)
        if_generation = upload["headers"].get("x-goog-if-generation-match")
        with self.shim.object_lock(bucket, name):
            failed = self.precondition_failed(bucket, name, if_generation)
            if failed:
                return self.respond_error(412, "PreconditionFailed", failed)
            status, headers, resp = self.upload(bucket, name, data, upload["headers"], if_generation)
        if status // 100 == 2:
            etag = xml_escape(xml_etag(json.loads(resp)))
            result = (
                "<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult>"
                f"<Bucket>{xml_escape(bucket)}</Bucket><Key>{xml_escape(name)}</Key>"
                f"<ETag>{etag}</ETag></CompleteMultipartUploadResult>"
            ).encode()
            return self.reply_with_object(status, headers, resp, result)
        self.reply_with_object(status, headers, resp)

    @guarded
    def do_DELETE(self):
        body = self.read_body()
        target = self.object_target()
        if target is not None and "uploadId" in target[2]:
            with self.shim.uploads_lock:
                self.shim.uploads.pop(target[2]["uploadId"][0], None)
            return self.respond(204)
        if target is not None:
            bucket, name, _ = target
            with self.shim.object_lock(bucket, name):
                return self.proxy(body)
        self.proxy(body)

    @guarded
    def do_GET(self):
        body = self.read_body()
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        start_after = [v for k, v in query if k == "start-after"]
        is_bucket_list = "/" not in parts.path.strip("/") and any(k == "list-type" for k, _ in query)
        if not (is_bucket_list and start_after):
            return self.proxy(body)
        # fake-gcs-server ignores start-after; filter its (single-page) answer.
        rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "start-after"])
        status, headers, data = self.shim.call("GET", f"{parts.path}?{rest}")
        if status == 200:
            data = drop_keys_up_to(data, start_after[0])
        self.respond(status, headers, data)

    @guarded
    def do_HEAD(self):
        self.proxy(self.read_body())


def xml_etag(obj):
    """The ETag fake-gcs-server's XML reads report for this JSON resource."""
    return f'"{obj.get("etag") or obj.get("md5Hash", "")}"'


def etag_list(value):
    """Opaque tags of an If-Match / If-None-Match value (weakness ignored)."""
    tags = []
    for item in value.split(","):
        item = item.strip()
        if item.startswith("W/"):
            item = item[2:]
        if item:
            tags.append(item if item == "*" or item.startswith('"') else f'"{item}"')
    return tags


def parse_http_date(value):
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None


def read_precondition(request_headers, resp_headers):
    """304 / 412 when a conditional GET or HEAD does not hold (RFC 9110 13.2.2),
    else None. fake-gcs-server's XML reads ignore these headers."""
    upstream = {k.lower(): v for k, v in resp_headers}
    etag = upstream.get("etag", "")
    etag = etag if etag.startswith('"') else f'"{etag}"'
    modified = parse_http_date(upstream.get("last-modified", ""))

    if_match = request_headers.get("If-Match")
    if if_match is not None:
        tags = etag_list(if_match)
        if "*" not in tags and etag not in tags:
            return 412
    else:
        since = parse_http_date(request_headers.get("If-Unmodified-Since", ""))
        if since is not None and modified is not None and modified > since:
            return 412

    if_none_match = request_headers.get("If-None-Match")
    if if_none_match is not None:
        tags = etag_list(if_none_match)
        if "*" in tags or etag in tags:
            return 304
    else:
        since = parse_http_date(request_headers.get("If-Modified-Since", ""))
        if since is not None and modified is not None and modified <= since:
            return 304
    return None


CONTENTS = re.compile(rb"<Contents>.*?</Contents>", re.S)
KEY = re.compile(rb"<Key>(.*?)</Key>", re.S)


def drop_keys_up_to(listing, start_after):
    """Remove <Contents> entries whose key sorts at or before start_after."""

    def keep(match):
        key = KEY.search(match.group(0))
        if key is None:
            return match.group(0)
        name = xml_unescape(key.group(1).decode("utf-8"), {"&quot;": '"', "&apos;": "'"})
        return match.group(0) if name > start_after else b""

    return CONTENTS.sub(keep, listing)


def split_host_port(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def main():
    parser = argparse.ArgumentParser(description="GCS XML-API shim for fake-gcs-server")
    parser.add_argument("--listen", default="127.0.0.1:4443")
    parser.add_argument("--upstream", default="127.0.0.1:4444")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args()

    Handler.shim = Shim(*split_host_port(args.upstream), args.verbose)
    server = http.server.ThreadingHTTPServer(split_host_port(args.listen), Handler)
    server.daemon_threads = True
    print(f"gcs xml shim: http://{args.listen} -> http://{args.upstream}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
