# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in load balancer for the rollout's drain hooks: appends one JSON line per call.

usage: lb_hook.py LOG ACTION HOST [ARGS...]   (ARGS arrive exactly as given: no shell in between)
"""

import json
import sys
import time


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    log, action, host = argv[:3]
    with open(log, "a") as handle:
        handle.write(json.dumps({"action": action, "host": host, "args": argv[3:], "t": time.time()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
