"""Writes the faulthandler fixtures in this directory (see README.md).

Usage: python gen_faulthandler.py OUT

The process looks like a stuck training rank: the main thread waits in a
fake all_reduce, idle helpers wait on an Event, a Queue and a selector, one
thread recursed 150 deep (faulthandler keeps 100 frames and writes "..."),
and one thread state has no Python frame. Signals are sent the way the
agent does (faulthandler.register on SIGUSR1, the file opened for append),
twice: between the two dumps the main thread moves from all_reduce to
barrier, so a reader of the appended file can tell the dumps apart.
"""
import ctypes
import faulthandler
import os
import queue
import selectors
import signal
import socket
import sys
import threading
import time

out = sys.argv[1]
if os.path.exists(out):
    os.remove(out)
f = open(out, "a")
faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)

ready = threading.Barrier(5)
stop = threading.Event()


def idle_event():
    ready.wait()
    stop.wait()


def idle_queue(q):
    ready.wait()
    q.get()


def idle_selector():
    a, b = socket.socketpair()
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ)
    ready.wait()
    while not stop.is_set():
        sel.select(timeout=0.05)


def recurse(n):
    if n == 0:
        ready.wait()
        stop.wait()
        return
    recurse(n - 1)


q = queue.Queue()
threads = [
    threading.Thread(target=idle_event, name="pin_memory", daemon=True),
    threading.Thread(target=idle_queue, args=(q,), daemon=True),
    threading.Thread(target=idle_selector, daemon=True),
    threading.Thread(target=recurse, args=(150,), daemon=True),
]
for t in threads:
    t.start()
ready.wait()
time.sleep(0.2)

# A thread state with no Python frame, as a C extension's thread that
# registered with the interpreter leaves it (PyGILState_Ensure).
ctypes.pythonapi.PyInterpreterState_Get.restype = ctypes.c_void_p
ctypes.pythonapi.PyThreadState_New.restype = ctypes.c_void_p
ctypes.pythonapi.PyThreadState_New.argtypes = [ctypes.c_void_p]
ctypes.pythonapi.PyThreadState_New(ctypes.pythonapi.PyInterpreterState_Get())


def dump():
    f.flush()
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.1)


def all_reduce(tensor):
    dump()


def barrier():
    dump()


def train_step(i):
    if i == 0:
        all_reduce([1.0])
    else:
        barrier()


for i in range(2):
    train_step(i)
stop.set()
q.put(None)
f.close()
