#!/usr/bin/env python3
"""`switchboard console` on a real pseudo-terminal, for tests/e2e/console_tty_spec.lua.

    console_pty.py BIN STATE_DIR SCENARIO OUT.json

Opens a pty of 24 rows by 40 columns, starts BIN console on it as the session leader with the
pty as its controlling terminal (so the kernel delivers SIGWINCH and Ctrl-C's SIGINT as it
would to a console in a real terminal), types at it, and renders every byte it writes with
pyte, a VT100 emulator (python3-pyte), scrollback included. What it saw goes to OUT.json;
the spec judges. Every wait is for an event on the screen or the process, with a generous
bound; a wait that runs out writes {"error": ..., "screen": [...]} and exits 1.

Scenarios:
  session  an ask that runs while the user types; a resize; lines submitted; Ctrl-D to quit
  ctrl-c   typed text, then Ctrl-C (the terminal's SIGINT) ends the console
  term     typed text, then SIGTERM ends the console
  lua-error, os-exit
           not the console: a program (SWITCHBOARD_LUA_DIR, written by the spec) that puts the
           terminal in raw mode, then on a key raises a Lua error or calls os.exit — Lua never
           restores the mode; the engine's hooks must
"""
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pyte

ROWS, COLS, NARROW = 24, 40, 30
THREAD = "console-tty-name"  # "[THREAD] coding running 3s": fits 40 columns, not 30
STATUS = re.compile(r"\] cod")  # a status line (or the start of one); cards say "] agent:"
TYPED = re.compile(r"hel|wör|/th|sto")  # pieces of what is typed; never in a status line
BOUND = 60.0  # seconds: generous, the machine may be busy


class Session:
    def __init__(self, binary, state):
        self.master, self.slave = os.openpty()
        self.set_size(ROWS, COLS)
        self.screen = pyte.HistoryScreen(COLS, ROWS, history=2000, ratio=0.5)
        self.stream = pyte.ByteStream(self.screen)
        self.max_status_rows = 0
        self.status_writes = 0  # writes of a status line (to tell redraws whose text is cut)
        self.glued = []
        self.termios_before = self.modes()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": state,
               "SWITCHBOARD_STATE_DIR": state, "GH_TOKEN": "specs-own-token",
               "LANG": "C.UTF-8", "TERM": "xterm"}
        for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "SWITCHBOARD_LUA_DIR"):
            if name in os.environ:
                env[name] = os.environ[name]
        self.stderr = open(os.path.join(state, "console.stderr"), "wb")
        slave = self.slave

        def controlling_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen([binary, "console", "--thread", THREAD], stdin=slave,
                                     stdout=slave, stderr=self.stderr, env=env, cwd=state,
                                     preexec_fn=controlling_terminal, close_fds=True)

    def set_size(self, rows, cols):
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def modes(self):
        lflag = termios.tcgetattr(self.slave)[3]
        return {"echo": bool(lflag & termios.ECHO), "icanon": bool(lflag & termios.ICANON),
                "isig": bool(lflag & termios.ISIG)}

    def rows(self):
        """Every row: the scrollback, then the screen; trailing blanks dropped."""
        width = self.screen.columns
        out = []
        for line in list(self.screen.history.top):
            out.append("".join(line[x].data for x in range(width)).rstrip())
        out.extend(row.rstrip() for row in self.screen.display)
        return out

    def screen_rows(self):
        return [row.rstrip() for row in self.screen.display]

    def pump(self, timeout):
        """Feeds what the console wrote within timeout seconds to the emulator."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the console's side is closed
            time.sleep(0.05)
            return
        self.stream.feed(data)
        self.status_writes += data.count(b"] coding")
        rows = self.rows()
        self.max_status_rows = max(self.max_status_rows, sum(1 for r in rows if STATUS.search(r)))
        for r in rows:
            if STATUS.search(r) and TYPED.search(r) and r not in self.glued:
                self.glued.append(r)

    def wait(self, what, pred, bound=BOUND):
        end = time.monotonic() + bound
        while time.monotonic() < end:
            if pred():
                return
            self.pump(0.05)
        fail(self, "waited %ds for %s" % (bound, what))

    def observe(self, duration):
        end = time.monotonic() + duration
        while time.monotonic() < end:
            self.pump(0.05)

    def type(self, text, pause=0.0):
        for ch in text:
            os.write(self.master, ch.encode())
            if pause:
                self.pump(pause)

    def status_row(self):
        """The live status row: the lowest on the screen (stale copies sit above it)."""
        found = (None, None)
        for i, r in enumerate(self.screen_rows()):
            if STATUS.search(r):
                found = (i, r)
        return found

    def snapshot(self):
        return {"rows": self.screen_rows(), "columns": self.screen.columns,
                "cursor": [self.screen.cursor.y, self.screen.cursor.x]}

    def finish(self, out):
        end = time.monotonic() + BOUND
        while self.proc.poll() is None and time.monotonic() < end:
            self.pump(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            fail(self, "the console did not exit")
        self.pump(0.2)
        out.update({"exit": self.proc.returncode, "termios_before": self.termios_before,
                    "termios_after": self.modes(), "max_status_rows": self.max_status_rows,
                    "glued": self.glued, "all_rows": self.rows()})
        return out


def fail(s, why):
    json.dump({"error": why, "screen": s.screen_rows(), "all_rows": s.rows(),
               "max_status_rows": s.max_status_rows, "glued": s.glued},
              open(OUT, "w"), indent=1, ensure_ascii=False)
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()
    sys.exit(1)


def seconds(row):
    m = re.search(r"running (\d+)s", row or "")
    return m and int(m.group(1))


def banner(s):
    # the console sets the terminal's mode before it prints the banner
    s.wait("the console's banner", lambda: any("Ctrl-D" in r for r in s.rows()))


def session(s):
    out = {}
    banner(s)
    out["termios_during"] = s.modes()
    s.type("run `sleep 120`\r")
    s.wait("the status line", lambda: seconds(s.status_row()[1]) is not None)
    # Type while the status line updates: a character every 0.15 s, across its seconds.
    s.type("hello wörld", pause=0.15)
    first = seconds(s.status_row()[1])
    s.wait("a status update after the typing", lambda: (seconds(s.status_row()[1]) or 0) > first)
    out["typing"] = s.snapshot()
    # The window narrows: the kernel sends SIGWINCH; the emulator narrows with it.
    s.set_size(ROWS, NARROW)
    s.screen.resize(ROWS, NARROW)
    s.wait("the status line cut to the new width",
           lambda: (s.status_row()[1] or "").endswith("…"))
    # An observation window, not a synchronisation: the status's seconds tick meanwhile (a
    # cut text that did not change need not be written again); max_status_rows holds at every
    # write, so a busy machine only makes the window see fewer ticks.
    s.observe(3.0)
    out["resized"] = s.snapshot()
    # Editing keys: Ctrl-W drops "wörld" (the space stays), Backspace a character (twice:
    # the space, the "o"), Ctrl-U the rest.
    s.type("\x17")
    s.wait("Ctrl-W", lambda: any(r == "> hello" for r in s.screen_rows()))
    s.type("\x7f\x7f")
    s.wait("Backspace", lambda: any(r == "> hell" for r in s.screen_rows()))
    s.type("\x15")
    s.wait("Ctrl-U", lambda: any(r == ">" for r in s.screen_rows()))
    s.type("/thread\r")
    s.wait("the answer to /thread", lambda: any(r.startswith("thread: ") for r in s.rows()))
    out["submitted"] = s.snapshot()
    # Wide again: the whole status, seconds included, is back.
    s.set_size(ROWS, COLS)
    s.screen.resize(ROWS, COLS)
    s.wait("the whole status at 40 columns", lambda: seconds(s.status_row()[1]) is not None)
    out["widened"] = s.snapshot()
    s.type("stop\r")
    s.wait("the stopped card", lambda: any("stopped" in r for r in s.rows()))
    s.wait("no status line", lambda: s.status_row()[0] is None)
    s.type("\x04")
    return s.finish(out)


def interrupted(s, how):
    out = {}
    banner(s)
    out["termios_during"] = s.modes()
    s.type("abc")
    s.wait("the typed text", lambda: any(r == "> abc" for r in s.screen_rows()))
    if how == "ctrl-c":
        s.type("\x03")
    else:
        s.proc.send_signal(signal.SIGTERM)
    return s.finish(out)


def abandoned(s):
    """The program goes raw, says "raw", and on a key ends without restoring the mode."""
    out = {}
    s.wait("the program in raw mode", lambda: any(r == "raw" for r in s.screen_rows()))
    out["termios_during"] = s.modes()
    s.type("x")
    return s.finish(out)


def main():
    global OUT
    binary, state, scenario, OUT = sys.argv[1:5]
    s = Session(binary, state)
    if scenario == "session":
        out = session(s)
    elif scenario in ("lua-error", "os-exit"):
        out = abandoned(s)
    else:
        out = interrupted(s, scenario)
    json.dump(out, open(OUT, "w"), indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
