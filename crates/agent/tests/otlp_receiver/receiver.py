"""An OTLP/HTTP receiver for the telemetry tests, decoding with the official OpenTelemetry
protobuf definitions (the `opentelemetry-proto` package), not with code of ours.

    python receiver.py [--stall]

Prints `PORT <n>` on stdout once it listens on 127.0.0.1. It accepts protobuf
`ExportTraceServiceRequest`s on POST /v1/traces and `ExportMetricsServiceRequest`s on POST
/v1/metrics, answers 200 with an empty export response, and keeps each request as JSON
(`google.protobuf.json_format.MessageToDict`). GET /received returns
`{"traces": [...], "metrics": [...]}`. With --stall it accepts connections and never answers.
"""

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

RECEIVED = {"traces": [], "metrics": []}
LOCK = threading.Lock()

KINDS = {
    "/v1/traces": ("traces", trace_service_pb2.ExportTraceServiceRequest,
                   trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": ("metrics", metrics_service_pb2.ExportMetricsServiceRequest,
                    metrics_service_pb2.ExportMetricsServiceResponse),
}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        kind = KINDS.get(self.path)
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if kind is None:
            self.send_response(404)
            self.end_headers()
            return
        name, request_type, response_type = kind
        request = request_type()
        try:
            request.ParseFromString(body)
        except Exception as error:  # a body that is not the message: the exporter's bug
            self.send_response(400)
            self.end_headers()
            self.wfile.write(str(error).encode())
            return
        with LOCK:
            RECEIVED[name].append(MessageToDict(request))
        payload = response_type().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        with LOCK:
            payload = json.dumps(RECEIVED).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def stall():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    held = []
    while True:
        connection, _ = listener.accept()
        held.append(connection)  # read nothing, answer nothing


def main():
    if "--stall" in sys.argv:
        stall()
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
