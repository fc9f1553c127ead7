# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for the part of the AWX REST API (v2) that the awx.awx modules of awx_configure.yml use.

Objects live in memory: list endpoints filter on exact query fields (`or__` alternatives included),
POST creates, PATCH updates, `<object>/survey_spec/` stores a survey, `<object>/<related>/` holds
associations (credentials). Projects report a finished first sync, as AWX does after a create. Every
request is recorded, so a test can assert what a playbook sent and that a re-run sends no change.
Only 127.0.0.1 is used.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

API = "/api/v2/"
IGNORED_QUERY = ("page", "page_size", "order_by")
SINGULAR = {"inventories": "inventory", "inventory_sources": "inventory_source", "projects": "project",
            "job_templates": "job_template", "execution_environments": "execution_environment",
            "organizations": "organization", "credentials": "credential", "project_updates": "project_update"}


class FakeAwx(object):
    """fake = FakeAwx(); fake.start(); ... fake.url ... fake.stop()."""

    def __init__(self, version="24.6.1"):
        self.version = version
        self.lock = threading.RLock()
        self.store = {}
        self.surveys = {}
        self.associations = {}
        self.requests = []
        self.next_id = 1
        self.server = None
        self.thread = None
        self.add("organizations", {"name": "Default"})

    # ---- data
    def add(self, kind, data):
        """Create an object as a POST would; returns it."""
        with self.lock:
            obj_id = self.next_id
            self.next_id += 1
        url = "%s%s/%d/" % (API, kind, obj_id)
        obj = dict(data)
        obj.update({"id": obj_id, "type": SINGULAR.get(kind, kind), "url": url,
                    "related": {"survey_spec": url + "survey_spec/", "update": url + "update/"},
                    "summary_fields": {}})
        if kind == "projects":
            update = self.add("project_updates", {"name": obj.get("name"), "status": "successful",
                                                  "failed": False, "finished": "2026-01-01T00:00:00Z"})
            obj.setdefault("scm_revision", "")
            obj["summary_fields"]["current_update"] = {"id": update["id"], "status": "successful"}
        self.store.setdefault(kind, {})[obj_id] = obj
        return obj

    def objects(self, kind):
        return list(self.store.get(kind, {}).values())

    def get(self, kind, name):
        found = [obj for obj in self.objects(kind) if obj.get("name") == name]
        assert len(found) == 1, "%d %s named %r in %s" % (len(found), kind, name, self.objects(kind))
        return found[0]

    def survey(self, kind, name):
        return self.surveys.get((kind, self.get(kind, name)["id"]))

    def writes(self):
        """The recorded requests that would change something (not GETs)."""
        return [req for req in self.requests if req["method"] != "GET"]

    # ---- server
    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                fake.handle(self, "GET")

            def do_POST(self):
                fake.handle(self, "POST")

            def do_PATCH(self):
                fake.handle(self, "PATCH")

            def do_DELETE(self):
                fake.handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    # ---- API
    def handle(self, handler, method):
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length) or b"null") if length else None
        query = dict(parse_qsl(parts.query))
        self.requests.append({"method": method, "path": parts.path, "query": query, "body": body})
        if not parts.path.startswith(API):
            return self.reply(handler, 404, {"detail": "Not found."})
        segs = [seg for seg in parts.path[len(API):].split("/") if seg]
        with self.lock:
            status, data = self.route(method, segs, query, body)
        self.reply(handler, status, data)

    def route(self, method, segs, query, body):
        if segs == ["ping"]:
            return 200, {"version": self.version}
        kind = segs[0] if segs else ""
        if len(segs) == 1 and method == "GET":
            results = [obj for obj in self.objects(kind) if matches(obj, query)]
            return 200, {"count": len(results), "next": None, "previous": None, "results": results}
        if len(segs) == 1 and method == "POST":
            if not isinstance(body, dict) or not body.get("name"):
                return 400, {"name": ["This field is required."]}
            if any(obj.get("name") == body["name"] and obj.get("organization") == body.get("organization")
                   for obj in self.objects(kind)):
                return 400, {"__all__": ["%s with this name already exists." % kind]}
            obj = self.add(kind, body)
            return 201, obj
        try:
            obj = self.store[kind][int(segs[1])]
        except (KeyError, IndexError, ValueError):
            return 404, {"detail": "Not found."}
        if len(segs) == 2:
            if method == "GET":
                return 200, obj
            if method == "PATCH":
                obj.update(body or {})
                return 200, obj
            if method == "DELETE":
                del self.store[kind][obj["id"]]
                return 204, None
        elif segs[2] == "survey_spec":
            key = (kind, obj["id"])
            if method == "GET":
                return 200, self.surveys.get(key, {})
            if method == "POST":
                self.surveys[key] = body
                return 200, {}
            if method == "DELETE":
                self.surveys.pop(key, None)
                return 200, {}
        elif method == "GET":
            ids = self.associations.get((kind, obj["id"], segs[2]), [])
            related = [self.store.get(segs[2], {}).get(i, {"id": i}) for i in ids]
            return 200, {"count": len(related), "next": None, "previous": None, "results": related}
        elif method == "POST":
            ids = self.associations.setdefault((kind, obj["id"], segs[2]), [])
            if body.get("disassociate"):
                ids.remove(body["id"])
            elif body["id"] not in ids:
                ids.append(body["id"])
            return 204, None
        return 405, {"detail": "Method \"%s\" not allowed." % method}

    def reply(self, handler, status, data):
        payload = b"" if data is None else json.dumps(data).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("X-API-Product-Name", "AWX")
        handler.send_header("X-API-Product-Version", self.version)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


def matches(obj, query):
    """Exact match on plain fields; `or__x` fields are alternatives; other lookups (`a__b`) are ignored."""
    alternatives = [(key[4:], value) for key, value in query.items() if key.startswith("or__")]
    for key, value in query.items():
        if key in IGNORED_QUERY or "__" in key:
            continue
        if str(obj.get(key)) != value:
            return False
    if alternatives:
        return any(str(obj.get(key)) == value for key, value in alternatives)
    return True
