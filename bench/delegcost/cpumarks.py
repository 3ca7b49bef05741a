#!/usr/bin/env python3
"""Copies a kernel-client guest's console (stdin) to stdout and, for each
line holding "KCPU LABEL...", appends a row to FILE: LABEL's words, then
the CPU time (user + system, seconds) of each process PID so far, then
the host's monotonic clock. The guest prints such a line before and after
each timed phase, so the server's CPU for the phase is the difference
(the console reaches the host within milliseconds; phases last seconds).

    cpumarks.py FILE PID...
"""
import os
import sys
import time

rows = open(sys.argv[1], "a")
pids = sys.argv[2:]
tick = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return float("nan")
    # Fields after the command's closing parenthesis: state is the 3rd of
    # proc(5)'s, utime the 14th, stime the 15th.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / tick


for line in iter(sys.stdin.readline, ""):
    mark = line.find("KCPU ")
    if mark >= 0:
        row = line[mark + 5:].split() + [f"{cpu_seconds(p):.2f}" for p in pids] + [f"{time.monotonic():.3f}"]
        rows.write("\t".join(row) + "\n")
        rows.flush()
    sys.stdout.write(line)
    sys.stdout.flush()
