# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A process that "holds a GPU" for the fake nvidia-smi: it just lives until killed.

usage: gpu_holder.py [--ignore-term] [--ready FILE] [LABEL...]
LABEL words end up in its command line, so `gpu_holder.py vllm serve x` looks like a vLLM
leftover to reclaim_match. With --ignore-term it survives SIGTERM and needs SIGKILL.
"""

import os
import signal
import sys
import time


def main(argv):
    if "--ignore-term" in argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--ready" in argv:
        with open(argv[argv.index("--ready") + 1], "w") as handle:
            handle.write(str(os.getpid()))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1:])
