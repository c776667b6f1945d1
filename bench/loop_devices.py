#!/usr/bin/env python3
"""What free loop devices cost every process on the host (docs/isolation.md "Loop devices given
back"). sysinfo() walks every block device (nr_blockdev_pages), and every `bash` calls it once.
Measures sysinfo()'s CPU per call and a `bash -c true`'s CPU (the child's user+sys, from
RUSAGE_CHILDREN) with the host's loop devices as they are, then with ADD more free devices made
with LOOP_CTL_ADD (numbers from FIRST up, none of which may exist), then again after removing
exactly those (A, B, A). Also times LOOP_CTL_ADD and LOOP_CTL_REMOVE per device (what a start
that must make its device, and a give-back, cost). Root. Usage: loop_devices.py [ADD] [FIRST]"""
import ctypes, errno, fcntl, os, resource, subprocess, sys, time

LOOP_CTL_ADD, LOOP_CTL_REMOVE = 0x4C80, 0x4C81
ADD = int(sys.argv[1]) if len(sys.argv) > 1 else 2500
FIRST = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
BASH_RUNS, SYSINFO_CALLS = 1000, 5000

libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)

def loops():
    return sum(1 for n in os.listdir("/sys/block") if n.startswith("loop"))

def sysinfo_us():
    t = time.process_time()
    for _ in range(SYSINFO_CALLS):
        libc.sysinfo(buf)
    return (time.process_time() - t) / SYSINFO_CALLS * 1e6

def bash_us():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(BASH_RUNS):
        subprocess.run(["bash", "-c", "true"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    sys_us = (after.ru_stime - before.ru_stime) / BASH_RUNS * 1e6
    return (after.ru_utime - before.ru_utime) / BASH_RUNS * 1e6 + sys_us, sys_us

def row(label):
    total, sys_us = bash_us()
    print("%-28s loop devices %5d  sysinfo() %6.1f us CPU  bash -c true %5.0f us CPU (%4.0f sys)  load %s"
          % (label, loops(), sysinfo_us(), total, sys_us, open("/proc/loadavg").read().split()[0]), flush=True)

ctl = os.open("/dev/loop-control", os.O_RDWR)
for n in range(FIRST, FIRST + ADD):
    if os.path.exists("/sys/block/loop%d" % n):
        sys.exit("loop%d exists already: choose another FIRST" % n)
row("as found")
made = []
try:
    t, c = time.perf_counter(), time.process_time()
    for n in range(FIRST, FIRST + ADD):
        fcntl.ioctl(ctl, LOOP_CTL_ADD, n)
        made.append(n)
    add_wall, add_cpu = (time.perf_counter() - t) / ADD * 1e3, (time.process_time() - c) / ADD * 1e3
    row("+%d free (LOOP_CTL_ADD)" % ADD)
finally:
    t, c = time.perf_counter(), time.process_time()
    for n in made:  # busy: someone opened or bound it meanwhile (a free number is anyone's)
        for wait in (0.1, 0.5, 2, 5, 10, None):
            try:
                fcntl.ioctl(ctl, LOOP_CTL_REMOVE, n)
                break
            except OSError as e:
                if e.errno == errno.ENODEV:
                    break
                if e.errno != errno.EBUSY or wait is None:
                    print("loop%d left: %s" % (n, e), file=sys.stderr)
                    break
                time.sleep(wait)
    rm_wall = (time.perf_counter() - t) / max(1, len(made)) * 1e3
    rm_cpu = (time.process_time() - c) / max(1, len(made)) * 1e3
row("after removing them")
print("LOOP_CTL_ADD %.2f ms wall, %.3f ms CPU per device; LOOP_CTL_REMOVE %.1f ms wall, %.3f ms CPU"
      % (add_wall, add_cpu, rm_wall, rm_cpu))
