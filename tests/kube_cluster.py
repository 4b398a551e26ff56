# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

The binaries are the upstream ones that ``tests/tools/kube-build.sh`` builds from the ``k8s.io/kubernetes`` and
``go.etcd.io/etcd/server/v3`` Go modules and caches outside the clone (``$KUBE_CACHE/<version>/bin``).  This module
only starts them, the way kubeadm configures a control plane, on 127.0.0.1 with free ports and a temporary data
folder, waits until each one answers its health endpoint, writes an admin kubeconfig, and stops them again
(each process is the leader of its own process group; the group is killed).

- ``ControlPlane(directory).start()`` / ``.stop()`` (also a context manager): what the pytest fixtures in
  ``tests/conftest.py`` use (``kube_cluster`` once per test process, ``kube_namespace`` per test).
- ``python tests/kube_cluster.py up --dir DIR`` / ``down --dir DIR``: the same control plane left running for
  manual use (``make kube-up`` / ``make kube-down``); ``up`` prints the admin kubeconfig's path.  ``up --seed FILE
  --job JOB --kubelet-node NAME[:RESOURCE=QUANTITY,...]`` (the Molecule scenarios) also creates the seed's objects,
  writes the job's kubeconfig and starts ``kubelet`` (``cmd_kubelet``), a background ``KubeletStandin`` for the
  named nodes that ``down`` stops and that exits by itself when the API is gone.  ``up --node-address ADDRESS
  --kubelet NAME`` is for real kubelets in test hosts: a background ``relay`` (``cmd_relay``, an ``OutageRelay``
  without trigger) on ADDRESS, the address the hosts reach this machine at, and ``kubelet-NAME.kubeconfig``, node
  NAME's own credentials (system:node:NAME) through it (``molecule/shared/real_kubelet.yml`` uses them).

What is real: the API server with its default admission chain plus NodeRestriction (PodSecurity,
ValidatingAdmissionPolicy, ServiceAccount, RuntimeClass, DefaultTolerationSeconds, TaintNodesByCondition, ...),
``--authorization-mode=Node,RBAC``, service-account tokens signed with a key pair of this control plane, etcd as its
storage, every default controller of kube-controller-manager (DaemonSet, garbage collector, namespace, node
lifecycle, serviceaccount and its token controller, disruption, ...) and the scheduler.  What is not here: kube-proxy,
CoreDNS, and kubelets unless a test host runs one (``--node-address``; elsewhere ``KubeletStandin`` writes what a
kubelet would, through the API only).  etcd listens on plain HTTP on 127.0.0.1 and does not fsync
(``--unsafe-no-fsync``): its data is thrown away with the control plane.

Also here, for the tests: ``KubeletStandin`` (writes, through the API only, the node and pod status a kubelet would)
and ``job_credentials`` (the collection's ClusterRoles from ``rbac/``, a ServiceAccount bound to one job's role and
its token from the TokenRequest API, so that the roles run as that job and not as admin).

Standard library plus ``cryptography`` (in the test venv) for the certificates and PyYAML for ``rbac/*.yml``.
"""
import argparse
import base64
import datetime
import http.client
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD_SCRIPT = os.path.join(REPO_ROOT, "tests", "tools", "kube-build.sh")
DEFAULT_CACHE = "/var/cache/gpu-native-fleet/kube"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SERVICE_CIDR = "10.96.0.0/12"
SERVICE_IP = "10.96.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
START_TIMEOUT = 90  # seconds per component: a 2-core machine shared with other test runs
PORT_ATTEMPTS = 3  # starts tried when a port picked as free was taken before the component bound it
AUDIT_LOG = "audit-nodes.jsonl"  # in the data folder: the API server's audit log of writes to Node objects
# Every write to a Node object itself (not its status, which kubelets post all the time), with the object the API
# answered: the record a cluster operator reads to see who cordoned which node when. `NodeWrites.from_audit_log`
# reads it back for a check that cannot hold a watch open through a whole run (Molecule's verify).
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "RequestResponse", "verbs": ["create", "update", "patch", "delete"],
                           "resources": [{"group": "", "resources": ["nodes"]}]},
                          {"level": "None"}]}


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message names the component and the fix."""


def kube_version():
    """The Kubernetes release the build script pins (its ``KUBE_VERSION=`` line: one place for it)."""
    with open(BUILD_SCRIPT, encoding="utf-8") as handle:
        match = re.search(r"^KUBE_VERSION=(v[0-9.]+)", handle.read(), re.MULTILINE)
    if not match:
        raise ControlPlaneError("%s has no KUBE_VERSION= line" % BUILD_SCRIPT)
    return match.group(1)


def bin_dir():
    """Where the binaries are: $KUBE_BIN_DIR, else $KUBE_CACHE/<version>/bin (KUBE_CACHE as kube-build.sh has it)."""
    if os.environ.get("KUBE_BIN_DIR"):
        return os.environ["KUBE_BIN_DIR"]
    return os.path.join(os.environ.get("KUBE_CACHE") or DEFAULT_CACHE, kube_version(), "bin")


def free_ports(count):
    """`count` distinct loopback ports that were free a moment ago (all held at once while picked)."""
    sockets = []
    try:
        for dummy in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# --- certificates ------------------------------------------------------------------------------
class _PKI:
    """A self-signed CA and the certificates kubeadm would issue from it, written as PEM files into ``directory``."""

    def __init__(self, directory):
        # pylint: disable=import-outside-toplevel
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
        self._x509, self._hashes, self._ser, self._ec = x509, hashes, serialization, ec
        self._eku, self._name_oid = ExtendedKeyUsageOID, NameOID
        self.directory = directory
        self.now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-native-fleet-test-ca")])
        self.ca_cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                        .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
                        .not_valid_before(self.now).not_valid_after(self.now + datetime.timedelta(days=2))
                        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                     content_commitment=False, key_encipherment=False,
                                                     data_encipherment=False, key_agreement=False,
                                                     encipher_only=False, decipher_only=False), critical=True)
                        .sign(self.ca_key, hashes.SHA256()))
        self.ca_path = self._write("ca.crt", self.ca_cert.public_bytes(serialization.Encoding.PEM))
        self.ca_key_path = self._write("ca.key", self._key_pem(self.ca_key))

    def _write(self, name, data):
        path = os.path.join(self.directory, name)
        with open(path, "wb") as handle:
            handle.write(data)
        os.chmod(path, 0o600)
        return path

    def _key_pem(self, key):
        return key.private_bytes(self._ser.Encoding.PEM, self._ser.PrivateFormat.PKCS8, self._ser.NoEncryption())

    def issue(self, name, common_name, organizations=(), server_names=(), client=True, server=False):
        """Write <name>.crt and <name>.key; return their paths."""
        x509, oid = self._x509, self._name_oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        subject = [x509.NameAttribute(oid.ORGANIZATION_NAME, org) for org in organizations]
        subject.append(x509.NameAttribute(oid.COMMON_NAME, common_name))
        usages = ([self._eku.CLIENT_AUTH] if client else []) + ([self._eku.SERVER_AUTH] if server else [])
        builder = (x509.CertificateBuilder().subject_name(x509.Name(subject)).issuer_name(self.ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(self.now).not_valid_after(self.now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if server_names:
            alt = []
            for entry in server_names:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(entry)))
                except ValueError:
                    alt.append(x509.DNSName(entry))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self.ca_key, self._hashes.SHA256())
        return (self._write(name + ".crt", cert.public_bytes(self._ser.Encoding.PEM)),
                self._write(name + ".key", self._key_pem(key)))

    def service_account_keys(self):
        """The key pair that signs (sa.key) and verifies (sa.pub) service-account tokens."""
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        public = key.public_key().public_bytes(self._ser.Encoding.PEM, self._ser.PublicFormat.SubjectPublicKeyInfo)
        return self._write("sa.key", self._key_pem(key)), self._write("sa.pub", public)


class _AttachedCA:  # pylint: disable=too-few-public-methods
    """The CA of a control plane started by another process: only its certificate's path (what requests need)."""

    def __init__(self, ca_path):
        self.ca_path = ca_path


def kubeconfig_text(server, ca_path, namespace="default", cert=None, token=None, user="admin"):
    """A kubeconfig for `server`: a client certificate (cert=(crt, key), embedded) or a bearer token."""
    def b64(path):
        with open(path, "rb") as handle:
            return base64.b64encode(handle.read()).decode()

    credentials = {"token": token} if token is not None else {
        "client-certificate-data": b64(cert[0]), "client-key-data": b64(cert[1])}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "gpu-native-test",
        "clusters": [{"name": "gpu-native-test",
                      "cluster": {"server": server, "certificate-authority-data": b64(ca_path)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "gpu-native-test",
                      "context": {"cluster": "gpu-native-test", "user": user, "namespace": namespace}}],
    }
    return json.dumps(config, indent=2) + "\n"  # JSON is YAML: every kubeconfig reader takes it


# --- the control plane -------------------------------------------------------------------------
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1, data under ``directory``."""

    def __init__(self, directory=None, binaries=None, keep_directory=False, die_with_parent=True):
        self.die_with_parent = die_with_parent
        self.owns_directory = directory is None
        self.directory = os.path.abspath(directory or tempfile.mkdtemp(prefix="gpu-native-kube-"))
        self.keep_directory = keep_directory
        self.binaries = binaries or bin_dir()
        self.version = kube_version()
        self.processes = {}  # name -> Popen (or, after load(), name -> pid)
        self.ports = {}
        self.url = None
        self.kubeconfig = os.path.join(self.directory, "admin.kubeconfig")
        self.startup_seconds = None
        self.timings = {}  # component -> seconds from its start to its health endpoint's "ok"
        self.pki = None
        self.admin_cert = None
        self._ssl = None

    @classmethod
    def attach(cls, directory):
        """The control plane that `up` left running in `directory`, to talk to as admin (starts and stops nothing).

        Reads the API's address from state.json and the admin certificate and the CA that `up` wrote there."""
        directory = os.path.abspath(directory)
        with open(_state_path(directory), encoding="utf-8") as handle:
            state = json.load(handle)
        plane = cls(directory, binaries=directory, die_with_parent=False)
        plane.url, plane.ports = state["url"], state.get("ports", {})
        plane.pki = _AttachedCA(os.path.join(directory, "ca.crt"))
        plane.admin_cert = (os.path.join(directory, "admin.crt"), os.path.join(directory, "admin.key"))
        plane._ssl = ssl.create_default_context(cafile=plane.pki.ca_path)
        plane._ssl.load_cert_chain(*plane.admin_cert)
        return plane

    # -- files and processes --
    def _binary(self, name):
        path = os.path.join(self.binaries, name)
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(
                "%s is not built (%s missing). Fix: run `make kube-build` (tests/tools/kube-build.sh builds "
                "%s from the upstream Go modules and caches it under %s)."
                % (name, path, self.version, os.path.dirname(self.binaries)))
        return path

    def _component_kubeconfig(self, name, cert):
        path = os.path.join(self.directory, name + ".kubeconfig")
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "default",
            "clusters": [{"name": "default", "cluster": {"server": self.url, "certificate-authority": self.pki.ca_path}}],
            "users": [{"name": name, "user": {"client-certificate": cert[0], "client-key": cert[1]}}],
            "contexts": [{"name": "default", "context": {"cluster": "default", "user": name}}],
        }
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(config, handle, indent=2)
        os.chmod(path, 0o600)
        return path

    def _client_component_flags(self, name, cert, port, serving):
        """The flags the controller-manager and the scheduler share: their kubeconfig (for the API, and to
        authenticate and authorize their own callers), their serving certificate on 127.0.0.1:`port`."""
        kubeconfig = self._component_kubeconfig(name, cert)
        return ["--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig,
                "--authorization-kubeconfig=" + kubeconfig,
                "--bind-address=127.0.0.1", "--secure-port=%d" % port,
                "--tls-cert-file=" + serving[0], "--tls-private-key-file=" + serving[1],
                "--client-ca-file=" + self.pki.ca_path, "--requestheader-client-ca-file=" + self.pki.ca_path,
                "--leader-elect=false", "-v=1"]

    def _spawn(self, name, args):
        log_path = os.path.join(self.directory, name + ".log")
        with open(log_path, "ab") as log:
            # a session of its own: the process leads a process group, which stop() kills as a whole
            self.processes[name] = subprocess.Popen(  # pylint: disable=consider-using-with
                [self._binary(name)] + args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.directory, start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None)

    def log_tail(self, name, lines=25):
        try:
            with open(os.path.join(self.directory, name + ".log"), encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def _wait_healthy(self, name, url, check_body=lambda body: body.strip() == "ok"):
        started = time.monotonic()
        deadline = started + START_TIMEOUT
        last = "no answer yet"
        while time.monotonic() < deadline:
            proc = self.processes[name]
            if proc.poll() is not None:
                raise ControlPlaneError("%s exited with status %s while starting; its log ends:\n%s"
                                        % (name, proc.returncode, self.log_tail(name)))
            try:
                with urllib.request.urlopen(url, timeout=5, context=self._ssl if url.startswith("https") else None) \
                        as response:
                    body = response.read().decode("utf-8", "replace")
                if check_body(body):
                    self.timings[name] = round(time.monotonic() - started, 2)
                    return
                last = body[:300]
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError("%s did not become healthy at %s within %d s (last: %s); its log ends:\n%s"
                                % (name, url, START_TIMEOUT, last, self.log_tail(name)))

    # -- start and stop --
    def start(self):
        """Start all four components; on any error, stop what was started and raise ControlPlaneError."""
        for name in COMPONENTS:
            self._binary(name)
        os.makedirs(self.directory, exist_ok=True)
        started = time.monotonic()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start()
                break
            except ControlPlaneError as exc:
                self._stop_processes()
                # a free port can be taken by another process between free_ports() and the bind: retry
                if "address already in use" not in str(exc) or attempt == PORT_ATTEMPTS:
                    self.stop()
                    raise
                shutil.rmtree(os.path.join(self.directory, "etcd"), ignore_errors=True)
            except BaseException:
                self.stop()
                raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _start(self):
        d = self.directory
        self.pki = pki = _PKI(d)
        api_port, etcd_port, peer_port, kcm_port, sched_port = free_ports(5)
        self.ports = {"kube-apiserver": api_port, "etcd": etcd_port, "etcd-peer": peer_port,
                      "kube-controller-manager": kcm_port, "kube-scheduler": sched_port}
        self.url = "https://127.0.0.1:%d" % api_port
        serving = pki.issue("apiserver", "kube-apiserver", client=False, server=True, server_names=(
            "127.0.0.1", "localhost", SERVICE_IP, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local"))
        admin = pki.issue("admin", "kubernetes-admin", organizations=("system:masters",))
        kcm = pki.issue("controller-manager", "system:kube-controller-manager")
        kcm_serving = pki.issue("controller-manager-serving", "kube-controller-manager", client=False, server=True,
                                server_names=("127.0.0.1", "localhost"))
        sched = pki.issue("scheduler", "system:kube-scheduler")
        sched_serving = pki.issue("scheduler-serving", "kube-scheduler", client=False, server=True,
                                  server_names=("127.0.0.1", "localhost"))
        sa_key, sa_pub = pki.service_account_keys()
        self.admin_cert = admin
        self._ssl = ssl.create_default_context(cafile=pki.ca_path)
        self._ssl.load_cert_chain(*admin)

        etcd_url = "http://127.0.0.1:%d" % etcd_port
        self._spawn("etcd", [
            "--name=default", "--data-dir=" + os.path.join(d, "etcd"),
            "--listen-client-urls=" + etcd_url, "--advertise-client-urls=" + etcd_url,
            "--listen-peer-urls=http://127.0.0.1:%d" % peer_port,
            "--initial-advertise-peer-urls=http://127.0.0.1:%d" % peer_port,
            "--initial-cluster=default=http://127.0.0.1:%d" % peer_port,
            "--listen-metrics-urls=", "--unsafe-no-fsync", "--log-level=warn"])
        self._wait_healthy("etcd", etcd_url + "/health", lambda body: json.loads(body).get("health") == "true")

        audit_policy = os.path.join(d, "audit-policy.json")  # JSON is YAML: the API server reads it as such
        with open(audit_policy, "w", encoding="utf-8") as handle:
            json.dump(AUDIT_POLICY, handle)
        self._spawn("kube-apiserver", [
            "--audit-policy-file=" + audit_policy, "--audit-log-path=" + os.path.join(d, AUDIT_LOG),
            "--audit-log-format=json", "--audit-log-mode=blocking",  # written before the request is answered
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=%d" % api_port,
            "--etcd-servers=" + etcd_url,
            "--tls-cert-file=" + serving[0], "--tls-private-key-file=" + serving[1],
            "--client-ca-file=" + pki.ca_path,
            "--service-account-issuer=" + SA_ISSUER,
            "--service-account-key-file=" + sa_pub, "--service-account-signing-key-file=" + sa_key,
            "--service-cluster-ip-range=" + SERVICE_CIDR,
            "--authorization-mode=Node,RBAC",
            # kubeadm's list; the defaults stay on (NamespaceLifecycle, LimitRanger, ServiceAccount,
            # TaintNodesByCondition, PodSecurity, Priority, DefaultTolerationSeconds, RuntimeClass,
            # ValidatingAdmissionPolicy, the webhooks, ResourceQuota, ...)
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true", "--enable-bootstrap-token-auth=true",
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            # the only member of the `kubernetes` Service would be 127.0.0.1, which Endpoints refuse
            "--endpoint-reconciler-type=none",
            "--cert-dir=" + os.path.join(d, "apiserver-certs"), "-v=1"])
        self._wait_healthy("kube-apiserver", self.url + "/readyz")
        with open(self.kubeconfig, "w", encoding="utf-8") as handle:
            handle.write(kubeconfig_text(self.url, pki.ca_path, cert=admin))
        os.chmod(self.kubeconfig, 0o600)

        kcm_flags = self._client_component_flags("controller-manager", kcm, kcm_port, kcm_serving)
        self._spawn("kube-controller-manager", kcm_flags + [
            "--cluster-signing-cert-file=" + pki.ca_path, "--cluster-signing-key-file=" + pki.ca_key_path,
            "--controllers=*,bootstrapsigner,tokencleaner",  # kubeadm's: every default controller
            "--root-ca-file=" + pki.ca_path, "--service-account-private-key-file=" + sa_key,
            "--use-service-account-credentials=true", "--service-cluster-ip-range=" + SERVICE_CIDR])
        self._spawn("kube-scheduler", self._client_component_flags("scheduler", sched, sched_port, sched_serving))
        self._wait_healthy("kube-controller-manager", "https://127.0.0.1:%d/healthz" % kcm_port)
        self._wait_healthy("kube-scheduler", "https://127.0.0.1:%d/readyz" % sched_port)

    def _stop_processes(self):
        for name in reversed(COMPONENTS):
            proc = self.processes.pop(name, None)
            if proc is not None:
                _kill_group(proc.pid, proc.wait)

    def stop(self):
        """Kill every component's process group (SIGTERM, then SIGKILL after 10 s); remove a temporary folder."""
        self._stop_processes()
        if self.owns_directory and not self.keep_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- talking to it --
    def write_kubeconfig(self, path, namespace="default", token=None):
        """An admin kubeconfig (client certificate of system:masters) at `path`, or one with a bearer `token`."""
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(kubeconfig_text(self.url, self.pki.ca_path, namespace,
                                         cert=None if token is not None else self.admin_cert, token=token))
        os.chmod(path, 0o600)
        return path

    def request(self, method, path, body=None, content_type="application/json", token=None):
        """(HTTP status, decoded JSON or text) of one API request, as admin (or with a bearer `token`)."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode() if not isinstance(body, (bytes, str)) else \
                (body.encode() if isinstance(body, str) else body)
            headers["Content-Type"] = content_type
        context = self._ssl
        if token is not None:
            headers["Authorization"] = "Bearer " + token
            context = ssl.create_default_context(cafile=self.pki.ca_path)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30, context=context) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def api(self, method, path, body=None, expect=(200, 201, 202), **kwargs):
        """The decoded answer of a request that must succeed (AssertionError naming the answer otherwise)."""
        status, answer = self.request(method, path, body, **kwargs)
        if status not in expect:
            raise AssertionError("%s %s answered %d: %s" % (method, path, status, answer))
        return answer

    def wait_for(self, what, probe, timeout=60, interval=0.2):
        """Poll `probe()` until it returns a true value; return it, or raise AssertionError naming `what`."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))
            time.sleep(interval)

    def create_namespace(self, prefix="t-", labels=None):
        """A fresh namespace, returned once its `default` ServiceAccount exists (pods are refused before)."""
        name = "%s%s" % (prefix, secrets.token_hex(4))
        self.api("POST", "/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
        self.wait_for("the default ServiceAccount of namespace %s" % name,
                      lambda: self.request("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % name)[0] == 200)
        return name

    def delete_namespace(self, name):
        """Start the namespace's deletion (the namespace controller finishes it); do not wait."""
        self.request("DELETE", "/api/v1/namespaces/" + name)


# --- a kubelet stand-in: no kubelet runs here, so pod and node status are written through the API -------------
class KubeletStandin:
    """What a kubelet would write for `nodes`, and nothing else, through the real API (it answers no request).

    A background thread, every `interval` seconds: each node's Lease in kube-node-lease renewed (every 2 s, where
    a kubelet renews every 10 s) and its status (Ready=True, capacity and allocatable: cpu, memory, pods and `gpus`
    nvidia.com/gpu) posted when it differs from what was last posted, as a kubelet does since node leases (its
    nodeStatusReportFrequency is minutes), so the node lifecycle controller lifts its not-ready taint, the
    scheduler may place pods, and a Node object changes only when something on it does; each pod bound to one of them Running with Ready=True (what
    a PodDisruptionBudget counts as healthy), pods in `pending` (namespace/name) left Pending; and a pod deleted
    gracefully (a deletionTimestamp) removed with gracePeriodSeconds=0, as a kubelet does once the containers
    have stopped (unless `finalize` is false).  A pod that finished (Succeeded, Failed) is left as it is, as a
    kubelet leaves it.  Use as a context manager: the thread stops at exit.

    `resources`: {node: {resource: quantity}} that node reports instead of the default capacity (what its device
    plugin would advertise: 7 GPUs, MIG resources...); a quantity None drops that default resource (a node
    whose device plugin runs the mixed MIG strategy offers no whole nvidia.com/gpu).  `pod_ip`: the podIP written (a test that serves the pod's
    port on 127.0.0.1 passes "127.0.0.1").  `waiting`: {node: (reason, message)}: that node's pods stay Pending
    with every container waiting for that reason (an image that cannot be pulled).  `events`: also write the
    Events a kubelet writes for a pod it starts (Pulling, Pulled, Created, Started) or cannot start (Failed)."""

    def __init__(self, plane, nodes, gpus=8, interval=0.3, pending=(), finalize=True, resources=None,
                 pod_ip="10.244.0.10", waiting=None, events=False, waiting_namespace=None):
        import threading  # pylint: disable=import-outside-toplevel
        self.plane, self.nodes, self.gpus, self.interval = plane, list(nodes), gpus, interval
        self.pending = set(pending)
        self.resources = dict(resources or {})
        self.pod_ip = pod_ip
        self.waiting = dict(waiting or {})
        self.waiting_namespace = waiting_namespace  # `waiting` holds for the pods of this namespace only (if set)
        self.events = events
        self._seen = set()  # uids of the pods this stand-in has started (or failed to), for the Events
        self.finalize = finalize  # False: a kubelet whose containers never stop (pods stay terminating)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-standin", daemon=True)
        self._last_heartbeat = -1e9
        self._posted = {}  # node -> the resources of its last status post
        self._since = self._now()  # Ready since the stand-in started
        self.errors = []

    def __enter__(self):
        self.sync()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as exc:  # pylint: disable=broad-except  # kept for the test to show
                self.errors.append(repr(exc))

    def _now(self):
        return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def sync(self):
        now = self._now()
        heartbeat = time.monotonic() - self._last_heartbeat >= 2  # a kubelet renews its Lease every 10 s
        if heartbeat:
            self._last_heartbeat = time.monotonic()
        for node in self.nodes:
            resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(self.gpus)}
            resources.update(self.resources.get(node, {}))
            resources = {name: value for name, value in resources.items() if value is not None}  # None: not offered
            if heartbeat:
                self._renew_lease(node)
            if self._posted.get(node) != resources:
                # Posting the status on every beat (a fresh lastHeartbeatTime) would change the Node under a
                # client's read-then-patch, and kubernetes.core would report a second, idempotent patch as a change.
                if self._post_node_status(node, resources, now):
                    self._posted[node] = resources
            self._sync_pods(node, now)

    def _renew_lease(self, node):
        """Renew (or create) the node's Lease, the heartbeat the node lifecycle controller reads."""
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + node
        renew = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew}
        status = self.plane.request("PATCH", path, {"spec": spec}, content_type="application/merge-patch+json")[0]
        if status != 404:
            return
        # No Lease: a new node, or one deleted and created again (its Lease goes with it): post its status anew.
        self._posted.pop(node, None)
        metadata = {"name": node, "namespace": "kube-node-lease"}
        status, found = self.plane.request("GET", "/api/v1/nodes/" + node)
        if status == 200:  # owned by the Node, as a kubelet's, so the garbage collector removes it with the node
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                            "uid": found["metadata"]["uid"]}]
        self.plane.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                           {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                            "spec": spec})

    def _post_node_status(self, node, resources, now):
        status = {"status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet stand-in (tests/kube_cluster.py)",
                            "lastHeartbeatTime": now, "lastTransitionTime": self._since}]}}
        return self.plane.request("PATCH", "/api/v1/nodes/%s/status" % node, status,
                                  content_type="application/strategic-merge-patch+json")[0] == 200

    def _sync_pods(self, node, now):
        status, answer = self.plane.request("GET", "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s" % node)
        if status == 200:
            for pod in answer.get("items", []):
                meta = pod["metadata"]
                path = "/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"])
                if meta.get("deletionTimestamp"):
                    if not self.finalize:
                        continue
                    self.plane.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                                        "gracePeriodSeconds": 0,
                                                        "preconditions": {"uid": meta["uid"]}})
                elif pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    continue  # a kubelet does not start a finished pod again
                elif node in self.waiting and "%s/%s" % (meta["namespace"], meta["name"]) not in self.pending \
                        and self.waiting_namespace in (None, meta["namespace"]):
                    self._wait_pod(node, pod, path, now)
                elif pod.get("status", {}).get("phase") != "Running" and \
                        "%s/%s" % (meta["namespace"], meta["name"]) not in self.pending:
                    ready = [{"type": kind, "status": "True", "lastTransitionTime": now}
                             for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
                    status = {"status": {
                        "phase": "Running", "conditions": ready, "startTime": now, "podIP": self.pod_ip,
                        "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "",
                                               "ready": True, "restartCount": 0, "started": True,
                                               "state": {"running": {"startedAt": now}}}
                                              for c in pod["spec"]["containers"]]}}
                    self._event_once(pod, node, [("Pulling", 'Pulling image "%s"'), ("Pulled", None),
                                                 ("Created", "Created container %s"),
                                                 ("Started", "Started container %s")], now)
                    self.plane.request("PATCH", path + "/status", status,
                                       content_type="application/strategic-merge-patch+json")

    def _wait_pod(self, node, pod, path, now):
        """Pending, every container waiting for the node's `waiting` reason (a kubelet that cannot pull)."""
        reason, message = self.waiting[node]
        if pod.get("status", {}).get("containerStatuses"):
            return
        status = {"status": {
            "phase": "Pending", "startTime": now, "podIP": self.pod_ip,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                           {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                            "lastTransitionTime": now}],
            "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": False,
                                   "restartCount": 0, "started": False,
                                   "state": {"waiting": {"reason": reason, "message": message % c}}}
                                  for c in pod["spec"]["containers"]]}}
        self._event_once(pod, node, [("Pulling", 'Pulling image "%s"'), ("Failed", message)], now)
        self.plane.request("PATCH", path + "/status", status, content_type="application/strategic-merge-patch+json")

    def _event_once(self, pod, node, events, now):
        """The kubelet's Events about starting `pod` (type Normal; Failed is Warning), written once per pod.

        Each message is formatted with the container (`image`, `name`), as the kubelet's are: 'Pulling image
        "<image>"', 'Successfully pulled image ...', 'Created container <name>', 'Started container <name>'."""
        meta = pod["metadata"]
        if not self.events or meta["uid"] in self._seen:
            return False
        self._seen.add(meta["uid"])
        for container in pod["spec"]["containers"]:
            for reason, message in events:
                if reason == "Pulled":
                    text = 'Successfully pulled image "%s"' % container["image"]
                elif reason in ("Pulling",):
                    text = message % container["image"]
                elif reason == "Failed":
                    text = message % container
                else:
                    text = message % container["name"]
                self.plane.request("POST", "/api/v1/namespaces/%s/events" % meta["namespace"], {
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"generateName": meta["name"] + "."},
                    "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": meta["namespace"],
                                       "name": meta["name"], "uid": meta["uid"],
                                       "fieldPath": "spec.containers{%s}" % container["name"]},
                    "reason": reason, "message": text, "type": "Warning" if reason == "Failed" else "Normal",
                    "source": {"component": "kubelet", "host": node}, "firstTimestamp": now,
                    "lastTimestamp": now, "count": 1})
        return True


# --- objects a test puts on the control plane (as admin), and removes again --------------------------------------
SEED_POD_LABEL = "gpu-native.io/test-seed-pod"  # the label by which a seeded pod's real controller adopts it
NOWHERE = {"gpu-native.io/test": "nowhere"}  # a nodeSelector no node matches: a controller's own pods stay Pending


class Seed:
    """Nodes, namespaces and pods a test starts from, created through the real API as admin; `cleanup()` removes them.

    Written the way the tests used to seed the API stand-in (plain object dicts), with what a real server needs:
    - namespaces are per test: ``ns("ml")`` creates ``ml-<random>`` once (its default ServiceAccount exists) and
      the test keeps using the short name (``logical()`` maps back);
    - a Node is created from metadata and spec; its status (allocatable...) is what `KubeletStandin` reports;
    - a pod's ``status.phase`` Succeeded or Failed is written through the status subresource (the API creates
      every pod Pending); Running pods are made Running and Ready by a `KubeletStandin` for their node;
    - a pod's controller ownerReference (ReplicaSet, Job, DaemonSet...) becomes a real owner: the garbage collector
      deletes a pod whose owner does not exist, so a real ReplicaSet (a DaemonSet for kind DaemonSet) is created
      after the pod, selecting it by the label ``gpu-native.io/test-seed-pod``, and adopts it.  The owners'
      own pods, if any, have nowhere to run (`NOWHERE`): a ReplicaSet replaces an evicted pod with a Pending one,
      which is what a real ReplicaSet does; only pods bound to a node are the node's pods.  A finished pod is
      seeded without its owner (controllers adopt only active pods)."""

    def __init__(self, plane):
        self.plane = plane
        self.namespaces = {}  # short name -> the namespace created for this test
        self.nodes = []
        self.pods = []  # (namespace, name) as created

    def ns(self, logical):
        if logical not in self.namespaces:
            prefix = re.sub(r"[^a-z0-9-]", "-", logical.lower())[:40].strip("-") + "-"
            self.namespaces[logical] = self.plane.create_namespace(prefix=prefix)
        return self.namespaces[logical]

    def logical(self, namespace):
        for short, real in self.namespaces.items():
            if real == namespace:
                return short
        return namespace

    def node(self, obj):
        name = obj["metadata"]["name"]
        if self.plane.request("DELETE", "/api/v1/nodes/" + name)[0] == 200:  # one an earlier test left behind
            self.plane.wait_for("the old node %s to go" % name,
                                lambda: self.plane.request("GET", "/api/v1/nodes/" + name)[0] == 404)
        meta = {key: obj["metadata"][key] for key in ("name", "labels", "annotations") if obj["metadata"].get(key)}
        spec = {key: value for key, value in obj.get("spec", {}).items() if value not in (None, [], {}, False)}
        self.plane.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec})
        self.nodes.append(name)
        return name

    def pod(self, obj):
        obj = json.loads(json.dumps(obj))
        meta = obj["metadata"]
        namespace = self.ns(meta.get("namespace", "default"))
        owners = [ref for ref in meta.pop("ownerReferences", []) if ref.get("controller")]
        status = obj.get("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            owners = []  # no ReplicaSet or DaemonSet adopts a finished pod: it is seeded without its owner
        if owners:
            meta.setdefault("labels", {})[SEED_POD_LABEL] = meta["name"]
        status = obj.pop("status", {})
        meta["namespace"] = namespace
        self.plane.api("POST", "/api/v1/namespaces/%s/pods" % namespace, obj)
        path = "/api/v1/namespaces/%s/pods/%s" % (namespace, meta["name"])
        if status.get("phase") in ("Succeeded", "Failed"):
            self.plane.api("PATCH", path + "/status", {"status": {"phase": status["phase"]}},
                           content_type="application/merge-patch+json")
        if owners:
            self._owner(namespace, meta["name"], owners[0]["kind"], obj["spec"].get("nodeName"))
            self.plane.wait_for("%s to be adopted by its %s" % (path, owners[0]["kind"]), lambda: any(
                ref.get("controller") for ref in self.plane.api("GET", path)["metadata"].get("ownerReferences", [])))
        self.pods.append((namespace, meta["name"]))
        return namespace, meta["name"]

    def _owner(self, namespace, pod, kind, node):
        selector = {SEED_POD_LABEL: pod}
        template = {"metadata": {"labels": selector},
                    "spec": {"containers": [{"name": "c", "image": "example.invalid/owner:1"}]}}
        name = re.sub(r"[^a-z0-9-]", "-", pod)[:50].strip("-") + "-owner"
        if kind == "DaemonSet":
            # the node's daemon pod is the seeded one; OnDelete: the controller never replaces it by itself
            template["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
            self.plane.api("POST", "/apis/apps/v1/namespaces/%s/daemonsets" % namespace, {
                "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": selector}, "template": template,
                         "updateStrategy": {"type": "OnDelete"}}})
        else:
            template["spec"]["nodeSelector"] = dict(NOWHERE)
            self.plane.api("POST", "/apis/apps/v1/namespaces/%s/replicasets" % namespace, {
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
                "spec": {"replicas": 1, "selector": {"matchLabels": selector}, "template": template}})

    def namespaced(self, obj):
        """Any other namespaced object (a PodDisruptionBudget, a DaemonSet...) in its test namespace."""
        obj = json.loads(json.dumps(obj))
        group_version = obj["apiVersion"]
        base = "/api/v1" if group_version == "v1" else "/apis/" + group_version
        plural = obj["kind"].lower() + ("es" if obj["kind"].endswith("s") else "s")
        namespace = self.ns(obj["metadata"].get("namespace", "default"))
        obj["metadata"]["namespace"] = namespace
        return self.plane.api("POST", "%s/namespaces/%s/%s" % (base, namespace, plural), obj)

    def bound_pods(self, node=None):
        """["<short namespace>/<name>"] of the pods bound to `node` (default: to any node of this seed)."""
        nodes = [node] if node else self.nodes
        found = []
        for name in nodes:
            answer = self.plane.api("GET", "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s" % name)
            found.extend("%s/%s" % (self.logical(p["metadata"]["namespace"]), p["metadata"]["name"])
                         for p in answer["items"] if p["metadata"]["namespace"] in self.namespaces.values())
        return sorted(found)

    def cleanup(self):
        """Delete the namespaces (no new pod can start in them from then on), their pods at once (no kubelet
        may be left to finalize them: a pod bound to a node would otherwise wait for one), then the nodes."""
        for namespace in self.namespaces.values():
            self.plane.delete_namespace(namespace)
        for namespace in self.namespaces.values():
            self.plane.request("DELETE", "/api/v1/namespaces/%s/pods?gracePeriodSeconds=0" % namespace)
        for node in self.nodes:
            self.plane.request("DELETE", "/api/v1/nodes/" + node)


class NodeWrites:
    """What happened to the Nodes named `nodes`: one entry per creation, deletion, or change of
    `spec.unschedulable` or of a `gpu-native.io/` annotation (what a cordon and its marks change), as {"node",
    "event": created|changed|deleted, "unschedulable", "annotations"}, in the API's order, in ``entries``.
    `from_audit_log` reads them from a control plane's audit log; `NodeHistory` from a live watch."""

    def __init__(self, nodes):
        self.nodes = set(nodes)
        self.entries = []
        self._views = {}

    @staticmethod
    def _view(node):
        annotations = {key: value for key, value in sorted((node["metadata"].get("annotations") or {}).items())
                       if key.startswith("gpu-native.io/")}
        return bool(node.get("spec", {}).get("unschedulable")), annotations

    def _record(self, event, node):
        name = node["metadata"]["name"]
        view = self._view(node) if event != "deleted" else (False, {})
        if event == "changed" and self._views.get(name) == view:
            return
        self._views[name] = view
        self.entries.append({"node": name, "event": event, "unschedulable": view[0], "annotations": view[1]})

    @classmethod
    def from_audit_log(cls, directory, nodes):
        """The entries read back from the audit log of the control plane in `directory` (`AUDIT_LOG`): each
        successful write to one of the Nodes `nodes`, with the object the API answered, in etcd's order (the
        answer's resourceVersion).  Starts nothing; the control plane need not run any more."""
        history = cls(nodes)
        writes = []
        with open(os.path.join(directory, AUDIT_LOG), encoding="utf-8") as handle:
            for line in handle:
                event = json.loads(line)
                answer = event.get("responseObject") or {}
                name = (event.get("objectRef") or {}).get("name") or (answer.get("metadata") or {}).get("name")
                if event.get("stage") != "ResponseComplete" or name not in history.nodes or \
                        not 200 <= (event.get("responseStatus") or {}).get("code", 0) < 300:
                    continue
                if event["verb"] == "delete":
                    writes.append((writes[-1][0] if writes else 0, "deleted", {"metadata": {"name": name}}))
                elif answer.get("kind") == "Node":
                    writes.append((int(answer["metadata"]["resourceVersion"]),
                                   "created" if event["verb"] == "create" else "changed", answer))
        for _version, kind, node in sorted(writes, key=lambda write: write[0]):
            history._record(kind, node)  # pylint: disable=protected-access
        return history

    def max_cordoned(self, ignore=()):
        """The most nodes unschedulable at the same time (those in `ignore` not counted)."""
        cordoned, most = set(), 0
        for entry in self.entries:
            (cordoned.add if entry["unschedulable"] else cordoned.discard)(entry["node"])
            most = max(most, len(cordoned - set(ignore)))
        return most


class NodeHistory(NodeWrites):
    """`NodeWrites` from a watch on the Nodes named `nodes`, in a thread, for as long as the context lasts; a watch
    answer that is not an event is kept in ``errors``."""

    def __init__(self, plane, nodes):
        import threading  # pylint: disable=import-outside-toplevel
        super().__init__(nodes)
        self.plane = plane
        self.errors = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._connection = None
        self._thread = threading.Thread(target=self._watch, name="node-history", daemon=True)

    def __enter__(self):
        self._thread.start()
        if not self._ready.wait(30):
            raise AssertionError("the node watch did not start: %s" % self.errors)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        # Shut the socket down, not close the response: closing it waits for the buffered reader's lock, which the
        # watch thread holds in a read that only a new event would end (a settled fleet sends none for minutes).
        sock = self._connection.sock if self._connection is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=10)

    def _watch(self):
        listing = self.plane.api("GET", "/api/v1/nodes")
        for node in listing["items"]:
            if node["metadata"]["name"] in self.nodes:
                self._record("created", node)
        path = "/api/v1/nodes?watch=true&resourceVersion=%s&timeoutSeconds=1800" % listing["metadata"]["resourceVersion"]
        address = urllib.parse.urlsplit(self.plane.url)
        self._connection = http.client.HTTPSConnection(address.hostname, address.port, timeout=1800,
                                                       context=self.plane._ssl)  # pylint: disable=protected-access
        try:
            self._connection.request("GET", path, headers={"Accept": "application/json"})
            response = self._connection.getresponse()
            if response.status != 200:
                raise OSError("the node watch answered %d: %s" % (response.status, response.read(500)))
        except OSError as exc:
            self.errors.append(repr(exc))
            self._ready.set()
            return
        self._ready.set()
        try:
            for line in response:
                if self._stop.is_set():
                    break
                event = json.loads(line)
                obj = event.get("object", {})
                if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
                    self.errors.append(event)
                elif obj.get("metadata", {}).get("name") in self.nodes:
                    self._record({"ADDED": "created", "MODIFIED": "changed", "DELETED": "deleted"}[event["type"]],
                                 obj)
        except (OSError, ValueError, AttributeError) as exc:  # AttributeError: http.client once closed under it
            if not self._stop.is_set():
                self.errors.append(repr(exc))


# --- an outage in front of the API: a TCP relay, not a model of the API -------------------------------------------
class OutageRelay:
    """A TCP relay on `listen_host` (127.0.0.1 unless given) in front of the real API server: bytes go through
    unchanged (TLS included: a client names 127.0.0.1, which the server's certificate holds, as the TLS server name).
    Once the file `trigger` exists (never, when it is None) the relay closes its listening socket and every
    connection, so clients get "Connection refused", as when an API server goes away; ``outage_done`` is set then.
    ``url`` is the relay's address, for a kubeconfig.  The outage tests use the trigger; `up --node-address` runs
    one without a trigger, on the address at which the test hosts reach this machine, for their real kubelets."""

    def __init__(self, target_url, trigger, listen_host="127.0.0.1"):
        import threading  # pylint: disable=import-outside-toplevel
        host_port = target_url.split("://", 1)[1]
        self.target = (host_port.rsplit(":", 1)[0], int(host_port.rsplit(":", 1)[1]))
        self.trigger = trigger
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((listen_host, 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.url = "https://%s:%d" % (listen_host, self.port)
        self.outage_done = threading.Event()
        self._threading = threading
        self._connections = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="outage-relay", daemon=True)
        self._thread.start()

    def _serve(self):
        while self.trigger is None or not os.path.exists(self.trigger):
            try:
                client, _addr = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:  # the closed ones go: a relay for kubelets lives as long as its control plane
                self._connections = [sock for sock in self._connections if sock.fileno() != -1] + [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()
        self.stop()

    @staticmethod
    def _pipe(source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for sock in (source, sink):  # the other direction's thread then ends its recv with an OSError
            sock.close()

    def stop(self):
        self.listener.close()
        with self._lock:
            for sock in self._connections:
                try:
                    sock.close()
                except OSError:
                    pass
            self._connections = []
        self.outage_done.set()


# --- the collection's RBAC (rbac/*.yml), a service account per job, a kubeconfig from its token -----------------
RBAC_DIR = os.path.join(REPO_ROOT, "rbac")
JOBS = ("onboarding", "upgrades", "compliance", "policies")
NAMESPACED_ROLE = "namespaced"  # rbac/namespaced.yml: bound with RoleBindings by the jobs that create pods
JOBS_WITH_NAMESPACED_ROLE = ("onboarding", "upgrades")


def rbac_cluster_roles():
    """{file stem: ClusterRole} of every rbac/*.yml the collection ships (each file holds one ClusterRole)."""
    import yaml  # pylint: disable=import-outside-toplevel  # in the test venv; the launcher itself needs no YAML
    roles = {}
    for name in sorted(os.listdir(RBAC_DIR)):
        if name.endswith(".yml"):
            with open(os.path.join(RBAC_DIR, name), encoding="utf-8") as handle:
                roles[name[:-4]] = yaml.safe_load(handle)
    return roles


def apply_rbac(plane):
    """Create or update the shipped ClusterRoles on `plane` exactly as the files say (as admin)."""
    roles = rbac_cluster_roles()
    for role in roles.values():
        path = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
        status, answer = plane.request("POST", path, role)
        if status == 409:
            current = plane.api("GET", path + "/" + role["metadata"]["name"])
            body = dict(role, metadata=dict(role["metadata"], resourceVersion=current["metadata"]["resourceVersion"]))
            plane.api("PUT", path + "/" + role["metadata"]["name"], body)
        elif status != 201:
            raise AssertionError("creating ClusterRole %s answered %d: %s" % (role["metadata"]["name"], status, answer))
    return roles


def job_credentials(plane, job, namespace, namespaces=(), expiration=3600):
    """A ServiceAccount `gpu-native-<job>` in `namespace` bound to the job's ClusterRole (ClusterRoleBinding) and, for
    the jobs that create pods, to rbac/namespaced.yml by a RoleBinding in each of `namespaces` (default: `namespace`);
    its token from the TokenRequest API (what `kubectl create token` calls).

    Returns (token, cluster-scoped object paths to delete afterwards).  Waits until the authorizer honours the
    binding (its cache follows the API by a moment), checked with a SelfSubjectAccessReview under the token."""
    if job not in JOBS:
        raise ValueError("job %r is not one of %s" % (job, ", ".join(JOBS)))
    roles = apply_rbac(plane)
    account = "gpu-native-" + job
    plane.api("POST", "/api/v1/namespaces/%s/serviceaccounts" % namespace,
              {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}, expect=(201, 409))
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    binding = "gpu-native-test-%s-%s" % (job, namespace)
    plane.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": roles[job]["metadata"]["name"]},
        "subjects": subject}, expect=(201, 409))
    if job in JOBS_WITH_NAMESPACED_ROLE:
        for target in namespaces or (namespace,):
            plane.api("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % target, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "gpu-native-%s-namespaced" % job},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": roles[NAMESPACED_ROLE]["metadata"]["name"]},
                "subjects": subject}, expect=(201, 409))
    answer = plane.api("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (namespace, account), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": expiration}})
    token = answer["status"]["token"]
    rule = roles[job]["rules"][0]

    def honoured():
        status, review = plane.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"group": rule["apiGroups"][0], "resource": rule["resources"][0],
                                            "verb": rule["verbs"][0]}}}, token=token)
        return status == 201 and review.get("status", {}).get("allowed")
    plane.wait_for("the ClusterRoleBinding %s to be honoured" % binding, honoured, timeout=30)
    return token, ["/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + binding]


def job_kubeconfig(plane, job, path, namespace, namespaces=()):
    """`job_credentials` written as a kubeconfig at `path` (for fixtures wider than one test, which cannot use the
    function-scoped ``kube_job_kubeconfig``).  Returns (path, cluster-scoped object paths to delete afterwards)."""
    token, cleanup = job_credentials(plane, job, namespace, namespaces)
    return plane.write_kubeconfig(path, namespace=namespace, token=token), cleanup


def _die_with_parent():
    """In the child, before exec: SIGTERM when the test process dies, even by SIGKILL (Linux prctl)."""
    _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _load_prctl():
    import ctypes  # pylint: disable=import-outside-toplevel
    return ctypes.CDLL(None).prctl  # looked up in the parent: the forked child only calls it


_PRCTL = _load_prctl()


def _kill_group(pgid, wait=None):
    """SIGTERM the process group, then SIGKILL it if its leader has not exited within 10 s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if wait is not None:
            try:
                wait(timeout=0.1)
                return
            except subprocess.TimeoutExpired:
                continue
        elif not _alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if wait is not None:
        wait()


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# --- make kube-up / kube-down -------------------------------------------------------------------
def _state_path(directory):
    return os.path.join(directory, "state.json")


def _running_components(directory):
    """{name: pid} of the components a previous `up` in `directory` started that still run (checked by binary)."""
    try:
        with open(_state_path(directory), encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return {}
    alive = {}
    for name, pid in state.get("pids", {}).items():
        try:
            exe = os.readlink("/proc/%d/exe" % pid)
        except OSError:
            continue
        if os.path.basename(exe) == name and _alive(pid):  # the pid was not reused by another program
            alive[name] = pid
    return alive


def _object_path(obj):
    """The collection path of one object of a seed file (core and group kinds; English plurals, as the API's)."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "").lower()
    base = "/api/v1" if api_version == "v1" else "/apis/" + api_version
    namespace = (obj.get("metadata") or {}).get("namespace")
    plural = kind + "es" if kind.endswith("s") else kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    return "%s%s/%s" % (base, "/namespaces/%s" % namespace if namespace else "", plural)


def seed(plane, path):
    """Create, as admin, the objects of the YAML file at `path` (one List document); an object's ``status`` is
    written through its status subresource afterwards, as its controller (a kubelet, for a Node) would: a merge
    patch, which no resourceVersion guards (the control plane's own controllers change a new Node at once).  After
    a Namespace the next objects wait for its default ServiceAccount, without which the API refuses its pods."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(path, encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    items = document.get("items") if isinstance(document, dict) and document.get("kind") == "List" else None
    if not isinstance(items, list):
        raise ControlPlaneError("seed file %s is not one List document. Fix: write {apiVersion: v1, kind: List, "
                                "items: [...]}." % path)
    for obj in items:
        collection = _object_path(obj)
        status = obj.pop("status", None)
        created = plane.api("POST", collection, obj)
        if obj.get("kind") == "Namespace":  # the API refuses its pods until its default ServiceAccount exists
            account = "/api/v1/namespaces/%s/serviceaccounts/default" % created["metadata"]["name"]
            plane.wait_for("the default ServiceAccount of namespace %s" % created["metadata"]["name"],
                           lambda path=account: plane.request("GET", path)[0] == 200)
        if status:
            plane.api("PATCH", "%s/%s/status" % (collection, created["metadata"]["name"]), {"status": status},
                      content_type="application/merge-patch+json")
    return len(items)


# --- the kubelet stand-in as a background process (for Molecule and the demo: `up --kubelet-node`) ---------------
KUBELET_STATE_KEY = "kubelet-standin"  # state.json: {"pid", "nodes": {node: resources}}
KUBELET_PID_FILE = "kubelet-standin.pid"
KUBELET_LOG = "kubelet-standin.log"
KUBELET_READY_TIMEOUT = 60  # seconds for the process's first round and the nodes' not-ready taint to go
API_GONE_SECONDS = 10  # the background stand-in exits once the API has not answered for this long
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# a resource name: an optional DNS-subdomain prefix and a name (k8s.io/apimachinery IsQualifiedName)
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                            r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# a quantity as resource.Quantity parses one (a plain number, a decimal, a binary or a decimal SI suffix)
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_GPU_RESOURCE_PREFIX = "nvidia.com/"


def parse_kubelet_node(spec):
    """`NAME` or `NAME:RESOURCE=QUANTITY,...` (a --kubelet-node argument) -> (name, {resource: quantity}).

    The resources are what that node's device plugin would advertise (capacity = allocatable), over the stand-in's
    defaults (cpu, memory, pods, 8 nvidia.com/gpu); naming any nvidia.com/ resource replaces the default GPUs, so a
    MIG node under the mixed strategy offers its MIG resources and no whole nvidia.com/gpu.  ValueError, naming
    the argument and the fix, for anything else."""
    if not isinstance(spec, str) or len(spec) > 2000:
        raise ValueError("--kubelet-node %r: not a string of at most 2000 characters" % (spec,))
    name, _sep, listed = spec.partition(":")
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise ValueError("--kubelet-node %r: %r is not a node name (a DNS subdomain: lower-case letters, digits, "
                         "'-' and '.'). Fix: write NAME or NAME:RESOURCE=QUANTITY,..." % (spec, name))
    resources = {}
    if _sep:
        for item in listed.split(","):
            resource, equals, quantity = item.partition("=")
            if not equals or not _RESOURCE_NAME.match(resource) or len(resource) > 316:
                raise ValueError("--kubelet-node %r: %r is not RESOURCE=QUANTITY with a resource name such as "
                                 "nvidia.com/gpu. Fix: write NAME:RESOURCE=QUANTITY,... (e.g. gpu-1:nvidia.com/gpu=8)"
                                 % (spec, item))
            if not _QUANTITY.match(quantity):
                raise ValueError("--kubelet-node %r: %r is not a quantity for %s. Fix: a number, optionally with a "
                                 "suffix (m, k, Ki, Mi, Gi, ...), e.g. 8 or 512Gi" % (spec, quantity, resource))
            if resource in resources:
                raise ValueError("--kubelet-node %r: %s is named twice. Fix: name each resource once"
                                 % (spec, resource))
            resources[resource] = quantity
    if any(key.startswith(_GPU_RESOURCE_PREFIX) for key in resources):
        resources.setdefault("nvidia.com/gpu", None)  # not offered unless named
    return name, resources


def _background_pid(pid, action):
    """`pid` while it is this script's background `action` (kubelet, relay) and alive (checked by its command line:
    a pid file outlives its process, and the pid may be another process's by now), else None."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return None
    script = os.path.basename(__file__).encode()
    if any(arg.endswith(script) for arg in argv) and action.encode() in argv and _alive(pid):
        return pid
    return None


def _kubelet_pid(directory):
    """The pid of the background kubelet stand-in of `directory` while it runs (checked by its command line)."""
    try:
        with open(os.path.join(directory, KUBELET_PID_FILE), encoding="ascii") as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return _background_pid(pid, "kubelet")


def start_kubelet_standin(plane, directory, nodes, interval=1.0):
    """Start `kube_cluster.py kubelet` detached (its own session), for `nodes` ({name: resources}); return its pid
    once it has posted every node's status and the node lifecycle controller has lifted their not-ready taints.

    ControlPlaneError (and the process stopped) when a node is not in the API or the stand-in does not come up."""
    missing = [name for name in nodes if plane.request("GET", "/api/v1/nodes/" + name)[0] != 200]
    if missing:
        raise ControlPlaneError("--kubelet-node: no Node %s in the API. Fix: create the Node first (in the --seed "
                                "file) or name one that exists" % ", ".join(missing))
    argv = [sys.executable, os.path.abspath(__file__), "kubelet", "--dir", directory, "--interval", str(interval)]
    for name, resources in nodes.items():
        listed = ",".join("%s=%s" % item for item in sorted(resources.items()) if item[1] is not None)
        argv += ["--node", name + (":" + listed if listed else "")]
    with open(os.path.join(directory, KUBELET_LOG), "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                stdin=subprocess.DEVNULL, cwd=directory, start_new_session=True)

    def taints_lifted():
        if proc.poll() is not None:
            raise ControlPlaneError("the kubelet stand-in exited with status %s; its log (%s) ends:\n%s" % (
                proc.returncode, os.path.join(directory, KUBELET_LOG), plane.log_tail("kubelet-standin")))
        for name in nodes:
            node = plane.api("GET", "/api/v1/nodes/" + name)
            ready = [c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
            if not ready or ready[0]["status"] != "True" or any(
                    t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints", [])):
                return False
        return _kubelet_pid(directory) == proc.pid
    try:
        plane.wait_for("the kubelet stand-in's nodes %s to be Ready without the not-ready taint" % ", ".join(nodes),
                       taints_lifted, timeout=KUBELET_READY_TIMEOUT, interval=0.5)
    except (AssertionError, ControlPlaneError):
        _kill_group(proc.pid, proc.wait)
        raise
    return proc.pid


def stop_kubelet_standin(directory):
    pid = _kubelet_pid(directory)
    if pid is not None:
        _kill_group(pid)
    return pid


def cmd_kubelet(directory, specs, interval=1.0):
    """The background kubelet stand-in (`up --kubelet-node` starts it): KubeletStandin for the nodes, in this
    process, until SIGTERM (`down`), until `directory`'s state.json is gone, or until the API has not answered for
    API_GONE_SECONDS (the control plane was stopped without `down`): it never outlives its control plane."""
    directory = os.path.abspath(directory)
    try:
        nodes = dict(parse_kubelet_node(spec) for spec in specs)
        plane = ControlPlane.attach(directory)
    except (ValueError, OSError, KeyError) as exc:
        print("kubelet-standin: %s" % exc, file=sys.stderr)
        return 2
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    standin = KubeletStandin(plane, list(nodes), resources=nodes, interval=interval)
    pid_file = os.path.join(directory, KUBELET_PID_FILE)
    last_answer = time.monotonic()
    wrote_pid = False
    print("kubelet-standin: pid %d, nodes %s, API %s" % (os.getpid(), json.dumps(nodes, sort_keys=True), plane.url),
          file=sys.stderr, flush=True)
    while not stopping:
        if not os.path.exists(_state_path(directory)):
            print("kubelet-standin: %s is gone (kube-down): exiting" % _state_path(directory), file=sys.stderr)
            break
        try:
            standin.sync()
            last_answer = time.monotonic()
            if not wrote_pid:  # `up` waits for this file: written once every node's status was posted
                with open(pid_file + ".tmp", "w", encoding="ascii") as handle:
                    handle.write("%d\n" % os.getpid())
                os.replace(pid_file + ".tmp", pid_file)
                wrote_pid = True
        except (urllib.error.URLError, OSError) as exc:  # connection refused: no API server
            if time.monotonic() - last_answer > API_GONE_SECONDS:
                print("kubelet-standin: the API at %s has not answered for %d s (%s): exiting"
                      % (plane.url, API_GONE_SECONDS, exc), file=sys.stderr)
                break
        except Exception as exc:  # pylint: disable=broad-except  # one bad answer: log it, try again
            print("kubelet-standin: %r" % exc, file=sys.stderr, flush=True)
        time.sleep(interval)
    try:
        if _kubelet_pid(directory) == os.getpid():
            os.unlink(pid_file)
    except OSError:
        pass
    return 0


# --- real kubelets in the test hosts: a relay to reach the API, and a node's credentials --------------------------
RELAY_STATE_KEY = "node-relay"  # state.json: {"pid", "address", "port"}
RELAY_FILE = "node-relay.json"  # written by the relay process once it listens: {"pid", "port"}
RELAY_LOG = "node-relay.log"


def kubelet_kubeconfig_path(directory, node):
    return os.path.join(directory, "kubelet-%s.kubeconfig" % node)


def _relay_pid(directory):
    """The pid of the background node relay of `directory` while it runs (checked by its command line)."""
    try:
        with open(os.path.join(directory, RELAY_FILE), encoding="utf-8") as handle:
            pid = int(json.load(handle)["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return _background_pid(pid, "relay")


def start_node_relay(plane, directory, address):
    """Start `kube_cluster.py relay` detached: an `OutageRelay` without trigger on `address` (the address at which
    the test hosts reach this machine: their podman network's gateway) in front of the API server, which itself
    listens on 127.0.0.1 only.  Returns (pid, port) once it listens; ControlPlaneError when it does not."""
    argv = [sys.executable, os.path.abspath(__file__), "relay", "--dir", directory, "--node-address", address]
    with open(os.path.join(directory, RELAY_LOG), "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                stdin=subprocess.DEVNULL, cwd=directory, start_new_session=True)

    def listening():
        if proc.poll() is not None:
            raise ControlPlaneError("the node relay on %s exited with status %s; its log (%s) ends:\n%s. Fix: give "
                                    "--node-address an address of this machine (the test hosts' gateway)" % (
                                        address, proc.returncode, os.path.join(directory, RELAY_LOG),
                                        plane.log_tail("node-relay")))
        return _relay_pid(directory) == proc.pid
    try:
        plane.wait_for("the node relay on %s to listen" % address, listening, timeout=30, interval=0.2)
    except (AssertionError, ControlPlaneError):
        _kill_group(proc.pid, proc.wait)
        raise
    with open(os.path.join(directory, RELAY_FILE), encoding="utf-8") as handle:
        return proc.pid, int(json.load(handle)["port"])


def stop_node_relay(directory):
    pid = _relay_pid(directory)
    if pid is not None:
        _kill_group(pid)
    return pid


def cmd_relay(directory, address):
    """The background node relay (`up --node-address` starts it), until SIGTERM (`down`), until `directory`'s
    state.json is gone, or until the API server's port has refused connections for API_GONE_SECONDS."""
    directory = os.path.abspath(directory)
    try:
        plane = ControlPlane.attach(directory)
        relay = OutageRelay(plane.url, None, listen_host=address)
    except (OSError, KeyError, ValueError) as exc:
        print("node-relay: %s" % exc, file=sys.stderr)
        return 2
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    with open(os.path.join(directory, RELAY_FILE + ".tmp"), "w", encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "port": relay.port}, handle)
    os.replace(os.path.join(directory, RELAY_FILE + ".tmp"), os.path.join(directory, RELAY_FILE))
    print("node-relay: pid %d, %s -> %s" % (os.getpid(), relay.url, plane.url), file=sys.stderr, flush=True)
    last_answer = time.monotonic()
    while not stopping and os.path.exists(_state_path(directory)):
        try:
            socket.create_connection(relay.target, timeout=2).close()
            last_answer = time.monotonic()
        except OSError:
            if time.monotonic() - last_answer > API_GONE_SECONDS:
                print("node-relay: the API server's port has refused connections for %d s: exiting"
                      % API_GONE_SECONDS, file=sys.stderr)
                break
        time.sleep(1)
    relay.stop()
    return 0


def write_kubelet_kubeconfig(plane, directory, node, relay_url):
    """DIR/kubelet-<node>.kubeconfig for a real kubelet in a test host: a client certificate of the control plane's
    CA for system:node:<node> in system:nodes (so the Node authorizer and NodeRestriction judge it as that node,
    as for a kubelet that joined with kubeadm), the relay's address as the server, and 127.0.0.1 as the TLS server
    name (the name the API server's certificate holds)."""
    cert = plane.pki.issue("kubelet-" + node, "system:node:" + node, organizations=("system:nodes",))
    config = json.loads(kubeconfig_text(relay_url, plane.pki.ca_path, cert=cert, user="system:node:" + node))
    config["clusters"][0]["cluster"]["tls-server-name"] = "127.0.0.1"
    path = kubelet_kubeconfig_path(directory, node)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)
    os.chmod(path, 0o600)
    return path


JOB_NAMESPACE = "gpu-native-jobs"  # where `up --job` creates the job's ServiceAccount


def cmd_up(directory, seed_file=None, jobs=(), kubelet_nodes=(), node_address=None, kubelets=()):
    directory = os.path.abspath(directory)
    try:  # every argument is checked before anything starts
        nodes = dict(parse_kubelet_node(spec) for spec in kubelet_nodes)
        for name in kubelets:
            if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
                raise ValueError("--kubelet %r is not a node name (a DNS subdomain: lower-case letters, digits, '-' "
                                 "and '.')" % (name,))
        if kubelets and not node_address:
            raise ValueError("--kubelet needs --node-address: the address at which the test hosts reach this "
                             "machine (their podman network's gateway)")
        if node_address:
            ipaddress.ip_address(node_address)
    except ValueError as exc:
        print("kube-up: %s" % exc, file=sys.stderr)
        return 2
    if len(nodes) != len(kubelet_nodes):
        print("kube-up: --kubelet-node names a node twice. Fix: name each node once", file=sys.stderr)
        return 2
    if _running_components(directory):
        if seed_file or jobs or nodes or node_address:
            print("kube-up: a control plane already runs in %s; --seed, --job, --kubelet-node and --node-address "
                  "need a fresh one. "
                  "Fix: run "
                  "`down --dir %s` first." % (directory, directory), file=sys.stderr)
            return 1
        print(os.path.join(directory, "admin.kubeconfig"))
        return 0
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    plane = ControlPlane(directory, die_with_parent=False)  # they outlive this command
    try:
        plane.start()
    except ControlPlaneError as exc:
        print("kube-up: %s" % exc, file=sys.stderr)
        return 1
    state = {"version": plane.version, "url": plane.url, "ports": plane.ports,
             "pids": {name: proc.pid for name, proc in plane.processes.items()}}
    with open(_state_path(directory), "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2)
    try:
        if seed_file:
            print("kube-up: seeded %d objects from %s" % (seed(plane, seed_file), seed_file), file=sys.stderr)
        if jobs:
            plane.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": JOB_NAMESPACE}})
        for job in jobs:
            path = job_kubeconfig(plane, job, os.path.join(directory, "%s.kubeconfig" % job), JOB_NAMESPACE)[0]
            print("kube-up: %s job's kubeconfig (its ClusterRole from rbac/, not admin): %s" % (job, path),
                  file=sys.stderr)
        if node_address:
            pid, port = start_node_relay(plane, directory, node_address)
            state[RELAY_STATE_KEY] = {"pid": pid, "address": node_address, "port": port}
            _write_state(directory, state)
            relay_url = "https://%s:%d" % (node_address, port)
            print("kube-up: node relay (pid %d) at %s for the test hosts' kubelets" % (pid, relay_url),
                  file=sys.stderr)
            for name in kubelets:
                print("kube-up: kubelet %s's kubeconfig (system:node:%s): %s"
                      % (name, name, write_kubelet_kubeconfig(plane, directory, name, relay_url)), file=sys.stderr)
        if nodes:
            state[KUBELET_STATE_KEY] = {"pid": start_kubelet_standin(plane, directory, nodes),
                                        "nodes": nodes, "log": os.path.join(directory, KUBELET_LOG)}
            _write_state(directory, state)
            print("kube-up: kubelet stand-in (pid %d) posts the status of %s and drives their pods; log %s"
                  % (state[KUBELET_STATE_KEY]["pid"], ", ".join(nodes), state[KUBELET_STATE_KEY]["log"]),
                  file=sys.stderr)
    except (ControlPlaneError, AssertionError, ValueError, OSError) as exc:
        print("kube-up: %s" % exc, file=sys.stderr)
        cmd_down(directory)
        return 1
    print("kube-up: %s control plane at %s, started in %.1f s (%s); logs in %s; stop it with `make kube-down`"
          % (plane.version, plane.url, plane.startup_seconds,
             ", ".join("%s %.1f s" % item for item in plane.timings.items()), directory), file=sys.stderr)
    print(plane.kubeconfig)
    return 0


def _write_state(directory, state):
    with open(_state_path(directory) + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2)
    os.replace(_state_path(directory) + ".tmp", _state_path(directory))


def cmd_down(directory):
    directory = os.path.abspath(directory)
    if stop_kubelet_standin(directory) is not None:  # first: it would only see the API go and log errors
        print("kube-down: stopped the kubelet stand-in of %s" % directory, file=sys.stderr)
    if stop_node_relay(directory) is not None:
        print("kube-down: stopped the node relay of %s" % directory, file=sys.stderr)
    for name in reversed(COMPONENTS):
        pid = _running_components(directory).get(name)
        if pid is not None:
            _kill_group(pid)
    if os.path.exists(_state_path(directory)):
        shutil.rmtree(directory, ignore_errors=True)
        print("kube-down: stopped the control plane of %s" % directory, file=sys.stderr)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("action", choices=("up", "down", "kubelet", "relay"),
                        help="kubelet: the background kubelet stand-in that `up --kubelet-node` starts; relay: the "
                             "background node relay that `up --node-address` starts")
    parser.add_argument("--dir", default=os.path.join(REPO_ROOT, ".cache", "kube-up"),
                        help="data folder (default: .cache/kube-up)")
    parser.add_argument("--seed", help="up: create the objects of this YAML List as admin (statuses included)")
    parser.add_argument("--job", action="append", default=[], choices=JOBS,
                        help="up: also write DIR/<job>.kubeconfig, a ServiceAccount token bound to the job's "
                             "ClusterRole from rbac/ (repeatable)")
    parser.add_argument("--kubelet-node", action="append", default=[], metavar="NAME[:RESOURCE=QUANTITY,...]",
                        help="up: run a kubelet stand-in in the background (stopped by `down`; it exits when the API "
                             "goes) that posts this seeded Node's status, advertising the resources given (its "
                             "device plugin's: e.g. gpu-1:nvidia.com/gpu=8) and drives its pods to Running and "
                             "Ready (repeatable)")
    parser.add_argument("--node-address", metavar="ADDRESS",
                        help="up, relay: relay the API (which listens on 127.0.0.1 only) on this address of this "
                             "machine, the one the test hosts reach it at (their podman network's gateway), for real "
                             "kubelets in them (stopped by `down`)")
    parser.add_argument("--kubelet", action="append", default=[], metavar="NAME",
                        help="up (with --node-address): write DIR/kubelet-NAME.kubeconfig, the credentials of a real "
                             "kubelet for node NAME (system:node:NAME), through the relay (repeatable)")
    parser.add_argument("--node", action="append", default=[], help="kubelet: a node, as --kubelet-node")
    parser.add_argument("--interval", type=float, default=1.0, help="kubelet: seconds between two rounds")
    args = parser.parse_args(argv)
    if args.action == "kubelet":
        return cmd_kubelet(args.dir, args.node, args.interval)
    if args.action == "relay":
        return cmd_relay(args.dir, args.node_address)
    if args.action == "up":
        return cmd_up(args.dir, args.seed, args.job, args.kubelet_node, args.node_address, args.kubelet)
    return cmd_down(args.dir)


if __name__ == "__main__":
    sys.exit(main())
