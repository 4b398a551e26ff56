# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for the AWX REST API (/api/v2/), a test tool for playbooks/awx_configure.yml (issue 25, item 10).

It is NOT AWX: an in-memory store that answers the calls the awx.awx modules (24.6.1) make, the way AWX's API
answers them, and records every object and grant so a test can assert what the playbook built:

- lists ``GET /api/v2/<kind>/?field=value`` (``or__id``/``or__name`` as awx.awx's ``get_one`` sends them),
  ``POST`` to create (201), ``GET``/``PATCH`` of ``/api/v2/<kind>/<id>/``;
- associations ``/api/v2/<kind>/<id>/<relation>/`` (``{"id": n}`` adds, ``"disassociate": true`` removes, 204),
  only the relations AWX has: ``/workflow_approval_templates/<id>/success_nodes/`` is a 404, as in AWX
  (ansible/awx issue 8777);
- job template and workflow surveys, ``/workflow_job_template_nodes/<id>/create_approval_template/``,
  ``unified_job_templates`` (job templates, workflows, approval templates, projects);
- object roles: each object carries ``summary_fields.object_roles`` (the roles AWX gives that kind), and
  ``/api/v2/roles/<id>/teams/`` records a team's grant, as ``awx.awx.role`` uses them.

Every request needs ``Authorization: Bearer <token>`` (401 otherwise); answers carry AWX's product headers.
Run it in a thread: ``with AwxStandin(seed) as awx: ... awx.url ... awx.grants()``.
"""
import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

#: The roles AWX gives each kind of object (awx/main/models: the ImplicitRoleFields).
ROLES = {
    "organizations": ["admin", "execute", "project_admin", "inventory_admin", "credential_admin", "workflow_admin",
                      "notification_admin", "job_template_admin", "execution_environment_admin", "auditor",
                      "member", "read", "approval"],
    "teams": ["admin", "member", "read"],
    "credentials": ["admin", "use", "read"],
    "inventories": ["admin", "update", "adhoc", "use", "read"],
    "projects": ["admin", "use", "update", "read"],
    "job_templates": ["admin", "execute", "read"],
    "workflow_job_templates": ["admin", "execute", "read", "approval"],
}

#: The association endpoints each kind has (what awx.awx posts to); anything else is a 404.
RELATIONS = {
    "job_templates": ["credentials", "labels", "instance_groups", "notification_templates_started",
                      "notification_templates_success", "notification_templates_error"],
    "workflow_job_templates": ["labels", "notification_templates_started", "notification_templates_success",
                               "notification_templates_error", "notification_templates_approvals"],
    "workflow_job_template_nodes": ["success_nodes", "failure_nodes", "always_nodes", "credentials", "labels",
                                    "instance_groups"],
    "projects": ["notification_templates_started", "notification_templates_success",
                 "notification_templates_error"],
    "schedules": ["credentials", "labels", "instance_groups"],
    "roles": ["teams", "users"],
}

#: unified_job_templates covers these kinds.
UNIFIED = ("job_templates", "workflow_job_templates", "workflow_approval_templates", "projects")

TYPE_NAMES = {
    "organizations": "organization", "teams": "team", "credentials": "credential", "credential_types":
    "credential_type", "inventories": "inventory", "projects": "project", "job_templates": "job_template",
    "workflow_job_templates": "workflow_job_template", "workflow_job_template_nodes": "workflow_job_template_node",
    "workflow_approval_templates": "workflow_approval_template", "schedules": "schedule",
    "execution_environments": "execution_environment", "roles": "role", "labels": "label",
    "instance_groups": "instance_group",
}

#: AWX's built-in credential types this stand-in knows (kind "cloud"/"ssh" as in AWX).
CREDENTIAL_TYPES = [
    {"name": "Machine", "kind": "ssh", "namespace": "ssh"},
    {"name": "OpenShift or Kubernetes API Bearer Token", "kind": "kubernetes", "namespace": "kubernetes_bearer_token"},
]

API = "/api/v2/"


class AwxStandin(object):
    """The stand-in server on 127.0.0.1 (a free port). ``seed``: {kind: [objects]} created before it answers."""

    def __init__(self, seed=None, token="standin-token"):
        self.token = token
        self.lock = threading.Lock()
        self.store = {}
        self.next_id = 1
        self.requests = []
        self.links = {}        # (kind, id, relation) -> [ids]
        self.surveys = {}      # (kind, id) -> spec
        for ctype in CREDENTIAL_TYPES:
            self._create("credential_types", dict(ctype, managed=True))
        for kind, objects in (seed or {}).items():
            for obj in objects:
                self._create(kind, copy.deepcopy(obj))
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body=None):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("X-API-Product-Name", "AWX")
                self.send_header("X-API-Product-Version", "24.6.1")
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if data:
                    self.wfile.write(data)

            def _handle(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    data = json.loads(raw) if raw else {}
                except ValueError:
                    return self._answer(400, {"detail": "JSON parse error"})
                owner.requests.append({"method": method, "path": self.path, "data": data,
                                       "authorization": self.headers.get("Authorization")})
                if self.headers.get("Authorization") != "Bearer " + owner.token:
                    return self._answer(401, {"detail": "Authentication credentials were not provided."})
                with owner.lock:
                    status, body = owner._route(method, self.path, data)
                return self._answer(status, body)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PATCH(self):
                self._handle("PATCH")

            def do_DELETE(self):
                self._handle("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the store ---------------------------------------------------------------------------------------------

    def _create(self, kind, data):
        obj_id = self.next_id
        self.next_id += 1
        obj = dict(data)
        obj["id"] = obj_id
        obj["type"] = TYPE_NAMES.get(kind, kind.rstrip("s"))
        obj["url"] = "%s%s/%d/" % (API, kind, obj_id)
        obj.setdefault("related", {})
        obj.setdefault("summary_fields", {})
        if kind in ("job_templates", "workflow_job_templates"):
            obj["related"]["survey_spec"] = "%s%s/%d/survey_spec/" % (API, kind, obj_id)
        if kind == "projects":
            obj.setdefault("scm_revision", "")
        roles = {}
        for role in ROLES.get(kind, []):
            role_obj = self._create("roles", {"name": role, "resource_kind": kind, "resource_id": obj_id})
            roles[role + "_role"] = {"id": role_obj["id"], "name": role}
        if roles:
            obj["summary_fields"]["object_roles"] = roles
        self.store.setdefault(kind, {})[obj_id] = obj
        return obj

    def objects(self, kind):
        """Every object of a kind, by id order (a copy)."""
        return [copy.deepcopy(obj) for _id, obj in sorted(self.store.get(kind, {}).items())]

    def find(self, kind, **fields):
        """The one object of a kind with these fields (AssertionError otherwise)."""
        found = [obj for obj in self.objects(kind) if all(obj.get(k) == v for k, v in fields.items())]
        assert len(found) == 1, "%s %r: %d objects" % (kind, fields, len(found))
        return found[0]

    def linked(self, kind, obj_id, relation):
        """The ids associated through /<kind>/<id>/<relation>/."""
        return sorted(self.links.get((kind, obj_id, relation), []))

    def survey(self, kind, obj_id):
        return copy.deepcopy(self.surveys.get((kind, obj_id)))

    def grants(self):
        """Every team grant: (team name, role name, kind, object name)."""
        out = []
        for role in self.objects("roles"):
            for team_id in self.linked("roles", role["id"], "teams"):
                target = self.store[role["resource_kind"]][role["resource_id"]]
                out.append((self.store["teams"][team_id]["name"], role["name"], role["resource_kind"],
                            target.get("name")))
        return sorted(out)

    # -- the API -----------------------------------------------------------------------------------------------

    @staticmethod
    def _matches(obj, query):
        ors = dict((k[4:], v) for k, v in query.items() if k.startswith("or__"))
        if ors and not any(str(obj.get(k)) == v for k, v in ors.items()):
            return False
        for key, value in query.items():
            if key.startswith("or__") or key in ("page", "page_size", "order_by"):
                continue
            have = obj.get(key)
            if have is None and value in ("", "None", "null"):
                continue
            if str(have) != value:
                return False
        return True

    def _list(self, kinds, query):
        results = []
        for kind in kinds:
            results.extend(obj for obj in self.objects(kind) if self._matches(obj, query))
        return 200, {"count": len(results), "next": None, "previous": None, "results": results}

    def _route(self, method, path, data):
        parts = urlsplit(path)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        if not parts.path.startswith(API):
            return 404, {"detail": "Not found."}
        segments = [s for s in parts.path[len(API):].split("/") if s]
        if not segments:
            return 200, {}
        kind = segments[0]
        if len(segments) == 1:
            if method == "GET":
                return self._list(UNIFIED if kind == "unified_job_templates" else [kind], query)
            if method == "POST" and kind in TYPE_NAMES and kind not in ("roles", "credential_types"):
                return 201, self._create(kind, data)
            return 405, {"detail": "Method not allowed."}
        if not re.match(r"^\d+$", segments[1]):
            return 404, {"detail": "Not found."}
        obj_id = int(segments[1])
        obj = self.store.get(kind, {}).get(obj_id)
        if obj is None:
            return 404, {"detail": "Not found."}
        if len(segments) == 2:
            if method == "GET":
                return 200, copy.deepcopy(obj)
            if method == "PATCH":
                obj.update(dict((k, v) for k, v in data.items() if k not in ("id", "url", "type")))
                return 200, copy.deepcopy(obj)
            if method == "DELETE":
                del self.store[kind][obj_id]
                return 204, None
            return 405, {"detail": "Method not allowed."}
        sub = segments[2]
        if sub == "survey_spec" and kind in ("job_templates", "workflow_job_templates"):
            if method == "GET":
                return 200, copy.deepcopy(self.surveys.get((kind, obj_id), {}))
            if method == "POST":
                self.surveys[(kind, obj_id)] = copy.deepcopy(data)
                return 200, {}
            if method == "DELETE":
                self.surveys.pop((kind, obj_id), None)
                return 200, {}
        if sub == "create_approval_template" and kind == "workflow_job_template_nodes" and method == "POST":
            if not data.get("name"):
                return 400, {"name": ["This field is required."]}
            approval = self._create("workflow_approval_templates", data)
            obj["unified_job_template"] = approval["id"]
            obj["related"]["unified_job_template"] = approval["url"]
            return 201, approval
        if sub in RELATIONS.get(kind, []):
            ids = self.links.setdefault((kind, obj_id, sub), [])
            if method == "GET":
                target = "teams" if sub == "teams" else ("users" if sub == "users" else None)
                results = []
                for linked_id in ids:
                    for source in ([target] if target else list(self.store)):
                        if linked_id in self.store.get(source, {}):
                            results.append(copy.deepcopy(self.store[source][linked_id]))
                            break
                return 200, {"count": len(results), "next": None, "previous": None, "results": results}
            if method == "POST":
                if "id" not in data:
                    return 400, {"detail": "id is required"}
                if data.get("disassociate"):
                    if data["id"] in ids:
                        ids.remove(data["id"])
                elif data["id"] not in ids:
                    ids.append(data["id"])
                return 204, None
        return 404, {"detail": "Not found."}
