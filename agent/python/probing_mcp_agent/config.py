"""The agent's config store: `probing.*` keys (agent/PROTOCOL.md).

API used by the other modules of the package:

    register(key, default, doc, validator=None, on_change=None, settable=True) -> effective value
    get(key, default=None) -> value      set(key, value) -> previous value
    all() -> {key: "string"}             keys() -> [{"key","value","doc","settable"}]

Keys are normalised to `probing.<...>` (the prefix is added when missing) and
must match `probing.[a-z0-9_.]+`, at most MAX_KEY_LEN characters.

Only registered keys can be written: set() on a key the agent never
registered raises UnknownKeyError (HTTP 404) and one that only mirrors the
environment raises ReadOnlyError (403), both listing the settable keys. So
the store holds what the code registered plus what the environment mirrored
at activation, and no request can make it grow. A written value is at most
MAX_VALUE_LEN characters.

Values keep the type they were given (register's default, or the string
from the environment / a PUT); `all()`, `keys()` and the HTTP API show them
as strings (booleans as "true"/"false", None as "").

validator(value) is called with the new value (often a string):
  - returns None or True: the value is accepted unchanged;
  - returns False, or raises ValueError(msg): refused (HTTP 400, the message
    should name the accepted values);
  - returns anything else: that normalised value is stored instead.
on_change is called after a successful set(), with (value), (key, value) or
(key, value, previous) depending on how many positional parameters it takes.
A ValueError from on_change undoes the set and refuses it; any other
exception is logged and the value kept.

Environment mirroring (contract §1.2): PROBING_X_Y=v becomes probing.x.y=v,
except PROBING (itself), PROBING_ORIGINAL, PROBING_PORT, PROBING_ASSETS_ROOT,
PROBING_SERVER_ADDRPATTERN, PROBING_BASE_PATH and every name with a secret
word (envfilter.secret: PROBING_AUTH_*, *TOKEN*, *SECRET*, *KEY*, ...), which
are never stored.
PROBING_LOGLEVEL is kept, as probing.loglevel.
An environment value is checked by the key's validator when the key is (or
later gets) registered; a refused value is logged and the default used.
"""
import os
import re
import threading

from . import envfilter, runtime

MAX_KEY_LEN = 128
MAX_VALUE_LEN = 1024
MAX_LISTED = 32  # settable keys named in an error message

_KEY_RE = re.compile(r"^probing\.[a-z0-9_.]+$")

_ENV_EXCLUDED = frozenset([
    "PROBING", "PROBING_ORIGINAL", "PROBING_PORT", "PROBING_ASSETS_ROOT",
    "PROBING_SERVER_ADDRPATTERN", "PROBING_AUTH_TOKEN", "PROBING_BASE_PATH",
])

_lock = threading.RLock()
_entries = {}


class ConfigError(ValueError):
    """A refused write; status is the HTTP status the server answers."""

    status = 400


class ReadOnlyError(ConfigError):
    status = 403


class InvalidKeyError(ConfigError):
    status = 400


class UnknownKeyError(ConfigError):
    status = 404


def clip(value, limit=64):
    """repr(value), cut to about limit characters: error messages echo
    client input, and must stay small whatever the input."""
    r = repr(value) if not isinstance(value, str) or len(value) <= limit else repr(value[:limit])
    if isinstance(value, str) and len(value) > limit:
        r += "... (%d characters)" % len(value)
    return r


class _Entry(object):
    __slots__ = ("key", "value", "default", "doc", "validator", "on_change", "settable",
                 "registered", "explicit")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.default = None
        self.doc = ""
        self.validator = None
        self.on_change = None
        self.settable = True
        self.registered = False
        self.explicit = False  # set by env or set(), not just the default


def normalize(key):
    key = str(key).strip()
    if not key.startswith("probing."):
        key = "probing." + key
    return key


def check_key(key):
    key = normalize(key)
    if len(key) > MAX_KEY_LEN or not _KEY_RE.match(key):
        raise InvalidKeyError("invalid config key %s: keys are probing.[a-z0-9_.]+, at most %d characters"
                              % (clip(key), MAX_KEY_LEN))
    return key


def settable_keys():
    with _lock:
        return sorted(k for k, e in _entries.items() if e.registered and e.settable)


def _settable_hint():
    ks = settable_keys()
    more = len(ks) - MAX_LISTED
    text = ", ".join(ks[:MAX_LISTED]) or "none"
    if more > 0:
        text += " and %d more" % more
    return "settable keys: %s (GET /config/_keys lists them with what they do)" % text


def format_value(v):
    if v is None:
        return ""
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


def _validate(e, value):
    if e.validator is None:
        return value
    try:
        r = e.validator(value)
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError("invalid value %s for %s: %s" % (clip(value), e.key, err))
    if r is None or r is True:
        return value
    if r is False:
        raise ConfigError("invalid value %s for %s" % (clip(value), e.key))
    return r


def _call_on_change(fn, key, value, previous):
    n = 1
    try:
        import inspect

        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values())
        n = 3 if varargs else max(1, min(3, len(params)))
    except (TypeError, ValueError):
        n = 1
    if n == 1:
        return fn(value)
    if n == 2:
        return fn(key, value)
    return fn(key, value, previous)


def register(key, default, doc="", validator=None, on_change=None, settable=True):
    """Declares a key. A value already there (from the environment, or a
    set() before the registration) is kept if the validator accepts it.
    Returns the effective value."""
    key = check_key(key)
    with _lock:
        e = _entries.get(key)
        if e is None:
            e = _Entry(key, default)
            _entries[key] = e
        e.default = default
        e.doc = doc or ""
        e.validator = validator
        e.on_change = on_change
        e.settable = bool(settable)
        e.registered = True
        if e.explicit:
            try:
                e.value = _validate(e, e.value)
            except ConfigError as err:
                runtime.logger.warning("%s; using the default %r", err, default)
                e.value = default
                e.explicit = False
        else:
            e.value = default
        return e.value


def get(key, default=None):
    key = normalize(key)
    with _lock:
        e = _entries.get(key)
        return default if e is None else e.value


def exists(key):
    with _lock:
        return normalize(key) in _entries


def set(key, value, _force=False):  # noqa: A001 (the API the brief names)
    """Writes a registered key; returns the previous value. Raises
    InvalidKeyError, UnknownKeyError, ReadOnlyError or ConfigError."""
    key = check_key(key)
    with _lock:
        e = _entries.get(key)
        if e is None:
            raise UnknownKeyError("config key '%s' is not a setting of this agent; %s" % (key, _settable_hint()))
        if not e.registered:
            raise ReadOnlyError("config key '%s' only mirrors the environment (%s) and is not a setting of this "
                                "agent; %s" % (key, e.doc, _settable_hint()))
        if not e.settable and not _force:
            raise ReadOnlyError("config key '%s' is read-only; %s" % (key, _settable_hint()))
        if not _force and isinstance(value, str) and len(value) > MAX_VALUE_LEN:
            raise ConfigError("value for %s is %d characters; the limit is %d"
                              % (key, len(value), MAX_VALUE_LEN))
        value = _validate(e, value)
        previous = e.value
        prev_explicit = e.explicit
        e.value = value
        e.explicit = True
        fn = e.on_change
    if fn is not None:
        try:
            _call_on_change(fn, key, value, previous)
        except ValueError as err:
            with _lock:
                e.value, e.explicit = previous, prev_explicit
            raise ConfigError("invalid value %s for %s: %s" % (clip(value), key, err))
        except Exception as err:
            runtime.logger.warning("config %s: on_change failed: %s", key, err)
    return previous


def set_internal(key, value):
    """The agent's own write to a (possibly read-only) key."""
    return set(key, value, _force=True)


def all():  # noqa: A001
    with _lock:
        return dict((k, format_value(_entries[k].value)) for k in sorted(_entries))


def keys():
    with _lock:
        return [{"key": k, "value": format_value(_entries[k].value), "doc": _entries[k].doc,
                 "settable": bool(_entries[k].registered and _entries[k].settable)} for k in sorted(_entries)]


def env_key(name):
    """The config key PROBING_X_Y mirrors to, or None if it is not mirrored."""
    if not name.startswith("PROBING_") or name in _ENV_EXCLUDED or envfilter.secret(name):
        return None
    k = "probing." + name[len("PROBING_"):].lower().replace("_", ".")
    return k if _KEY_RE.match(k) else None


def load_env(environ=None):
    """Mirrors PROBING_* variables into the store (contract §1.2)."""
    env = os.environ if environ is None else environ
    n = 0
    for name in sorted(env):
        key = env_key(name)
        if key is None:
            continue
        value = env.get(name)
        with _lock:
            e = _entries.get(key)
            if e is None or not e.registered:
                # A mirror only (a second name mapping to the same key
                # replaces the first): no validator to run.
                if e is None:
                    e = _Entry(key, value)
                    _entries[key] = e
                    n += 1
                e.value = value
                e.doc = "from the environment (%s)" % name
                e.explicit = True
                continue
        try:
            set(key, value, _force=True)
            n += 1
        except ConfigError as err:
            runtime.logger.warning("%s (from %s); keeping %r", err, name, get(key))
    return n


# ---- validator helpers (usable by every module of the package) -----------

def one_of(*choices):
    """A validator accepting one of choices, case-insensitively; stores the
    lower-cased value."""
    allowed = [str(c).lower() for c in choices]

    def v(value):
        s = str(value).strip().lower()
        if s not in allowed:
            raise ValueError("accepted values are %s" % ", ".join(allowed))
        return s

    return v


_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


def truthy(value):
    return str(value).strip().lower() in _TRUE


def on_off(value):
    """A validator for on/off switches: stores "on" or "off"."""
    s = str(value).strip().lower()
    if s in _TRUE:
        return "on"
    if s in _FALSE:
        return "off"
    raise ValueError("accepted values are on, off (or 1/0, true/false, yes/no)")


def _after_fork_in_child():
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
