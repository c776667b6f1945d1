"""A stand-in ends when the spec process that started it is gone (--watch PID), even when the
spec failed before its teardown or the run was interrupted: otherwise it lives on, orphaned,
holding its port (and, for some, the processes it started).

It polls /proc rather than asking for PR_SET_PDEATHSIG, because most stand-ins are started
through `sh -c '… &'`, whose shell (their parent) exits at once.

    import watched
    watched.add_argument(ap)              # --watch PID on an argparse parser
    watched.end_with(args.watch, bye)     # bye() once PID is gone (default: exit at once)
"""
import os
import threading
import time


def add_argument(ap):
    ap.add_argument("--watch", type=int, default=0,
                    help="exit when this pid (the spec's process) is gone")


def end_with(pid, bye=None, every_s=0.5):
    if not pid:
        return

    def watch():
        while os.path.exists("/proc/%d" % pid):
            time.sleep(every_s)
        (bye or (lambda: os._exit(0)))()

    threading.Thread(target=watch, daemon=True).start()
