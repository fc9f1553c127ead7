# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A leftover engine process on a real GPU: holds GIB GiB of GPU memory until killed.

usage: python tests/gpu/leftover_holder.py --gib N --ready FILE [LABEL...]
LABEL words end up in its command line (e.g. `sglang.launch_server --model-path old`), so it looks
like an engine left behind to gpu_idle_check's reclaim_match. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import os
import time

import torch  # pylint: disable=import-error


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=8)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--device", default="cuda:0")
    args, _labels = parser.parse_known_args()
    held = torch.empty(int(args.gib * 1024 ** 3), dtype=torch.uint8, device=args.device)
    held.fill_(1)
    torch.cuda.synchronize()
    with open(args.ready, "w") as handle:
        handle.write(str(os.getpid()))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
