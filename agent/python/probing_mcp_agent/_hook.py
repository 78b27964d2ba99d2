"""Site hook: `import probing_mcp_agent._hook` from probing_mcp_agent.pth.

Runs at every interpreter start, so it must cost nothing when PROBING is
unset: only os and sys are used until it decides to activate.

PROBING semantics (shared/reference/probing-contract.md §1.1):
  unset, "", 0, off, false, no  nothing at all (the environment is untouched)
  1 / followed                  activate; PROBING stays deleted (children don't)
  2 / nested                    activate; PROBING re-exported (children do)
  regex:PATTERN                 activate if re.search matches an argv element,
                                basename(argv[0]), __main__.__file__ or its
                                basename (and, for `python -m mod`, mod);
                                re-exported unchanged (an invalid pattern: not)
  any other string              activate if basename(argv[0]) equals it; re-exported
  init:SCRIPT+MODE              MODE as above, then exec SCRIPT after activation;
                                only MODE is re-exported (when MODE re-exports)
  init:SCRIPT                   MODE "0": nothing activates, SCRIPT does not run
Launchers never activate and leave PROBING untouched for their children:
torchrun / python -m torch.distributed.run|launch (RANK and LOCAL_RANK
unset, and TORCHELASTIC_RUN_ID set or that argv), the `probing` CLI
(PROBING_CLI_MODE=1), python -m probing.nccl|probing.skills|probing.dev_pth.
Otherwise the raw value goes to PROBING_ORIGINAL and PROBING is deleted.

If the original Probing agent is active in this process (its own .pth,
probing.pth, sorts before ours and imports `probing`), this agent stands
aside and logs a warning.
"""
import os
import sys

_OFF = ("", "0", "off", "false", "no")
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_PROBING_TOOL_MODULES = ("probing.nccl", "probing.skills", "probing.dev_pth", "probing.cli", "probing")
_RAN = []
decision = None  # the last decision, for tests and debugging


def _argv():
    try:
        return [str(a) for a in sys.argv]
    except Exception:
        return []


def _cmdline():
    """The full command line: sys.orig_argv (3.10+), else /proc/self/cmdline."""
    oa = getattr(sys, "orig_argv", None)
    if oa:
        return list(oa)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [p.decode("utf-8", "replace") for p in f.read().split(b"\0") if p]
    except Exception:
        return []


def _dash_m(cmdline, argv):
    """The module of `python [options] -m MOD`, or None (options are parsed
    as the interpreter does: -um MOD, -mMOD, -X dev -m MOD, ...)."""
    args = cmdline[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-" or a == "--" or not a.startswith("-"):
            return None  # stdin, end of options, or the script
        if a.startswith("--"):
            i += 1  # --help, --version, --check-hash-based-pycs X (rare)
            continue
        j = 1
        skip_next = False
        while j < len(a):
            ch = a[j]
            rest = a[j + 1:]
            if ch == "m":
                if rest:
                    return rest
                return args[i + 1] if i + 1 < len(args) else None
            if ch == "c":
                return None
            if ch in "WX":  # options taking an argument
                skip_next = not rest
                break
            j += 1
        i += 2 if skip_next else 1
    return None


def _main_file():
    m = sys.modules.get("__main__")
    f = getattr(m, "__file__", None) if m is not None else None
    return f if isinstance(f, str) and f else None


def excluded(environ, argv, cmdline, main_file=None):
    """Why this process must never activate (a launcher or a Probing tool), or ""."""
    name = os.path.basename(argv[0]) if argv else ""
    mod = _dash_m(cmdline, argv)
    if environ.get("RANK") is None and environ.get("LOCAL_RANK") is None:
        if environ.get("TORCHELASTIC_RUN_ID"):
            return "torchrun launcher (TORCHELASTIC_RUN_ID set, RANK unset)"
        if name == "torchrun":
            return "torchrun launcher"
        if mod in _LAUNCHER_MODULES:
            return "python -m %s launcher" % mod
        a0 = argv[0].replace("\\", "/") if argv else ""
        if a0.endswith("torch/distributed/run.py") or a0.endswith("torch/distributed/launch.py"):
            return "torch.distributed launcher"
    if environ.get("PROBING_CLI_MODE") == "1" or name == "probing":
        return "the probing CLI"
    if mod in _PROBING_TOOL_MODULES:
        return "python -m %s" % mod
    if main_file and _is_probing_cli(main_file):
        return "the probing CLI"
    return ""


def _is_probing_cli(main_file):
    """The original Probing package's CLI (probing/cli.py, probing/cli/...):
    judged by the path's components, so that a script under a directory
    whose name merely contains "probing" and "cli" (a TMPDIR such as
    /home/clive/probing-runs) still activates."""
    parts = main_file.replace("\\", "/").split("/")
    for i, p in enumerate(parts[:-1]):
        if p == "probing" and (parts[i + 1] == "cli" or parts[i + 1].startswith("cli.")):
            return True
    return False


def decide(environ, argv, cmdline=None, main_file=None):
    """Pure decision (no side effects). Returns a dict:
    active (None = nothing at all, env untouched; True/False = PROBING is
    consumed), child (value to re-export as PROBING, or None), init (script),
    mode, why."""
    cmdline = cmdline if cmdline is not None else list(argv)
    raw = environ.get("PROBING")
    if raw is None or raw.strip().lower() in _OFF:
        return {"active": None, "child": None, "init": None, "mode": "off", "why": "PROBING unset or off"}
    why = excluded(environ, argv, cmdline, main_file)
    if why:
        return {"active": None, "child": None, "init": None, "mode": "excluded", "why": why}
    value, init = raw, None
    if value[:5].lower() == "init:":
        script, plus, mode = value[5:].partition("+")
        init, value = script, (mode if plus else "0")
    v = value.strip()
    low = v.lower()
    name = os.path.basename(argv[0]) if argv else "<unknown>"
    if low in _OFF:
        return {"active": False, "child": None, "init": None, "mode": "off", "why": "mode %r" % value}
    if low in ("1", "followed"):
        return {"active": True, "child": None, "init": init, "mode": "followed", "why": "followed"}
    if low in ("2", "nested"):
        return {"active": True, "child": value, "init": init, "mode": "nested", "why": "nested"}
    if low.startswith("regex:"):
        import re

        pattern = v.split(":", 1)[1]
        try:
            rx = re.compile(pattern)
        except re.error as e:
            return {"active": False, "child": None, "init": None, "mode": "regex",
                    "why": "invalid regex %r: %s" % (pattern, e)}
        cands = [a for a in argv if a]
        cands.append(name)
        if main_file:
            cands.extend([main_file, os.path.basename(main_file)])
        mod = _dash_m(cmdline, argv)
        if mod:
            cands.append(mod)
        hit = any(rx.search(c) for c in cands)
        return {"active": hit, "child": value, "init": init if hit else None, "mode": "regex",
                "why": "regex %r %s" % (pattern, "matches" if hit else "does not match")}
    hit = value == name
    return {"active": hit, "child": value, "init": init if hit else None, "mode": "script",
            "why": "script name %r %s %r" % (value, "is" if hit else "is not", name)}


def _log():
    from . import runtime

    runtime.setup_logging(os.environ.get("PROBING_LOGLEVEL") or "warning")
    return runtime.logger


def _run_init(path):
    import builtins

    try:
        with open(path) as f:
            src = f.read()
        ns = {"__name__": "__probing_init__", "__file__": path, "__builtins__": builtins}
        exec(compile(src, path, "exec"), ns)
    except BaseException as e:  # the init script must not kill the process
        try:
            _log().warning("init script %s failed: %r", path, e)
        except Exception:
            pass


def _run_own(env, own):
    """PROBING_MCP_AGENT: the same values as PROBING, read by this agent only.

    It lets this agent run where the original Probing agent is installed
    (whose hook consumes PROBING first) and lets the two coexist: the
    original never reads it, and this agent does not stand aside for it.
    It is consumed and propagated to children like PROBING."""
    global decision
    view = dict(env)
    view["PROBING"] = own
    argv = _argv()
    d = decide(view, argv, _cmdline(), _main_file())
    d["variable"] = "PROBING_MCP_AGENT"
    decision = d
    if d["active"] is None:
        return d
    del env["PROBING_MCP_AGENT"]
    if d["child"] is not None:
        env["PROBING_MCP_AGENT"] = d["child"]
    if d["active"]:
        from . import activation

        ok = activation.activate(mode=d["mode"], beside_original=True)
        d["activated"] = ok
        if ok and d["init"]:
            _run_init(d["init"])
    return d


def run(environ=None):
    """Applies PROBING (or PROBING_MCP_AGENT) to this process (once)."""
    global decision
    if _RAN:
        return decision
    _RAN.append(True)
    env = os.environ if environ is None else environ
    try:
        own = env.get("PROBING_MCP_AGENT")
        if own is not None and own.strip():
            return _run_own(env, own)
        argv = _argv()
        d = decide(env, argv, _cmdline(), _main_file())
        decision = d
        if d["active"] is None:
            if env.get("PROBING") is None and "probing" in sys.modules and \
                    (env.get("PROBING_ORIGINAL") or "").strip().lower() not in _OFF:
                # The original agent's hook may have consumed PROBING here.
                from .activation import original_probing_active

                why = original_probing_active()
                if why:
                    _log().warning("%s; the probing-mcp agent stands aside", why)
            return d
        from .activation import original_probing_active

        why = original_probing_active()
        if why:
            if d["active"]:
                _log().warning("%s; the probing-mcp agent stands aside", why)
            d["active"], d["why"] = False, why
            return d
        env["PROBING_ORIGINAL"] = env["PROBING"]
        del env["PROBING"]
        if d["child"] is not None:
            env["PROBING"] = d["child"]
        if d["active"]:
            from . import activation

            ok = activation.activate(mode=d["mode"])
            d["activated"] = ok
            if ok and d["init"]:
                _run_init(d["init"])
        else:
            try:
                _log().debug("not activating: %s", d["why"])
            except Exception:
                pass
    except Exception as e:
        try:
            sys.stderr.write("probing-mcp-agent: site hook error: %r\n" % (e,))
        except Exception:
            pass
    return decision


run()
