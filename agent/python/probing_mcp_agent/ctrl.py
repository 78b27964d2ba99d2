"""The control socket, bound at activation and served from its first
connection on.

Activation binds $PROBING_CTRL_ROOT/<pid>.sock and listens at once, so the
socket exists (and connects) as soon as the identity file names it. The
HTTP server behind it (server.py: http.server, socketserver, json, the
endpoints) costs more than all the rest of an activation and most
processes are never asked anything, so the thread that accepts the first
connection (activation.serve_ctrl(), through accept_first() here)
completes the start-up (activation.complete()), imports it, and hands the
socket to it (server.adopt_unix()), which serves that connection and all
later ones. A client that connects meanwhile waits in the listen backlog.

Only os and _socket here: this module runs in every activated
interpreter. It imports no module of the agent's but runtime and identity
(the start-up, which imports it, is activation's).
"""
import os

import _socket

from . import runtime

DEFAULT_CTRL_ROOT = "/tmp/probing"
MAX_PATH = 107  # sockaddr_un.sun_path, less the terminating NUL


def ctrl_root():
    return os.environ.get("PROBING_CTRL_ROOT") or DEFAULT_CTRL_ROOT


def socket_alive(path):
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(0.5)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def socket_path():
    """The path to bind ($PROBING_CTRL_ROOT/<pid>.sock, a stale one removed),
    or "" with the reason logged."""
    root = ctrl_root()
    pid = os.getpid()
    try:
        runtime._makedirs(root, 0o1777)
    except OSError as e:
        runtime.logger.warning("cannot create the control root %s: %s", root, e)
        return ""
    path = os.path.join(root, "%d.sock" % pid)
    if os.path.lexists(path):
        # Our pid, so it is a leftover of a dead process that had it (pid
        # reuse), unless another pid namespace shares this directory.
        if socket_alive(path):
            from . import identity as _identity

            alt = os.path.join(root, "%d-%d.sock" % (pid, _identity.start_time()))
            runtime.logger.warning("%s answers although this process owns pid %d (another pid namespace?); "
                                   "using %s", path, pid, alt)
            path = alt
            if os.path.lexists(path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        else:
            try:
                os.unlink(path)
                runtime.logger.info("removed the stale control socket %s", path)
            except OSError as e:
                runtime.logger.warning("cannot remove the stale socket %s: %s", path, e)
                return ""
    if len(path.encode()) > MAX_PATH:
        runtime.logger.warning("control socket path %s is too long for AF_UNIX; no control socket", path)
        return ""
    return path


def start_unix():
    """Binds and listens on the control socket (0600); returns its path
    ("" on failure). activation.serve_ctrl() then answers its clients."""
    path = socket_path()
    if not path:
        return ""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    # Bound under a temporary name and renamed once it listens: a client
    # that sees the path never gets "connection refused".
    tmp = "%s.%d.tmp" % (path, os.getpid()) if len(path) + 16 <= MAX_PATH else path
    try:
        if tmp != path and os.path.lexists(tmp):
            os.unlink(tmp)
        s.bind(tmp)
        try:
            os.chmod(tmp, 0o600)
        except OSError:
            pass
        s.listen(64)
        if tmp != path:
            os.rename(tmp, path)
    except Exception as e:
        s.close()
        if tmp != path:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        runtime.logger.warning("cannot bind the control socket %s: %s", path, e)
        return ""
    st = runtime.state
    try:
        ino = os.stat(path).st_ino
    except OSError:
        ino = None
    st.unix_listener = (s, path, ino)
    return path


def accept_first():
    """Waits for the bound control socket's first client (in the agent
    thread of activation.serve_ctrl). Returns (listener, path, inode, fd,
    addr), or None when nothing is bound or the socket was closed (exit,
    fork)."""
    lst = runtime.state.unix_listener
    if lst is None:
        return None
    s, path, ino = lst
    while True:
        try:
            fd, addr = s._accept()
            return s, path, ino, fd, addr
        except InterruptedError:
            continue
        except OSError:
            return None  # closed (exit, fork)


def close_unix(unlink=True):
    """Closes the listener while server.py has not taken it over (at exit);
    removes the socket file if it is still ours."""
    st = runtime.state
    lst = st.unix_listener
    st.unix_listener = None
    if lst is None:
        return
    s, path, ino = lst
    try:
        s.shutdown(_socket.SHUT_RDWR)  # wakes the thread blocked in accept()
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
    if unlink and path:
        try:
            if os.stat(path).st_ino == ino:
                os.unlink(path)
        except OSError:
            pass
