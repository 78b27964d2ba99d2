"""The control server: HTTP/1.1 on $PROBING_CTRL_ROOT/<pid>.sock, optional TCP.

Built on socketserver + http.server; every connection gets a daemon thread.
Unix-socket peers must have our effective uid or be root (SO_PEERCRED);
anyone else is closed without a reply. The TCP listener starts only with
PROBING_AUTH_TOKEN: every local user can reach a TCP port, loopback
included, so every TCP request but /health and /ready carries the token,
and every TCP request names this host in Host (tcphost.py: DNS rebinding).
Every argument is checked: a bad one is a 400 naming it and the accepted
range, and error messages echo at most a few dozen characters of it.
See agent/PROTOCOL.md.
"""
import base64
import hmac
import http.server
import json
import math
import os
import re
import time
import socket
import socketserver
import struct
import sys
import threading
from urllib.parse import parse_qs, unquote, urlsplit

from . import config, envfilter, hmacauth, identity, runtime, tcphost

MAX_BODY = 4 << 20
MAX_CONNECTIONS = 64

_CODES = {400: "BAD_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND",
          405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE", 429: "TOO_MANY_REQUESTS",
          502: "BAD_GATEWAY", 503: "SERVICE_UNAVAILABLE", 504: "GATEWAY_TIMEOUT"}
_PUBLIC = ("/health", "/ready")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_INT_RE = re.compile(r"^[+-]?[0-9]{1,20}$")
_SECONDS_RE = re.compile(r"^[0-9]{1,6}(\.[0-9]{0,6})?$|^\.[0-9]{1,6}$")
_HEX_RE = re.compile(rb"^[0-9A-Fa-f]{1,16}$")
_DIGITS_RE = re.compile(r"^[0-9]{1,19}$")
MAX_TRAILERS = 64
_ECHO = 80  # characters of client input an error message repeats


def _cut(text, limit=_ECHO):
    """text, cut to limit characters with its length said: error messages
    echo client input and must stay small whatever it is."""
    text = str(text)
    if len(text) <= limit:
        return text
    return "%s... (%d characters)" % (text[:limit], len(text))


class HTTPError(Exception):
    def __init__(self, status, message, body=None, headers=None):
        Exception.__init__(self, message)
        self.status = status
        self.message = message
        self.body = body  # a JSON-able object replacing the envelope
        self.headers = headers or {}


def envelope(status, message, action=None):
    e = {"code": _CODES.get(status, "INTERNAL_ERROR"), "message": message,
         "retryable": status in (429, 502, 503, 504)}
    if action:
        e["action"] = action
    return {"error": e}


def _qbool(q, name, default):
    v = q.get(name)
    if not v:
        return default
    s = v[-1].strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE or s == "":
        return False if s else default
    raise HTTPError(400, "query parameter %s=%s is not a boolean: accepted true/false, 1/0, yes/no, on/off"
                    % (name, config.clip(v[-1])))


def _qint(q, name, default, lo, hi):
    """An integer query parameter in [lo, hi]; anything else is a 400 that
    names the parameter and the range (never clamped in silence)."""
    v = q.get(name)
    if not v or v[-1].strip() == "":
        return default
    raw = v[-1].strip()
    if not _INT_RE.match(raw):
        raise HTTPError(400, "query parameter %s=%s is not an integer: accepted %d..%d"
                        % (name, config.clip(raw), lo, hi))
    n = int(raw)
    if n < lo or n > hi:
        raise HTTPError(400, "query parameter %s=%d is out of range: accepted %d..%d" % (name, n, lo, hi))
    return n


def _cmdline():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
        return [p.decode("utf-8", "replace") for p in parts if p]
    except Exception:
        return list(getattr(sys, "argv", []))


def _os_threads():
    try:
        return sorted(int(t) for t in os.listdir("/proc/self/task"))
    except Exception:
        return sorted(t.native_id for t in threading.enumerate() if getattr(t, "native_id", None))


def overview():
    try:
        exe = os.readlink("/proc/self/exe")
    except Exception:
        exe = sys.executable or ""
    try:
        cwd = os.getcwd()
    except Exception:
        cwd = ""
    main = threading.main_thread()
    env, withheld = envfilter.report(dict(os.environ))
    return {
        "pid": os.getpid(),
        "exe": exe,
        "env": env,
        # ext: how many variables env leaves out (not allow-listed, or a
        # secret word in the name); never which.
        "env_withheld": withheld,
        "cmd": " ".join(_cmdline()),
        "cwd": cwd,
        "main_thread": getattr(main, "native_id", None) or os.getpid(),
        "threads": _os_threads(),
        "identity": identity.current(),
        "agent": {"name": runtime.AGENT_NAME, "version": runtime.AGENT_VERSION,
                  "ready": bool(runtime.state.ready), "eval_allowed": bool(runtime.state.eval_allowed),
                  "eval_tcp": bool(runtime.state.eval_tcp),
                  "socket": runtime.state.socket_path, "address": runtime.state.tcp_address},
    }


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "probing-mcp-agent/" + runtime.AGENT_VERSION
    sys_version = ""
    protocol_version = "HTTP/1.1"
    # A request line we cannot parse is answered with a status line too
    # (http.server answers HTTP/0.9, i.e. a bare body, by default).
    default_request_version = "HTTP/1.0"
    timeout = 60

    # -- plumbing ---------------------------------------------------------
    def setup(self):
        http.server.BaseHTTPRequestHandler.setup(self)
        if self.server.transport == "tcp":
            # A reply is two writes (headers, body): with Nagle and the
            # peer's delayed ACK, each keep-alive request would wait ~40 ms.
            try:
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def version_string(self):
        return self.server_version

    def log_message(self, fmt, *args):
        try:
            runtime.logger.debug("%s: " + fmt, self.server.transport, *args)
        except Exception:
            pass

    def log_request(self, code="-", size="-"):
        self.log_message('"%s" %s %s', getattr(self, "requestline", ""), code, size)

    def log_error(self, fmt, *args):
        self.log_message(fmt, *args)

    def address_string(self):
        ca = self.client_address
        if isinstance(ca, tuple) and ca:
            return str(ca[0])
        return "unix"

    def handle(self):
        try:
            http.server.BaseHTTPRequestHandler.handle(self)
        except Exception as e:  # a peer that went away, a timeout...
            runtime.logger.debug("connection ended: %s", e)

    def send_error(self, code, message=None, explain=None):
        # Called by http.server for requests it cannot parse (400, 414, 431, 501, 505).
        try:
            self.close_connection = True
            if not message:
                message = self.responses.get(code, ("error",))[0]
            self._reply(code, envelope(code, _cut(message)))
        except Exception:
            pass

    def _reply(self, status, obj, ctype="application/json", headers=None):
        if isinstance(obj, bytes):
            body = obj
        elif isinstance(obj, str):
            body = obj.encode("utf-8")
        else:
            body = json.dumps(obj, default=str).encode("utf-8")
            ctype = "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        signing = getattr(self, "_signing", None)
        if signing:
            # The answer to a signed request proves this agent holds the
            # token too (the signature covers what is sent: nothing for HEAD).
            sent = b"" if self.command == "HEAD" else body
            self.send_header(hmacauth.RESPONSE_HEADER, hmacauth.sign_response(signing[0], signing[1], status, sent))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        try:
            self.wfile.flush()
        except Exception:
            pass

    def _body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            return self._chunked()
        cl = self.headers.get("Content-Length")
        if cl is None:
            return b""
        if not _DIGITS_RE.match(cl.strip()):
            self.close_connection = True
            raise HTTPError(400, "invalid Content-Length %s: accepted a byte count 0..%d"
                            % (config.clip(cl), MAX_BODY))
        n = int(cl.strip())
        if n > MAX_BODY:
            self.close_connection = True
            raise HTTPError(413, "request body of %d bytes exceeds the %d-byte limit" % (n, MAX_BODY))
        data = self.rfile.read(n)
        if len(data) < n:
            self.close_connection = True
            raise HTTPError(400, "request body shorter than its Content-Length")
        return data

    def _chunked(self):
        """A chunked body (RFC 9112 7.1), parsed strictly: a chunk size is
        1-16 hex digits (no sign: int(x, 16) would take "-10"), the data is
        all there and followed by CRLF, trailers are few. Bounded by
        MAX_BODY; any error closes the connection, as the stream is lost."""
        out = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            size_s = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not _HEX_RE.match(size_s):
                self.close_connection = True
                raise HTTPError(400, "malformed chunked body: chunk size %s is not 1 to 16 hexadecimal digits"
                                % config.clip(size_s.decode("latin-1")))
            size = int(size_s, 16)
            if size == 0:
                for _ in range(MAX_TRAILERS + 1):  # trailers, ignored
                    t = self.rfile.readline(8192)
                    if t in (b"\r\n", b"\n"):
                        return b"".join(out)
                    if not t.endswith(b"\n"):
                        break
                self.close_connection = True
                raise HTTPError(400, "malformed chunked body: its trailer section is cut short, has a line over "
                                     "8192 bytes, or more than %d lines" % MAX_TRAILERS)
            total += size
            if total > MAX_BODY:
                self.close_connection = True
                raise HTTPError(413, "request body exceeds the %d-byte limit" % MAX_BODY)
            data = self.rfile.read(size)
            if len(data) < size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                self.close_connection = True
                raise HTTPError(400, "malformed chunked body: a chunk of %d bytes is cut short or not followed "
                                     "by CRLF" % size)
            out.append(data)

    def _verify_signed(self, method, authz, body):
        k = hmacauth.key(runtime.state.auth_token)
        if k is None:
            self.close_connection = True
            raise HTTPError(401, "this agent has no PROBING_AUTH_TOKEN, so no signature can be checked")
        adv = [a for a in (os.environ.get("PROBING_ADVERTISE_ADDR", "").strip(),) if a]
        try:
            nonce = hmacauth.verify(k, method, self.path, authz, body,
                                    hmacauth.served_at(self.connection.getsockname()[:2], adv))
        except hmacauth.AuthError as e:
            self.close_connection = True
            raise HTTPError(e.status, e.message)
        self._signing = (k, nonce)

    def _authenticated(self):
        tok = runtime.state.auth_token
        if not tok:
            return False
        h = (self.headers.get("Authorization") or "").strip()
        if h[:7].lower() == "bearer ":
            return hmac.compare_digest(h[7:].strip().encode(), tok.encode())
        if h[:6].lower() == "basic ":
            try:
                user, _, pw = base64.b64decode(h[6:].strip()).decode("utf-8").partition(":")
            except Exception:
                return False
            return hmac.compare_digest(user.encode(), runtime.state.auth_username.encode()) and \
                hmac.compare_digest(pw.encode(), tok.encode())
        x = self.headers.get("X-Probing-Token")
        if x:
            return hmac.compare_digest(x.strip().encode(), tok.encode())
        return False

    # -- dispatch ---------------------------------------------------------
    def do_GET(self):  # noqa: N802
        self._dispatch("GET")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self):  # noqa: N802
        self._dispatch("DELETE")

    def do_PATCH(self):  # noqa: N802
        self._dispatch("PATCH")

    def do_HEAD(self):  # noqa: N802
        self._dispatch("HEAD")

    def do_OPTIONS(self):  # noqa: N802
        self._dispatch("OPTIONS")

    def __getattr__(self, name):
        # Any other method (http.server would answer 501) is routed too, so
        # that a known path answers 405 and an unknown one 404.
        if name.startswith("do_") and name[3:].isalpha():
            method = name[3:]
            return lambda: self._dispatch(method)
        raise AttributeError(name)

    def _dispatch(self, method):
        self._signing = None  # per request: a keep-alive connection carries several
        try:
            self._route(method)
        except HTTPError as e:
            try:
                body = e.body if e.body is not None else envelope(e.status, e.message)
                self._reply(e.status, body, headers=e.headers)
            except Exception:
                self.close_connection = True
        except Exception as e:
            runtime.logger.warning("request %s %s failed: %r", method, getattr(self, "path", ""), e,
                                   exc_info=runtime.logger.isEnabledFor(10))
            try:
                self.close_connection = True
                self._reply(500, envelope(500, "internal error: %s" % _cut(e)))
            except Exception:
                pass

    def _route(self, method):
        u = urlsplit(self.path)
        path = unquote(u.path) or "/"
        if len(path) > 1:
            path = path.rstrip("/") or "/"
        q = parse_qs(u.query, keep_blank_values=True)
        tcp = self.server.transport == "tcp"
        if tcp:
            why = tcphost.refuse(self.headers.get_all("Host") or [], self.server.allowed_hosts,
                                 self.connection)
            if why:
                self.close_connection = True
                raise HTTPError(403, why)
        authz = self.headers.get("Authorization") or ""
        if tcp and hmacauth.is_signed(authz):
            # A signed request (the token never travels): the signature
            # covers the body, so it is read (and bounded) first.
            body = self._body()
            self._verify_signed(method, authz, body)
            authed = True
        else:
            authed = not tcp or self._authenticated()
            if tcp and not authed and path not in _PUBLIC:
                self.close_connection = True  # its body stays unread
                raise HTTPError(401, "Authentication is required for this resource", body=dict(envelope(
                    401, "Authentication is required for this resource",
                    "provide a Bearer token, Basic credentials, X-Probing-Token, or a %s signature"
                    % hmacauth.SCHEME)), headers={"WWW-Authenticate": 'Basic realm="Probe Server"'})
            body = self._body()  # read (and bound) any body, so keep-alive stays in sync

        def only(*methods):
            if method not in methods:
                raise HTTPError(405, "method %s not allowed on %s" % (_cut(method, 20), _cut(path)),
                                headers={"Allow": ", ".join(methods)})

        if path == "/health":
            only("GET", "HEAD")
            return self._reply(200, {"status": "ok"})
        if path == "/ready":
            only("GET", "HEAD")
            if runtime.state.ready:
                return self._reply(200, {"status": "ready"})
            return self._reply(503, {"status": "starting", "reason": "agent activation in progress"})
        if path == "/apis/overview":
            only("GET")
            return self._reply(200, overview())
        if path == "/apis/identity":
            only("GET")
            return self._reply(200, identity.current())
        if path == "/apis/nodes":
            only("GET")
            return self._reply(200, nodes(q))
        if path == "/apis/stacks":
            only("GET")
            from . import stacks

            return self._reply(200, stacks.capture(_qint(q, "max_frames", stacks.DEFAULT_MAX_FRAMES, 1,
                                                         stacks.MAX_MAX_FRAMES)))
        if path == "/apis/pythonext/callstack":
            only("GET")
            return self._callstack(q)
        if path == "/apis/pythonext/eval":
            only("POST")
            return self._eval(q, body, authed)
        if path == "/apis/pythonext/flight-recorder/snapshot":
            only("GET")
            return self._snapshot(q)
        if path == "/config":
            only("GET")
            return self._reply(200, config.all())
        if path == "/config/_keys":
            only("GET")
            return self._reply(200, config.keys())
        if path.startswith("/config/"):
            key = path[len("/config/"):]
            if method in ("GET", "HEAD"):
                k = config.normalize(key)
                if not config.exists(k):
                    raise HTTPError(404, "Config key '%s' not found" % _cut(k))
                return self._reply(200, config.format_value(config.get(k)), "text/plain; charset=utf-8")
            only("GET", "PUT")
            return self._put_config(key, body)
        raise HTTPError(404, "No route for %s" % _cut(path))

    # -- endpoints --------------------------------------------------------
    def _callstack(self, q):
        from . import stacks

        try:
            # A thread id: 0 (the main thread), a native id or a Python ident.
            tid = _qint(q, "tid", 0, 0, (1 << 64) - 1)
            with_locals = _qbool(q, "locals", True)
            max_frames = _qint(q, "max_frames", stacks.DEFAULT_MAX_FRAMES, 1, stacks.MAX_MAX_FRAMES)
        except HTTPError as e:  # Probing's callstack error shape
            raise HTTPError(400, e.message, body={"error": e.message, "frames": []})
        try:
            frames = stacks.callstack(tid, with_locals=with_locals, max_frames=max_frames)
        except stacks.UnknownThread as e:
            raise HTTPError(400, str(e), body={"error": str(e), "frames": []})
        return self._reply(200, frames)

    def _put_config(self, key, body):
        try:
            value = body.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise HTTPError(400, "config value is not UTF-8")
        try:
            k = config.check_key(key)
            prev = config.set(k, value)
        except config.ConfigError as e:
            raise HTTPError(getattr(e, "status", 400), str(e))
        return self._reply(200, {"status": "ok", "key": k, "value": config.format_value(config.get(k)),
                                 "previous": None if prev is None else config.format_value(prev)})

    def _eval(self, q, body, authed):
        # Who may eval (agent/PROTOCOL.md): the peer-checked Unix socket
        # unless the job opted out; TCP only with PROBING_ALLOW_EVAL=1 and
        # the token.
        st = runtime.state
        if not st.eval_allowed:
            raise HTTPError(403, st.eval_refusal or "eval is off in this process")
        if self.server.transport == "tcp":
            if not st.eval_tcp:
                raise HTTPError(403, "eval over TCP needs PROBING_ALLOW_EVAL=1 in the job (without it eval is "
                                     "served on the control socket only, to the job's own user); use the "
                                     "control socket, or restart the job with PROBING_ALLOW_EVAL=1")
            if not authed:
                raise HTTPError(403, "eval over TCP needs an authenticated request (PROBING_AUTH_TOKEN)")
        try:
            code = body.decode("utf-8")
        except UnicodeDecodeError:
            raise HTTPError(400, "code is not UTF-8")
        from . import evaluator

        raw = (q.get("timeout") or [""])[-1].strip()
        timeout = evaluator.DEFAULT_TIMEOUT
        if raw:
            timeout = float(raw) if _SECONDS_RE.match(raw) else float("nan")
            if not (math.isfinite(timeout) and 0 < timeout <= evaluator.MAX_TIMEOUT):
                raise HTTPError(400, "query parameter timeout=%s is not accepted: a number of seconds, "
                                     "0 < timeout <= %g" % (config.clip(raw), evaluator.MAX_TIMEOUT))
        try:
            res = evaluator.run(code, timeout)
        except evaluator.Busy as e:
            raise HTTPError(503, str(e))
        return self._reply(200, res)

    def _snapshot(self, q):
        fmt = (q.get("format") or ["pickle"])[-1].strip().lower() or "pickle"
        if fmt not in ("pickle", "json"):
            raise HTTPError(400, "format must be pickle or json",
                            body={"error": "query parameter format=%s is not accepted: pickle or json"
                                           % config.clip(fmt), "ok": False})
        try:
            kw = dict(fmt=fmt, include_stack_traces=_qbool(q, "include_stack_traces", True),
                      only_active=_qbool(q, "only_active", False), persist=_qbool(q, "persist", True),
                      raw=_qbool(q, "raw", False))
        except HTTPError as e:
            raise HTTPError(400, e.message, body={"error": e.message, "ok": False})
        try:
            from . import fr
        except ImportError as e:
            msg = "Flight Recorder support is not available in this agent: %s" % e
            raise HTTPError(400, msg, body={"error": msg, "ok": False})
        try:
            res = fr.snapshot(**kw)
        except Exception as e:
            if type(e).__name__ == "SnapshotError" or isinstance(e, getattr(fr, "SnapshotError", ())):
                raise HTTPError(400, str(e), body={"error": str(e), "ok": False})
            runtime.logger.warning("flight-recorder snapshot failed: %r", e)
            msg = "snapshot failed: %s: %s" % (type(e).__name__, e)
            raise HTTPError(500, msg, body={"error": msg, "ok": False})
        body = json.dumps(res, sort_keys=True, default=str).encode("utf-8")
        return self._reply(200, body, "application/json")


class _ServerMixin(socketserver.ThreadingMixIn):
    daemon_threads = True
    block_on_close = False
    transport = "unix"

    def process_request(self, request, client_address):
        if not self._slots.acquire(False):
            try:
                request.settimeout(1.0)
                msg = json.dumps(envelope(503, "server request concurrency limit reached")).encode()
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Connection: close\r\nContent-Length: " + str(len(msg)).encode()
                                + b"\r\n\r\n" + msg)
            except Exception:
                pass
            self.shutdown_request(request)
            return
        t = threading.Thread(target=self._conn, args=(request, client_address),
                             name="probing-mcp-conn", daemon=True)
        try:
            t.start()
        except Exception:
            self._slots.release()
            self.shutdown_request(request)

    def _conn(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception as e:
            runtime.logger.debug("connection error: %s", e)
        finally:
            self._slots.release()
            self.shutdown_request(request)

    def handle_error(self, request, client_address):
        runtime.logger.debug("server error", exc_info=True)


class UnixServer(_ServerMixin, socketserver.UnixStreamServer):
    transport = "unix"

    def __init__(self, path):
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        socketserver.UnixStreamServer.__init__(self, path, Handler, bind_and_activate=False)

    def verify_request(self, request, client_address):
        """Same effective uid or root, from SO_PEERCRED; else close, no reply."""
        try:
            so = getattr(socket, "SO_PEERCRED", 17)
            pid, uid, gid = struct.unpack("3i", request.getsockopt(socket.SOL_SOCKET, so, struct.calcsize("3i")))
        except Exception as e:
            runtime.logger.warning("control socket: cannot read the peer's credentials (%s); closing", e)
            return False
        if uid == os.geteuid() or uid == 0:
            return True
        runtime.logger.warning("control socket: refused a connection from pid %d uid %d", pid, uid)
        return False


class TCPServer(_ServerMixin, socketserver.TCPServer):
    transport = "tcp"
    allow_reuse_address = True

    def __init__(self, addr, family=socket.AF_INET):
        self.address_family = family
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.allowed_hosts = tcphost.allowed_names(addr[0])
        socketserver.TCPServer.__init__(self, addr, Handler, bind_and_activate=False)


def _serve_forever(srv):
    # A frame of the agent's own at the bottom of the thread: faulthandler's
    # dump gives no thread names, and the server tells its threads from the
    # job's by their outermost frame (agent/gather.go runsAgentCode).
    srv.serve_forever(poll_interval=1.0)


def _serve(srv, name):
    t = threading.Thread(target=_serve_forever, args=(srv,), name=name, daemon=True)
    t.start()
    return t


def adopt_unix(raw, path, ino, fd, addr):
    """Takes over the control socket ctrl.py bound at activation (raw, a
    _socket.socket) whose first connection (fd) it accepted: serves that
    connection, then all others, in the calling thread."""
    st = runtime.state
    if st.unix_listener is None or st.unix_listener[0] is not raw:
        os.close(fd)  # closed at exit meanwhile
        return
    srv = UnixServer(path)
    srv.socket.close()
    srv.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=raw.detach())
    srv._probing_path = path
    srv._probing_ino = ino
    st.servers.append(srv)
    st.unix_listener = None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
    if srv.verify_request(conn, addr):
        srv.process_request(conn, addr)
    else:
        srv.shutdown_request(conn)
    _serve_forever(srv)


def tcp_spec(environ=None):
    """(host, port) to bind from PROBING_SERVER_ADDR or PROBING_PORT, or None."""
    env = os.environ if environ is None else environ
    addr = (env.get("PROBING_SERVER_ADDR") or "").strip()
    if addr:
        host, sep, port = addr.rpartition(":")
        if not sep:
            raise ValueError("PROBING_SERVER_ADDR=%r is not host:port" % addr)
        host = host.strip("[]") or "0.0.0.0"
        return host, int(port)
    port = (env.get("PROBING_PORT") or "").strip()
    if not port:
        return None
    if port.upper() == "RANDOM":
        return "0.0.0.0", 0
    n = int(port)
    # As Probing does under torchrun: only global rank 0 takes the fixed
    # port; the other ranks of the node would collide on it.
    r = (env.get("RANK") or "").strip()
    if r and r != "0":
        n = 0
    return "0.0.0.0", n


def start_tcp():
    """Binds the optional TCP listener; returns "host:port" or ""."""
    try:
        spec = tcp_spec()
    except ValueError as e:
        runtime.logger.warning("TCP listener not started: %s", e)
        return ""
    if spec is None:
        return ""
    host, port = spec
    if not runtime.state.auth_token.strip():
        # Loopback is no exception: every user of the host can reach it.
        runtime.logger.warning(
            "refusing to listen on %s:%d without PROBING_AUTH_TOKEN: any local user can reach a TCP port, "
            "loopback included; set PROBING_AUTH_TOKEN to serve TCP. Serving the Unix socket only", host, port)
        return ""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        srv = TCPServer((host, port), family)
        srv.server_bind()
        srv.server_activate()
    except Exception as e:
        try:
            srv.server_close()
        except Exception:
            pass
        runtime.logger.warning("cannot listen on %s:%d: %s", host, port, e)
        return ""
    h, p = srv.server_address[:2]
    bound = ("[%s]:%d" % (h, p)) if ":" in h else ("%s:%d" % (h, p))
    runtime.state.servers.append(srv)
    _serve(srv, "probing-mcp-tcp")
    return bound


def close_all(unlink=True):
    """Closes the listeners (at exit); removes our socket file if it is still ours."""
    servers = runtime.state.servers
    runtime.state.servers = []
    for srv in servers:
        try:
            # Ask serve_forever to stop without waiting for it (shutdown()
            # would block up to poll_interval), then close the listener.
            srv._BaseServer__shutdown_request = True
            srv.socket.close()
        except Exception:
            pass
        path = getattr(srv, "_probing_path", None)
        if unlink and path:
            try:
                if os.stat(path).st_ino == getattr(srv, "_probing_ino", None):
                    os.unlink(path)
            except OSError:
                pass


def nodes(q):
    """Probing's /apis/nodes shape. This agent registers with no
    coordinator, so the registry is this process alone: version 1, one Node
    (contract §2.7), honouring offset, limit and since_version."""
    ident = identity.current()

    def num(k):
        v = ident.get(k, -1)
        return v if isinstance(v, int) and v >= 0 else None

    node = {"host": ident.get("host") or "", "addr": ident.get("addr") or "",
            "local_rank": num("local_rank"), "rank": num("rank"), "world_size": num("world_size"),
            "group_rank": num("node_rank"), "group_world_size": None,
            "role_name": ident.get("role_name") or None, "role_rank": None, "role_world_size": None,
            "role": ident.get("role") or None, "status": "running", "timestamp": int(time.time() * 1e6)}
    offset = _qint(q, "offset", 0, 0, 1 << 31)
    limit = _qint(q, "limit", 1024, 1, 10000)
    since = _qint(q, "since_version", -1, -1, 1 << 62)
    version = 1
    listed = [] if since >= version else [node][offset:offset + limit]
    return {"version": version, "total": 1, "offset": offset, "nodes": listed}
