# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One synchronous HTTP request over http.client, standard library only.

The one helper for the collection's short requests: the readiness probe (_engines.probe: GET /health,
a 1-token POST) and the benchmark's GETs (_openai_stream.http_get: /v1/models, a metrics endpoint).
"""

from __future__ import annotations

import http.client
import json
import ssl


def request(host, port, method, path, body=None, api_key=None, timeout=10.0, https=False, ssl_context=None,
            accept="application/json", limit=None):
    """(status, body text) of one request. body (JSON-serialisable) is sent as JSON; at most limit
    bytes of the answer are read (all of it when None). Raises OSError (socket.timeout included) or
    http.client.HTTPException when the server cannot be reached or answers garbage."""
    if https:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout,
                                           context=ssl_context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Accept": accept}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if api_key:
            headers["Authorization"] = "Bearer %s" % api_key
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, (resp.read() if limit is None else resp.read(limit)).decode("utf-8", "replace")
    finally:
        conn.close()
