"""Writes faulthandler_crash_py3.12.txt: a fatal-signal dump, as the agent's
faulthandler.enable(file=…) leaves it in <data dir>/crash/<pid>/ when a rank
segfaults. Usage: python gen_crash.py OUT (the process dies of SIGSEGV)."""
import faulthandler
import sys
import threading

f = open(sys.argv[1], "w")
faulthandler.enable(file=f, all_threads=True)
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True, name="watchdog").start()


def forward():
    faulthandler._sigsegv()


def step():
    forward()


step()
